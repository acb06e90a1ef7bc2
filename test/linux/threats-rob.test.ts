/**
 * Robustness classes (reference/threats.md ROB-01..ROB-14) through the public API, both modes.
 *
 * Bad input is refused with a SandboxError code before anything starts (checked by a command that
 * would leave a file behind had it run). Exit statuses and signals map faithfully. Killing,
 * timing out, flooding or orphaning never leaves a process, a file, a temp dir or a mount behind;
 * host parent death takes the whole sandboxed tree down.
 */
import { spawn as spawnHost, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { run, spawn, SandboxError } from '../../lib/index';
import { TMP_PARENT_PREFIX } from '../../lib/platform/linux/landlock-rules';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import {
  BASE_ENV,
  eventually,
  expectNoProcess,
  expectNoMountLeak,
  hostMounts,
  hostScript,
  killAll,
  makeScene,
  NODE,
  pidsWith,
  sleepers,
  sh,
  snapshot,
  startForkStorm,
  expectUnchanged,
  visibleTasksOfUid,
  uniqueSleep,
  type Scene,
} from '../helpers/sandbox';

/** The command's TMPDIR as it printed it ("TMPDIR=<dir>" line); must be gone from the host after the run. */
function tmpdirFrom(out: string): string | null {
  const m = /^TMPDIR=(\S+)$/m.exec(out);
  return m && m[1]!.startsWith('/tmp/') && !isolatedTmp(m[1]!) ? m[1]! : null;
}
function isolatedTmp(p: string): boolean {
  return p === '/tmp';
}

async function rejection(p: Promise<unknown> | (() => unknown)): Promise<SandboxError> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    expect(e).toBeInstanceOf(SandboxError);
    return e as SandboxError;
  }
  throw new Error('expected a SandboxError, but it resolved');
}

const mountsAtStart = caps.linux ? hostMounts() : [];

