#!/usr/bin/env node
/**
 * process-sandbox CLI.
 *
 *   process-sandbox run [options] -- <command> [args...]
 *   process-sandbox probe [--json]
 *
 * Exit status: the command's own; 128+N when it died of signal N; 125 when the sandbox cannot be
 * set up or the policy cannot be enforced; 126 found but not executable; 127 not found.
 * stdio is inherited, so streams pass straight through without buffering.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import { SandboxError, exitStatusForError } from './errors';
import { probe, spawn, type AuditEvent, type SandboxPolicy } from './index';
import { withoutSecretEnv } from './permissions';

const USAGE = `Usage:
  process-sandbox run [options] -- <command> [args...]
    --cwd <dir>            working directory (default: current directory)
    --write <path>         writable root, repeatable (default: the cwd); --write none = read-only
    --read <path>          restrict reads to these roots, repeatable (default: whole filesystem)
    --deny-read <path>     make a path unreadable, repeatable
    --protect <path>       keep a path inside a writable root read-only, repeatable
    --network <mode>       none (default) | proxy | full
    --allow-domain <host>  allow a domain through the proxy, repeatable (implies --network proxy)
    --deny-domain <host>   deny a domain through the proxy, repeatable
    --allow-local          let allowed domains reach loopback/private addresses
    --tmp <mode>           private (default) | host | none
    --mode <mode>          auto (default) | isolated | landlock
    --degraded             accept weaker enforcement; the report lists every gap
    --env <KEY=VALUE>      set a variable, repeatable
    --keep-env             keep every variable (default: drop ones that look like secrets)
    --timeout <seconds>    kill the command and everything it started after this long
    --no-sandbox           run without a sandbox
    --json                 print a JSON result (exit info + enforcement report) to stderr at the end
  process-sandbox probe [--json]
`;

class UsageError extends Error {}

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
  mode?: string;
  degraded: boolean;
  env: Array<[string, string]>;
  keepEnv: boolean;
  timeout?: number;
  noSandbox: boolean;
  json: boolean;
  command: string[];
}

export function parseRunArgs(argv: string[], cwdDefault = process.cwd()): RunArgs {
  const a: RunArgs = {
    cwd: cwdDefault, write: [], read: [], denyRead: [], protect: [], allowDomains: [], denyDomains: [],
    allowLocal: false, degraded: false, env: [], keepEnv: false, noSandbox: false, json: false, command: [],
  };
  let i = 0;
  const value = (flag: string): string => {
    const v = argv[++i];
    if (v === undefined) throw new UsageError(`${flag} needs a value`);
    return v;
  };
  for (; i < argv.length; i++) {
    const f = argv[i];
    if (f === '--') {
      a.command = argv.slice(i + 1);
      break;
    }
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
      case '--mode': a.mode = value(f); break;
      case '--degraded': a.degraded = true; break;
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
        if (!(t > 0)) throw new UsageError('--timeout expects a positive number of seconds');
        a.timeout = t;
        break;
      }
      case '--no-sandbox': a.noSandbox = true; break;
      case '--json': a.json = true; break;
      default:
        if (!f.startsWith('-') && a.command.length === 0) {
          a.command = argv.slice(i);
          i = argv.length;
          break;
        }
        throw new UsageError(`unknown option: ${f}`);
    }
  }
  if (a.command.length === 0) throw new UsageError('missing command (put it after --)');
  for (const [flag, v, allowed] of [
    ['--network', a.network, ['none', 'proxy', 'full']],
    ['--tmp', a.tmp, ['private', 'host', 'none']],
    ['--mode', a.mode, ['auto', 'isolated', 'landlock']],
  ] as const) {
    if (v !== undefined && !(allowed as readonly string[]).includes(v)) throw new UsageError(`${flag} must be one of ${allowed.join(', ')}`);
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
    },
    network,
    mode: (a.mode ?? 'auto') as 'auto' | 'isolated' | 'landlock',
    degraded: a.degraded,
  };
}

function fail(message: string, status: number): number {
  process.stderr.write(`process-sandbox: ${message}\n`);
  return status;
}

async function cmdRun(argv: string[]): Promise<number> {
  let a: RunArgs;
  try {
    a = parseRunArgs(argv);
  } catch (e) {
    if (e instanceof UsageError) return fail(`${e.message}\n${USAGE}`, 125);
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
  try {
    child = spawn(a.command[0], a.command.slice(1), {
      cwd: a.cwd,
      env,
      stdio: 'inherit',
      policy: policyFromArgs(a),
      proxy: { onAudit: (e) => audit.push(e) },
    });
  } catch (e) {
    const status = exitStatusForError(e);
    fail((e as Error).message, status);
    // The JSON result is always the last line on stderr.
    if (a.json) process.stderr.write(JSON.stringify({ error: { code: (e as SandboxError).code, message: (e as Error).message }, exitStatus: status }) + '\n');
    return status;
  }
  if (pendingSignal) child.kill(pendingSignal);
  let timedOut = false;
  const timer = a.timeout ? setTimeout(() => { timedOut = true; child.kill('SIGKILL'); }, a.timeout * 1000) : undefined;
  const info = await child.exited;
  if (timer) clearTimeout(timer);
  const sigNum = info.signal ? os.constants.signals[info.signal] : 0;
  const status = info.code ?? 128 + sigNum;
  if (a.json) {
    process.stderr.write(JSON.stringify({ code: info.code, signal: info.signal, exitStatus: status, durationMs: info.durationMs, timedOut, enforcement: child.enforcement, audit }) + '\n');
  }
  return status;
}

function cmdProbe(argv: string[]): number {
  const report = probe();
  if (argv.includes('--json')) {
    process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  } else {
    process.stdout.write(`platform: ${report.platform}-${report.arch}\naddon: ${report.addonLoaded ? 'loaded' : `not loaded (${report.addonError})`}\n`);
    process.stdout.write(`default mode: ${report.defaultMode ?? 'none (nothing can be enforced)'}\n`);
    for (const [k, v] of Object.entries(report.features)) if (v !== undefined) process.stdout.write(`${k}: ${v}\n`);
  }
  return report.defaultMode ? 0 : 1;
}

export async function main(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === 'run') return cmdRun(rest);
  if (sub === 'probe') return cmdProbe(rest);
  if (sub === 'exec-server') return (require('./exec-server/cli') as typeof import('./exec-server/cli')).execServerMain(rest);
  if (sub === '--help' || sub === '-h' || sub === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  return fail(`unknown command: ${sub ?? '(none)'}\n${USAGE}`, 125);
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (status) => { process.exitCode = status; },
    (e) => { process.exitCode = fail((e as Error).stack ?? String(e), 125); },
  );
}
