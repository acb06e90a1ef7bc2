/**
 * process-sandbox/srt: a drop-in for `@anthropic-ai/sandbox-runtime`'s SandboxManager, over our
 * sandbox. Same settings, same calls; see docs/srt.md for what maps how and what is refused.
 *
 *   import { SandboxManager } from 'process-sandbox/srt';
 *   await SandboxManager.initialize(config);
 *   const cmd = await SandboxManager.wrapWithSandbox('npm test');
 *   spawn(cmd, { shell: true, stdio: 'inherit' });
 *
 * wrapWithSandbox returns a command line that runs our CLI (`process-sandbox srt`) with the
 * settings inline (base64, in a single-quoted argument the caller's shell does not interpret):
 * no settings file exists that a sandboxed command could rewrite for a later run. spawnSandboxed
 * runs in-process, without that extra process: the fast path.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { isTimerMs, MAX_TIMER_MS, SandboxError } from '../errors';
import { ManagedProxy, probe } from '../index';
import { networkRestrictionOf, toPolicy, validateConfig, type MappedConfig, type SandboxRuntimeConfig } from './config';
import { missDecider, spawnMapped, srtLookup, statusOf, violationLine, type SandboxAskCallback } from './runtime';
import { AttachServer } from './attach';
import { ELECTRON_AS_NODE_SAVED, UNSET } from './electron-env';
import { KEY_LENGTH, SandboxViolationStore, shouldIgnore, type SandboxViolationEvent } from './violations';

export type {
  SandboxRuntimeConfig,
  NetworkConfig,
  FilesystemConfig,
  FilesystemPathEntry,
  IgnoreViolationsConfig,
  CredentialsConfig,
} from './config';
export { validateConfig as parseSrtConfig } from './config';
export { SandboxViolationStore, type SandboxViolationEvent } from './violations';
export type { SandboxAskCallback } from './runtime';

export interface WrapWithSandboxOptions {
  /** Attribution key for violations (default: the command); first 100 characters count. */
  commandId?: string;
  /** What the invocation represents (reported as each violation's `command`). */
  commandText?: string;
}

export interface SpawnSandboxedOptions {
  /** Inner shell (default bash). */
  binShell?: string;
  customConfig?: Partial<SandboxRuntimeConfig>;
  cwd?: string;
  timeoutMs?: number;
  commandId?: string;
  commandText?: string;
  /** The command's environment (default: process.env, as srt passes it). */
  env?: Readonly<Record<string, string>>;
}

export interface SandboxedProcess {
  readonly pid: number;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  wait(): Promise<{ exitCode: number; timedOut: boolean }>;
  kill(): void;
  dispose(): void;
}

export interface SandboxDependencyCheck {
  errors: string[];
  warnings: string[];
}

/** Settings inline on a command line stay below one argument's limit (MAX_ARG_STRLEN, 128 KiB). */
const MAX_INLINE = 120 * 1024;

interface Wrapped {
  key: string;
  commandText: string;
  eventsFile: string;
  offset: number;
}

let config: SandboxRuntimeConfig | undefined;
let ask: SandboxAskCallback | undefined;
let hostProxy: { proxy: ManagedProxy; port: number; detach: () => Promise<void> } | undefined;
let stateDir: string | undefined;
const wrapped: Wrapped[] = [];
// The fast line's host side (lib/srt/attach.ts), made with the state directory; null: unavailable.
let attach: AttachServer | null | undefined;
/** One wrapped command: the CLI line's argv and what the attached line starts in-process. */
interface WrapPlan {
  argv: string[];
  command: string;
  binShell?: string;
  mapped: MappedConfig;
  key: string;
  commandText: string;
}
const store = new SandboxViolationStore();

function requireConfig(): SandboxRuntimeConfig {
  if (!config) throw new SandboxError('EINVALID_ARGUMENT', 'SandboxManager is not initialized: call SandboxManager.initialize(config) first');
  return config;
}

/** srt's per-command override: each top-level key replaced, network and filesystem merged. */
function merged(custom?: Partial<SandboxRuntimeConfig>): SandboxRuntimeConfig {
  const base = requireConfig();
  if (!custom) return base;
  return {
    ...base,
    ...custom,
    network: { ...base.network, ...(custom.network ?? {}) },
    filesystem: { ...base.filesystem, ...(custom.filesystem ?? {}) },
  } as SandboxRuntimeConfig;
}

