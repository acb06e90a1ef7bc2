/**
 * The host process's own cache variables, which filesystem.caches 'host-writable' reads
 * (lib/platform/linux/caches.ts cacheSites): tests set them for one run and restore them.
 */
const CACHE_VARS = [
  'HOME', 'XDG_CACHE_HOME', 'XDG_DATA_HOME', 'npm_config_cache', 'NPM_CONFIG_CACHE', 'CARGO_HOME', 'RUSTUP_HOME', 'GOPATH',
  'GOMODCACHE', 'npm_config_store_dir', 'PNPM_HOME', 'YARN_GLOBAL_FOLDER', 'PIP_CACHE_DIR', 'YARN_CACHE_FOLDER', 'GOCACHE',
];

/** Runs `fn` (sync or async) with the host process's cache variables set to `vars`, the others unset. */
export function withHostCacheEnv<T>(vars: Record<string, string>, fn: () => T): T {
  const saved = CACHE_VARS.map((k) => [k, process.env[k]] as const);
  for (const k of CACHE_VARS) delete process.env[k];
  Object.assign(process.env, vars);
  const restore = () => {
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  let out: T;
  try {
    out = fn();
  } catch (e) {
    restore();
    throw e;
  }
  if (out instanceof Promise) return out.finally(restore) as T;
  restore();
  return out;
}
