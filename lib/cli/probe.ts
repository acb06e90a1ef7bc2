/** `process-sandbox probe [--json]`: what this host can enforce, without running anything. */
import { probe } from '../index';
import { isHelp, UsageError, usageFail } from './args';

export const usage = `Usage: process-sandbox probe [--json]

Prints what this host can enforce, without running anything. Exit 0 when a sandbox mode is
available, 1 when nothing can be enforced.
  --json                 the full report as JSON on stdout
`;

export function main(argv: string[]): number {
  for (const f of argv) {
    if (isHelp(f)) {
      process.stdout.write(usage);
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