function addViolation(line: string, key: string, commandText: string): void {
  if (shouldIgnore(line, commandText, config?.ignoreViolations)) return;
  store.addViolation({ line, command: commandText, encodedCommand: key.slice(0, KEY_LENGTH), timestamp: new Date() });
}

/** Reads the refusals the wrapped commands' CLIs appended since the last look. */
function ingest(): void {
  for (const w of wrapped) {
    let text: string;
    try {
      // Non-blocking and regular files only: a FIFO in its place must not stall the host.
      const fd = fs.openSync(w.eventsFile, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
      try {
        const st = fs.fstatSync(fd);
        if (!st.isFile()) continue;
        const size = st.size;
        if (size <= w.offset) continue;
        const buf = Buffer.alloc(Math.min(size - w.offset, 1 << 20));
        const n = fs.readSync(fd, buf, 0, buf.length, w.offset);
        text = buf.subarray(0, n).toString('utf8');
      } finally {
        fs.closeSync(fd);
      }
    } catch {
      continue;
    }
    const end = text.lastIndexOf('\n');
    if (end < 0) continue;
    w.offset += Buffer.byteLength(text.slice(0, end + 1));
    for (const l of text.slice(0, end).split('\n')) {
      // Only the shape the CLI writes is taken; the line is ours to phrase again.
      const m = /^deny network-outbound ([^\s]{1,300}) \(([a-z_ -]{1,80})\)$/.exec(l);
      if (m) addViolation(`deny network-outbound ${m[1]} (${m[2]})`, w.key, w.commandText);
    }
  }
}

/** Single quotes for sh: everything literal; a quote is closed, escaped, reopened. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function cliPath(): string {
  // dist/srt/index.js -> dist/cli.js; from the sources (tests) the built CLI.
  const built = path.join(__dirname, '..', 'cli.js');
  if (fs.existsSync(built)) return built;
  return path.join(__dirname, '..', '..', 'dist', 'cli.js');
}

function planWrap(command: string, binShell: string | undefined, custom: Partial<SandboxRuntimeConfig> | undefined, options?: WrapWithSandboxOptions): WrapPlan {
  const cfg = merged(custom);
  const cwd = process.cwd();
  // Validated and mapped now, so a setting we refuse throws here, as srt's wrap throws.
  const mapped = toPolicy(validateConfig(cfg), cwd);
  const inline = Buffer.from(JSON.stringify(cfg)).toString('base64');
  if (inline.length > MAX_INLINE) {
    throw new SandboxError('EINVALID_POLICY', `srt settings are too large to pass on a command line (${inline.length} bytes encoded, at most ${MAX_INLINE})`);
  }
  if (!stateDir) stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-srt-'));
  const eventsFile = path.join(stateDir, `events-${wrapped.length}-${process.pid}.log`);
  fs.writeFileSync(eventsFile, '', { mode: 0o600, flag: 'wx' });
  const key = options?.commandId ? options.commandId : command;
  const commandText = options?.commandText ?? command;
  wrapped.push({ key, commandText, eventsFile, offset: 0 });
  const argv = [
    process.execPath,
    cliPath(),
    'srt',
    '--settings-inline',
    inline,
    '--resolve-from',
    cwd,
    '--violations-file',
    eventsFile,
    ...(binShell ? ['--shell', binShell] : []),
    '-c',
    command,
  ];
  return { argv, command, binShell, mapped, key, commandText };
}

/**
 * srt's SandboxManager calls that have nothing to stand on here: each throws, naming itself and
 * what to do instead (docs/srt.md "Refused by name"). Listed so the surface test can tell a refusal
 * from an omission.
 */
export const SRT_REFUSED_CALLS: Readonly<Record<string, string>> = {
  registerCommandNetworkLists:
    "a wrapped command's proxy runs in its own process, out of this manager's reach; give that command's extra hosts as customConfig.network.allowedDomains (wrapWithSandbox's third argument)",
  getSentinelRegistry: 'credential masking (credentials mode "mask") is not offered',
  getAwsPairRegistry: 'credential masking (credentials.awsPairs) is not offered',
  getMaskedFileStore: 'credential masking (credentials.files mode "mask") is not offered',
};

function refusedCall(name: keyof typeof SRT_REFUSED_CALLS): never {
  throw new SandboxError('EUNSUPPORTED_POLICY', `srt call SandboxManager.${name} is not supported by process-sandbox: ${SRT_REFUSED_CALLS[name]}`);
}

function mappedPaths(): MappedConfig['paths'] | undefined {
  return config ? toPolicy(config, process.cwd()).paths : undefined;
}

export const SandboxManager = {
  askCallbackDenyReason: true as const,

  async initialize(runtimeConfig: SandboxRuntimeConfig, sandboxAskCallback?: SandboxAskCallback): Promise<void> {
    const cfg = validateConfig(runtimeConfig);
    const mapped = toPolicy(cfg, process.cwd());
    if (hostProxy) await SandboxManager.reset();
    config = cfg;
    ask = sandboxAskCallback;
    // A host-side listener enforcing the same lists: getProxyPort()/getSocksProxyPort() (HTTP and
    // SOCKS5 share it). Sandboxed commands get proxies of their own, inside their namespaces.
    const proxyPolicy = (mapped.policy.network as { proxy: { allow: string[]; deny: string[]; allowLocal: boolean } }).proxy;
    const proxy = await ManagedProxy.start({
      policy: proxyPolicy,
      closeWithLastProcess: false,
      lookup: srtLookup(mapped),
      decider: missDecider(ask, mapped),
      onAudit: (e) => {
        if (e.decision === 'deny') addViolation(violationLine(e), 'srt-host-proxy', 'srt-host-proxy');
      },
    });
    const a = await proxy.attach('srt-host');
    hostProxy = { proxy, port: a.port, detach: a.detach };
  },

  isSupportedPlatform(): boolean {
    return ['linux', 'darwin', 'win32'].includes(process.platform) && probe().defaultMode !== null;
  },

  isSandboxingEnabled(): boolean {
    return config !== undefined;
  },

  /** What this host lacks for a sandbox (no bubblewrap, socat or ripgrep is needed). */
  checkDependencies(): SandboxDependencyCheck {
    const p = probe();
    if (!p.addonLoaded) return { errors: [p.addonError ?? 'the process-sandbox addon did not load'], warnings: [] };
    if (p.defaultMode === null) return { errors: ['no sandbox mode is available on this host (process-sandbox probe says why)'], warnings: [] };
    return { errors: [], warnings: [] };
  },

  async checkDependenciesAsync(): Promise<SandboxDependencyCheck> {
    return SandboxManager.checkDependencies();
  },

  getConfig(): SandboxRuntimeConfig | undefined {
    return config;
  },

  getProxyPort(): number | undefined {
    return hostProxy?.port;
  },
  getSocksProxyPort(): number | undefined {
    return hostProxy?.port;
  },
  async waitForNetworkInitialization(): Promise<boolean> {
    return hostProxy !== undefined;
  },
  getAllowUnixSockets(): string[] | undefined {
    return config?.network.allowUnixSockets;
  },
  getAllowLocalBinding(): boolean | undefined {
    return config?.network.allowLocalBinding;
  },
  getIgnoreViolations(): Record<string, string[]> | undefined {
    return config?.ignoreViolations;
  },
  getLinuxGlobPatternWarnings(): string[] {
    return [];
  },

  // ---- srt's other getters: what this manager enforces, in srt's shapes ----
  /** The read denies (patterns expanded to what exists now) and the paths re-opened inside them. */
  getFsReadConfig(): { denyOnly: string[]; allowWithinDeny: string[] } {
    const p = mappedPaths();
    return { denyOnly: p?.denyRead ?? [], allowWithinDeny: p?.allowRead ?? [] };
  },
  /** The writable roots and the paths kept read-only in them (the mandatory deny set on top). */
  getFsWriteConfig(): { allowOnly: string[]; denyWithinAllow: string[] } {
    const p = mappedPaths();
    return { allowOnly: p?.allowWrite ?? [], denyWithinAllow: p?.denyWrite ?? [] };
  },
  /** As srt: `{}` before initialize. */
  getNetworkRestrictionConfig(): { allowedHosts?: string[]; deniedHosts?: string[] } {
    return config ? networkRestrictionOf(config) : {};
  },
  getAllowMachLookup(): string[] | undefined {
    return config?.network.allowMachLookup;
  },
  getEnableWeakerNestedSandbox(): boolean | undefined {
    return config?.enableWeakerNestedSandbox;
  },
  /** The host listener takes no credential (srt answers undefined too when its proxy has none). */
  getProxyAuthToken(): string | undefined {
    return undefined;
  },
  /** No socat bridges exist: each command's proxy listens inside its own sandbox. */
  getLinuxHttpSocketPath(): string | undefined {
    return undefined;
  },
  getLinuxSocksSocketPath(): string | undefined {
    return undefined;
  },
  /** Neither of srt's Windows backends (mxc, srt-win) is used. */
  getWindowsBackend(): undefined {
    return undefined;
  },
  /** No TLS is terminated (`mitmProxy` and `tlsTerminate` are refused). */
  getMitmCA(): undefined {
    return undefined;
  },
  getWindowsProfileRead(): undefined {
    return undefined;
  },
  getWindowsProfileReadWarnings(): never[] {
    return [];
  },
  getWindowsProfileReadRefresh(): undefined {
    return undefined;
  },
  registerCommandNetworkLists(_commandId: string, _lists: { allowedDomains?: string[] }): never {
    return refusedCall('registerCommandNetworkLists');
  },
  /** A no-op, as srt's is for an id with no list (none can be registered here). */
  unregisterCommandNetworkLists(_commandId: string): void {},
  getSentinelRegistry(): never {
    return refusedCall('getSentinelRegistry');
  },
  getAwsPairRegistry(): never {
    return refusedCall('getAwsPairRegistry');
  },
  getMaskedFileStore(): never {
    return refusedCall('getMaskedFileStore');
  },

  async wrapWithSandbox(
    command: string,
    binShell?: string,
    customConfig?: Partial<SandboxRuntimeConfig>,
    abortSignal?: AbortSignal,
    options?: WrapWithSandboxOptions,
  ): Promise<string> {
    if (abortSignal?.aborted) throw new SandboxError('EABORTED', 'wrapWithSandbox was aborted');
    return wrappedLine(planWrap(command, binShell, customConfig, options));
  },

  async wrapWithSandboxArgv(
    command: string,
    binShell?: string,
    customConfig?: Partial<SandboxRuntimeConfig>,
    abortSignal?: AbortSignal,
    _cwd?: string,
    options?: WrapWithSandboxOptions,
  ): Promise<{ argv: string[]; env: NodeJS.ProcessEnv }> {
    if (abortSignal?.aborted) throw new SandboxError('EABORTED', 'wrapWithSandboxArgv was aborted');
    const line = wrappedLine(planWrap(command, binShell, customConfig, options));
    return { argv: ['/bin/sh', '-c', line], env: { ...process.env } };
  },

  /** Runs `command` in our sandbox from this process: no wrapper process, no shell of the caller's. */
  async spawnSandboxed(command: string, options: SpawnSandboxedOptions = {}): Promise<SandboxedProcess> {
    if (options.timeoutMs !== undefined && !isTimerMs(options.timeoutMs)) {
      throw new SandboxError('EINVALID_ARGUMENT', `timeoutMs must be a positive number of milliseconds, at most ${MAX_TIMER_MS} (Node's timer limit), got ${String(options.timeoutMs)}`);
    }
    const cfg = merged(options.customConfig);
    const cwd = options.cwd ?? process.cwd();
    const mapped = toPolicy(validateConfig(cfg), cwd);
    const key = options.commandId ? options.commandId : command;
    const text = options.commandText ?? command;
    const child = spawnMapped({
      command,
      binShell: options.binShell,
      cwd,
      env: { ...(options.env ?? process.env) },
      stdio: 'pipe',
      mapped,
      ask,
      onDeny: (line) => addViolation(line, key, text),
    });
    let timedOut = false;
    const timer =
      options.timeoutMs !== undefined
        ? setTimeout(() => {
            timedOut = true;
            child.kill('SIGKILL');
          }, options.timeoutMs)
        : undefined;
    // Settled on 'close' (the command exited and its stdout and stderr have ended), as Node's
    // 'close': `exited` alone can come first, while output is still in the pipe.
    const streamsEnded = new Promise<void>((resolve) => child.once('close', () => resolve()));
    // As Node's child_process does on exit: a stream nobody reads (no 'data' or 'readable'
    // listener, never paused or piped) is drained, so 'close' comes without a reader.
    child.exited.then(
      () => {
        for (const st of [child.stdout, child.stderr]) {
          if (st && st.readableFlowing === null && st.listenerCount('data') === 0 && st.listenerCount('readable') === 0) st.resume();
        }
      },
      () => {},
    );
    const done = Promise.all([child.exited, streamsEnded]).then(([r]) => ({ exitCode: statusOf(r.code, r.signal), timedOut }));
    done.finally(() => timer && clearTimeout(timer)).catch(() => {});
    // A command that could not start is reported as srt reports it: the promise rejects.
    await new Promise<void>((resolve, reject) => {
      if (child.pid !== undefined) return resolve();
      child.once('spawn', () => resolve());
      child.once('error', reject);
    });
    return {
      pid: child.pid!,
      stdin: child.stdin,
      stdout: child.stdout,
      stderr: child.stderr,
      wait: () => done,
      kill: () => {
        child.kill('SIGKILL');
      },
      dispose: () => {},
    };
  },

  getSandboxViolationStore(): SandboxViolationStore {
    ingest();
    return store;
  },

  annotateStderrWithSandboxFailures(command: string, stderr: string): string {
    if (!config) return stderr;
    ingest();
    const v = store.getViolationsForCommand(command);
    if (v.length === 0) return stderr;
    return `${stderr}${os.EOL}<sandbox_violations>${os.EOL}${v.map((x) => x.line + os.EOL).join('')}</sandbox_violations>`;
  },

  getViolationsForCommand(command: string): SandboxViolationEvent[] {
    ingest();
    return store.getViolationsForCommand(command);
  },

  /** Replaces the config for what is wrapped or spawned next, and the host proxy's lists now. */
  updateConfig(newConfig: SandboxRuntimeConfig): void {
    const cfg = validateConfig(newConfig);
    const mapped = toPolicy(cfg, process.cwd());
    config = cfg;
    const p = (mapped.policy.network as { proxy: { allow: string[]; deny: string[] } }).proxy;
    hostProxy?.proxy.update({ allow: p.allow, deny: p.deny });
  },

  /** Collects the finished commands' refusals; no mount artefacts exist to remove. */
  cleanupAfterCommand(): void {
    ingest();
  },

  async reset(): Promise<void> {
    ingest();
    const h = hostProxy;
    hostProxy = undefined;
    config = undefined;
    ask = undefined;
    wrapped.length = 0;
    attach?.close();
    attach = undefined;
    if (stateDir) {
      fs.rmSync(stateDir, { recursive: true, force: true });
      stateDir = undefined;
    }
    if (h) {
      await h.detach().catch(() => {});
      await h.proxy.close();
    }
  },
};

/**
 * The line for one wrapped command: the host-attached line where this host can serve it
 * (lib/srt/attach.ts: no Node start per command), with the CLI line as its fallback. The CLI line
 * runs process.execPath as Node also where that is an Electron app (ELECTRON_RUN_AS_NODE, which
 * the CLI puts back as the caller had it before the command sees its environment).
 */
function wrappedLine(w: WrapPlan): string {
  // `exec`: the caller's shell is replaced, so its pid and signals are the CLI's.
  const cli = `exec env "${ELECTRON_AS_NODE_SAVED}=\${ELECTRON_RUN_AS_NODE-${UNSET}}" ELECTRON_RUN_AS_NODE=1 ${w.argv.map(shellQuote).join(' ')}`;
  if (attach === undefined) attach = (stateDir && AttachServer.create(stateDir)) || null;
  if (!attach) return cli;
  return attach.wrap(
    {
      start: (stdio, cwd, env) =>
        spawnMapped({ command: w.command, binShell: w.binShell, cwd, env, stdio, mapped: w.mapped, ask, onDeny: (l) => addViolation(l, w.key, w.commandText) }),
    },
    cli,
  );
}

/** srt's spawnSandboxed as a function of its own: our fast path. */
export function spawnSandboxed(command: string, options?: SpawnSandboxedOptions): Promise<SandboxedProcess> {
  return SandboxManager.spawnSandboxed(command, options);
}

