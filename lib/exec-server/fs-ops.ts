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
import { discardPrepared, prepareRequest, type DecidedExecRequest, type FileSystemSandboxContext, type PrepareRuntime } from '../prepare';
import { toJsonRpcError } from '../prepare/rpc';
import { pathToFileUri } from '../permissions/uri';
import type { SandboxedProcess } from '../child';
import { INVALID_REQUEST, NOT_FOUND, RpcError } from './decode';
import type { SpawnPreparedFn } from './types';

/** fs/readFile answers in one message: beyond this size it is refused (fs/open + fs/readBlock stream it). */
export const MAX_READ_FILE_BYTES = 16 * 1024 * 1024;
/** The reference's fs/walk caps. */
export const WALK_MAX = { depth: 64, directories: 10_000, entries: 50_000 };

export type FsOp =
  | { op: 'readFile'; path: string; limit?: number }
  | { op: 'writeFile'; path: string; data: string /* base64 */ }
  | { op: 'createDirectory'; path: string; recursive: boolean }
  | { op: 'getMetadata'; path: string }
  | { op: 'readDirectory'; path: string }
  | { op: 'remove'; path: string; recursive: boolean; force: boolean }
  | { op: 'copy'; source: string; destination: string; recursive: boolean }
  | { op: 'canonicalize'; path: string }
  | { op: 'walk'; path: string; maxDepth: number; maxDirectories: number; maxEntries: number; follow: boolean }
  | { op: 'discoverFiles'; roots: string[]; files: string[]; maxDepth: number; maxDirectories: number; maxFileBytes: number; maxTotalBytes: number };

