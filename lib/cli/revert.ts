/** process-sandbox revert <dir>: undoes what a `run --changes record` command changed (lib/changes/cli.ts). */
export { REVERT_USAGE as usage, cmdRevert as main } from '../changes/cli';
