/**
 * The changes journal: what each write of a sandboxed command was about to change, saved before the
 * write, so the host can list the changes and undo them (revert), from this process or a later one.
 *
 * Format (the Landlock-mode path supervisor appends the same lines from native code):
 *   <dir>/journal   one record per line, appended in order on an O_APPEND fd; paths are lowercase hex
 *                   of their bytes, so any byte is safe:
 *     save <path> <copy> <mode>     a regular file was at path; its bytes are in files/<copy>
 *     symlink <path> <target>       a symlink was at path
 *     dir <path> <mode>             a directory was at path
 *     absent <path>                 nothing was at path
 *     other <path> <st_mode> <rdev> a fifo was at path (sockets and devices are never changed)
 *     mode <path> <mode>            the mode before a chmod
 *     rename <from> <to>            a rename carried out
 *   <dir>/files/<copy>  saved copies (0600)
 *   <dir>/final     written when the run ended: per recorded path `<path> <kind> <size> <mtime_ns>
 *                   <ino> <mode> <ctime_ns>`, the state the run left, to see changes made by others
 *   <dir>/meta.json { version, mode, roots, started, ended }
 *   <dir>/reverted  present once the journal was reverted
 * Modes are octal; `other`'s st_mode includes the file type bits.
 *
 * Revert replays the records in reverse: each one puts back the state its path had when it was
 * written. A path already covered by an earlier record in this journal ("seen") need not be saved
 * again: the earlier record, replayed later, resets it anyway. After a rename neither name is
 * covered (the rename's undo needs the object where the rename put it), and a regular file with
 * more than one link is saved every time (another name shares it). A directory a record's undo
 * needs that is gone (a covered directory removed later, unrecorded) is made again for it; its
 * own record, replayed later, puts it right.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import { loadLinuxNative } from '../native';
import type { ChangeEntry, ChangesMode } from './types';

export const JOURNAL_VERSION = 1;
const ENOSPC = 28;

/** A path's bytes as a latin1 string (one char per byte): any name survives hex and fs calls. */
type BytePath = string;
const toBytes = (p: string): BytePath => Buffer.from(p, 'utf8').toString('latin1');
const fsPath = (b: BytePath): Buffer => Buffer.from(b, 'latin1');
const hex = (b: BytePath): string => Buffer.from(b, 'latin1').toString('hex');
const unhex = (h: string): BytePath => Buffer.from(h, 'hex').toString('latin1');
const display = (b: BytePath): string => Buffer.from(b, 'latin1').toString('utf8');
const oct = (n: number): string => n.toString(8);

function lstatOrNull(b: BytePath): fs.Stats | null {
  try {
    return fs.lstatSync(fsPath(b));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
    throw err;
  }
}

function isUnder(p: BytePath, dir: BytePath): boolean {
  return p.length > dir.length && p.startsWith(dir) && (dir.endsWith('/') || p[dir.length] === '/');
}

/** Makes `dir` (absolute) a new or empty 0700 directory with files/ inside. */
function prepareDir(dir: string): void {
  if (!path.isAbsolute(dir)) throw new SandboxError('EINVALID_ARGUMENT', `changes: the journal directory must be an absolute path, got ${JSON.stringify(dir)}`);
  fs.mkdirSync(path.dirname(dir), { recursive: true, mode: 0o700 });
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    const st = fs.lstatSync(dir);
    if (!st.isDirectory() || st.uid !== process.getuid?.() || fs.readdirSync(dir).length > 0) {
      throw new SandboxError('EINVALID_ARGUMENT', `changes: the journal directory ${dir} must be new or an empty directory of this user`, { detail: { path: dir } });
    }
  }
  fs.chmodSync(dir, 0o700);
  fs.mkdirSync(path.join(dir, 'files'), { mode: 0o700 });
}

