/**
 * The changes journal on real files: a writer records what each change was about to alter, the
 * listing names the net changes exactly, and revert restores the tree identical (names, types,
 * modes, contents, symlink targets), refusing, with nothing changed, when a recorded path was
 * changed by someone else after the run.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { JournalWriter, listJournal, revertJournal } from '../../lib/changes/journal';
import { SandboxError } from '../../lib/errors';
import { treeHash, treeListing } from '../helpers/tree-hash';

let base: string;
let ws: string;
let jdir: string;

beforeEach(() => {
  base = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-journal-'));
  ws = path.join(base, 'ws');
  jdir = path.join(base, 'journal');
  fs.mkdirSync(ws);
  fs.writeFileSync(path.join(ws, 'keep.txt'), 'keep');
  fs.writeFileSync(path.join(ws, 'edit.txt'), 'old contents');
  fs.writeFileSync(path.join(ws, 'gone.txt'), 'to be deleted');
  fs.writeFileSync(path.join(ws, 'move.txt'), 'to be renamed');
  fs.writeFileSync(path.join(ws, 'script.sh'), '#!/bin/sh\n', { mode: 0o644 });
  fs.mkdirSync(path.join(ws, 'sub'));
  fs.writeFileSync(path.join(ws, 'sub', 'inner.txt'), 'inner');
  fs.mkdirSync(path.join(ws, 'emptydir'));
  fs.symlinkSync('keep.txt', path.join(ws, 'link'));
});
afterEach(() => fs.rmSync(base, { recursive: true, force: true }));

/** Carries out changes the way a supervisor does: record first, then change. */
function recorder(w: JournalWriter) {
  const at = (p: string) => path.join(ws, p);
  return {
    write(p: string, data: string | Buffer) {
      w.beforeChange(at(p));
      fs.writeFileSync(at(p), data);
    },
    append(p: string, data: string) {
      w.beforeChange(at(p));
      fs.appendFileSync(at(p), data);
    },
    unlink(p: string) {
      w.beforeChange(at(p));
      fs.unlinkSync(at(p));
    },
    rmdir(p: string) {
      w.beforeChange(at(p));
      fs.rmdirSync(at(p));
    },
    mkdir(p: string) {
      w.beforeChange(at(p));
      fs.mkdirSync(at(p));
    },
    rename(a: string, b: string) {
      w.beforeChange(at(b));
      fs.renameSync(at(a), at(b));
      w.rename(at(a), at(b));
    },
    chmod(p: string, mode: number) {
      w.mode(at(p), fs.statSync(at(p)).mode);
      fs.chmodSync(at(p), mode);
    },
    symlink(target: string, p: string) {
      w.beforeChange(at(p));
      fs.symlinkSync(target, at(p));
    },
    link(a: string, b: string) {
      w.beforeChange(at(b));
      fs.linkSync(at(a), at(b));
    },
  };
}

