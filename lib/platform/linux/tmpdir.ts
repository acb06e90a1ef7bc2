/**
 * Landlock mode's per-run TMPDIR on the host's disk: where it is made (a 0700 directory of the
 * user's own, tmpBase), measured against limits.tmpBytes while the command runs (watchTmpDir),
 * removed after the run however the command left it, and the stale ones of hosts that died swept.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { EnforcementReport } from '../../backend';
import type { LinuxNative } from '../../native';
import { lstatOrNull } from '../../permissions/canonical';
import { ownPidNamespace, PIDNS_TAG } from './cgroup';
import { TMP_PARENT_PREFIX } from './landlock-rules';

/**
 * Removes a per-run temp dir and returns what it could not remove (null: all gone). Never throws:
 * it runs in the exit path, and the tree is the command's own, which may hold directories with
 * mode 000, files it cannot unlink, symlinks to host files and paths past PATH_MAX. The common
 * case (left empty) is a single rmdir. An fd held across the rmdir and closed on the thread pool
 * takes the freeing of the inode (~70 us on ext4) off the JS thread; the directory is gone when
 * the exit is delivered, as before. Anything else goes through native.removeTree, which works by
 * directory fds, never follows a symlink (it never changes a symlink's target's mode) and gives
 * the uid's own unreadable directories 0700 first; a second pass retries what the first left.
 */
export function removeTmpDir(native: LinuxNative, dir: string): string | null {
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  } catch {
    // not there, or not a directory, or unreadable: rmdir/removeTree below decide
  }
  let left: string | null = null;
  try {
    fs.rmdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') left = removeTree(native, dir);
  }
  if (fd !== undefined) native.closeOnPool(fd);
  return left;
}

type Removal = { left: number; error: string; path: string };
const leftText = (dir: string, r: Removal): string | null =>
  r.left === 0 ? null : `${dir}: ${r.left} entr${r.left === 1 ? 'y' : 'ies'} could not be removed (first: ${r.path || '.'}: ${r.error})`;

export function removeTree(native: LinuxNative, dir: string): string | null {
  try {
    let r = native.removeTree(path.dirname(dir), path.basename(dir));
    if (r.left > 0) r = native.removeTree(path.dirname(dir), path.basename(dir));
    return leftText(dir, r);
  } catch (e) {
    return `${dir}: ${String((e as Error)?.message ?? e)}`;
  }
}

/**
 * removeTmpDir for the exit path: a tree the command filled (thousands of files take most of a
 * second) is removed on the thread pool; the exit is still delivered only once it is gone.
 */
