/**
 * `process-sandbox run`'s options: one table (RUN_FLAGS) says what each takes and where it goes,
 * parseRunArgs reads argv with it and refuses contradictions, policyFromArgs makes the policy, and
 * cliMessage words an API error in the options' terms.
 *
 * A new option is one RUN_FLAGS entry (plus its RunArgs field, its default in parseRunArgs and
 * its line in RUN_USAGE, lib/cli/run.ts).
 */
import { changesOption } from '../changes/cli';
import * as path from 'node:path';
import { isTimerMs, MAX_TIMER_MS } from '../errors';
import type { SandboxPolicy } from '../index';
import { UsageError } from './args';

export interface RunArgs {
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

interface RunFlag {
  /** Whether it takes a value (`--opt value` or `--opt=value`); one that does not refuses `--opt=x`. */
  value: boolean;
  /** It shapes the sandbox: meaningless (refused) with --no-sandbox. */
  policy?: true;
  /** The values it accepts, checked once every option is read. */
  choices?: readonly string[];
  /** Records it in `a`; throws a UsageError for a bad value. */
  set(a: RunArgs, v: string): void;
}

const flag = (set: RunFlag['set'], more: Omit<RunFlag, 'set' | 'value'> = {}): RunFlag => ({ value: true, set, ...more });
const bool = (set: (a: RunArgs) => void, more: Omit<RunFlag, 'set' | 'value'> = {}): RunFlag => ({ value: false, set, ...more });
const policy = { policy: true } as const;

/**
 * Every option of `run`. The order of the entries with `choices` is the order their values are
 * checked in.
 */
const RUN_FLAGS = new Map<string, RunFlag>([
  ['--cwd', flag((a, v) => void (a.cwd = path.resolve(v)))],
  ['--write', flag((a, v) => void a.write.push(v), policy)],
  ['--read', flag((a, v) => void a.read.push(path.resolve(v)), policy)],
  ['--deny-read', flag((a, v) => void a.denyRead.push(path.resolve(v)), policy)],
  ['--protect', flag((a, v) => void a.protect.push(path.resolve(v)), policy)],
  ['--network', flag((a, v) => void (a.network = v), { ...policy, choices: ['none', 'proxy', 'full'] })],
  ['--allow-domain', flag((a, v) => void a.allowDomains.push(v), policy)],
  ['--deny-domain', flag((a, v) => void a.denyDomains.push(v), policy)],
  ['--allow-local', bool((a) => void (a.allowLocal = true), policy)],
  ['--tmp', flag((a, v) => void (a.tmp = v), { ...policy, choices: ['private', 'host', 'none'] })],
  ['--caches', flag((a, v) => void (a.caches = v), { ...policy, choices: ['private', 'host-readonly', 'host-writable'] })],
  ['--mode', flag((a, v) => void (a.mode = v), { ...policy, choices: ['auto', 'isolated', 'landlock'] })],
  ['--degraded', bool((a) => void (a.degraded = true), policy)],
  ['--proc-privacy', bool((a) => void (a.procPrivacy = true), policy)],
  ['--env', flag(setEnv)],
  ['--keep-env', bool((a) => void (a.keepEnv = true))],
  ['--timeout', flag(setTimeoutSeconds)],
  ['--no-sandbox', bool((a) => void (a.noSandbox = true))],
  ['--json', bool((a) => void (a.json = true))],
  ['--json-fd', flag(setJsonFd)],
  ['--json-file', flag((a, v) => void ((a.jsonFile = path.resolve(v)), (a.json = true)))],
  ['--changes', flag((a, v) => void (a.changes = v), { ...policy, choices: ['record', 'stage'] })],
  ['--changes-dir', flag((a, v) => void (a.changesDir = path.resolve(v)), policy)],
  ['--changes-max-bytes', flag((a, v) => void (a.changesMaxBytes = v), policy)],
  ['--help', bool((a) => void (a.help = true))],
]);

function setEnv(a: RunArgs, kv: string): void {
  const eq = kv.indexOf('=');
  if (eq <= 0) throw new UsageError(`--env expects KEY=VALUE, got ${kv}`);
  a.env.push([kv.slice(0, eq), kv.slice(eq + 1)]);
}

function setTimeoutSeconds(a: RunArgs, v: string): void {
  const t = Number(v);
  if (!isTimerMs(t * 1000)) throw new UsageError(`--timeout expects a positive number of seconds, at most ${Math.floor(MAX_TIMER_MS / 1000)} (about 24.8 days: Node's timer limit)`);
  a.timeout = t;
}

function setJsonFd(a: RunArgs, v: string): void {
  const n = Number(v);
  if (!/^[0-9]+$/.test(v) || n < 1) throw new UsageError(`--json-fd expects a file descriptor number of 1 or more, got ${v}`);
  a.jsonFd = n;
  a.json = true;
}

function defaults(cwd: string): RunArgs {
  return {
    cwd, write: [], read: [], denyRead: [], protect: [], allowDomains: [], denyDomains: [],
    allowLocal: false, degraded: false, procPrivacy: false, env: [], keepEnv: false, noSandbox: false, json: false, help: false, command: [],
  };
}

/**
 * Reads `run`'s argv: options up to the first argument that is not one (or up to --), then the
 * command. Returns the flags given, in the order first given, each with its last value.
 */
function readRunArgv(argv: string[], a: RunArgs): Map<string, string> {
  const given = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    let f = argv[i]!;
    if (f === '--') {
      a.command = argv.slice(i + 1);
      break;
    }
    // `--opt=value`: the value after the first '='. A value flag without '=' takes the next argument.
    let inline: string | undefined;
    const eq = f.startsWith('--') ? f.indexOf('=') : -1;
    if (eq > 2) {
      const name = f.slice(0, eq);
      const spec = RUN_FLAGS.get(name);
      if (spec && !spec.value) throw new UsageError(`${name} takes no value, got ${f} (drop the '=${f.slice(eq + 1)}')`);
      if (!spec) throw new UsageError(`unknown option: ${name}`);
      inline = f.slice(eq + 1);
      f = name;
    }
    const spec = RUN_FLAGS.get(f === '-h' ? '--help' : f);
    if (!spec) {
      if (f.startsWith('-')) throw new UsageError(`unknown option: ${f}`);
      a.command = argv.slice(i);
      break;
    }
    let v = '';
    if (spec.value && inline !== undefined) {
      if (inline === '') throw new UsageError(`${f}= needs a value after the '='`);
      v = inline;
    } else if (spec.value) {
      const next = argv[++i];
      if (next === undefined) throw new UsageError(`${f} needs a value`);
      v = next;
    }
    given.set(f, v); // a Map keeps a key where it was first set
    spec.set(a, v);
    if (a.help) break;
  }
  return given;
}

