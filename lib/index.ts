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
import * as os from 'node:os';
import * as path from 'node:path';
import { unsandboxedReport, type Backend, type BackendSpawnRequest, type EnforcementReport, type ProbeReport, type StdioSpec } from './backend';
import { SandboxedProcess, type ExitResult } from './child';
import { isTimerMs, MAX_TIMER_MS, SandboxError } from './errors';
import { tryLoadNative, loadLinuxNative, loadWin32Native } from './native';
import { isLikelySandboxDenied, resolvePolicy, withoutSecretEnv } from './permissions';
import type { SandboxPolicy } from './policy-types';
import type { ResolvedRules } from './rules';
import type { CreateExecServerOptions, ExecServer } from './exec-server';
import type { ExecParams, PrepareRuntime, PreparedExecRequest } from './prepare';
import { nodeFetchNote } from './network/env';
import { interceptionEnv, wireInterception } from './network/interception-spawn';
import type { SpawnNetworkOptions } from './network/spawn-options';
import { createLinuxBackend } from './platform/linux';
import { normalizeChanges, type ChangesHandle } from './changes';
import type { ChangesMode, ChangesOptions } from './changes/types';

// Loaded on first use, not with the package: a process that never serves Codex or prepares Codex
// requests, or runs on another platform, never loads that code (the exec-server pulls in ws).
// Every command the srt drop-in runs through its CLI starts a Node that loads this file.

export { SandboxError, ERROR_CODES, type SandboxErrorCode } from './errors';
export { SandboxedProcess, type ExitResult, type SandboxedProcessEvents } from './child';
export { ChangesHandle, listChanges, openStagedChanges, revertChanges, type ChangeEntry, type ChangeKind, type ChangesMode, type ChangesOptions } from './changes';
export type { SandboxPolicy, FilesystemPolicy, ProxyPolicy, ResourceLimits, TmpMode, SandboxMode } from './policy-types';
export type { ResolvedRules, NetworkRule } from './rules';
export type { EnforcementReport, ProbeReport, StdioSpec, Guarantee } from './backend';
export type { SpawnNetworkOptions } from './network';
export {
  ManagedProxy,
  InterceptionCa,
  CUSTOM_CA_ENV_KEYS,
  nodeFetchPreloadPath,
  type AuditEvent,
  type Decider,
  type ManagedProxyOptions,
  type InterceptionOptions,
  type CredentialRule,
} from './network';
export type { ExecParams, PrepareRuntime, PreparedExecRequest } from './prepare';

/** Prepares a Codex-shaped exec request (lib/prepare): URIs, the permission profile, the sandbox type, the network. */
export function prepareExecRequest(params: ExecParams, runtime?: PrepareRuntime): Promise<PreparedExecRequest> {
  return import('./prepare').then((m) => m.prepareExecRequest(params, runtime));
}
export type { CreateExecServerOptions, ExecServer, ExecServerTransport, WsAuth } from './exec-server';

export interface SpawnOptions {
  cwd?: string;
  /**
   * Exactly the child's environment. Default: process.env without variables that look like
   * secrets (see README "Environment"); pass `env: process.env` to hand everything on.
   */
  env?: Record<string, string | undefined>;
  /**
   * 'pipe' (default), 'inherit', 'ignore', or per-fd entries: those, an fd number, or a stream
   * with an underlying file descriptor (a net.Socket, an opened fs stream), as child_process
   * takes. Entries past index 2 pass fds 3+.
   */
  stdio?: StdioOption | StdioOption[];
  /** The argv[0] the child sees (default: the command as given). */
  arg0?: string;
  /**
   * Run `command` (with `args` appended, space-separated) through a shell: true = /bin/sh -c
   * (cmd.exe /d /s /c on Windows), a string = that shell. The shell runs inside the sandbox.
   */
  shell?: boolean | string;
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
  /**
   * Linux: what the command changes in its writable roots. 'record': its writes land, and
   * `child.changes` lists and reverts them (a journal in `dir`, which a later process can revert
   * with revertChanges). 'stage': they land in a layer until `child.changes.apply()`. `maxBytes`
   * bounds the journal's copies (or the layer): past it the command's write fails with ENOSPC.
   */
  changes?: ChangesMode | ChangesOptions;
}

