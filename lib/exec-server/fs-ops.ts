/**
 * The exec-server's fs/* methods. Without a `sandbox` context they run here, in the server. With
 * one, the operation runs INSIDE the sandbox: a small node helper (FS_HELPER below) is started
 * through prepareExecRequest + spawnPrepared with the request's own sandbox context, so the kernel
 * (mount namespace, Landlock, seccomp) decides what it may touch, never a path check in JS. The
 * helper gets the request on stdin and answers one JSON line on stdout.
 *
 * Errors are worded as the reference words them: the Rust io::Error text "<strerror> (os error
 * N)", -32004 for ENOENT, -32603 for other I/O errors.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import { prepareExecRequest, type FileSystemSandboxContext, type PrepareRuntime } from '../prepare';
import { toJsonRpcError } from '../prepare/rpc';
import { pathToFileUri } from '../permissions/uri';
import type { SandboxedProcess } from '../child';
import type { PreparedExecRequest } from '../prepare';
import { INVALID_REQUEST, NOT_FOUND, RpcError } from './decode';

export type FsOp =
  | { op: 'readFile'; path: string }
  | { op: 'writeFile'; path: string; data: string /* base64 */ }
  | { op: 'createDirectory'; path: string; recursive: boolean }
  | { op: 'getMetadata'; path: string }
  | { op: 'readDirectory'; path: string }
  | { op: 'remove'; path: string; recursive: boolean; force: boolean }
  | { op: 'copy'; source: string; destination: string; recursive: boolean }
  | { op: 'canonicalize'; path: string };

/** Result, or a failure described by errno (and a message for the non-errno cases). */
export type FsOutcome = { ok: unknown } | { errno?: string; message?: string; notAFile?: string };

/**
 * The operation itself, shared by the in-process path and the sandboxed helper (it is also
 * serialised into FS_HELPER with Function.prototype.toString, so it must be self-contained and use
 * only `require`d node modules).
 */
function runFsOp(req: FsOp, fsm: typeof fs): FsOutcome {
  // create_dir_all: Node's own recursive mkdir reports ENOENT where the kernel said EROFS or
  // EACCES, which would hide a sandbox refusal; this one reports the kernel's errno.
  const mkdirAll = (p: string): void => {
    try {
      fsm.mkdirSync(p);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EEXIST' && fsm.statSync(p).isDirectory()) return;
      const parent = p.slice(0, p.lastIndexOf('/')) || '/';
      if (code !== 'ENOENT' || parent === p) throw e;
      mkdirAll(parent);
      fsm.mkdirSync(p);
    }
  };
  try {
    switch (req.op) {
      case 'readFile': {
        const st = fsm.statSync(req.path);
        if (!st.isFile()) return { notAFile: req.path };
        return { ok: { dataBase64: fsm.readFileSync(req.path).toString('base64') } };
      }
      case 'writeFile':
        fsm.writeFileSync(req.path, Buffer.from(req.data, 'base64'));
        return { ok: {} };
      case 'createDirectory':
        if (req.recursive) mkdirAll(req.path);
        else fsm.mkdirSync(req.path);
        return { ok: {} };
      case 'getMetadata': {
        const lst = fsm.lstatSync(req.path);
        const st = lst.isSymbolicLink() ? fsm.statSync(req.path) : lst;
        return {
          ok: {
            isDirectory: st.isDirectory(),
            isFile: st.isFile(),
            isSymlink: lst.isSymbolicLink(),
            size: st.size,
            // The reference reports 0 here on Linux (no birth time from its stat); so do we.
            createdAtMs: 0,
            modifiedAtMs: Math.floor(st.mtimeMs),
          },
        };
      }
      case 'readDirectory': {
        const entries = fsm.readdirSync(req.path, { withFileTypes: true }).map((d) => {
          let isDirectory = d.isDirectory();
          let isFile = d.isFile();
          if (d.isSymbolicLink()) {
            try {
              const t = fsm.statSync(req.path + '/' + d.name);
              isDirectory = t.isDirectory();
              isFile = t.isFile();
            } catch {
              /* dangling: neither */
            }
          }
          return { fileName: d.name, isDirectory, isFile };
        });
        return { ok: { entries } };
      }
      case 'remove': {
        let st;
        try {
          st = fsm.lstatSync(req.path);
        } catch (e) {
          if (req.force && (e as NodeJS.ErrnoException).code === 'ENOENT') return { ok: {} };
          throw e;
        }
        if (st.isDirectory() && !req.recursive) fsm.rmdirSync(req.path);
        else fsm.rmSync(req.path, { recursive: req.recursive, force: req.force });
        return { ok: {} };
      }
      case 'copy': {
        const st = fsm.statSync(req.source);
        if (st.isDirectory() && !req.recursive) return { message: `fs/copy requires recursive: true to copy a directory` };
        fsm.cpSync(req.source, req.destination, { recursive: req.recursive, errorOnExist: false, force: true });
        return { ok: {} };
      }
      case 'canonicalize':
        return { ok: { path: fsm.realpathSync.native(req.path) } };
    }
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (typeof err.code === 'string' && /^E[A-Z0-9]+$/.test(err.code)) return { errno: err.code };
    return { message: err.message };
  }
  return { message: 'unknown fs operation' };
}