/** discoverFiles' answer: per root its SKILL.md files (path order) with agents/openai.yaml, and the asked files. */
export interface DiscoveredFiles {
  roots: Array<{ error: string | null; skills: Array<{ path: string; contents: string; metadata: string | null }>; unreadable: number }>;
  files: Array<string | null>;
  limited: boolean;
}

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
        // Opened first, then checked: a FIFO swapped in cannot block the read (O_NONBLOCK), and
        // the size is that of the file really read. Never more than the limit is read.
        const fd = fsm.openSync(req.path, fsm.constants.O_RDONLY | fsm.constants.O_NONBLOCK);
        try {
          const st = fsm.fstatSync(fd);
          if (!st.isFile()) return { notAFile: req.path };
          const limit = req.limit ?? 16 * 1024 * 1024;
          const tooBig = () => ({ message: `file \`${req.path}\` is larger than ${limit} bytes, the fs/readFile limit of this exec-server; read it in blocks with fs/open and fs/readBlock` });
          if (st.size > limit) return tooBig();
          const buf = Buffer.alloc(Math.min(st.size, limit) + 1);
          let n = 0;
          for (let r; n < buf.length && (r = fsm.readSync(fd, buf, n, buf.length - n, n)) > 0; ) n += r;
          if (n > limit) return tooBig();
          return { ok: { dataBase64: buf.subarray(0, n).toString('base64') } };
        } finally {
          fsm.closeSync(fd);
        }
      }
      case 'writeFile': {
        // O_NONBLOCK: a FIFO with no reader fails (ENXIO) instead of blocking the server.
        const c = fsm.constants;
        const fd = fsm.openSync(req.path, c.O_WRONLY | c.O_CREAT | c.O_TRUNC | c.O_NONBLOCK, 0o666);
        try {
          fsm.writeFileSync(fd, Buffer.from(req.data, 'base64'));
        } finally {
          fsm.closeSync(fd);
        }
        return { ok: {} };
      }
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
      case 'walk': {
        // Breadth-first, names in byte order, as the reference. Bounded by the request's limits
        // (capped by WALK_MAX). A symlink is listed and entered only when following is asked and
        // it names a directory; every directory is entered once (dev:ino), so a link cycle ends.
        // In a sandbox this runs inside it: what a link may reach is the kernel's decision.
        const entries: Array<{ path: string; kind: string }> = [];
        const errors: Array<{ path: string; errno: string }> = [];
        let truncated = false;
        const root = req.follow ? fsm.statSync(req.path) : fsm.lstatSync(req.path);
        if (!root.isDirectory()) return { ok: { entries, errors, truncated } };
        const seen = new Set([`${root.dev}:${root.ino}`]);
        const queue: Array<[string, number]> = [[req.path, 0]];
        let dirsRead = 0;
        outer: while (queue.length > 0) {
          if (dirsRead >= req.maxDirectories) {
            truncated = true;
            break;
          }
          dirsRead++;
          const [dir, depth] = queue.shift()!;
          let names: string[];
          try {
            names = fsm.readdirSync(dir).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
          } catch (e) {
            errors.push({ path: dir, errno: String((e as NodeJS.ErrnoException).code) });
            continue;
          }
          for (const name of names) {
            const full = dir.endsWith('/') ? dir + name : `${dir}/${name}`;
            let st: fs.Stats;
            try {
              st = fsm.lstatSync(full);
              if (st.isSymbolicLink()) {
                if (!req.follow) continue;
                st = fsm.statSync(full);
                if (!st.isDirectory()) continue;
              }
            } catch {
              continue;
            }
            const kind = st.isDirectory() ? 'directory' : st.isFile() ? 'file' : null;
            if (kind === null) continue;
            if (entries.length >= req.maxEntries) {
              truncated = true;
              break outer;
            }
            entries.push({ path: full, kind });
            const key = `${st.dev}:${st.ino}`;
            if (kind === 'directory' && depth < req.maxDepth && !seen.has(key)) {
              seen.add(key);
              queue.push([full, depth + 1]);
            }
          }
        }
        return { ok: { entries, errors, truncated } };
      }
      case 'discoverFiles': {
        // Capability discovery (capabilities/discoverV2): every SKILL.md at most maxDepth
        // directories below each root, directory links followed (each directory once), with its
        // agents/openai.yaml; bounded in directories and bytes read. In a sandbox this runs
        // inside it, so what it may read is the kernel's decision.
        let total = 0;
        let limited = false;
        let dirs = 0;
        const read = (p: string): string | null | undefined => {
          // undefined: absent or not a file; null: present but unreadable or over a bound.
          let fd: number;
          try {
            const st = fsm.statSync(p);
            if (!st.isFile()) return undefined;
            if (st.size > req.maxFileBytes || total + st.size > req.maxTotalBytes) {
              limited = true;
              return null;
            }
            fd = fsm.openSync(p, 'r');
          } catch (e) {
            return (e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR' ? undefined : null;
          }
          try {
            const buf = Buffer.alloc(req.maxFileBytes + 1);
            const n = fsm.readSync(fd, buf, 0, buf.length, 0);
            if (n > req.maxFileBytes) {
              limited = true;
              return null;
            }
            total += n;
            return buf.subarray(0, n).toString('utf8');
          } catch {
            return null;
          } finally {
            fsm.closeSync(fd);
          }
        };
        const byteOrder = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));
        const roots = req.roots.map((root) => {
          const skills: Array<{ path: string; contents: string; metadata: string | null }> = [];
          let unreadable = 0;
          let st: fs.Stats;
          try {
            st = fsm.statSync(root);
          } catch (e) {
            const code = String((e as NodeJS.ErrnoException).code);
            return { error: code === 'ENOENT' || code === 'ENOTDIR' ? null : code, skills, unreadable };
          }
          if (!st.isDirectory()) return { error: null, skills, unreadable };
          const found: string[] = [];
          const seen = new Set([`${st.dev}:${st.ino}`]);
          const queue: Array<[string, number]> = [[root, 0]];
          while (queue.length > 0) {
            if (++dirs > req.maxDirectories) {
              limited = true;
              break;
            }
            const [dir, depth] = queue.shift()!;
            let names: string[];
            try {
              names = fsm.readdirSync(dir);
            } catch {
              unreadable++;
              continue;
            }
            for (const name of names) {
              const full = `${dir}/${name}`;
              let s: fs.Stats;
              try {
                s = fsm.statSync(full);
              } catch {
                continue;
              }
              if (s.isDirectory()) {
                const key = `${s.dev}:${s.ino}`;
                if (depth < req.maxDepth && !seen.has(key)) {
                  seen.add(key);
                  queue.push([full, depth + 1]);
                }
              } else if (s.isFile() && name === 'SKILL.md') found.push(full);
            }
          }
          for (const f of found.sort(byteOrder)) {
            const contents = read(f);
            if (typeof contents !== 'string') {
              unreadable++;
              continue;
            }
            const metadata = read(`${f.slice(0, -'/SKILL.md'.length)}/agents/openai.yaml`);
            skills.push({ path: f, contents, metadata: metadata ?? null });
          }
          return { error: null, skills, unreadable };
        });
        const files = req.files.map((f) => read(f) ?? null);
        return { ok: { roots, files, limited } };
      }
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
  EBADF: 'Bad file descriptor',
  ENXIO: 'No such device or address',
};

