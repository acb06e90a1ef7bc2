/**
 * The user's tool caches (policy filesystem.caches). A command that may write ~/.npm, ~/.cache,
 * ~/.cargo ... can plant a tampered package or build artefact that the host installs or runs
 * later; one that may not write them cannot `npm install` at all (EROFS on ~/.npm/_cacache).
 * 'private' gives the command a writable cache of its own:
 * - isolated mode: an overlay at the cache's own path, lower layer the host's directory
 *   (read-only: every cached package stays a hit), upper and work dirs in a tmpfs of the sandbox's
 *   mount namespace. Nothing written there reaches the host; it is gone when the sandbox ends.
 * - a cache that does not exist, cannot be overlaid (see overlayBlocker) or Landlock mode (no
 *   mounts): the tool's own environment variable points it at an empty directory in the run's
 *   private temp dir (cold: every package is fetched again). Never created on the host.
 * Pure except for lstat/realpath, like the rest of the planner.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SandboxError } from '../../errors';
import type { LinuxMountOp } from '../../native';
import type { CachesMode } from '../../policy-types';
import { isStrictlyWithin, isWithin } from '../../paths';
import { realpathOrNull, statOrNull } from '../../permissions/canonical';
import type { ResolvedRules } from '../../rules';

/** Mirrors MountKind in linux/plan.ts (native/linux/spawn_linux.h MountOpKind). */
const K = { TmpClone: 0, Tmpfs: 1, Mkdir: 2, MoveSlot: 4, Overlay: 18 } as const;

/** Where isolated mode's env-redirected caches go: inside the sandbox's private /tmp. */
export const ISOLATED_CACHE_ROOT = '/tmp/.process-sandbox-caches';

export interface CacheSite {
  /** Report key. */
  name: string;
  /** The host directory the tool would use with this environment. */
  path: string;
  /** The variable that moves it (none: the cache cannot be moved without losing what it holds). */
  envVar?: string;
  /** Which tools use it (report and docs). */
  tools: string;
}

const nonEmpty = (v: string | undefined): string | undefined => (v !== undefined && v !== '' ? v : undefined);

/**
 * The caches the common tools would use under `env` (their own lookup order, the variable first).
 * XDG_CACHE_HOME (~/.cache) holds pip's, go's build cache, yarn 1's and corepack's; the entries
 * for PIP_CACHE_DIR and GOCACHE exist only when the environment names its own place for them.
 */
export function cacheSites(env: Record<string, string>, home = nonEmpty(env.HOME) ?? os.homedir()): CacheSite[] {
  const abs = (p: string | undefined): string | undefined => (p !== undefined && path.isAbsolute(p) ? path.normalize(p) : undefined);
  const h = (...parts: string[]) => path.join(home, ...parts);
  const xdgCache = abs(nonEmpty(env.XDG_CACHE_HOME)) ?? h('.cache');
  const xdgData = abs(nonEmpty(env.XDG_DATA_HOME)) ?? h('.local', 'share');
  const gopath = abs(nonEmpty(env.GOPATH)?.split(':')[0]) ?? h('go');
  const sites: CacheSite[] = [
    { name: 'npm', path: abs(nonEmpty(env.npm_config_cache) ?? nonEmpty(env.NPM_CONFIG_CACHE)) ?? h('.npm'), envVar: 'npm_config_cache', tools: 'npm, npx' },
    { name: 'xdg-cache', path: xdgCache, envVar: 'XDG_CACHE_HOME', tools: 'pip, go build cache, yarn 1, corepack, pnpm metadata' },
    { name: 'cargo', path: abs(nonEmpty(env.CARGO_HOME)) ?? h('.cargo'), envVar: 'CARGO_HOME', tools: 'cargo (registry, git checkouts, installed bins)' },
    // Moving RUSTUP_HOME would lose the installed toolchains: overlay or nothing.
    { name: 'rustup', path: abs(nonEmpty(env.RUSTUP_HOME)) ?? h('.rustup'), tools: 'rustup toolchains' },
    { name: 'go-mod', path: abs(nonEmpty(env.GOMODCACHE)) ?? path.join(gopath, 'pkg', 'mod'), envVar: 'GOMODCACHE', tools: 'go modules' },
    // pnpm's store: store-dir if set, else $PNPM_HOME/store, else $XDG_DATA_HOME/pnpm/store. It
    // is moved by PNPM_HOME (its global bins go along), not by npm_config_store_dir, which npm
    // itself would warn about on every run.
    abs(nonEmpty(env.npm_config_store_dir))
      ? { name: 'pnpm-store', path: abs(env.npm_config_store_dir)!, envVar: 'npm_config_store_dir', tools: 'pnpm' }
      : { name: 'pnpm-store', path: path.join(abs(nonEmpty(env.PNPM_HOME)) ?? path.join(xdgData, 'pnpm'), 'store'), envVar: 'PNPM_HOME', tools: 'pnpm' },
    { name: 'yarn-berry', path: abs(nonEmpty(env.YARN_GLOBAL_FOLDER)) ?? h('.yarn', 'berry'), envVar: 'YARN_GLOBAL_FOLDER', tools: 'yarn 2+' },
  ];
  const pip = abs(nonEmpty(env.PIP_CACHE_DIR));
  if (pip) sites.push({ name: 'pip', path: pip, envVar: 'PIP_CACHE_DIR', tools: 'pip' });
  // yarn 1 uses ~/.cache/yarn (XDG) unless told otherwise; as root it prefers
  // /usr/local/share/.cache/yarn, which stays read-only (it falls back to a dir in the private /tmp).
  const yarn = abs(nonEmpty(env.YARN_CACHE_FOLDER));
  if (yarn) sites.push({ name: 'yarn', path: yarn, envVar: 'YARN_CACHE_FOLDER', tools: 'yarn 1' });
  const gocache = abs(nonEmpty(env.GOCACHE));
  if (gocache) sites.push({ name: 'go-build', path: gocache, envVar: 'GOCACHE', tools: 'go build cache' });
  return sites;
}