describe('changes journal', () => {
  it('lists every kind of change exactly and reverts the tree identical', () => {
    const before = treeListing(ws);
    const w = JournalWriter.create(jdir, { roots: [ws] });
    const r = recorder(w);
    r.write('new.txt', 'created');
    r.write('edit.txt', 'new contents');
    r.append('edit.txt', ' and more');
    r.unlink('gone.txt');
    r.rename('move.txt', 'moved.txt');
    r.chmod('script.sh', 0o755);
    r.symlink('edit.txt', 'newlink');
    r.unlink('link');
    r.symlink('edit.txt', 'link');
    r.mkdir('newdir');
    r.write('newdir/a.txt', 'a');
    r.rmdir('emptydir');
    r.write('big.bin', Buffer.alloc(8 << 20, 7));
    w.finish();

    expect(listJournal(jdir)).toEqual([
      { path: at('big.bin'), kind: 'created', type: 'file' },
      { path: at('edit.txt'), kind: 'modified', type: 'file' },
      { path: at('emptydir'), kind: 'deleted', type: 'directory' },
      { path: at('gone.txt'), kind: 'deleted', type: 'file' },
      { path: at('link'), kind: 'modified', type: 'symlink' },
      { path: at('moved.txt'), kind: 'renamed', from: at('move.txt'), type: 'file' },
      { path: at('new.txt'), kind: 'created', type: 'file' },
      { path: at('newdir'), kind: 'created', type: 'directory' },
      { path: at('newdir/a.txt'), kind: 'created', type: 'file' },
      { path: at('newlink'), kind: 'created', type: 'symlink' },
      { path: at('script.sh'), kind: 'modified', type: 'file' },
    ]);
    expect(treeListing(ws)).not.toEqual(before);
    revertJournal(jdir);
    expect(treeListing(ws)).toEqual(before);
    // A second revert does nothing.
    revertJournal(jdir);
    expect(treeListing(ws)).toEqual(before);
  });

  it('follows renamed directories, replaced files and hard links', () => {
    const before = treeHash(ws);
    const w = JournalWriter.create(jdir, { roots: [ws] });
    const r = recorder(w);
    // An editor's save: write a temporary file, rename it over the original.
    r.write('edit.txt.tmp', 'saved by an editor');
    r.rename('edit.txt.tmp', 'edit.txt');
    // A directory renamed, then a file in it changed under its new name.
    r.write('sub/inner.txt', 'changed once');
    r.rename('sub', 'sub2');
    r.write('sub2/inner.txt', 'changed twice');
    r.mkdir('sub');
    r.write('sub/other.txt', 'other');
    // A hard link made, then the shared file written through the new name.
    r.link('keep.txt', 'keep-link');
    r.write('keep-link', 'written through a link');
    r.chmod('keep-link', 0o600);
    w.finish();

    const list = listJournal(jdir);
    expect(list).toContainEqual({ path: at('edit.txt'), kind: 'modified', type: 'file' });
    expect(list).toContainEqual({ path: at('sub2'), kind: 'renamed', from: at('sub'), type: 'directory' });
    expect(list).toContainEqual({ path: at('keep-link'), kind: 'created', type: 'file' });
    expect(list).toContainEqual({ path: at('sub'), kind: 'created', type: 'directory' });
    expect(list).toContainEqual({ path: at('sub2/inner.txt'), kind: 'renamed', from: at('sub/inner.txt'), type: 'file' });
    expect(list.find((e) => e.path === at('edit.txt.tmp'))).toBeUndefined();
    revertJournal(jdir);
    expect(treeHash(ws)).toBe(before);
    expect(fs.readFileSync(at('keep.txt'), 'utf8')).toBe('keep');
  });

  it('reverts inside read-only directories and read-only files (as an unprivileged user too)', () => {
    fs.mkdirSync(at('ro'));
    fs.writeFileSync(at('ro/f.txt'), 'read only\n', { mode: 0o444 });
    fs.chmodSync(at('ro/f.txt'), 0o444);
    fs.mkdirSync(at('gone'));
    fs.writeFileSync(at('gone/x.txt'), 'x\n');
    fs.chmodSync(at('gone'), 0o555);
    fs.chmodSync(at('ro'), 0o555);
    const before = treeListing(ws);
    const w = JournalWriter.create(jdir, { roots: [ws] });
    const r = recorder(w);
    r.chmod('ro', 0o755);
    r.chmod('ro/f.txt', 0o644);
    r.write('ro/f.txt', 'changed\n');
    r.write('ro/new.txt', 'new\n');
    r.chmod('ro', 0o555);
    r.chmod('gone', 0o755);
    r.unlink('gone/x.txt');
    r.rmdir('gone');
    // A file and a directory the run left closed to their owner.
    r.write('edit.txt', 'changed, then made read-only\n');
    fs.chmodSync(at('edit.txt'), 0o444); // (already covered by the save: no record needed)
    r.mkdir('closed');
    r.write('closed/a.txt', 'a\n');
    r.mkdir('closed/sub');
    fs.chmodSync(at('closed/sub'), 0o500);
    fs.chmodSync(at('closed'), 0o500);
    w.finish();
    try {
      revertJournal(jdir);
      expect(treeListing(ws)).toEqual(before);
    } finally {
      for (const d of ['ro', 'gone', 'closed', 'closed/sub']) if (fs.existsSync(at(d))) fs.chmodSync(at(d), 0o755);
    }
  });

  it('reverts a name a rename put in place and a later call removed (a lock file renamed, then unlinked)', () => {
    const before = treeListing(ws);
    const w = JournalWriter.create(jdir, { roots: [ws] });
    const r = recorder(w);
    r.write('gc.pid.lock', '123');
    r.rename('gc.pid.lock', 'gc.pid');
    r.unlink('gc.pid');
    // A file renamed into a directory the run made, changed there, then the directory removed.
    r.mkdir('made');
    r.rename('move.txt', 'made/moved.txt');
    r.write('made/moved.txt', 'changed in made/');
    r.unlink('made/moved.txt');
    r.rmdir('made');
    w.finish();
    expect(listJournal(jdir)).toEqual([{ path: at('move.txt'), kind: 'deleted', type: 'file' }]);
    revertJournal(jdir);
    expect(treeListing(ws)).toEqual(before);
  });

  it('does not list a file written back with the same bytes', () => {
    const w = JournalWriter.create(jdir, { roots: [ws] });
    recorder(w).write('keep.txt', 'keep');
    recorder(w).write('edit.txt', 'changed');
    w.finish();
    expect(listJournal(jdir)).toEqual([{ path: at('edit.txt'), kind: 'modified', type: 'file' }]);
  });

  it('refuses to revert, changing nothing, when a recorded path was changed after the run', () => {
    const w = JournalWriter.create(jdir, { roots: [ws] });
    const r = recorder(w);
    r.write('edit.txt', 'by the command');
    r.write('new.txt', 'by the command');
    r.unlink('gone.txt');
    w.finish();
    // Someone else edits a recorded file after the run.
    fs.writeFileSync(at('edit.txt'), 'by the user, after the run');
    const after = treeListing(ws);
    let err: unknown;
    try {
      revertJournal(jdir);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('ECHANGED_OUTSIDE');
    expect((err as SandboxError).message).toContain(at('edit.txt'));
    expect((err as SandboxError).detail?.paths).toEqual([at('edit.txt')]);
    expect(treeListing(ws)).toEqual(after);
    // Positive control: the same journal without the outside change reverts.
    const w2 = JournalWriter.create(path.join(base, 'journal2'), { roots: [ws] });
    recorder(w2).write('new.txt', 'again');
    w2.finish();
    revertJournal(path.join(base, 'journal2'));
    expect(fs.readFileSync(at('new.txt'), 'utf8')).toBe('by the command');
  });

  it('refuses a directory created after the run inside a directory the run created', () => {
    const w = JournalWriter.create(jdir, { roots: [ws] });
    recorder(w).mkdir('made');
    w.finish();
    fs.writeFileSync(at('made/user.txt'), 'the user wrote this after the run');
    expect(() => revertJournal(jdir)).toThrow(expect.objectContaining({ code: 'ECHANGED_OUTSIDE' }));
    expect(fs.readFileSync(at('made/user.txt'), 'utf8')).toBe('the user wrote this after the run');
  });

  it('refuses a save past maxBytes with ECHANGES_LIMIT; smaller saves still fit', () => {
    const w = JournalWriter.create(jdir, { roots: [ws], maxBytes: 16 });
    fs.writeFileSync(at('large.txt'), 'x'.repeat(100));
    const r = recorder(w);
    r.write('keep.txt', 'fits'); // 4 bytes saved: the positive control
    expect(() => r.write('large.txt', 'never written')).toThrow(expect.objectContaining({ code: 'ECHANGES_LIMIT', errno: 28 }));
    expect(fs.readFileSync(at('large.txt'), 'utf8')).toBe('x'.repeat(100));
    w.finish();
    revertJournal(jdir);
    expect(fs.readFileSync(at('keep.txt'), 'utf8')).toBe('keep');
  });

  it('keeps the journal private and refuses a non-empty or relative directory', () => {
    const w = JournalWriter.create(jdir, {});
    w.finish();
    expect(fs.statSync(jdir).mode & 0o777).toBe(0o700);
    expect(() => JournalWriter.create(jdir, {})).toThrow(expect.objectContaining({ code: 'EINVALID_ARGUMENT' }));
    expect(() => JournalWriter.create('relative/dir', {})).toThrow(expect.objectContaining({ code: 'EINVALID_ARGUMENT' }));
  });

  it('will not revert an unfinished journal', () => {
    const w = JournalWriter.create(jdir, {});
    recorder(w).write('new.txt', 'x');
    expect(() => revertJournal(jdir)).toThrow(/not finished/);
    expect(fs.existsSync(at('new.txt'))).toBe(true);
  });
});

function at(p: string): string {
  return path.join(ws, p);
}