/** One stdio entry: a StdioSpec, or a stream that has a file descriptor. */
export type StdioOption = StdioSpec | NodeJS.ReadableStream | NodeJS.WritableStream;

export interface RunOptions extends SpawnOptions {
  input?: string | Buffer;
  /** Milliseconds (at most 2^31 - 1, Node's timer limit); then the tree is stopped (`killSignal`, `forceKillAfter`). */
  timeout?: number;
  /** Aborting stops the tree the same way a timeout does. */
  signal?: AbortSignal;
  /** Bytes of stdout or stderr kept; past it the tree is stopped (default 64 MiB). */
  maxBuffer?: number;
  encoding?: BufferEncoding | 'buffer';
  /**
   * Signal sent to the tree on timeout, abort or maxBuffer. Default 'SIGKILL': an untrusted command
   * gets no say in when it stops. 'SIGTERM' gives it `forceKillAfter` ms to clean up first.
   */
  killSignal?: NodeJS.Signals | number;
  /** Milliseconds between a `killSignal` other than SIGKILL and the SIGKILL that follows (default 5000). */
  forceKillAfter?: number;
  /** Also collect stdout and stderr interleaved, in arrival order, as `all`. */
  all?: boolean;
  /**
   * false (default): the promise resolves whenever the command ran, however it ended (see
   * timedOut, aborted, maxBufferExceeded, code, signal). true: it rejects with a SandboxError
   * (ETIMEDOUT, EABORTED, EMAXBUFFER, ECOMMAND_FAILED) unless the command exited 0 on its own;
   * the error's `detail.result` is the RunResult.
   */
  reject?: boolean;
}

export interface RunResult<T = string> {
  stdout: T;
  stderr: T;
  /** stdout and stderr interleaved in arrival order (only with `all: true`). */
  all?: T;
  code: number | null;
  signal: NodeJS.Signals | null;
  durationMs: number;
  /** The timeout fired and the tree was stopped. */
  timedOut: boolean;
  /** The AbortSignal fired and the tree was stopped. */
  aborted: boolean;
  /** stdout or stderr passed maxBuffer: the output is cut at maxBuffer and the tree was stopped. */
  maxBufferExceeded: boolean;
  /** run() stopped the tree (one of the three above). */
  killed: boolean;
  /**
   * The backend stopped the tree because the run passed a limit it checks from outside (Linux
   * Landlock mode: limits.tmpBytes on the per-run TMPDIR). `killed` stays false: run() did not.
   */
  limitExceeded?: { limit: 'tmpBytes'; message: string };
  /** What the host could not remove after the run (also emitted as a PSB_CLEANUP process warning). */
  cleanupLeft?: string[];
  /** Heuristic: the failure looks like a sandbox denial (see isLikelySandboxDenied). */
  sandboxDenied: boolean;
  enforcement: EnforcementReport;
  /** With options.changes: the run's changes (list, revert; apply, discard). */
  changes?: ChangesHandle;
}

const SPAWN_KEYS = new Set(['cwd', 'env', 'stdio', 'arg0', 'shell', 'policy', 'proxy', 'pty', 'changes']);
const RUN_KEYS = new Set([...SPAWN_KEYS, 'input', 'timeout', 'signal', 'maxBuffer', 'encoding', 'killSignal', 'forceKillAfter', 'all', 'reject']);

/**
 * What to use instead of a child_process option spelling we do not take (the option is still
 * refused: silently dropping a timeout or an AbortSignal would leave a command running).
 */
