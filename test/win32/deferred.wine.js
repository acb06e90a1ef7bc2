'use strict';
// ACL edits off the JS thread and the deferred start of sandboxed Windows runs: the
// event loop keeps turning while the ACLs are applied; kill() before the start cancels it and
// undoes the edits; an ACL failure is an 'error' event and a rejected `exited`; stdin written
// before the start arrives; run()'s timeout and abort work during the ACL phase.
//
// Wine stores no ACLs (GetNamedSecurityInfoW returns a DACL synthesised from the Unix mode bits,
// and SetNamedSecurityInfoW neither keeps nor propagates an ACE), so under wine "the ACEs were
// undone" is checked through the addon calls (a spy on winAclBatch: the undo batch removes every
// deny and revokes every grant the run made) and the journal; the winAclSddl read-backs run too
// but only mean something on real Windows, where the positive controls (the ACE is there while
// the run is alive) are not skipped.
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');

const api = require(path.join(h.root, 'dist', 'index.js'));
const degraded = h.wine !== null;
const journalDir = path.join(h.stateDir, 'journal');
const journals = () => (fs.existsSync(journalDir) ? fs.readdirSync(journalDir).filter((n) => n.endsWith('.json')) : []);

/** A 20,000-file tree (200 directories of 100 files), made once for the suite. */
let bigTree = null;
function makeBigTree() {
  if (bigTree) return bigTree;
  const root = h.tmpDir('big');
  const dirs = [];
  for (let i = 0; i < 200; i++) {
    const d = path.join(root, `d${i}`);
    fs.mkdirSync(d);
    for (let j = 0; j < 100; j++) fs.writeFileSync(path.join(d, `f${j}`), '');
    dirs.push(d);
  }
  bigTree = { root, dirs };
  return bigTree;
}

/** A small workspace with `n` protected subdirectories (each a deny-write edit, plus its parent's). */
function workspace(prefix, n) {
  const ws = h.tmpDir(prefix);
  const dirs = [];
  for (let i = 0; i < n; i++) {
    const d = path.join(ws, `p${i}`);
    fs.mkdirSync(d);
    dirs.push(d);
  }
  return { ws, dirs };
}

/** The addon with winAclBatch and winSpawn recorded (calls go through to the real addon). */
function spyNative() {
  const batches = [];
  const spawns = [];
  const n = Object.create(h.native);
  n.winAclBatch = (edits, options) => {
    const b = h.native.winAclBatch(edits, options);
    const rec = { edits, options, outcome: null };
    batches.push(rec);
    b.promise.then((o) => (rec.outcome = o), () => {});
    return { promise: b.promise, cancel: b.cancel };
  };
  n.winSpawn = (...args) => {
    spawns.push(args[0]);
    return h.native.winSpawn(...args);
  };
  return { n, batches, spawns, backend: h.win32.createWin32Backend(n, { stateDir: h.stateDir }) };
}

/** Counts event-loop turns (setImmediate) and timer ticks (setInterval) until stop(). */
function loopCounter() {
  let turns = 0;
  let ticks = 0;
  let on = true;
  const spin = () => {
    turns++;
    if (on) setImmediate(spin);
  };
  setImmediate(spin);
  const iv = setInterval(() => ticks++, 1);
  return {
    stop() {
      on = false;
      clearInterval(iv);
      return { turns, ticks };
    },
  };
}

const denyAce = (sid) => new RegExp(`\\(D;[^)]*;${sid}\\)`);
const anyAce = (sid) => new RegExp(`;${sid}\\)`);
const randomSid = () => `S-1-15-3-1024-${[0, 0, 0, 0].map(() => crypto.randomBytes(4).readUInt32LE()).join('-')}`;

function onceEvent(emitter, name) {
  return new Promise((resolve) => emitter.once(name, (...args) => resolve(args)));
}

