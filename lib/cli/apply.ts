/** process-sandbox apply <dir> [paths...]: writes what a `run --changes stage` command staged (lib/changes/cli.ts). */
export { APPLY_USAGE as usage, cmdApply as main } from '../changes/cli';