export function removeTmpDirAfterRun(native: LinuxNative, dir: string): Promise<string | null> {
  if (!native.removeTreeAsync) return Promise.resolve(removeTmpDir(native, dir));
  // The common case as in removeTmpDir: one rmdir, the inode freed on the pool.
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  } catch {
    // not there, or unreadable: rmdir/removeTreeAsync below decide
  }
  let gone = false;
  try {
    fs.rmdirSync(dir);
    gone = true;
  } catch (e) {
    gone = (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
  if (fd !== undefined) native.closeOnPool(fd);
  if (gone) return Promise.resolve(null);
  return new Promise((resolve) => {
    try {
      native.removeTreeAsync(path.dirname(dir), path.basename(dir), (r) => resolve(leftText(dir, r)));
    } catch (e) {
      resolve(`${dir}: ${String((e as Error)?.message ?? e)}`);
    }
  });
}

/** Reports what cleanup left behind without throwing: a process warning (an 'error'-free event). */
export function warnLeft(what: string): void {
  try {
    process.emitWarning(`process-sandbox could not remove ${what}`, { code: 'PSB_CLEANUP' });
  } catch {
    // a throwing 'warning' listener is not ours to crash on
  }
}


const TMP_PREFIX = 'process-sandbox-tmp-';
let staleTmpSwept = false;

/** Where Landlock-mode TMPDIRs may be made besides a TMPDIR the host names (tmpBase). */
const TMP_BASES = ['/var/tmp', '/tmp'];
let chosenTmpBase: string | undefined;

/**
 * The temp dir this uid's directory for Landlock-mode TMPDIRs is made in. The host's own
 * TMPDIR when its environment names one. Otherwise whichever of /var/tmp and /tmp holds fewer
 * entries when the process first asks (then kept): the planner denies the directory by granting
 * every entry beside it, one Landlock rule each in every spawn (linux/plan.ts tmpShield), and a
 * busy /tmp holds hundreds (docs/performance.md). Only a sticky world-writable temp dir, or one
 * owned by this uid, is taken.
 */
export function tmpBase(): string {
  if (process.env.TMPDIR) return os.tmpdir();
  if (chosenTmpBase !== undefined) return chosenTmpBase;
  let best = os.tmpdir();
  let fewest = Infinity;
  for (const base of TMP_BASES) {
    const st = lstatOrNull(base);
    if (st === null || !st.isDirectory() || !((st.mode & 0o1002) === 0o1002 || st.uid === process.getuid?.())) continue;
    let n = Infinity;
    try {
      n = fs.readdirSync(base).length;
    } catch {
      continue;
    }
    if (n < fewest) [best, fewest] = [base, n];
  }
  chosenTmpBase = best;
  return best;
}

/**
 * The directory all of this uid's Landlock-mode TMPDIRs are made in (0700, the uid's own, in
 * tmpBase). The planner denies reads of it but for the run's own TMPDIR (linux/plan.ts
 * tmpShield), so that another Landlock-mode sandbox of the same uid cannot read this one's temp
 * files and private caches, nor those of a run that starts later. null when it cannot be trusted
 * (another uid made the name first, a link, a group- or world-open mode): the TMPDIR is then made
 * in the host's temp dir as before, and the report lists the gap.
 */
export function tmpParent(): string | null {
  const uid = process.getuid?.() ?? 0;
  const dir = path.join(tmpBase(), `${TMP_PARENT_PREFIX}${uid}`);
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') return null;
  }
  const st = lstatOrNull(dir);
  return st !== null && st.isDirectory() && st.uid === uid && (st.mode & 0o077) === 0 ? dir : null;
}

/** Landlock mode's private TMPDIR for one run. */
export function makeTmpDir(native: LinuxNative): string {
  sweepStaleTmpDirs(native);
  return fs.mkdtempSync(path.join(tmpParent() ?? os.tmpdir(), `${TMP_PREFIX}${process.pid}-${PIDNS_TAG}-`));
}

/**
 * Landlock mode's per-run TMPDIRs are named after the host pid. A host that was killed never
 * removed its own; the first Landlock-mode spawn of each process removes those whose host is gone.
 * It never fails the spawn: what it cannot remove (an entry the uid may not delete) is skipped
 * with a process warning, and the next host process tries again.
 */
function sweepStaleTmpDirs(native: LinuxNative): void {
  if (staleTmpSwept) return;
  staleTmpSwept = true;
  const uid = process.getuid?.();
  // This uid's parents (tmpParent, in any temp dir an earlier host may have chosen), and the
  // host's temp dir itself (older versions, and runs whose parent could not be trusted).
  const bases = [...new Set([os.tmpdir(), tmpBase(), ...TMP_BASES])];
  const parents = [os.tmpdir(), ...bases.map((b) => path.join(b, `${TMP_PARENT_PREFIX}${uid ?? 0}`))];
  const found: Array<[string, string]> = [];
  for (const parent of parents) {
    try {
      for (const n of fs.readdirSync(parent)) if (n.startsWith(TMP_PREFIX)) found.push([parent, n]);
    } catch {
      // absent or unreadable: nothing of ours to sweep there
    }
  }
  for (const [parent, n] of found) {
    const pid = Number(n.slice(TMP_PREFIX.length).split('-')[0]);
    // Another pid namespace's host cannot be judged by its pid here (linux/cgroup.ts PIDNS_TAG).
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || !ownPidNamespace(n.slice(TMP_PREFIX.length))) continue;
    const dir = path.join(parent, n);
    try {
      if (fs.lstatSync(dir).uid !== uid) continue;
      process.kill(pid, 0);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ESRCH') continue;
      const left = removeTree(native, dir);
      if (left) warnLeft(`a stale TMPDIR of a host that is gone: ${left}`);
    }
  }
}

