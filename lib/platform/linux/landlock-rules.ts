/**
 * Landlock's rules for a run: what stays readable when reads are restricted (the platform read
 * set), "read everything" without the host's /dev, the writable roots and devices; deny-read
 * paths carved out of the roots around them (carveDenied); and the shield over other Landlock-mode
 * runs' TMPDIRs (tmpShield).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { isWithin } from '../../paths';
import { lstatOrNull } from '../../permissions/canonical';
import { cachedWalk } from '../../permissions/walk-cache';
import type { LinuxPlanInput } from './plan-types';

/**
 * What stays readable when reads are restricted to listed roots (Landlock read rules), besides
 * those roots and the executable itself. Documented in the README ("Restricted reads") and listed
 * in every report as mechanisms.platformReads (the ones that exist on this host):
 * - programs and libraries: /bin, /sbin, /usr, /lib*;
 * - /dev (isolated mode: its own minimal /dev; Landlock mode: the harmless device files only),
 *   /proc, /sys;
 * - from /etc only what the dynamic linker, name resolution, TLS, locale, time zone and the
 *   common tools' system config need: not all of /etc (no shadow, no machine-id, no service
 *   configs).
 * The cwd is not added: chdir needs no read right, and a cwd outside the listed roots stays
 * unreadable (it used to be granted, with everything below it).
 */
const PLATFORM_READ_DEFAULTS = ['/bin', '/sbin', '/usr', '/lib', '/lib32', '/lib64', '/libx32', '/dev', '/proc', '/sys'];
export const PLATFORM_ETC_READS = [
  '/etc/ld.so.cache',
  '/etc/ld.so.conf',
  '/etc/ld.so.conf.d',
  '/etc/ld.so.preload',
  '/etc/nsswitch.conf',
  '/etc/passwd',
  '/etc/group',
  '/etc/hosts',
  '/etc/host.conf',
  '/etc/hostname',
  '/etc/resolv.conf',
  '/etc/gai.conf',
  '/etc/services',
  '/etc/protocols',
  '/etc/networks',
  '/etc/localtime',
  '/etc/timezone',
  '/etc/locale.alias',
  '/etc/locale.conf',
  '/etc/default/locale',
  '/etc/ssl',
  '/etc/ca-certificates',
  '/etc/ca-certificates.conf',
  '/etc/pki',
  '/etc/crypto-policies',
  '/etc/alternatives',
  '/etc/mime.types',
  '/etc/magic',
  '/etc/magic.mime',
  '/etc/os-release',
  '/etc/lsb-release',
  '/etc/debian_version',
  '/etc/terminfo',
  '/etc/inputrc',
  '/etc/environment',
  '/etc/shells',
  '/etc/profile',
  '/etc/profile.d',
  '/etc/bash.bashrc',
  '/etc/gitconfig',
  '/etc/npmrc',
  '/etc/pip.conf',
  '/etc/python3',
  '/etc/mtab',
];
/** Device files a sandboxed tool may open for writing. */
export const DEVICE_RULES = ['/dev/null', '/dev/zero', '/dev/full', '/dev/tty'];
/**
 * Isolated mode's /dev/pts is a devpts instance of its own, holding only the sandbox's terminals.
 * Landlock mode's would be the host's, with every terminal of the user in it (another session's
 * /dev/pts/N could be read and written): it gets none of it, only the terminals on its stdio, by
 * inode (landlock.h stdio_terminals). /dev/tty reaches the controlling terminal only, and after
 * setsid that is the pty option's terminal or none.
 */
const ISOLATED_DEVICE_RULES = ['/dev/ptmx', '/dev/pts'];

export function realpathOrNull(p: string): string | null {
  try {
    // A missing path is a common answer here: lstat says so without the exception a failed
    // realpath throws (several per plan).
    if (fs.lstatSync(p, { throwIfNoEntry: false }) === undefined) return null;
    return fs.realpathSync.native(p);
  } catch {
    return null;
  }
}


/** Device files any tool may read (Landlock mode grants these instead of all of /dev). */
// (/dev/fd and /dev/std* are symlinks into /proc, which is readable; a rule on them would resolve
// to the command's own pipes, which Landlock refuses.)
export const DEVICE_READS = ['/dev/random', '/dev/urandom'];

export type LandlockRule = { path: string; access: 'read' | 'write' | 'device' | 'list'; exact?: boolean };

/**
 * "Read everything" for Landlock mode. Landlock rules only add, so "/" would include the host's
 * /dev: as root that means raw disks (FS-16). Instead: every top-level entry but /dev, listing
 * anywhere, and the harmless device files by name. (Isolated mode's /dev is our own minimal one.)
 */
