/** process-sandbox changes [--json] <dir>: lists what a `run --changes record` command changed (lib/changes/cli.ts). */
export { CHANGES_USAGE as usage, cmdChanges as main } from '../changes/cli';
