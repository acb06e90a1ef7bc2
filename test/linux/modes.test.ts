/**
 * Mode selection, fail-closed refusals and the enforcement report, as seen through the public API;
 * plus the tmp modes (private / host / none) with their host-side effects.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { probe, run, SandboxError, spawn } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { autoWithoutDegraded, BASE_ENV, expectNoMountLeak, hostMounts, makeScene, probeOps, sh, type Scene } from '../helpers/sandbox';

describe.runIf(caps.linux)('modes and reports', () => {
  it('probe() answers without spawning and agrees with the capabilities', () => {
    const p = probe();
    expect(p.platform).toBe('linux');
    expect(p.addonLoaded).toBe(true);
    const f = p.features as Record<string, unknown>;
    expect(typeof f.landlockAbi).toBe('number');
    expect(f.isolatedMode).toBe(caps.userns);
    // The mode auto picks (README): Landlock mode when only it can enforce (degraded), else none.
    expect(p.defaultMode).toBe(caps.userns ? 'isolated' : caps.landlock ? 'landlock' : null);
  });

  it.runIf(caps.userns)('the default policy (auto) runs in isolated mode, with the documented defaults', async () => {
    const scene = makeScene('modes-default');
    try {
      const r = await run('/bin/sh', ['-c', 'echo x > f; echo write=$?; ls -A /tmp | wc -l'], { cwd: scene.ws, env: BASE_ENV });
      expect(r.enforcement).toMatchObject({
        sandboxed: true,
        mode: 'isolated',
        mechanisms: { seccomp: 'filter', noNewPrivs: true, namespaces: expect.arrayContaining(['user', 'mnt', 'pid', 'ipc', expect.stringMatching(/^net/)]) },
        guarantees: { filesystemWrite: 'enforced', network: 'enforced', processIsolation: 'enforced', treeTeardown: 'enforced' },
        gaps: [],
      });
      // Default: read all, write nothing (not even the cwd), private empty /tmp.
      expect(r.stdout).toMatch(/write=[1-9]/);
      expect(r.stdout).toMatch(/\n0\n$/);
      expect(fs.existsSync(`${scene.ws}/f`)).toBe(false);
    } finally {
      scene.cleanup();
    }
  });

  it.runIf(!caps.userns)('without user namespaces auto mode needs degraded only for what Landlock mode cannot hold (fail closed), naming it', async () => {
    // A kernel before 5.12 (no mount_setattr) cannot run isolated mode even with user namespaces.
    const oldKernel = (probe().features as Record<string, unknown>).mountApi === false;
    if (oldKernel || !caps.landlock) {
      await expect(run('/bin/true', [], { env: BASE_ENV })).rejects.toMatchObject(
        oldKernel
          ? { code: 'ENOT_ENFORCED', message: expect.stringMatching(/isolated mode needs Linux 5\.12.*upgrade the kernel/) }
          : { code: 'EUSERNS_UNAVAILABLE', message: expect.stringMatching(/Landlock/) },
      );
      return;
    }
    const scene = makeScene('modes-auto');
    try {
      await autoWithoutDegraded(`touch ${scene.ws}/ran`, { filesystem: { write: [scene.ws] } }, `${scene.ws}/ran`);
      // A guarantee Landlock mode never holds is refused by name, whatever this host has.
      const err = await sh(`touch ${scene.ws}/ran2`, { policy: { filesystem: { write: [scene.ws, '/proc'] } } }).catch((e: unknown) => e);
      // Where user namespaces work but a fresh /proc cannot be mounted (masked paths over /proc:
      // rootless Podman), that is named instead, with the code of an unenforceable mode.
      const procfsRefused = (probe().features as Record<string, unknown>).procfs === false;
      expect(err).toMatchObject({ code: procfsRefused ? 'ENOT_ENFORCED' : 'EUSERNS_UNAVAILABLE' });
      expect((err as Error).message).toMatch(/a writable root covers \/proc.*degraded/);
      if (procfsRefused) expect((err as Error).message).toMatch(/^procfs cannot be mounted in a nested pid namespace here/);
      expect(fs.existsSync(`${scene.ws}/ran2`)).toBe(false);
    } finally {
      scene.cleanup();
    }
  });

  it.runIf(caps.landlock)('Landlock mode needs degraded exactly for the requested guarantees it cannot hold, and names those', async () => {
    const scene = makeScene('modes-ll');
    try {
      const policy: SandboxPolicy = { mode: 'landlock', filesystem: { write: [scene.ws], denyRead: [`${scene.out}/dir`] } };
      const r = await run('/bin/true', [], { env: BASE_ENV, policy: { ...policy, degraded: true } });
      expect(r.enforcement.mode).toBe('landlock');
      expect(r.enforcement.mechanisms).toMatchObject({ landlockAbi: caps.landlockAbi, seccomp: 'filter', noNewPrivs: true });
      const degradedBy = r.enforcement.degradedBy!;
      expect(Array.isArray(degradedBy)).toBe(true);
      // Every gap that needed degraded is in the report; the mode's facts (/dev/shm) never need it.
      for (const g of degradedBy) expect(r.enforcement.gaps).toContain(g);
      expect(r.enforcement.gaps.join('\n')).toMatch(/\/dev\/shm/);
      expect(degradedBy.join('\n')).not.toMatch(/\/dev\/shm|\/tmp itself/);
      // Carve-outs (.codex, .agents, .aws here) are held by the path supervisor where it exists.
      expect(r.enforcement.guarantees.protectedPaths).toBe(caps.metadataSupervisor ? 'enforced' : 'not-enforced');
      if (caps.metadataSupervisor) expect(r.enforcement.gaps.join('\n')).not.toMatch(/carve-outs/);
      else expect(degradedBy.join('\n')).toMatch(/carve-outs/);
      // Deny-read is carved out of the Landlock rules; without the supervisor the names inside a
      // denied directory can still be listed, and that is the gap.
      expect(r.enforcement.guarantees.denyRead).toBe(caps.listSupervised ? 'enforced' : 'partial');
      if (caps.listSupervised) expect(r.enforcement.gaps.join('\n')).not.toContain(`${scene.out}/dir`);
      else expect(degradedBy.join('\n')).toContain(`names inside deny-read directories can be listed (not read): ${scene.out}/dir`);
      // Metadata changes are a gap only where no seccomp supervisor carries them out.
      if (caps.connectSupervisor) expect(r.enforcement.mechanisms.metadataSupervisor).toBe('seccomp-user-notif');
      else expect(degradedBy.join('\n')).toMatch(/chmod, chown, utime and xattr/);
      // Without degraded: refused naming exactly those gaps, or run with the same report.
      const plain = await run('/bin/sh', ['-c', `touch ${scene.ws}/ran`], { env: BASE_ENV, policy }).catch((e: unknown) => e);
      if (degradedBy.length > 0) {
        expect(plain).toBeInstanceOf(SandboxError);
        expect((plain as SandboxError).code).toBe('EUNSUPPORTED_POLICY');
        expect((plain as Error).message).toMatch(/degraded/);
        for (const g of degradedBy) expect((plain as Error).message).toContain(g);
        expect((plain as Error).message).not.toMatch(/\/dev\/shm/);
        expect(fs.existsSync(`${scene.ws}/ran`)).toBe(false); // nothing ran
      } else {
        expect(plain).not.toBeInstanceOf(Error);
        expect(fs.existsSync(`${scene.ws}/ran`)).toBe(true);
      }
      // A requested guarantee Landlock mode never holds (a writable root over /proc would hand
      // the command the host's own /proc files) is refused without degraded, by name, and runs
      // with it (control).
      const procPolicy: SandboxPolicy = { mode: 'landlock', filesystem: { write: [scene.ws, '/proc'] } };
      const err = await run('/bin/sh', ['-c', `touch ${scene.ws}/ran2`], { env: BASE_ENV, policy: procPolicy }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SandboxError);
      expect((err as SandboxError).code).toBe('EUNSUPPORTED_POLICY');
      expect((err as Error).message).toMatch(/a writable root covers \/proc/);
      expect(fs.existsSync(`${scene.ws}/ran2`)).toBe(false);
      const ok = await run('/bin/sh', ['-c', `touch ${scene.ws}/ran2`], { env: BASE_ENV, policy: { ...procPolicy, degraded: true } });
      expect(ok.code).toBe(0);
      expect(ok.enforcement.degradedBy!.join('\n')).toMatch(/a writable root covers \/proc/);
      expect(fs.existsSync(`${scene.ws}/ran2`)).toBe(true);
    } finally {
      scene.cleanup();
    }
  });

  // Regression seen at 8d658ed: Landlock rules for /dev/stdin, /dev/stdout, /dev/stderr and
  // /dev/fd are opened (O_PATH, following the links) in the child, where they resolve to its own
  // stdio; a pipe or socket there lives on an internal mount and landlock_add_rule(2) answers
  // EBADFD, so every spawn with piped stdio failed with "landlock_restrict_self(2) failed: EBADFD".
  it.runIf(caps.landlock)('Landlock mode spawns with piped, ignored and inherited-file stdio', async () => {
    const policy: SandboxPolicy = { mode: 'landlock', degraded: true };
    for (const stdio of [['pipe', 'pipe', 'pipe'], ['ignore', 'pipe', 'ignore'], ['ignore', 'ignore', 'ignore']] as const) {
      const r = await run('/bin/sh', ['-c', 'echo ok'], { env: BASE_ENV, policy, stdio: [...stdio] });
      expect(r.code, JSON.stringify(stdio)).toBe(0);
    }
  });

  it('policy: null runs unsandboxed and says so', async () => {
    const r = await run('/bin/cat', ['/proc/self/status'], { env: BASE_ENV, policy: null });
    expect(r.enforcement).toMatchObject({ sandboxed: false, mode: 'none' });
    expect(r.enforcement.gaps.length).toBeGreaterThan(0);
    // No filter of ours: the child has exactly the filters this process has (none on a host; a
    // container's runtime installs its own, which every process in it inherits).
    const filters = (status: string) => /^Seccomp_filters:\s+(\d+)$/m.exec(status)?.[1] ?? /^Seccomp:\s+(\d+)$/m.exec(status)?.[1];
    const own = filters(fs.readFileSync('/proc/self/status', 'utf8'));
    expect(own).toBeDefined();
    expect(filters(r.stdout)).toBe(own);
  });

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    const mounts = hostMounts();
    beforeEach(() => {
      scene = makeScene(`modes-${mode}`);
    });
    afterEach(() => {
      scene.cleanup();
      expectNoMountLeak(mounts, [scene.root]);
    });

    it.skipIf(skip)('spawn() and run() report the same mode; network full is reported as not requested', async () => {
      const policy = modePolicy(mode, { network: 'full', filesystem: { write: [scene.ws] } });
      const child = spawn('/bin/true', [], { env: BASE_ENV, policy });
      expect(child.enforcement.mode).toBe(mode);
      expect(typeof child.pid).toBe('number');
      await child.exited;
      const r = await run('/bin/true', [], { env: BASE_ENV, policy });
      // (Landlock mode without a cgroup, unprivileged: the cap is the uid's task count at spawn
      // plus the cap, and that count moves between two spawns.)
      const sameCap = (e: typeof r.enforcement) => ({
        ...e,
        mechanisms: { ...e.mechanisms, processCap: String(e.mechanisms.processCap).replace(/\d+/g, 'N') },
        limits: { ...e.limits!, maxProcesses: e.limits?.maxProcesses === null ? null : 'N' },
      });
      expect(sameCap(r.enforcement)).toEqual(sameCap(child.enforcement));
      expect(r.enforcement.guarantees.network).toBe('not-requested');
      if (mode === 'isolated') expect((r.enforcement.mechanisms.namespaces as string[]).filter((n) => n.startsWith('net'))).toEqual([]);
    });

    it.skipIf(skip)("tmp 'private': writable, empty of host files, gone after the run", async () => {
      const hostFile = path.join(os.tmpdir(), `psb-modes-host-${process.pid}`);
      fs.writeFileSync(hostFile, 'host');
      try {
        const r = await sh('d=${TMPDIR:-/tmp}; echo $d; echo mine > "$d/private-file" && cat "$d/private-file"; cat ' + hostFile + ' 2>/dev/null; true', {
          cwd: scene.ws,
          policy: modePolicy(mode, { filesystem: { write: [scene.ws], tmp: 'private' } }),
        });
        const [dir, content, ...rest] = r.stdout.trim().split('\n');
        expect(content).toBe('mine');
        if (mode === 'isolated') expect(rest).toEqual([]); // the host /tmp is hidden
        // The private dir (Landlock: a per-run host dir) does not outlive the run.
        expect(fs.existsSync(`${dir}/private-file`)).toBe(false);
        expect(fs.readFileSync(hostFile, 'utf8')).toBe('host');
      } finally {
        fs.rmSync(hostFile, { force: true });
      }
    });

    it.skipIf(skip)("tmp 'host': the host /tmp is writable (and only then)", async () => {
      const name = path.join('/tmp', `psb-modes-${process.pid}-${Date.now()}`);
      try {
        const r = await probeOps([['write', name, 'from-sandbox']], { cwd: scene.ws, policy: modePolicy(mode, { filesystem: { write: [scene.ws], tmp: 'host' } }) });
        expect(r).toEqual(['ok']);
        expect(fs.readFileSync(name, 'utf8')).toBe('from-sandbox');
      } finally {
        fs.rmSync(name, { force: true });
      }
    });

    it.skipIf(skip)("tmp 'none': /tmp is read-only", async () => {
      const name = path.join('/tmp', `psb-modes-none-${process.pid}`);
      const r = await probeOps([['write', name, 'x']], { cwd: scene.ws, policy: modePolicy(mode, { filesystem: { write: [scene.ws], tmp: 'none' } }) });
      expect(['EROFS', 'EACCES']).toContain(r[0]);
      expect(fs.existsSync(name)).toBe(false);
    });

    it.skipIf(skip)('a writable root under /tmp stays writable and visible with a private /tmp', async () => {
      const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-modes-tmpws-'));
      try {
        fs.writeFileSync(path.join(ws, 'seed'), 'seed');
        const r = await sh('cat seed && echo out > made', { cwd: ws, policy: modePolicy(mode, { filesystem: { write: [ws] } }) });
        expect(r.stdout).toBe('seed');
        expect(fs.readFileSync(path.join(ws, 'made'), 'utf8')).toBe('out\n');
      } finally {
        fs.rmSync(ws, { recursive: true, force: true });
      }
    });

    // Read roots are Landlock rules in both modes; without Landlock they are refused (kernel-matrix.test.ts).
    it.skipIf(skip || !caps.landlock)('read roots: only the listed roots (plus the platform) are readable', async () => {
      const policy = modePolicy(mode, { filesystem: { read: [scene.ws, path.dirname(process.execPath), path.resolve(__dirname, '..', '..')], write: [scene.ws] } });
      fs.writeFileSync(`${scene.ws}/in.txt`, 'in');
      fs.writeFileSync(`${scene.ws}/in.txt`, 'in');
      const hostReadable = (p: string) => {
        try {
          fs.accessSync(p, fs.constants.R_OK);
          return fs.statSync(p).isFile();
        } catch {
          return false;
        }
      };
      const etcOutside = ['/etc/fstab', '/etc/machine-id', '/etc/login.defs'].filter(hostReadable);
      const r = await probeOps(
        [['read', `${scene.ws}/in.txt`], ['read', `${scene.out}/secret.txt`], ['read', '/etc/passwd'], ...etcOutside.map((p) => ['read', p])],
        { cwd: scene.ws, policy },
      );
      expect(r[0]).toBe('ok:in');
      expect(['EACCES', 'ENOENT']).toContain(r[1]);
      expect(r[2]!.startsWith('ok')).toBe(true); // the documented /etc platform set
      // The rest of /etc is not (checked outside: these files exist and the host can read them).
      r.slice(3).forEach((x, i) => expect(x, etcOutside[i]).toBe('EACCES'));
      const report = await run('/bin/true', [], { env: BASE_ENV, policy });
      // Partial where nothing checks inotify watches against the read roots (landlock-holes FS-19).
      expect(report.enforcement.guarantees.filesystemRead).toBe(mode === 'landlock' && caps.connectSupervisor ? 'enforced' : 'partial');
      // The report says exactly what else is readable.
      const extra = report.enforcement.mechanisms.platformReads as string[];
      expect(extra).toEqual(expect.arrayContaining(['/usr', '/etc/passwd', '/bin/true']));
      expect(extra).not.toContain('/etc');
      for (const p of etcOutside) expect(extra).not.toContain(p);
    });

    it.skipIf(skip || !caps.landlock)('read roots: a cwd outside them is not made readable', async () => {
      const policy = modePolicy(mode, { filesystem: { read: [scene.ws, path.dirname(process.execPath), path.resolve(__dirname, '..', '..')], write: [scene.ws] } });
      const r = await probeOps([['read', `${scene.out}/secret.txt`], ['readdir', scene.out]], { cwd: scene.out, policy });
      r.forEach((x) => expect(['EACCES', 'ENOENT']).toContain(x));
      // Control: with the cwd listed, the same reads work.
      const allow = modePolicy(mode, { filesystem: { read: [scene.ws, scene.out, path.dirname(process.execPath), path.resolve(__dirname, '..', '..')], write: [scene.ws] } });
      const ok = await probeOps([['read', `${scene.out}/secret.txt`]], { cwd: scene.out, policy: allow });
      expect(ok).toEqual(['ok:top secret']);
    });
  });
});
