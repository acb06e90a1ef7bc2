/**
 * process-sandbox: run commands inside an OS sandbox, in-process.
 *
 *   import { run } from 'process-sandbox';
 *   const r = await run('git', ['status'], { cwd, policy: { filesystem: { write: [cwd] } } });
 *
 * spawn()/run() validate everything before anything starts, resolve the policy into ResolvedRules
 * (lib/permissions), and hand a BackendSpawnRequest to the platform backend (lib/platform/*), which
 * fails closed with a SandboxError when it cannot enforce the rules.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Backend, BackendSpawnRequest, EnforcementReport, ProbeReport, SpawnNetworkOptions, StdioSpec } from './backend';
import { SandboxedProcess, type ExitResult } from './child';
import { SandboxError } from './errors';
import { tryLoadNative, loadNative } from './native';
import { isLikelySandboxDenied, resolvePolicy, withoutSecretEnv } from './permissions';
import type { SandboxPolicy } from './policy-types';
import type { ResolvedRules } from './rules';
import type { PreparedExecRequest } from './prepare';
import { createDarwinBackend } from './platform/darwin';
import { createLinuxBackend } from './platform/linux';
import { launchWithChildProcess } from './platform/posix-launcher';
import { createWin32Backend } from './platform/win32';

export { SandboxError, ERROR_CODES, type SandboxErrorCode } from './errors';
export { SandboxedProcess, type ExitResult } from './child';
export type { SandboxPolicy, FilesystemPolicy, ProxyPolicy, ResourceLimits, TmpMode, SandboxMode } from './policy-types';
export type { ResolvedRules, NetworkRule } from './rules';
export type { EnforcementReport, ProbeReport, StdioSpec, Guarantee, SpawnNetworkOptions } from './backend';
export { ManagedProxy, type AuditEvent, type Decider, type ManagedProxyOptions } from './network';
export { prepareExecRequest, type ExecParams, type PrepareRuntime, type PreparedExecRequest } from './prepare';
export { createExecServer, type CreateExecServerOptions, type ExecServer, type ExecServerTransport } from './exec-server';

export interface SpawnOptions {
  cwd?: string;
  /**
   * Exactly the child's environment. Default: process.env without variables that look like
   * secrets (see README "Environment"); pass `env: process.env` to hand everything on.
   */
  env?: Record<string, string | undefined>;
  /** 'pipe' (default), 'inherit', 'ignore', or per-fd specs; extra entries pass fds 3+. */
  stdio?: StdioSpec | StdioSpec[];
  /** The argv[0] the child sees (default: the command as given). */
  arg0?: string;
  /** The sandbox policy. Omitted: the default policy. null: run without a sandbox. */
  policy?: SandboxPolicy | null;
  /** Managed-network hooks (audit, decider, a shared proxy) for `network: { proxy }` policies. */
  proxy?: SpawnNetworkOptions;
  /**
   * Run on a pseudo-terminal of this size (Linux): fds 0-2 are the terminal, output is one stream
   * (`onData` or `stdout`), input goes through `write`, and `resize` changes the size. Not with
   * `stdio`. Elsewhere a SandboxError EPLATFORM_UNSUPPORTED.
   */
  pty?: { cols?: number; rows?: number };
}

export interface RunOptions extends SpawnOptions {
  input?: string | Buffer;
  /** Milliseconds; kills the whole tree when it fires. */
  timeout?: number;
  signal?: AbortSignal;
  /** Bytes of stdout or stderr kept before the tree is killed (default 64 MiB). */
  maxBuffer?: number;
  encoding?: BufferEncoding | 'buffer';
}

export interface RunResult<T = string> {
  stdout: T;
  stderr: T;
  code: number | null;
  signal: NodeJS.Signals | null;
  durationMs: number;
  timedOut: boolean;
  /** Heuristic: the failure looks like a sandbox denial (see isLikelySandboxDenied). */
  sandboxDenied: boolean;
  enforcement: EnforcementReport;
}

const SPAWN_KEYS = new Set(['cwd', 'env', 'stdio', 'arg0', 'policy', 'proxy', 'pty']);
const RUN_KEYS = new Set([...SPAWN_KEYS, 'input', 'timeout', 'signal', 'maxBuffer', 'encoding']);

let backendCache: Backend | undefined;

function backend(): Backend {
  if (backendCache) return backendCache;
  if (process.platform === 'linux') backendCache = createLinuxBackend(loadNative());
  else if (process.platform === 'win32') backendCache = createWin32Backend(loadNative() as unknown as Parameters<typeof createWin32Backend>[0]);
  else if (process.platform === 'darwin') backendCache = createDarwinBackend(launchWithChildProcess, (req) => ({ arg0Customized: req.arg0Customized === true }));
  else throw new SandboxError('EPLATFORM_UNSUPPORTED', `no sandbox backend exists for platform ${process.platform}`);
  return backendCache;
}

