/**
 * Landlock mode's supervision is per sandbox (native/linux/supervisor/supervisor.cc, Confinement): what one
 * sandbox's supervision holds (waiter threads, fds) counts against that sandbox's own share and
 * its own fd table, never the host's; and supervision that goes away mid-run (the Worker that
 * spawned the sandbox is terminated) takes nothing of the host with it.
 *
 * Each case runs in a host process of its own (a plain node script on the built package): the
 * fd case lowers that host's RLIMIT_NOFILE, and a crash must not take the test runner down.
 * Isolated mode has no supervisor in the host: the same scripts are its control.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { caps, MODES } from '../helpers/capabilities';
import { buildPtraceFilter } from '../helpers/ptrace-filter';
import { DIST_INDEX, hostScript, makeScene, NODE, type Scene } from '../helpers/sandbox';

const landlockSkip = caps.metadataSupervisor ? undefined : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode has no supervisors';
// eslint-disable-next-line no-console
if (landlockSkip) console.warn(`[supervisor-budget] SKIPPING the Landlock-mode cases: ${landlockSkip}`);

// Shared by the host scripts: the policy of the mode (the .git/hooks carve-out puts every
// write-open through Landlock mode's path supervisor), and counts of the host's own state.
const COMMON = `
const fs = require('fs');
const [mode, ws] = process.argv.slice(2);
const policy = { mode, ...(mode === 'landlock' ? { degraded: true } : {}), filesystem: { write: [ws] } };
const env = { PATH: '/usr/bin:/bin' };
const fdCount = () => fs.readdirSync('/proc/self/fd').length;
// The supervision's threads: the host's, and (by default) the supervision process's.
const native = require(${JSON.stringify(path.join(path.dirname(DIST_INDEX), 'native.js'))}).loadLinuxNative();
const taskDirs = () => { const p = native.supervisionProcess(); return ['/proc/self/task', ...(p > 0 ? ['/proc/' + p + '/task'] : [])]; };
const threads = (name) => taskDirs().reduce((n, d) => { let ts = []; try { ts = fs.readdirSync(d); } catch {} return n + ts.filter((t) => {
  try { return fs.readFileSync(d + '/' + t + '/comm', 'utf8').trim() === name; } catch { return false; }
}).length; }, 0);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(cond, ms = 60000) { for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) if (cond()) return true; return cond(); }
// A sandbox of the same host running a FIFO pipeline (its writer waits for the reader).
const pipeline = (dir) => lib.run('/bin/sh', ['-c', 'mkfifo p && (echo hi > p &) && cat p && rm p'], { cwd: dir, policy, env, timeout: 30000 })
  .then((r) => ({ code: r.code, stdout: r.stdout, timedOut: r.timedOut }), (e) => ({ error: String(e) }));
// The host's own opens.
function hostOpens(n) {
  const held = [];
  try { for (let i = 0; i < n; i++) held.push(fs.openSync('/dev/null', 'r')); } catch (e) { return e.code; } finally { for (const fd of held) fs.closeSync(fd); }
  return n;
}
`;

// Sandboxes A1 and A2 each park 64 FIFO writers (the per-sandbox share of waiters: each waiter
// holds the FIFO and a copy of the listener), far over the host's RLIMIT_NOFILE (200) together.
const BUDGET = `${COMMON}
(async () => {
  for (const d of ['a1', 'a2', 'b']) fs.mkdirSync(ws + '/' + d, { recursive: true });
  const before = fdCount();
  const park = 'for i in $(seq 64); do mkfifo f$i; (echo x > f$i) & done; sleep 600';
  const as = ['a1', 'a2'].map((d) => lib.spawn('/bin/sh', ['-c', park], { cwd: ws + '/' + d, policy, env, stdio: 'ignore' }));
  // Landlock mode: the waiters are host threads; isolated mode: the writers block in the kernel.
  const parked = mode === 'landlock' ? await until(() => threads('psb-fifo-write') >= 128) : true;
  const out = { parked, waiters: threads('psb-fifo-write'), grown: fdCount() - before, opens: hostOpens(40), b: await pipeline(ws + '/b') };
  for (const a of as) a.kill();
  await Promise.all(as.map((a) => a.exited.catch(() => {})));
  console.log(JSON.stringify(out));
})().catch((e) => console.log(JSON.stringify({ error: String(e && e.stack) })));
`;

// A Worker spawns a sandbox whose command parks in a supervised call (a FIFO write-open waiting
// for a reader); the main thread terminates the Worker while the call waits.
const KILL = `${COMMON}
const { Worker, isMainThread, parentPort } = require('worker_threads');
if (!isMainThread) {
  const c = lib.spawn('/bin/sh', ['-c', 'mkfifo f && echo started > started.txt && echo secret > f; echo "done $?" > after.txt'], { cwd: ws + '/w', policy, env, stdio: 'ignore' });
  parentPort.postMessage(c.pid);
} else (async () => {
  fs.mkdirSync(ws + '/w', { recursive: true });
  fs.mkdirSync(ws + '/m', { recursive: true });
  const w = new Worker(__filename, { argv: [mode, ws] });
  const pid = await new Promise((r) => w.once('message', r));
  const waiting = await until(() => fs.existsSync(ws + '/w/started.txt') && (mode !== 'landlock' || threads('psb-fifo-write') === 1));
  await w.terminate();
  const alive = () => { try { process.kill(pid, 0); return true; } catch { return false; } };
  const gone = await until(() => !alive() && threads('psb-supervisor') === 0 && threads('psb-sup-waiter') === 0 && threads('psb-fifo-write') === 0);
  // Nothing was written into the FIFO: the parked open never went through (a reader that
  // opens it now without blocking reads end-of-file at once).
  let reader;
  try { const fd = fs.openSync(ws + '/w/f', fs.constants.O_RDONLY | fs.constants.O_NONBLOCK); reader = fs.readFileSync(fd, 'utf8'); fs.closeSync(fd); } catch (e) { reader = e.code; }
  const out = { waiting, gone, reader, after: fs.existsSync(ws + '/w/after.txt'), later: await pipeline(ws + '/m'), opens: hostOpens(40) };
  console.log(JSON.stringify(out));
})().catch((e) => console.log(JSON.stringify({ error: String(e && e.stack) })));
`;

// filter: run the host under a container runtime's seccomp profile (unshare refused: the
// supervision takes its sibling task, supervisor.cc).
function runHost(script: string, mode: string, ws: string, nofile: number | undefined, filter: string | undefined): Record<string, unknown> {
  const argv = [...(filter ? [filter] : []), NODE, script, mode, ws];
  const r = spawnSync('/bin/sh', ['-c', `${nofile ? `ulimit -n ${nofile} && ` : ''}exec "$0" "$@"`, ...argv], { encoding: 'utf8', timeout: 200_000 });
  const last = r.stdout.trim().split('\n').pop() ?? '';
  expect(r.signal, `host died: ${r.stderr}`).toBeNull();
  expect(last.startsWith('{'), `host printed no result (code ${r.status}): ${r.stdout}\n${r.stderr}`).toBe(true);
  return JSON.parse(last) as Record<string, unknown>;
}

const ccSkip = caps.cc ? undefined : 'no C compiler for the container-profile filter (test/fixtures/ptrace_filter.c)';
const HOSTS = [
  { host: 'plain host', filtered: false },
  { host: "host under a container runtime's seccomp profile", filtered: true },
];

describe.runIf(caps.linux)("each sandbox's supervision has budgets of its own", () => {
  let filter: string | undefined;
  beforeAll(() => {
    if (!ccSkip) filter = buildPtraceFilter();
  });
  afterAll(() => {
    if (filter) fs.rmSync(path.dirname(filter), { recursive: true, force: true });
  });

  describe.each(MODES.flatMap((m) => HOSTS.map((h) => ({ ...m, ...h }))))('$name mode, $host', ({ name: mode, skip, filtered }) => {
    const s =
      skip ?? (mode === 'landlock' ? landlockSkip : undefined) ?? (filtered ? (ccSkip ?? (mode === 'isolated' ? 'isolated mode needs unshare: no case' : undefined)) : undefined);
    let scene: Scene;
    beforeEach(() => {
      scene = makeScene(`budget-${mode}`);
      fs.mkdirSync(path.join(scene.ws, '.git', 'hooks'), { recursive: true });
    });
    afterEach(() => scene.cleanup());

    it.skipIf(s)("two sandboxes' parked FIFO writers, over the host's fd limit together, leave its fds and another sandbox's pipeline alone", () => {
      const out = runHost(hostScript(scene.root, 'budget.js', BUDGET), mode, scene.ws, 200, filtered ? filter : undefined);
      expect(out.error, JSON.stringify(out)).toBeUndefined();
      expect(out.parked, JSON.stringify(out)).toBe(true);
      if (mode === 'landlock') expect(out.waiters).toBe(128);
      // The supervision's fds are in its own tables: the host's grew by what the two spawns
      // themselves hold (pipes, pidfds), not by 2 per waiter (256).
      expect(out.grown as number, JSON.stringify(out)).toBeLessThan(32);
      expect(out.opens).toBe(40);
      expect(out.b).toEqual({ code: 0, stdout: 'hi\n', timedOut: false });
    }, 240_000);

    it.skipIf(s)('terminating the Worker that spawned a sandbox mid-call ends its supervision closed; the host and its later spawns work', () => {
      const out = runHost(hostScript(scene.root, 'kill.js', KILL), mode, scene.ws, undefined, filtered ? filter : undefined);
      expect(out.error, JSON.stringify(out)).toBeUndefined();
      expect(out.waiting, JSON.stringify(out)).toBe(true);
      // The command and (Landlock mode) the supervisor and its waiter are gone.
      expect(out.gone, JSON.stringify(out)).toBe(true);
      // The parked write-open never went through: no writer holds the FIFO, nothing was written,
      // and the command did not go on past it.
      expect(out.reader).toBe('');
      expect(out.after).toBe(false);
      expect(out.later).toEqual({ code: 0, stdout: 'hi\n', timedOut: false });
      // (The host's fd count is not compared here: a terminated Worker leaves some of its own.)
      expect(out.opens).toBe(40);
    }, 240_000);
  });
});
