/**
 * Lines that start process.execPath (the srt drop-in's CLI fallback) set ELECTRON_RUN_AS_NODE=1:
 * in Electron's main process or a VS Code extension host process.execPath is the application,
 * which runs as plain Node only with that variable (Node itself ignores it). The caller's own
 * value travels in ELECTRON_AS_NODE_SAVED and is put back before the command's environment is
 * made, so the command sees the variable exactly as the caller had it.
 */
export const ELECTRON_AS_NODE_SAVED = 'PSB_SAVED_ELECTRON_RUN_AS_NODE';
/** The saved value when the caller had no ELECTRON_RUN_AS_NODE at all. */
export const UNSET = '__psb_unset__';

/** Undoes the line's ELECTRON_RUN_AS_NODE=1 in `env` (process.env at the CLI's start). */
export function restoreElectronRunAsNode(env: NodeJS.ProcessEnv): void {
  const saved = env[ELECTRON_AS_NODE_SAVED];
  if (saved === undefined) return;
  delete env[ELECTRON_AS_NODE_SAVED];
  if (saved === UNSET) delete env.ELECTRON_RUN_AS_NODE;
  else env.ELECTRON_RUN_AS_NODE = saved;
}