export function outcomeToResult(out: FsOutcome, req: { op: string }): unknown {
  if ('ok' in out) {
    if (req.op === 'canonicalize') return { path: pathToFileUri((out.ok as { path: string }).path) };
    if (req.op === 'walk') {
      const w = out.ok as { entries: Array<{ path: string; kind: string }>; errors: Array<{ path: string; errno: string }>; truncated: boolean };
      return {
        entries: w.entries.map((e) => ({ path: pathToFileUri(e.path), kind: e.kind })),
        errors: w.errors.map((e) => ({ path: pathToFileUri(e.path), message: osErrorText(e.errno) })),
        truncated: w.truncated,
      };
    }
    return out.ok;
  }
  if (out.notAFile !== undefined) throw new RpcError(INVALID_REQUEST, `path \`${out.notAFile}\` is not a file`);
  if (out.errno !== undefined) throw new RpcError(out.errno === 'ENOENT' ? NOT_FOUND : -32603, osErrorText(out.errno));
  throw new RpcError(-32603, out.message ?? 'file system operation failed');
}

export interface FsRunner {
  runtime: PrepareRuntime;
  spawnPrepared: SpawnPreparedFn;
  /** Cap on the helper's answer (a readFile result); beyond it the helper is killed. */
  maxOutputBytes: number;
  /** The sandbox floor on the prepared helper (sandbox-floor.ts checkPreparedFloor); throws to refuse. */
  floor?: (decided: DecidedExecRequest) => void;
  /**
   * Takes one of the server's process slots for the helper (it is a process the client holds,
   * counted by --max-server-processes); throws the server's refusal when none is left. Returns
   * the slot's release.
   */
  reserve?: () => () => void;
}

/**
 * Starts a node helper program (`node -e program`) inside `sandbox`, prepared exactly as a
 * process/start with that context is, so the kernel bounds what it can touch.
 */
export async function spawnSandboxedHelper(program: string, sandbox: FileSystemSandboxContext, runner: FsRunner): Promise<SandboxedProcess> {
  const release = runner.reserve?.() ?? (() => {});
  try {
    const child = await prepareAndSpawnHelper(program, sandbox, runner);
    child.once('exit', release);
    child.once('close', release);
    return child;
  } catch (e) {
    release();
    throw e;
  }
}

async function prepareAndSpawnHelper(program: string, sandbox: FileSystemSandboxContext, runner: FsRunner): Promise<SandboxedProcess> {
  let decided: DecidedExecRequest;
  try {
    decided = await prepareRequest(
      {
        processId: 'fs-helper',
        argv: [process.execPath, '--no-warnings', '-e', program],
        cwd: sandbox.cwd ?? 'file:///',
        // In Electron's main process or a VS Code extension host, execPath is the application:
        // it runs as Node only with this (Node ignores it). The helper starts no other program.
        env: { ELECTRON_RUN_AS_NODE: '1' },
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
  const { prepared } = decided;
  try {
    runner.floor?.(decided);
  } catch (e) {
    await discardPrepared(prepared);
    throw e;
  }
  try {
    return runner.spawnPrepared(prepared, { stdio: ['pipe', 'pipe', 'pipe'] });
  } catch (e) {
    const r = toJsonRpcError(e);
    throw new RpcError(-32603, r.message);
  }
}

/** Runs one fs operation, sandboxed when a context is given. */
export async function runFs(req: FsOp, sandbox: FileSystemSandboxContext | null, runner: FsRunner): Promise<unknown> {
  if (sandbox === null) return outcomeToResult(runFsOp(req, fs), req);
  const child = await spawnSandboxedHelper(FS_HELPER, sandbox, runner);
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
  // The run's cleanup (placeholders it mounted, its cgroup) is done once `exited` settles.
  await child.exited.catch(() => {});
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