function landlockReadAllRules(): LandlockRule[] {
  const root: LandlockRule = { path: '/', access: 'list' };
  canonical.add(root);
  const out: LandlockRule[] = [root];
  // The listing of / with each entry's type (cached as a deny-read chain directory's is, so a
  // carve through / reads the same entry). An unreadable / grants no entry.
  for (const e of typedListing('/') ?? []) {
    const name = e.slice(2);
    if (name === 'dev') continue;
    const r: LandlockRule = { path: `/${name}`, access: 'read' };
    // An entry of / that is not a link is its own canonical path: no realpath per plan for it.
    if (e[0] !== 'l') canonical.add(r);
    out.push(r);
  }
  for (const d of DEVICE_READS) out.push({ path: d, access: 'read' });
  return out;
}

/** Rules whose path is known to be canonical (landlockReadAllRules: entries of / that are not links). */
const canonical = new WeakSet<LandlockRule>();

/** A rule's path as the kernel resolves it: its target when it goes through a link. */
function realOf(r: LandlockRule): string {
  return canonical.has(r) ? r.path : (realpathOrNull(r.path) ?? r.path);
}

let platformPresent: string[] | undefined;

/** The platform read set that exists on this host (looked up once per process: plans stay cheap). */
export function platformReads(mode: 'isolated' | 'landlock'): string[] {
  platformPresent ??= [...PLATFORM_READ_DEFAULTS, ...PLATFORM_ETC_READS].filter((p) => lstatOrNull(p) !== null);
  return mode === 'isolated' ? platformPresent : platformPresent.filter((d) => d !== '/dev');
}

export function landlockRules(input: LinuxPlanInput, mode: 'isolated' | 'landlock') {
  const { rules } = input;
  const out: LandlockRule[] = [];
  if (rules.readAll) {
    if (mode === 'isolated') out.push({ path: '/', access: 'read' });
    else out.push(...landlockReadAllRules());
  } else {
    const reads = new Set([...platformReads(mode), ...rules.readRoots, input.file]);
    for (const r of reads) out.push({ path: r, access: 'read' });
    if (mode === 'landlock') {
      out.push({ path: '/dev', access: 'list' });
      for (const d of DEVICE_READS) out.push({ path: d, access: 'read' });
    }
  }
  for (const w of rules.writeRoots) out.push({ path: w, access: 'write' });
  for (const d of DEVICE_RULES) out.push({ path: d, access: 'device' });
  if (mode === 'isolated') {
    for (const d of ISOLATED_DEVICE_RULES) out.push({ path: d, access: 'device' });
    out.push({ path: '/dev/shm', access: 'write' });
    if (rules.tmp === 'private') out.push({ path: '/tmp', access: 'write' });
  } else if (input.landlockTmpDir) {
    out.push({ path: input.landlockTmpDir, access: 'write' });
  }
  return out;
}

/**
 * Most rules Landlock mode makes to carve deny-read paths out of the roots around them. Past it
 * the deny-read paths stay a listed gap (refused unless degraded) rather than a spawn that
 * spends milliseconds adding rules.
 */
export const DENY_CARVE_MAX_RULES = 8192;

/**
 * The entries of a directory with their types, `d/name`, `l/name` (a symlink), `f/name`: / for
 * the read-everything rules, and each directory on the way down to a deny-read path. Null when
 * it cannot be read.
 */
function typedListing(dir: string): string[] | null {
  // Cached between plans while nothing in the directory is created, removed, renamed or changed
  // (a home directory with hundreds of entries is read once, not on every spawn).
  const { found, truncated } = cachedWalk(
    dir,
    lstatOrNull(dir),
    () => {
      try {
        const found = fs
          .readdirSync(dir, { withFileTypes: true })
          .map((e) => `${e.isSymbolicLink() ? 'l' : e.isDirectory() ? 'd' : 'f'}/${e.name}`);
        return { found, truncated: false, dirs: [dir] };
      } catch {
        return { found: [], truncated: true, dirs: [] };
      }
    },
    undefined,
    'deny-carve',
  );
  return truncated ? null : found;
}

export interface DenyCarve {
  rules: LandlockRule[];
  /** Directories on the way from a root down to a deny-read path: listable, their entries fixed. */
  chainDirs: string[];
  /** Chain directories the planner could not list: none of their entries is granted. */
  unlisted: string[];
}

/**
 * Landlock mode's deny-read under readable (or writable) roots. A Landlock right on a directory
 * covers everything below it and rules only add, so "readable except this subtree" is built as
 * its complement: a root with a deny-read path inside it is replaced by
 *  - a list-only rule (read-dir) on each directory on the way from the root down to the denied
 *    path (the chain), so `ls` of them still works;
 *  - the root's own rule on every other entry of those directories (each sibling), by inode.
 * The denied entry gets nothing; the supervisor refuses listings of it (the chain's list right
 * reaches it: supervise_metadata.cc kListDir). What follows from rules being per inode:
 *  - an entry made in a chain directory during the run (by the host, or a file replaced by
 *    rename) has no rule: it can be listed and stat'ed, not read, until the next run. So a denied
 *    path that is missing, or made again, stays unreadable whoever creates it;
 *  - in a writable root, a chain directory keeps only the list right: its entries are fixed for
 *    the run (no create, remove or rename there: that would need rights that reach the denied
 *    path too, and a new file would be unreadable anyway). Its existing files and directories
 *    keep every right;
 *  - symlinks among the siblings get no rule (what they point to is judged by its own path), and
 *    siblings are opened without following links (landlock.h kPathExact): one swapped for a link
 *    after planning gets no rule rather than moving the grant.
 * Grants that lie inside a denied path are dropped, except the user's own nested roots (most
 * specific wins, as in isolated mode).
 */