export function writeMeta(dir: string, meta: Record<string, unknown>): void {
  const file = path.join(dir, 'meta.json');
  let old: Record<string, unknown> = {};
  try {
    old = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch {
    /* first write */
  }
  fs.writeFileSync(file + '.tmp', JSON.stringify({ ...old, version: JOURNAL_VERSION, ...meta }, null, 2) + '\n', { mode: 0o600 });
  fs.renameSync(file + '.tmp', file);
}

/** Creates a journal directory for a run (used by the backends before the command starts). */
export function createJournalDir(dir: string, meta: { mode: ChangesMode; roots: readonly string[] }): void {
  prepareDir(dir);
  fs.closeSync(fs.openSync(path.join(dir, 'journal'), 'a', 0o600));
  writeMeta(dir, { mode: meta.mode, roots: meta.roots, started: new Date().toISOString() });
}

/**
 * Writes a journal from this process (the isolated mode applies its layer through it; tests use it).
 * Call beforeChange(path) before changing a path, rename(from, to) after a rename was carried out
 * (with beforeChange(to) before it), mode(path, old) around a chmod, and finish() at the end.
 */
export class JournalWriter {
  private readonly seen = new Set<BytePath>();
  private copies = 0;
  private bytes = 0;

  private constructor(
    readonly dir: string,
    private readonly fd: number,
    private readonly maxBytes: number | undefined,
  ) {}

  static create(dir: string, opts: { maxBytes?: number; mode?: ChangesMode; roots?: readonly string[] } = {}): JournalWriter {
    createJournalDir(dir, { mode: opts.mode ?? 'record', roots: opts.roots ?? [] });
    return new JournalWriter(dir, fs.openSync(path.join(dir, 'journal'), 'a'), opts.maxBytes);
  }

  /** Records what is at `p` now, unless an earlier record already covers it. */
  beforeChange(p: string): void {
    const b = toBytes(p);
    const st = lstatOrNull(b);
    if (this.seen.has(b) && !(st?.isFile() && st.nlink > 1)) return;
    this.append(this.stateRecord(b, st));
    this.seen.add(b);
  }

  rename(from: string, to: string): void {
    const f = toBytes(from);
    const t = toBytes(to);
    this.append(`rename ${hex(f)} ${hex(t)}`);
    moveSeen(this.seen, f, t, lstatOrNull(t)?.isDirectory() ?? false);
  }

  mode(p: string, oldMode: number): void {
    const b = toBytes(p);
    const st = lstatOrNull(b);
    if (this.seen.has(b) && !(st?.isFile() && st.nlink > 1)) return;
    this.append(`mode ${hex(b)} ${oct(oldMode & 0o7777)}`);
  }

  finish(): void {
    fs.closeSync(this.fd);
    finishJournal(this.dir);
  }

  private stateRecord(b: BytePath, st: fs.Stats | null): string {
    if (st === null) return `absent ${hex(b)}`;
    if (st.isFile()) return `save ${hex(b)} ${this.copy(b, st.size)} ${oct(st.mode & 0o7777)}`;
    if (st.isSymbolicLink()) return `symlink ${hex(b)} ${fs.readlinkSync(fsPath(b), { encoding: 'buffer' }).toString('hex')}`;
    if (st.isDirectory()) return `dir ${hex(b)} ${oct(st.mode & 0o7777)}`;
    if (st.isFIFO()) return `other ${hex(b)} ${oct(st.mode)} ${st.rdev}`;
    throw new SandboxError('EUNSUPPORTED_POLICY', `changes: cannot record a change to ${display(b)}: sockets and device nodes are not journaled`, { detail: { path: display(b) } });
  }

  private copy(b: BytePath, size: number): string {
    if (this.maxBytes !== undefined && this.bytes + size > this.maxBytes) {
      throw new SandboxError('ECHANGES_LIMIT', `changes: saving ${display(b)} (${size} bytes) would pass maxBytes (${this.maxBytes})`, { errno: ENOSPC, detail: { path: display(b) } });
    }
    const name = String(this.copies++);
    const dest = path.join(this.dir, 'files', name);
    // A reflink where the file system can, else a copy.
    fs.copyFileSync(fsPath(b), dest, fs.constants.COPYFILE_FICLONE);
    fs.chmodSync(dest, 0o600);
    this.bytes += size;
    return name;
  }

  private append(line: string): void {
    fs.writeSync(this.fd, line + '\n');
  }
}

/**
 * A rename moved the object at `from` to `to`. Neither name is covered after it (undoing the
 * rename needs the object at `to` as the rename left it: a later change there is recorded); the
 * entries below a renamed directory move with it (moving it back does not depend on them).
 */
function moveSeen(seen: Set<BytePath>, from: BytePath, to: BytePath, isDir: boolean): void {
  seen.delete(to);
  seen.delete(from);
  if (!isDir) return;
  for (const p of [...seen]) {
    if (isUnder(p, to)) seen.delete(p);
  }
  for (const p of [...seen]) {
    if (isUnder(p, from)) {
      seen.delete(p);
      seen.add(to + p.slice(from.length));
    }
  }
}

// ---- reading a journal --------------------------------------------------------------------------

type StateOp = 'save' | 'symlink' | 'dir' | 'absent' | 'other';
interface JournalRecord {
  op: StateOp | 'mode' | 'rename';
  path: BytePath;
  /** rename: the new path. */
  to?: BytePath;
  copy?: string;
  mode?: number;
  target?: BytePath;
  rdev?: number;
}

function parseRecord(line: string, n: number): JournalRecord {
  const f = line.split(' ');
  const bad = () => new SandboxError('EINVALID_ARGUMENT', `changes: journal line ${n} is malformed: ${JSON.stringify(line.slice(0, 200))}`);
  const want = (k: number) => {
    if (f.length !== k || f.slice(1).some((x) => x === '')) throw bad();
  };
  const p = unhex(f[1] ?? '');
  switch (f[0]) {
    case 'save':
      want(4);
      if (!/^[0-9]+$/.test(f[2]!)) throw bad();
      return { op: 'save', path: p, copy: f[2], mode: parseInt(f[3]!, 8) };
    case 'symlink':
      want(3);
      return { op: 'symlink', path: p, target: unhex(f[2]!) };
    case 'dir':
    case 'mode':
      want(3);
      return { op: f[0], path: p, mode: parseInt(f[2]!, 8) };
    case 'absent':
      want(2);
      return { op: 'absent', path: p };
    case 'other':
      want(4);
      return { op: 'other', path: p, mode: parseInt(f[2]!, 8), rdev: Number(f[3]) };
    case 'rename':
      want(3);
      return { op: 'rename', path: p, to: unhex(f[2]!) };
    default:
      throw bad();
  }
}

export function readRecords(dir: string): JournalRecord[] {
  let text: string;
  try {
    text = fs.readFileSync(path.join(dir, 'journal'), 'latin1');
  } catch (err) {
    throw new SandboxError('EINVALID_ARGUMENT', `changes: ${dir} holds no journal (${(err as Error).message})`, { cause: err, detail: { path: dir } });
  }
  const lines = text.split('\n');
  // A last line without its newline is a record whose call never completed: ignore it.
  lines.pop();
  return lines.map((l, i) => parseRecord(l, i + 1));
}

function recordedPaths(records: readonly JournalRecord[]): BytePath[] {
  const set = new Set<BytePath>();
  for (const r of records) {
    set.add(r.path);
    if (r.to !== undefined) set.add(r.to);
  }
  return [...set];
}

type FinalKind = 'absent' | 'file' | 'dir' | 'symlink' | 'other';
interface FinalState {
  kind: FinalKind;
  /** size mtime_ns ino mode ctime_ns, compared as one string. */
  stamp: string;
}

const ABSENT: FinalState = { kind: 'absent', stamp: '0 0 0 0 0' };

function stateNow(b: BytePath): FinalState {
  let st: fs.BigIntStats | undefined;
  try {
    // (No exception for a missing name: a run that renames thousands of files leaves as many.)
    st = fs.lstatSync(fsPath(b), { bigint: true, throwIfNoEntry: false });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOTDIR') return ABSENT;
    throw err;
  }
  if (st === undefined) return ABSENT;
  const kind: FinalKind = st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink' : 'other';
  return { kind, stamp: `${st.size} ${st.mtimeNs} ${st.ino} ${oct(Number(st.mode))} ${st.ctimeNs}` };
}

/** Writes `final` (the state the run left at every recorded path) and meta.json's `ended`. */
export function finishJournal(dir: string): void {
  // The recorded paths as they are written (hex), without decoding every record (revert and
  // list parse them, and refuse a malformed journal).
  const text = fs.readFileSync(path.join(dir, 'journal'), 'latin1');
  const paths = new Set<string>();
  for (const line of text.split('\n')) {
    const f = line.split(' ', 3);
    if (f.length < 2) continue;
    paths.add(f[1]!);
    if (f[0] === 'rename') paths.add(f[2]!);
  }
  const lines = [...paths].map((h) => {
    const s = stateNow(unhex(h));
    return `${h} ${s.kind} ${s.stamp}\n`;
  });
  fs.writeFileSync(path.join(dir, 'final.tmp'), lines.join(''), { mode: 0o600 });
  fs.renameSync(path.join(dir, 'final.tmp'), path.join(dir, 'final'));
  writeMeta(dir, { ended: new Date().toISOString() });
}

function readFinal(dir: string): Map<BytePath, FinalState> | null {
  let text: string;
  try {
    text = fs.readFileSync(path.join(dir, 'final'), 'latin1');
  } catch {
    return null;
  }
  const out = new Map<BytePath, FinalState>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const [h, kind, ...rest] = line.split(' ');
    out.set(unhex(h!), { kind: kind as FinalKind, stamp: rest.join(' ') });
  }
  return out;
}

