/**
 * process-sandbox CLI: the dispatcher.
 *
 *   process-sandbox run [options] [--] <command> [args...]     (lib/cli/run.ts)
 *   process-sandbox probe [--json]                              (lib/cli/probe.ts)
 *   process-sandbox revert <dir>                                (lib/cli/revert.ts)
 *   process-sandbox changes [--json] <dir>                      (lib/cli/changes.ts)
 *   process-sandbox apply <dir> [paths...]                      (lib/cli/apply.ts)
 *   process-sandbox discard <dir>                               (lib/cli/discard.ts)
 *   process-sandbox apparmor-profile [--node <path>]            (lib/cli/apparmor-profile.ts)
 *   process-sandbox exec-server --listen stdio|ws://IP:PORT     (lib/cli/exec-server.ts)
 *   process-sandbox srt [--settings FILE] [-c CMD | CMD ARGS]   (lib/cli/srt.ts)
 *   process-sandbox --help | --version | help [subcommand]
 *
 * A subcommand is a module lib/cli/<name>.ts exporting `usage` and `main` (SubcommandModule),
 * registered by one line in COMMANDS. Modules load on use: the exec-server (and its ws
 * dependency) costs nothing to `run`. The bin entry point is lib/cli.ts.
 *
 * Exit status: the command's own; 128+N when it died of signal N; 125 when the sandbox cannot be
 * set up, the policy cannot be enforced or the usage is wrong; 126 found but not executable; 127
 * not found. stdio is inherited, so streams pass straight through without buffering.
 */
import { version, type SubcommandModule } from './args';

interface Subcommand {
  /** One line for the command list. */
  summary: string;
  /** The synopsis printed under the list: `process-sandbox <name> ...`. */
  synopsis: string;
  load(): SubcommandModule;
}

/** The subcommands, in the order `--help` lists them: one entry each. */
const COMMANDS = new Map<string, Subcommand>([
  ['run', { summary: 'run a command inside the sandbox', synopsis: '[options] [--] <command> [args...]', load: () => require('./run') }],
  ['probe', { summary: 'report what this host can enforce', synopsis: '[--json]', load: () => require('./probe') }],
  ['revert', { summary: "undo what a 'run --changes record' command changed (its journal directory)", synopsis: '<dir>', load: () => require('./revert') }],
  ['changes', { summary: "list what a 'run --changes record' command changed, or a 'stage' one staged (its directory)", synopsis: '[--json] <dir>', load: () => require('./changes') }],
  ['apply', { summary: "write what a 'run --changes stage' command staged (all, or some paths) into the roots", synopsis: '<dir> [paths...]', load: () => require('./apply') }],
  ['discard', { summary: "drop what a 'run --changes stage' command staged (its layer directory)", synopsis: '<dir>', load: () => require('./discard') }],
  ['apparmor-profile', { summary: 'print an AppArmor profile that lets a Node binary, and all it runs, use user namespaces (see its --help)', synopsis: '[--node <path>]', load: () => require('./apparmor-profile') }],
  ['exec-server', { summary: 'serve Codex exec-server JSON-RPC over stdio or WebSocket', synopsis: '--listen stdio|ws://IP:PORT [options]', load: () => require('./exec-server') }],
  ['srt', { summary: 'run a command under sandbox-runtime (srt) settings: a drop-in for srt', synopsis: '[--settings FILE] [-c CMD | CMD ARGS...]', load: () => require('./srt') }],
]);

function usage(): string {
  const width = Math.max(...[...COMMANDS.keys()].map((k) => k.length));
  return [
    'Usage: process-sandbox <command> [options]',
    '',
    'Commands:',
    ...[...COMMANDS].map(([k, c]) => `  ${k.padEnd(width)}  ${c.summary}`),
    '',
    ...[...COMMANDS].map(([k, c]) => `process-sandbox ${k} ${c.synopsis}`),
    "Run 'process-sandbox <command> --help' for a command's options; --version prints the version.",
    '',
  ].join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '--help' || sub === '-h') {
    process.stdout.write(usage());
    return 0;
  }
  if (sub === 'help') {
    const target = rest[0] === undefined ? undefined : COMMANDS.get(rest[0]);
    process.stdout.write(target ? target.load().usage : usage());
    return 0;
  }
  if (sub === '--version' || sub === '-v' || sub === 'version') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  const cmd = COMMANDS.get(sub);
  if (!cmd) {
    process.stderr.write(`process-sandbox: unknown command: ${sub}\nTry 'process-sandbox --help' for the commands.\n`);
    return 125;
  }
  return cmd.load().main(rest);
}
