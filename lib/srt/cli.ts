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
import { toPolicy, validateConfig, type SandboxRuntimeConfig } from './config';
import { spawnMapped, statusOf } from './runtime';

export const SRT_USAGE = `Usage: process-sandbox srt [options] [command...]

Runs a command in the sandbox under sandbox-runtime (srt) settings: a drop-in for \`srt\`.

  -s, --settings <path>  settings file (default: ~/.srt-settings.json; absent = no network, no writes)
  -c <command>           run a command string (like sh -c), no escaping applied
  -d, --debug            accepted for compatibility
  -h, --help             print this help

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

export async function srtMain(argv: string[]): Promise<number> {
  let settings: string | undefined;
  let inline: string | undefined;
  let resolveFrom: string | undefined;
  let eventsPath: string | undefined;
  let shell: string | undefined;
  let cmd: string | undefined;
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
        process.stdout.write(SRT_USAGE);
        return 0;
      }
      if (a === '-s' || a === '--settings') settings = value(a);
      else if (a.startsWith('--settings=')) settings = a.slice(11);
      else if (a === '-c') cmd = value(a);
      else if (a === '-d' || a === '--debug') continue;
      else if (a === '--control-fd') return fail('--control-fd is not supported by process-sandbox srt; restart the command to change its settings');
      // Internal: what SandboxManager.wrapWithSandbox passes (settings inline, so no file exists
      // that a sandboxed command could rewrite; the directory relative paths were meant from).
      else if (a === '--settings-inline') inline = value(a);
      else if (a === '--resolve-from') resolveFrom = value(a);
      else if (a === '--violations-file') eventsPath = value(a);
      else if (a === '--shell') shell = value(a);
      else if (a.startsWith('-')) throw new UsageFail(`unknown option '${a}'`);
      else break;
    }
  } catch (e) {
    if (e instanceof UsageFail) return fail(e.message);
    throw e;
  }
  const rest = argv.slice(i);

  let raw: unknown;
  const where = settings ?? path.join(os.homedir(), '.srt-settings.json');
  if (inline !== undefined) {
    try {
      raw = JSON.parse(Buffer.from(inline, 'base64').toString('utf8'));
    } catch {
      return fail('the inline settings are not valid base64 JSON');
    }
  } else {
    let text: string | undefined;
    try {
      text = fs.readFileSync(where, 'utf8');
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') return fail(`${where} could not be read (${code ?? String(e)}).`, `Refusing to run with the built-in defaults, which would drop ${FILE_RULES}.`);
      // A file the caller named must exist; the default one may be absent.
      if (settings !== undefined) return fail(`${where} does not exist.`, 'Refusing to run with the built-in defaults, which would drop the rules --settings asked for.');
    }
    if (text !== undefined && text.trim() === '') {
      return fail(`${where} is empty. Delete it, or put a config in it.`, `Refusing to run with the built-in defaults, which would drop ${FILE_RULES}.`);
    }
    if (text === undefined) raw = DEFAULT_CONFIG;
    else {
      try {
        raw = JSON.parse(text);
      } catch (e) {
        return fail(`${where} is not valid JSON: ${(e as Error).message}`, `Refusing to run with the built-in defaults, which would drop ${FILE_RULES}.`);
      }
    }
  }

  let command: string;
  if (cmd !== undefined) command = cmd;
  else if (rest.length > 0) command = rest.map(quoteArg).join(' ');
  else return fail('No command specified. Use -c <command> or provide command arguments.');

  let mapped;
  try {
    mapped = toPolicy(validateConfig(raw), resolveFrom ?? process.cwd());
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
