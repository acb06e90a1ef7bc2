/**
 * `process-sandbox srt [--settings FILE] [-c CMD | CMD ARGS...]`: srt's command line over our
 * sandbox. Settings from FILE, else ~/.srt-settings.json (absent: srt's defaults, no network and
 * no writes). Exit status and messages are srt's where scripts see them: the command's own
 * status (128+N when it died of signal N, as srt reports it on Linux); 0 when srt itself got
 * SIGINT/SIGTERM and passed it on; 1 with `Error: ...` for bad settings, no command, or a sandbox
 * that cannot be set up (including a setting we refuse).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import { networkRestrictionOf, toPolicy, validateConfig, type SandboxRuntimeConfig } from '../srt/config';
import { spawnMapped, statusOf } from '../srt/runtime';
import { version } from './args';
import { preferSupervisionInHost } from '../platform/linux/supervision-process';

export const usage = `Usage: process-sandbox srt [options] [command...]

Runs a command in the sandbox under sandbox-runtime (srt) settings: a drop-in for \`srt\`.

  -s, --settings <path>  settings file (default: ~/.srt-settings.json; absent = no network, no writes)
  -c <command>           run a command string (like sh -c), no escaping applied
  -d, --debug            debug lines on stderr (as SRT_DEBUG=1 does), and SRT_DEBUG=true for the command
  -V, --version          print the version
  -h, --help             print this help

Unknown options are ignored, as srt ignores them (without -c they become part of the command).

Without -c, the command and its arguments are quoted and run by bash. See docs/srt.md.
`;

const DEFAULT_CONFIG: SandboxRuntimeConfig = {
  network: { allowedDomains: [], deniedDomains: [] },
  filesystem: { denyRead: [], allowRead: [], allowWrite: [], denyWrite: [] },
};

/** bash quoting for an argv-style invocation (srt quotes each argument for `bash -c`). */
function quoteArg(a: string): string {
  if (a !== '' && /^[A-Za-z0-9_@%+=:,./-]+$/.test(a)) return a;
  return `'${a.replace(/'/g, `'\\''`)}'`;
}

function fail(message: string, ...more: string[]): number {
  process.stderr.write(`Error: ${message}\n${more.map((m) => `${m}\n`).join('')}`);
  return 1;
}

const FILE_RULES = "this file's rules (its denyRead, allowRead and credential entries included)";
const REFUSING = `Refusing to run with the built-in defaults, which would drop ${FILE_RULES}.`;

/** A settings file is read whole; srt's are a few KiB. */
export const MAX_SETTINGS_BYTES = 1 << 20;

/** srt's debug line (`[SandboxDebug] ...` on stderr), shown when SRT_DEBUG is set. */
function debug(line: string): void {
  if (process.env.SRT_DEBUG) process.stderr.write(`[SandboxDebug] ${line}\n`);
}

/**
 * The settings file's text, or undefined when it does not exist. Opened non-blocking (a FIFO
 * with no writer does not hang us), then it must be a regular file no larger than
 * MAX_SETTINGS_BYTES (`/dev/zero` or a huge file is refused rather than read without end).
 */
function readSettingsFile(where: string): string | undefined {
  let fd: number;
  try {
    fd = fs.openSync(where, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK | fs.constants.O_NOCTTY);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new SettingsFail(`${where} could not be read (${(e as NodeJS.ErrnoException).code ?? String(e)}).`);
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new SettingsFail(`${where} is not a regular file.`);
    if (st.size > MAX_SETTINGS_BYTES) throw new SettingsFail(`${where} is larger than ${MAX_SETTINGS_BYTES} bytes.`);
    // One byte more than the cap: a file that grew after fstat is refused too.
    const buf = Buffer.alloc(MAX_SETTINGS_BYTES + 1);
    let n = 0;
    for (let got = -1; got !== 0 && n < buf.length; n += got) got = fs.readSync(fd, buf, n, buf.length - n, null);
    if (n > MAX_SETTINGS_BYTES) throw new SettingsFail(`${where} is larger than ${MAX_SETTINGS_BYTES} bytes.`);
    return buf.subarray(0, n).toString('utf8');
  } catch (e) {
    if (e instanceof SettingsFail) throw e;
    throw new SettingsFail(`${where} could not be read (${(e as NodeJS.ErrnoException).code ?? String(e)}).`);
  } finally {
    fs.closeSync(fd);
  }
}

/** The raw settings from `--settings-inline`, FILE, or ~/.srt-settings.json (srt's defaults when absent). */
function loadSettings(inline: string | undefined, named: string | undefined): unknown {
  if (inline !== undefined) {
    try {
      return JSON.parse(Buffer.from(inline, 'base64').toString('utf8'));
    } catch {
      throw new SettingsFail('the inline settings are not valid base64 JSON');
    }
  }
  const where = named ?? path.join(os.homedir(), '.srt-settings.json');
  const text = readSettingsFile(where);
  if (text === undefined) {
    // A file the caller named must exist; the default one may be absent.
    if (named !== undefined) throw new SettingsFail(`${where} does not exist.`, 'Refusing to run with the built-in defaults, which would drop the rules --settings asked for.');
    debug(`No config found at ${where}, using default config`);
    return DEFAULT_CONFIG;
  }
  if (text.trim() === '') throw new SettingsFail(`${where} is empty. Delete it, or put a config in it.`);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new SettingsFail(`${where} is not valid JSON: ${(e as Error).message}`);
  }
  try {
    validateConfig(raw);
  } catch (e) {
    const issues = (e as SandboxError).detail?.issues;
    if (e instanceof SandboxError && Array.isArray(issues)) throw new SettingsFail(`${where} does not hold a valid config — ${issues.join('; ')}`);
    throw e;
  }
  return raw;
}

export async function main(args: string[]): Promise<number> {
  // One command, and the CLI ends with it: Landlock mode's supervision stays in this process.
  preferSupervisionInHost('a one-command CLI: the host ends with the command; PSB_SUPERVISION=process moves it out');
  const argv = [...args];
  let settings: string | undefined;
  let inline: string | undefined;
  let resolveFrom: string | undefined;
  let eventsPath: string | undefined;
  let shell: string | undefined;
  let cmd: string | undefined;
  // srt ignores options it does not know; without -c they are words of the command, as there.
  const unknown: string[] = [];
  let i = 0;
  const value = (name: string): string => {
    const v = argv[++i];
    if (v === undefined) throw new UsageFail(`option '${name}' argument missing`);
    return v;
  };
  try {
    for (; i < argv.length; i++) {
      const a = argv[i]!;
      if (a === '--') {
        i++;
        break;
      }
      if (a === '-h' || a === '--help') {
        process.stdout.write(usage);
        return 0;
      }
      if (a === '-V' || a === '--version') {
        process.stdout.write(`${version()}\n`);
        return 0;
      }
      if (a === '-s' || a === '--settings') settings = value(a);
      else if (a.startsWith('--settings=')) settings = a.slice(11);
      else if (a === '-c') cmd = value(a);
      else if (a === '-d' || a === '--debug') process.env.SRT_DEBUG = 'true';
      // Short options run together, as srt's parser takes them: `-sFILE`, `-cCMD`, `-dc CMD`. Never
      // ignored as unknown: a settings file spelled so must not give way to the default one.
      else if (/^-[sc]./.test(a)) {
        if (a[1] === 's') settings = a.slice(2);
        else cmd = a.slice(2);
      } else if (/^-d[^-]/.test(a)) {
        process.env.SRT_DEBUG = 'true';
        argv[i--] = `-${a.slice(2)}`;
      } else if (a === '--control-fd' || a.startsWith('--control-fd=')) return fail('--control-fd is not supported by process-sandbox srt; restart the command to change its settings');
      // Internal: what SandboxManager.wrapWithSandbox passes (settings inline, so no file exists
      // that a sandboxed command could rewrite; the directory relative paths were meant from).
      else if (a === '--settings-inline') inline = value(a);
      else if (a === '--resolve-from') resolveFrom = value(a);
      else if (a === '--violations-file') eventsPath = value(a);
      else if (a === '--shell') shell = value(a);
      else if (a.startsWith('-') && a !== '-') unknown.push(a);
      else break;
    }
  } catch (e) {
    if (e instanceof UsageFail) return fail(e.message);
    throw e;
  }
  const rest = [...unknown, ...argv.slice(i)];
  for (const a of unknown) debug(`Ignoring unknown option ${a}`);

  let raw: unknown;
  try {
    raw = loadSettings(inline, settings);
  } catch (e) {
    if (e instanceof SettingsFail) return fail(e.message, e.refusing);
    throw e;
  }

  let command: string;
  if (cmd !== undefined) command = cmd;
  else if (rest.length > 0) command = rest.map(quoteArg).join(' ');
  else return fail('No command specified. Use -c <command> or provide command arguments.');

  debug('Initializing sandbox...');
  debug(cmd !== undefined ? `Command string mode (-c): ${command}` : `Original command: ${command}`);
  let mapped;
  try {
    const cfg = validateConfig(raw);
    debug(JSON.stringify(networkRestrictionOf(cfg), null, 2));
    mapped = toPolicy(cfg, resolveFrom ?? process.cwd());
  } catch (e) {
    if (e instanceof SandboxError) return fail(e.message);
    throw e;
  }

  // The violations file is opened before the command starts and never by name again: a command
  // that may write its directory cannot point our writes elsewhere through a symlink.
  let eventsFd: number | undefined;
  if (eventsPath !== undefined) {
    try {
      // Non-blocking: a FIFO put in its place cannot hang us; then it must be a regular file.
      eventsFd = fs.openSync(eventsPath, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
      if (!fs.fstatSync(eventsFd).isFile()) {
        fs.closeSync(eventsFd);
        return fail(`the violations file ${eventsPath} is not a regular file; refusing to run`);
      }
    } catch (e) {
      return fail(`the violations file ${eventsPath} cannot be opened (${(e as NodeJS.ErrnoException).code}); the wrapped command was cleaned up or reset`);
    }
  }

  let child;
  try {
    child = spawnMapped({
      command,
      binShell: shell,
      cwd: process.cwd(),
      env: { ...process.env },
      stdio: 'inherit',
      mapped,
      onDeny: (line) => {
        if (eventsFd !== undefined) {
          try {
            fs.writeSync(eventsFd, `${line}\n`);
          } catch {
            /* reporting must not stop the command */
          }
        }
      },
    });
  } catch (e) {
    if (e instanceof SandboxError) return fail(e.message);
    throw e;
  }
  // A SIGINT/SIGTERM srt itself received and passed on ends it with 0, as srt's CLI does; a
  // command that dies of a signal on its own is 128+N, as bubblewrap reports it to srt on Linux.
  let forwarded: NodeJS.Signals | undefined;
  const forward = (sig: NodeJS.Signals) => () => {
    forwarded = sig;
    child.kill(sig);
  };
  const onInt = forward('SIGINT');
  const onTerm = forward('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  try {
    const r = await child.exited;
    if (r.signal) {
      if (forwarded !== undefined && r.signal === forwarded) return 0;
      return statusOf(null, r.signal);
    }
    return r.code ?? 0;
  } catch (e) {
    return fail(`Failed to execute command: ${(e as Error).message}`);
  } finally {
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
    if (eventsFd !== undefined) fs.closeSync(eventsFd);
  }
}

class UsageFail extends Error {}

/** Settings that cannot be used: `Error: <message>` and the line naming what a fall-back would drop. */
class SettingsFail extends Error {
  constructor(message: string, readonly refusing = REFUSING) {
    super(message);
  }
}