test('the event loop keeps turning while a 20,000-file tree is granted (positive control: the synchronous winAclEdit on the same tree turns it 0 times)', { timeout: 180000 }, async (t) => {
  const tree = makeBigTree();
  const r = h.rules({ writeRoots: [tree.root], readOnly: tree.dirs });
  const counter = loopCounter();
  let during;
  const t0 = Date.now();
  const proc = h.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'report', '0'], env: h.baseEnv(), cwd: tree.root, stdio: ['ignore', 'pipe', 'ignore'], rules: r });
  const out = h.collect(proc.stdio[1]);
  let pid;
  try {
    assert.equal(proc.pid, undefined, 'not started when spawn() returns: the ACL edits come first');
    assert.equal(proc.enforcement.mode, 'restricted-token', 'the report is there synchronously');
    assert.equal(proc.enforcement.mechanisms.aclChanges, null, 'aclChanges is filled in once the edits ran');
    // The root's grant (the walk of the 20,000 files on real Windows), a deny per directory, ...
    assert.ok(proc.enforcement.mechanisms.aclEdits > tree.dirs.length, `${proc.enforcement.mechanisms.aclEdits} edits planned`);
    pid = await proc.started;
  } finally {
    during = counter.stop();
  }
  const ms = Date.now() - t0;
  assert.ok(pid > 0 && proc.pid === pid, 'pid once started');
  assert.equal(typeof proc.enforcement.mechanisms.aclChanges, 'number');
  const exit = await proc.exited;
  assert.equal(exit.code, 0);
  assert.equal(h.parseReport(await out).injob, '1');
  t.diagnostic(`ACL phase: ${ms} ms, ${during.turns} loop turns, ${during.ticks} timer ticks`);
  assert.ok(during.turns > 0, `the loop turned ${during.turns} times (${during.ticks} timer ticks) during ${ms} ms of ACL edits`);

  // Positive control: the same edits (the root's grant, a deny on each directory) made with the
  // synchronous winAclEdit, as applyPlan did before: the loop does not turn once.
  const sid = randomSid();
  const control = loopCounter();
  const t1 = Date.now();
  let sync;
  try {
    h.native.winAclEdit('grant-write', tree.root, sid);
    for (const d of tree.dirs) h.native.winAclEdit('deny-write', d, sid);
  } finally {
    sync = control.stop();
  }
  t.diagnostic(`synchronous control: ${Date.now() - t1} ms, ${sync.turns} loop turns, ${sync.ticks} timer ticks`);
  assert.equal(sync.turns, 0, 'positive control: a synchronous walk freezes the loop');
  assert.equal(sync.ticks, 0);
  for (const d of tree.dirs) h.native.winAclEdit('remove-denies', d, sid);
  h.native.winAclEdit('remove-denies', tree.root, sid);
  h.native.winAclEdit('revoke', tree.root, sid);
});

test('winAclBatch: per-edit results off the JS thread; a failure names the path and the Win32 error; later edits are not attempted', { timeout: 60000 }, async () => {
  const { ws, dirs } = workspace('batch', 3);
  const sid = randomSid();
  const missing = path.join(ws, 'missing');
  const b = h.native.winAclBatch([
    { op: 'grant-write', path: ws, sid },
    { op: 'deny-write', path: dirs[0], sid },
    { op: 'deny-write', path: missing, sid },
    { op: 'deny-write', path: dirs[1], sid },
  ]);
  assert.equal(typeof b.cancel, 'function');
  const { results, cancelled } = await b.promise;
  assert.equal(cancelled, false);
  assert.deepEqual(results[0], { changed: true });
  assert.equal(typeof results[1].changed, 'boolean');
  const err = results[2].error;
  assert.ok(err instanceof h.SandboxError);
  assert.equal(err.code, 'EACL_EDIT');
  assert.equal(err.winError, 2);
  assert.ok(err.message.includes(missing) && /error 2/.test(err.message), err.message);
  assert.equal(results[3], null, 'not attempted after the failure');
  // continueOnError: every edit is tried (the journal's undo).
  const all = await h.native.winAclBatch(
    [
      { op: 'remove-denies', path: missing, sid },
      { op: 'remove-denies', path: dirs[0], sid },
      { op: 'revoke', path: ws, sid },
    ],
    { continueOnError: true },
  ).promise;
  assert.equal(all.results[0].error.winError, 2);
  assert.deepEqual(all.results.slice(1).map((r) => 'changed' in r), [true, true]);
  if (!h.wine) assert.doesNotMatch(h.native.winAclSddl(ws), anyAce(sid), 'real Windows: the grant is revoked');
  // Bad input is refused synchronously; nothing runs.
  assert.throws(() => h.native.winAclBatch([{ op: 'chmod', path: ws, sid }]), /Expected op/);
  assert.throws(() => h.native.winAclBatch([{ op: 'revoke', path: ws, sid: 'S-nope' }]), (e) => e.code === 'ESID_LOOKUP');
  assert.throws(() => h.native.winAclBatch([{ op: 'revoke', path: `${ws}\0x`, sid }]), (e) => e.code === 'EINVALID_ARGUMENT');
});

