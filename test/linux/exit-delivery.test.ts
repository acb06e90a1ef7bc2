/**
 * The host outlives its sandboxes, also when its own code throws while an exit is delivered.
 *
 * A sandbox's exit reaches JS from a libuv callback in the addon (binding_linux.cc, ChildWatch::
 * Deliver), which then runs the ticks and microtasks that exit released: the host's code after
 * `await proc.exited`. There, a spawn of a missing program has its 'error' event emitted from a
 * tick, and with no 'error' listener that throws (as for child_process). The exception came back
 * into the addon as a C++ exception, escaped the libuv callback, and aborted the host
 * ("terminate called after throwing an instance of 'Napi::Error'") instead of reaching its
 * 'uncaughtException' handler. Each case runs in a child node process (a crash must not take the
 * test runner with it) and checks how that process ended and what it printed.
 *
 *   EXIT-01 after two spawns of one shape (a spare is then made), a missing program spawned
 *           from the code after `await exited`, and a throwing tick there: both reach the host's
 *           'uncaughtException' handler, and the host spawns on and exits 0
 *   EXIT-02 without a handler, the same error ends the host as Node ends it for its own uncaught
 *           exceptions (exit code 1, the error printed), never by an abort
 *   EXIT-03 control: with an 'error' listener, nothing is uncaught at all
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { MODES, modePolicy } from '../helpers/capabilities';
import { hostScript, makeScene, NODE, type Scene } from '../helpers/sandbox';

const HOST = String.raw`
const [policy, handler, listen] = [JSON.parse(process.argv[2]), process.argv[3] === 'handler', process.argv[4] === 'listen'];
const env = { PATH: '/usr/bin:/bin' };
const uncaught = [];
if (handler) process.on('uncaughtException', (e) => uncaught.push(e.code ?? e.message));
(async () => {
  const codes = [];
  for (let i = 0; i < 2; i++) codes.push((await lib.spawn('/bin/true', [], { env, policy, cwd: process.argv[5] }).exited).code);
  // Runs inside the second exit's delivery (its ticks and microtasks).
  const rejected = [];
  for (const file of ['/nonexistent/psb-program', process.argv[6]]) {
    const p = lib.spawn(file, [], { env, policy, cwd: process.argv[5] });
    if (listen) p.on('error', () => {});
    await p.exited.catch((e) => rejected.push(e.code));
  }
  const p = lib.spawn('/bin/true', [], { env, policy });
  codes.push((await p.exited).code);
  if (handler) process.nextTick(() => { throw new Error('tick after exit'); });
  const r = await lib.run('/bin/echo', ['still spawning'], { env, policy });
  console.log(JSON.stringify({ codes, rejected, uncaught, out: r.stdout.trim() }));
})();
`;

describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
  let scene: Scene;
  let script: string;
  let notExec: string;
  beforeAll(() => {
    if (skip) return;
    scene = makeScene('exit');
    script = hostScript(scene.root, 'exit-host.js', HOST);
    notExec = `${scene.ws}/plain.txt`;
    fs.writeFileSync(notExec, 'echo hi\n', { mode: 0o644 });
  });
  afterAll(() => scene?.cleanup());
  const host = (handler: boolean, listen: boolean) => {
    const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
    const args = [script, JSON.stringify(policy), handler ? 'handler' : '-', listen ? 'listen' : '-', scene.ws, notExec];
    return spawnSync(NODE, args, { encoding: 'utf8', timeout: 120_000 });
  };

  it.skipIf(skip)("EXIT-01: errors thrown while an exit is delivered reach the host's uncaughtException handler; the host lives on", () => {
    const r = host(true, false);
    expect(r.stderr).not.toMatch(/terminate called|Napi::Error/);
    expect({ status: r.status, signal: r.signal }, r.stderr).toEqual({ status: 0, signal: null });
    expect(JSON.parse(r.stdout)).toEqual({
      codes: [0, 0, 0],
      rejected: ['ENOT_FOUND', 'ENOT_EXECUTABLE'],
      uncaught: ['ENOT_FOUND', 'ENOT_EXECUTABLE', 'tick after exit'],
      out: 'still spawning',
    });
  });

  it.skipIf(skip)('EXIT-02: with no handler, the host ends as Node ends it for an uncaught error (exit 1, printed), not by an abort', () => {
    const r = host(false, false);
    expect(r.signal, r.stderr).toBeNull();
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/SandboxError: command not found: \/nonexistent\/psb-program/);
    expect(r.stderr).not.toMatch(/terminate called|Napi::Error/);
    expect(r.stdout).toBe('');
  });

  it.skipIf(skip)("EXIT-03: control: with an 'error' listener nothing is uncaught, and the run goes to the end", () => {
    const r = host(false, true);
    expect({ status: r.status, signal: r.signal }, r.stderr).toEqual({ status: 0, signal: null });
    expect(JSON.parse(r.stdout)).toEqual({ codes: [0, 0, 0], rejected: ['ENOT_FOUND', 'ENOT_EXECUTABLE'], uncaught: [], out: 'still spawning' });
  });
});