export function carveDenied(rules: LandlockRule[], deny: string[], nestedRoots: ReadonlySet<string>): DenyCarve {
  const out: LandlockRule[] = [];
  const chainDirs: string[] = [];
  const unlisted: string[] = [];
  const expand = (dir: string, access: 'read' | 'write', inside: string[]) => {
    chainDirs.push(dir);
    out.push({ path: dir, access: 'list', exact: true });
    const names = typedListing(dir);
    if (names === null) {
      unlisted.push(dir);
      return;
    }
    // The denied paths below each entry, by the entry's name (one lookup per entry: a home
    // directory can have thousands).
    const prefix = dir === '/' ? '/' : `${dir}/`;
    const denied = new Set<string>();
    const below = new Map<string, string[]>();
    for (const d of inside) {
      const rest = d.slice(prefix.length);
      const slash = rest.indexOf('/');
      if (slash < 0) denied.add(rest);
      else below.set(rest.slice(0, slash), [...(below.get(rest.slice(0, slash)) ?? []), d]);
    }
    for (const e of names) {
      const name = e.slice(2);
      if (e[0] === 'l' || denied.has(name)) continue;
      const under = below.get(name);
      if (under === undefined) out.push({ path: prefix + name, access, exact: true });
      else if (e[0] === 'd') expand(prefix + name, access, under);
    }
  };
  for (const r of rules) {
    if (r.access !== 'read' && r.access !== 'write') {
      out.push(r);
      continue;
    }
    // Deny-read paths are canonical; a grant through a link (/lib64, /bin on merged-/usr hosts)
    // is compared, and carved, at its target.
    const real = realOf(r);
    // Inside a denied path: dropped, unless it is the user's own root nested there, which is
    // then carved like any other (a deny-read path can lie inside it in turn).
    const over = deny.find((d) => isWithin(real, d));
    if (over !== undefined && (real === over || !nestedRoots.has(real))) continue;
    const inside = deny.filter((d) => d !== real && isWithin(d, real));
    if (inside.length === 0 || !lstatOrNull(real)?.isDirectory()) {
      out.push(r);
      continue;
    }
    expand(real, r.access, inside);
  }
  // One rule per path, with the widest access any grant gave it.
  const rank = { list: 0, read: 1, write: 2, device: 3 } as const;
  const byPath = new Map<string, LandlockRule>();
  const merged: LandlockRule[] = [];
  for (const r of out) {
    const prev = byPath.get(r.path);
    if (prev === undefined || r.access === 'device' || prev.access === 'device') {
      const copy = { ...r };
      if (prev === undefined && r.access !== 'device') byPath.set(r.path, copy);
      merged.push(copy);
      continue;
    }
    if (rank[r.access] > rank[prev.access]) {
      prev.access = r.access;
      prev.exact = r.exact;
    }
  }
  return { rules: merged, chainDirs, unlisted };
}

/** Prefix of the directory (one per uid, 0700) Landlock mode's TMPDIRs are made in (linux/index.ts tmpParent). */
export const TMP_PARENT_PREFIX = 'process-sandbox-u';

/**
 * Landlock mode: every TMPDIR of this uid lives in one directory (linux/index.ts tmpParent), which the
 * grants (read everything, or a read root over /tmp) would let the command read: other runs'
 * temp files and private caches, and those of runs that start later. That directory is denied
 * like a deny-read path (carveDenied; this run's own TMPDIR, a grant nested in it, stays), and a
 * directory made there later has no rule either. Returns the directory, or why it cannot be
 * denied (a listed gap), or null when nothing the command may read covers it.
 */
export function tmpShield(input: LinuxPlanInput, grants: LandlockRule[]): { dir: string; own: string } | { gap: string } | null {
  const tmp = input.landlockTmpDir;
  if (input.mode !== 'landlock' || !tmp) return null;
  const own = realpathOrNull(tmp) ?? tmp;
  const parent = path.dirname(own);
  const exposed = grants.some((r) => (r.access === 'read' || r.access === 'write') && isWithin(parent, realOf(r)));
  if (!exposed) return null;
  if (!path.basename(parent).startsWith(TMP_PARENT_PREFIX)) {
    return { gap: `it was made in ${parent}, not in a directory of this user's own (which could not be made or was not trusted)` };
  }
  const w = input.rules.writeRoots.find((r) => isWithin(parent, r));
  return w === undefined ? { dir: parent, own } : { gap: `their directory ${parent} lies in the writable root ${w}` };
}
