/**
 * What auto mode picks and what the enforcement report claims must match what holds, checked from
 * outside: a write outside the workspace, a fork storm, a memory hog across processes and the
 * cgroup's cleanup. Runs on any Linux host; on the kernel matrix's guests (scripts/kernel-matrix,
 * PSB_MATRIX_CONFIG / PSB_MATRIX_DELEGATE set) it also checks that per-sandbox cgroups are made
 * exactly where the systemd unit running the suite delegates them.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { probe, run, spawn, SandboxError } from '../../lib/index';
import { cgroupV2Refusal, killGroupMembersForTest } from '../../lib/platform/linux/cgroup';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps } from '../helpers/capabilities';
import { autoWithoutDegraded, BASE_ENV, DIST_INDEX, eventually, PYTHON, killAll, makeScene, sleepers, startForkStorm, uniqueSleep, type Scene } from '../helpers/sandbox';

const CONFIG = process.env.PSB_MATRIX_CONFIG;
const DELEGATE = process.env.PSB_MATRIX_DELEGATE; // 'yes' | 'pids' in the matrix
const inMatrix = CONFIG !== undefined && DELEGATE !== undefined;
if (!inMatrix) console.warn('[kernel-matrix] not in a kernel matrix guest: the per-row delegation checks are skipped');

/** The policy auto mode runs with here: degraded, so that it falls back when it must. */
const AUTO: SandboxPolicy = { degraded: true };
const autoMode: 'isolated' | 'landlock' | null = caps.userns ? 'isolated' : caps.landlock ? 'landlock' : null;
/** A kernel older than isolated mode's setup calls (before 5.12: Debian 11's 5.10), user namespaces or not. */
const oldKernel = caps.linux && (probe().features as Record<string, unknown>).mountApi === false;

function procCgroup(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8');
  } catch {
    return '';
  }
}

/** The v2 group directory of a process (from outside), if it sits in one of ours. */
function sandboxGroupOf(pid: number): string | undefined {
  const m = /^0::(.*\/psb-\d+-n\d+-[0-9a-f-]+)$/m.exec(procCgroup(pid));
  return m ? path.join('/sys/fs/cgroup', m[1]!) : undefined;
}

/** Host-side descendants of pid (every process whose parent chain reaches it). */
function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
      parent.set(Number(e), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      /* gone */
    }
  }
  const out: number[] = [];
  for (const pid of parent.keys()) {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) {
      if (p === root) {
        out.push(pid);
        break;
      }
    }
  }
  return out;
}

const scenes: Scene[] = [];
const markers: string[] = [];
afterAll(() => {
  for (const m of markers) killAll(m);
  for (const s of scenes) s.cleanup();
});

