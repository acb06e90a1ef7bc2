/**
 * Landlock mode's supervisor (native/linux/supervisor/supervisor.cc) answers on a thread of its own: a
 * command's supervised calls (here chmod and utime, the metadata class) are answered while the
 * host's JS thread is blocked and never returns to its event loop. Before, the listener was
 * polled on that loop, so every such call waited for the JS thread. Checked from outside: the
 * file's mode and mtime really changed, and the command went on to its next step meanwhile.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { spawn } from '../../lib/index';
import { caps, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, makeScene, type Scene } from '../helpers/sandbox';

const skip = !caps.linux
  ? 'not Linux'
  : !caps.landlock
    ? 'Landlock mode needs Landlock (ABI >= 1) and seccomp'
    : !caps.metadataSupervisor
      ? 'this kernel has no seccomp user notification with ADDFD: no metadata supervisor'
      : undefined;
// eslint-disable-next-line no-console
if (skip) console.warn(`[supervisor-thread] SKIPPING: ${skip}`);

/** Blocks this thread (no event loop turn) until `cond` holds or `ms` have passed. */
function blockUntil(cond: () => boolean, ms: number): boolean {
  const end = Date.now() + ms;
  const cell = new Int32Array(new SharedArrayBuffer(4));
  while (Date.now() < end) {
    if (cond()) return true;
    Atomics.wait(cell, 0, 0, 20);
  }
  return cond();
}

describe.skipIf(skip)('Landlock-mode supervisor thread', () => {
  let scene: Scene;
  beforeEach(() => {
    scene = makeScene('sup-thread');
  });
  afterEach(() => scene.cleanup());

  it("answers the command's metadata calls while the host's JS thread is blocked", async () => {
    const f = path.join(scene.ws, 'f');
    fs.writeFileSync(f, 'data');
    fs.chmodSync(f, 0o644);
    const script = ': > ready; while [ ! -e go ]; do sleep 0.05; done; chmod 600 f && touch -m -d @1000000000 f && : > done';
    const child = spawn('/bin/sh', ['-c', script], {
      cwd: scene.ws,
      env: BASE_ENV,
      stdio: 'ignore',
      policy: modePolicy('landlock', { filesystem: { write: [scene.ws] } }),
    });
    // The command runs (its first step needs no supervisor) before the JS thread blocks.
    const started = Date.now();
    while (!fs.existsSync(path.join(scene.ws, 'ready')) && Date.now() - started < 30_000) await new Promise((r) => setTimeout(r, 20));
    expect(fs.existsSync(path.join(scene.ws, 'ready'))).toBe(true);
    fs.writeFileSync(path.join(scene.ws, 'go'), '');
    // From here until `done` shows up the event loop does not turn.
    const done = blockUntil(() => fs.existsSync(path.join(scene.ws, 'done')), 30_000);
    const st = fs.statSync(f);
    const exit = await child.exited;
    expect(done).toBe(true);
    expect(st.mode & 0o7777).toBe(0o600);
    expect(st.mtimeMs).toBe(1_000_000_000_000);
    expect(exit.code).toBe(0);
  }, 90_000);
});
