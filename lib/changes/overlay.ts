/**
 * Isolated mode's `changes` backends (lib/changes/types.ts ChangesBackend), read from the staging
 * layer (overlay-layer.ts): the upper dir of each overlaid writable root holds exactly what the
 * command changed there.
 *  - a 0/0 character device (a whiteout): the lower entry was deleted (a directory with everything
 *    below it, each listed);
 *  - a directory with user.overlay.opaque "y": the lower directory was removed and made again,
 *    so the lower entries not in it were deleted;
 *  - any other entry: created where the real root has none, modified where it differs from the
 *    real one (type, mode, content, symlink target). A copy-up that changed nothing (a file opened
 *    for writing and left as it was, times only) is no change.
 * A rename shows as deleted + created: without redirect_dir, overlayfs copies a renamed file up
 * under its new name and whiteouts the old one (and renaming a lower directory fails with EXDEV,
 * so tools copy it).
 *
 * stage: apply(paths?) copies chosen entries into the real roots, each change journaled through
 * JournalWriter first, so an apply can be reverted (revertJournal). Before anything is applied,
 * every chosen path is checked against changes made outside during the run (the real roots are
 * never touched by the command, so any change there since the start is someone else's): if one
 * was, NOTHING is applied and a SandboxError 'ECHANGED_OUTSIDE' names them all.
 * record (isolated): the same layer, applied whole through the caller's journal once the sandbox
 * has ended; the writes become visible outside at that moment, and revert() is revertJournal.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import type { LinuxNative } from '../native';
import { isWithin } from '../paths';
import { lstatOrNull } from '../permissions/canonical';
import { JournalWriter, revertJournal, writeMeta } from './journal';
import type { StageLayer } from './overlay-layer';
import type { ChangeEntry, ChangesBackend, ChangesMode } from './types';

type EntryType = ChangeEntry['type'];

/** A change, with where its new state is in the upper dir and (modified) what type was there. */
interface Diff extends ChangeEntry {
  upper?: string;
  was?: EntryType;
  /** created, but the upper entry was copied up from the lower one: it existed when the command changed it. */
  copiedUp?: boolean;
}

function typeOf(st: fs.Stats): EntryType {
  return st.isFile() ? 'file' : st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'other';
}

const isWhiteout = (st: fs.Stats): boolean => st.isCharacterDevice() && st.rdev === 0;