describe.runIf(caps.linux)(`kernel matrix${CONFIG ? ` (${CONFIG}, uid ${process.getuid?.()})` : ''}: the report matches what holds`, () => {
  it('auto mode picks what the report says; a write outside the workspace is refused (and one inside is not)', async () => {
    const scene = makeScene('km-auto');
    scenes.push(scene);
    const script = `echo in > ${scene.ws}/in; echo out > ${scene.out}/written; exit 0`;
    const policy: SandboxPolicy = { filesystem: { write: [scene.ws] } };
    if (oldKernel) {
      // Isolated mode is refused by name (before, every spawn failed in its mount setup), and
      // without Landlock auto mode has no fallback either; nothing runs.
      for (const p of [policy, { ...policy, mode: 'isolated' as const }]) {
        const err = await run('/bin/sh', ['-c', script], { env: BASE_ENV, policy: p }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(SandboxError);
        expect(err).toMatchObject({ code: 'ENOT_ENFORCED', message: expect.stringMatching(/isolated mode needs Linux 5\.12/) });
        expect(fs.existsSync(`${scene.ws}/in`)).toBe(false);
      }
    } else if (!caps.userns && autoMode === 'landlock') {
      // Without degraded the fallback runs when every guarantee asked for holds in Landlock mode,
      // and is refused naming exactly those that do not (nothing runs then).
      const ran = await autoWithoutDegraded(script, policy, `${scene.ws}/in`);
      if (ran) fs.rmSync(`${scene.ws}/in`);
      expect(fs.existsSync(`${scene.out}/written`)).toBe(false);
    }
    if (autoMode === null) {
      // Neither user namespaces nor Landlock: even degraded there is nothing to sandbox with.
      const err = await run('/bin/sh', ['-c', script], { env: BASE_ENV, policy: { ...policy, ...AUTO } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SandboxError);
      expect((err as Error).message).toMatch(/[Ll]andlock/);
      expect(fs.existsSync(`${scene.ws}/in`)).toBe(false);
      expect(fs.existsSync(`${scene.out}/written`)).toBe(false);
      return;
    }
    const r = await run('/bin/sh', ['-c', script], { env: BASE_ENV, policy: { ...policy, ...AUTO } });
    expect(r.enforcement).toMatchObject({ sandboxed: true, mode: autoMode });
    if (autoMode === 'landlock') {
      // The fallback says so: Landlock named as the mechanism, its gaps listed (before ABI 3 a
      // truncate outside the writable roots is one unless the path supervisor carries truncation
      // out: file-system writes are then "partial").
      expect(r.enforcement.mechanisms.landlockAbi).toBe(caps.landlockAbi);
      expect(r.enforcement.gaps.length).toBeGreaterThan(0);
      const truncationHeld = caps.landlockAbi >= 3 || caps.metadataSupervisor;
      expect(r.enforcement.guarantees.filesystemWrite).toBe(truncationHeld ? 'enforced' : 'partial');
      if (truncationHeld) expect(r.enforcement.gaps.join('\n')).not.toMatch(/truncated/);
      else expect(r.enforcement.gaps.join('\n')).toMatch(/truncated/);
    } else {
      expect(r.enforcement.guarantees.filesystemWrite).toBe('enforced');
      expect(r.enforcement.gaps).toEqual([]);
      // Landlock is claimed exactly when the kernel has it (defence in depth in isolated mode).
      expect(r.enforcement.mechanisms).toMatchObject({ landlock: caps.landlockAbi >= 1, landlockAbi: caps.landlockAbi });
    }
    // Outside: the write inside landed (the positive control), the one outside did not.
    expect(fs.readFileSync(`${scene.ws}/in`, 'utf8')).toBe('in\n');
    expect(fs.existsSync(`${scene.out}/written`)).toBe(false);
    // Control: unsandboxed, the same script writes outside.
    await run('/bin/sh', ['-c', script], { env: BASE_ENV, policy: null });
    expect(fs.existsSync(`${scene.out}/written`)).toBe(true);
  });

  it.runIf(!caps.landlock)('without Landlock, what needs it is refused by name and nothing runs', async () => {
    const scene = makeScene('km-noll');
    scenes.push(scene);
    const touch = ['-c', `touch ${scene.ws}/ran`];
    const policies: SandboxPolicy[] = [
      { mode: 'landlock', degraded: true, filesystem: { write: [scene.ws] } },
      { ...AUTO, filesystem: { write: [scene.ws], read: [scene.ws] } },
    ];
    for (const policy of policies) {
      const err = await run('/bin/sh', touch, { env: BASE_ENV, policy }).catch((e: unknown) => e);
      expect(err, JSON.stringify(policy)).toBeInstanceOf(SandboxError);
      expect(err).toMatchObject({ code: caps.userns || policy.mode === 'landlock' ? 'ELANDLOCK_UNSUPPORTED' : expect.stringMatching(/^E/) });
      expect(fs.existsSync(`${scene.ws}/ran`)).toBe(false);
    }
    // Control: the same command with a policy isolated mode enforces alone runs (where it can).
    if (caps.userns) {
      const r = await run('/bin/sh', touch, { env: BASE_ENV, policy: { filesystem: { write: [scene.ws] } } });
      expect(r.enforcement.mechanisms.landlock).toBe(false);
      expect(fs.existsSync(`${scene.ws}/ran`)).toBe(true);
    }
  });

  it.skipIf(autoMode === null || !caps.python)('a fork storm stops at the process cap the report names, counted from outside', async () => {
    const marker = uniqueSleep();
    markers.push(marker);
    const cap = 24;
    // 80 attempts, counted by the host while the storm stays up.
    const { child, out: stormOut, peak } = await startForkStorm(80, marker, { env: BASE_ENV, policy: { ...AUTO, limits: { maxProcesses: cap } } }, { start: 60_000, settle: 10_000 });
    const out = stormOut();
    const group = child.pid !== undefined ? descendants(child.pid).map(sandboxGroupOf).find(Boolean) : undefined;
    const capName = child.enforcement.mechanisms.processCap as string;
    child.stdin!.end();
    await child.exited;
    killAll(marker);
    if (capName === 'none') {
      // Not capped, and said so: the whole storm ran.
      expect(child.enforcement.gaps.join('\n')).toMatch(/not capped/);
      expect(peak).toBe(80);
    } else {
      expect(capName).toMatch(
        new RegExp(`cgroup v[12] pids\\.max ${cap}|RLIMIT_NPROC ${cap}|RLIMIT_NPROC \\d+ \\(the uid's \\d+ tasks at spawn \\+ ${cap}:|traced by init: ${cap} tasks`),
      );
      // Landlock mode without a cgroup: the bound is uid-wide (the uid's count at spawn plus the
      // cap), so tasks of the uid that end meanwhile leave the storm room beyond `cap`.
      const uidWide = /^RLIMIT_NPROC (\d+) \(the uid's/.exec(capName);
      expect(peak, `${out} (${capName})`).toBeLessThanOrEqual(uidWide ? Number(uidWide[1]) : cap);
      if (capName.startsWith("cgroup v2")) {
        expect(peak).toBeGreaterThan(0);
        // The command sat in a per-sandbox group, and that group is empty (or gone) afterwards.
        expect(group, 'the storm ran in a psb- group').toBeDefined();
        expect(await eventually(() => !fs.existsSync(group!) || fs.readFileSync(path.join(group!, 'cgroup.procs'), 'utf8').trim() === '')).toBe(true);
      }
    }
  });

  it.skipIf(autoMode === null || !caps.python)('a memory hog spread over processes is killed at a memory cgroup cap, and only the per-process limit holds without one', async () => {
    const scene = makeScene('km-mem');
    scenes.push(scene);
    // Three processes of 40 MiB each against a 96 MiB cap: each fits RLIMIT_AS, all three do not
    // fit one memory cgroup. Each marks its allocation, then waits (bounded) for the other two.
    const hog = (i: number) =>
      `${PYTHON} -c "import os, time; b = b'x' * (40 << 20); open('held.${i}', 'w').close(); n = 0\nwhile len([f for f in os.listdir('.') if f.startswith('held')]) < 3 and n < 200: time.sleep(0.1); n += 1"`;
    const script = `${hog(1)} & a=$!; ${hog(2)} & b=$!; ${hog(3)} & c=$!; wait $a; x=$?; wait $b; y=$?; wait $c; z=$?; echo "status $x $y $z"`;
    const r = await run('/bin/sh', ['-c', script], { env: BASE_ENV, cwd: scene.ws, policy: { ...AUTO, filesystem: { write: [scene.ws] }, limits: { memoryBytes: 96 << 20 } } });
    const memoryCap = r.enforcement.mechanisms.memoryCap as string;
    const statuses = (/status (\d+) (\d+) (\d+)/.exec(r.stdout) ?? []).slice(1).map(Number);
    if (memoryCap.startsWith('cgroup')) {
      expect(memoryCap).toMatch(/^cgroup v[12] memory 100663296 bytes/);
      // The OOM killer ended at least one of them (SIGKILL: 128 + 9), inside the sandbox only.
      if (statuses.length === 3) expect(statuses.some((s) => s === 137), r.stdout).toBe(true);
      else expect(r.signal ?? r.exitCode).toBeTruthy();
    } else {
      // Not claimed, and not held: all three allocated and finished.
      expect(memoryCap).toMatch(/^RLIMIT_AS per process only/);
      expect(r.enforcement.gaps.join('\n')).toMatch(/per process \(RLIMIT_AS\)/);
      expect(statuses, r.stdout + r.stderr).toEqual([0, 0, 0]);
    }
    // Control: a single process over the per-process limit fails either way.
    const big = await run(PYTHON, ['-c', "b = b'x' * (128 << 20); print(len(b))"], { env: BASE_ENV, policy: { ...AUTO, limits: { memoryBytes: 96 << 20 } } });
    expect(big.stdout.trim()).not.toBe('134217728');
  });

  it.skipIf(!inMatrix || autoMode === null)(`per-sandbox cgroups are made where the unit delegates them (Delegate=${DELEGATE ?? '-'})`, async () => {
    const r = await run('/bin/cat', ['/proc/self/cgroup'], { env: BASE_ENV, policy: { ...AUTO, limits: { memoryBytes: 256 << 20 } } });
    const own = `${fs.readFileSync('/proc/self/cgroup', 'utf8').trim()}: ${cgroupV2Refusal() ?? 'no refusal'}`;
    const m = r.enforcement.mechanisms;
    expect(m.processCap, own).toMatch(/^cgroup v2 pids\.max \d+$/);
    if (DELEGATE === 'yes') expect(m.memoryCap, own).toMatch(/^cgroup v2 memory 268435456 bytes/);
    else {
      expect(m.memoryCap, own).toMatch(/^RLIMIT_AS per process only/);
      expect(r.enforcement.gaps.join('\n')).toMatch(/without a memory cgroup/);
    }
    // The command ran in a psb- group below this host's unit, not in the unit itself.
    expect(r.stdout).toMatch(/^0::\/.*\.(service|scope)\/psb-\d+-n\d+-[0-9a-f-]+$/m);
  });

  // (Where nothing can sandbox, the first test checks the refusal.)
  it.skipIf(!inMatrix || autoMode === null)('a host in a unit that does not delegate: root makes a group of its own, a user is capped by RLIMIT_NPROC, and the report says which', () => {
    // The same host code, run as a child in a transient scope without Delegate= (as a session
    // scope or an ordinary service is).
    const code = `const { run } = require(${JSON.stringify(DIST_INDEX)}); run('/bin/cat', ['/proc/self/cgroup'], { env: { PATH: '/usr/bin:/bin' }, policy: { degraded: true, limits: { memoryBytes: 268435456 } } }).then((r) => console.log(JSON.stringify({ cg: r.stdout, host: require('fs').readFileSync('/proc/self/cgroup', 'utf8'), m: r.enforcement.mechanisms, gaps: r.enforcement.gaps })), (e) => console.log(JSON.stringify({ error: String(e) })))`;
    const args = [...(caps.root ? [] : ['--user']), '--scope', '--quiet', '-p', 'Delegate=no', '--', process.execPath, '-e', code];
    const out = JSON.parse(execFileSync('systemd-run', args, { encoding: 'utf8', timeout: 120_000 }).trim().split('\n').pop()!) as {
      cg: string;
      host: string;
      m: Record<string, unknown>;
      gaps: string[];
      error?: string;
    };
    expect(out.error).toBeUndefined();
    expect(out.host).toMatch(/^0::\/.*\.scope$/m);
    if (caps.root) {
      // RLIMIT_NPROC does not bind uid 0: root makes <cgroup2>/process-sandbox, beside systemd's
      // slices, and the sandbox's group goes below it (linux/cgroup.ts rootOwnParent).
      expect(out.m.processCap).toMatch(/^cgroup v2 pids\.max 4096$/);
      expect(out.cg).toMatch(/^0::\/process-sandbox\/psb-\d+-n\d+-[0-9a-f-]+$/m);
      expect(out.gaps.join('\n')).not.toMatch(/not capped/);
      return;
    }
    expect(out.cg).not.toMatch(/psb-/);
    expect(out.m.memoryCap).toMatch(/^RLIMIT_AS per process only/);
    if (caps.userns) {
      expect(out.m.processCap).toMatch(/^RLIMIT_NPROC \d+ \(counted in the sandbox user namespace\)$/);
    } else {
      // Landlock mode: RLIMIT_NPROC counts all of the uid's tasks: the count at spawn plus the cap.
      expect(out.m.processCap).toMatch(/^RLIMIT_NPROC \d+ \(the uid's \d+ tasks at spawn \+ 4096: /);
    }
  });

  it.skipIf(autoMode === null)('without cgroup.kill (kernels before 5.14) the freeze-and-kill fallback empties a group that keeps forking', async () => {
    const marker = uniqueSleep();
    markers.push(marker);
    const child = spawn('/bin/sh', ['-c', `while :; do sleep ${marker} </dev/null >/dev/null 2>&1 & sleep 0.05; done`], { env: BASE_ENV, policy: AUTO });
    expect(await eventually(() => sleepers(marker).length >= 3, 60_000)).toBe(true);
    const group = child.pid !== undefined ? [child.pid, ...descendants(child.pid)].map(sandboxGroupOf).find(Boolean) : undefined;
    if (!group) {
      console.warn(`[kernel-matrix] SKIPPING the fallback kill check: no v2 sandbox group here (${child.enforcement.mechanisms.processCap})`);
      child.kill('SIGKILL');
      await child.exited;
      killAll(marker);
      return;
    }
    killGroupMembersForTest(group, false);
    expect(await eventually(() => fs.readFileSync(path.join(group, 'cgroup.procs'), 'utf8').trim() === '' && sleepers(marker).length === 0)).toBe(true);
    // Not left frozen (a pooled group is reused).
    if (fs.existsSync(group)) expect(fs.readFileSync(path.join(group, 'cgroup.freeze'), 'utf8').trim()).toBe('0');
    await child.exited;
  });
});