for (const when of ['at once', 'during the ACL edits']) {
  test(`kill() before the start (${when}): nothing runs, the ACL edits are undone, exit and close report the signal`, { timeout: 60000 }, async () => {
    const { ws, dirs } = workspace(`kill-${when === 'at once' ? 'now' : 'mid'}`, 150);
    const dotGit = path.join(ws, '.git');
    const marker = path.join(ws, 'marker.txt');
    const spy = spyNative();
    const r = h.rules({ writeRoots: [ws], readOnly: [...dirs, dotGit] });
    const child = new h.SandboxedProcess(spy.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'write', marker], env: h.baseEnv(), cwd: ws, stdio: ['pipe', 'pipe', 'pipe'], rules: r }));
    let spawned = false;
    child.on('spawn', () => (spawned = true));
    const exitEv = onceEvent(child, 'exit');
    const closeEv = onceEvent(child, 'close');
    assert.equal(child.pid, undefined);
    assert.equal(fs.existsSync(dotGit), true, 'the placeholder is made synchronously');
    const runJournal = child.enforcement.mechanisms.journal;
    assert.equal(fs.existsSync(runJournal), true, 'every edit is journalled before the batch starts');
    const journalled = JSON.parse(fs.readFileSync(runJournal, 'utf8')).entries;
    if (when !== 'at once') {
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(spy.batches.length, 1, 'the batch is running');
    }
    assert.equal(child.kill('SIGKILL'), true);
    assert.equal(child.killed, true);
    assert.deepEqual(await exitEv, [null, 'SIGKILL']);
    assert.deepEqual(await closeEv, [null, 'SIGKILL']);
    assert.deepEqual(await child.exited.then(({ code, signal }) => ({ code, signal })), { code: null, signal: 'SIGKILL' });
    assert.equal(spawned, false, "'spawn' never fired");
    assert.equal(child.pid, undefined);
    assert.equal(spy.spawns.length, 0, 'winSpawn was never called');
    assert.equal(fs.existsSync(marker), false, 'the command did not run');
    assert.equal(child.stdin.destroyed, true);
    // Undone through the journal: the undo batch removes every deny and revokes every grant.
    const undo = spy.batches[spy.batches.length - 1];
    if (when === 'at once') {
      assert.equal(spy.batches.length, 1, 'no apply batch at all: only the undo');
    } else {
      assert.equal(spy.batches.length, 2, 'the apply batch, then the undo');
      assert.equal(spy.batches[0].outcome.cancelled, true, 'the apply batch stopped before its end');
      assert.ok(spy.batches[0].outcome.results.some((x) => x === null), 'later edits were not attempted');
    }
    assert.equal(undo.options.continueOnError, true);
    const expected = journalled.filter((e) => e.kind === 'deny' || e.kind === 'grant').map((e) => `${e.kind === 'deny' ? 'remove-denies' : 'revoke'}|${e.path}|${e.sid}`).sort();
    assert.deepEqual(undo.edits.map((e) => `${e.op}|${e.path}|${e.sid}`).sort(), expected);
    assert.equal(fs.existsSync(runJournal), false, 'the journal is gone: everything was undone');
    assert.equal(fs.existsSync(dotGit), false, 'the placeholder is removed');
    const sid = new h.win32.CapabilityStore(h.stateDir).sidsForRoots([ws])[0];
    for (const d of [ws, ...dirs.slice(0, 5)]) assert.doesNotMatch(h.native.winAclSddl(d), denyAce(sid), `no deny ACE left on ${d}`);
  });
}

test('needs real Windows: while a run is alive its deny ACEs are on disk (the positive control of the kill test\'s read-back)', { skip: h.NEEDS_REAL_WINDOWS, timeout: 60000 }, async () => {
  const { ws, dirs } = workspace('alive-ace', 2);
  const child = h.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'sleep', '600000'], env: h.baseEnv(), cwd: ws, stdio: ['ignore', 'ignore', 'ignore'], rules: h.rules({ writeRoots: [ws], readOnly: dirs }) });
  try {
    await child.started;
    const sid = new h.win32.CapabilityStore(h.stateDir).sidsForRoots([ws])[0];
    assert.match(h.native.winAclSddl(dirs[0]), denyAce(sid));
  } finally {
    child.kill('SIGKILL');
    await child.exited;
  }
  const sid = new h.win32.CapabilityStore(h.stateDir).sidsForRoots([ws])[0];
  assert.doesNotMatch(h.native.winAclSddl(dirs[0]), denyAce(sid), 'removed at exit');
});