/** How often Landlock mode checks its TMPDIR against limits.tmpBytes (at least; see watchTmpDir). */
const TMP_CHECK_MS = 250;
/** Entries the TMPDIR may hold: one per 4 KiB of tmpBytes, as isolated mode's tmpfs inodes, at least 1024. */
const tmpEntryLimit = (maxBytes: number): number => Math.max(1024, Math.floor(maxBytes / 4096));

/**
 * Landlock mode's TMPDIR is on the host's disk (isolated mode's is a tmpfs of limits.tmpBytes).
 * Without mounts there is no size-limited store to give it, so the host measures it: a walk on
 * the thread pool (native.measureTree: allocated blocks and entries) every TMP_CHECK_MS, or 10
 * times as long as the last walk took when that is longer (a huge tree costs the host no more
 * than ~10% of one pool thread), and `onOver` stops the run once it is past tmpBytes or past the
 * inode count isolated mode's tmpfs would have (one per 4 KiB, at least 1024). A check, not a
 * bound: between two checks a command can write what the disk takes in that time. Returns stop().
 */
export function watchTmpDir(native: LinuxNative, dir: string, maxBytes: number, onOver: (message: string) => void): () => void {
  const maxInodes = tmpEntryLimit(maxBytes);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const schedule = (ms: number) => {
    timer = setTimeout(check, ms);
    timer.unref();
  };
  const check = () => {
    const t0 = performance.now();
    try {
      native.measureTree(dir, maxInodes, maxBytes, (u) => {
        if (stopped) return;
        if (u.bytes > maxBytes || u.inodes > maxInodes) {
          stopped = true;
          const what = u.bytes > maxBytes ? `more than ${maxBytes} bytes (limits.tmpBytes)` : `more than ${maxInodes} entries (one per 4 KiB of limits.tmpBytes)`;
          onOver(`the command's TMPDIR ${dir} held ${what}; the command and everything it started were killed`);
          return;
        }
        schedule(Math.max(TMP_CHECK_MS, 10 * (performance.now() - t0)));
      });
    } catch {
      // not measurable (an addon without measureTree): the report says the check is missing
    }
  };
  schedule(TMP_CHECK_MS);
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
  };
}

/** What the report says of Landlock mode's TMPDIR size check. */
export function withTmpCheck(report: EnforcementReport, maxBytes: number, checked: boolean): EnforcementReport {
  if (!checked) {
    return { ...report, gaps: [...report.gaps, `the private TMPDIR is on the host's disk and its size is not checked (limits.tmpBytes ${maxBytes} does not apply)`] };
  }
  return {
    ...report,
    mechanisms: {
      ...report.mechanisms,
      tmpDirCheck: `TMPDIR measured by the host at least every ${TMP_CHECK_MS} ms; the run is killed past ${maxBytes} bytes or ${tmpEntryLimit(maxBytes)} entries`,
    },
    gaps: [
      ...report.gaps,
      `limits.tmpBytes is checked, not enforced by the filesystem: the private TMPDIR is on the host's disk and is measured ` +
        `at least every ${TMP_CHECK_MS} ms, so a burst can pass ${maxBytes} bytes by what it writes between two checks; ` +
        `files unlinked while open and directories the host's uid cannot read are not counted (the writable roots are not bounded at all)`,
    ],
  };
}
