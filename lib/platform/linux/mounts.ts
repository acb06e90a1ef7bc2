/**
 * Isolated mode's mount steps (planMounts), in the order init carries them out: the private /tmp,
 * the read-only root, the writable roots and their carve-outs, placeholders for missing protected
 * names, deny-read masks, git's exclude view. MountKind mirrors native/linux/spawn_linux.h.
 */
import * as path from 'node:path';
import { SandboxError } from '../../errors';
import type { LinuxMountOp } from '../../native';
import { isWithin } from '../../paths';
import { lstatOrNull } from '../../permissions/canonical';
import { gitExcludeViews } from './git-view';
import { realpathOrNull } from './landlock-rules';
import { tmpfsSizes } from './limits';
import type { LinuxPlanInput } from './plan-types';

/** Mirrors native/linux/spawn_linux.h MountOpKind (append only). */
export const MountKind = {
  TmpClone: 0,
  Tmpfs: 1,
  Mkdir: 2,
  Mkfile: 3,
  MoveSlot: 4,
  ReadOnlyAll: 5,
  BindRw: 6,
  BindRo: 7,
  Pin: 8,
  GhostDir: 9,
  GhostFile: 10,
  MaskDir: 11,
  MaskFile: 12,
  Proc: 13,
  Dev: 14,
  SetReadOnly: 15,
  ClearReadOnly: 16,
  Sys: 17,
  Overlay: 18,
  ViewFile: 19,
  StageOverlay: 20,
} as const;

/** MountOp.arg of a Pin or BindRo step whose path may have vanished since planning (planMounts). */
export const VANISH_OK = 1;

/**
 * Protected names that are directories (a missing one is held by an empty read-only directory):
 * git's and the agents' metadata directories and the 'startup-files' editor and agent folders.
 */
const DIR_PLACEHOLDER_NAMES = new Set(['.git', 'hooks', 'modules', '.codex', '.agents', '.aws', '.claude', '.vscode', '.idea', 'commands', 'agents']);

/**
 * A missing protected path is held by an empty placeholder of the right kind: the directory names
 * above are directories, every other name (`config`, `.mcp.json`, start-up files, a `protect` or
 * srt `denyWrite` entry) a file. A write to a name held by a directory fails with EISDIR ("Is a
 * directory"), which does not read as a refusal; on a read-only file it is EROFS.
 */
export function placeholderIsFile(p: string): boolean {
  return !DIR_PLACEHOLDER_NAMES.has(path.basename(p));
}

/** Mount steps for isolated mode, in execution order. */
export interface MountPlan {
  mounts: LinuxMountOp[];
  tmpSlots: number;
  ghosts: string[];
  /** Protected paths only partly protected (degraded). */
  protectGaps: string[];
  /** Deny-read paths only partly enforced. */
  denyGaps: string[];
}

/** What the steps of planMounts share: the mounts so far and what they decided. */
interface MountState {
  rules: LinuxPlanInput['rules'];
  mounts: LinuxMountOp[];
  ghosts: string[];
  protectGaps: string[];
  denyGaps: string[];
  tmpSlots: number;
  /** The writable roots, shortest first. */
  writeRoots: string[];
  /** Read-only areas applied so far (a symlinked carve-out counts as its target). */
  readOnlyAreas: string[];
}

export function planMounts(input: LinuxPlanInput): MountPlan {
  const { rules } = input;
  const m: MountState = {
    rules,
    mounts: [...(input.stageMounts ?? [])],
    ghosts: [],
    protectGaps: [],
    denyGaps: [],
    tmpSlots: 0,
    writeRoots: [...rules.writeRoots].sort((a, b) => a.length - b.length),
    readOnlyAreas: [],
  };
  if (rules.tmp === 'private') planPrivateTmp(m, input.cwd);
  m.mounts.push({ kind: MountKind.ReadOnlyAll, path: '/' });
  if (rules.tmp === 'private') m.mounts.push({ kind: MountKind.ClearReadOnly, path: '/tmp' });
  planRootsAndCarveOuts(m);
  planDenyReadMasks(m);
  // Git inside must not take the placeholders for the command's files (linux/git-view.ts).
  m.mounts.push(...gitExcludeViews(m.ghosts, rules.denyRead, MountKind.ViewFile));
  m.mounts.push({ kind: MountKind.Proc, path: '/proc' });
  if (rules.network.kind !== 'full') m.mounts.push({ kind: MountKind.Sys, path: '/sys' });
  planDev(m);
  return { mounts: m.mounts, tmpSlots: m.tmpSlots, ghosts: m.ghosts, protectGaps: m.protectGaps, denyGaps: m.denyGaps };
}

