'use strict';
// End to end through the public API (dist/index.js: spawn, run, probe), which picks the Windows
// backend by process.platform and loads the addon through node-gyp-build (PREBUILDS_ONLY=1).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');

const api = require(path.join(h.root, 'dist', 'index.js'));
const degraded = h.wine !== null;

test('probe() through the public API reports the restricted-token backend', () => {
  const p = api.probe();
  assert.equal(p.platform, 'win32');
  assert.equal(p.addonLoaded, true, p.addonError);
  assert.equal(p.defaultMode, 'restricted-token');
});

test('run(): a workspace-write policy runs cmd.exe and reports the enforcement', { timeout: 60000 }, async () => {
  const ws = h.tmpDir('api-ws');
  const r = await api.run(h.cmdExe, ['/c', 'echo', 'api-ok'], {
    cwd: ws,
    env: h.baseEnv(),
    policy: { degraded: true, filesystem: { write: [ws] }, network: 'none' }, // network none needs degraded on Windows
  });
  assert.equal(r.stdout.trim(), 'api-ok');
  assert.equal(r.code, 0);
  assert.equal(r.enforcement.mode, 'restricted-token');
  assert.equal(r.enforcement.guarantees.network, 'not-enforced');
});

test('run() with policy: null runs plainly', { timeout: 60000 }, async () => {
  const r = await api.run(h.cmdExe, ['/c', 'echo', 'plain-ok'], { env: h.baseEnv(), policy: null });
  assert.equal(r.stdout.trim(), 'plain-ok');
  assert.equal(r.enforcement.sandboxed, false);
});

test('spawn(): stdin, stdout, stderr and the exit code through SandboxedProcess', { timeout: 60000 }, async () => {
  const ws = h.tmpDir('api-spawn');
  const child = api.spawn(h.probeChild, ['report', '9'], {
    cwd: ws,
    env: h.baseEnv({ PSB_PROBE: 'api' }),
    policy: { degraded, filesystem: { write: [ws] }, network: 'full' },
  });
  const out = h.collect(child.stdout);
  const err = h.collect(child.stderr);
  child.stdin.end('hello api');
  const [code, stdout, stderr] = await Promise.all([
    new Promise((resolve) => child.once('close', (c) => resolve(c))),
    out,
    err,
  ]);
  assert.equal(code, 9);
  const facts = h.parseReport(stdout);
  assert.equal(facts.in, 'hello api');
  assert.equal(facts.env, 'api');
  assert.equal(facts.injob, '1');
  assert.match(facts.desktop, /^process-sandbox-/);
  assert.equal(stderr.trim(), 'err-line');
});

test('run() timeout kills the job', { timeout: 60000 }, async () => {
  const r = await api.run(h.probeChild, ['sleep', '600000'], {
    env: h.baseEnv(),
    timeout: 300,
    policy: { degraded, network: 'full' },
  });
  assert.equal(r.timedOut, true);
});

test('the default policy (network none) is refused on Windows unless degraded', () => {
  assert.throws(
    () => api.spawn(h.cmdExe, ['/c', 'echo', 'x'], { env: h.baseEnv() }),
    (e) => e.code === 'ENETWORK_NOT_ENFORCEABLE' && /degraded: true/.test(e.message),
  );
});

test('under wine, a policy without degraded is refused rather than run unenforced', { skip: h.wine ? false : 'only meaningful under wine' }, () => {
  assert.throws(
    () => api.spawn(h.cmdExe, ['/c', 'echo', 'x'], { env: h.baseEnv(), policy: { network: 'full' } }),
    (e) => e.code === 'ENOT_ENFORCED' && /wine/.test(e.message),
  );
});

test('deny-read is refused, not ignored', () => {
  const secret = h.tmpDir('api-secret');
  fs.writeFileSync(path.join(secret, 'key'), 'k');
  assert.throws(
    () => api.spawn(h.cmdExe, ['/c', 'echo', 'x'], { env: h.baseEnv(), policy: { degraded, filesystem: { denyRead: [secret] } } }),
    (e) => e.code === 'EUNSUPPORTED_POLICY' && /deny-read/.test(e.message),
  );
});