const OPTION_HINTS: Record<string, string> = {
  argv0: 'use arg0 (the argv[0] the child sees)',
  windowsHide: 'not needed: on Windows a sandboxed command always gets a hidden console of its own (CREATE_NO_WINDOW) on a private desktop',
};
/** run() options that spawn() does not take. */
const RUN_ONLY_HINT = (k: string) =>
  k === 'signal' || k === 'timeout' || k === 'killSignal'
    ? `spawn() takes no ${k}: run() takes ${k === 'timeout' ? 'timeout (milliseconds)' : k}, or call kill() on the returned process`
    : `spawn() takes no ${k}: run() takes ${k}`;

function unknownOption(k: string, allowed: Set<string>): never {
  const hint = OPTION_HINTS[k] ?? (!allowed.has(k) && RUN_KEYS.has(k) ? RUN_ONLY_HINT(k) : undefined);
  return bad(hint ? `unknown option: ${k}; ${hint}` : `unknown option: ${k}`);
}

let backendCache: Backend | undefined;

function backend(): Backend {
  if (backendCache) return backendCache;
  if (process.platform === 'linux') backendCache = createLinuxBackend(loadLinuxNative());
  else if (process.platform === 'win32') {
    const { createWin32Backend } = require('./platform/win32') as typeof import('./platform/win32');
    backendCache = createWin32Backend(loadWin32Native());
  } else if (process.platform === 'darwin') {
    const { createDarwinBackend } = require('./platform/darwin') as typeof import('./platform/darwin');
    const { launchWithChildProcess } = require('./platform/posix-launcher') as typeof import('./platform/posix-launcher');
    backendCache = createDarwinBackend(launchWithChildProcess, (req) => ({ arg0Customized: req.arg0Customized === true }));
  } else throw new SandboxError('EPLATFORM_UNSUPPORTED', `no sandbox backend exists for platform ${process.platform}`);
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
  validated?: (rules: ResolvedRules | null, stdio: StdioSpec[]) => void,
): BackendSpawnRequest {
  const { opts, cmd, argv } = normalizeCommand(command, args, options, allowed);
  const cwd = normalizeCwd(opts.cwd);
  const env = normalizeEnv(opts.env);
  const stdio = normalizeStdio(opts.stdio);
  const arg0 = opts.arg0 === undefined ? cmd : checkString(opts.arg0, 'options.arg0');
  let rules: ResolvedRules | null;
  if (preResolved) rules = preResolved.rules;
  else if (opts.policy === null) rules = null;
  else rules = resolvePolicy(opts.policy as SandboxPolicy | undefined, cwd);
  // TLS interception: the child trusts the proxy's CA (env), which stays readable and unwritable
  // for it; a CA directory the sandbox could write or not see is refused here (EPROXY_CONFIG).
  const wired = wireInterception(rules, env, normalizeNetwork(opts.proxy, rules, preResolved !== undefined));
  rules = wired.rules;
  Object.assign(env, wired.env);
  const pty = opts.pty === undefined ? undefined : checkPty(opts.pty, opts.stdio !== undefined);
  const changes = normalizeChanges(opts.changes, rules);
  validated?.(rules, stdio);
  const file = resolveExecutable(cmd, env, cwd);
  const req: BackendSpawnRequest = { file, argv: [arg0, ...argv], env, cwd, stdio, rules };
  if (pty) req.pty = pty;
  if (changes) req.changes = changes;
  if (wired.network) req.network = wired.network;
  if (opts.arg0 !== undefined && opts.arg0 !== cmd) req.arg0Customized = true;
  return req;
}