/** The helper program (run as `node -e FS_HELPER` inside the sandbox). */
const FS_HELPER = `'use strict';
const fs = require('node:fs');
const runFsOp = ${runFsOp.toString()};
let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
  let out;
  try { out = runFsOp(JSON.parse(input), fs); } catch (e) { out = { message: String(e && e.message) }; }
  process.stdout.write(JSON.stringify(out) + '\\n');
});
`;

/** The Rust io::Error wording: "No such file or directory (os error 2)". */
export function osErrorText(code: string): string {
  const n = (os.constants.errno as Record<string, number>)[code];
  if (n === undefined) return code;
  return `${STRERROR[code] ?? code} (os error ${n})`;
}

const STRERROR: Record<string, string> = {
  ENOENT: 'No such file or directory',
  EACCES: 'Permission denied',
  EPERM: 'Operation not permitted',
  EEXIST: 'File exists',
  ENOTDIR: 'Not a directory',
  EISDIR: 'Is a directory',
  ENOTEMPTY: 'Directory not empty',
  EROFS: 'Read-only file system',
  EINVAL: 'Invalid argument',
  ELOOP: 'Too many levels of symbolic links',
  ENAMETOOLONG: 'File name too long',
  EXDEV: 'Invalid cross-device link',
  ENOSPC: 'No space left on device',
  EBUSY: 'Device or resource busy',
  EMFILE: 'Too many open files',
  EIO: 'Input/output error',
  EFBIG: 'File too large',
  ETXTBSY: 'Text file busy',
};

function outcomeToResult(out: FsOutcome, req: FsOp): unknown {
  if ('ok' in out) {
    if (req.op === 'canonicalize') return { path: pathToFileUri((out.ok as { path: string }).path) };
    return out.ok;
  }
  if (out.notAFile !== undefined) throw new RpcError(INVALID_REQUEST, `path \`${out.notAFile}\` is not a file`);
  if (out.errno !== undefined) throw new RpcError(out.errno === 'ENOENT' ? NOT_FOUND : -32603, osErrorText(out.errno));
  throw new RpcError(-32603, out.message ?? 'file system operation failed');
}

export interface FsRunner {
  runtime: PrepareRuntime;
  spawnPrepared: (p: PreparedExecRequest, o: { stdio?: Array<'pipe' | 'ignore'> }) => SandboxedProcess;
  /** Cap on the helper's answer (a readFile result); beyond it the helper is killed. */
  maxOutputBytes: number;
}

/** Runs one fs operation, sandboxed when a context is given. */
export async function runFs(req: FsOp, sandbox: FileSystemSandboxContext | null, runner: FsRunner): Promise<unknown> {
  if (sandbox === null) return outcomeToResult(runFsOp(req, fs), req);
  const cwdUri = sandbox.cwd ?? 'file:///';
  let prepared: PreparedExecRequest;
  try {
    prepared = await prepareExecRequest(
      {
        processId: 'fs-helper',
        argv: [process.execPath, '--no-warnings', '-e', FS_HELPER],
        cwd: cwdUri,
        env: {},
        tty: false,
        pipeStdin: true,
        sandbox,
      },
      runner.runtime,
    );
  } catch (e) {
    const r = toJsonRpcError(e);
    throw new RpcError(r.code, r.message);
  }
  let child: SandboxedProcess;
  try {
    child = runner.spawnPrepared(prepared, { stdio: ['pipe', 'pipe', 'pipe'] });
  } catch (e) {
    const r = toJsonRpcError(e);
    throw new RpcError(-32603, r.message);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let tooBig = false;
  child.stdout!.on('data', (b: Buffer) => {
    size += b.length;
    if (size > runner.maxOutputBytes) {
      tooBig = true;
      child.kill('SIGKILL');
      return;
    }
    chunks.push(b);
  });
  const errChunks: Buffer[] = [];
  child.stderr!.on('data', (b: Buffer) => {
    if (errChunks.length < 16) errChunks.push(b);
  });
  child.stdin!.end(JSON.stringify(req));
  const exit = await new Promise<[number | null, string | null]>((resolve) => child.once('close', (c, s) => resolve([c, s])));
  if (tooBig) throw new RpcError(-32603, `file system result exceeds ${runner.maxOutputBytes} bytes`);
  const text = Buffer.concat(chunks).toString('utf8').trim();
  let out: FsOutcome;
  try {
    out = JSON.parse(text) as FsOutcome;
  } catch {
    const why = Buffer.concat(errChunks).toString('utf8').trim().split('\n').pop() ?? '';
    throw new RpcError(-32603, `sandboxed file system helper failed (exit ${exit[0] ?? exit[1]})${why ? `: ${why}` : ''}`);
  }
  return outcomeToResult(out, req);
}
