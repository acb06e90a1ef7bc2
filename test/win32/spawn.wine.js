'use strict';
// Spawning through the Windows backend: stdio, exit codes, desktop and job, policy handling,
// error paths, and the isolation assertions (real Windows only).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');

test('cmd.exe /c echo, unsandboxed: output comes back through the pipe', { timeout: 60000 }, async () => {
  const { exit, stdout, child } = await h.runBackend({
    file: h.cmdExe,
    argv: ['cmd.exe', '/c', 'echo', 'hello-from-cmd'],
    rules: null,
  });
  assert.equal(stdout.trim(), 'hello-from-cmd');
  assert.deepEqual(exit, { code: 0, signal: null });
  assert.equal(child.enforcement.sandboxed, false);
  assert.equal(child.enforcement.mode, 'none');
});

test('cmd.exe /c echo, sandboxed: output and exit code come back', { timeout: 60000 }, async () => {
  const { exit, stdout, child } = await h.runBackend({
    file: h.cmdExe,
    argv: ['cmd.exe', '/c', 'echo hello-sandboxed& exit 7'],
    rules: h.rules(),
  });
  assert.equal(stdout.trim(), 'hello-sandboxed');
  assert.deepEqual(exit, { code: 7, signal: null });
  assert.equal(child.enforcement.mode, 'restricted-token');
});

for (const sandboxed of [false, true]) {
  test(`probe child (${sandboxed ? 'sandboxed' : 'plain'}): stdin, stdout, stderr round trip, exit code, env, job`, { timeout: 60000 }, async () => {
    const { exit, stdout, stderr, child } = await h.runBackend(
      {
        file: h.probeChild,
        argv: [h.probeChild, 'report', '42'],
        env: h.baseEnv({ PSB_PROBE: 'env ok' }),
        rules: sandboxed ? h.rules() : null,
      },
      'ping \u00e9',
    );
    const facts = h.parseReport(stdout);
    assert.equal(facts.in, 'ping \u00e9');
    assert.equal(facts.env, 'env ok');
    assert.equal(facts.injob, '1', 'the child is inside the job');
    assert.equal(stderr.trim(), 'err-line');
    assert.deepEqual(exit, { code: 42, signal: null });
    assert.ok(child.pid > 0);
    if (sandboxed) {
      const desk = child.enforcement.mechanisms.privateDesktop;
      assert.match(desk, /\\process-sandbox-[0-9a-f]{24}$/);
      assert.equal(facts.desktop, desk.split('\\').pop(), 'the child runs on the private desktop');
    } else {
      assert.doesNotMatch(facts.desktop, /^process-sandbox-/, 'positive control: plain runs keep our desktop');
    }
  });
}

test('stdio given as an fd number: the child writes straight into our file', { timeout: 60000 }, async () => {
  const file = path.join(h.tmpDir('fd'), 'out.txt');
  const fd = fs.openSync(file, 'w');
  try {
    const child = h.backend.spawn({
      file: h.cmdExe,
      argv: ['cmd.exe', '/c', 'echo via-fd'],
      env: h.baseEnv(),
      cwd: process.cwd(),
      stdio: ['ignore', fd, 'ignore'],
      rules: h.rules(),
    });
    assert.equal(child.stdio[1], null);
    assert.deepEqual(await child.exited, { code: 0, signal: null });
  } finally {
    fs.closeSync(fd);
  }
  assert.equal(fs.readFileSync(file, 'utf8').trim(), 'via-fd');
});

test('extra stdio fds are refused on Windows', () => {
  assert.throws(
    () => h.backend.spawn({ file: h.cmdExe, argv: ['cmd.exe'], env: h.baseEnv(), cwd: process.cwd(), stdio: ['ignore', 'ignore', 'ignore', 'pipe'], rules: null }),
    (e) => e.code === 'EINVALID_ARGUMENT' && /stdio\[3\]/.test(e.message),
  );
});