/**
 * After `base` was covered by a new file system: the path down to `p` made again in it, then
 * what was cloned into `slot` (its original mount) moved back onto `p`.
 */
function recreateUnder(m: MountState, base: string, p: string, slot: number): void {
  const parts = path.relative(base, p).split('/').filter((x) => x !== '');
  for (let i = 1; i < parts.length; i++) m.mounts.push({ kind: MountKind.Mkdir, path: path.join(base, ...parts.slice(0, i)) });
  if (parts.length > 0) m.mounts.push({ kind: lstatOrNull(p)?.isDirectory() === false ? MountKind.Mkfile : MountKind.Mkdir, path: p });
  m.mounts.push({ kind: MountKind.MoveSlot, path: p, arg: slot });
}

/** A private tmpfs /tmp, with the writable roots, cwd and read roots under it carried over. */
function planPrivateTmp(m: MountState, cwd: string): void {
  const { rules } = m;
  // Paths under /tmp the command must still see after /tmp is covered by a private tmpfs:
  // writable roots (read-write) and the cwd (read-only unless inside a writable root).
  const exposures: string[] = [];
  const candidates = [...rules.writeRoots, cwd, ...(rules.readAll ? [] : rules.readRoots)];
  for (const p of [...new Set(candidates)].sort()) {
    if (p === '/tmp' || !isWithin(p, '/tmp')) continue;
    if (exposures.some((e) => isWithin(p, e))) continue;
    exposures.push(p);
  }
  exposures.forEach((p, slot) => m.mounts.push({ kind: MountKind.TmpClone, path: p, arg: slot }));
  m.tmpSlots = exposures.length;
  m.mounts.push({ kind: MountKind.Tmpfs, path: '/tmp', data: `mode=1777,${tmpfsSizes(rules.limits.tmpBytes).tmp}` });
  exposures.forEach((p, slot) => recreateUnder(m, '/tmp', p, slot));
}

/** The writable roots bound read-write, and the read-only carve-outs inside them. */
function planRootsAndCarveOuts(m: MountState): void {
  const { rules, mounts, writeRoots } = m;
  // Writable roots and read-only carve-outs are applied together, outermost first: a writable
  // root nested in a carve-out (ws/.codex/cache, a root under a `protect`ed directory) is bound
  // after the carve-out made its parent read-only, so it stays writable, and the placeholders
  // inside it are created in its writable bind instead of failing with EROFS.
  const alreadyReadOnly = (p: string): boolean => isAlreadyReadOnly(m, p);
  type Step = { path: string; write: boolean };
  const steps: Step[] = [
    ...writeRoots.map((w) => ({ path: w, write: true })),
    ...rules.readOnly.map((p) => ({ path: p, write: false })),
  ].sort((a, b) => a.path.length - b.path.length || Number(b.write) - Number(a.write));

  // Every directory between the writable root and the carve-out is pinned (bound onto itself) so
  // it cannot be renamed away and recreated (FS-06).
  const pinned = new Set<string>();
  const heldAncestors = new Set<string>();
  // A directory can vanish between this plan and the mounts (another run's scratch tree in a
  // shared /tmp, a concurrent `rm -rf`). Steps marked VANISH_OK (arg) then skip it instead of
  // failing the spawn; spawn_mounts.cc skips only when the name is really gone (lstat ENOENT,
  // not a dangling symlink put in its place). Why that is safe:
  //  - a pin holds an existing directory so it cannot be renamed away and replaced; with the
  //    directory gone there is nothing to hold. What lies below it is decided by its own steps:
  //  - a carve-out protected only because it existed (rules.presentOnly: a nested repository's
  //    hooks, an unreadable directory...) that is gone leaves nothing to protect, and a plan made
  //    now would not hold its name either (the command may create any new repository anyway);
  //  - every other carve-out is held even when missing (a placeholder keeps the name). Its step
  //    is not marked: if it or its parent vanished, the bind or the placeholder fails with ENOENT
  //    before the command runs, so a held name never becomes creatable unprotected; the backend
  //    then plans once more (lib/platform/linux/index.ts), and that plan holds the name as missing.
  const presentOnly = new Set(rules.presentOnly ?? []);
  const held: CarveOutState = { pinned, heldAncestors, presentOnly, alreadyReadOnly };
  for (const step of steps) {
    if (step.write) {
      if (lstatOrNull(step.path)) mounts.push({ kind: MountKind.BindRw, path: step.path });
      continue;
    }
    const root = writeRoots.filter((w) => isWithin(step.path, w)).sort((a, b) => b.length - a.length)[0];
    if (root && step.path !== root) protectCarveOut(m, step.path, root, held);
  }
}

