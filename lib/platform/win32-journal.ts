/**
 * The journal of what a Windows run changed on disk, so it is undone at exit and, after a crash,
 * by the next run of any host process (issue #14: "a host crash leaves ACEs behind").
 *
 * One file per run, `<stateDir>/journal/<pid>-<hex>.json`, rewritten (tmp + rename) before each
 * change is made (write-ahead: a crash between the two leaves an entry whose undo is a no-op). A
 * run's ACL edits are recorded together (addAll), before the batch that makes them starts off the
 * JS thread; finishAsync undoes them the same way (lib/platform/win32.ts serializes the batches).
 * Entries:
 *   deny         explicit deny ACEs of `sid` on `path` (protected paths, their roots' DELETE and
 *                FILE_DELETE_CHILD): removed at exit
 *   grant        a per-run allow ACE (read-only runs, private tmp): revoked at exit
 *   placeholder  an empty file or directory we created to hold a missing protected name (.git,
 *                .codex, ...): removed at exit if it is still empty
 *   dir          a directory of ours (private tmp): removed at exit
 * Concurrent runs share protected paths, so a deny or placeholder is undone only by the last live
 * run whose journal lists it. Liveness is the host pid (process.kill(pid, 0)); a reused pid only
 * postpones the undo until that process is gone.
 * What persists by design (the allow ACE of each writable root's capability SID, reused by the
 * next run, as Codex does) is not journalled; the report lists it.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

export type JournalEntry =
  | { kind: 'deny'; path: string; sid: string }
  | { kind: 'grant'; path: string; sid: string }
  | { kind: 'placeholder'; path: string; type: 'dir' | 'file' }
  | { kind: 'dir'; path: string };

interface JournalFile {
  version: 1;
  pid: number;
  entries: JournalEntry[];
}

/** What undoing needs from the addon (Win32Native.winAclEdit). */
export interface JournalUndo {
  removeDenies(path: string, sid: string): void;
  revoke(path: string, sid: string): void;
}

/** One ACL undo for the asynchronous path (Win32Native.winAclBatch). */
export interface AclUndo {
  op: 'remove-denies' | 'revoke';
  path: string;
  sid: string;
}

/**
 * Runs ACL undos off the JS thread, in order, every one tried; resolves with one entry per undo:
 * null (done) or the error.
 */
export type JournalUndoBatch = (undos: AclUndo[]) => Promise<Array<Error | null>>;

