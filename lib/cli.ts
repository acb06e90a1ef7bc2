#!/usr/bin/env node
/**
 * process-sandbox CLI.
 *
 *   process-sandbox run [options] [--] <command> [args...]
 *   process-sandbox probe [--json]
 *   process-sandbox revert <dir> | changes [--json] <dir> (lib/changes/cli.ts)
 *   process-sandbox exec-server --listen stdio|ws://IP:PORT (lib/exec-server/cli.ts)
 *   process-sandbox --help | --version | help [subcommand]
 *
 * Subcommands live in one table (COMMANDS): a new one adds an entry with its usage and handler.
 *
 * Exit status: the command's own; 128+N when it died of signal N; 125 when the sandbox cannot be
 * set up, the policy cannot be enforced or the usage is wrong; 126 found but not executable; 127
 * not found. stdio is inherited, so streams pass straight through without buffering.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { isTimerMs, MAX_TIMER_MS, SandboxError, exitStatusForError } from './errors';
import { probe, spawn, type AuditEvent, type SandboxPolicy } from './index';
import { withoutSecretEnv } from './permissions';
import { apparmorProfile, WIDE_GRANT } from './platform/linux-apparmor';
import { restoreElectronRunAsNode } from './srt/electron-env';
import { CHANGES_USAGE, changesOption, changesReport, cmdChanges, cmdRevert, REVERT_USAGE, RUN_CHANGES_USAGE } from './changes/cli';

const RUN_USAGE = `Usage: process-sandbox run [options] [--] <command> [args...]

Options are read up to the first argument that is not an option (or up to --); everything from
there on is the command and its arguments, passed through untouched. Use -- when the command
itself starts with '-'. An option's value may follow it (--cwd /tmp) or be joined with '='
(--cwd=/tmp).

  --cwd <dir>            working directory (default: current directory)
  --write <path>         writable root, repeatable (default: the cwd); --write none = read-only
  --read <path>          restrict reads to these roots, repeatable (default: whole filesystem)
  --deny-read <path>     make a path unreadable, repeatable
  --protect <path>       keep a path inside a writable root read-only, repeatable
  --network <mode>       none (default) | proxy | full; proxy needs at least one --allow-domain
  --allow-domain <host>  allow a domain through the proxy, repeatable (implies --network proxy);
                         host:port allows that port only (api.example.com:443, *.example.com:8443)
  --deny-domain <host>   deny a domain through the proxy, repeatable
  --allow-local          let allowed domains reach loopback/private addresses
  --tmp <mode>           private (default) | host | none
  --caches <mode>        private (default: a private copy of ~/.npm, ~/.cache, ~/.cargo ...; nothing
                         written reaches the host's) | host-readonly | host-writable
  --mode <mode>          auto (default) | isolated | landlock
  --degraded             run even where a guarantee the policy asks for cannot be held
                         (Landlock mode; the report lists it in degradedBy)
  --proc-privacy         Landlock mode: hide other processes' /proc entries and /proc/net
                         (every read-only open then goes through the supervisor: slower)
  --env <KEY=VALUE>      set a variable, repeatable
  --keep-env             keep every variable (default: drop ones that look like secrets)
  --timeout <seconds>    kill the command and everything it started after this long (exit 137;
                         at most 2147483, about 24.8 days)
${RUN_CHANGES_USAGE}  --no-sandbox           run without a sandbox
  --json                 print a JSON result (exit info + enforcement report) as the last line of stderr
  --json-fd <n>          write the JSON result to file descriptor n instead (e.g. 3>result.json)
  --json-file <path>     write the JSON result to a file instead (created before the command starts)
  -h, --help             print this help
`;

const PROBE_USAGE = `Usage: process-sandbox probe [--json]

Prints what this host can enforce, without running anything. Exit 0 when a sandbox mode is
available, 1 when nothing can be enforced.
  --json                 the full report as JSON on stdout
`;

const APPARMOR_USAGE = `Usage: process-sandbox apparmor-profile [--node <path>]

Prints an AppArmor profile that lets the Node binary in use (or <path>) create user namespaces,
so isolated mode works where kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu 23.10 and
later). Its first lines say how to install it.
${WIDE_GRANT.join('\n')}
  Example: process-sandbox apparmor-profile --node /opt/myapp/bin/node
Where AppArmor's parser predates the userns rule (no /etc/apparmor.d/abi/4.0: AppArmor 3, as in
Debian 12), the profile leaves the rule out: it is then an unconfined profile for the binary.
  --node <path>          the Node binary to write it for (default: this one, symlinks resolved)
`;

interface Subcommand {
  summary: string;
  usage: string;
  main(argv: string[]): Promise<number> | number;
}

/** Loaded on use: the exec-server (and its ws dependency) costs nothing to `run`. */
const execServerCli = () => require('./exec-server/cli') as typeof import('./exec-server/cli');
/** Loaded on use, as the exec-server: the srt drop-in's command line (lib/srt/cli.ts). */
const srtCli = () => require('./srt/cli') as typeof import('./srt/cli');