interface CarveOutState {
  /** Directories bound onto themselves so far (FS-06). */
  pinned: Set<string>;
  /** First missing directories held for protected paths whose parent is missing too. */
  heldAncestors: Set<string>;
  presentOnly: Set<string>;
  alreadyReadOnly: (p: string) => boolean;
}

/** The read-only carve-out `step` inside the writable root `root`: pins, then a bind or a placeholder. */
function protectCarveOut(m: MountState, step: string, root: string, c: CarveOutState): void {
  const { rules, mounts, ghosts, protectGaps, readOnlyAreas } = m;
  const { pinned, heldAncestors, presentOnly, alreadyReadOnly } = c;
  let p = step;
  let st = lstatOrNull(p);
  let ancestor = false;
  if (!st && !lstatOrNull(path.dirname(p))?.isDirectory()) {
    // A protected path whose parent is missing too (`protect: [ws/tools/deploy.sh]`, a
    // core.hooksPath of .husky/_ before .husky exists): the command could create the whole
    // chain. Its first missing directory is held instead (an existing non-directory on the way
    // would have to be removed first, which the pins and binds do not cover: left as is).
    let first: string | null = null;
    let cur = root;
    for (const part of path.relative(root, p).split('/')) {
      cur = path.join(cur, part);
      const s2 = lstatOrNull(cur);
      if (s2 === null) {
        first = cur;
        break;
      }
      if (!s2.isDirectory()) break;
    }
    if (first === null || heldAncestors.has(first)) return;
    heldAncestors.add(first);
    p = first;
    st = null;
    ancestor = true;
  }
  // Under a read-only area with no writable root in between, a missing path cannot be created
  // (and an existing one is read-only already): nothing to do.
  if (!st && alreadyReadOnly(p)) return;
  for (let dir = path.dirname(p); dir !== root && isWithin(dir, root); dir = path.dirname(dir)) {
    if (pinned.has(dir)) continue;
    pinned.add(dir);
    mounts.push({ kind: MountKind.Pin, path: dir, arg: VANISH_OK });
  }
  if (st?.isSymbolicLink()) {
    // A mount cannot be placed on a symlink: its target can be made read-only, but the link
    // itself stays an ordinary entry of the writable root, which the command could replace
    // with a real directory holding planted config. Refuse rather than pretend.
    if (!rules.degraded) {
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        `the protected path ${p} is a symlink inside the writable root ${root}; the link itself cannot be made ` +
          `read-only. Replace it with the real directory or file, or pass degraded: true to accept the gap`,
        { detail: { path: p } },
      );
    }
    protectGaps.push(`the protected symlink ${p} can be replaced (only its target is read-only)`);
    const target = realpathOrNull(p);
    if (target !== null) {
      mounts.push({ kind: MountKind.BindRo, path: p });
      readOnlyAreas.push(target);
    }
  } else if (st) {
    mounts.push({ kind: MountKind.BindRo, path: p, ...(!ancestor && presentOnly.has(p) ? { arg: VANISH_OK } : {}) });
    readOnlyAreas.push(p);
  } else {
    // A missing protected path becomes an empty read-only placeholder so it cannot be created.
    mounts.push({ kind: !ancestor && placeholderIsFile(p) ? MountKind.GhostFile : MountKind.GhostDir, path: p });
    ghosts.push(p);
    readOnlyAreas.push(p);
  }
  pinned.add(p);
}

