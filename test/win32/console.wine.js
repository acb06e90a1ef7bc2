'use strict';
// Console handles: a sandboxed child must never get the user's console. 'inherit' (the
// CLI's choice) and fds that are a console become pipes that the backend forwards to and from the
// host's streams; the addon itself refuses a console handle for a sandboxed spawn as a backstop.
// Wine gives a headless node.exe no console at all, so the wine tests make the backend believe an fd
// is a console (isConsole) and forward into PassThrough streams; the real-console check needs
// real Windows (a console window from `start`).
const test = require('node:test');
const assert = require('node:assert/strict');
const cp = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { PassThrough } = require('node:stream');
const h = require('./helpers');

function fakeConsoleBackend(isConsole) {
  const host = [new PassThrough(), new PassThrough(), new PassThrough()];
  const backend = h.win32.createWin32Backend(h.native, { stateDir: h.stateDir, isConsole, hostStdio: () => host });
  return { backend, host, out: h.collect(host[1]), err: h.collect(host[2]) };
}

function parseHandles(text) {
  const r = {};
  for (const m of text.matchAll(/h(\d):type=(\d+),console=(\d)/g)) r[m[1]] = { type: Number(m[2]), console: m[3] === '1' };
  return r;
}

test("sandboxed, stdio 'inherit' of a console: the child gets pipes, output and input are forwarded, exit comes after the output", { timeout: 60000 }, async () => {
  const f = fakeConsoleBackend(() => true);
  const child = f.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'handles'], env: h.baseEnv(), cwd: process.cwd(), stdio: ['inherit', 'inherit', 'inherit'], rules: h.rules() });
  assert.deepEqual(child.stdio, [null, null, null], "'inherit' gives the caller no streams");
  assert.deepEqual(child.enforcement.mechanisms.consoleForwardedThroughPipes, [0, 1, 2]);
  f.host[0].end();
  const exit = await child.exited;
  assert.equal(exit.code, 0);
  // Ended already: the exit was reported only after the forwarded output was complete.
  f.host[1].end();
  f.host[2].end();
  const handles = parseHandles(await f.out);
  for (const i of ['0', '1', '2']) assert.deepEqual(handles[i], { type: 3, console: false }, `std handle ${i} is a pipe`);
  assert.match(await f.err, /stderr-forwarded/);
});

test('sandboxed: console input is forwarded to the child through the pipe', { timeout: 60000 }, async () => {
  const f = fakeConsoleBackend(() => true);
  const child = f.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'report', '0'], env: h.baseEnv(), cwd: process.cwd(), stdio: ['inherit', 'inherit', 'inherit'], rules: h.rules() });
  f.host[0].end('typed by the user');
  await child.exited;
  f.host[1].end();
  f.host[2].end();
  assert.equal(h.parseReport(await f.out).in, 'typed by the user');
});

test('control: an fd that is not a console is handed over as it is (the child writes straight into the file)', { timeout: 60000 }, async () => {
  const dir = h.tmpDir('con');
  const file = path.join(dir, 'out.txt');
  for (const consoleFd of [false, true]) {
    const fd = fs.openSync(file, 'w');
    const f = fakeConsoleBackend((x) => consoleFd && x === fd);
    const child = f.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'handles'], env: h.baseEnv(), cwd: dir, stdio: ['ignore', fd, 'ignore'], rules: h.rules() });
    await child.exited;
    fs.closeSync(fd);
    f.host[1].end();
    const forwarded = await f.out;
    if (consoleFd) {
      assert.deepEqual(parseHandles(forwarded)['1'], { type: 3, console: false }, 'a console fd becomes a forwarded pipe');
      assert.equal(fs.readFileSync(file, 'utf8'), '');
    } else {
      assert.deepEqual(parseHandles(fs.readFileSync(file, 'utf8'))['1'], { type: 1, console: false }, 'a file stays a file');
      assert.equal(forwarded, '');
    }
  }
});

test('plain runs (policy: null) keep the caller\'s handles: no forwarding', { timeout: 60000 }, async () => {
  const f = fakeConsoleBackend(() => true);
  const child = f.backend.spawn({ file: h.probeChild, argv: [h.probeChild, 'sleep', '1'], env: h.baseEnv(), cwd: process.cwd(), stdio: ['ignore', 'ignore', 'ignore'], rules: null });
  await child.exited;
  assert.equal(child.enforcement.mechanisms.consoleForwardedThroughPipes, undefined);
});

const NO_CONSOLE = h.wine ? `needs real Windows: wine ${h.wine} gives a headless node.exe no console` : false;

test('real console: a sandboxed child started with stdio inherit from a console window sees no console handle', { skip: NO_CONSOLE, timeout: 120000 }, () => {
  const dir = h.tmpDir('realcon');
  const report = path.join(dir, 'handles.txt');
  const result = path.join(dir, 'result.json');
  const script = path.join(dir, 'host.js');
  fs.writeFileSync(
    script,
    `'use strict';
const fs = require('fs');
const api = require(${JSON.stringify(path.join(h.root, 'dist', 'index.js'))});
const native = require(${JSON.stringify(h.addonPath)});
native.setErrorClass(require(${JSON.stringify(path.join(h.root, 'dist', 'errors.js'))}).SandboxError);
const res = { stdinIsTTY: !!process.stdin.isTTY };
// The backstop: the addon refuses a console handle for a sandboxed spawn.
try {
  native.winSpawn({ file: ${JSON.stringify(h.probeChild)}, commandLine: 'probe handles', env: [], cwd: process.cwd(), stdio: [0, 'ignore', 'ignore'], sandboxed: true, capabilitySids: [], job: {} }, () => {});
  res.backstop = 'spawned';
} catch (e) { res.backstop = e.code; }
const child = api.spawn(${JSON.stringify(h.probeChild)}, ['handles', ${JSON.stringify(report)}], { stdio: 'inherit', policy: { network: 'full' } });
child.on('close', (code) => { res.code = code; fs.writeFileSync(${JSON.stringify(result)}, JSON.stringify(res)); process.exit(0); });
`,
  );
  // `start` opens a new console window, so the host's stdin/stdout really are a console.
  cp.spawnSync(h.cmdExe, ['/c', 'start', '/wait', '""', process.execPath, script], { stdio: 'ignore', timeout: 100000 });
  const res = JSON.parse(fs.readFileSync(result, 'utf8'));
  assert.equal(res.stdinIsTTY, true, 'the host ran with a console (otherwise this test proves nothing)');
  assert.equal(res.backstop, 'EINVALID_ARGUMENT');
  assert.equal(res.code, 0);
  const handles = parseHandles(fs.readFileSync(report, 'utf8'));
  for (const i of ['0', '1', '2']) assert.equal(handles[i].console, false, `std handle ${i} is not the console`);
});
