/**
 * fs/watchMissing: the client names paths it found missing; `watching` says whether any still is,
 * and once one of them appears the server sends `fs/missingChanged {watchId}` (then forgets the
 * watch), as the reference does. A watch with the same id replaces the previous one.
 *
 * Existence is polled (one timer per connection, only while watches exist): inotify would need a
 * watch on every missing ancestor. Bounded per connection: MAX_WATCHES watches of at most
 * MAX_PATHS paths. The answer reveals only whether a path exists, which getMetadata already does.
 */
import * as fs from 'node:fs';
import type { MethodContext } from './connection';
import { decodeStruct, INVALID_REQUEST, RpcError } from './decode';
import { nativePath } from './fs-methods';

const MAX_WATCHES = 256;
const MAX_PATHS = 1024;
const POLL_MS = 250;

const exists = (p: string): boolean => {
  try {
    fs.lstatSync(p);
    return true;
  } catch {
    return false;
  }
};

export class MissingWatches {
  private readonly watches = new Map<number, string[]>();
  private timer?: NodeJS.Timeout;

  constructor(private readonly ctx: MethodContext) {}

  async watchMissing(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'FsWatchMissingParams', [
      { name: 'watchId', kind: 'u64', required: true },
      { name: 'missing', kind: 'seq<uri>', required: true },
    ]);
    this.ctx.gate('filesystem');
    const id = p.watchId as number;
    const uris = p.missing as string[];
    if (uris.length > MAX_PATHS) throw new RpcError(INVALID_REQUEST, `fs/watchMissing takes at most ${MAX_PATHS} paths`);
    const paths = uris.map(nativePath);
    this.watches.delete(id);
    const missing = paths.filter((x) => !exists(x));
    if (missing.length === 0) return { watching: false };
    if (this.watches.size >= MAX_WATCHES) throw new RpcError(INVALID_REQUEST, `too many fs/watchMissing watches on this connection (at most ${MAX_WATCHES})`);
    this.watches.set(id, missing);
    this.timer ??= setInterval(() => this.poll(), POLL_MS);
    this.timer.unref();
    return { watching: true };
  }

  private poll(): void {
    for (const [id, paths] of this.watches) {
      if (!paths.some(exists)) continue;
      this.watches.delete(id);
      this.ctx.notify('fs/missingChanged', { watchId: id });
    }
    if (this.watches.size === 0) this.close();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.ctx.closed()) this.watches.clear();
  }
}
