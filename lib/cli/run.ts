/**
 * `process-sandbox run [options] [--] <command> [args...]`: runs a command in the sandbox with
 * stdio inherited. Its options are read by lib/cli/run-args.ts; its JSON result goes where
 * lib/cli/json-sink.ts says.
 */
import { changesOption, changesReport, RUN_CHANGES_USAGE } from '../changes/cli';
import * as os from 'node:os';
import { SandboxError, exitStatusForError } from '../errors';
import { spawn, type AuditEvent } from '../index';
import { withoutSecretEnv } from '../permissions';
import { fail, UsageError, usageFail } from './args';
import { JsonFileReplaced, openJsonSink } from './json-sink';
import { cliMessage, parseRunArgs, policyFromArgs, type RunArgs } from './run-args';
import { preferSupervisionInHost } from '../platform/linux/supervision-process';

export const usage = `Usage: process-sandbox run [options] [--] <command> [args...]

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

export async function main(argv: string[]): Promise<number> {
  // One command, and the CLI ends with it: Landlock mode's supervision stays in this process.
  preferSupervisionInHost('a one-command CLI: the host ends with the command; PSB_SUPERVISION=process moves it out');
  let a: RunArgs;
  let emitJson: (obj: unknown) => void;
  try {
    a = parseRunArgs(argv);
    if (a.help) {
      process.stdout.write(usage);
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
