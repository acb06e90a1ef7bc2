'use strict';
// .git rename-and-replant and the ACL lifecycle. Wine runs the placeholder and journal
// logic (files and directories are real there) but keeps no ACLs, so every "access denied" check and
// every read-back of an ACE needs real Windows and is skipped under wine with the reason.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');

const run = async (r, ...args) => (await h.runBackend({ file: h.probeChild, argv: [h.probeChild, ...args], rules: r })).exit.code;
const journalDir = path.join(h.stateDir, 'journal');
const journals = () => (fs.existsSync(journalDir) ? fs.readdirSync(journalDir).filter((n) => n.endsWith('.json')) : []);

test('a missing .git is held by a placeholder during the run and removed afterwards; the journal is gone', { timeout: 60000 }, async () => {
  const ws = h.tmpDir('ph');
  const dotGit = path.join(ws, '.git');
  const { child, exit } = await h.runBackend({
    file: h.probeChild,
    argv: [h.probeChild, 'exists', dotGit],
    rules: h.rules({ writeRoots: [ws], readOnly: [dotGit], tmp: 'none' }),
  });
  assert.equal(exit.code, 0, 'the name .git is taken while the command runs');
  assert.deepEqual(child.enforcement.mechanisms.placeholders, [dotGit]);
  assert.equal(child.enforcement.guarantees.protectedPaths, h.wine ? 'not-enforced' : 'enforced');
  assert.equal(fs.existsSync(dotGit), false, 'the placeholder is removed at exit');
  assert.deepEqual(journals(), [], 'the run journal is removed once everything is undone');
});

test('a placeholder the command filled (degraded wine run) is not deleted with its contents', { skip: h.wine ? false : 'real Windows denies the write this test needs', timeout: 60000 }, async () => {
  const ws = h.tmpDir('ph-filled');
  const dotGit = path.join(ws, '.git');
  const r = await h.runBackend({ file: h.probeChild, argv: [h.probeChild, 'write', path.join(dotGit, 'HEAD')], rules: h.rules({ writeRoots: [ws], readOnly: [dotGit], tmp: 'none' }) });
  assert.equal(r.exit.code, 0, 'wine lets the write through');
  assert.equal(fs.existsSync(path.join(dotGit, 'HEAD')), true, 'not empty: left in place for the user to see');
});

test('crash recovery: a dead host\'s journal is undone by the next run (placeholder and temp dir removed)', { timeout: 60000 }, async () => {
  const ws = h.tmpDir('crash');
  const ph = path.join(ws, '.codex');
  const tmp = path.join(ws, 'tmpdir');
  fs.mkdirSync(ph);
  fs.mkdirSync(tmp);
  fs.writeFileSync(path.join(tmp, 'f'), 'x');
  fs.mkdirSync(journalDir, { recursive: true });
  // A pid far above anything wine or Windows hands out: that host is gone.
  const dead = path.join(journalDir, '4194300-deadbeef0000.json');
  fs.writeFileSync(dead, JSON.stringify({ version: 1, pid: 4194300, entries: [{ kind: 'placeholder', path: ph, type: 'dir' }, { kind: 'dir', path: tmp }] }));
  // Control: a live host's journal (ours) is left alone.
  const live = path.join(journalDir, `${process.pid}-0123456789ab.json`);
  const livePh = path.join(ws, '.agents');
  fs.mkdirSync(livePh);
  fs.writeFileSync(live, JSON.stringify({ version: 1, pid: process.pid, entries: [{ kind: 'placeholder', path: livePh, type: 'dir' }] }));
  try {
    const backend = h.win32.createWin32Backend(h.native, { stateDir: h.stateDir });
    const child = backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'sleep', '1'], env: h.baseEnv(), cwd: ws, stdio: ['ignore', 'ignore', 'ignore'], rules: h.rules() });
    await child.exited;
    assert.equal(fs.existsSync(dead), false, 'the dead host\'s journal is consumed');
    assert.equal(fs.existsSync(ph), false, 'its placeholder is removed');
    assert.equal(fs.existsSync(tmp), false, 'its temp dir is removed');
    assert.equal(fs.existsSync(live), true, 'a live host\'s journal is kept');
    assert.equal(fs.existsSync(livePh), true, 'and so is what it relies on');
  } finally {
    fs.rmSync(live, { force: true });
  }
});

test('a placeholder another live run relies on is not removed by a run that ends first', { timeout: 60000 }, async () => {
  const ws = h.tmpDir('shared-ph');
  const dotGit = path.join(ws, '.git');
  const r = h.rules({ writeRoots: [ws], readOnly: [dotGit], tmp: 'none' });
  const long = h.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'sleep', '600000'], env: h.baseEnv(), cwd: ws, stdio: ['ignore', 'ignore', 'ignore'], rules: r });
  try {
    assert.equal(fs.existsSync(dotGit), true);
    // A second, short run: it relies on the same placeholder (each run has its own journal file,
    // and an entry is undone only when no other live journal lists it).
    const short = await run(r, 'sleep', '1');
    assert.equal(short, 0);
    assert.equal(fs.existsSync(dotGit), true, 'still held: the long run relies on it');
  } finally {
    long.kill('SIGKILL');
    await long.exited;
  }
  assert.equal(fs.existsSync(dotGit), false, 'removed by the last run that relied on it');
});