/**
 * The caches of the host process itself: its own environment, else the fixed defaults under its
 * home. 'host-writable' takes its directories from here, never from the command's environment,
 * which the caller of spawn() (or the CLI's --env) may fill with anything: XDG_CACHE_HOME naming
 * another repository or $HOME would otherwise become a writable root.
 */
export function hostCacheSites(): CacheSite[] {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  return cacheSites(env);
}

/** A writable cache root `real` would expose (it is /, a home, or holds one or a writable root), or null. */
function tooWideCache(real: string, writeRoots: string[]): string | null {
  if (real === '/') return 'the filesystem root';
  const homes = [process.env.HOME, os.homedir()].filter((h): h is string => h !== undefined && path.isAbsolute(h));
  for (const h of homes.map((x) => realpathOrNull(x) ?? path.normalize(x))) {
    if (isWithin(h, real)) return h === real ? `the home directory` : `an ancestor of the home directory ${h}`;
  }
  const w = writeRoots.find((r) => isStrictlyWithin(r, real));
  return w === undefined ? null : `an ancestor of the writable root ${w}`;
}

/**
 * 'host-writable': the host's existing cache directories (real paths), to be resolved as writable
 * roots like any other, so that the carve-outs of every root (.git hooks and config, .codex ...)
 * are planned inside them too. Refused (nothing runs) when one is /, the home directory, or an
 * ancestor of either or of a writable root (`writeRoots`, canonical): that would make the
 * user's start-up files, keys or workspaces writable under the name of a cache.
 */
export function hostWritableCaches(writeRoots: string[]): Array<{ site: CacheSite; real: string }> {
  const out: Array<{ site: CacheSite; real: string }> = [];
  for (const site of hostCacheSites()) {
    const real = realDir(site.path);
    if (real === null) continue;
    const why = tooWideCache(real, writeRoots);
    if (why !== null) {
      const moved = site.envVar ? `the host's ${site.envVar} (or HOME)` : `the host's HOME`;
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        `policy.filesystem.caches 'host-writable': the ${site.name} cache ${site.path} is ${why}, which a cache ` +
          `may not make writable; point ${moved} at the cache's own directory, or use caches 'private' or 'host-readonly'`,
        { detail: { field: 'policy.filesystem.caches', cache: site.name, path: site.path, reason: why } },
      );
    }
    out.push({ site, real });
  }
  return out;
}

export interface CachePlan {
  /** Isolated mode: steps appended before /proc is mounted. */
  mounts: LinuxMountOp[];
  /** Slots used by the mounts (numbered from 0: the caller moves them past its own). */
  slots: number;
  /** Isolated mode: Landlock write rules for the overlays (opened in the child, after the mounts). */
  landlockWrites: string[];
  /** Variables set for the command. */
  env: Record<string, string>;
  /** mechanisms.caches */
  report: Record<string, string>;
}

function realDir(p: string): string | null {
  // Most cache sites are absent: stat says so without the exception a failed realpath throws.
  if (!statOrNull(p)?.isDirectory()) return null;
  try {
    return fs.realpathSync.native(p);
  } catch {
    return null;
  }
}

let overlaySupport: boolean | undefined;
/** overlayfs is built in or loadable (a user namespace may mount it since Linux 5.11). */
export function overlayAvailable(): boolean {
  if (overlaySupport === undefined) {
    let listed = false;
    try {
      listed = /\toverlay$/m.test(fs.readFileSync('/proc/filesystems', 'utf8'));
    } catch {
      // no /proc: decided by the module below
    }
    overlaySupport = listed || fs.existsSync(`/lib/modules/${os.release()}/kernel/fs/overlayfs`);
  }
  return overlaySupport;
}

/**
 * Why the host cache at `dir` (its real path) cannot be overlaid under these rules, or null.
 * An overlay shows the lower directory's own contents and none of the mounts below it, so a
 * deny-read mask, a protected path or a writable root inside the cache would be undone by it.
 */
