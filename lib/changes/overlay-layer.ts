/**
 * Isolated mode's `changes`: the staging layer. Each writable root is mounted, inside the
 * sandbox's own mount namespace, as an overlay whose lower layer is the root itself and whose
 * upper and work dirs live in a host directory (the layer dir) that the command cannot reach:
 * it is masked in the sandbox's view by an unreadable tmpfs. What the command writes lands in the
 * upper dirs only; lib/changes/overlay.ts lists, applies and discards it from there.
 *
 * Unprivileged overlayfs (a user namespace, which isolated mode always has, as root too) needs
 * Linux 5.11 and the `userxattr` option: whiteouts are 0/0 character devices, opaque directories
 * carry user.overlay.opaque, so the layer dir's file system must take user xattrs (tmpfs only
 * since Linux 6.6). Without redirect_dir (refused with userxattr) renaming a directory of the
 * lower layer fails with EXDEV, and tools fall back to copying: a rename is listed as deleted +
 * created. Whatever the host lacks is refused here, before anything runs.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import type { LinuxMountOp, LinuxNative } from '../native';
import { isWithin } from '../paths';
import { lstatOrNull } from '../permissions/canonical';
import { overlayAvailable } from '../platform/linux/caches';
import { writeMeta } from './journal';
import type { ChangesOptions } from './types';

/** Mirrors MountKind (lib/platform/linux/mounts.ts). */
const K = { MaskDir: 11, StageOverlay: 20 } as const;

/** One overlaid writable root: its upper dir (the command's writes) in the layer dir. */
export interface StagedRoot {
  root: string;
  upper: string;
}

export interface StageLayer {
  /** The layer dir (0700): upper/<n>, work/<n>, the start marker, meta.json and the journals of applies (applied-<n>). */
  dir: string;
  roots: StagedRoot[];
  /**
   * The run's start by the clock file times come from (startMark): a real path whose ctime is
   * past it (at or past it, where that clock did not tick while the mark waited) was changed
   * outside during the run.
   */
  startNs: bigint;
  startTicked: boolean;
  /** The mount steps that go first in the plan (lib/platform/linux/plan-types.ts stageMounts). */
  mounts: LinuxMountOp[];
}

const refuse = (message: string, detail?: Record<string, unknown>) =>
  new SandboxError('EUNSUPPORTED_POLICY', `changes in isolated mode: ${message}`, detail ? { detail } : {});

/** Linux 5.11 or later (unprivileged overlayfs in a user namespace). */
function kernelTooOld(): string | null {
  const m = /^(\d+)\.(\d+)/.exec(os.release());
  if (!m) return null;
  const [maj, min] = [Number(m[1]), Number(m[2])];
  return maj > 5 || (maj === 5 && min >= 11) ? null : os.release();
}

/** The writable roots that get an overlay: the existing outermost ones (a nested root is inside one already). */
export function stagedRootPaths(writeRoots: readonly string[]): string[] {
  const present = writeRoots.filter((w) => lstatOrNull(w) !== null);
  return present.filter((w) => !present.some((o) => o !== w && isWithin(w, o))).sort();
}

/**
 * The per-user parent of default layer dirs (0700, the uid's own), on a disk file system first:
 * /var/tmp, then the host's temp dir. null where none can be trusted.
 */