test('isolation: .git cannot be renamed away and replanted; the rest of the root stays usable', { skip: h.NEEDS_REAL_WINDOWS, timeout: 90000 }, async () => {
  const ws = h.tmpDir('iso-git');
  const hooks = path.join(ws, '.git', 'hooks');
  fs.mkdirSync(hooks, { recursive: true });
  fs.writeFileSync(path.join(ws, 'file.txt'), 'x');
  const r = h.rules({ writeRoots: [ws], readOnly: [hooks, path.join(ws, '.git', 'config')], tmp: 'none' });
  assert.equal(await run(r, 'rename', path.join(ws, 'file.txt'), path.join(ws, 'file2.txt')), 0, 'control: renames in the root work');
  assert.equal(await run(r, 'rename', path.join(ws, '.git'), path.join(ws, '.git-old')), 3, '.git cannot be renamed');
  assert.equal(await run(r, 'rename', hooks, path.join(ws, '.git', 'hooks-old')), 3, 'hooks cannot be renamed');
  assert.equal(await run(r, 'rename', ws, `${ws}-moved`), 3, 'the root itself cannot be moved');
  assert.equal(fs.existsSync(path.join(ws, '.git', 'hooks')), true, 'outside check: .git/hooks is still there');
  assert.equal(fs.existsSync(path.join(ws, '.git-old')), false);
});

test('isolation: a missing .git cannot be created (no git init) unless allow-init', { skip: h.NEEDS_REAL_WINDOWS, timeout: 90000 }, async () => {
  const ws = h.tmpDir('iso-init');
  const dotGit = path.join(ws, '.git');
  const r = h.rules({ writeRoots: [ws], readOnly: [dotGit], tmp: 'none' });
  assert.equal(await run(r, 'mkdir', path.join(ws, 'other')), 0, 'control: mkdir in the root works');
  assert.equal(await run(r, 'mkdir', path.join(dotGit, 'hooks')), 3, 'nothing can be created inside the placeholder');
  assert.equal(await run(r, 'rename', dotGit, path.join(ws, 'gone')), 3, 'the placeholder cannot be moved away');
  assert.equal(fs.existsSync(dotGit), false, 'outside check: no .git was left behind');
});

test('isolation: per-run deny ACEs are removed at exit; the persistent grant stays', { skip: h.NEEDS_REAL_WINDOWS, timeout: 90000 }, async () => {
  const ws = h.tmpDir('iso-life');
  const hooks = path.join(ws, '.git', 'hooks');
  fs.mkdirSync(hooks, { recursive: true });
  const r = h.rules({ writeRoots: [ws], readOnly: [hooks], tmp: 'none' });
  const before = h.native.winAclSddl(path.join(ws, '.git'));
  await run(r, 'sleep', '1');
  const sid = new h.win32.CapabilityStore(h.stateDir).sidsForRoots([ws])[0];
  assert.doesNotMatch(h.native.winAclSddl(hooks), new RegExp(`\\(D;[^)]*;${sid}\\)`), 'no deny ACE left on hooks');
  assert.doesNotMatch(h.native.winAclSddl(path.join(ws, '.git')), new RegExp(`\\(D;[^)]*;${sid}\\)`), 'none on .git');
  assert.match(h.native.winAclSddl(ws), new RegExp(`\\(A;OICI;[^)]*;${sid}\\)`), 'the root keeps its grant (persists by design)');
  assert.ok(before.length > 0);
});

// Codex's legacy backend probes this and fails closed (LEGACY_RESTRICTED_TOKEN_UNSAFE_DELETE_ERROR):
// on some Windows builds the kernel does not apply the restricting SIDs of a write-restricted token
// to FILE_DELETE_CHILD, so the child could delete (and rename away) any file in a directory the user
// controls. If this test fails on a Windows build, that build must be refused.
test('isolation: files outside the writable roots cannot be deleted or renamed (FILE_DELETE_CHILD is restricted)', { skip: h.NEEDS_REAL_WINDOWS, timeout: 90000 }, async () => {
  const ws = h.tmpDir('iso-del-ws');
  const outside = h.tmpDir('iso-del-out');
  const victim = path.join(outside, 'victim.txt');
  fs.writeFileSync(victim, 'keep');
  const inside = path.join(ws, 'scratch.txt');
  fs.writeFileSync(inside, 'x');
  const r = h.rules({ writeRoots: [ws], tmp: 'none' });
  assert.equal(await run(r, 'delete', inside), 0, 'control: deleting inside the root works');
  assert.equal(await run(r, 'delete', victim), 3, 'deleting outside is denied');
  assert.equal(await run(r, 'rename', victim, path.join(outside, 'moved.txt')), 3, 'renaming outside is denied');
  assert.equal(fs.readFileSync(victim, 'utf8'), 'keep', 'outside check: the file is intact');
});

test('the run that created a placeholder ends first: the placeholder stays for the run that borrowed it', { timeout: 60000 }, async () => {
  const ws = h.tmpDir('borrow-ph');
  const dotGit = path.join(ws, '.git');
  const r = h.rules({ writeRoots: [ws], readOnly: [dotGit], tmp: 'none' });
  const start = () => h.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'sleep', '600000'], env: h.baseEnv(), cwd: ws, stdio: ['ignore', 'ignore', 'ignore'], rules: r });
  const creator = start();
  let borrower = null;
  try {
    assert.deepEqual(creator.enforcement.mechanisms.placeholders, [dotGit]);
    borrower = start(); // sees .git existing: another live run's placeholder
    assert.deepEqual(borrower.enforcement.mechanisms.placeholders, []);
    creator.kill('SIGKILL');
    await creator.exited;
    assert.equal(fs.existsSync(dotGit), true, 'still held while the borrower runs');
  } finally {
    // Whatever failed above, no sleeping child may outlive the test (it would keep the file's process alive).
    creator.kill('SIGKILL');
    if (borrower) borrower.kill('SIGKILL');
    await Promise.all([creator.exited, borrower?.exited]);
  }
  assert.equal(fs.existsSync(dotGit), false, 'removed by the last run that relied on it');
});