test('arguments with spaces, quotes, backslashes and non-ASCII arrive intact', { timeout: 60000 }, async () => {
  const awkward = ['', ' ', 'a b', 'a"b', 'a\\"b', 'trail\\', 'trail \\', '\\\\server\\share\\x y', '"', 'caf\u00e9 \u2603', '\t'];
  const { stdout, exit } = await h.runBackend({
    file: h.probeChild,
    argv: [h.probeChild, 'argv', ...awkward],
    rules: h.rules(),
  });
  assert.equal(exit.code, 0);
  const got = stdout
    .split(/\r?\n/)
    .filter((l) => l.startsWith('arg:'))
    .map((l) => Buffer.from(l.slice(4), 'hex').toString('utf8'));
  assert.deepEqual(got, awkward);
});

test('the environment block is sorted case-insensitively, as Windows requires', { timeout: 60000 }, async () => {
  const env = h.baseEnv({ zeta: '1', Alpha: '2', beta: '3', GAMMA: '4', '_under': '5' });
  const { stdout, exit } = await h.runBackend({ file: h.probeChild, argv: [h.probeChild, 'env-names'], env, rules: h.rules() });
  assert.equal(exit.code, 0);
  const ours = new Set(Object.keys(env).map((k) => k.toUpperCase()));
  // wine's process start-up sets SystemRoot again, which moves it to the end of the block.
  if (h.wine) ours.delete('SYSTEMROOT');
  const names = stdout.split(/\r?\n/).filter((l) => l.startsWith('name:')).map((l) => l.slice(5)).filter((n) => ours.has(n.toUpperCase()));
  assert.equal(names.length, ours.size, `all our names arrive: ${names.join(',')}`);
  const sorted = [...names].sort((a, b) => (a.toUpperCase() < b.toUpperCase() ? -1 : a.toUpperCase() > b.toUpperCase() ? 1 : 0));
  assert.deepEqual(names, sorted);
});

test('non-ASCII cwd and env values reach the child intact', { timeout: 60000 }, async () => {
  const cwd = path.join(h.tmpDir('uni'), 'd\u00eer \u00fc \u4e2d');
  fs.mkdirSync(cwd);
  const { stdout, exit } = await h.runBackend({
    file: h.probeChild,
    argv: [h.probeChild, 'report', '0'],
    cwd,
    env: h.baseEnv({ PSB_PROBE: 'v\u00e4l \u2603' }),
    rules: h.rules({ writeRoots: [cwd], tmp: 'none' }),
  });
  assert.equal(exit.code, 0);
  const facts = h.parseReport(stdout);
  assert.equal(facts.env, 'v\u00e4l \u2603');
  assert.equal(facts.cwd.toLowerCase(), cwd.toLowerCase());
});

test('network none: dead proxy variables are set and the report says not enforced', { timeout: 60000 }, async () => {
  const { child, stdout } = await h.runBackend({
    file: h.cmdExe,
    argv: ['cmd.exe', '/c', 'echo %HTTPS_PROXY%'],
    env: h.baseEnv({ https_proxy: 'http://real-proxy:3128' }),
    rules: h.rules({ network: { kind: 'none' }, degraded: true }), // refused without degraded on Windows
  });
  assert.equal(stdout.trim(), 'http://127.0.0.1:9');
  assert.equal(child.enforcement.guarantees.network, 'not-enforced');
  assert.ok(child.enforcement.gaps.some((g) => g.startsWith('network:')));
});

test('a private tmp is created for the run, given to the child, and removed afterwards', { timeout: 60000 }, async () => {
  const { stdout, exit } = await h.runBackend({
    file: h.cmdExe,
    argv: ['cmd.exe', '/c', 'echo %TEMP%'],
    rules: h.rules({ tmp: 'private' }),
  });
  assert.equal(exit.code, 0);
  const dir = stdout.trim();
  assert.ok(dir.toLowerCase().startsWith(path.join(h.stateDir, 'tmp').toLowerCase()), dir);
  assert.equal(fs.existsSync(dir), false);
});

test("tmp 'host' on a read-only run: a temporary grant on the host temp dir, revoked afterwards", { timeout: 60000 }, async () => {
  const { exit, child } = await h.runBackend({ file: h.cmdExe, argv: ['cmd.exe', '/c', 'exit 0'], rules: h.rules({ tmp: 'host' }) });
  assert.equal(exit.code, 0);
  assert.equal(child.enforcement.mechanisms.capabilitySids, 1);
});

