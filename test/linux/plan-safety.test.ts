/**
 * The host must never block or read unbounded data while planning a spawn (host safety).
 * Planning reads git config files and includes from the workspace, which the sandboxed
 * command writes, and takes locks on placeholders, which the command can see.
 *
 * Each attack runs in a separate host process (a hostile workspace could freeze or exhaust the
 * test process itself on old code) that counts setInterval ticks while it plans and runs; the test
 * polls that process's output with a deadline. A frozen host never reports; a host that keeps
 * ticking does. The child runs under `ulimit -v` so an unbounded read ends in a crash, not in the
 * machine running out of memory.
 */
import { execFileSync, spawn as spawnHost } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { run } from '../../lib/index';
import { loadLinuxNative } from '../../lib/native';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, eventually, expectUnchanged, hostScript, makeScene, NODE, probeOps, snapshot, type Scene } from '../helpers/sandbox';

interface HostResult {
  /** The JSON the script printed after `RESULT `, or null when it never did before the deadline. */
  result: Record<string, unknown> | null;
  output: string;
}

/**
 * Runs `body` in a fresh node process with `tick` (a counter bumped every 10 ms) and
 * `report(obj)` in scope. Polls for the report until `deadlineMs`; kills the process after.
 */
async function hostRun(dir: string, body: string, deadlineMs = 30_000): Promise<HostResult> {
  const script = hostScript(
    dir,
    `host-${Math.random().toString(36).slice(2)}.js`,
    `let ticks = 0; const iv = setInterval(() => ticks++, 10);
     const tick = () => ticks;
     const report = (o) => { process.stdout.write('RESULT ' + JSON.stringify(o) + '\\n'); clearInterval(iv); setTimeout(() => process.exit(0), 50); };
     (async () => { ${body} })().catch((e) => report({ thrown: String(e && e.code || e), message: String(e && e.message) }));`,
  );
  const child = spawnHost('/bin/sh', ['-c', `ulimit -v 4000000; exec "${NODE}" "${script}"`], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const done = await eventually(() => output.includes('RESULT ') || child.exitCode !== null, deadlineMs);
  if (!done || child.exitCode === null) child.kill('SIGKILL');
  await new Promise((res) => (child.exitCode !== null || child.signalCode !== null ? res(null) : child.once('exit', res)));
  const line = output.split('\n').find((l) => l.startsWith('RESULT '));
  return { result: line ? (JSON.parse(line.slice(7)) as Record<string, unknown>) : null, output };
}

/** A run that must finish, with the tick counter proving the event loop ran meanwhile. */
const runAndTick = (ws: string, policy: SandboxPolicy) => `
  const before = tick();
  const r = await lib.run('/bin/sh', ['-c', 'echo ran'], { cwd: ${JSON.stringify(ws)}, env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(policy)} });
  // Keep the loop busy a little so ticks can be seen advancing around the run.
  while (tick() < before + 5) await new Promise((r2) => setTimeout(r2, 10));
  report({ stdout: r.stdout, code: r.code, ticks: tick() - before, gaps: r.enforcement.gaps });`;

function gitInit(ws: string): void {
  fs.mkdirSync(path.join(ws, '.git', 'hooks'), { recursive: true });
  fs.writeFileSync(path.join(ws, '.git', 'HEAD'), 'ref: refs/heads/main\n');
  fs.writeFileSync(path.join(ws, '.git', 'config'), '[core]\n\trepositoryformatversion = 0\n');
}

describe.runIf(caps.linux)('planning never blocks the host or reads unbounded data', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    let policy: SandboxPolicy;
    beforeEach(() => {
      scene = makeScene(`plan-${mode}`);
      policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      gitInit(scene.ws);
    });
    afterEach(() => scene.cleanup());

    it.skipIf(skip)('a FIFO included from .git/config does not hang the host; the regular include next to it is still protected', async () => {
      fs.writeFileSync(path.join(scene.ws, 'hooks.inc'), '[core]\n\thooksPath = myhooks\n');
      fs.mkdirSync(path.join(scene.ws, 'myhooks'));
      fs.appendFileSync(path.join(scene.ws, '.git', 'config'), '[include]\n\tpath = ../fifo\n[include]\n\tpath = ../hooks.inc\n');
      execMkfifo(path.join(scene.ws, 'fifo'));
      const h = await hostRun(scene.root, runAndTick(scene.ws, policy));
      expect(h.result, `the host froze: ${h.output}`).not.toBeNull();
      expect(h.result).toMatchObject({ stdout: 'ran\n', code: 0 });
      expect(h.result!.ticks as number).toBeGreaterThanOrEqual(5);
      if (mode === 'isolated') {
        // What was found around the FIFO is protected: the hooksPath named by the other include.
        const before = snapshot(path.join(scene.ws, 'myhooks'));
        const r = await probeOps([['write', `${scene.ws}/myhooks/pre-commit`, '#!/bin/sh\necho pwned\n']], { cwd: scene.ws, policy });
        expect(r[0]).not.toBe('ok');
        expectUnchanged(before, snapshot(path.join(scene.ws, 'myhooks')));
        // Control: the workspace itself is writable in the same sandbox.
        expect(await probeOps([['write', `${scene.ws}/free.txt`, 'x']], { cwd: scene.ws, policy })).toEqual(['ok']);
      }
    });

    it.skipIf(skip)('an include of /dev/zero is not read; planning finishes', async () => {
      fs.appendFileSync(path.join(scene.ws, '.git', 'config'), '[include]\n\tpath = /dev/zero\n');
      const h = await hostRun(scene.root, runAndTick(scene.ws, policy));
      expect(h.result, `the host did not finish: ${h.output.slice(0, 2000)}`).not.toBeNull();
      expect(h.result).toMatchObject({ stdout: 'ran\n', code: 0 });
    });

    it.skipIf(skip)('an include loop neither fails the spawn nor loses what it names; a chain deeper than 4 is followed', async () => {
      // config -> a.inc -> b.inc -> a.inc (loop); b.inc also starts a chain c1 -> ... -> c6 whose
      // last file names the hooks path. Git itself follows includes 10 deep.
      fs.appendFileSync(path.join(scene.ws, '.git', 'config'), '[include]\n\tpath = ../a.inc\n');
      fs.writeFileSync(path.join(scene.ws, 'a.inc'), '[include]\n\tpath = b.inc\n');
      fs.writeFileSync(path.join(scene.ws, 'b.inc'), '[include]\n\tpath = a.inc\n[include]\n\tpath = c1.inc\n');
      for (let i = 1; i < 6; i++) fs.writeFileSync(path.join(scene.ws, `c${i}.inc`), `[include]\n\tpath = c${i + 1}.inc\n`);
      fs.writeFileSync(path.join(scene.ws, 'c6.inc'), '[core]\n\thooksPath = deephooks\n');
      fs.mkdirSync(path.join(scene.ws, 'deephooks'));
      const h = await hostRun(scene.root, runAndTick(scene.ws, policy));
      expect(h.result, h.output).toMatchObject({ stdout: 'ran\n', code: 0 });
      if (mode === 'isolated') {
        const before = snapshot(scene.ws);
        const r = await probeOps(
          [
            ['write', `${scene.ws}/a.inc`, '[core]\n\thooksPath = /var/tmp\n'],
            ['write', `${scene.ws}/b.inc`, 'x'],
            ['write', `${scene.ws}/c6.inc`, 'x'],
            ['write', `${scene.ws}/deephooks/pre-commit`, '#!/bin/sh\necho pwned\n'],
          ],
          { cwd: scene.ws, policy },
        );
        r.forEach((x, i) => expect(x, `op ${i}`).not.toBe('ok'));
        expectUnchanged(before, snapshot(scene.ws));
        expect(await probeOps([['write', `${scene.ws}/c7.inc`, 'x']], { cwd: scene.ws, policy })).toEqual(['ok']);
      }
    });

    // A command can take flock(LOCK_EX) on any file it sees. When such a file looks like one of
    // our placeholders (an empty 0444 file at a path another run protects), the next plan for this
    // workspace must not wait for that lock on the JS thread, and must not fail: the held lookalike
    // is relied on by no run (one that did would hold a shared lock), so it is replaced by this
    // run's own placeholder. The regression: spawn() threw ESPAWN synchronously here.
    it.skipIf(skip || !caps.python)('a placeholder held locked by a running command neither freezes nor fails the host\'s next spawn', async () => {
      const hook = `${scene.ws}/tools/hook.sh`; // protected by the second run only
      const pol = modePolicy(mode, { filesystem: { write: [scene.ws], protect: [hook] } });
      const holderPolicy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      const holder = [
        'import fcntl, os, sys, time',
        `os.makedirs(${JSON.stringify(`${scene.ws}/tools`)}, exist_ok=True)`,
        `fd = os.open(${JSON.stringify(hook)}, os.O_CREAT | os.O_WRONLY, 0o444)`,
        `os.fchmod(fd, 0o444)`,
        'fcntl.flock(fd, fcntl.LOCK_EX)',
        `open(${JSON.stringify(`${scene.ws}/locked`)}, 'w').close()`,
        'time.sleep(60)',
      ].join('\n');
      // The second run tries the protected path (must fail) and an ordinary one (must work).
      const attempt = 'echo pwned > tools/hook.sh 2>/dev/null; echo hook=$?; echo ok > tools/other; echo other=$?';
      const h = await hostRun(
        scene.root,
        `const ac = new AbortController();
         const a = lib.run('/usr/bin/python3', ['-c', ${JSON.stringify(holder)}], { cwd: ${JSON.stringify(scene.ws)}, env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(holderPolicy)}, signal: ac.signal }).catch((e) => e);
         while (!require('fs').existsSync(${JSON.stringify(`${scene.ws}/locked`)})) await new Promise((r) => setTimeout(r, 20));
         const before = tick();
         let threw = null, out = null, code = null;
         try {
           const c = lib.spawn('/bin/sh', ['-c', ${JSON.stringify(attempt)}], { cwd: ${JSON.stringify(scene.ws)}, env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(pol)} });
           out = '';
           c.stdout.on('data', (d) => (out += d));
           c.on('error', (e) => (code = e.code));
           await c.exited.then((e) => (code = e.code), () => {});
         } catch (e) { threw = e.code; }
         const hookAfter = require('fs').existsSync(${JSON.stringify(hook)});
         while (tick() < before + 5) await new Promise((r) => setTimeout(r, 10));
         ac.abort();
         await a;
         report({ threw, code, out, hookAfter, ticks: tick() - before });`,
      );
      expect(h.result, `the host froze: ${h.output}`).not.toBeNull();
      expect(h.result, h.output).toMatchObject({ threw: null, code: 0 });
      const status = Object.fromEntries(String(h.result!.out).trim().split('\n').map((l) => l.split('=')));
      // Denied: the protected path stayed unwritable (Landlock mode holds carve-outs with its path
      // supervisor, where the kernel has one). Positive control: the next path was written.
      if (mode === 'isolated' || caps.metadataSupervisor) expect(status.hook).not.toBe('0');
      expect(status.other).toBe('0');
      expect(fs.readFileSync(`${scene.ws}/tools/other`, 'utf8')).toBe('ok\n');
      if (mode !== 'isolated') return;
      // Outside: the run's own placeholder is gone after it and nothing was written at the path.
      expect(h.result!.hookAfter).toBe(false);
      expect(fs.existsSync(hook)).toBe(false);
      // Positive control: without the hostile lock the same second run works the same way.
      const ok = await run('/bin/sh', ['-c', attempt], { cwd: scene.ws, env: BASE_ENV, policy: pol });
      expect(ok.stdout).toMatch(/^hook=[1-9]\d*\nother=0\n$/);
    });

    // Such a lookalike is removed without its lock (above). The command holding the lock can also
    // swap a directory on the way (one it may write) for a link to anywhere between the host's
    // look and that removal: a removal by path then deleted the file of that name at the link's
    // target, outside the sandbox. The swap is made where a racing command would have to make it,
    // at the moment the host's lock attempt fails (the addon's lockPlaceholder, wrapped here).
    it.skipIf(skip)('a lookalike is never removed through a link a command put on its way', async () => {
      const elsewhere = path.join(scene.out, 'elsewhere');
      fs.mkdirSync(elsewhere);
      const userFile = path.join(elsewhere, 'hook.sh');
      fs.writeFileSync(userFile, 'the user file\n');
      const tools = path.join(scene.ws, 'tools');
      const hook = path.join(tools, 'hook.sh');
      const lookalike = () => {
        fs.mkdirSync(tools);
        fs.writeFileSync(hook, '');
        fs.chmodSync(hook, 0o444);
      };
      const pol = modePolicy(mode, { filesystem: { write: [scene.ws], protect: [hook] } });
      const native = loadLinuxNative();
      const lock = native.lockPlaceholder;
      let swap = true;
      let held = 0;
      // The first lock attempt of each run finds the lookalike held (LOCK_EX) by a command; the
      // run's own placeholder, locked after its spawn, is not.
      native.lockPlaceholder = (p: string) => {
        if (p !== hook || held > 0) return lock.call(native, p);
        held++;
        if (swap) {
          fs.renameSync(tools, `${tools}.real`);
          fs.symlinkSync(elsewhere, tools);
        }
        return -os.constants.errno.EWOULDBLOCK;
      };
      try {
        lookalike();
        // Whether this spawn runs through the swapped tree is not the point; the file outside is.
        await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy: pol }).catch(() => null);
        expect(held).toBeGreaterThan(0);
        expect(fs.lstatSync(tools).isSymbolicLink()).toBe(true);
        expect(fs.readFileSync(userFile, 'utf8')).toBe('the user file\n');
        // Positive control: with nothing swapped, the held lookalike is removed and the run works.
        fs.unlinkSync(tools);
        fs.rmSync(`${tools}.real`, { recursive: true, force: true });
        lookalike();
        const ino = fs.lstatSync(hook).ino;
        swap = false;
        held = 0;
        const r = await run('/bin/sh', ['-c', 'echo pwned > tools/hook.sh 2>/dev/null; echo hook=$?'], { cwd: scene.ws, env: BASE_ENV, policy: pol });
        expect(held).toBeGreaterThan(0);
        expect(r.code).toBe(0);
        const after = fs.lstatSync(hook, { throwIfNoEntry: false });
        expect(after === undefined || after.ino !== ino, 'the held lookalike was not removed').toBe(true);
        if (mode === 'isolated' || caps.metadataSupervisor) expect(r.stdout).toMatch(/^hook=[1-9]/);
      } finally {
        native.lockPlaceholder = lock;
      }
    });
  });
});

function execMkfifo(p: string): void {
  // node has no mkfifo; the coreutils one is on every Linux host this suite runs on.
  execFileSync('mkfifo', [p]);
}
