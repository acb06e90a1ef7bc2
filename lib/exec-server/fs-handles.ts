/**
 * fs/open, fs/readBlock, fs/writeBlock, fs/close: file handles, per connection, with the
 * reference's shapes and texts. A handle opened with a `sandbox` context lives in a sandboxed
 * helper process (started as a process/start with that context is), which holds the descriptor and
 * serves the block reads and writes: the kernel decides what it may open, never a path check here.
 * Without a context the descriptor is held in this process.
 *
 * Bounded: at most `maxFileHandles` handles per connection (default 32, each sandboxed one is a
 * helper process), at most 1 MiB per block either way; closing the connection closes them all.
 */
import * as fs from 'node:fs';
import type { SandboxedProcess } from '../child';
import type { FileSystemSandboxContext } from '../prepare';
import type { MethodContext } from './types';
import { decodeBase64, decodeStruct, decodeVariant, INVALID_REQUEST, NOT_FOUND, RpcError } from './decode';
import { fsRunner, nativePath, sandboxOf } from './fs-methods';
import { checkSandboxGiven } from './sandbox-floor';
import { osErrorText, spawnSandboxedHelper, type FsOutcome } from './fs-ops';

export const MAX_BLOCK_BYTES = 1024 * 1024;
const DEFAULT_MAX_HANDLES = 32;

type HandleReq =
  | { op: 'open'; path: string; mode: 'read' | 'replace' }
  | { op: 'read'; offset: number; len: number }
  | { op: 'write'; offset: number; data: string /* base64 */ }
  | { op: 'close' };

/**
 * One handle operation on `state.fd`, shared by the in-process handles and the sandboxed helper
 * (serialised into HANDLE_HELPER: self-contained, node modules only).
 */
function handleOp(state: { fd: number | null }, req: HandleReq, fsm: typeof fs): FsOutcome {
  try {
    switch (req.op) {
      case 'open':
        if (req.mode === 'read') {
          // Opened, then checked: a FIFO swapped in cannot block (O_NONBLOCK), and the check is
          // on what was really opened.
          const fd = fsm.openSync(req.path, fsm.constants.O_RDONLY | fsm.constants.O_NONBLOCK);
          if (!fsm.fstatSync(fd).isFile()) {
            fsm.closeSync(fd);
            return { notAFile: req.path };
          }
          state.fd = fd;
        } else {
          // O_NONBLOCK: a FIFO with no reader fails (ENXIO) instead of blocking the server.
          const c = fsm.constants;
          state.fd = fsm.openSync(req.path, c.O_WRONLY | c.O_CREAT | c.O_TRUNC | c.O_NONBLOCK, 0o666);
        }
        return { ok: {} };
      case 'read': {
        const b = Buffer.alloc(req.len);
        const n = fsm.readSync(state.fd!, b, 0, req.len, req.offset);
        return { ok: { chunk: b.subarray(0, n).toString('base64'), eof: n < req.len } };
      }
      case 'write': {
        const b = Buffer.from(req.data, 'base64');
        for (let done = 0; done < b.length; ) done += fsm.writeSync(state.fd!, b, done, b.length - done, req.offset + done);
        return { ok: {} };
      }
      case 'close':
        if (state.fd !== null) fsm.closeSync(state.fd);
        state.fd = null;
        return { ok: {} };
    }
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (typeof err.code === 'string' && /^E[A-Z0-9]+$/.test(err.code)) return { errno: err.code };
    return { message: err.message };
  }
  return { message: 'unknown handle operation' };
}

/** The sandboxed helper: one JSON request per line on stdin, one answer per line on stdout. */
const HANDLE_HELPER = `'use strict';
const fs = require('node:fs');
const handleOp = ${handleOp.toString()};
const state = { fd: null };
let buf = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\\n')) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    let out;
    try { out = handleOp(state, JSON.parse(line), fs); } catch (e) { out = { message: String(e && e.message) }; }
    process.stdout.write(JSON.stringify(out) + '\\n');
  }
});
process.stdin.on('end', () => { handleOp(state, { op: 'close' }, fs); });
`;

/** Where a handle's operations run. */
interface Handle {
  mode: 'read' | 'replace';
  run(req: HandleReq): Promise<FsOutcome>;
  dispose(): Promise<void>;
}

function localHandle(mode: Handle['mode']): Handle {
  const state = { fd: null as number | null };
  return { mode, run: async (req) => handleOp(state, req, fs), dispose: async () => void handleOp(state, { op: 'close' }, fs) };
}

async function sandboxedHandle(mode: Handle['mode'], sandbox: FileSystemSandboxContext, ctx: MethodContext): Promise<Handle> {
  const child: SandboxedProcess = await spawnSandboxedHelper(HANDLE_HELPER, sandbox, fsRunner(ctx, 'fs/open'));
  // Answers come back in request order; one pending resolver per request.
  const pending: Array<(o: FsOutcome) => void> = [];
  let buf = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (d: string) => {
    buf += d;
    // An answer is at most a 1 MiB block in base64: anything longer is not our helper talking.
    if (buf.length > 2 * MAX_BLOCK_BYTES + 4096) child.kill('SIGKILL');
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      let o: FsOutcome;
      try {
        o = JSON.parse(line) as FsOutcome;
      } catch {
        o = { message: 'sandboxed file handle helper sent a malformed answer' };
      }
      pending.shift()?.(o);
    }
  });
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  child.stdin!.on('error', () => {});
  const gone = new Promise<void>((r) => child.once('close', () => r()));
  void gone.then(() => {
    const why = stderr.trim().split('\n').pop() ?? '';
    for (const p of pending.splice(0)) p({ message: `sandboxed file handle helper exited${why ? `: ${why}` : ''}` });
  });
  return {
    mode,
    run: (req) =>
      new Promise<FsOutcome>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve({ message: 'sandboxed file handle helper is gone' });
        pending.push(resolve);
        child.stdin!.write(JSON.stringify(req) + '\n');
      }),
    dispose: async () => {
      child.stdin!.end();
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await gone;
      clearTimeout(t);
    },
  };
}