// ---- listing ------------------------------------------------------------------------------------

const TYPE_OF: Record<string, ChangeEntry['type']> = {
  save: 'file',
  file: 'file',
  dir: 'directory',
  symlink: 'symlink',
  other: 'other',
};

/**
 * Follows each object through the journal. `carry` maps a path to the original path whose object
 * it holds now (`null`: an object the run made; `false`: nothing); a path not in it (nor under a
 * path in it) holds its own original object.
 */
class Tracker {
  readonly carry = new Map<BytePath, BytePath | null | false>();
  /** Every ancestor of a key of carry: a rename of one of these moves keys (others move none). */
  private readonly parents = new Set<BytePath>();
  readonly dirty = new Set<BytePath>();
  /** Original paths that held an object when the run started, with the first record about it. */
  readonly first = new Map<BytePath, JournalRecord | null>();
  readonly absentAtStart = new Set<BytePath>();

  lookup(p: BytePath): BytePath | null | false {
    if (this.carry.has(p)) return this.carry.get(p)!;
    for (let c = p, a = path.posix.dirname(p); a !== c; c = a, a = path.posix.dirname(a)) {
      if (!this.carry.has(a)) continue;
      const o = this.carry.get(a)!;
      return typeof o === 'string' ? o + p.slice(a.length) : o;
    }
    return p;
  }