test("tmp 'host' grant is gone after the run", { skip: h.NEEDS_REAL_WINDOWS, timeout: 60000 }, async () => {
  const os = require('node:os');
  const before = h.native.winAclSddl(os.tmpdir());
  await h.runBackend({ file: h.cmdExe, argv: ['cmd.exe', '/c', 'exit 0'], rules: h.rules({ tmp: 'host' }) });
  assert.equal(h.native.winAclSddl(os.tmpdir()), before);
});

test('writable roots get a persisted capability SID, reused on the next run', { timeout: 60000 }, async () => {
  const ws = h.tmpDir('ws');
  const r = h.rules({ writeRoots: [ws], tmp: 'none' });
  await h.runBackend({ file: h.cmdExe, argv: ['cmd.exe', '/c', 'exit 0'], rules: r });
  const file = path.join(h.stateDir, 'capabilities.json');
  const first = JSON.parse(fs.readFileSync(file, 'utf8')).roots[ws.toLowerCase()];
  assert.match(first, /^S-1-5-21-\d+-\d+-\d+-\d+$/);
  await h.runBackend({ file: h.cmdExe, argv: ['cmd.exe', '/c', 'exit 0'], rules: r });
  assert.equal(JSON.parse(fs.readFileSync(file, 'utf8')).roots[ws.toLowerCase()], first);
});

// ---- refusals (nothing is spawned) ------------------------------------------------------------

function refuses(rulesOver, code, re) {
  assert.throws(
    () => h.backend.spawn({ file: h.cmdExe, argv: ['cmd.exe'], env: h.baseEnv(), cwd: process.cwd(), stdio: ['ignore', 'ignore', 'ignore'], rules: h.rules(rulesOver) }),
    (e) => e instanceof h.SandboxError && e.code === code && re.test(e.message),
  );
}

test('deny-read, a managed proxy and a read-restricted policy are refused', () => {
  refuses({ denyRead: ['C:\\secret'] }, 'EUNSUPPORTED_POLICY', /deny-read/);
  refuses({ network: { kind: 'proxy', proxy: { allow: ['example.com'] } } }, 'ENETWORK_NOT_ENFORCEABLE', /managed networking/);
  refuses({ readAll: false, readRoots: ['C:\\x'], degraded: false }, 'EUNSUPPORTED_POLICY', /read-restricted/);
});

test('network none without degraded is refused on every Windows host (fail closed), and nothing runs', { timeout: 60000 }, async () => {
  const marker = require('node:path').join(h.tmpDir('net'), 'ran.txt');
  assert.throws(
    () => h.backend.spawn({ file: h.cmdExe, argv: ['cmd.exe', '/c', `echo x> "${marker}"`], env: h.baseEnv(), cwd: process.cwd(), stdio: ['ignore', 'ignore', 'ignore'], rules: h.rules({ network: { kind: 'none' }, degraded: false }) }),
    (e) => e instanceof h.SandboxError && e.code === 'ENETWORK_NOT_ENFORCEABLE' && /elevated Windows sandbox backend/.test(e.message) && /degraded: true/.test(e.message),
  );
  assert.equal(fs.existsSync(marker), false, 'the refused command did not run');
});

test('under wine, a sandboxed run without degraded is refused (wine enforces nothing)', { skip: h.wine ? false : 'only meaningful under wine' }, () => {
  refuses({ degraded: false }, 'ENOT_ENFORCED', /wine/);
});

test('windowsSandboxLevel: elevated and mxc are refused precisely', () => {
  assert.deepEqual(h.win32.mapWindowsSandboxLevel('restricted-token'), { sandboxed: true, mode: 'restricted-token' });
  assert.throws(() => h.win32.mapWindowsSandboxLevel('elevated'), (e) => e.code === 'ENOT_ENFORCED' && /elevated/.test(e.message));
  assert.throws(() => h.win32.mapWindowsSandboxLevel('mxc'), (e) => e.code === 'ENOT_ENFORCED' && /MXC/.test(e.message));
});

// ---- error paths ------------------------------------------------------------------------------

