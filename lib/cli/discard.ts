/** process-sandbox discard <dir>: drops what a `run --changes stage` command staged (lib/changes/cli.ts). */
export { DISCARD_USAGE as usage, cmdDiscard as main } from '../changes/cli';