function defaultParent(native: LinuxNative, avoid: readonly string[]): string | null {
  const uid = process.getuid?.() ?? 0;
  for (const base of ['/var/tmp', os.tmpdir()]) {
    const dir = path.join(base, `process-sandbox-changes-u${uid}`);
    if (avoid.some((w) => isWithin(dir, w) || isWithin(w, dir))) continue;
    try {
      fs.mkdirSync(dir, { mode: 0o700 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') continue;
    }
    const st = lstatOrNull(dir);
    if (!st?.isDirectory() || st.uid !== uid || (st.mode & 0o077) !== 0) continue;
    if (userXattrs(native, dir) === 0) return dir;
  }
  return null;
}

/** 0, or the errno with which the file system at `dir` refuses user xattrs. */
function userXattrs(native: LinuxNative, dir: string): number {
  if (!native.xattr) return 95; // EOPNOTSUPP: an addon without the call
  const r = native.xattr(dir, 'user.process-sandbox.probe', '1');
  return typeof r === 'number' ? -r : 0;
}

/** A new 0700 directory: `dir` when the caller named one (absent, or empty), else one under defaultParent. */
export function makePrivateDir(native: LinuxNative, dir: string | undefined, writeRoots: readonly string[], label: string): string {
  if (dir === undefined) {
    const parent = defaultParent(native, writeRoots);
    if (parent === null) {
      throw refuse(`no directory for the ${label} could be made: /var/tmp and ${os.tmpdir()} hold no private directory of this uid on a file system with user xattrs; name one with changes.dir`);
    }
    return fs.mkdtempSync(path.join(parent, `${label}-`));
  }
  if (!path.isAbsolute(dir)) throw new SandboxError('EINVALID_ARGUMENT', `changes.dir must be an absolute path: ${dir}`);
  const inside = writeRoots.find((w) => isWithin(dir, w) || isWithin(w, dir));
  if (inside !== undefined) {
    throw new SandboxError('EINVALID_ARGUMENT', `changes.dir ${dir} overlaps the writable root ${inside}: the command could reach it`, { detail: { dir, root: inside } });
  }
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new SandboxError('EINVALID_ARGUMENT', `changes.dir ${dir} cannot be made: ${(e as Error).message}`);
    const st = lstatOrNull(dir);
    if (!st?.isDirectory() || fs.readdirSync(dir).length > 0) {
      throw new SandboxError('EINVALID_ARGUMENT', `changes.dir ${dir} must be a new or empty directory`, { detail: { dir } });
    }
    fs.chmodSync(dir, 0o700);
  }
  return dir;
}

/** Refuses what this kernel or these options cannot hold (before anything is made). */
function checkStageHost(opts: ChangesOptions): void {
  const old = kernelTooOld();
  if (old !== null) throw refuse(`staging needs overlayfs in a user namespace (Linux 5.11 or later); this kernel is ${old}`);
  if (!overlayAvailable()) throw refuse('staging needs overlayfs, which this kernel lacks (CONFIG_OVERLAY_FS)');
  if (opts.maxBytes !== undefined) {
    throw refuse(
      `maxBytes cannot be held: the staged writes land in an overlayfs upper dir on the host's file system, which nothing ` +
        `bounds while the command writes (a size-limited tmpfs for it would live in the sandbox's own mount namespace, out of the ` +
        `host's reach once the command ends); leave maxBytes out, or use mode 'landlock'`,
      { maxBytes: opts.maxBytes },
    );
  }
}

/**
 * Makes the layer for one run (the caller removes it on any later failure). Refuses, naming why,
 * what this host or these options cannot hold: nothing runs then.
 */
export function prepareStageLayer(native: LinuxNative, opts: ChangesOptions, writeRoots: readonly string[], layerDir?: string): StageLayer {
  checkStageHost(opts);
  const roots = stagedRootPaths(writeRoots);
  for (const r of roots) {
    if (!lstatOrNull(r)?.isDirectory()) throw refuse(`the writable root ${r} is not a directory; an overlay can only stage a directory`, { root: r });
  }
  const dir = layerDir ?? makePrivateDir(native, opts.dir, writeRoots, 'layer');
  // overlayfs options separate with ',' and ':' (escaping differs between kernel versions).
  const bad = [dir, ...roots].find((p) => /[,:\\\n]/.test(p));
  if (bad !== undefined) throw refuse(`the path ${bad} holds a character overlayfs options cannot carry (',', ':', '\\' or a newline)`, { path: bad });
  const errno = userXattrs(native, dir);
  if (errno !== 0) {
    throw refuse(
      `the layer dir ${dir} is on a file system without user xattrs (errno ${errno}), which unprivileged overlayfs needs for ` +
        `whiteouts and opaque directories (tmpfs has them only since Linux 6.6); name a directory on ext4, xfs or btrfs with changes.dir`,
      { dir, errno },
    );
  }
  fs.mkdirSync(path.join(dir, 'upper'), { mode: 0o700 });
  fs.mkdirSync(path.join(dir, 'work'), { mode: 0o700 });
  const staged: StagedRoot[] = [];
  const mounts: LinuxMountOp[] = [];
  roots.forEach((root, i) => {
    const upper = path.join(dir, 'upper', String(i));
    const work = path.join(dir, 'work', String(i));
    fs.mkdirSync(upper, { mode: 0o755 });
    fs.mkdirSync(work, { mode: 0o700 });
    // The overlay's root takes the upper dir's mode and owner: those of the root itself.
    const st = fs.lstatSync(root);
    if (process.geteuid?.() === 0) fs.chownSync(upper, st.uid, st.gid);
    fs.chmodSync(upper, st.mode & 0o7777);
    staged.push({ root, upper });
    mounts.push({ kind: K.StageOverlay, path: root, data: `userxattr,lowerdir=${root},upperdir=${upper},workdir=${work}` });
  });
  // The layer dir vanishes from the sandbox's view: the overlays hold their upper and work dirs
  // already, and the command can neither read the staged writes nor alter what apply() copies.
  if (roots.length > 0) mounts.push({ kind: K.MaskDir, path: dir });
  const mark = startMark(dir);
  // What a later process needs to reopen the layer (openStagedChanges): the roots in the order of
  // upper/<n>, and the start mark (the marker's own ctime moved on while the mark waited).
  // overlayChanges adds the placeholders to skip and `ended` once the sandbox has ended.
  writeMeta(dir, { mode: 'stage', roots, startNs: String(mark.startNs), startTicked: mark.startTicked, started: new Date().toISOString() });
  return { dir, roots: staged, ...mark, mounts };
}

/**
 * The run's start by the clock file times come from: the ctime of a marker, and then a wait (one
 * tick of that clock, a few ms; at most 20 ms) until a change gets a later ctime. Every change made
 * outside from here on (the command has not started yet) has a ctime past the mark; every change
 * before it one at or before it. Where the clock is coarser (a file system with 1 s times), the
 * mark's own tick counts as the run's: a change made just before the start is then refused too.
 */
function startMark(dir: string): { startNs: bigint; startTicked: boolean } {
  const marker = path.join(dir, 'started');
  fs.writeFileSync(marker, '', { mode: 0o600 });
  const startNs = fs.lstatSync(marker, { bigint: true }).ctimeNs;
  const until = process.hrtime.bigint() + 20_000_000n;
  for (let i = 0; process.hrtime.bigint() < until; i++) {
    if (fs.lstatSync(marker, { bigint: true }).ctimeNs > startNs) return { startNs, startTicked: true };
    fs.chmodSync(marker, i % 2 === 0 ? 0o400 : 0o600);
  }
  return { startNs, startTicked: false };
}

/**
 * An isolated-mode run's layer, and for `record` its journal dir: the caller's `dir` (or a new
 * private one), with the layer a private sibling of it. Nothing is left behind on a refusal.
 */
export function prepareIsolatedChanges(native: LinuxNative, opts: ChangesOptions, writeRoots: readonly string[]): { layer: StageLayer; journalDir?: string } {
  if (opts.mode === 'stage') return { layer: prepareStageLayer(native, opts, writeRoots) };
  checkStageHost(opts);
  const journalDir = makePrivateDir(native, opts.dir, writeRoots, 'journal');
  let layerDir: string | undefined;
  try {
    layerDir = fs.mkdtempSync(`${journalDir}.layer-`);
    fs.chmodSync(layerDir, 0o700);
    return { layer: prepareStageLayer(native, opts, writeRoots, layerDir), journalDir };
  } catch (e) {
    if (layerDir !== undefined) fs.rmSync(layerDir, { recursive: true, force: true });
    if (opts.dir === undefined) fs.rmSync(journalDir, { recursive: true, force: true });
    throw e;
  }
}

/** Removes a layer that never served a run (the spawn failed). */
export function dropLayer(native: LinuxNative, layer: StageLayer, journalDir?: string): void {
  for (const d of [layer.dir, ...(journalDir ? [journalDir] : [])]) {
    try {
      native.removeTree(path.dirname(d), path.basename(d));
    } catch {
      // best effort: a leftover private dir of this uid
    }
  }
}