test('an ACL failure (a protected directory gone before its edit): error event, exited rejects with EACL_EDIT naming the path and the Win32 error, everything journalled is undone, nothing ran', { timeout: 60000 }, async () => {
  const { ws, dirs } = workspace('aclfail', 3);
  const dotGit = path.join(ws, '.git');
  const marker = path.join(ws, 'marker.txt');
  const spy = spyNative();
  const r = h.rules({ writeRoots: [ws], readOnly: [...dirs, dotGit] });
  const child = new h.SandboxedProcess(spy.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'write', marker], env: h.baseEnv(), cwd: ws, stdio: ['pipe', 'pipe', 'pipe'], rules: r }));
  const runJournal = child.enforcement.mechanisms.journal;
  // Planned and journalled; the batch starts on the next microtask. Remove a protected directory
  // now: its deny-write edit fails with ERROR_FILE_NOT_FOUND, as an access-denied root would with 5.
  fs.rmSync(dirs[1], { recursive: true });
  let spawned = false;
  child.on('spawn', () => (spawned = true));
  const events = [];
  child.on('exit', () => events.push('exit'));
  const errorEv = onceEvent(child, 'error').then(([e]) => (events.push('error'), e));
  const closeEv = onceEvent(child, 'close').then((a) => (events.push('close'), a));
  child.stdin.write('early'); // queued; discarded with the start
  const err = await errorEv;
  assert.ok(err instanceof h.SandboxError);
  assert.equal(err.code, 'EACL_EDIT');
  assert.equal(err.winError, 2);
  assert.equal(err.detail.path, dirs[1]);
  assert.equal(err.detail.op, 'deny-write');
  assert.ok(err.message.includes(dirs[1]) && /error 2/.test(err.message), err.message);
  assert.deepEqual(await closeEv, [null, null]);
  await assert.rejects(child.exited, (e) => e === err);
  assert.deepEqual(events, ['error', 'close'], "no 'exit' for a command that never started");
  assert.equal(spawned, false);
  assert.equal(child.pid, undefined);
  assert.equal(spy.spawns.length, 0, 'winSpawn was never called');
  assert.equal(fs.existsSync(marker), false);
  assert.equal(spy.batches.length, 2, 'the apply batch, then the undo');
  assert.equal(spy.batches[1].options.continueOnError, true);
  assert.ok(spy.batches[1].edits.some((e) => e.op === 'remove-denies' && e.path === dirs[0]), 'the denies already made are removed');
  assert.equal(fs.existsSync(runJournal), false, 'everything journalled was undone (a gone path counts as undone)');
  assert.equal(fs.existsSync(dotGit), false, 'the placeholder is removed');
});

test('access denied (error 5) from the batch: EACL_EDIT keeps the API name, the Win32 error and the path', { timeout: 60000 }, async () => {
  // A real denial needs real Windows (below); here: an addon whose apply batch fails its first
  // edit with error 5 (the undo batch is the real one).
  const fake = Object.create(h.native);
  fake.winAclBatch = (edits, options) => options && options.continueOnError ? h.native.winAclBatch(edits, options) : ({
    promise: Promise.resolve({ results: edits.map((e, i) => (i === 0 ? { error: Object.assign(new h.SandboxError('EACL_EDIT', `SetNamedSecurityInfoW failed, error 5: ${e.path}`, { syscall: 'SetNamedSecurityInfoW', winError: 5 })) } : null)), cancelled: false }),
    cancel() {},
  });
  const be = h.win32.createWin32Backend(fake, { stateDir: h.stateDir });
  const { ws } = workspace('fake-deny', 0);
  const child = new h.SandboxedProcess(be.spawn({ file: h.probeChild, argv: [h.probeChild, 'report', '0'], env: h.baseEnv(), cwd: ws, stdio: ['pipe', 'pipe', 'pipe'], rules: h.rules({ writeRoots: [ws] }) }));
  const [err] = await onceEvent(child, 'error');
  assert.equal(err.code, 'EACL_EDIT');
  assert.equal(err.winError, 5);
  assert.equal(err.syscall, 'SetNamedSecurityInfoW');
  assert.ok(err.message.includes(ws) && /error 5/.test(err.message), err.message);
  await assert.rejects(child.exited, (e) => e === err);
});