/** The command, its arguments and the options object: their shapes, unknown options, and the shell line. */
function normalizeCommand(
  command: unknown,
  args: unknown,
  options: unknown,
  allowed: Set<string>,
): { opts: Record<string, unknown>; cmd: string; argv: string[] } {
  let cmd = checkString(command, 'command');
  const argList: unknown[] = args === undefined ? [] : Array.isArray(args) ? args : bad('args must be an array of strings');
  let argv = argList.map((a, i) => checkString(a, `args[${i}]`, true));
  if (options !== undefined && (options === null || typeof options !== 'object' || Array.isArray(options))) {
    bad('options must be an object');
  }
  const opts = (options ?? {}) as Record<string, unknown>;
  for (const k of Object.keys(opts)) if (!allowed.has(k)) unknownOption(k, allowed);
  // shell: the whole command line goes to the shell as one string, as child_process does.
  if (opts.shell !== undefined && opts.shell !== false) {
    if (opts.shell !== true) checkString(opts.shell, 'options.shell');
    const line = [cmd, ...argv].join(' ');
    if (process.platform === 'win32') {
      cmd = opts.shell === true ? 'cmd.exe' : (opts.shell as string);
      argv = ['/d', '/s', '/c', line];
    } else {
      cmd = opts.shell === true ? '/bin/sh' : (opts.shell as string);
      argv = ['-c', line];
    }
  }
  return { opts, cmd, argv };
}

/** The working directory: absolute, and an existing directory. */
function normalizeCwd(v: unknown): string {
  const cwd = v === undefined ? process.cwd() : checkString(v, 'options.cwd');
  if (!path.isAbsolute(cwd)) bad(`options.cwd must be an absolute path, got ${cwd}`);
  let st: fs.Stats;
  try {
    st = fs.statSync(cwd);
  } catch {
    bad(`options.cwd does not exist: ${cwd}`);
  }
  if (!st.isDirectory()) bad(`options.cwd is not a directory: ${cwd}`);
  return cwd;
}

/** The child's environment: the given one exactly, or process.env without secret-looking variables. */
function normalizeEnv(v: unknown): Record<string, string> {
  // Omitted: process.env minus secret-looking variables, the same default as the CLI (a sandbox
  // that cannot write anywhere can still print $GITHUB_TOKEN). An explicit env is passed exactly.
  const envIn = v === undefined ? withoutSecretEnv(process.env) : v;
  if (envIn === null || typeof envIn !== 'object') bad('options.env must be an object');
  const env: Record<string, string> = {};
  for (const [k, val] of Object.entries(envIn as Record<string, unknown>)) {
    if (val === undefined) continue;
    if (k.length === 0 || k.includes('=') || k.includes('\0')) bad(`options.env has an invalid name: ${JSON.stringify(k)}`);
    env[k] = checkString(val, `options.env.${k}`, true);
  }
  return env;
}