function bad(message: string): never {
  throw new SandboxError('EINVALID_ARGUMENT', message);
}

function checkString(v: unknown, what: string, allowEmpty = false): string {
  if (typeof v !== 'string') bad(`${what} must be a string, got ${v === null ? 'null' : typeof v}`);
  if (!allowEmpty && v.length === 0) bad(`${what} must not be empty`);
  if (v.includes('\0')) bad(`${what} must not contain a NUL byte`);
  return v;
}

function isExecutableFile(p: string): boolean {
  try {
    const st = fs.statSync(p);
    return st.isFile();
  } catch {
    return false;
  }
}

/** PATH lookup with the child's PATH, done before anything is spawned. */
export function resolveExecutable(command: string, env: Record<string, string>, cwd: string): string {
  if (command.includes('/') || (process.platform === 'win32' && command.includes('\\'))) {
    const p = path.resolve(cwd, command);
    if (!fs.existsSync(p)) throw new SandboxError('ENOT_FOUND', `command not found: ${command}`);
    return p;
  }
  const pathVar = env.PATH ?? (process.platform === 'win32' ? env.Path : undefined) ?? '/usr/local/bin:/usr/bin:/bin';
  // Windows: try each PATHEXT extension unless the name already has one.
  const exts =
    process.platform === 'win32' && path.extname(command) === ''
      ? (env.PATHEXT ?? env.Pathext ?? '.COM;.EXE;.BAT;.CMD').split(';').filter(Boolean)
      : [''];
  for (const dir of pathVar.split(path.delimiter)) {
    if (!dir) continue;
    for (const ext of exts) {
      const candidate = path.resolve(cwd, dir, command + ext);
      if (!isExecutableFile(candidate)) continue;
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        return candidate;
      } catch {
        continue;
      }
    }
  }
  throw new SandboxError('ENOT_FOUND', `command not found: ${command}`);
}

function normalize(
  command: unknown,
  args: unknown,
  options: unknown,
  allowed: Set<string>,
  preResolved?: { rules: ResolvedRules | null },
): BackendSpawnRequest {
  const cmd = checkString(command, 'command');
  const argList: unknown[] = args === undefined ? [] : Array.isArray(args) ? args : bad('args must be an array of strings');
  const argv = argList.map((a, i) => checkString(a, `args[${i}]`, true));
  if (options !== undefined && (options === null || typeof options !== 'object' || Array.isArray(options))) {
    bad('options must be an object');
  }
  const opts = (options ?? {}) as Record<string, unknown>;
  for (const k of Object.keys(opts)) if (!allowed.has(k)) bad(`unknown option: ${k}`);

  const cwd = opts.cwd === undefined ? process.cwd() : checkString(opts.cwd, 'options.cwd');
  if (!path.isAbsolute(cwd)) bad(`options.cwd must be an absolute path, got ${cwd}`);
  let st: fs.Stats;
  try {
    st = fs.statSync(cwd);
  } catch {
    bad(`options.cwd does not exist: ${cwd}`);
  }
  if (!st.isDirectory()) bad(`options.cwd is not a directory: ${cwd}`);

  // Omitted: process.env minus secret-looking variables, the same default as the CLI (a sandbox
  // that cannot write anywhere can still print $GITHUB_TOKEN). An explicit env is passed exactly.
  const envIn = opts.env === undefined ? withoutSecretEnv(process.env) : opts.env;
  if (envIn === null || typeof envIn !== 'object') bad('options.env must be an object');
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(envIn as Record<string, unknown>)) {
    if (v === undefined) continue;
    if (k.length === 0 || k.includes('=') || k.includes('\0')) bad(`options.env has an invalid name: ${JSON.stringify(k)}`);
    env[k] = checkString(v, `options.env.${k}`, true);
  }

  let stdio: StdioSpec[];
  const s = opts.stdio ?? 'pipe';
  if (typeof s === 'string') stdio = [s, s, s] as StdioSpec[];
  else if (Array.isArray(s)) stdio = [...s] as StdioSpec[];
  else bad('options.stdio must be a string or an array');
  while (stdio.length < 3) stdio.push('pipe');
  stdio.forEach((x, i) => {
    const ok = x === 'pipe' || x === 'inherit' || x === 'ignore' || (typeof x === 'number' && Number.isInteger(x) && x >= 0);
    if (!ok) bad(`options.stdio[${i}] must be 'pipe', 'inherit', 'ignore' or an fd number`);
  });

  const arg0 = opts.arg0 === undefined ? cmd : checkString(opts.arg0, 'options.arg0');

  let rules: ResolvedRules | null;
  if (preResolved) rules = preResolved.rules;
  else if (opts.policy === null) rules = null;
  else rules = resolvePolicy(opts.policy as SandboxPolicy | undefined, cwd);

  let network: SpawnNetworkOptions | undefined;
  if (opts.proxy !== undefined) {
    if (opts.proxy === null || typeof opts.proxy !== 'object') bad('options.proxy must be an object');
    network = opts.proxy as SpawnNetworkOptions;
    for (const k of Object.keys(network)) {
      if (!['instance', 'onAudit', 'decider', 'deciderTimeoutMs', 'lookup', 'processId'].includes(k)) bad(`unknown option: proxy.${k}`);
    }
  }
  const pty = opts.pty === undefined ? undefined : checkPty(opts.pty, opts.stdio !== undefined);
  const file = resolveExecutable(cmd, env, cwd);
  const req: BackendSpawnRequest = { file, argv: [arg0, ...argv], env, cwd, stdio, rules };
  if (pty) req.pty = pty;
  if (network) req.network = network;
  if (opts.arg0 !== undefined && opts.arg0 !== cmd) req.arg0Customized = true;
  return req;
}

