/**
 * fs/watchMissing: the client names paths it found missing; `watching` says whether any still is,
 * and once one of them appears the server sends `fs/missingChanged {watchId}` (then forgets the
 * watch), as the reference does. A watch with the same id replaces the previous one.
 *
 * As the reference (inotify on the paths' existing ancestors), changes are file-system events:
 * fs.watch on each missing path's nearest existing ancestor directory, moved deeper as the
 * missing components appear (and re-checked after each move, so a `mkdir -p` faster than the
 * re-arming is not missed). Where no watcher can be set (the per-connection cap MAX_FS_WATCHERS,
 * or fs.watch failing: inotify limits, an unwatchable file system), that watch falls back to
 * polling existence every POLL_MS (one timer per connection, only while such watches exist).
 * Bounded per connection: MAX_WATCHES watches of at most MAX_PATHS paths. The answer reveals only
 * whether a path exists, which getMetadata already does.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { MethodContext } from './types';
import { decodeStruct, INVALID_REQUEST, RpcError } from './decode';
import { nativePath } from './fs-methods';
import { refuseWithoutSandboxField } from './sandbox-floor';

const MAX_WATCHES = 256;
const MAX_PATHS = 1024;
/** Directories watched at once per connection (watches share them). */
export const MAX_FS_WATCHERS = 64;
const POLL_MS = 250;

const exists = (p: string): boolean => {
  try {
    fs.lstatSync(p);
    return true;
  } catch {
    return false;
  }
};

/** The nearest ancestor of `p` that exists as a directory (`/` at worst). */
function nearestDir(p: string): string {
  let d = path.dirname(p);
  for (;;) {
    try {
      if (fs.statSync(d).isDirectory()) return d;
    } catch {
      /* missing: go up */
    }
    const up = path.dirname(d);
    if (up === d) return d;
    d = up;
  }
}

interface Watch {
  paths: string[];
  /** Directories this watch listens on; null: polled. */
  dirs: Set<string> | null;
}

export class MissingWatches {
  private readonly watches = new Map<number, Watch>();
  private readonly watchers = new Map<string, { watcher: fs.FSWatcher; users: Set<number>; pending: boolean }>();
  private timer?: NodeJS.Timeout;

  constructor(private readonly ctx: MethodContext) {}

  async watchMissing(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'FsWatchMissingParams', [
      { name: 'watchId', kind: 'u64', required: true },
      { name: 'missing', kind: 'seq<uri>', required: true },
    ]);
    this.ctx.gate('filesystem');
    refuseWithoutSandboxField(this.ctx.options, 'fs/watchMissing', 'poll fs/getMetadata with a `sandbox` instead');
    const id = p.watchId as number;
    const uris = p.missing as string[];
    if (uris.length > MAX_PATHS) throw new RpcError(INVALID_REQUEST, `fs/watchMissing takes at most ${MAX_PATHS} paths`);
    const paths = uris.map(nativePath);
    this.forget(id);
    const missing = paths.filter((x) => !exists(x));
    if (missing.length === 0) return { watching: false };
    if (this.watches.size >= MAX_WATCHES) throw new RpcError(INVALID_REQUEST, `too many fs/watchMissing watches on this connection (at most ${MAX_WATCHES})`);
    const w: Watch = { paths: missing, dirs: new Set() };
    this.watches.set(id, w);
    // A path that appeared while the watchers were set is reported at once (as a later event would).
    if (this.rearm(id, w)) queueMicrotask(() => this.fire(id));
    return { watching: true };
  }

  /**
   * Points the watch's watchers at its paths' nearest existing ancestors, until those stop moving
   * (each move is a component that appeared meanwhile). Returns true when a path exists now.
   */
  private rearm(id: number, w: Watch): boolean {
    for (let round = 0; round < 4096; round++) {
      if (w.paths.some(exists)) return true;
      if (w.dirs === null) return false;
      const want = new Set(w.paths.map(nearestDir));
      if ([...want].every((d) => w.dirs!.has(d)) && w.dirs.size === want.size) return false;
      for (const d of w.dirs) if (!want.has(d)) this.release(d, id);
      w.dirs = new Set([...w.dirs].filter((d) => want.has(d)));
      for (const d of want) {
        if (w.dirs.has(d)) continue;
        if (!this.acquire(d, id)) {
          // No watcher for it: this watch is polled instead.
          for (const x of w.dirs) this.release(x, id);
          w.dirs = null;
          this.startPoll();
          return w.paths.some(exists);
        }
        w.dirs.add(d);
      }
    }
    return w.paths.some(exists);
  }

  private acquire(dir: string, id: number): boolean {
    const have = this.watchers.get(dir);
    if (have) {
      have.users.add(id);
      return true;
    }
    if (this.watchers.size >= MAX_FS_WATCHERS) return false;
    let watcher: fs.FSWatcher;
    try {
      watcher = fs.watch(dir, { persistent: false });
    } catch {
      return false;
    }
    const entry = { watcher, users: new Set([id]), pending: false };
    // Events of one directory are handled together, once per turn of the event loop.
    const changed = () => {
      if (entry.pending) return;
      entry.pending = true;
      setImmediate(() => {
        entry.pending = false;
        for (const user of [...entry.users]) this.fire(user);
      });
    };
    watcher.on('change', changed);
    // The directory itself went away (or the watcher broke): every user re-arms.
    watcher.on('error', () => {
      this.watchers.delete(dir);
      watcher.close();
      changed();
    });
    this.watchers.set(dir, entry);
    return true;
  }

  private release(dir: string, id: number): void {
    const e = this.watchers.get(dir);
    if (!e) return;
    e.users.delete(id);
    if (e.users.size === 0) {
      e.watcher.close();
      this.watchers.delete(dir);
    }
  }

  /** Something changed near a watch: report it if a path exists, else follow the ancestors down. */
  private fire(id: number): void {
    const w = this.watches.get(id);
    if (!w || this.ctx.closed()) return;
    if (this.rearm(id, w)) {
      this.forget(id);
      this.ctx.notify('fs/missingChanged', { watchId: id });
    }
  }

  private forget(id: number): void {
    const w = this.watches.get(id);
    if (!w) return;
    this.watches.delete(id);
    if (w.dirs) for (const d of w.dirs) this.release(d, id);
  }

  private startPoll(): void {
    this.timer ??= setInterval(() => this.poll(), POLL_MS);
    this.timer.unref();
  }

  private poll(): void {
    for (const [id, w] of this.watches) {
      if (w.dirs !== null || !w.paths.some(exists)) continue;
      this.forget(id);
      this.ctx.notify('fs/missingChanged', { watchId: id });
    }
    if (![...this.watches.values()].some((w) => w.dirs === null)) this.stopPoll();
  }

  private stopPoll(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** The connection closed: every watch and watcher ends. */
  close(): void {
    this.stopPoll();
    for (const id of [...this.watches.keys()]) this.forget(id);
    for (const e of this.watchers.values()) e.watcher.close();
    this.watchers.clear();
  }
}