test('needs real Windows: access denied on a writable root fails the start with EACL_EDIT (error 5) and undoes the run', { skip: h.NEEDS_REAL_WINDOWS, timeout: 60000 }, async () => {
  const cp = require('node:child_process');
  const { ws, dirs } = workspace('denied-root', 1);
  const root = path.join(ws, 'root');
  fs.mkdirSync(root);
  // The owner's implicit WRITE_DAC goes through OWNER RIGHTS; deny it there and for the user.
  cp.execFileSync('icacls', [root, '/deny', '*S-1-3-4:(WDAC)', '/deny', `${process.env.USERNAME}:(WDAC)`]);
  try {
    const r = await api.run(h.probeChild, ['report', '0'], { cwd: ws, env: h.baseEnv(), policy: { degraded, network: 'full', filesystem: { write: [root, ws], protect: dirs } } }).then(
      () => null,
      (e) => e,
    );
    assert.ok(r, 'run() rejects');
    assert.equal(r.code, 'EACL_EDIT');
    assert.equal(r.winError, 5);
    assert.ok(r.message.includes(root), r.message);
  } finally {
    cp.execFileSync('icacls', [root, '/remove:d', '*S-1-3-4', `${process.env.USERNAME}`]);
  }
});

test('stdin written before the start is delivered; pid and spawn come with the start', { timeout: 60000 }, async () => {
  const { ws, dirs } = workspace('stdin', 20);
  const child = new h.SandboxedProcess(h.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'report', '5'], env: h.baseEnv(), cwd: ws, stdio: ['pipe', 'pipe', 'pipe'], rules: h.rules({ writeRoots: [ws], readOnly: dirs }) }));
  const payload = `early:${'x'.repeat(100000)}:end`;
  assert.equal(child.pid, undefined);
  child.stdin.write(payload.slice(0, 50000));
  child.stdin.end(payload.slice(50000));
  const spawnEv = onceEvent(child, 'spawn').then(() => child.pid);
  const out = h.collect(child.stdout);
  const err = h.collect(child.stderr);
  const [code] = await onceEvent(child, 'close');
  assert.equal(code, 5);
  const pid = await spawnEv;
  assert.ok(pid > 0, "pid is set when 'spawn' fires");
  assert.equal(h.parseReport(await out).in, payload);
  assert.equal((await err).trim(), 'err-line');
  assert.equal(typeof child.enforcement.mechanisms.aclChanges, 'number');
});

test('run(): timeout and abort during the ACL phase stop the start; nothing runs; the result is a killed run', { timeout: 120000 }, async () => {
  const { ws, dirs } = workspace('run-acl', 150);
  const marker = path.join(ws, 'marker.txt');
  const policy = { degraded, network: 'full', filesystem: { write: [ws], protect: dirs } };
  const timed = await api.run(h.probeChild, ['write', marker], { cwd: ws, env: h.baseEnv(), timeout: 1, policy });
  assert.equal(timed.timedOut, true);
  assert.equal(timed.killed, true);
  assert.deepEqual([timed.code, timed.signal], [null, 'SIGKILL']);
  assert.equal(timed.enforcement.mechanisms.aclChanges, null, 'stopped before the ACL edits finished');
  assert.equal(fs.existsSync(marker), false, 'the command did not run');

  const ac = new AbortController();
  const p = api.run(h.probeChild, ['write', marker], { cwd: ws, env: h.baseEnv(), signal: ac.signal, policy });
  ac.abort();
  const aborted = await p;
  assert.equal(aborted.aborted, true);
  assert.deepEqual([aborted.code, aborted.signal], [null, 'SIGKILL']);
  assert.equal(fs.existsSync(marker), false);

  await assert.rejects(
    api.run(h.probeChild, ['write', marker], { cwd: ws, env: h.baseEnv(), timeout: 1, policy, reject: true }),
    (e) => e.code === 'ETIMEDOUT',
  );
  // Control: the same run without a timeout runs the command.
  const ok = await api.run(h.probeChild, ['write', marker], { cwd: ws, env: h.baseEnv(), policy });
  assert.equal(ok.code, 0);
  assert.equal(fs.existsSync(marker), true, 'positive control: the command writes the marker when it runs');
});

test('unsandboxed runs (policy: null) start synchronously: pid at once', { timeout: 60000 }, async () => {
  const proc = h.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'report', '0'], env: h.baseEnv(), cwd: process.cwd(), stdio: ['ignore', 'ignore', 'ignore'], rules: null });
  assert.ok(proc.pid > 0);
  assert.equal(proc.started, undefined);
  assert.equal((await proc.exited).code, 0);
});