describe.runIf(caps.linux)('robustness', () => {
  it.runIf(caps.userns && caps.landlock)('ROB-14: both modes at once, interleaved kills, nothing left behind', async () => {
    const scene = makeScene('rob-mixed');
    const mounts = hostMounts();
    try {
      const marker = uniqueSleep();
      const kinds = Array.from({ length: 8 }, (_, i) => (i % 2 ? 'isolated' : 'landlock') as 'isolated' | 'landlock');
      const runs = kinds.map((m, i) =>
        sh(`echo ${m}-${i}; echo TMPDIR=$TMPDIR; ${i % 4 === 3 ? `sleep ${marker}` : 'true'}`, {
          cwd: scene.ws,
          policy: modePolicy(m, { filesystem: { write: [scene.ws] } }),
          ...(i % 4 === 3 ? { timeout: 500 } : {}),
        }),
      );
      const results = await Promise.all(runs);
      results.forEach((r, i) => {
        expect(r.enforcement.mode).toBe(kinds[i]);
        expect(r.stdout.split('\n')[0]).toBe(`${kinds[i]}-${i}`);
        expect(r.timedOut).toBe(i % 4 === 3);
        const tmp = tmpdirFrom(r.stdout);
        if (tmp) expect(fs.existsSync(tmp), `${tmp} outlived its run`).toBe(false);
      });
      await expectNoProcess(marker);
      expect(fs.readdirSync(scene.ws)).toEqual([]);
      expectNoMountLeak(mounts, [scene.root]);
    } finally {
      scene.cleanup();
    }
  });

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    let policy: SandboxPolicy;
    const isolated = mode === 'isolated';
    const markers: string[] = [];

    beforeEach(() => {
      scene = makeScene(`rob-${mode}`);
      policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
    });
    afterEach(async () => {
      for (const m of markers.splice(0)) killAll(m);
      // No run leaves a protected-path placeholder or a mount behind. (Landlock-mode TMPDIRs are
      // checked by name in the tests that kill: other suites create their own concurrently.)
      try {
        expect(fs.readdirSync(scene.ws).filter((n) => ['.codex', '.agents'].includes(n))).toEqual([]);
        expectNoMountLeak(mountsAtStart, [scene.root]);
      } finally {
        scene.cleanup();
      }
    });

    const canary = () => `touch ${scene.ws}/ran`;
    const ran = () => fs.existsSync(`${scene.ws}/ran`);

    it.skipIf(skip)('ROB-01/ROB-04: empty argv and NUL bytes are refused before anything runs', async () => {
      const bad: Array<() => unknown> = [
        () => run('', [], { policy }),
        () => run('/bin/sh', ['-c', canary(), 'a\0b'], { policy }),
        () => run('/bin/sh\0x', ['-c', canary()], { policy }),
        () => run('/bin/sh', ['-c', canary()], { policy, env: { A: 'x\0y' } }),
        () => run('/bin/sh', ['-c', canary()], { policy, env: { 'A\0B': 'x' } }),
        () => run('/bin/sh', ['-c', canary()], { policy, env: { 'A=B': 'x' } }),
        () => run('/bin/sh', ['-c', canary()], { policy, cwd: `${scene.ws}\0` }),
        () => run('/bin/sh', ['-c', canary()], { policy, arg0: '' }),
        () => run('/bin/sh', 'not-an-array' as unknown as string[], { policy }),
        () => run('/bin/sh', [1 as unknown as string], { policy }),
        () => spawn('/bin/sh', ['-c', canary()], { policy, bogus: 1 } as never),
      ];
      for (const [i, f] of bad.entries()) {
        const e = await rejection(f);
        expect(e.code, `case ${i}: ${e.message}`).toBe('EINVALID_ARGUMENT');
      }
      expect(ran()).toBe(false);
      // Control: the same command with clean input runs, and an empty-string argument is fine.
      const ok = await run('/bin/sh', ['-c', canary(), ''], { env: BASE_ENV, policy });
      expect(ok.code).toBe(0);
      expect(ran()).toBe(true);
    });

    it.skipIf(skip)('ROB-02: missing or non-executable programs are ENOT_FOUND / ENOT_EXECUTABLE', async () => {
      fs.writeFileSync(`${scene.ws}/plain.txt`, 'echo hi\n', { mode: 0o644 });
      fs.writeFileSync(`${scene.ws}/badinterp`, '#!/nonexistent/interp\n', { mode: 0o755 });
      fs.writeFileSync(`${scene.ws}/garbage`, Buffer.from([0x7f, 0x45, 0x4c, 0x46, 1, 2, 3]), { mode: 0o755 });
      const cases: Array<[string, string[]]> = [
        ['/nonexistent/program', ['ENOT_FOUND']],
        ['no-such-command-psb', ['ENOT_FOUND']],
        [`${scene.ws}/plain.txt`, ['ENOT_EXECUTABLE']],
        [scene.ws, ['ENOT_EXECUTABLE', 'ENOT_FOUND']],
        [`${scene.ws}/badinterp`, ['ENOT_FOUND', 'ENOT_EXECUTABLE']],
        [`${scene.ws}/garbage`, ['ENOT_EXECUTABLE', 'ESPAWN']],
      ];
      for (const [file, codes] of cases) {
        const e = await rejection(() => run(file, [], { env: BASE_ENV, cwd: scene.ws, policy }));
        expect(codes, `${file}: ${e.code} ${e.message}`).toContain(e.code);
      }
      // A program in a deny-read directory (isolated mode masks it; Landlock mode grants it nothing).
      {
        fs.mkdirSync(`${scene.out}/bin`);
        fs.copyFileSync('/bin/true', `${scene.out}/bin/t`);
        fs.chmodSync(`${scene.out}/bin/t`, 0o755);
        const e = await rejection(() => run(`${scene.out}/bin/t`, [], { env: BASE_ENV, policy: modePolicy(mode, { filesystem: { denyRead: [`${scene.out}/bin`] } }) }));
        expect(['ENOT_FOUND', 'ENOT_EXECUTABLE']).toContain(e.code);
        expect((await run(`${scene.out}/bin/t`, [], { env: BASE_ENV, policy })).code).toBe(0);
      }
    });

    it.skipIf(skip)('ROB-03: cwd edge cases', async () => {
      for (const cwd of ['relative/dir', `${scene.ws}/missing`, `${scene.out}/ro.txt`]) {
        const e = await rejection(() => run('/bin/pwd', [], { cwd, env: BASE_ENV, policy }));
        expect(e.code, cwd).toBe('EINVALID_ARGUMENT');
      }
      const odd = path.join(scene.ws, 'with space', 'ünï cödé', "quote'd");
      fs.mkdirSync(odd, { recursive: true });
      fs.symlinkSync(odd, `${scene.ws}/link`);
      for (const [cwd, want] of [
        [odd, odd],
        [`${scene.ws}/link`, odd],
        [scene.out, scene.out], // read-only cwd works
        ['/', '/'],
      ] as const) {
        const r = await run('/bin/pwd', ['-P'], { cwd, env: BASE_ENV, policy });
        expect(r.stdout.trim(), cwd).toBe(want);
      }
      // A cwd under the host /tmp stays visible with a private /tmp.
      const tmpCwd = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-rob-cwd-'));
      try {
        fs.writeFileSync(path.join(tmpCwd, 'marker'), 'm');
        const r = await run('/bin/cat', ['marker'], { cwd: tmpCwd, env: BASE_ENV, policy });
        expect(r.stdout).toBe('m');
      } finally {
        fs.rmSync(tmpCwd, { recursive: true, force: true });
      }
      {
        // A cwd inside a deny-read directory: refused, or the command starts in the empty mask
        // (isolated) or in the directory itself (Landlock) and sees none of the real entries.
        try {
          const r = await run('/bin/sh', ['-c', 'ls -A .; cat inner.txt'], { cwd: `${scene.out}/dir`, env: BASE_ENV, policy: modePolicy(mode, { filesystem: { denyRead: [`${scene.out}/dir`] } }) });
          if (!isolated && !caps.listSupervised) {
            // The names are a listed gap where the supervisor cannot carry out listings; never the contents.
            expect(r.enforcement.gaps.join('\n')).toMatch(/can be listed \(not read\)/);
            expect(r.stdout.replace(/^inner\.txt$/m, '')).not.toContain('inner');
          } else expect(r.stdout).not.toContain('inner');
        } catch (e) {
          expect(e).toBeInstanceOf(SandboxError);
        }
      }
    });

    it.skipIf(skip)('ROB-05: huge and odd argv/env pass through intact; oversized ones fail cleanly', async () => {
      const big = 'x'.repeat(100_000);
      const odd = ['', ' ', 'a\nb', 'tab\there', 'ünïcödé ✓', '--', '-c', '$(id)', '`id`', '"\'', '=', '%s%n'];
      const env: Record<string, string> = { PATH: BASE_ENV.PATH!, BIG: big, WEIRD: 'a=b=c\n', EMPTY: '' };
      for (let i = 0; i < 1000; i++) env[`V${i}`] = String(i);
      const r = await run(NODE, ['-e', 'console.log(JSON.stringify({a: process.argv.slice(1), e: process.env}))', big, ...odd], { env, policy });
      const out = JSON.parse(r.stdout) as { a: string[]; e: Record<string, string> };
      expect(out.a).toEqual([big, ...odd]);
      expect(out.e.BIG).toBe(big);
      expect(out.e.WEIRD).toBe('a=b=c\n');
      expect(out.e.EMPTY).toBe('');
      expect(out.e.V999).toBe('999');
      // Beyond ARG_MAX: refused with a SandboxError, nothing left running.
      const huge = 'y'.repeat(200_000);
      const e = await rejection(() => run('/bin/true', Array.from({ length: 20 }, () => huge), { env: BASE_ENV, policy }));
      expect(e.code).toMatch(/^E[A-Z_]+$/);
    });

    it.skipIf(skip)('ROB-06: invalid policies are refused with a code and nothing runs', async () => {
      const bad: unknown[] = [
        { filesystem: { write: ['relative/path'] } },
        { filesystem: { write: 'not-a-list' } },
        { filesystem: { bogus: true } },
        { network: 'sometimes' },
        { mode: 'chroot' },
        { bogus: 1 },
        { filesystem: { tmp: 'shared' } },
        { limits: { maxProcesses: -1 } },
        { filesystem: { write: [`${scene.ws}/does-not-exist`] } },
        'strict',
      ];
      for (const p of bad) {
        const e = await rejection(() => run('/bin/sh', ['-c', canary()], { env: BASE_ENV, policy: p as SandboxPolicy }));
        expect(e.code, JSON.stringify(p)).toMatch(/^EINVALID_(POLICY|ARGUMENT)$/);
      }
      expect(ran()).toBe(false);
    });

    it.skipIf(skip)('ROB-07: exit codes and signals are reported faithfully', async () => {
      for (const code of [0, 1, 42, 255]) {
        const r = await sh(`exit ${code}`, { policy });
        expect([r.code, r.signal]).toEqual([code, null]);
      }
      for (const sig of ['SIGTERM', 'SIGKILL', 'SIGSEGV', 'SIGABRT', 'SIGUSR1'] as const) {
        const r = await sh(`kill -${sig.slice(3)} $$`, { policy });
        expect([r.code, r.signal], sig).toEqual([null, sig]);
      }
      // Control: the same mapping unsandboxed.
      expect((await sh('kill -TERM $$', { policy: null })).signal).toBe('SIGTERM');
    });

    it.skipIf(skip)('ROB-08: a timeout kills the whole tree and is reported', async () => {
      const marker = uniqueSleep();
      markers.push(marker);
      const r = await sh(`echo TMPDIR=$TMPDIR; sleep ${marker} & sleep ${marker}`, { policy, timeout: 300 });
      expect(r.timedOut).toBe(true);
      expect(r.signal).toBe('SIGKILL');
      await expectNoProcess(marker);
      const tmp = tmpdirFrom(r.stdout);
      if (tmp) expect(fs.existsSync(tmp), `${tmp} outlived the run`).toBe(false);
      // A command that stops itself, or ignores TERM/INT/HUP, is still taken down.
      const m2 = uniqueSleep();
      markers.push(m2);
      const stopped = await sh(`trap '' TERM INT HUP; sleep ${m2} & kill -STOP $$; wait`, { policy, timeout: 300 });
      expect(stopped.timedOut).toBe(true);
      await expectNoProcess(m2);
    });

    it.skipIf(skip)('ROB-09: kill() takes down the whole tree, setsid daemons included', async () => {
      const [m1, m2, m3] = [uniqueSleep(), uniqueSleep(), uniqueSleep()];
      markers.push(m1, m2, m3);
      const child = spawn('/bin/sh', ['-c', `sleep ${m1} & setsid sh -c 'sleep ${m2} &' ; echo up; sleep ${m3}`], { env: BASE_ENV, policy });
      await new Promise<void>((res) => child.stdout!.once('data', () => res()));
      expect(await eventually(() => [m1, m2, m3].every((m) => sleepers(m).length === 1))).toBe(true);
      expect(child.kill('SIGKILL')).toBe(true);
      const exit = await child.exited;
      expect(exit.signal).toBe('SIGKILL');
      await expectNoProcess(m1);
      await expectNoProcess(m3);
      // The setsid daemon too, unless the report admits the gap (older Landlock-mode teardown).
      if (/setsid/.test(child.enforcement.gaps.join('\n'))) expect(isolated).toBe(false);
      else await expectNoProcess(m2);
      // kill() after exit says so.
      expect(child.kill('SIGKILL')).toBe(false);
    });

    it.skipIf(skip)('ROB-10: orphans are reaped and TERM/INT/HUP/USR1 reach the command', async () => {
      // Orphans that exit: no zombie may pile up while the command keeps running.
      const z = await sh('for i in 1 2 3 4 5; do (sh -c "exit 0" &) ; done; sleep 0.5; ps -eo stat= 2>/dev/null | grep -c "^Z" || true', { policy });
      if (isolated) expect(z.stdout.trim()).toBe('0');
      for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR1'] as const) {
        const child = spawn('/bin/sh', ['-c', `trap 'echo got-${sig}; exit 7' ${sig.slice(3)}; echo ready; while :; do sleep 0.05; done`], { env: BASE_ENV, policy });
        let out = '';
        child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
        await eventually(() => out.includes('ready'));
        child.kill(sig);
        const exit = await child.exited;
        await eventually(() => out.includes(`got-${sig}`), 2000);
        expect(out, sig).toContain(`got-${sig}`);
        expect(exit.code).toBe(7);
      }
    });

    it.skipIf(skip)('ROB-11: floods, binary output, big input and closed streams', async () => {
      // A flood past maxBuffer: EMAXBUFFER and the tree is killed.
      const marker = uniqueSleep();
      markers.push(marker);
      const e = await rejection(() => sh(`sleep ${marker} & head -c 50000000 /dev/zero`, { policy, maxBuffer: 1 << 20, reject: true }));
      expect(e.code).toBe('EMAXBUFFER');
      await expectNoProcess(marker);
      // Binary stdout survives byte for byte.
      const bin = await run('/bin/sh', ['-c', 'printf "\\000\\377\\001\\200"'], { env: BASE_ENV, policy, encoding: 'buffer' });
      expect([...bin.stdout]).toEqual([0, 255, 1, 128]);
      // 4 MiB through stdin and back.
      const input = Buffer.alloc(4 << 20, 'abc');
      const cat = await run('/bin/cat', [], { env: BASE_ENV, policy, input, encoding: 'buffer' });
      expect(cat.stdout.equals(input)).toBe(true);
      // stderr flood alongside stdout.
      const both = await sh('head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2', { policy });
      expect([both.stdout.length, both.stderr.length]).toEqual([3000000, 3000000]);
      // The command closes stdout early and keeps going; the reader sees EOF, the exit is seen.
      const closed = await sh('echo early; exec >&-; sleep 0.2; exit 3', { policy });
      expect([closed.stdout, closed.code]).toEqual(['early\n', 3]);
      // stdio 'ignore': writes go nowhere, no EPIPE crash.
      const ign = await run('/bin/sh', ['-c', 'head -c 1000000 /dev/zero; echo done >&2'], { env: BASE_ENV, policy, stdio: ['ignore', 'ignore', 'pipe'] });
      expect(ign.stderr).toBe('done\n');
      expect(ign.code).toBe(0);
    });

    it.skipIf(skip)('ROB-12: limits on files and memory hold', async () => {
      const nofile = await run(NODE, ['-e', "const fs=require('fs');let n=0;try{for(;n<500;n++)fs.openSync('/dev/null','r')}catch(e){console.log(e.code,n)}"], {
        env: BASE_ENV,
        policy: { ...policy, limits: { openFiles: 64 } },
      });
      expect(nofile.stdout).toMatch(/^EMFILE \d+/);
      const mem = await run('/usr/bin/python3', ['-c', 'try:\n  b=bytearray(1<<30); print("allocated")\nexcept MemoryError:\n  print("MemoryError")'], {
        env: BASE_ENV,
        policy: { ...policy, limits: { memoryBytes: 256 << 20 } },
      });
      expect(mem.stdout.trim()).toBe('MemoryError');
      // Control: without the limits both succeed.
      const ctl = await run('/usr/bin/python3', ['-c', 'b=bytearray(1<<30); print("allocated")'], { env: BASE_ENV, policy });
      expect(ctl.stdout.trim()).toBe('allocated');
    });

    it.skipIf(skip)('ROB-12: maxProcesses caps a (bounded) fork storm, counted while it runs', async () => {
      const marker = uniqueSleep();
      markers.push(marker);
      // 60 attempts against a cap of 16, counted from outside while the storm stays up: the cap,
      // not the loop or the teardown, must stop it.
      const { child, out: stormOut, peak } = await startForkStorm(60, marker, { env: BASE_ENV, policy: { ...policy, limits: { maxProcesses: 16 } } });
      const out = stormOut();
      const cap = child.enforcement.mechanisms.processCap as string;
      child.stdin!.end();
      await child.exited;
      killAll(marker);
      // (Landlock mode's RLIMIT_NPROC counts every process of the uid, the test runner's threads
      // included, so there it may refuse the very first fork.)
      if (isolated || cap.startsWith('cgroup')) expect(peak, `${out} (${cap})`).toBeGreaterThan(0);
      const uidWide = /^RLIMIT_NPROC \d+ \(the uid's (\d+) tasks/.exec(cap);
      // In a pid namespace (a container) the tasks /proc cannot show are counted as the uid's
      // (linux/quotas.ts): the bound is then looser by as many as are not really the uid's.
      const hidden = uidWide ? Number(uidWide[1]) - visibleTasksOfUid() : 0;
      if (cap === 'none') {
        // A named gap (root where no pids cgroup can be made, e.g. a default container).
        expect(child.enforcement.gaps.join('\n')).toMatch(/not capped/);
        console.warn(`[ROB-12] SKIPPING the storm bound: no process cap here, as the report says (${out.trim()})`);
      } else if (uidWide && hidden > 60 - 16) {
        console.warn(`[ROB-12] SKIPPING the storm bound: ${cap}, of which about ${hidden} tasks /proc does not show here (a pid namespace), more room than the storm's 60`);
      } else if (uidWide) {
        // Landlock mode without a cgroup: the bound is uid-wide (the uid's tasks at spawn + 16),
        // so tasks of the uid that end during the storm leave it room beyond 16 (seen as psbtest:
        // 18). It still stops the storm well short of its 60.
        expect(out, cap).toMatch(/failed [1-9]/);
        expect(peak, `${out} (${cap})`).toBeLessThan(60);
      } else {
        expect(peak, `${out} (${cap})`).toBeLessThanOrEqual(16);
      }
      // The report names what capped it: as root a pids cgroup, or (RLIMIT_NPROC does not bind
      // uid 0; Landlock mode) init's traced count.
      if (caps.root) expect(cap).toMatch(/cgroup v[12] pids\.max 16|traced by init: 16 tasks|none/);
      // Landlock mode without a cgroup: the uid's task count at spawn plus the cap.
      else expect(cap).toMatch(/RLIMIT_NPROC 16|cgroup v[12] pids\.max 16|RLIMIT_NPROC \d+ \(the uid's \d+ tasks at spawn \+ 16:/);
      await expectNoProcess(marker);
      // Control: without the cap all 60 start (polled: the last ones may not have exec'd yet).
      const m2 = uniqueSleep();
      markers.push(m2);
      await sh(`for i in $(seq 1 60); do sleep ${m2} </dev/null >/dev/null 2>&1 & done; exit 0`, { policy: null, timeout: 20_000 }).catch(() => undefined);
      expect(await eventually(() => sleepers(m2).length === 60)).toBe(true);
    });

    it.skipIf(skip || !caps.root)('ROB-12: as root the default process cap holds through a pids cgroup or init\'s traced count, or the report says it does not', async () => {
      const r = await run('/bin/sh', ['-c', 'cat /proc/self/cgroup'], { env: BASE_ENV, policy });
      const cap = r.enforcement.mechanisms.processCap as string;
      if (cap.startsWith('cgroup')) {
        expect(cap).toMatch(/pids\.max 4096$/);
        // From inside: the command sits in a psb- group of the pids hierarchy (v1) or of the unified one.
        expect(r.stdout).toMatch(/(pids|^0:):[^\n]*\/psb-\d+-n\d+-[0-9a-f-]+$/m);
      } else if (cap.startsWith('traced')) {
        // Landlock mode where no cgroup can be made (a default container): init traces the tree.
        expect(cap).toBe('traced by init: 4096 tasks, threads included (creations past them fail EAGAIN)');
        expect(r.enforcement.gaps.join('\n')).not.toMatch(/capped/);
      } else {
        expect(r.enforcement.gaps.join('\n')).toMatch(/RLIMIT_NPROC does not bind uid 0/);
      }
      // Outside: after the run the group is gone or empty (an emptied pids group is kept for reuse).
      const m = /^\d+:(?:pids)?:(.*\/psb-\d+-n\d+-[0-9a-f-]+)$/m.exec(r.stdout);
      if (m) {
        const dirs = ['/sys/fs/cgroup/pids', '/sys/fs/cgroup/unified', '/sys/fs/cgroup'].map((d) => path.join(d, m[1]!));
        const empty = () => dirs.every((d) => !fs.existsSync(d) || fs.readFileSync(path.join(d, 'cgroup.procs'), 'utf8').trim() === '');
        expect(await eventually(empty)).toBe(true);
      }
    });

    it.skipIf(skip)('ROB-12: a fork bomb stops at the process cap, which is there by default; the host stays alive', async () => {
      // The default policy has a cap, and the report says which mechanism holds it (Landlock
      // mode without a cgroup, unprivileged: RLIMIT_NPROC over the uid's count at spawn; as root,
      // init's traced count). Where that cannot be either, nothing binds: the report must say so.
      const dflt = await run('/bin/true', [], { env: BASE_ENV, policy });
      const dcap = dflt.enforcement.mechanisms.processCap as string;
      if (caps.root && dcap === 'none') {
        expect(dflt.enforcement.gaps.join('\n')).toMatch(/RLIMIT_NPROC does not bind uid 0/);
        console.warn('[ROB-12] SKIPPING the bomb: no process cap binds here (root, no cgroup, no tracing), as the report says');
        return;
      }
      expect(dcap).toMatch(/^(cgroup v[12] pids\.max 4096|RLIMIT_NPROC \d+|traced by init: 4096 tasks)/);
      expect(dflt.enforcement.limits.maxProcesses).toBe(4096);
      // The bomb itself, against a smaller cap (this host is shared): bash's `:(){ :|:& };:`,
      // bounded by the run's timeout. Counted from outside while it runs, by its marker.
      const marker = uniqueSleep();
      markers.push(marker);
      const cap = 200;
      // Every task (threads too) of this uid, as RLIMIT_NPROC counts them.
      const uidTasks = () => {
        let n = 0;
        for (const d of fs.readdirSync('/proc')) {
          if (!/^\d+$/.test(d)) continue;
          try {
            const st = fs.readFileSync(`/proc/${d}/status`, 'utf8');
            if (Number(/^Uid:\s*(\d+)/m.exec(st)?.[1]) === process.getuid!()) n += Number(/^Threads:\s*(\d+)/m.exec(st)?.[1] ?? 1);
          } catch {
            /* gone */
          }
        }
        return n;
      };
      let peak = 0;
      let uidPeak = 0;
      // Each sample: the bomb's processes and the uid's tasks (judged once the limit is known).
      const samples: Array<[number, number]> = [];
      let done = false;
      const bomb = run('/bin/bash', ['-c', `: ${marker}; :(){ :|:& };:; sleep 60`], {
        env: BASE_ENV,
        policy: { ...policy, limits: { maxProcesses: cap } },
        timeout: 4000,
      }).finally(() => (done = true));
      while (!done) {
        const mine = pidsWith(marker).length;
        const all = uidTasks();
        peak = Math.max(peak, mine);
        uidPeak = Math.max(uidPeak, all);
        samples.push([mine, all]);
        await new Promise((r) => setTimeout(r, 50));
      }
      const r = await bomb;
      expect(r.timedOut, JSON.stringify(r.enforcement.mechanisms.processCap)).toBe(true);
      expect(peak).toBeGreaterThan(0);
      // (+2: a forked bash briefly before its fork fails, counted twice by a racing sample.)
      const how = r.enforcement.mechanisms.processCap as string;
      const uidLimit = /^RLIMIT_NPROC (\d+) \(the uid's/.exec(how);
      if (uidLimit) {
        // Landlock mode without a cgroup: the uid's count at spawn plus the cap. The bomb never
        // holds more than the limit minus the fewest tasks the uid's other processes had up to
        // then (what they release is room for it). The uid's total may pass the limit: the
        // suite's other workers run as the same uid and are not under it (seen: 356 against
        // 335 + 20 as psbtest). (+20: the two scans race the bomb's exits and retried forks; an
        // uncapped bomb is thousands past it within the run.)
        let othersLow = Infinity;
        let excess = -Infinity;
        for (const [mine, all] of samples) {
          othersLow = Math.min(othersLow, all - mine);
          excess = Math.max(excess, mine - (Number(uidLimit[1]) - othersLow));
        }
        expect(excess, `${how}; the bomb's peak ${peak}, the uid's ${uidPeak}, others at least ${othersLow}`).toBeLessThanOrEqual(20);
      } else {
        expect(peak, how).toBeLessThanOrEqual(cap + 2);
      }
      // Outside: nothing of the bomb is left, and the host still starts processes.
      await expectNoProcess(marker);
      expect(spawnSync('/bin/true').status).toBe(0);
    });

    it.skipIf(skip)('ROB-13: when the host process dies, the whole sandboxed tree dies', async () => {
      const [bg, cmd] = [uniqueSleep(), uniqueSleep()];
      markers.push(bg, cmd);
      const script = hostScript(
        scene.root,
        'host.js',
        `const c = lib.spawn('/bin/sh', ['-c', 'echo TMPDIR=$TMPDIR; sleep ${bg} & sleep ${cmd}'], { env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(policy)} });
         c.stdout.on('data', (b) => process.stdout.write(b));
         console.log('PID ' + c.pid);
         setInterval(() => {}, 1000);`,
      );
      const host = spawnHost(NODE, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      host.stdout!.on('data', (b: Buffer) => (out += b.toString()));
      // (A bound, not a timing check: a second node process starting under an emulated CPU, as in
      // the kernel matrix's guests, can take most of 10 s.)
      expect(await eventually(() => /^TMPDIR=/m.test(out) && sleepers(bg).length === 1 && sleepers(cmd).length === 1, 30_000)).toBe(true);
      host.kill('SIGKILL');
      await new Promise((res) => host.once('exit', res));
      await expectNoProcess(cmd); // the command itself
      await expectNoProcess(bg); // and its background child
      // Placeholders a dead host could not remove are BUG-ROB13 (next test), not this one's.
      for (const n of ['.codex', '.agents']) fs.rmSync(path.join(scene.ws, n), { recursive: true, force: true });
      const tmp = tmpdirFrom(out);
      if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
    });

    // A host that dies cannot clean up after itself: placeholders for missing protected paths
    // (isolated mode) and the per-run TMPDIR (Landlock mode) stay behind. The next run picks them
    // up: a placeholder it relies on is removed when it ends, and a new host process removes the
    // TMPDIRs of hosts that are gone. So leftovers last only until the next run.
    it.skipIf(skip)('ROB-13: what a dead host left behind is removed by the next run', async () => {
      const cmd = uniqueSleep();
      markers.push(cmd);
      const script = hostScript(
        scene.root,
        'host2.js',
        `const c = lib.spawn('/bin/sh', ['-c', 'echo TMPDIR=$TMPDIR; exec sleep ${cmd}'], { env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(policy)} });
         c.stdout.on('data', (b) => process.stdout.write(b));
         setInterval(() => {}, 1000);`,
      );
      const host = spawnHost(NODE, [script], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      host.stdout!.on('data', (b: Buffer) => (out += b.toString()));
      host.stderr!.on('data', (b: Buffer) => (err += b.toString()));
      // (Seen only in emulated guests beside other suites: this first host's spawn failing because
      // the workspace made by beforeEach was gone. Say so, with the host's own words, if it recurs.)
      // (A bound, not a timing check: as in the test above, a second node process starting under
      // an emulated CPU beside other suites can take most of 10 s; seen in the kernel matrix.)
      const started = await eventually(() => /^TMPDIR=/m.test(out) && sleepers(cmd).length === 1, 30_000);
      expect(started, `the first host did not start its command; the workspace ${fs.existsSync(scene.ws) ? 'exists' : 'is GONE'}; its entries: ${JSON.stringify(fs.existsSync(scene.root) ? fs.readdirSync(scene.root) : null)}; host stdout: ${out}; stderr: ${err.slice(0, 2000)}`).toBe(true);
      host.kill('SIGKILL');
      await new Promise((res) => host.once('exit', res));
      await expectNoProcess(cmd);
      const tmp = tmpdirFrom(out);
      // The next run, from a new host process, in the same workspace.
      const next = hostScript(
        scene.root,
        'host3.js',
        `lib.run('/bin/true', [], { env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(policy)} }).then((r) => { console.log('CODE ' + r.code); });`,
      );
      const again = spawnHost(NODE, [next], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out2 = '';
      let err2 = '';
      again.stdout!.on('data', (b: Buffer) => (out2 += b.toString()));
      again.stderr!.on('data', (b: Buffer) => (err2 += b.toString()));
      await new Promise((res) => again.once('exit', res));
      expect(out2, `the next host's run; the workspace ${fs.existsSync(scene.ws) ? 'exists' : 'is GONE'}; stderr: ${err2.slice(0, 2000)}`).toMatch(/CODE 0/);
      const left = [...fs.readdirSync(scene.ws).filter((n) => ['.codex', '.agents'].includes(n)), ...(tmp && fs.existsSync(tmp) ? [tmp] : [])];
      for (const n of fs.readdirSync(scene.ws)) fs.rmSync(path.join(scene.ws, n), { recursive: true, force: true });
      if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
      expect(left).toEqual([]);
    });

    it.skipIf(skip)('ROB-14: concurrent runs stay separate and clean up after themselves', async () => {
      const before = snapshot(scene.out);
      const runs = Array.from({ length: 8 }, (_, i) =>
        sh(`echo ${i} > "\${TMPDIR:-/tmp}/id"; sleep 0.1; cat "\${TMPDIR:-/tmp}/id"; echo ${i} > ${scene.ws}/out-${i}`, {
          policy: i % 2 ? policy : modePolicy(mode, { filesystem: { write: [scene.ws], denyRead: [`${scene.out}/dir`] } }),
        }),
      );
      const results = await Promise.all(runs);
      results.forEach((r, i) => {
        expect(r.code, r.stderr).toBe(0);
        expect(r.stdout.trim()).toBe(String(i)); // each run saw only its own TMPDIR
      });
      expect(fs.readdirSync(scene.ws).sort()).toEqual(Array.from({ length: 8 }, (_, i) => `out-${i}`).sort());
      expectUnchanged(before, snapshot(scene.out));
      // Killed while starting up: no leftovers either (checked in afterEach).
      const quick = Array.from({ length: 4 }, () => spawn('/bin/sleep', ['5'], { env: BASE_ENV, policy }));
      for (const q of quick) q.kill('SIGKILL');
      for (const q of quick) expect((await q.exited).signal).toBe('SIGKILL');
    });
  });

  // A dead host's TMPDIR holds whatever its command left. The first Landlock-mode spawn of a new
  // host process sweeps it: it must remove what the uid can (chmod 000 trees included) and skip
  // what it cannot, never failing that spawn. The new host's TMPDIR is a private directory, so the
  // stale tree never reaches the /tmp that other tests (and their hosts' sweeps) share.
  describe.skipIf(MODES[1]!.skip)('ROB-15: a stale TMPDIR the sweep cannot fully remove', () => {
    const stale = (hostTmp: string) => {
      // A pid that is certainly dead: a child that has exited and been reaped.
      const dead = spawnSync('/bin/true').pid!;
      const dir = path.join(hostTmp, `process-sandbox-tmp-${dead}-stale`);
      fs.mkdirSync(path.join(dir, 'a', 'b'), { recursive: true, mode: 0o700 });
      fs.writeFileSync(path.join(dir, 'a', 'b', 'f'), 'x');
      for (const p of ['a/b/f', 'a/b', 'a']) fs.chmodSync(path.join(dir, p), 0);
      return dir;
    };
    const nextHost = (scene: Scene, hostTmp: string) => {
      const script = hostScript(
        scene.root,
        'rob15.js',
        `process.on('warning', (w) => console.log('WARNING ' + w.code + ' ' + w.message));
         lib.run('/bin/true', [], { env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(modePolicy('landlock'))} })
           .then((r) => console.log('CODE ' + r.code), (e) => console.log('FAILED ' + e.message));`,
      );
      return spawnSync(NODE, [script], { encoding: 'utf8', env: { ...process.env, TMPDIR: hostTmp }, timeout: 60_000 });
    };

    it('a chmod 000 tree is removed and the spawn runs', () => {
      const scene = makeScene('rob15a');
      try {
        const hostTmp = path.join(scene.root, 'tmp');
        fs.mkdirSync(hostTmp, { mode: 0o700 });
        const dir = stale(hostTmp);
        const host = nextHost(scene, hostTmp);
        expect(host.status, host.stdout + host.stderr).toBe(0);
        expect(host.stdout).toMatch(/^CODE 0$/m);
        expect(host.stdout).not.toMatch(/WARNING/);
        expect(fs.existsSync(dir)).toBe(false);
        // (but this uid's directory for Landlock-mode TMPDIRs, left for the next run, now empty)
        expect(fs.readdirSync(hostTmp)).toEqual([`${TMP_PARENT_PREFIX}${process.getuid?.() ?? 0}`]);
        expect(fs.readdirSync(path.join(hostTmp, `${TMP_PARENT_PREFIX}${process.getuid?.() ?? 0}`))).toEqual([]);
      } finally {
        scene.cleanup();
      }
    });

    // A pid says whether a host lives only in its own pid namespace: a host in another one (a
    // container sharing /tmp, `unshare --pid`) must not remove this one's live TMPDIRs because it
    // cannot see their pid, nor this one another's. Names carry the namespace (n<inode>).
    it("the sweep leaves another pid namespace's TMPDIR alone and removes its own namespace's", () => {
      const scene = makeScene('rob15ns');
      try {
        const hostTmp = path.join(scene.root, 'tmp');
        fs.mkdirSync(hostTmp, { mode: 0o700 });
        const dead = spawnSync('/bin/true').pid!;
        const ns = /^pid:\[(\d+)\]$/.exec(fs.readlinkSync('/proc/self/ns/pid'))![1]!;
        const other = path.join(hostTmp, `process-sandbox-tmp-${dead}-n${Number(ns) + 1}-live`);
        const own = path.join(hostTmp, `process-sandbox-tmp-${dead}-n${ns}-stale`);
        for (const d of [other, own]) {
          fs.mkdirSync(d, { mode: 0o700 });
          fs.writeFileSync(path.join(d, 'f'), 'x');
        }
        const host = nextHost(scene, hostTmp);
        expect(host.stdout, host.stderr).toMatch(/^CODE 0$/m);
        // Checked on disk: the other namespace's is untouched, our own dead host's is gone.
        expect(fs.readFileSync(path.join(other, 'f'), 'utf8')).toBe('x');
        expect(fs.existsSync(own)).toBe(false);
        // And the new host's own TMPDIR names carry its namespace (removed after its run).
        expect(fs.readdirSync(hostTmp).sort()).toEqual([path.basename(other), `${TMP_PARENT_PREFIX}${process.getuid?.() ?? 0}`].sort());
      } finally {
        scene.cleanup();
      }
    });

    const chattr = ['/usr/bin/chattr', '/bin/chattr'].find((p) => fs.existsSync(p));
    const why = !caps.root ? 'needs root (chattr +i)' : !chattr ? 'no chattr on this host' : undefined;
    // eslint-disable-next-line no-console
    if (why) console.warn(`[ROB-15] SKIPPING the immutable-entry case: ${why}`);
    it.skipIf(why !== undefined)('an entry the uid cannot delete (chattr +i) is skipped with a warning; the spawn runs', () => {
      const scene = makeScene('rob15b');
      const hostTmp = path.join(scene.root, 'tmp');
      let pinned = '';
      try {
        fs.mkdirSync(hostTmp, { mode: 0o700 });
        const dir = stale(hostTmp);
        fs.mkdirSync(path.join(dir, 'imm'));
        pinned = path.join(dir, 'imm', 'pinned');
        fs.writeFileSync(pinned, 'x');
        const set = spawnSync(chattr!, ['+i', pinned], { encoding: 'utf8' });
        if (set.status !== 0) {
          // eslint-disable-next-line no-console
          console.warn(`[ROB-15] SKIPPING: chattr +i failed here: ${set.stderr}`);
          return;
        }
        // Control: the entry really cannot be removed by the uid.
        expect(() => fs.unlinkSync(pinned)).toThrow(/EPERM/);
        const host = nextHost(scene, hostTmp);
        expect(host.status, host.stdout + host.stderr).toBe(0);
        expect(host.stdout).toMatch(/^CODE 0$/m);
        expect(host.stdout).toMatch(/^WARNING PSB_CLEANUP .*stale TMPDIR.*imm\/pinned: Operation not permitted/m);
        // What could go went; what could not stays, and nothing else of it.
        expect(fs.readdirSync(dir)).toEqual(['imm']);
        expect(fs.readdirSync(path.join(dir, 'imm'))).toEqual(['pinned']);
      } finally {
        if (pinned) spawnSync(chattr!, ['-i', pinned]);
        scene.cleanup();
      }
    });
  });
});
