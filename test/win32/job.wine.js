'use strict';
// Job objects: kill-on-close, kill() ending the tree, leftovers ended when the command exits.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitDead(pid) {
  while (alive(pid)) await new Promise((r) => setTimeout(r, 50));
}

test('closing a kill-on-close job kills the sleeping child in it', { timeout: 30000 }, async () => {
  let exitCode;
  const exited = new Promise((resolve) => {
    const child = h.native.winSpawn(
      {
        file: h.probeChild,
        commandLine: `"${h.probeChild}" sleep 600000`,
        env: Object.entries(h.baseEnv()),
        cwd: process.cwd(),
        stdio: ['ignore', 'ignore', 'ignore'],
        sandboxed: false,
        job: {},
      },
      (code) => {
        exitCode = code;
        resolve(child);
      },
    );
    assert.ok(child.pid > 0);
    assert.equal(alive(child.pid), true, 'positive control: the child runs before the job is closed');
    h.native.winCloseJob(child.handle);
  });
  const child = await exited;
  h.native.winRelease(child.handle);
  assert.equal(typeof exitCode, 'number');
});

test('kill() terminates the job and exited reports the signal', { timeout: 30000 }, async () => {
  const child = h.backend.spawn({
    file: h.probeChild,
    argv: [h.probeChild, 'sleep', '600000'],
    env: h.baseEnv(),
    cwd: process.cwd(),
    stdio: ['ignore', 'ignore', 'ignore'],
    rules: h.rules(),
  });
  assert.equal(child.kill('SIGTERM'), true);
  const exit = await child.exited;
  assert.deepEqual(exit, { code: null, signal: 'SIGTERM' });
  assert.equal(child.kill('SIGTERM'), false, 'nothing left to kill');
});

test('a grandchild left running is ended when the command exits (job closed)', { timeout: 30000 }, async () => {
  const { exit, stdout } = await h.runBackend({
    file: h.probeChild,
    argv: [h.probeChild, 'spawn-sleep', '600000'],
    rules: h.rules(),
  });
  assert.deepEqual(exit, { code: 0, signal: null });
  const pid = Number(h.parseReport(stdout).grandchild);
  assert.ok(pid > 0, `grandchild pid in ${JSON.stringify(stdout)}`);
  await waitDead(pid); // bounded by the test timeout
  assert.equal(alive(pid), false);
});