function overlayBlocker(dir: string, rules: ResolvedRules): string | null {
  if (!overlayAvailable()) return 'no overlayfs in this kernel';
  // The option string separates with ',' and ':' (escaping differs between kernel versions).
  if (/[,:\\\n]/.test(dir)) return 'its path holds a character overlayfs options cannot carry';
  if (['/tmp', '/dev', '/proc', '/sys'].some((r) => isWithin(dir, r))) return 'it is under a directory the sandbox replaces';
  if (rules.denyRead.some((d) => isWithin(dir, d))) return 'it is deny-read';
  if (!rules.readAll && !rules.readRoots.some((r) => isWithin(dir, r))) return 'it is not readable under this policy';
  if ([...rules.denyRead, ...rules.readOnly, ...rules.writeRoots].some((p) => p !== dir && isWithin(p, dir))) {
    return 'a deny-read, protected or writable path lies inside it';
  }
  return null;
}

export interface CachePlanInput {
  rules: ResolvedRules;
  mode: 'isolated' | 'landlock';
  env: Record<string, string>;
  /** tmpfs options for the overlays' upper layers. */
  tmpfsData: string;
  /** Landlock mode: the run's private TMPDIR. */
  landlockTmpDir?: string;
}

export function planCaches(input: CachePlanInput): CachePlan {
  const { rules, mode } = input;
  const caches: CachesMode = rules.caches ?? 'private';
  const plan: CachePlan = { mounts: [], slots: 0, landlockWrites: [], env: {}, report: {} };
  if (caches === 'host-writable') {
    // The resolver made them writable roots (hostWritableCaches, with their carve-outs); the plan
    // adds none, so a cache that was not one then stays read-only.
    for (const s of hostCacheSites()) {
      const real = realDir(s.path);
      const writable = real !== null && rules.writeRoots.some((w) => isWithin(real, w));
      plan.report[s.name] = writable
        ? `host ${s.path}, writable (protected paths inside it stay read-only)`
        : real
          ? `host ${s.path}, read-only (not a writable root of this policy)`
          : `absent (${s.path} is not created on the host)`;
    }
    return plan;
  }
  const sites = cacheSites(input.env);
  if (caches === 'host-readonly') {
    for (const s of sites) plan.report[s.name] = `host ${s.path}, read-only`;
    return plan;
  }
  // 'private'. Where a redirected cache goes: the run's private temp dir, if it has one.
  const privateRoot =
    mode === 'isolated' ? (rules.tmp === 'private' ? ISOLATED_CACHE_ROOT : undefined) : input.landlockTmpDir && path.join(input.landlockTmpDir, 'caches');
  const overlaid: string[] = [];
  for (const s of sites) {
    const real = realDir(s.path);
    let why: string;
    if (real === null) why = 'absent on the host';
    else if (mode === 'landlock') why = 'Landlock mode has no mounts';
    else if (overlaid.some((o) => isWithin(real, o))) {
      plan.report[s.name] = `overlay ${s.path} (inside another cache's overlay)`;
      continue;
    } else {
      const blocker = overlayBlocker(real, rules);
      if (blocker === null) {
        const slot = plan.slots++; // the caller adds the plan's own slot count
        // The host's directory is cloned before the tmpfs covers its name, then becomes the lower
        // layer inside that tmpfs, next to the upper and work dirs: all three are hidden under the
        // overlay, which the command sees at the cache's own path.
        plan.mounts.push(
          { kind: K.TmpClone, path: real, arg: slot },
          { kind: K.Tmpfs, path: real, data: `mode=0755,${input.tmpfsData}` },
          { kind: K.Mkdir, path: `${real}/.l` },
          { kind: K.Mkdir, path: `${real}/.u` },
          { kind: K.Mkdir, path: `${real}/.w` },
          { kind: K.MoveSlot, path: `${real}/.l`, arg: slot },
          // userxattr: the overlay's own metadata (opaque dirs, redirects) as user.* xattrs, the
          // only kind a user namespace may set.
          { kind: K.Overlay, path: real, data: `userxattr,lowerdir=${real}/.l,upperdir=${real}/.u,workdir=${real}/.w` },
        );
        plan.landlockWrites.push(real);
        overlaid.push(real);
        // (Where the kernel refuses the overlay, init keeps the tmpfs alone: private but cold.)
        plan.report[s.name] = `overlay ${s.path} (host copy read-only below, writes private to the run; if the kernel refuses the overlay: an empty private tmpfs)`;
        continue;
      }
      why = blocker;
    }
    if (s.envVar && privateRoot) {
      const dir = path.join(privateRoot, s.name);
      plan.env[s.envVar] = dir;
      // Landlock mode's dir is under this run's TMPDIR: the report names it as $TMPDIR/..., so
      // that one policy gives one report, run after run.
      const shown = mode === 'landlock' && input.landlockTmpDir ? '$TMPDIR' + dir.slice(input.landlockTmpDir.length) : dir;
      plan.report[s.name] = `env ${s.envVar}=${shown} (private, cold: ${why})`;
    } else {
      plan.report[s.name] = `host ${s.path}, read-only (${why}; ${s.envVar ? 'no private temp dir to move it to' : 'cannot be moved'})`;
    }
  }
  return plan;
}