function checkPty(v: unknown, hasStdio: boolean): { cols: number; rows: number } {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) bad('options.pty must be an object { cols, rows }');
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== 'cols' && k !== 'rows') bad(`unknown option: pty.${k}`);
  const size = (k: 'cols' | 'rows', dflt: number): number => {
    const n = o[k] ?? dflt;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 65535) bad(`options.pty.${k} must be an integer from 1 to 65535`);
    return n;
  };
  if (hasStdio) bad('options.pty and options.stdio cannot be combined: the terminal is fds 0-2');
  if (process.platform !== 'linux') {
    throw new SandboxError('EPLATFORM_UNSUPPORTED', `pseudo-terminals are not supported on ${process.platform} yet (Linux only)`);
  }
  return { cols: size('cols', 80), rows: size('rows', 24) };
}

/** Starts a sandboxed command. Throws SandboxError (and starts nothing) on bad input or when the policy cannot be enforced. */
export function spawn(command: string, args?: readonly string[], options?: SpawnOptions): SandboxedProcess {
  const req = normalize(command, args, options, SPAWN_KEYS);
  return new SandboxedProcess(backend().spawn(req));
}

/**
 * Runs a request prepared by prepareExecRequest (Codex exec-server shapes). The prepared rules are
 * enforced as they are; `sandboxType: 'none'` runs plainly, exactly as the seed does.
 */
export function spawnPrepared(
  prepared: PreparedExecRequest,
  options: { stdio?: StdioSpec | StdioSpec[]; pty?: { cols?: number; rows?: number } } = {},
): SandboxedProcess {
  if (!prepared || !Array.isArray(prepared.command) || prepared.command.length === 0) bad('argv must not be empty');
  for (const k of Object.keys(options)) if (k !== 'stdio' && k !== 'pty') bad(`unknown option: ${k}`);
  if (prepared.sandboxType !== 'none' && prepared.rules === null) {
    throw new SandboxError('ENOT_ENFORCED', 'sandbox intent cannot be enforced on this executor');
  }
  const [program, ...rest] = prepared.command;
  // `tty`: a pseudo-terminal (80x24 unless options.pty says otherwise, as the seed's default).
  const spawnOpts: SpawnOptions = { cwd: prepared.cwd, env: prepared.env };
  if (prepared.tty) spawnOpts.pty = options.pty ?? { cols: 80, rows: 24 };
  else spawnOpts.stdio = options.stdio ?? [prepared.pipeStdin ? 'pipe' : 'ignore', 'pipe', 'pipe'];
  if (prepared.tty && options.stdio !== undefined) bad('options.stdio cannot be combined with a tty request');
  if (prepared.arg0 !== undefined) spawnOpts.arg0 = prepared.arg0;
  // Managed network (lib/prepare): attach the command to the proxy prepared for it; a plain
  // launch's host listener is released when the command exits (or when it cannot start).
  const mp = prepared.managedProxy;
  if (mp) spawnOpts.proxy = { instance: mp.instance, processId: mp.processId };
  const release = () => void mp?.attachment?.detach().catch(() => {});
  let child: SandboxedProcess;
  try {
    const req = normalize(program, rest, spawnOpts, SPAWN_KEYS, { rules: prepared.rules });
    child = new SandboxedProcess(backend().spawn(req));
  } catch (e) {
    release();
    throw e;
  }
  if (mp?.attachment) void child.exited.then(release, release);
  return child;
}

