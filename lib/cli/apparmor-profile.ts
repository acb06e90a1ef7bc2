/**
 * `process-sandbox apparmor-profile [--node <path>]`: an AppArmor profile that lets a Node binary
 * create user namespaces (lib/platform/linux/apparmor.ts writes it).
 */
import * as fs from 'node:fs';
import { apparmorProfile, WIDE_GRANT } from '../platform/linux/apparmor';
import { isHelp, UsageError, usageFail } from './args';

export const usage = `Usage: process-sandbox apparmor-profile [--node <path>]

Prints an AppArmor profile that lets the Node binary in use (or <path>) create user namespaces,
so isolated mode works where kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu 23.10 and
later). Its first lines say how to install it.
${WIDE_GRANT.join('\n')}
  Example: process-sandbox apparmor-profile --node /opt/myapp/bin/node
Where AppArmor's parser predates the userns rule (no /etc/apparmor.d/abi/4.0: AppArmor 3, as in
Debian 12), the profile leaves the rule out: it is then an unconfined profile for the binary.
  --node <path>          the Node binary to write it for (default: this one, symlinks resolved)
`;

export function main(argv: string[]): number {
  let node = process.execPath;
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    if (isHelp(f)) {
      process.stdout.write(usage);
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