function sameBytes(a: string, b: string): boolean {
  const fa = fs.openSync(a, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  const fb = fs.openSync(b, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  try {
    const ba = Buffer.allocUnsafe(1 << 16);
    const bb = Buffer.allocUnsafe(1 << 16);
    for (;;) {
      const na = fs.readSync(fa, ba, 0, ba.length, null);
      const nb = fs.readSync(fb, bb, 0, bb.length, null);
      if (na !== nb || ba.compare(bb, 0, nb, 0, na) !== 0) return false;
      if (na === 0) return true;
    }
  } finally {
    fs.closeSync(fa);
    fs.closeSync(fb);
  }
}

/** Whether the upper entry `u` leaves the real entry `r` (same type) as it was. */
function unchanged(u: string, us: fs.Stats, r: string, rs: fs.Stats): boolean {
  if (us.isSymbolicLink()) return fs.readlinkSync(u) === fs.readlinkSync(r);
  if ((us.mode & 0o7777) !== (rs.mode & 0o7777)) return false;
  if (us.isFile()) return us.size === rs.size && sameBytes(u, r);
  return us.rdev === rs.rdev;
}

/** The names in `dir`, sorted; a name that is not UTF-8 (which a path string cannot carry) is refused. */
function utf8Names(dir: string): string[] {
  const raw = fs.readdirSync(dir, { encoding: 'buffer' });
  const bad = raw.find((n) => Buffer.compare(Buffer.from(n.toString('utf8')), n) !== 0);
  if (bad !== undefined) {
    throw new SandboxError('EUNSUPPORTED_POLICY', `changes: the staged layer holds a name that is not UTF-8 in ${dir} (${bad.toString('hex')} in hex); it cannot be listed or applied: discard() it`, {
      detail: { dir, name: bad.toString('hex') },
    });
  }
  return raw.map((n) => n.toString('utf8')).sort();
}

/** Everything the upper dirs of a layer change, sorted by path. `skip`: placeholders init made there. */
export function diffLayer(native: LinuxNative, layer: StageLayer, skip: ReadonlySet<string>): Diff[] {
  const out: Diff[] = [];
  const xattr = (p: string) => native.xattr?.(p, 'user.overlay.opaque');
  const origin = (p: string) => typeof native.xattr?.(p, 'user.overlay.origin') === 'string';
  const deletedTree = (p: string, st: fs.Stats) => {
    out.push({ path: p, kind: 'deleted', type: typeOf(st) });
    if (st.isDirectory()) deletedBelow(p, () => false);
  };
  const deletedBelow = (real: string, kept: (name: string) => boolean) => {
    for (const n of fs.readdirSync(real)) if (!kept(n)) deletedTree(path.join(real, n), fs.lstatSync(path.join(real, n)));
  };
  // hidden: a directory above is opaque, so the lower directories below it are not merged
  // either (a directory made inside an opaque one is not marked itself).
  const walk = (udir: string, rdir: string, hidden: boolean) => {
    for (const name of utf8Names(udir)) {
      const u = path.join(udir, name);
      const real = path.join(rdir, name);
      const us = fs.lstatSync(u);
      const rs = lstatOrNull(real);
      if (skip.has(real)) continue;
      if (isWhiteout(us)) {
        if (rs) deletedTree(real, rs);
        continue;
      }
      const type = typeOf(us);
      if (!rs) out.push({ path: real, kind: 'created', type, upper: u, ...(origin(u) ? { copiedUp: true } : {}) });
      else if (typeOf(rs) !== type) {
        out.push({ path: real, kind: 'modified', type, upper: u, was: typeOf(rs) });
        if (rs.isDirectory()) deletedBelow(real, () => false);
      } else if (type === 'directory' ? (us.mode & 0o7777) !== (rs.mode & 0o7777) : !unchanged(u, us, real, rs)) {
        out.push({ path: real, kind: 'modified', type, upper: u });
      }
      if (type !== 'directory') continue;
      const opaque = hidden || xattr(u) === 'y';
      if (rs?.isDirectory() && opaque) deletedBelow(real, (n) => lstatOrNull(path.join(u, n)) !== null);
      walk(u, real, opaque);
    }
  };
  for (const r of layer.roots) walk(r.upper, r.root, false);
  return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

const publicEntry = (d: Diff): ChangeEntry => ({ path: d.path, kind: d.kind, type: d.type, ...(d.from ? { from: d.from } : {}) });

/**
 * The chosen entries, with what applying them needs: a deleted (or replaced) directory takes the
 * deletions below it, a created path the created (or newly made) directories above it.
 */
function choose(all: Diff[], paths: readonly string[] | undefined): Diff[] {
  if (paths === undefined) return all;
  // A path chooses the listed changes at or below it.
  const unknown = paths.filter((p) => !all.some((d) => isWithin(d.path, p)));
  if (unknown.length > 0) {
    throw new SandboxError('EINVALID_ARGUMENT', `apply(): no listed change at or below ${unknown.join(', ')}`, { detail: { paths: unknown } });
  }
  const first = all.filter((d) => paths.some((p) => isWithin(d.path, p)));
  const chosen = new Set(first.map((d) => d.path));
  const byPath = new Map(all.map((d) => [d.path, d]));
  const ancestors = (p: string) => {
    const out: string[] = [];
    for (let a = path.dirname(p); a !== path.dirname(a); a = path.dirname(a)) out.push(a);
    return out;
  };
  // Removed directories (deleted, or replaced by another type) take the deletions below them.
  const removed = new Set(first.filter((d) => (d.kind === 'deleted' && d.type === 'directory') || d.was === 'directory').map((d) => d.path));
  for (const d of all) if (d.kind === 'deleted' && ancestors(d.path).some((a) => removed.has(a))) chosen.add(d.path);
  // New directories (created, or replacing another type) above a chosen path come with it.
  for (const d of first) {
    for (const a of ancestors(d.path)) {
      const e = byPath.get(a);
      if (e?.type === 'directory' && (e.kind === 'created' || e.was !== undefined)) chosen.add(a);
    }
  }
  return all.filter((d) => chosen.has(d.path));
}

/** A stage run's layer, as the backend for `changes: 'stage'` (and the first half of isolated `record`). */
export class OverlayStage {
  private readonly ours: Map<string, bigint>;
  private applied: number;

  /** `done`: what earlier applies of this layer (in another process too) left, from its meta.json. */
  constructor(
    private readonly native: LinuxNative,
    readonly layer: StageLayer,
    private readonly skip: ReadonlySet<string>,
    done: { applied: number; ours: Map<string, bigint> } = { applied: 0, ours: new Map() },
  ) {
    this.applied = done.applied;
    this.ours = done.ours;
  }

  diff(): Diff[] {
    return diffLayer(this.native, this.layer, this.skip);
  }

  list(): ChangeEntry[] {
    return this.diff().map(publicEntry);
  }

  /** Whether the real path was changed outside since the run started (not by an apply of ours). */
  private changedOutside(p: string, st: fs.Stats | null): boolean {
    if (st === null) return true;
    const ctime = fs.lstatSync(p, { bigint: true }).ctimeNs;
    const after = this.layer.startTicked ? ctime > this.layer.startNs : ctime >= this.layer.startNs;
    return after && this.ours.get(p) !== ctime;
  }

  private conflicts(chosen: Diff[]): string[] {
    const out: string[] = [];
    for (const d of chosen) {
      const st = lstatOrNull(d.path);
      // created: nothing is there now, and nothing was removed from there during the run: an
      // entry copied up from the lower layer (user.overlay.origin: it existed when the command
      // changed it, or it is a renamed one) in a directory changed since the start was removed
      // by someone else (a rename in a directory someone else also changed is refused too).
      const parent = path.dirname(d.path);
      const ps = lstatOrNull(parent); // (a missing one is a created entry: checked as one)
      const removed = d.copiedUp === true && ps !== null && this.changedOutside(parent, ps);
      const bad = d.kind === 'created' ? st !== null || removed : this.changedOutside(d.path, st);
      if (bad) out.push(d.path);
    }
    return out;
  }

  /**
   * Applies `paths` (default: every change) through a new journal in `journalDir`. `move`: the
   * layer is dropped right after (record), so a file the command made itself (no overlayfs xattrs
   * on it) is renamed into place, not copied, where the layer shares the root's file system.
   * Otherwise files are copied (a reflink where the file system can): the staged copy stays whole
   * should the apply stop half-way, and a hard link would share its ctime with the layer, which
   * discard() then changes under the journal's final states.
   */
  apply(paths: readonly string[] | undefined, journalDir: string, move = false, all: Diff[] = this.diff()): void {
    const chosen = choose(all, paths);
    const other = chosen.filter((d) => d.type === 'other' && d.kind !== 'deleted');
    if (other.length > 0) {
      throw new SandboxError('EUNSUPPORTED_POLICY', `apply(): special files (fifos, sockets, devices) cannot be applied: ${other.map((d) => d.path).join(', ')}`, {
        detail: { paths: other.map((d) => d.path) },
      });
    }
    const changed = this.conflicts(chosen);
    if (changed.length > 0) {
      throw new SandboxError(
        'ECHANGED_OUTSIDE',
        `changed outside the sandbox during the run, so nothing was applied (those paths are left as they are): ${changed.join(', ')}`,
        { detail: { paths: changed } },
      );
    }
    const w = JournalWriter.create(journalDir, {});
    // What this apply changed itself, so that a later apply of the same layer does not take it
    // for a change made outside (record applies once: nothing to remember).
    const touched = (p: string) => {
      if (move) return;
      for (const q of [p, path.dirname(p)]) {
        const st = lstatOrNull(q);
        if (st) this.ours.set(q, fs.lstatSync(q, { bigint: true }).ctimeNs);
      }
    };
    const remove = (p: string) => {
      w.beforeChange(p);
      if (lstatOrNull(p)?.isDirectory()) fs.rmdirSync(p);
      else fs.unlinkSync(p);
      touched(p);
    };
    // Deletions deepest first, then the new states shallowest first.
    const deleted = chosen.filter((d) => d.kind === 'deleted').reverse();
    for (const d of deleted) if (lstatOrNull(d.path)) remove(d.path);
    for (const d of chosen) {
      if (d.kind === 'deleted' || !d.upper) continue;
      if (d.was !== undefined && lstatOrNull(d.path)) remove(d.path);
      // (Only a created file that was no copy-up can be moved: a copy-up carries overlayfs xattrs,
      // user.overlay.origin among them, which must not reach the roots.)
      putEntry(w, d.path, d.upper, move && d.type === 'file' && d.kind === 'created' && !d.copiedUp);
      touched(d.path);
    }
    w.finish();
    this.applied++;
    // Kept with the layer, so that an apply from another process tells ours from changes outside.
    if (!move) writeMeta(this.layer.dir, { applied: this.applied, ours: Object.fromEntries([...this.ours].map(([p, ns]) => [p, String(ns)])) });
  }

  journals(): string[] {
    return Array.from({ length: this.applied }, (_, i) => path.join(this.layer.dir, `applied-${i + 1}`));
  }

  nextJournal(): string {
    return path.join(this.layer.dir, `applied-${this.applied + 1}`);
  }

  /** Removes the whole layer on the thread pool (where the addon can), warning about what it could not. */
  discardLater(): void {
    const { dir } = this.layer;
    if (!this.native.removeTreeAsync) return this.discard();
    this.native.removeTreeAsync(path.dirname(dir), path.basename(dir), (r) => {
      if (r.left > 0) process.emitWarning(`process-sandbox could not remove the staged layer ${dir}: ${r.error} (${r.path})`, { code: 'PSB_CLEANUP' });
    });
  }

  /** Removes the layer: the staged writes, and the journals of applies (they cannot be reverted after it). */
  discard(): void {
    const { dir } = this.layer;
    const r = this.native.removeTree(path.dirname(dir), path.basename(dir));
    if (r.left > 0) {
      throw new SandboxError('ESPAWN', `discard(): could not remove all of the layer ${dir}: ${r.error} (${r.path || '.'})`, { detail: { dir, left: r.left } });
    }
  }
}

/** Writes the upper entry `u` at real path `p` (journaled first): a directory, a file or a symlink. */
function putEntry(w: JournalWriter, p: string, u: string, move: boolean): void {
  const us = fs.lstatSync(u);
  const rs = lstatOrNull(p);
  if (us.isDirectory()) {
    if (rs === null) {
      w.beforeChange(p);
      fs.mkdirSync(p);
    } else {
      w.mode(p, rs.mode & 0o7777);
    }
    fs.chmodSync(p, us.mode & 0o7777);
    return;
  }
  w.beforeChange(p);
  if (us.isSymbolicLink()) {
    if (rs !== null) fs.unlinkSync(p);
    fs.symlinkSync(fs.readlinkSync(u), p);
    return;
  }
  // A regular file: its content and mode (and times, for the tools that compare them).
  if (move) {
    try {
      fs.renameSync(u, p);
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EXDEV') throw e; // another file system: copied
    }
  }
  fs.copyFileSync(u, p, fs.constants.COPYFILE_FICLONE);
  fs.chmodSync(p, us.mode & 0o7777);
  fs.utimesSync(p, us.atime, us.mtime);
}

/** Whether `v` is an array of absolute paths. */
const absPaths = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string' && path.isAbsolute(x));
const decimal = (v: unknown): v is string => typeof v === 'string' && /^[0-9]{1,30}$/.test(v);

/**
 * A finished stage layer in `dir`, reopened from its meta.json (prepareStageLayer, overlayChanges
 * and each apply write it) by any process. Refuses, naming why, a directory that is not one: no
 * meta.json, a record journal, a run that has not ended, or a directory someone else may write
 * (apply copies what it holds into the roots).
 */
export function reopenStage(native: LinuxNative, dir: string): OverlayStage {
  const no = (why: string, cause?: unknown) =>
    new SandboxError('EINVALID_ARGUMENT', `changes: ${dir} is not a finished staged layer: ${why}`, { ...(cause !== undefined ? { cause } : {}), detail: { path: dir } });
  const st = lstatOrNull(dir);
  if (!st?.isDirectory()) throw no('no such directory');
  if (st.uid !== process.geteuid?.() || (st.mode & 0o022) !== 0) {
    throw no(`it must be a directory of this user that no one else may write (it is uid ${st.uid}'s, mode ${(st.mode & 0o7777).toString(8)})`);
  }
  let m: Record<string, unknown>;
  try {
    m = JSON.parse(fs.readFileSync(path.join(dir, 'meta.json'), 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw no('no readable meta.json', e);
  }
  if (m.mode === 'record') throw no("it holds a 'record' journal (list it with 'changes', undo it with 'revert')");
  if (m.mode !== 'stage') throw no(`its meta.json names no stage layer (mode ${JSON.stringify(m.mode)})`);
  if (typeof m.ended !== 'string') throw no('its run has not ended (or the process that ran it stopped before it did)');
  const ours = (m.ours ?? {}) as Record<string, unknown>;
  const applied = m.applied ?? 0;
  const shaped =
    absPaths(m.roots) && absPaths(m.skip) && decimal(m.startNs) && typeof m.startTicked === 'boolean' &&
    typeof ours === 'object' && Object.entries(ours).every(([p, ns]) => path.isAbsolute(p) && decimal(ns)) &&
    typeof applied === 'number' && Number.isSafeInteger(applied) && applied >= 0;
  if (!shaped) throw no('its meta.json is malformed');
  const roots = (m.roots as string[]).map((root, i) => ({ root, upper: path.join(dir, 'upper', String(i)) }));
  const lost = roots.find((r) => !lstatOrNull(r.upper)?.isDirectory());
  if (lost) throw no(`its upper dir ${lost.upper} is missing`);
  const layer: StageLayer = { dir, roots, startNs: BigInt(m.startNs as string), startTicked: m.startTicked as boolean, mounts: [] };
  const done = { applied: applied as number, ours: new Map(Object.entries(ours).map(([p, ns]) => [p, BigInt(ns as string)])) };
  return new OverlayStage(native, layer, new Set(m.skip as string[]), done);
}

/** A stage layer's backend: list, apply (each through a new journal in the layer) and discard, once `settled`. */
export function stageBackend(stage: OverlayStage, settled: Promise<void>): ChangesBackend {
  return {
    mode: 'stage',
    dir: stage.layer.dir,
    settled,
    list: async () => {
      await settled;
      return stage.list();
    },
    apply: async (paths) => {
      await settled;
      stage.apply(paths, stage.nextJournal());
    },
    discard: async () => {
      await settled;
      stage.discard();
    },
    // Undoes the applies, newest first.
    revert: async () => {
      await settled;
      for (const j of stage.journals().reverse()) revertJournal(j);
    },
  };
}

/** The ChangesBackend of an isolated-mode run. `exited`: the sandbox has ended (every process of it). */
export function overlayChanges(
  mode: ChangesMode,
  native: LinuxNative,
  layer: StageLayer,
  skip: ReadonlySet<string>,
  exited: Promise<unknown>,
  journalDir?: string,
): ChangesBackend {
  const stage = new OverlayStage(native, layer, skip);
  // The layer is final: what reopenStage needs besides what prepareStageLayer wrote. Without it
  // this handle still works; only another process cannot reopen the layer (it refuses, unfinished).
  const ended = () => {
    try {
      writeMeta(layer.dir, { skip: [...skip], ended: new Date().toISOString() });
    } catch (e) {
      process.emitWarning(`process-sandbox could not mark the staged layer ${layer.dir} finished (${(e as Error).message}); no other process can reopen it`, { code: 'PSB_CHANGES' });
    }
  };
  if (mode === 'stage') return stageBackend(stage, exited.then(ended));
  // record: the whole layer applied through the caller's journal once the sandbox has ended.
  let listed: ChangeEntry[] = [];
  const settled = exited.then(() => {
    ended(); // (should the apply be refused, the layer stays: it can be reopened, applied or discarded)
    const all = stage.diff();
    listed = all.map(publicEntry);
    try {
      stage.apply(undefined, journalDir!, true, all);
    } catch (e) {
      // Nothing reached the roots; the writes stay in the layer, named, for the caller to judge.
      if (!(e instanceof SandboxError)) throw e;
      throw new SandboxError(e.code, `${e.message}; the command's writes were not applied and stay staged in ${layer.dir}`, {
        detail: { ...e.detail, layer: layer.dir },
      });
    }
    // The layer is removed on the thread pool: the writes are in place and journaled already.
    stage.discardLater();
  });
  settled.catch(() => {}); // awaited by the caller; an unawaited failure is no crash of the host
  return {
    mode,
    dir: journalDir!,
    settled,
    list: async () => {
      await settled;
      return listed;
    },
    revert: async () => {
      await settled;
      revertJournal(journalDir!);
    },
  };
}