function key(e: JournalEntry): string {
  const p = e.path.replace(/\//g, '\\').toLowerCase();
  return e.kind === 'deny' || e.kind === 'grant' ? `${e.kind}|${p}|${e.sid}` : `${e.kind}|${p}`;
}

function pidAlive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class Journal {
  readonly dir: string;

  constructor(stateDir: string) {
    this.dir = path.join(stateDir, 'journal');
  }

  private list(): Array<{ file: string; data: JournalFile }> {
    let names: string[];
    try {
      names = fs.readdirSync(this.dir);
    } catch {
      return [];
    }
    const out: Array<{ file: string; data: JournalFile }> = [];
    for (const n of names) {
      if (!n.endsWith('.json')) continue;
      const file = path.join(this.dir, n);
      try {
        const data = JSON.parse(fs.readFileSync(file, 'utf8')) as JournalFile;
        if (data && data.version === 1 && Number.isInteger(data.pid) && Array.isArray(data.entries)) out.push({ file, data });
      } catch {
        // Half-written tmp files are never *.json; an unreadable one is skipped, not trusted.
      }
    }
    return out;
  }

  /** Keys listed by live runs other than `except` (their changes must stay). */
  liveKeys(except: string | null): Set<string> {
    const keys = new Set<string>();
    for (const j of this.list()) {
      if (j.file === except || !pidAlive(j.data.pid)) continue;
      for (const e of j.data.entries) keys.add(key(e));
    }
    return keys;
  }

  /** Whether a live run (not `except`) holds `p` as a placeholder. */
  isLivePlaceholder(p: string, except: string | null): boolean {
    return this.liveKeys(except).has(key({ kind: 'placeholder', path: p, type: 'dir' }));
  }

  begin(): RunJournal {
    fs.mkdirSync(this.dir, { recursive: true });
    return new RunJournal(this, path.join(this.dir, `${process.pid}-${crypto.randomBytes(6).toString('hex')}.json`));
  }

  /** Undo the journals of host processes that died (crash, kill) before undoing their own. */
  recover(undo: JournalUndo): number {
    let n = 0;
    for (const j of this.list()) {
      if (pidAlive(j.data.pid)) continue;
      undoEntries(this, j.file, j.data.entries, undo);
      n++;
    }
    return n;
  }
}

export class RunJournal {
  readonly entries: JournalEntry[] = [];
  private finished = false;

  constructor(
    private readonly journal: Journal,
    readonly file: string,
  ) {}

  /** Record `e` (durably) before the change it describes is made. */
  add(e: JournalEntry): void {
    this.addAll([e]);
  }

  /** Record several entries (one durable write) before any of the changes is made. */
  addAll(list: JournalEntry[]): void {
    const keys = new Set(this.entries.map(key));
    let added = false;
    for (const e of list) {
      const k = key(e);
      if (keys.has(k)) continue;
      keys.add(k);
      this.entries.push(e);
      added = true;
    }
    if (!added) return;
    const tmp = `${this.file}.${crypto.randomBytes(4).toString('hex')}.tmp`;
    fs.writeFileSync(tmp, JSON.stringify({ version: 1, pid: process.pid, entries: this.entries } satisfies JournalFile));
    fs.renameSync(tmp, this.file);
  }

  /** Undo everything this run recorded (except what other live runs still rely on). */
  finish(undo: JournalUndo): string[] {
    if (this.finished) return [];
    this.finished = true;
    return undoEntries(this.journal, this.file, this.entries, undo);
  }

  /**
   * finish() with the ACL undos run off the JS thread (removing an inheritable deny from a
   * protected directory, or revoking a temporary grant on a tree, rewrites the inherited ACEs below
   * it). The file-system undos (placeholders, the private temp dir) follow, synchronously: single
   * entries. Resolves with the failures once everything was tried; never rejects.
   */
  async finishAsync(batch: JournalUndoBatch): Promise<string[]> {
    if (this.finished) return [];
    this.finished = true;
    const keep = this.journal.liveKeys(this.file);
    const todo = [...this.entries].reverse().filter((e) => !((e.kind === 'deny' || e.kind === 'placeholder') && keep.has(key(e))));
    const acl = todo.filter((e): e is Extract<JournalEntry, { kind: 'deny' | 'grant' }> => e.kind === 'deny' || e.kind === 'grant');
    let errors: Array<Error | null>;
    try {
      errors = acl.length === 0 ? [] : await batch(acl.map((e) => ({ op: e.kind === 'deny' ? 'remove-denies' : 'revoke', path: e.path, sid: e.sid })));
    } catch (err) {
      errors = acl.map(() => err as Error);
    }
    const failures: string[] = [];
    const failed: JournalEntry[] = [];
    acl.forEach((e, i) => {
      const err = errors[i];
      if (err && !isMissing(err)) {
        failures.push(`${e.kind} ${e.path}: ${err.message}`);
        failed.push(e);
      }
    });
    const fsUndo: JournalUndo = {
      removeDenies: () => {},
      revoke: () => {},
    };
    failures.push(...undoEntries(this.journal, this.file, todo.filter((e) => e.kind === 'placeholder' || e.kind === 'dir').reverse(), fsUndo, failed));
    return failures;
  }
}

/** An undo whose path is gone (ENOENT, ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND): nothing to undo. */
function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  const winError = (err as { winError?: number }).winError;
  return code === 'ENOENT' || winError === 2 || winError === 3;
}

/**
 * Undo in reverse order; returns the failures (best effort: every entry is tried). `failedBefore`:
 * entries whose undo already failed elsewhere (finishAsync's ACL batch), kept in the file too.
 */
function undoEntries(journal: Journal, file: string, entries: JournalEntry[], undo: JournalUndo, failedBefore: JournalEntry[] = []): string[] {
  const keep = journal.liveKeys(file);
  const failures: string[] = [];
  const failed: JournalEntry[] = [...failedBefore];
  for (const e of [...entries].reverse()) {
    if ((e.kind === 'deny' || e.kind === 'placeholder') && keep.has(key(e))) continue;
    try {
      if (e.kind === 'deny') undo.removeDenies(e.path, e.sid);
      else if (e.kind === 'grant') undo.revoke(e.path, e.sid);
      else if (e.kind === 'placeholder') removePlaceholder(e.path, e.type);
      else fs.rmSync(e.path, { recursive: true, force: true });
    } catch (err) {
      if (!isMissing(err)) {
        failures.push(`${e.kind} ${e.path}: ${(err as Error).message}`);
        failed.push(e);
      }
    }
  }
  try {
    if (failed.length === 0) {
      fs.rmSync(file, { force: true });
    } else {
      // Keep what could not be undone: retried by the next recovery once this host is gone.
      const tmp = `${file}.${crypto.randomBytes(4).toString('hex')}.tmp`;
      fs.writeFileSync(tmp, JSON.stringify({ version: 1, pid: process.pid, entries: failed } satisfies JournalFile));
      fs.renameSync(tmp, file);
    }
  } catch {
    // Left for the next recovery.
  }
  return failures;
}

/** Remove a placeholder only while it is still the empty thing we made. */
function removePlaceholder(p: string, type: 'dir' | 'file'): void {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(p);
  } catch {
    return;
  }
  if (type === 'dir' && st.isDirectory() && fs.readdirSync(p).length === 0) fs.rmdirSync(p);
  else if (type === 'file' && st.isFile() && st.size === 0) fs.unlinkSync(p);
}