for (const sandboxed of [false, true]) {
  const label = sandboxed ? 'sandboxed' : 'plain';
  test(`${label}: a missing executable fails with ENOT_FOUND`, () => {
    const missing = path.join(h.tmpDir('nf'), 'no-such-program.exe');
    assert.throws(
      () => h.backend.spawn({ file: missing, argv: [missing], env: h.baseEnv(), cwd: process.cwd(), stdio: ['pipe', 'pipe', 'pipe'], rules: sandboxed ? h.rules() : null }),
      (e) => e instanceof h.SandboxError && e.code === 'ENOT_FOUND' && e.message.includes('no-such-program.exe'),
    );
  });
  test(`${label}: a cwd that does not exist fails with EINVALID_ARGUMENT`, () => {
    const cwd = path.join(h.tmpDir('cwd'), 'gone');
    assert.throws(
      () => h.backend.spawn({ file: h.cmdExe, argv: ['cmd.exe'], env: h.baseEnv(), cwd, stdio: ['pipe', 'pipe', 'pipe'], rules: sandboxed ? h.rules() : null }),
      (e) => e.code === 'EINVALID_ARGUMENT' && /cwd/.test(e.message) && e.winError > 0,
    );
  });
}

test('a NUL in an argument is refused, by the backend and by the addon itself', () => {
  assert.throws(
    () => h.backend.spawn({ file: h.cmdExe, argv: ['cmd.exe', '/c', 'echo a\0b'], env: h.baseEnv(), cwd: process.cwd(), stdio: ['ignore', 'ignore', 'ignore'], rules: null }),
    (e) => e.code === 'EINVALID_ARGUMENT' && /argv\[2\] contains a NUL byte/.test(e.message),
  );
  assert.throws(
    () => h.native.winSpawn({ file: h.cmdExe, commandLine: 'cmd.exe /c echo a\0b', env: [], cwd: process.cwd(), stdio: ['ignore', 'ignore', 'ignore'], sandboxed: false }, () => {}),
    (e) => e.code === 'EINVALID_ARGUMENT' && /commandLine contains a NUL byte/.test(e.message),
  );
});

// ---- isolation: needs a kernel that enforces the token (real Windows) -------------------------

test('isolation: a write outside the writable roots is denied, inside is allowed', { skip: h.NEEDS_REAL_WINDOWS, timeout: 60000 }, async () => {
  const ws = h.tmpDir('iso-ws');
  const outside = h.tmpDir('iso-out');
  const r = h.rules({ writeRoots: [ws], tmp: 'none' });
  const write = async (target, rulesOrNull) =>
    (await h.runBackend({ file: h.probeChild, argv: [h.probeChild, 'write', target], rules: rulesOrNull })).exit.code;
  assert.equal(await write(path.join(outside, 'control.txt'), null), 0, 'control: unsandboxed write outside is allowed');
  assert.equal(await write(path.join(ws, 'inside.txt'), r), 0, 'control: sandboxed write inside is allowed');
  assert.equal(await write(path.join(outside, 'denied.txt'), r), 3, 'sandboxed write outside is denied');
  assert.equal(fs.existsSync(path.join(outside, 'denied.txt')), false);
});

test('isolation: a protected path inside a writable root stays read-only', { skip: h.NEEDS_REAL_WINDOWS, timeout: 60000 }, async () => {
  const ws = h.tmpDir('iso-prot');
  const hooks = path.join(ws, '.git', 'hooks');
  fs.mkdirSync(hooks, { recursive: true });
  const r = h.rules({ writeRoots: [ws], readOnly: [hooks], tmp: 'none' });
  const write = async (target) =>
    (await h.runBackend({ file: h.probeChild, argv: [h.probeChild, 'write', target], rules: r })).exit.code;
  assert.equal(await write(path.join(ws, '.git', 'index.lock')), 0, 'control: the rest of .git is writable');
  assert.equal(await write(path.join(hooks, 'pre-commit')), 3, 'the protected path is read-only');
});

test('isolation: the child runs with a restricted token', { skip: h.NEEDS_REAL_WINDOWS, timeout: 60000 }, async () => {
  const plain = await h.runBackend({ file: h.probeChild, argv: [h.probeChild, 'report', '0'], rules: null });
  assert.equal(h.parseReport(plain.stdout).restricted, '0', 'control: plain runs are not restricted');
  const boxed = await h.runBackend({ file: h.probeChild, argv: [h.probeChild, 'report', '0'], rules: h.rules() });
  assert.equal(h.parseReport(boxed.stdout).restricted, '1');
});