/** An outcome to a result or the reference's error (its codes for handle operations). */
function toResult(o: FsOutcome): unknown {
  if ('ok' in o) return o.ok;
  if (o.notAFile !== undefined) throw new RpcError(INVALID_REQUEST, `path \`${o.notAFile}\` is not a file`);
  if (o.errno !== undefined) {
    const code = o.errno === 'ENOENT' ? NOT_FOUND : o.errno === 'EACCES' || o.errno === 'EPERM' ? INVALID_REQUEST : -32603;
    throw new RpcError(code, osErrorText(o.errno));
  }
  throw new RpcError(-32603, o.message ?? 'file operation failed');
}

export class FileHandles {
  private readonly handles = new Map<string, Handle>();
  /** Handle ids being opened (an open in flight counts against the bound). */
  private readonly opening = new Set<string>();

  constructor(private readonly ctx: MethodContext) {}

  async open(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'FsOpenParams', [
      { name: 'handleId', kind: 'string', required: true },
      { name: 'path', kind: 'uri', required: true },
      { name: 'mode', kind: 'string' },
      { name: 'sandbox', kind: 'sandbox' },
    ]);
    const mode = p.mode === undefined || p.mode === null ? 'read' : (decodeVariant(p.mode, ['read', 'replace']) as Handle['mode']);
    const sandbox = sandboxOf(p, this.ctx.options);
    this.ctx.gate('filesystem');
    checkSandboxGiven(this.ctx.options, 'fs/open', sandbox);
    const id = p.handleId as string;
    if (this.handles.has(id) || this.opening.has(id)) throw new RpcError(INVALID_REQUEST, `file handle \`${id}\` already exists`);
    const max = this.ctx.options.maxFileHandles ?? DEFAULT_MAX_HANDLES;
    if (this.handles.size + this.opening.size >= max) throw new RpcError(INVALID_REQUEST, `too many open file handles on this connection (at most ${max}); close some with fs/close`);
    const file = nativePath(p.path as string);
    this.opening.add(id);
    try {
      const h = sandbox === null ? localHandle(mode) : await sandboxedHandle(mode, sandbox, this.ctx);
      let opened = false;
      try {
        toResult(await h.run({ op: 'open', path: file, mode }));
        opened = true;
      } finally {
        if (!opened || this.ctx.closed()) await h.dispose();
      }
      if (this.ctx.closed()) throw new RpcError(INVALID_REQUEST, 'connection closed');
      this.handles.set(id, h);
      return { handleId: id };
    } finally {
      this.opening.delete(id);
    }
  }

  async readBlock(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'FsReadBlockParams', [
      { name: 'handleId', kind: 'string', required: true },
      { name: 'offset', kind: 'u64', required: true },
      { name: 'len', kind: 'u64', required: true },
    ]);
    this.ctx.gate('filesystem');
    const len = p.len as number;
    if (len < 1 || len > MAX_BLOCK_BYTES) throw new RpcError(INVALID_REQUEST, `file read block length must be between 1 and ${MAX_BLOCK_BYTES}`);
    return this.call(p.handleId as string, { op: 'read', offset: p.offset as number, len });
  }

  async writeBlock(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'FsWriteBlockParams', [
      { name: 'handleId', kind: 'string', required: true },
      { name: 'offset', kind: 'u64', required: true },
      { name: 'chunk', kind: 'string', required: true },
    ]);
    const data = decodeBase64(p.chunk as string);
    this.ctx.gate('filesystem');
    if (data.length > MAX_BLOCK_BYTES) throw new RpcError(INVALID_REQUEST, `file write chunk exceeds maximum of ${MAX_BLOCK_BYTES} bytes`);
    return this.call(p.handleId as string, { op: 'write', offset: p.offset as number, data: data.toString('base64') });
  }

  async closeHandle(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'FsCloseParams', [{ name: 'handleId', kind: 'string', required: true }]);
    this.ctx.gate('filesystem');
    const h = this.handles.get(p.handleId as string);
    this.handles.delete(p.handleId as string);
    await h?.dispose();
    return {};
  }

  /** Closes every handle (the connection closed). */
  async close(): Promise<void> {
    const all = [...this.handles.values()];
    this.handles.clear();
    await Promise.all(all.map((h) => h.dispose()));
  }

  private async call(id: string, req: HandleReq): Promise<unknown> {
    const h = this.handles.get(id);
    if (!h) throw new RpcError(NOT_FOUND, `unknown file handle \`${id}\``);
    return toResult(await h.run(req));
  }
}