  /** Where the original object of each path is now (`false`: gone). */
  locator(): (o: BytePath) => BytePath | false {
    const holder = new Map<BytePath, BytePath>();
    for (const [k, v] of this.carry) if (typeof v === 'string') holder.set(v, k);
    return (o) => {
      for (let c = o; ; c = path.posix.dirname(c)) {
        const k = holder.get(c);
        if (k !== undefined) return k + o.slice(c.length);
        if (this.carry.has(c)) return false;
        if (c === '/') return o;
      }
    };
  }

  apply(r: JournalRecord): void {
    const o = this.lookup(r.path);
    if (r.op === 'rename') {
      if (o === r.path && !this.first.has(o) && !this.absentAtStart.has(o)) this.first.set(o, null);
      this.move(r.path, r.to!, o);
      return;
    }
    if (r.op === 'absent') {
      if (o === r.path && !this.first.has(o)) this.absentAtStart.add(o);
      this.set(r.path, null);
      return;
    }
    if (typeof o !== 'string') return;
    if (!this.first.get(o) && !this.absentAtStart.has(o)) this.first.set(o, r);
    this.dirty.add(o);
  }

  private set(k: BytePath, v: BytePath | null | false): void {
    this.carry.set(k, v);
    for (let a = path.posix.dirname(k); !this.parents.has(a); a = path.posix.dirname(a)) {
      this.parents.add(a);
      if (a === '/' || a === '.') break;
    }
  }