export function parseRunArgs(argv: string[], cwdDefault = process.cwd()): RunArgs {
  const a = defaults(cwdDefault);
  const given = readRunArgv(argv, a);
  if (a.help) return a;
  if (a.command.length === 0) throw new UsageError('missing command');
  checkJsonSinks(a, given.has('--json'));
  const policyFlags = [...given.keys()].filter((f) => RUN_FLAGS.get(f)!.policy);
  if (a.noSandbox && policyFlags.length > 0) {
    throw new UsageError(`--no-sandbox runs the command unrestricted, so ${policyFlags.join(', ')} would be ignored: drop --no-sandbox or ${policyFlags.length > 1 ? 'those options' : policyFlags[0]}`);
  }
  if (a.write.includes('none') && a.write.length > 1) {
    throw new UsageError(`--write none (nothing writable) contradicts --write ${a.write.find((w) => w !== 'none')}: give one or the other`);
  }
  checkChoices(given);
  checkProxyFlags(a);
  try {
    changesOption(a.changes, a.changesDir, a.changesMaxBytes);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  return a;
}

function checkJsonSinks(a: RunArgs, jsonFlag: boolean): void {
  if (a.jsonFd !== undefined && a.jsonFile !== undefined) throw new UsageError('--json-fd and --json-file are mutually exclusive');
  // Contradictions are refused rather than one of the two silently winning.
  if (jsonFlag && (a.jsonFd !== undefined || a.jsonFile !== undefined)) {
    const other = a.jsonFd !== undefined ? `--json-fd ${a.jsonFd}` : `--json-file ${a.jsonFile}`;
    throw new UsageError(`--json prints the result on stderr and ${other} sends it elsewhere: drop --json (${other.split(' ')[0]} implies it)`);
  }
}

/** Each option with `choices` got one of them (its last value counts, as it does for the policy). */
function checkChoices(given: Map<string, string>): void {
  for (const [name, spec] of RUN_FLAGS) {
    const v = given.get(name);
    if (spec.choices && v !== undefined && !spec.choices.includes(v)) throw new UsageError(`${name} must be one of ${spec.choices.join(', ')}`);
  }
}

function checkProxyFlags(a: RunArgs): void {
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