/** options.proxy's keys, and whether a proxy policy that refuses every destination is a mistake. */
function normalizeNetwork(proxy: unknown, rules: ResolvedRules | null, preResolved: boolean): SpawnNetworkOptions | undefined {
  let network: SpawnNetworkOptions | undefined;
  if (proxy !== undefined) {
    if (proxy === null || typeof proxy !== 'object') bad('options.proxy must be an object');
    network = proxy as SpawnNetworkOptions;
    for (const k of Object.keys(network)) {
      if (!['instance', 'onAudit', 'decider', 'deciderTimeoutMs', 'lookup', 'processId', 'interception'].includes(k)) bad(`unknown option: proxy.${k}`);
    }
  }
  // An empty allow list with nothing else to decide refuses every destination: that is network
  // 'none' with a proxy running, and almost always a mistake. With a decider (asked on every
  // allow-list miss) or a shared instance (its own policy decides), it means something.
  if (!preResolved && rules?.network.kind === 'proxy' && rules.network.proxy.allow.length === 0 && !network?.decider && !network?.instance) {
    throw new SandboxError(
      'EINVALID_POLICY',
      "policy.network.proxy.allow is empty, so every destination would be refused: use network: 'none' for no network, list the hosts to allow, or pass options.proxy.decider to decide each request",
      { detail: { field: 'policy.network.proxy.allow' } },
    );
  }
  return network;
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

/** The fd under a stream, as child_process finds it (net.Socket handles, opened fs streams). */
function streamFd(x: object): number | undefined {
  const o = x as { fd?: unknown; _handle?: { fd?: unknown } };
  const fd = typeof o.fd === 'number' ? o.fd : typeof o._handle?.fd === 'number' ? o._handle.fd : undefined;
  return fd !== undefined && Number.isInteger(fd) && fd >= 0 ? fd : undefined;
}

function normalizeStdio(input: unknown): StdioSpec[] {
  let stdio: unknown[];
  const s = input ?? 'pipe';
  if (typeof s === 'string') stdio = [s, s, s];
  else if (Array.isArray(s)) stdio = [...s];
  else bad('options.stdio must be a string or an array');
  while (stdio.length < 3) stdio.push('pipe');
  return stdio.map((x, i) => {
    if (x === 'pipe' || x === 'inherit' || x === 'ignore' || (typeof x === 'number' && Number.isInteger(x) && x >= 0)) return x;
    if (x !== null && typeof x === 'object') {
      const fd = streamFd(x);
      if (fd === undefined) bad(`options.stdio[${i}]: the stream has no underlying file descriptor (open it first; child_process has the same rule)`);
      return fd;
    }
    return bad(`options.stdio[${i}] must be 'pipe', 'inherit', 'ignore', an fd number or a stream with a file descriptor`);
  }) as StdioSpec[];
}

/** Errors of starting the command itself, which child_process reports as 'error' rather than throwing. */
const START_ERRORS = new Set(['ENOT_FOUND', 'ENOT_EXECUTABLE']);

/** The report of a command that never started: nothing ran, so nothing is claimed. */
function notStartedReport(rules: ResolvedRules | null): EnforcementReport {
  return { ...unsandboxedReport(process.platform, { gaps: ['the command was not started'] }), sandboxed: rules !== null };
}

/**
 * The report as every backend gives it, made uniform: `filesystemRead: 'all'` when reads were
 * not restricted at all, and `limits` (the per-process limits applied; null = none) when the
 * backend did not fill them in itself; a proxied run's note on Node's fetch (nodeFetchNote).
 */
function finishReport(report: EnforcementReport, rules: ResolvedRules | null, env: Readonly<Record<string, string>>): EnforcementReport {
  if (rules && report.sandboxed && rules.readAll && rules.denyRead.length === 0 && report.guarantees.filesystemRead === 'not-requested') {
    report.guarantees.filesystemRead = 'all';
  }
  if (report.limits === undefined) {
    const l = rules?.limits ?? {};
    report.limits = { maxProcesses: l.maxProcesses ?? null, memoryBytes: l.memoryBytes ?? null, openFiles: l.openFiles ?? null };
  }
  const note = rules?.network.kind === 'proxy' && report.sandboxed ? nodeFetchNote(env) : null;
  if (note) report.notes = [...(report.notes ?? []), note];
  return report;
}

function start(req: BackendSpawnRequest): SandboxedProcess {
  const proc = backend().spawn(req);
  finishReport(proc.enforcement, req.rules, req.env);
  return new SandboxedProcess(proc);
}

/**
 * Starts a sandboxed command. Bad input, or a policy this host cannot enforce, throws a
 * SandboxError synchronously and starts nothing. A command that cannot be started (not found,
 * not executable) is reported as child_process does: an 'error' event on the returned handle
 * and a rejected `exited`.
 */
export function spawn(command: string, args?: readonly string[], options?: SpawnOptions): SandboxedProcess {
  let stdio: StdioSpec[] = ['pipe', 'pipe', 'pipe'];
  let rules: ResolvedRules | null = null;
  try {
    const req = normalize(command, args, options, SPAWN_KEYS, undefined, (r, s) => {
      rules = r;
      stdio = s;
    });
    return start(req);
  } catch (e) {
    if (e instanceof SandboxError && (START_ERRORS.has(e.code) || e.detail?.startFailure === true)) {
      return SandboxedProcess.failed(e, stdio, notStartedReport(rules));
    }
    throw e;
  }
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
  // A plain launch reaches the proxy's host listener through its env: it must trust the
  // interception CA too (a sandboxed one gets it, checked, in normalize()).
  if (mp && prepared.rules === null) spawnOpts.env = interceptionEnv(prepared.env, mp.instance.interceptionCa);
  const release = () => void mp?.attachment?.detach().catch(() => {});
  let child: SandboxedProcess;
  try {
    const req = normalize(program, rest, spawnOpts, SPAWN_KEYS, { rules: prepared.rules });
    child = start(req);
  } catch (e) {
    release();
    throw e;
  }
  if (mp?.attachment) void child.exited.then(release, release);
  return child;
}

/**
 * Runs a command to completion and collects its output.
 *
 * One model: the promise rejects only when the command did not start (bad input, a policy that
 * cannot be enforced, not found, not executable, an AbortSignal already aborted). Once it ran, it
 * resolves however it ended: exit code, signal, timeout, abort or maxBuffer, with the output
 * collected so far. `reject: true` turns every ending but a clean exit 0 into a rejection.
 */
export function run(command: string, args?: readonly string[], options?: RunOptions & { encoding: 'buffer' }): Promise<RunResult<Buffer>>;
export function run(command: string, args?: readonly string[], options?: RunOptions): Promise<RunResult<string>>;
export function run(command: string, args?: readonly string[], options: RunOptions = {}): Promise<RunResult<string | Buffer>> {
  return new Promise((resolve, reject) => {
    if (options !== undefined && (options === null || typeof options !== 'object' || Array.isArray(options))) {
      reject(new SandboxError('EINVALID_ARGUMENT', 'options must be an object'));
      return;
    }
    const o = runSettings(options ?? {});
    let child: SandboxedProcess;
    try {
      checkRunSettings(options ?? {}, o);
      if (o.signal?.aborted) throw new SandboxError('EABORTED', 'the operation was aborted before it started');
      const stdio = o.spawnOpts.stdio ?? ['pipe', 'pipe', 'pipe'];
      child = spawn(command, args, { ...o.spawnOpts, stdio });
    } catch (e) {
      reject(e);
      return;
    }
    const s = startCollecting(o, child);
    child.once('close', (code: number | null, sig: NodeJS.Signals | null) => finishRun(s, command, code, sig, resolve, reject));
  });
}

/** run()'s own options with their defaults, and the rest, for spawn(). */
interface RunSettings {
  input?: string | Buffer;
  timeout?: number;
  signal?: AbortSignal;
  maxBuffer: number;
  encoding: BufferEncoding | 'buffer';
  killSignal: NodeJS.Signals | number;
  forceKillAfter: number;
  all: boolean;
  rejectOnFailure: boolean;
  spawnOpts: SpawnOptions;
}

/** What run()'s steps share once the command started: its settings, the child, and what was collected. */
interface RunState extends RunSettings {
  child: SandboxedProcess;
  startError: SandboxError | null;
  chunks: [Buffer[], Buffer[]];
  interleaved: Buffer[];
  sizes: [number, number];
  stopped: 'timeout' | 'abort' | 'maxBuffer' | null;
  forceTimer?: NodeJS.Timeout;
  timer?: NodeJS.Timeout;
  onAbort: () => void;
}

/** Splits run()'s options from spawn()'s, filling in run()'s defaults. */
function runSettings(options: RunOptions): RunSettings {
  const {
    input,
    timeout,
    signal,
    maxBuffer = 64 * 1024 * 1024,
    encoding = 'utf8',
    killSignal = 'SIGKILL',
    forceKillAfter = 5000,
    all = false,
    reject: rejectOnFailure = false,
    ...spawnOpts
  } = options;
  return { input, timeout, signal, maxBuffer, encoding, killSignal, forceKillAfter, all, rejectOnFailure, spawnOpts };
}

/** Refuses run() options that are unknown, out of range, or that would be silently dropped. */
function checkRunSettings(options: RunOptions, o: RunSettings): void {
  const { timeout, maxBuffer, forceKillAfter, killSignal, signal, input, spawnOpts } = o;
  for (const k of Object.keys(options)) if (!RUN_KEYS.has(k)) unknownOption(k, RUN_KEYS);
  if (timeout !== undefined && !isTimerMs(timeout)) bad(`options.timeout must be a positive number of milliseconds, at most ${MAX_TIMER_MS} (about 24.8 days: Node's timer limit), got ${String(timeout)}`);
  if (!(Number.isFinite(maxBuffer) && maxBuffer > 0)) bad('options.maxBuffer must be a positive number');
  if (forceKillAfter !== 0 && !isTimerMs(forceKillAfter)) bad(`options.forceKillAfter must be a number of milliseconds, 0 to ${MAX_TIMER_MS} (Node's timer limit)`);
  if (typeof killSignal === 'string' ? !(killSignal in os.constants.signals) : !(Number.isInteger(killSignal) && killSignal > 0)) {
    bad(`options.killSignal must be a signal name or number, got ${String(killSignal)}`);
  }
  for (const [k, v] of [['all', o.all], ['reject', o.rejectOnFailure]] as const) if (typeof v !== 'boolean') bad(`options.${k} must be a boolean`);
  if (signal !== undefined && !(signal instanceof AbortSignal)) bad('options.signal must be an AbortSignal');
  if (input !== undefined) {
    // input goes to a stdin pipe; with any other stdin it would be dropped without a word.
    if (spawnOpts.pty !== undefined) bad('options.input cannot be combined with options.pty: the terminal is the input; drop input, or use spawn() and write() to the terminal');
    const s0: unknown = Array.isArray(spawnOpts.stdio) ? spawnOpts.stdio[0] : spawnOpts.stdio;
    if (s0 !== undefined && s0 !== 'pipe') {
      const what = typeof s0 === 'string' ? `'${s0}'` : typeof s0 === 'number' ? `fd ${s0}` : 'a stream';
      bad(`options.input is written to the command's stdin, but options.stdio makes stdin ${what}: drop input, or make stdin 'pipe'`);
    }
  }
}

/** Stops the tree once: killSignal first (a chance to clean up), SIGKILL after the grace period. */
function stopRun(s: RunState, why: 'timeout' | 'abort' | 'maxBuffer'): void {
  if (s.stopped) return;
  s.stopped = why;
  if (s.forceKillAfter === 0 || s.killSignal === 'SIGKILL' || s.killSignal === os.constants.signals.SIGKILL) {
    s.child.kill('SIGKILL');
    return;
  }
  s.child.kill(s.killSignal);
  s.forceTimer = setTimeout(() => s.child.kill('SIGKILL'), s.forceKillAfter);
}

/** Keeps a stream's output up to maxBuffer, and stops the tree past it. */
function collectOutput(s: RunState, i: 0 | 1, stream: NodeJS.ReadableStream | null): void {
  stream?.on('data', (b: Buffer) => {
    const room = s.maxBuffer - s.sizes[i];
    if (room <= 0) {
      stopRun(s, 'maxBuffer');
      return;
    }
    const kept = b.length > room ? b.subarray(0, room) : b;
    s.sizes[i] += kept.length;
    s.chunks[i].push(kept);
    if (s.all) s.interleaved.push(kept);
    if (b.length > room) stopRun(s, 'maxBuffer');
  });
}

/** Watches the started command: its start error, its output, the timeout and the AbortSignal; feeds its stdin. */
function startCollecting(o: RunSettings, child: SandboxedProcess): RunState {
  const s: RunState = { ...o, child, startError: null, chunks: [[], []], interleaved: [], sizes: [0, 0], stopped: null, onAbort: () => stopRun(s, 'abort') };
  child.once('error', (e) => (s.startError = e));
  collectOutput(s, 0, child.stdout);
  collectOutput(s, 1, child.stderr);
  s.timer = s.timeout ? setTimeout(() => stopRun(s, 'timeout'), s.timeout) : undefined;
  s.signal?.addEventListener('abort', s.onAbort, { once: true });
  if (child.stdin) {
    if (s.input !== undefined) child.stdin.end(s.input);
    else child.stdin.end();
  }
  return s;
}

/** Settles run()'s promise once the command closed: its start error, its result, or (reject: true) its failure. */
function finishRun(
  s: RunState,
  command: string,
  code: number | null,
  sig: NodeJS.Signals | null,
  resolve: (r: RunResult<string | Buffer>) => void,
  reject: (e: unknown) => void,
): void {
  if (s.timer) clearTimeout(s.timer);
  if (s.forceTimer) clearTimeout(s.forceTimer);
  s.signal?.removeEventListener('abort', s.onAbort);
  if (s.startError) {
    reject(s.startError);
    return;
  }
  void s.child.exited.then((info: ExitResult) => {
    const result = runResult(s, info, code, sig);
    if (s.rejectOnFailure && (s.stopped !== null || code !== 0)) {
      reject(runFailure(result, s.stopped, command, s.maxBuffer, s.timeout));
      return;
    }
    resolve(result);
  }, reject);
}

/** The RunResult of a command that ran: its output, how it ended, and whether that looks like a denial. */
function runResult(s: RunState, info: ExitResult, code: number | null, sig: NodeJS.Signals | null): RunResult<string | Buffer> {
  const { child, encoding, stopped } = s;
  const out = Buffer.concat(s.chunks[0]);
  const err = Buffer.concat(s.chunks[1]);
  const text = (b: Buffer) => (encoding === 'buffer' ? b : b.toString(encoding));
  const sandboxType = sandboxTypeOf(child.enforcement);
  return {
    stdout: text(out),
    stderr: text(err),
    ...(s.all ? { all: text(Buffer.concat(s.interleaved)) } : {}),
    code,
    signal: sig,
    durationMs: info.durationMs,
    timedOut: stopped === 'timeout',
    aborted: stopped === 'abort',
    maxBufferExceeded: stopped === 'maxBuffer',
    killed: stopped !== null,
    ...(info.limitExceeded ? { limitExceeded: info.limitExceeded } : {}),
    ...(info.cleanupLeft ? { cleanupLeft: info.cleanupLeft } : {}),
    sandboxDenied: isLikelySandboxDenied(sandboxType, code, sig, out.toString('utf8') + err.toString('utf8')),
    enforcement: child.enforcement,
    ...(child.changes ? { changes: child.changes } : {}),
  };
}

/** The rejection of run({ reject: true }); `detail.result` carries the RunResult. */
function runFailure(
  result: RunResult<string | Buffer>,
  stopped: 'timeout' | 'abort' | 'maxBuffer' | null,
  command: string,
  maxBuffer: number,
  timeout: number | undefined,
): SandboxError {
  const detail = { result };
  if (stopped === 'timeout') return new SandboxError('ETIMEDOUT', `${command} timed out after ${timeout} ms; the process tree was stopped`, { detail });
  if (stopped === 'abort') return new SandboxError('EABORTED', `${command} was aborted; the process tree was stopped`, { detail });
  if (stopped === 'maxBuffer') return new SandboxError('EMAXBUFFER', `${command}: output exceeded maxBuffer (${maxBuffer} bytes); the process tree was stopped`, { detail });
  const how = result.limitExceeded
    ? `was stopped: ${result.limitExceeded.message}`
    : result.signal
      ? `was killed by ${result.signal}`
      : `exited with code ${result.code}`;
  return new SandboxError('ECOMMAND_FAILED', `${command} ${how}`, { detail });
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
  // macOS enforces through sandbox-exec; the addon is not needed there to spawn.
  if (process.platform === 'darwin') {
    return { ...backend().probe(), addonLoaded: binding !== undefined, ...(error ? { addonError: error.message } : {}) };
  }
  if (!binding) {
    return { platform: process.platform, arch: process.arch, addonLoaded: false, addonError: error?.message, defaultMode: null, features: {} };
  }
  return backend().probe();
}

/**
 * A Codex-compatible exec-server (lib/exec-server) whose processes start through spawnPrepared.
 * The spawn is passed in, so lib/exec-server never imports this file.
 */
export function createExecServer(options: CreateExecServerOptions): Promise<ExecServer> {
  return import('./exec-server').then((m) => m.createExecServer({ spawnPrepared, ...options }));
}