  private move(from: BytePath, to: BytePath, o: BytePath | null | false): void {
    if (this.parents.has(to)) {
      for (const k of [...this.carry.keys()]) {
        if (isUnder(k, to)) this.carry.delete(k);
      }
    }
    if (this.parents.has(from)) {
      for (const [k, v] of [...this.carry]) {
        if (!isUnder(k, from)) continue;
        this.carry.delete(k);
        this.set(to + k.slice(from.length), v);
      }
    }
    this.set(to, o);
    this.set(from, false);
  }
}

/** Whether two files of one size hold the same bytes (read 1 MiB at a time: they may be large). */
function sameBytes(a: string | Buffer, b: string | Buffer): boolean {
  const fa = fs.openSync(a, 'r');
  const fb = fs.openSync(b, 'r');
  try {
    const ba = Buffer.alloc(1 << 20);
    const bb = Buffer.alloc(1 << 20);
    for (;;) {
      const na = fs.readSync(fa, ba, 0, ba.length, null);
      const nb = fs.readSync(fb, bb, 0, bb.length, null);
      if (na !== nb || !ba.subarray(0, na).equals(bb.subarray(0, nb))) return false;
      if (na === 0) return true;
    }
  } finally {
    fs.closeSync(fa);
    fs.closeSync(fb);
  }
}

/** True when what is at `b` now equals the record's state (a touch that changed nothing). */
function sameAsRecord(dir: string, b: BytePath, r: JournalRecord | null | undefined): boolean {
  if (!r) return false;
  const st = lstatOrNull(b);
  if (!st) return false;
  if (r.op === 'save') {
    if (!st.isFile() || (st.mode & 0o7777) !== r.mode) return false;
    const saved = path.join(dir, 'files', r.copy!);
    return fs.statSync(saved).size === st.size && sameBytes(saved, fsPath(b));
  }
  if (r.op === 'symlink') return st.isSymbolicLink() && fs.readlinkSync(fsPath(b), { encoding: 'buffer' }).equals(fsPath(r.target!));
  if (r.op === 'dir') return st.isDirectory() && (st.mode & 0o7777) === r.mode;
  return false;
}

