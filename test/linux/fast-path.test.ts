/**
 * The spawn fast path keeps state between spawns (the env scrub's verdicts, placeholders claimed
 * before the plan, the shared empty network namespace). Nothing a spawn decides from the
 * filesystem may carry over to the next one: each case below runs the same policy object twice
 * with the filesystem changed in between, and checks the second run against the change (plus a
 * positive control that the same run works once the change is undone).
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { ManagedProxy, run, spawn } from '../../lib/index';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, makeScene, sh, type Scene } from '../helpers/sandbox';

describe.runIf(caps.linux)('spawn after spawn: nothing decided from the filesystem carries over', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    beforeEach(() => {
      if (!skip) scene = makeScene(`fast-${mode}`);
    });
    afterEach(() => scene?.cleanup());

    it.skipIf(skip || mode !== 'isolated')('a protected path made a symlink between two spawns refuses the second', async () => {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      const first = await sh('echo ok > a; echo a=$?', { cwd: scene.ws, policy });
      expect(first.stdout).toBe('a=0\n');
      expect(fs.existsSync(`${scene.ws}/.agents`), 'the first run left no placeholder').toBe(false);
      // Between the runs: .agents (protected by default) becomes a link the command could re-point.
      fs.mkdirSync(`${scene.ws}/realagents`);
      fs.symlinkSync('realagents', `${scene.ws}/.agents`);
      const second = await sh('mkdir -p .agents; echo pwned > .agents/skills.md', { cwd: scene.ws, policy }).catch((e: unknown) => e);
      expect(second, 'refused before anything ran').toMatchObject({ name: 'SandboxError', code: 'EUNSUPPORTED_POLICY' });
      expect(fs.lstatSync(`${scene.ws}/.agents`).isSymbolicLink()).toBe(true);
      expect(fs.readdirSync(`${scene.ws}/realagents`)).toEqual([]);
      // Control: the link gone again, the same policy object runs.
      fs.unlinkSync(`${scene.ws}/.agents`);
      const third = await sh('echo ok > b; echo b=$?', { cwd: scene.ws, policy });
      expect(third.stdout).toBe('b=0\n');
    });

    it.skipIf(skip)('a protected path created between two spawns is neither writable nor removed as a placeholder', async () => {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      // Isolated mode's binds, or Landlock mode's path supervisor, hold the carve-outs.
      const holds = mode === 'isolated' || caps.metadataSupervisor;
      // First run: .codex is missing (isolated mode holds it with a placeholder for the run).
      const first = await sh('mkdir .codex 2>/dev/null; echo mk=$?', { cwd: scene.ws, policy });
      if (holds) expect(first.stdout).not.toBe('mk=0\n');
      fs.rmSync(`${scene.ws}/.codex`, { recursive: true, force: true }); // (Landlock mode without a supervisor: carve-outs are a gap)
      // Between the runs the user creates it for real.
      fs.mkdirSync(`${scene.ws}/.codex`);
      fs.writeFileSync(`${scene.ws}/.codex/config.toml`, 'model = "x"\n');
      const second = await sh('cat .codex/config.toml; echo evil >> .codex/config.toml 2>/dev/null; echo w=$?; echo ok > other; echo o=$?', { cwd: scene.ws, policy });
      expect(second.stdout).toMatch(/^model = "x"\n/);
      if (holds) expect(second.stdout).toMatch(/\nw=[1-9]\d*\n/);
      expect(second.stdout).toMatch(/\no=0\n$/); // positive control: the workspace is writable
      if (holds) expect(fs.readFileSync(`${scene.ws}/.codex/config.toml`, 'utf8')).toBe('model = "x"\n');
      // Outside: the real directory survived the run's cleanup (it is no placeholder).
      expect(fs.existsSync(`${scene.ws}/.codex/config.toml`)).toBe(true);
    });

    it.skipIf(skip)('a workspace removed between two spawns fails the second; a new one at the same path is used', async () => {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      expect((await sh('echo one > f; echo $?', { cwd: scene.ws, policy })).stdout).toBe('0\n');
      fs.rmSync(scene.ws, { recursive: true, force: true });
      const second = await sh('echo two > f', { cwd: scene.ws, policy }).catch((e: unknown) => e);
      expect(second).toMatchObject({ name: 'SandboxError', code: 'EINVALID_ARGUMENT' });
      expect(fs.existsSync(scene.ws), 'nothing recreated it').toBe(false);
      // Control: a fresh directory at the same path is the new workspace, written for real.
      fs.mkdirSync(scene.ws);
      const third = await sh('echo three > f; echo $?', { cwd: scene.ws, policy });
      expect(third.stdout).toBe('0\n');
      expect(fs.readFileSync(path.join(scene.ws, 'f'), 'utf8')).toBe('three\n');
      // And the old workspace's contents are nowhere: the new one holds only what this run wrote.
      expect(fs.readdirSync(scene.ws).filter((n) => !n.startsWith('.'))).toEqual(['f']);
    });

    it.skipIf(skip)('back-to-back spawns in one workspace leave nothing behind', async () => {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
      for (let i = 0; i < 5; i++) {
        const r = await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy });
        expect(r.code).toBe(0);
        expect(fs.readdirSync(scene.ws), `after run ${i}`).toEqual([]);
      }
    });
  });
});

describe.runIf(caps.linux)('proxy sandboxes: network namespaces made ahead', () => {
  // Isolated mode makes proxy sandboxes' network namespaces ahead of time (a small pool, each
  // used once: native/linux/spawn_netns.cc). What must hold: every sandbox gets one of its own
  // (never another sandbox's, never the host's), with lo up and its proxy listener reachable.
  it.skipIf(!caps.userns)('each has a namespace of its own, and reaches its proxy through it', async () => {
    const scene = makeScene('fast-netns');
    const audits: string[] = [];
    const proxy = ManagedProxy.create({ policy: { allow: ['example.com'] }, closeWithLastProcess: false, onAudit: (e) => audits.push(`${e.host}`) });
    const release = path.join(scene.ws, 'release');
    const procs: ReturnType<typeof spawn>[] = [];
    try {
      const policy = modePolicy('isolated', { filesystem: { write: [scene.ws] } , network: { proxy: { allow: ['example.com'] } } });
      // The proxy refuses a CONNECT to a host outside its policy with 403: an answer that can only
      // come from the host's proxy, through the listener inside the sandbox's namespace. Each
      // sandbox then stays alive until released: a namespace's number is unique only among live
      // ones (a freed one is reused), so all seven are compared while alive.
      const script =
        'readlink /proc/self/ns/net; port=${HTTPS_PROXY##*:}; exec 3<>/dev/tcp/127.0.0.1/$port || exit 9; ' +
        "h=denied-$1.invalid; printf 'CONNECT %s:443 HTTP/1.1\\r\\nHost: %s:443\\r\\n\\r\\n' $h $h >&3; head -c 12 <&3; echo; " +
        'i=0; while [ ! -e release ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done';
      const start = (i: number): Promise<string[]> => {
        const p = spawn('/bin/bash', ['-c', script, 'bash', String(i)], { cwd: scene.ws, env: BASE_ENV, policy, proxy: { instance: proxy } });
        procs.push(p);
        expect(p.enforcement.mechanisms.namespaces).toContain('net');
        expect(p.enforcement.mechanisms.namespaces).not.toContain('net (shared, empty)');
        let out = '';
        p.stdout!.setEncoding('utf8');
        return new Promise((resolve, reject) => {
          p.stdout!.on('data', (d: string) => {
            out += d;
            const lines = out.split('\n');
            if (lines.length >= 3) resolve(lines.slice(0, 2));
          });
          p.exited.then(() => reject(new Error(`sandbox ${i} ended first: ${JSON.stringify(out)}`)), reject);
        });
      };
      // Four one after the other (each from the pool, refilled in between), then three at once.
      const lines: string[][] = [];
      for (let i = 0; i < 4; i++) lines.push(await start(i));
      lines.push(...(await Promise.all([4, 5, 6].map(start))));
      const host = fs.readlinkSync('/proc/self/ns/net');
      for (const [ns, answer] of lines) {
        expect(ns).toMatch(/^net:\[\d+\]$/);
        expect(ns).not.toBe(host);
        expect(answer).toBe('HTTP/1.1 403');
      }
      expect(new Set(lines.map(([ns]) => ns)).size, 'seven live sandboxes, seven namespaces').toBe(7);
      // Outside: the proxy itself saw each sandbox's request.
      for (let i = 0; i < 7; i++) expect(audits, JSON.stringify(audits)).toContain(`denied-${i}.invalid`);
      fs.writeFileSync(release, '');
      for (const p of procs) expect((await p.exited).code).toBe(0);
    } finally {
      fs.writeFileSync(release, '');
      for (const p of procs) p.kill('SIGKILL');
      await proxy.close();
      scene.cleanup();
    }
  });

  it.skipIf(!caps.userns)('the namespaces made ahead hold none of the host\'s fds (no process but the host has a file it opened)', async () => {
    // Each is made by a short-lived process that starts with a copy of the host's fd table. Kept,
    // such a copy held a reader's EOF back (a host's stdout pipe), and two made at once held each
    // other's sockets and lived for ever.
    const scene = makeScene('fast-netns-fds');
    const marker = path.join(scene.root, 'marker');
    const fd = fs.openSync(marker, 'w');
    const proxy = ManagedProxy.create({ policy: { allow: ['example.com'] }, closeWithLastProcess: false });
    try {
      const policy = modePolicy('isolated', { filesystem: { write: [scene.ws] }, network: { proxy: { allow: ['example.com'] } } });
      const one = () => run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy, proxy: { instance: proxy }, timeout: 60_000 });
      // Rounds that empty the pool, so that it refills with several templates made at once.
      for (let round = 0; round < 6; round++) {
        for (const r of await Promise.all([one(), one(), one(), one()])) expect(r.code).toBe(0);
        await new Promise((r) => setTimeout(r, 50));
      }
      const holders = () => {
        const found: string[] = [];
        for (const pid of fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n) && Number(n) !== process.pid)) {
          let fds: string[] = [];
          try {
            fds = fs.readdirSync(`/proc/${pid}/fd`);
          } catch {
            continue; // gone, or another user's
          }
          for (const f of fds) {
            try {
              if (fs.readlinkSync(`/proc/${pid}/fd/${f}`) === marker) found.push(`${pid}: ${fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim()}`);
            } catch {
              // closed meanwhile
            }
          }
        }
        return found;
      };
      // The pool refills on threads of its own: give it time to finish, then look.
      let found = holders();
      for (let i = 0; i < 50 && found.length > 0; i++) {
        await new Promise((r) => setTimeout(r, 100));
        found = holders();
      }
      expect(found).toEqual([]);
      // Control: the scan does find a holder (this test's own child, given the fd).
      const { spawn: cpSpawn } = await import('node:child_process');
      const child = cpSpawn('/bin/sleep', ['5'], { stdio: ['ignore', fd, 'ignore'] });
      await new Promise((r) => setTimeout(r, 200));
      expect(holders().some((h) => h.startsWith(`${child.pid}:`))).toBe(true);
      child.kill();
    } finally {
      fs.closeSync(fd);
      await proxy.close();
      scene.cleanup();
    }
  });
});