/** Under a read-only area with no writable root in between. */
function isAlreadyReadOnly(m: MountState, p: string): boolean {
  return m.readOnlyAreas.some((ro) => isWithin(p, ro) && !m.writeRoots.some((w) => isWithin(p, w) && w !== ro && isWithin(w, ro)));
}

/** Deny-read paths masked (a missing one inside a writable root held under a mask). */
function planDenyReadMasks(m: MountState): void {
  const { rules, mounts, ghosts, denyGaps, writeRoots } = m;
  for (const d of rules.denyRead) {
    const st = lstatOrNull(d);
    if (!st) {
      // Missing at start: inside a writable root it could be created and then read, so an empty
      // placeholder holds the name under an unreadable mask for the run (removed afterwards).
      const inWritable = writeRoots.some((w) => isWithin(d, w) && d !== w);
      if (inWritable && isAlreadyReadOnly(m, d)) continue; // uncreatable there: nothing to hold
      if (inWritable && lstatOrNull(path.dirname(d))?.isDirectory()) {
        mounts.push({ kind: MountKind.GhostDir, path: d });
        mounts.push({ kind: MountKind.MaskDir, path: d });
        ghosts.push(d);
      } else if (!inWritable) {
        // The command cannot create it, but the host could, during the run.
        denyGaps.push(`the deny-read path ${d} did not exist at start; if something outside creates it during the run, it is readable`);
      }
      continue;
    }
    const nested = st.isDirectory() ? writeRoots.filter((w) => w !== d && isWithin(w, d)) : [];
    if (nested.length === 0) {
      mounts.push({ kind: st.isDirectory() ? MountKind.MaskDir : MountKind.MaskFile, path: d });
      continue;
    }
    // Most specific wins: writable roots inside a deny-read directory stay usable. Their mounts
    // are cloned, the directory is covered by an empty tmpfs that can be traversed but not listed,
    // and only the paths down to those roots are recreated in it before it turns read-only.
    const slots = nested.map((w) => {
      const slot = m.tmpSlots++;
      mounts.push({ kind: MountKind.TmpClone, path: w, arg: slot });
      return slot;
    });
    mounts.push({ kind: MountKind.Tmpfs, path: d, data: 'mode=0111,size=64k' });
    nested.forEach((w, i) => recreateUnder(m, d, w, slots[i]!));
    mounts.push({ kind: MountKind.SetReadOnly, path: d });
  }
}

/** Isolated mode's own /dev, and a writable root in the host's /dev/shm carried over onto it. */
function planDev(m: MountState): void {
  const { mounts, writeRoots } = m;
  // Isolated mode builds its own /dev, which would silently cover a writable root there. The
  // host's /dev/shm (or a directory in it) asked for as a writable root is carried over onto the
  // new /dev/shm, like the /tmp exposures; any other /dev path cannot be, and is refused.
  const devRoots = writeRoots.filter((w) => isWithin(w, '/dev') && lstatOrNull(w));
  const shmSlots: Array<{ path: string; slot: number }> = [];
  for (const w of devRoots) {
    if (!isWithin(w, '/dev/shm')) {
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        `the writable root ${w} is in /dev, which isolated mode replaces with its own minimal /dev; only /dev/shm ` +
          `(or a directory in it) can be shared with the host`,
        { detail: { path: w } },
      );
    }
    if (shmSlots.some((e) => isWithin(w, e.path))) continue;
    const slot = m.tmpSlots++;
    mounts.push({ kind: MountKind.TmpClone, path: w, arg: slot });
    shmSlots.push({ path: w, slot });
  }
  mounts.push({ kind: MountKind.Dev, path: '/dev' });
  for (const { path: w, slot } of shmSlots) recreateUnder(m, '/dev/shm', w, slot);
}