const COMMANDS: Record<string, Subcommand> = {
  run: { summary: 'run a command inside the sandbox', usage: RUN_USAGE, main: (argv) => cmdRun(argv) },
  probe: { summary: 'report what this host can enforce', usage: PROBE_USAGE, main: (argv) => cmdProbe(argv) },
  revert: { summary: "undo what a 'run --changes record' command changed (its journal directory)", usage: REVERT_USAGE, main: (argv) => cmdRevert(argv) },
  changes: { summary: "list what a 'run --changes record' command changed (its journal directory)", usage: CHANGES_USAGE, main: (argv) => cmdChanges(argv) },
  'apparmor-profile': {
    summary: "print an AppArmor profile that lets a Node binary, and all it runs, use user namespaces (see its --help)",
    usage: APPARMOR_USAGE,
    main: (argv) => cmdApparmorProfile(argv),
  },
  'exec-server': {
    summary: 'serve Codex exec-server JSON-RPC over stdio or WebSocket',
    get usage() {
      return execServerCli().EXEC_SERVER_USAGE;
    },
    main: (argv) => execServerCli().execServerMain(argv),
  },
  srt: {
    summary: 'run a command under sandbox-runtime (srt) settings: a drop-in for srt',
    get usage() {
      return srtCli().SRT_USAGE;
    },
    main: (argv) => srtCli().srtMain(argv),
  },
};

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((k) => k.length));
  return [
    'Usage: process-sandbox <command> [options]',
    '',
    'Commands:',
    ...Object.entries(COMMANDS).map(([k, c]) => `  ${k.padEnd(width)}  ${c.summary}`),
    '',
    'process-sandbox run [options] [--] <command> [args...]',
    'process-sandbox probe [--json]',
    'process-sandbox revert <dir> | changes [--json] <dir>',
    'process-sandbox exec-server --listen stdio|ws://IP:PORT [options]',
    'process-sandbox apparmor-profile [--node <path>]',
    'process-sandbox srt [--settings FILE] [-c CMD | CMD ARGS...]',
    "Run 'process-sandbox <command> --help' for a command's options; --version prints the version.",
    '',
  ].join('\n');
}