/** The net changes a journal recorded: what differs between the start of the run and its end. */
export function listJournal(dir: string): ChangeEntry[] {
  const records = readRecords(dir);
  const t = new Tracker();
  for (const r of records) t.apply(r);
  const finals = readFinal(dir) ?? new Map(recordedPaths(records).map((b) => [b, stateNow(b)] as const));
  const stateAt = (b: BytePath) => finals.get(b) ?? stateNow(b);
  const out: ChangeEntry[] = [];
  const located = new Set<BytePath>();
  const where = t.locator();
  for (const [o, r] of t.first) {
    const at = where(o);
    const s = at === false ? undefined : stateAt(at);
    if (at === false || s!.kind === 'absent') continue;
    located.add(o);
    const type = TYPE_OF[s!.kind]!;
    if (at !== o && (finals.has(at) || t.dirty.has(o))) out.push({ path: display(at), kind: 'renamed', from: display(o), type });
    else if (at === o && t.dirty.has(o) && !sameAsRecord(dir, o, r)) out.push({ path: display(o), kind: 'modified', type });
  }
  for (const [b, s] of finals) {
    if (s.kind === 'absent' || t.lookup(b) !== null) continue;
    // A new object where an original one was (and that one is gone): the path was replaced.
    const replaced = t.first.has(b) && !located.has(b);
    if (replaced) located.add(b);
    out.push({ path: display(b), kind: replaced ? 'modified' : 'created', type: TYPE_OF[s.kind]! });
  }
  for (const [o, r] of t.first) {
    if (!located.has(o)) out.push({ path: display(o), kind: 'deleted', type: r ? (TYPE_OF[r.op] ?? 'file') : 'file' });
  }
  return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

// ---- reverting ----------------------------------------------------------------------------------

/** Paths whose state differs from what the run left, and unrecorded ancestors that are no longer directories. */
function changedOutside(records: readonly JournalRecord[], finals: Map<BytePath, FinalState>): string[] {
  const changed: string[] = [];
  for (const [b, s] of finals) {
    const now = stateNow(b);
    if (now.kind !== s.kind || now.stamp !== s.stamp) changed.push(display(b));
  }
  const checked = new Set<BytePath>();
  for (const b of recordedPaths(records)) {
    for (let a = path.posix.dirname(b); a !== '/' && !checked.has(a); a = path.posix.dirname(a)) {
      checked.add(a);
      if (finals.has(a)) continue;
      const st = lstatOrNull(a);
      if (st && !st.isDirectory()) changed.push(display(a));
    }
  }
  return changed;
}

/**
 * Directories the replay opened to itself (u+rwx) because the run left them closed to the owner
 * (`chmod 555` of a directory the command then filled, or emptied): each with its mode before.
 * Put back at the end (revertJournal); an original directory's own mode comes after that.
 */
type Opened = Map<BytePath, number>;

function openDir(d: BytePath, opened: Opened): void {
  const st = lstatOrNull(d);
  if (!st?.isDirectory() || (st.mode & 0o700) === 0o700) return;
  if (!opened.has(d)) opened.set(d, st.mode & 0o7777);
  fs.chmodSync(fsPath(d), (st.mode & 0o7777) | 0o700);
}

function removeAny(b: BytePath, opened: Opened): void {
  const st = lstatOrNull(b);
  if (!st) return;
  if (st.isDirectory()) {
    // Every directory below is opened first, or rmSync stops at one closed to the owner.
    const walk = (d: BytePath) => {
      openDir(d, opened);
      for (const n of fs.readdirSync(fsPath(d), { encoding: 'buffer' })) {
        const c = d + '/' + n.toString('latin1');
        if (lstatOrNull(c)?.isDirectory()) walk(c);
      }
    };
    walk(b);
  }
  fs.rmSync(fsPath(b), { recursive: true, force: true });
}

/** Puts a saved regular file back, in place when a regular file is there (other links see it too). */
function restoreFile(dir: string, b: BytePath, copy: string, mode: number, opened: Opened): void {
  const st = lstatOrNull(b);
  if (st && !st.isFile()) removeAny(b, opened);
  // A read-only file of ours is written in place all the same (its mode is set right after).
  else if (st && (st.mode & 0o200) === 0) fs.chmodSync(fsPath(b), 0o600);
  fs.copyFileSync(path.join(dir, 'files', copy), fsPath(b), fs.constants.COPYFILE_FICLONE);
  fs.chmodSync(fsPath(b), mode);
}

/** The directory `d` as a record's undo needs it: made again when gone (see the header), open to us. */
function needDir(d: BytePath, opened: Opened): void {
  if (!lstatOrNull(d)) {
    needDir(path.posix.dirname(d), opened);
    fs.mkdirSync(fsPath(d), { mode: 0o700 });
  }
  openDir(d, opened);
}

function undo(dir: string, r: JournalRecord, opened: Opened): void {
  const b = r.path;
  if (r.op === 'absent') openDir(path.posix.dirname(b), opened);
  else needDir(path.posix.dirname(b), opened);
  switch (r.op) {
    case 'save':
      return restoreFile(dir, b, r.copy!, r.mode!, opened);
    case 'symlink':
      removeAny(b, opened);
      return fs.symlinkSync(fsPath(r.target!), fsPath(b));
    case 'dir': {
      const st = lstatOrNull(b);
      if (st && !st.isDirectory()) removeAny(b, opened);
      if (!st || !st.isDirectory()) fs.mkdirSync(fsPath(b));
      // Open to us while older records fill it; its own mode is set at the end (restoreDirModes).
      return fs.chmodSync(fsPath(b), r.mode! | 0o700);
    }
    case 'absent':
      return removeAny(b, opened);
    case 'other': {
      removeAny(b, opened);
      // Only FIFOs are journaled as 'other' (journal.ts header); the addon has mkfifo(2).
      const rc = loadLinuxNative().mkfifo?.(display(b), r.mode! & 0o7777) ?? -38;
      if (rc !== 0) throw new SandboxError('EINVALID_ARGUMENT', `changes: could not put back the FIFO ${display(b)} (errno ${-rc})`, { errno: -rc });
      return fs.chmodSync(fsPath(b), r.mode! & 0o7777);
    }
    case 'mode': {
      const st = lstatOrNull(b);
      if (st && !st.isSymbolicLink()) fs.chmodSync(fsPath(b), st.isDirectory() ? r.mode! | 0o700 : r.mode!);
      return;
    }
    case 'rename':
      return fs.renameSync(fsPath(r.to!), fsPath(b));
  }
}

/**
 * The directories' own modes, last: while older records were replayed each directory stayed open
 * to us (a 0555 one could not have been filled again). Each original directory is back at its
 * original path now; its first record holds its mode at the start. Deepest first.
 */
function restoreDirModes(records: readonly JournalRecord[]): void {
  const t = new Tracker();
  for (const r of records) t.apply(r);
  const dirs = [...t.first].filter(([, r]) => r && (r.op === 'dir' || r.op === 'mode')).sort(([a], [b]) => b.length - a.length);
  for (const [o, r] of dirs) {
    if (lstatOrNull(o)?.isDirectory()) fs.chmodSync(fsPath(o), r!.mode!);
  }
}

/**
 * Undoes every recorded change, newest first. First checks that every recorded path is as the run
 * left it: if any is not (someone else changed it after the run), nothing is changed and the
 * SandboxError 'ECHANGED_OUTSIDE' names them. Reverting a journal twice does nothing the second time.
 */
export function revertJournal(dir: string): void {
  if (fs.existsSync(path.join(dir, 'reverted'))) return;
  if (fs.existsSync(path.join(dir, 'incomplete'))) {
    throw new SandboxError('ENOT_ENFORCED', `changes: the journal in ${dir} is incomplete (a record could not be written during the run); not reverted`, { detail: { path: dir } });
  }
  const records = readRecords(dir);
  const finals = readFinal(dir);
  if (finals === null) {
    throw new SandboxError('EINVALID_ARGUMENT', `changes: the journal in ${dir} is not finished (the run has not ended, or ended without writing its final states)`, { detail: { path: dir } });
  }
  const changed = changedOutside(records, finals);
  if (changed.length > 0) {
    throw new SandboxError('ECHANGED_OUTSIDE', `changes: not reverted, changed outside the sandbox since the run: ${changed.slice(0, 10).join(', ')}${changed.length > 10 ? ` and ${changed.length - 10} more` : ''}`, { detail: { paths: changed } });
  }
  const opened: Opened = new Map();
  for (let i = records.length - 1; i >= 0; i--) {
    try {
      undo(dir, records[i]!, opened);
    } catch (e) {
      // Past the check, only an I/O failure (a full disk, a directory the host's user cannot
      // write) stops a revert: the newer records are undone, the older ones are not.
      const at = display(records[i]!.path);
      throw new SandboxError('EINVALID_ARGUMENT', `changes: revert stopped at ${at} (record ${i + 1} of ${records.length}), the newer changes undone, the older ones not: ${(e as Error).message}`, {
        cause: e,
        detail: { path: at, record: i + 1, partial: true },
      });
    }
  }
  for (const [d, mode] of [...opened].sort(([a], [b]) => b.length - a.length)) {
    if (lstatOrNull(d)?.isDirectory()) fs.chmodSync(fsPath(d), mode);
  }
  restoreDirModes(records);
  fs.writeFileSync(path.join(dir, 'reverted'), new Date().toISOString() + '\n', { mode: 0o600 });
}
