/**
 * What the subcommands of the CLI share: the shape of a subcommand, the usage error, how the CLI
 * reports a failure, and the package version. Exit status 125 is the CLI's own (usage, set-up);
 * see lib/cli/index.ts.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

/** A subcommand module (lib/cli/<name>.ts): its help text and its entry point. */
export interface SubcommandModule {
  usage: string;
  main(argv: string[]): Promise<number> | number;
}

/** A usage mistake: reported as one line plus a hint, exit 125. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly sub = 'run',
  ) {
    super(message);
  }
}

/** `process-sandbox: <message>` on stderr; returns `status`. */
export function fail(message: string, status: number): number {
  process.stderr.write(`process-sandbox: ${message}\n`);
  return status;
}

/** A usage error on stderr with the hint to the subcommand's help; exit 125. */
export function usageFail(e: UsageError): number {
  process.stderr.write(`process-sandbox: ${e.message}\nTry 'process-sandbox ${e.sub} --help' for the options.\n`);
  return 125;
}

/** Whether `arg` asks for help. */
export const isHelp = (arg: string): boolean => arg === '--help' || arg === '-h';

/** The package's version (dist/cli/*.js and lib/cli/*.ts are two levels below its root). */
export function version(): string {
  try {
    return (JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}