function version(): string {
  try {
    return (JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/** The --json-file name no longer refers to the file the CLI opened (exit 125). */
class JsonFileReplaced extends Error {}

/** A usage mistake: reported as one line plus a hint, exit 125. */
class UsageError extends Error {
  constructor(
    message: string,
    readonly sub = 'run',
  ) {
    super(message);
  }
}

interface RunArgs {
  cwd: string;
  write: string[];
  read: string[];
  denyRead: string[];
  protect: string[];
  network?: string;
  allowDomains: string[];
  denyDomains: string[];
  allowLocal: boolean;
  tmp?: string;
  caches?: string;
  mode?: string;
  degraded: boolean;
  procPrivacy: boolean;
  env: Array<[string, string]>;
  keepEnv: boolean;
  timeout?: number;
  noSandbox: boolean;
  json: boolean;
  /** --json-fd: where the JSON result goes (default: stderr). */
  jsonFd?: number;
  /** --json-file */
  jsonFile?: string;
  /** --changes, --changes-dir, --changes-max-bytes (lib/changes/cli.ts) */
  changes?: string;
  changesDir?: string;
  changesMaxBytes?: string;
  help: boolean;
  command: string[];
}

/** Options of `run` that take a value (`--opt value` or `--opt=value`). */
const RUN_VALUE_FLAGS = new Set([
  '--cwd', '--write', '--read', '--deny-read', '--protect', '--network', '--allow-domain', '--deny-domain',
  '--tmp', '--mode', '--caches', '--env', '--timeout', '--json-fd', '--json-file',
  '--changes', '--changes-dir', '--changes-max-bytes',
]);
/** Options of `run` that take none: `--json=1` is refused, not read as --json. */
const RUN_BOOLEAN_FLAGS = new Set(['--allow-local', '--degraded', '--proc-privacy', '--keep-env', '--no-sandbox', '--json', '--help']);
/** Options of `run` that shape the sandbox: meaningless with --no-sandbox. */
const RUN_POLICY_FLAGS = new Set([
  '--write', '--read', '--deny-read', '--protect', '--network', '--allow-domain', '--deny-domain',
  '--allow-local', '--tmp', '--mode', '--caches', '--degraded', '--proc-privacy',
  '--changes', '--changes-dir', '--changes-max-bytes',
]);

export function parseRunArgs(argv: string[], cwdDefault = process.cwd()): RunArgs {
  const a: RunArgs = {
    cwd: cwdDefault, write: [], read: [], denyRead: [], protect: [], allowDomains: [], denyDomains: [],
    allowLocal: false, degraded: false, procPrivacy: false, env: [], keepEnv: false, noSandbox: false, json: false, help: false, command: [],
  };
  /** The policy flags given, in order, for the --no-sandbox check. */
  const policyFlags: string[] = [];
  let jsonFlag = false;
  let i = 0;
  // `--opt=value`: the value after the first '='. A value flag without '=' takes the next argument.
  let inline: string | undefined;
  const value = (flag: string): string => {
    if (inline !== undefined) {
      if (inline === '') throw new UsageError(`${flag}= needs a value after the '='`);
      return inline;
    }
    const v = argv[++i];
    if (v === undefined) throw new UsageError(`${flag} needs a value`);
    return v;
  };
  for (; i < argv.length; i++) {
    let f = argv[i];
    if (f === '--') {
      a.command = argv.slice(i + 1);
      break;
    }
    inline = undefined;
    const eq = f.startsWith('--') ? f.indexOf('=') : -1;
    if (eq > 2) {
      const name = f.slice(0, eq);
      if (!RUN_VALUE_FLAGS.has(name)) {
        if (RUN_BOOLEAN_FLAGS.has(name)) {
          throw new UsageError(`${name} takes no value, got ${f} (drop the '=${f.slice(eq + 1)}')`);
        }
        throw new UsageError(`unknown option: ${name}`);
      }
      inline = f.slice(eq + 1);
      f = name;
    }
    if (RUN_POLICY_FLAGS.has(f) && !policyFlags.includes(f)) policyFlags.push(f);
    switch (f) {
      case '--cwd': a.cwd = path.resolve(value(f)); break;
      case '--write': a.write.push(value(f)); break;
      case '--read': a.read.push(path.resolve(value(f))); break;
      case '--deny-read': a.denyRead.push(path.resolve(value(f))); break;
      case '--protect': a.protect.push(path.resolve(value(f))); break;
      case '--network': a.network = value(f); break;
      case '--allow-domain': a.allowDomains.push(value(f)); break;
      case '--deny-domain': a.denyDomains.push(value(f)); break;
      case '--allow-local': a.allowLocal = true; break;
      case '--tmp': a.tmp = value(f); break;
      case '--caches': a.caches = value(f); break;
      case '--mode': a.mode = value(f); break;
      case '--degraded': a.degraded = true; break;
      case '--proc-privacy': a.procPrivacy = true; break;
      case '--env': {
        const kv = value(f);
        const eq = kv.indexOf('=');
        if (eq <= 0) throw new UsageError(`--env expects KEY=VALUE, got ${kv}`);
        a.env.push([kv.slice(0, eq), kv.slice(eq + 1)]);
        break;
      }
      case '--keep-env': a.keepEnv = true; break;
      case '--timeout': {
        const t = Number(value(f));
        if (!isTimerMs(t * 1000)) throw new UsageError(`--timeout expects a positive number of seconds, at most ${Math.floor(MAX_TIMER_MS / 1000)} (about 24.8 days: Node's timer limit)`);
        a.timeout = t;
        break;
      }
      case '--no-sandbox': a.noSandbox = true; break;
      case '--json': a.json = true; jsonFlag = true; break;
      case '--json-fd': {
        const v = value(f);
        const n = Number(v);
        if (!/^[0-9]+$/.test(v) || n < 1) throw new UsageError(`--json-fd expects a file descriptor number of 1 or more, got ${v}`);
        a.jsonFd = n;
        a.json = true;
        break;
      }
      case '--json-file': a.jsonFile = path.resolve(value(f)); a.json = true; break;
      case '--changes': a.changes = value(f); break;
      case '--changes-dir': a.changesDir = path.resolve(value(f)); break;
      case '--changes-max-bytes': a.changesMaxBytes = value(f); break;
      case '-h':
      case '--help': a.help = true; return a;
      default:
        if (!f.startsWith('-') && a.command.length === 0) {
          a.command = argv.slice(i);
          i = argv.length;
          break;
        }
        throw new UsageError(`unknown option: ${f}`);
    }
  }
  if (a.command.length === 0) throw new UsageError('missing command');
  if (a.jsonFd !== undefined && a.jsonFile !== undefined) throw new UsageError('--json-fd and --json-file are mutually exclusive');
  // Contradictions are refused rather than one of the two silently winning.
  if (jsonFlag && (a.jsonFd !== undefined || a.jsonFile !== undefined)) {
    const other = a.jsonFd !== undefined ? `--json-fd ${a.jsonFd}` : `--json-file ${a.jsonFile}`;
    throw new UsageError(`--json prints the result on stderr and ${other} sends it elsewhere: drop --json (${other.split(' ')[0]} implies it)`);
  }
  if (a.noSandbox && policyFlags.length > 0) {
    throw new UsageError(`--no-sandbox runs the command unrestricted, so ${policyFlags.join(', ')} would be ignored: drop --no-sandbox or ${policyFlags.length > 1 ? 'those options' : policyFlags[0]}`);
  }
  if (a.write.includes('none') && a.write.length > 1) {
    throw new UsageError(`--write none (nothing writable) contradicts --write ${a.write.find((w) => w !== 'none')}: give one or the other`);
  }
  for (const [flag, v, allowed] of [
    ['--network', a.network, ['none', 'proxy', 'full']],
    ['--tmp', a.tmp, ['private', 'host', 'none']],
    ['--caches', a.caches, ['private', 'host-readonly', 'host-writable']],
    ['--mode', a.mode, ['auto', 'isolated', 'landlock']],
    ['--changes', a.changes, ['record', 'stage']],
  ] as const) {
    if (v !== undefined && !(allowed as readonly string[]).includes(v)) throw new UsageError(`${flag} must be one of ${allowed.join(', ')}`);
  }
  try {
    changesOption(a.changes, a.changesDir, a.changesMaxBytes);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  // The API refuses a proxy policy without an allow list; so does the CLI, instead of running
  // with a proxy that denies everything.
  if (a.network === 'proxy' && a.allowDomains.length === 0) {
    throw new UsageError('--network proxy needs at least one --allow-domain <host> (use --network none for no network at all)');
  }
  if (a.network !== undefined && a.network !== 'proxy' && a.allowDomains.length > 0) {
    throw new UsageError(`--allow-domain needs --network proxy, not --network ${a.network}`);
  }
  // --deny-domain and --allow-local shape the proxy; without one they would be dropped silently.
  const proxyOn = a.network === 'proxy' || a.allowDomains.length > 0;
  for (const [flag, given] of [['--deny-domain', a.denyDomains.length > 0], ['--allow-local', a.allowLocal]] as const) {
    if (given && !proxyOn) throw new UsageError(`${flag} applies to the proxy: add --allow-domain <host> (the proxy's allow list) or drop ${flag}`);
  }
  return a;
}

export function policyFromArgs(a: RunArgs): SandboxPolicy | null {
  if (a.noSandbox) return null;
  const write = a.write.length === 0 ? [a.cwd] : a.write.includes('none') ? [] : a.write.map((w) => path.resolve(w));
  let network: SandboxPolicy['network'] = 'none';
  const wantsProxy = a.network === 'proxy' || a.allowDomains.length > 0;
  if (a.network === 'full') network = 'full';
  else if (wantsProxy) {
    network = { proxy: { allow: a.allowDomains, deny: a.denyDomains, allowLocal: a.allowLocal } };
  }
  return {
    filesystem: {
      read: a.read.length ? a.read : 'all',
      write,
      denyRead: a.denyRead,
      protect: a.protect,
      tmp: (a.tmp ?? 'private') as 'private' | 'host' | 'none',
      ...(a.caches ? { caches: a.caches as 'private' | 'host-readonly' | 'host-writable' } : {}),
    },
    network,
    mode: (a.mode ?? 'auto') as 'auto' | 'isolated' | 'landlock',
    degraded: a.degraded,
    ...(a.procPrivacy ? { procPrivacy: true } : {}),
  };
}

/**
 * An API error message in the CLI's words: the policy and option fields spawn() names
 * (`policy.filesystem.write[0]`, `options.cwd`) become the option that produced them
 * (`--write /nonexistent`, `--cwd`), and `degraded: true` becomes `--degraded`.
 */
export function cliMessage(message: string, a: RunArgs): string {
  const fsf = 'policy.filesystem';
  const net = 'policy.network.proxy';
  const indexed: Array<[string, string, readonly string[]]> = [
    // No --write: the cwd is the one writable root (policyFromArgs).
    [`${fsf}.write`, '--write', a.write.length === 0 ? [] : a.write],
    [`${fsf}.read`, '--read', a.read],
    [`${fsf}.denyRead`, '--deny-read', a.denyRead],
    [`${fsf}.protect`, '--protect', a.protect],
    [`${net}.allow`, '--allow-domain', a.allowDomains],
    [`${net}.deny`, '--deny-domain', a.denyDomains],
  ];
  const pairs: Array<[string, string]> = [];
  for (const [field, flag, values] of indexed) {
    // `allow[0] "x"` (a field followed by its value, as pattern errors put it) before `allow[0]`.
    values.forEach((v, i) => pairs.push([`${field}[${i}] ${JSON.stringify(v)}`, `${flag} ${v}`], [`${field}[${i}]`, `${flag} ${v}`]));
  }
  if (a.write.length === 0) pairs.push([`${fsf}.write[0]`, `the working directory ${a.cwd} (writable by default; --write none for read-only)`]);
  // Indexed names first: `policy.filesystem.write` is a prefix of `policy.filesystem.write[0]`.
  for (const [field, flag] of indexed) pairs.push([field, flag]);
  pairs.push(
    [`${fsf}.tmp`, '--tmp'],
    ['policy.network', '--network'],
    ['policy.mode', '--mode'],
    ['degraded: true (CLI --degraded)', '--degraded'],
    ['policy.degraded', '--degraded'],
    ['policy.procPrivacy', '--proc-privacy'],
    ['Drop procPrivacy', 'Drop --proc-privacy'],
    ['procPrivacy', '--proc-privacy'],
    ['degraded: true', '--degraded'],
    ["mode 'landlock'", '--mode landlock'],
    ["mode 'isolated'", '--mode isolated'],
    ['options.cwd', '--cwd'],
    ['options.env.', '--env '],
  );
  let out = message;
  for (const [from, to] of pairs) out = out.split(from).join(to);
  return out;
}

function fail(message: string, status: number): number {
  process.stderr.write(`process-sandbox: ${message}\n`);
  return status;
}

function usageFail(e: UsageError): number {
  process.stderr.write(`process-sandbox: ${e.message}\nTry 'process-sandbox ${e.sub} --help' for the options.\n`);
  return 125;
}

/**
 * Why fd `n` cannot take the JSON result, or null when it can. Node itself holds fds above 2
 * (libuv's epoll, eventfds and signal pipes); writing JSON into one of those crashes the process,
 * so only an fd the caller opened qualifies: a file, a terminal, a socket, or a pipe whose other
 * end is not also held here (every one of Node's internal pipes has both ends in this process).
 */
function jsonFdProblem(n: number): string | null {
  let st: fs.Stats;
  try {
    st = fs.fstatSync(n);
  } catch {
    return 'that file descriptor is not open';
  }
  if (n <= 2 || st.isFile() || st.isCharacterDevice() || st.isSocket()) return null;
  if (process.platform !== 'linux') return 'only a file, a terminal or a socket can take the result here';
  let target: string;
  try {
    target = fs.readlinkSync(`/proc/self/fd/${n}`);
  } catch {
    return 'cannot tell what that file descriptor is';
  }
  if (!target.startsWith('pipe:')) return `that file descriptor is ${target}, not a file, pipe or socket the caller opened`;
  // O_ACCMODE from fdinfo's octal flags: 0 read-only, 1 write-only, 2 read-write.
  const accmode = (fd: string | number): number | null => {
    try {
      const m = /^flags:\s*([0-7]+)/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'));
      return m ? parseInt(m[1], 8) & 3 : null;
    } catch {
      return null;
    }
  };
  if (accmode(n) === 0) return 'that pipe end is open for reading only';
  for (const other of fs.readdirSync('/proc/self/fd')) {
    if (Number(other) === n) continue;
    try {
      if (fs.readlinkSync(`/proc/self/fd/${other}`) === target && accmode(other) === 0) return 'that pipe belongs to the CLI itself (its read end is open here too)';
    } catch {
      /* closed meanwhile */
    }
  }
  return null;
}

/**
 * Where the --json result goes. The file is opened before the command starts: the command may
 * be able to write the directory it lives in, and must not get to swap the name for a symlink
 * the CLI would then write through.
 */
function openJsonSink(a: RunArgs): (obj: unknown) => void {
  if (!a.json) return () => {};
  let fd = 2;
  if (a.jsonFd !== undefined) {
    const why = jsonFdProblem(a.jsonFd);
    if (why) throw new UsageError(`--json-fd ${a.jsonFd}: ${why} (open it for the CLI, e.g. ${a.jsonFd}>result.json)`);
    fd = a.jsonFd;
  } else if (a.jsonFile !== undefined) {
    try {
      fd = fs.openSync(a.jsonFile, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | (fs.constants.O_NOFOLLOW ?? 0), 0o600);
    } catch (e) {
      throw new UsageError(`--json-file ${a.jsonFile}: ${(e as Error).message}`);
    }
  }
  return (obj) => {
    if (a.jsonFile !== undefined) {
      // The command may have written into the file meanwhile, or put another file in its place
      // (it can when the path is inside a writable root). A replaced name is refused: the reader
      // would find the command's file there, not ours.
      const ours = fs.fstatSync(fd);
      let now: fs.Stats | undefined;
      try {
        now = fs.lstatSync(a.jsonFile);
      } catch {
        now = undefined;
      }
      if (!now || now.ino !== ours.ino || now.dev !== ours.dev) {
        fs.closeSync(fd);
        throw new JsonFileReplaced(`--json-file ${a.jsonFile} was replaced while the command ran; no result was written (keep it outside the writable roots)`);
      }
      // What the command wrote into it must not survive beside the result.
      fs.ftruncateSync(fd, 0);
      fs.writeSync(fd, JSON.stringify(obj) + '\n', 0);
      fs.closeSync(fd);
      return;
    }
    fs.writeSync(fd, JSON.stringify(obj) + '\n');
  };
}

async function cmdRun(argv: string[]): Promise<number> {
  let a: RunArgs;
  let emitJson: (obj: unknown) => void;
  try {
    a = parseRunArgs(argv);
    if (a.help) {
      process.stdout.write(RUN_USAGE);
      return 0;
    }
    emitJson = openJsonSink(a);
  } catch (e) {
    if (e instanceof UsageError) return usageFail(e);
    throw e;
  }
  const baseEnv = a.keepEnv ? { ...process.env } : withoutSecretEnv(process.env);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(baseEnv)) if (v !== undefined) env[k] = v;
  for (const [k, v] of a.env) env[k] = v;
  // Signals sent to the CLI go to the sandboxed tree; the CLI exits with the command's status.
  // The handlers are in place before the spawn, so no signal can slip between the two; one that
  // arrives before the child exists is delivered to it as soon as it does.
  let child: ReturnType<typeof spawn> | undefined;
  let pendingSignal: NodeJS.Signals | undefined;
  const forward = (sig: NodeJS.Signals) => {
    if (child) child.kill(sig);
    else pendingSignal = sig;
  };
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, forward);
  const audit: AuditEvent[] = [];
  const startFailed = (e: unknown): number => {
    const status = exitStatusForError(e);
    const message = cliMessage((e as Error).message, a);
    fail(message, status);
    emitJson({ error: { code: (e as SandboxError).code, message }, exitStatus: status });
    return status;
  };
  try {
    child = spawn(a.command[0], a.command.slice(1), {
      cwd: a.cwd,
      env,
      stdio: 'inherit',
      policy: policyFromArgs(a),
      proxy: { onAudit: (e) => audit.push(e) },
      ...(a.changes !== undefined ? { changes: changesOption(a.changes, a.changesDir, a.changesMaxBytes) } : {}),
    });
  } catch (e) {
    return startFailed(e);
  }
  // A command that cannot be started (not found, not executable) is reported through 'error'
  // and a rejected `exited`, as child_process does.
  child.on('error', () => {});
  if (pendingSignal) child.kill(pendingSignal);
  let timedOut = false;
  const started = child;
  const timer = a.timeout
    ? setTimeout(() => {
        timedOut = true;
        started.kill('SIGKILL');
      }, a.timeout * 1000)
    : undefined;
  let info: Awaited<typeof child.exited>;
  try {
    info = await child.exited;
  } catch (e) {
    if (timer) clearTimeout(timer);
    return startFailed(e);
  }
  if (timer) clearTimeout(timer);
  if (timedOut) fail(`timed out after ${a.timeout}s; the command and everything it started were killed`, 0);
  const sigNum = info.signal ? os.constants.signals[info.signal] : 0;
  const status = info.code ?? 128 + sigNum;
  const changes = await changesReport(child.changes);
  try {
    emitJson({ code: info.code, signal: info.signal, exitStatus: status, durationMs: info.durationMs, timedOut, enforcement: child.enforcement, audit, ...(changes ? { changes } : {}) });
  } catch (e) {
    if (e instanceof JsonFileReplaced) return fail(e.message, 125);
    throw e;
  }
  return status;
}

function cmdProbe(argv: string[]): number {
  for (const f of argv) {
    if (f === '--help' || f === '-h') {
      process.stdout.write(PROBE_USAGE);
      return 0;
    }
    if (f !== '--json') return usageFail(new UsageError(`unknown option: ${f}`, 'probe'));
  }
  const report = probe();
  if (argv.includes('--json')) {
    process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  } else {
    process.stdout.write(`platform: ${report.platform}-${report.arch}\naddon: ${report.addonLoaded ? 'loaded' : `not loaded (${report.addonError})`}\n`);
    process.stdout.write(`default mode: ${report.defaultMode ?? 'none (nothing can be enforced)'}\n`);
    for (const [k, v] of Object.entries(report.features)) if (v !== undefined) process.stdout.write(`${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}\n`);
  }
  return report.defaultMode ? 0 : 1;
}

function cmdApparmorProfile(argv: string[]): number {
  let node = process.execPath;
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    if (f === '--help' || f === '-h') {
      process.stdout.write(APPARMOR_USAGE);
      return 0;
    }
    if (f === '--node' || f.startsWith('--node=')) {
      const v = f === '--node' ? argv[++i] : f.slice('--node='.length);
      if (v === undefined || v === '') return usageFail(new UsageError('--node needs a path', 'apparmor-profile'));
      node = v;
    } else return usageFail(new UsageError(`unknown option: ${f}`, 'apparmor-profile'));
  }
  let real: string;
  try {
    real = fs.realpathSync(node); // AppArmor attaches a profile to the executable's real path
  } catch (e) {
    return usageFail(new UsageError(`--node ${node}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`, 'apparmor-profile'));
  }
  try {
    process.stdout.write(apparmorProfile(real));
  } catch (e) {
    return usageFail(new UsageError((e as Error).message, 'apparmor-profile'));
  }
  return 0;
}

export async function main(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '--help' || sub === '-h') {
    process.stdout.write(usage());
    return 0;
  }
  if (sub === 'help') {
    const target = rest[0] === undefined ? undefined : COMMANDS[rest[0]];
    process.stdout.write(target ? target.usage : usage());
    return 0;
  }
  if (sub === '--version' || sub === '-v' || sub === 'version') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  const cmd = Object.prototype.hasOwnProperty.call(COMMANDS, sub) ? COMMANDS[sub] : undefined;
  if (!cmd) {
    process.stderr.write(`process-sandbox: unknown command: ${sub}\nTry 'process-sandbox --help' for the commands.\n`);
    return 125;
  }
  return cmd.main(rest);
}

if (require.main === module) {
  // Started by a line that ran process.execPath as Node (lib/srt/electron-env.ts): the commands we
  // run get ELECTRON_RUN_AS_NODE as the caller had it.
  restoreElectronRunAsNode(process.env);
  main(process.argv.slice(2)).then(
    (status) => { process.exitCode = status; },
    (e) => { process.exitCode = fail((e as Error).stack ?? String(e), 125); },
  );
}
