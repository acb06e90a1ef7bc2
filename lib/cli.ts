#!/usr/bin/env node
/**
 * The `process-sandbox` bin (package.json "bin": dist/cli.js). The CLI itself is lib/cli/: the
 * dispatcher in lib/cli/index.ts, one file per subcommand.
 */
import { fail } from './cli/args';
import { main } from './cli/index';
import { restoreElectronRunAsNode } from './srt/electron-env';

export { main };

if (require.main === module) {
  // Started by a line that ran process.execPath as Node (lib/srt/electron-env.ts): the commands we
  // run get ELECTRON_RUN_AS_NODE as the caller had it.
  restoreElectronRunAsNode(process.env);
  main(process.argv.slice(2)).then(
    (status) => {
      process.exitCode = status;
    },
    (e) => {
      process.exitCode = fail((e as Error).stack ?? String(e), 125);
    },
  );
}