/** Runs a command to completion and collects its output. */
export function run(command: string, args?: readonly string[], options?: RunOptions & { encoding: 'buffer' }): Promise<RunResult<Buffer>>;
export function run(command: string, args?: readonly string[], options?: RunOptions): Promise<RunResult<string>>;
export function run(command: string, args?: readonly string[], options: RunOptions = {}): Promise<RunResult<string | Buffer>> {
  return new Promise((resolve, reject) => {
    if (options !== undefined && (options === null || typeof options !== 'object' || Array.isArray(options))) {
      reject(new SandboxError('EINVALID_ARGUMENT', 'options must be an object'));
      return;
    }
    const { input, timeout, signal, maxBuffer = 64 * 1024 * 1024, encoding = 'utf8', ...spawnOpts } = options ?? {};
    let child: SandboxedProcess;
    try {
      for (const k of Object.keys(options ?? {})) if (!RUN_KEYS.has(k)) bad(`unknown option: ${k}`);
      if (timeout !== undefined && !(Number.isFinite(timeout) && timeout > 0)) bad('options.timeout must be a positive number of milliseconds');
      if (!(Number.isFinite(maxBuffer) && maxBuffer > 0)) bad('options.maxBuffer must be a positive number');
      if (signal?.aborted) throw new SandboxError('EABORTED', 'the operation was aborted before it started');
      const stdio = spawnOpts.stdio ?? ['pipe', 'pipe', 'pipe'];
      child = spawn(command, args, { ...spawnOpts, stdio });
    } catch (e) {
      reject(e);
      return;
    }
    const chunks: [Buffer[], Buffer[]] = [[], []];
    const sizes = [0, 0];
    let failure: SandboxError | null = null;
    let timedOut = false;
    const killTree = () => child.kill('SIGKILL');
    const collect = (i: 0 | 1, stream: NodeJS.ReadableStream | null) => {
      stream?.on('data', (b: Buffer) => {
        sizes[i] += b.length;
        if (sizes[i] > maxBuffer) {
          if (!failure) failure = new SandboxError('EMAXBUFFER', `${i === 0 ? 'stdout' : 'stderr'} exceeded maxBuffer (${maxBuffer} bytes); the process tree was killed`);
          killTree();
          return;
        }
        chunks[i].push(b);
      });
    };
    collect(0, child.stdout);
    collect(1, child.stderr);
    const timer = timeout ? setTimeout(() => { timedOut = true; killTree(); }, timeout) : undefined;
    const onAbort = () => {
      if (!failure) failure = new SandboxError('EABORTED', 'the operation was aborted; the process tree was killed');
      killTree();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    if (child.stdin) {
      if (input !== undefined) child.stdin.end(input);
      else child.stdin.end();
    }
    child.once('close', (code: number | null, sig: NodeJS.Signals | null) => {
      if (timer) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      void child.exited.then((info: ExitResult) => {
        if (failure) {
          reject(failure);
          return;
        }
        const out = Buffer.concat(chunks[0]);
        const err = Buffer.concat(chunks[1]);
        const text = (b: Buffer) => (encoding === 'buffer' ? b : b.toString(encoding));
        const sandboxType = sandboxTypeOf(child.enforcement);
        resolve({
          stdout: text(out),
          stderr: text(err),
          code,
          signal: sig,
          durationMs: info.durationMs,
          timedOut,
          sandboxDenied: isLikelySandboxDenied(sandboxType, code, sig, out.toString('utf8') + err.toString('utf8')),
          enforcement: child.enforcement,
        });
      });
    });
  });
}

/** The Codex sandbox type naming what enforced a run (for the sandboxDenied hint). */
function sandboxTypeOf(report: EnforcementReport): 'none' | 'linuxSeccomp' | 'macosSeatbelt' | 'windowsRestrictedToken' {
  if (!report.sandboxed) return 'none';
  if (report.platform === 'darwin') return 'macosSeatbelt';
  if (report.platform === 'win32') return 'windowsRestrictedToken';
  return 'linuxSeccomp';
}

/** What this host can enforce, without spawning a command. */
export function probe(): ProbeReport {
  const { binding, error } = tryLoadNative();
  if (!binding) {
    return { platform: process.platform, arch: process.arch, addonLoaded: false, addonError: error?.message, defaultMode: null, features: {} };
  }
  return backend().probe();
}
