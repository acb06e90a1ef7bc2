/**
 * Process and kernel-surface threat classes (reference/threats.md PROC-01..PROC-24) in both
 * Linux modes. Each attempt runs for real inside the sandbox; the paired control runs the same
 * probe unsandboxed (or with the rule allowing it) and must succeed. Outside state (files, host
 * processes, SysV IPC objects) is checked afterwards.
 */
import { execFileSync, spawn as spawnHost, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { probe, run } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import {
  BASE_ENV,
  expectNoProcess,
  eventually,
  expectUnchanged,
  hostScript,
  killAll,
  makeScene,
  NODE,
  pidsWith,
  probeOps,
  py,
  PYTHON,
  sh,
  sleepers,
  snapshot,
  syscallProbe,
  uniqueSleep,
  type Scene,
} from '../helpers/sandbox';
import { parseTrySyscall } from '../helpers/try-syscall';

async function tryProbe(policy: SandboxPolicy | null, args: string[], cwd = '/') {
  const r = await run(syscallProbe(), args, { cwd, env: BASE_ENV, policy, timeout: 30_000 });
  return { ...r, result: parseTrySyscall(r.stdout) };
}

function statusField(status: string, field: string): string {
  const m = new RegExp(`^${field}:\\s*(\\S+)`, 'm').exec(status);
  return m ? m[1]! : '<missing>';
}

/** Seccomp filters this test process is under already: 0 on a host, a container runtime's in one. */
const ownFilters = Number(statusField(fs.readFileSync('/proc/self/status', 'utf8'), 'Seccomp_filters')) || 0;

/**
 * A control run unsandboxed must reach the kernel, unless this process is itself under a
 * runtime's seccomp filter (Docker's default profile refuses clone3, keyctl, process_vm_readv and
 * user namespaces, for instance): then the call is refused for every process here, the control
 * cannot be made, and it is skipped loudly, naming the refusal.
 */
function expectControl(c: { result: ReturnType<typeof parseTrySyscall>; stdout: string; stderr: string }, what: string): void {
  if (ownFilters > 0 && (c.result === null || (!c.result.ok && ['EPERM', 'ENOSYS'].includes(c.result.errno ?? '')))) {
    console.warn(`[threats-proc] SKIPPING the ${what} control: this process's own seccomp filter (a container runtime's) refuses it as well: ${c.result?.errno ?? (c.stdout + c.stderr).trim()}`);
    return;
  }
  expect(c.result?.ok, `${what} control: ${c.stdout}${c.stderr}`).toBe(true);
}

describe.runIf(caps.linux)('process and kernel-surface threats', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    let policy: SandboxPolicy;
    const isolated = mode === 'isolated';
    const markers: string[] = [];

    beforeEach(() => {
      scene = makeScene(`proc-${mode}`);
      policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
    });
    afterEach(() => {
      for (const m of markers.splice(0)) killAll(m);
      scene.cleanup();
    });

    it.skipIf(skip)('capabilities are gone, no_new_privs is set, seccomp is in filter mode', async () => {
      const r = await run('/bin/cat', ['/proc/self/status'], { env: BASE_ENV, policy });
      const st = r.stdout;
      for (const f of ['CapInh', 'CapPrm', 'CapEff', 'CapAmb']) expect(statusField(st, f), f).toBe('0000000000000000');
      if (isolated || caps.root) {
        expect(statusField(st, 'CapBnd')).toBe('0000000000000000');
      } else {
        // Unprivileged Landlock mode cannot empty the bounding set; it must say so.
        expect(r.enforcement.gaps.join('\n')).toMatch(/bounding set cannot be emptied/);
      }
      expect(statusField(st, 'NoNewPrivs')).toBe('1');
      expect(statusField(st, 'Seccomp')).toBe('2');
      // Control: unsandboxed, a child has only this process's own filters (none on a host; a
      // container runtime's, which every process in it inherits) and no no_new_privs.
      const own = fs.readFileSync('/proc/self/status', 'utf8');
      const ctl = await run('/bin/cat', ['/proc/self/status'], { env: BASE_ENV, policy: null });
      expect(statusField(ctl.stdout, 'Seccomp')).toBe(statusField(own, 'Seccomp'));
      expect(statusField(ctl.stdout, 'Seccomp_filters')).toBe(statusField(own, 'Seccomp_filters'));
      expect(statusField(ctl.stdout, 'NoNewPrivs')).toBe('0');
      // The sandbox added a filter of its own (Seccomp_filters: Linux 5.9 and later).
      if (/^Seccomp_filters:/m.test(own)) expect(Number(statusField(st, 'Seccomp_filters'))).toBeGreaterThan(Number(statusField(own, 'Seccomp_filters')));
    });

    it.skipIf(skip || !caps.python)('PROC-01/PROC-02/PROC-03: no TIOCSTI or TIOCLINUX, even on an inherited terminal', async () => {
      // A host pty whose slave becomes the sandbox's stdin. Inside, the command (a session leader
      // after setsid) tries to make it its controlling tty and push "id\n" into its input queue.
      const inject =
        'import fcntl,termios,os\n' +
        'try:\n  os.setsid()\nexcept OSError:\n  pass\n' +
        'try:\n  fcntl.ioctl(0, termios.TIOCSCTTY, 0)\nexcept OSError:\n  pass\n' +
        'out=[]\n' +
        'for req in (termios.TIOCSTI, termios.TIOCSTI | (1<<32)):\n' +
        '  try:\n    fcntl.ioctl(0, req, b"X"); out.append("ok")\n  except (OSError, OverflowError) as e:\n    out.append(str(getattr(e,"errno",e)))\n' +
        'try:\n  fcntl.ioctl(0, 0x541C, bytes([2,0,0,0,0,0,0,0,0,0])); out.append("ok")\nexcept OSError as e:\n  out.append(str(e.errno))\n' +
        'print(" ".join(out))\n';
      const driver = hostScript(
        scene.root,
        'tty-driver.js',
        `const [fd, pol, code] = [Number(process.argv[2]), JSON.parse(process.argv[3]), process.argv[4]];
         const go = pol === null
           ? new Promise((res) => { const c = require('child_process').spawn(${JSON.stringify(PYTHON)}, ['-c', code], { stdio: [fd, 'pipe', 'inherit'] }); let o=''; c.stdout.on('data', (b) => o += b); c.on('close', () => res({ stdout: o })); })
           : lib.run(${JSON.stringify(PYTHON)}, ['-c', code], { stdio: [fd, 'pipe', 'pipe'], policy: pol, env: { PATH: '/usr/bin:/bin' } });
         go.then((r) => console.log('RESULT ' + r.stdout.trim()), (e) => console.log('ERROR ' + e.message));`,
      );
      const pyDriver =
        'import os,pty,tty,subprocess,sys,select\n' +
        'm,s=pty.openpty(); tty.setraw(s)\n' +
        'r=subprocess.run([sys.argv[1], sys.argv[2], str(s), sys.argv[3], sys.argv[4]], pass_fds=[s], capture_output=True, text=True)\n' +
        'got=b""\n' +
        'os.set_blocking(s, False)\n' +
        'try:\n  got=os.read(s, 100)\nexcept BlockingIOError:\n  pass\n' +
        'print(r.stdout.strip()); print("INJECTED", got.hex() or "-")\n';
      const go = (pol: SandboxPolicy | null) =>
        spawnSync(PYTHON, ['-c', pyDriver, NODE, driver, JSON.stringify(pol), inject], { encoding: 'utf8', timeout: 60_000 });
      const boxed = go(policy);
      expect(boxed.stdout, boxed.stderr).toMatch(/^RESULT /m);
      const [sti, stiHigh, linux] = /^RESULT (.*)$/m.exec(boxed.stdout)![1]!.split(' ');
      expect(['1', '13'], boxed.stdout).toContain(sti); // EPERM
      expect(stiHigh).not.toBe('ok');
      expect(linux).not.toBe('ok');
      expect(boxed.stdout).toContain('INJECTED -');
      // The filter itself, independent of the tty: TIOCSTI, TIOCSTI with high bits, TIOCLINUX.
      for (const p of ['tiocsti', 'tiocsti-high', 'tioclinux']) {
        const t = await tryProbe(policy, [p]);
        expect(t.result, `${p}: ${t.stdout}`).toMatchObject({ ok: false, errno: 'EPERM' });
        expectControl(await tryProbe(null, [p]), p);
      }
      // Control: unsandboxed, the same process takes the tty and injects.
      const ctl = go(null);
      expect(ctl.stdout, ctl.stderr).toMatch(/^RESULT ok/m);
      expect(ctl.stdout).toMatch(/INJECTED 58/);
    });

    // Landlock mode grants no /dev/pts path, only the terminals on the command's stdio (by inode);
    // isolated mode has its own devpts instance. test/linux/landlock-holes.test.ts reads too.
    it.skipIf(skip || !caps.python)('PROC-01: other terminals of the same user cannot be written', async () => {
      const code =
        'import os,pty,subprocess,sys,json\n' +
        'm,s=pty.openpty(); name=os.ttyname(s)\n' +
        'r=subprocess.run([sys.argv[1], sys.argv[2], name, sys.argv[3]], capture_output=True, text=True)\n' +
        'os.set_blocking(m, False)\n' +
        'try:\n  got=os.read(m,200).decode()\nexcept BlockingIOError:\n  got=""\n' +
        'print(json.dumps({"out": r.stdout.strip(), "got": got}))\n';
      const driver = hostScript(
        scene.root,
        'pts-driver.js',
        `const pol = JSON.parse(process.argv[3]);
         const cmd = ['-c', 'printf PWNED > ' + process.argv[2] + '; echo rc=$?'];
         const go = pol === null ? Promise.resolve(require('child_process').spawnSync('/bin/sh', cmd, { encoding: 'utf8' })) : lib.run('/bin/sh', cmd, { env: { PATH: '/usr/bin:/bin' }, stdio: ['ignore', 'pipe', 'pipe'], policy: pol });
         go.then((r) => console.log(r.stdout.trim() + ' gaps=' + JSON.stringify(r.enforcement ? r.enforcement.gaps : [])));`,
      );
      const go = (pol: SandboxPolicy | null) => JSON.parse(spawnSync(PYTHON, ['-c', code, NODE, driver, JSON.stringify(pol)], { encoding: 'utf8', timeout: 60_000 }).stdout) as { out: string; got: string };
      const boxed = go(policy);
      expect(boxed.got, JSON.stringify(boxed)).toBe('');
      expect(boxed.out, JSON.stringify(boxed)).not.toMatch(/rc=0/);
      // Control: unsandboxed the write lands on the other terminal.
      expect(go(null).got).toBe('PWNED');
    });

    it.skipIf(skip)('PROC-04/PROC-05: no ptrace or memory access to other processes', async () => {
      const marker = uniqueSleep();
      markers.push(marker);
      const victim = spawnHost('sleep', [marker], { stdio: 'ignore' });
      try {
        const pid = String(victim.pid);
        for (const args of [['ptrace-attach', pid], ['ptrace-attach'], ['process_vm_readv', pid], ['process_vm_readv'], ['pidfd_getfd']]) {
          const r = await tryProbe(policy, args);
          expect(r.result?.ok, `${args.join(' ')}: ${r.stdout}${r.stderr}`).toBe(false);
        }
        const mem = await probeOps([['open', `/proc/${pid}/mem`, 'r+'], ['read', `/proc/${pid}/maps`], ['open', `/proc/1/mem`, 'r']], { policy });
        for (const x of mem) expect(['EACCES', 'ENOENT', 'EPERM'], JSON.stringify(mem)).toContain(x);
        // Control: the probe's own child is traceable and readable unsandboxed.
        expect((await tryProbe(null, ['ptrace-attach'])).result?.ok).toBe(true);
        expectControl(await tryProbe(null, ['process_vm_readv']), 'process_vm_readv');
        expect(victim.exitCode).toBeNull();
      } finally {
        victim.kill('SIGKILL');
      }
    });

    it.skipIf(skip)('PROC-06: signals never reach outside processes', async () => {
      const marker = uniqueSleep();
      markers.push(marker);
      const victim = spawnHost('sleep', [marker], { stdio: 'ignore' });
      try {
        const pid = victim.pid!;
        const r = await probeOps([['kill', pid, 15], ['kill', pid, 9], ['kill', process.pid, 0], ['kill', -1, 9]], { policy });
        for (const x of r.slice(0, 3)) expect(['ESRCH', 'EPERM'], JSON.stringify(r)).toContain(x);
        // Polled: right after spawnHost the victim may not have exec'd `sleep` yet.
        expect(await eventually(() => pidsWith(marker).length === 1 && pidsWith(marker)[0] === pid)).toBe(true);
        expect(victim.exitCode).toBeNull();
        // kill(-1) inside hits only the sandbox's own processes; this test process is still here.
        const ctl = await probeOps([['kill', pid, 0]], { policy: null });
        expect(ctl).toEqual(['ok']);
      } finally {
        victim.kill('SIGKILL');
      }
    });

    it.skipIf(skip)('PROC-07: /proc shows nothing of host processes (isolated) / no environ or memory (Landlock)', async () => {
      const r = await probeOps(
        [
          ['read', `/proc/${process.pid}/environ`],
          ['read', `/proc/${process.pid}/cmdline`],
          ['readdir', '/proc'],
          ['read', '/proc/1/environ'],
        ],
        { policy },
      );
      expect(r[0]!.startsWith('ok'), r[0]).toBe(false);
      if (isolated) {
        expect(r[1]).toBe('ENOENT');
        const pids = r[2]!.slice(3).split(',').filter((x) => /^\d+$/.test(x));
        expect(pids.length, r[2]).toBeLessThan(10); // init, the probe, nothing of the host
        // init is a copy of this node process: its environment must not be readable either.
        expect(r[3]!.startsWith('ok'), r[3]).toBe(false);
      }
      const ctl = await probeOps([['read', `/proc/${process.pid}/environ`]], { policy: null });
      expect(ctl[0]!.startsWith('ok')).toBe(true);
    });

    // Landlock mode keeps the host /proc: command lines (no ptrace check) stay readable, and the
    // report must say so.
    it.runIf(!skip && !isolated)('PROC-07: Landlock mode hides host command lines or lists the gap', async () => {
      const r = await probeOps([['read', `/proc/${process.pid}/cmdline`]], { policy });
      const listed = (await run('/bin/true', [], { env: BASE_ENV, policy })).enforcement.gaps.join('\n');
      expect(r[0]!.startsWith('ok') && !/cmdline|\/proc/.test(listed), `${r[0]} / gaps: ${listed}`).toBe(false);
    });

    it.skipIf(skip)('PROC-08/PROC-09/PROC-10: no new namespaces, clone3, mount API, setns or chroot', async () => {
      const expectations: Array<[string, string[]]> = [
        ['unshare-user', ['EPERM']],
        ['unshare-net', ['EPERM']],
        ['clone-newuser', ['EPERM']],
        ['clone3', ['ENOSYS']],
        ['mount', ['EPERM']],
        ['umount', ['EPERM']],
        ['fsopen', ['EPERM']],
        ['open_tree', ['EPERM']],
        ['setns', ['EPERM']],
        ['chroot', ['EPERM']],
      ];
      for (const [p, errnos] of expectations) {
        const r = await tryProbe(policy, [p]);
        expect(r.result, `${p}: ${r.stdout}${r.stderr}`).toMatchObject({ ok: false });
        expect(errnos, p).toContain(r.result!.errno);
      }
      const u = await sh('unshare -r id 2>&1; echo rc=$?', { policy });
      expect(u.stdout).not.toContain('rc=0');
      // Controls: unsandboxed these reach the kernel. The privileged ones need root, or a user
      // namespace of our own (unshare -rm) for an unprivileged run.
      for (const p of ['clone3', 'unshare-user', 'mount', 'fsopen', 'open_tree', 'chroot', 'setns']) {
        const args = caps.root ? [p] : ['-rm', syscallProbe(), p];
        const c = caps.root ? await tryProbe(null, args) : await run('unshare', args, { env: BASE_ENV, policy: null }).then((x) => ({ ...x, result: parseTrySyscall(x.stdout) }));
        expectControl(c, p);
      }
    });

    it.skipIf(skip || !caps.python)('PROC-12: a program run from a memfd is still inside the sandbox', async () => {
      const before = snapshot(scene.out);
      const code =
        'import os,sys\n' +
        'fd=os.memfd_create("x",0)\n' +
        'os.write(fd, open("/bin/sh","rb").read())\n' +
        'os.execve("/proc/self/fd/%d" % fd, ["sh","-c","echo pwned > %s/ro.txt; echo rc=$?; grep -E \\"^(Seccomp|NoNewPrivs):\\" /proc/self/status" % sys.argv[1]], {"PATH":"/usr/bin:/bin"})\n';
      const r = await py(code, [scene.out], { policy });
      expect(r.stdout).toMatch(/rc=[1-9]/);
      expect(r.stdout).toMatch(/Seccomp:\s+2/);
      expect(r.stdout).toMatch(/NoNewPrivs:\s+1/);
      expectUnchanged(before, snapshot(scene.out));
      const m = await tryProbe(policy, ['memfd-exec']);
      // Either refused, or it ran (still under the same filters, as just shown).
      expect(m.signal).toBeNull();
      // Control: unsandboxed the same memfd program writes.
      const ctl = await py(code, [scene.out], { policy: null });
      expect(ctl.stdout).toContain('rc=0');
    });

    it.skipIf(skip || !caps.root)('PROC-13 (root): setuid-root and file-capability binaries grant nothing', async () => {
      const suid = path.join(scene.root, 'suid-cat');
      const fcap = path.join(scene.root, 'fcap-cat');
      fs.copyFileSync('/bin/cat', suid);
      fs.chmodSync(suid, 0o4755);
      fs.copyFileSync('/bin/cat', fcap);
      fs.chmodSync(fcap, 0o755);
      let haveSetcap = true;
      try {
        execFileSync('setcap', ['cap_dac_override,cap_sys_admin+ep', fcap], { stdio: 'ignore' });
      } catch {
        haveSetcap = false;
      }
      for (const bin of haveSetcap ? [suid, fcap] : [suid]) {
        let r;
        try {
          r = await run(bin, ['/proc/self/status'], { env: BASE_ENV, policy });
        } catch (e) {
          // The kernel refuses to exec a capability-dumb binary whose caps cannot all be granted.
          expect(e, bin).toMatchObject({ code: 'ENOT_EXECUTABLE', errno: 1 });
          continue;
        }
        expect(statusField(r.stdout, 'CapEff'), bin).toBe('0000000000000000');
        expect(statusField(r.stdout, 'CapPrm'), bin).toBe('0000000000000000');
      }
      if (haveSetcap) {
        // Control: unsandboxed as a non-root user the file capability is granted.
        const ctl = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', fcap, '/proc/self/status'], { encoding: 'utf8' });
        if (ctl.status === 0) expect(statusField(ctl.stdout, 'CapEff')).not.toBe('0000000000000000');
      }
    });

    it.skipIf(skip || caps.root || !fs.existsSync('/usr/bin/passwd'))('PROC-13 (unprivileged): a setuid-root binary does not run as root', async () => {
      const me = spawnSync('id', ['-un'], { encoding: 'utf8' }).stdout.trim();
      // `passwd -S` prints the password-aging fields only when it could read /etc/shadow, which
      // needs the root it gets from its setuid bit.
      const r = await run('/usr/bin/passwd', ['-S', me], { env: BASE_ENV, policy });
      expect(r.stdout.trim().split(/\s+/).length, r.stdout + r.stderr).toBeLessThanOrEqual(2);
      const ctl = await run('/usr/bin/passwd', ['-S', me], { env: BASE_ENV, policy: null });
      expect(ctl.stdout.trim().split(/\s+/).length, ctl.stdout + ctl.stderr).toBeGreaterThan(2);
    });

    it.skipIf(skip)('PROC-14: the 32-bit entry point never runs a syscall past the filter', async () => {
      const r = await tryProbe(policy, ['int80']);
      expect(r.result?.ok ?? false, `${r.stdout} ${r.signal}`).toBe(false);
      const x = await tryProbe(policy, ['x32']);
      expect(x.result?.ok ?? false).toBe(false);
    });

    it.skipIf(skip)('PROC-15: bpf, perf, userfaultfd, keyrings and personality changes are refused', async () => {
      for (const p of ['bpf', 'perf', 'userfaultfd', 'keyctl', 'personality']) {
        const r = await tryProbe(policy, [p]);
        expect(r.result, `${p}: ${r.stdout}${r.stderr}`).toMatchObject({ ok: false });
        expect(['EPERM', 'EACCES']).toContain(r.result!.errno);
      }
      // Controls that reach the kernel for any user.
      for (const p of ['keyctl', 'personality']) expectControl(await tryProbe(null, [p]), p);
      // Asking for the current personality stays allowed (glibc and runtimes do it).
      expect((await tryProbe(policy, ['personality-query'])).result?.ok).toBe(true);
    });

    it.skipIf(skip)('PROC-16: host SysV IPC objects are out of reach', async () => {
      const out = execFileSync('ipcmk', ['-M', '4096'], { encoding: 'utf8' });
      const id = /(\d+)\s*$/.exec(out.trim())![1]!;
      try {
        const r = await sh(`ipcs -m | grep -w ${id}; echo listed=$?; ipcrm -m ${id} 2>&1; echo rm=$?`, { policy });
        expect(r.stdout).toMatch(/rm=[1-9]/);
        if (isolated) expect(r.stdout).toContain('listed=1');
        expect(execFileSync('ipcs', ['-m'], { encoding: 'utf8' })).toMatch(new RegExp(`\\b${id}\\b`));
        const shm = await tryProbe(policy, ['shmget']);
        if (!isolated) expect(shm.result?.ok, shm.stdout).toBe(false);
        // Control: unsandboxed, the segment is visible.
        const ctl = await sh(`ipcs -m | grep -qw ${id}; echo listed=$?`, { policy: null });
        expect(ctl.stdout).toContain('listed=0');
      } finally {
        spawnSync('ipcrm', ['-m', id]);
      }
    });

    it.skipIf(skip)('PROC-17: the sandbox cannot overwrite its own package, addon or node', async () => {
      const root = path.resolve(__dirname, '..', '..');
      const addonDir = path.join(root, 'build', 'Release');
      const addon = fs.existsSync(addonDir) ? fs.readdirSync(addonDir).filter((f) => f.endsWith('.node')).map((f) => path.join(addonDir, f)) : [];
      const targets = [...addon, path.join(root, 'dist', 'index.js'), path.join(root, 'lib', 'index.ts'), process.execPath].filter((p) => fs.existsSync(p));
      const before = targets.map((t) => fs.readFileSync(t).length + ':' + fs.statSync(t).mtimeMs);
      // Metadata changes are a listed Landlock-mode gap (FS-14): only isolated mode attempts chmod,
      // so a Landlock-mode run never touches the real files' modes.
      const modes = targets.map((t) => fs.statSync(t).mode);
      const r = await probeOps(
        targets.flatMap((t) => (isolated ? [['append', t, '//pwned'], ['chmod', t, '777']] : [['append', t, '//pwned']])),
        { policy: modePolicy(mode, { filesystem: { write: [scene.ws] } }) },
      );
      for (const x of r) expect(['EROFS', 'EACCES', 'EPERM', 'ETXTBSY'], JSON.stringify(r)).toContain(x);
      expect(targets.map((t) => fs.readFileSync(t).length + ':' + fs.statSync(t).mtimeMs)).toEqual(before);
      expect(targets.map((t) => fs.statSync(t).mode)).toEqual(modes);
      // Control: a copy in the workspace is writable.
      fs.copyFileSync(targets[0]!, `${scene.ws}/copy`);
      expect(await probeOps([['append', `${scene.ws}/copy`, 'x']], { policy })).toEqual(['ok']);
    });

    it.skipIf(skip || !isolated)('PROC-18: a nested sandbox fails closed instead of running unsandboxed', async () => {
      const script = hostScript(
        scene.ws,
        'nested.js',
        `const p = lib.probe();
         const out = { userns: p.features.userNamespaces };
         lib.run('/bin/true', [], { env: { PATH: '/usr/bin:/bin' } })
           .then((r) => { out.auto = 'ran:' + r.enforcement.mode; }, (e) => { out.auto = e.code; })
           .then(() => lib.run('/bin/true', [], { env: { PATH: '/usr/bin:/bin' }, policy: { mode: 'isolated' } }))
           .then((r) => { out.isolated = 'ran:' + r.enforcement.mode; }, (e) => { out.isolated = e.code; })
           .then(() => console.log('NESTED ' + JSON.stringify(out)));`,
      );
      const r = await run(NODE, [script], { cwd: scene.ws, env: BASE_ENV, policy, timeout: 60_000 });
      const line = /^NESTED (.*)$/m.exec(r.stdout);
      expect(line, r.stdout + r.stderr).not.toBeNull();
      const out = JSON.parse(line![1]!) as Record<string, unknown>;
      expect(out.userns).toBe(false);
      // No user namespaces in here: explicit isolated mode must refuse; auto mode falls back to
      // Landlock mode (where every guarantee asked for holds there) or refuses with a code (the
      // outer filter may refuse Landlock itself: ELANDLOCK_UNSUPPORTED), never runs unsandboxed.
      expect(out.auto).toMatch(/^(E[A-Z_]+|ran:landlock)$/);
      expect(out.isolated).toMatch(/^E[A-Z_]+$/);
      // Control: the same script on the host runs in isolated mode.
      const ctl = await run(NODE, [script], { cwd: scene.ws, env: BASE_ENV, policy: null, timeout: 60_000 });
      expect(JSON.parse(/^NESTED (.*)$/m.exec(ctl.stdout)![1]!)).toMatchObject({ userns: true, auto: 'ran:isolated' });
    });

    it.skipIf(skip)('PROC-18/PROC-19: refusals carry codes; the report states the Landlock ABI in use', async () => {
      const r = await run('/bin/true', [], { env: BASE_ENV, policy });
      expect(r.enforcement.mode).toBe(mode);
      expect(r.enforcement.mechanisms.landlockAbi).toBe(probe().features.landlockAbi);
      if (caps.landlockAbi < 6 && !isolated && !caps.metadataSupervisor) expect(r.enforcement.gaps.join('\n')).toMatch(/scop/);
      if (!isolated) {
        // Without degraded: refused with a code exactly when a requested guarantee does not hold.
        const needs = r.enforcement.degradedBy ?? [];
        const plain = run('/bin/true', [], { env: BASE_ENV, policy: { mode: 'landlock' } });
        if (needs.length > 0) await expect(plain).rejects.toMatchObject({ code: 'EUNSUPPORTED_POLICY' });
        else expect((await plain).enforcement.mode).toBe('landlock');
        await expect(run('/bin/true', [], { env: BASE_ENV, policy: { mode: 'landlock', filesystem: { write: ['/proc'] } } })).rejects.toMatchObject({
          code: 'EUNSUPPORTED_POLICY',
        });
      }
    });

    it.skipIf(skip)('PROC-20: the command sees exactly the env it was given, nothing of the host', async () => {
      process.env.PSB_HOST_SECRET_TOKEN = 'hunter2';
      try {
        const r = await run('/usr/bin/env', [], { env: { PATH: '/usr/bin:/bin', ONLY: '1' }, policy });
        const names = r.stdout.trim().split('\n').map((l) => l.split('=')[0]).sort();
        // Besides TMPDIR (Landlock mode), the variables of the private tool caches, each named by
        // the report (policy caches: 'private'); nothing of the host.
        const added = Object.values((r.enforcement.mechanisms.caches ?? {}) as Record<string, string>).flatMap((v) => /^env (\w+)=/.exec(v)?.[1] ?? []);
        expect(names.filter((n) => n !== 'TMPDIR' && !added.includes(n))).toEqual(['ONLY', 'PATH']);
        expect(r.stdout).not.toContain('hunter2');
        // init (isolated) is a copy of this process; neither its environ nor its memory leaks.
        const leak = await sh('cat /proc/1/environ /proc/1/cmdline /proc/$PPID/environ 2>/dev/null | tr "\\0" "\\n" | grep -c hunter2', { policy });
        expect(leak.stdout.trim()).toBe('0');
        // Whatever reaps the command (isolated: init; Landlock: the subreaper) is a copy of this
        // process: its environment and memory must stay closed.
        const parent = await sh('for f in environ mem maps; do cat /proc/$PPID/$f >/dev/null 2>&1 && echo $f=open || echo $f=closed; done', { policy });
        expect(parent.stdout.trim().split('\n')).toEqual(['environ=closed', 'mem=closed', 'maps=closed']);
      } finally {
        delete process.env.PSB_HOST_SECRET_TOKEN;
      }
    });

    it.skipIf(skip)('PROC-21: /proc/sys, /sys and sysrq are not writable; core dumps stay inside', async () => {
      const pattern = fs.readFileSync('/proc/sys/kernel/core_pattern', 'utf8');
      const r = await probeOps(
        [
          ['write', '/proc/sys/kernel/core_pattern', '|/bin/sh -c id'],
          ['write', '/proc/sys/kernel/hostname', 'pwned'],
          ['write', '/proc/sysrq-trigger', 'h'],
          ['write', '/sys/kernel/mm/transparent_hugepage/enabled', 'never'],
          ['write', '/proc/self/coredump_filter', '0xff'],
        ],
        { policy },
      );
      for (const x of r.slice(0, 4)) expect(['EROFS', 'EACCES', 'EPERM', 'ENOENT'], JSON.stringify(r)).toContain(x);
      expect(fs.readFileSync('/proc/sys/kernel/core_pattern', 'utf8')).toBe(pattern);
      // A crash with cores enabled, in a read-only cwd: nothing is written there.
      const before = snapshot(scene.out);
      await sh('ulimit -c unlimited 2>/dev/null; kill -SEGV $$', { cwd: scene.out, policy });
      expectUnchanged(before, snapshot(scene.out));
    });

    it.skipIf(skip)('PROC-22/ROB-09: a setsid double-forked daemon dies with the command (or the report admits the gap)', async () => {
      const daemon = uniqueSleep();
      const bg = uniqueSleep();
      markers.push(daemon, bg);
      // The daemon leaves a trace in the workspace to prove it really started.
      const r = await sh(
        `setsid sh -c 'echo started > ${scene.ws}/daemon; exec sleep ${daemon}' </dev/null >/dev/null 2>&1 & sleep ${bg} </dev/null >/dev/null 2>&1 & ` +
          `while [ ! -s ${scene.ws}/daemon ]; do sleep 0.05; done; echo started`,
        { policy },
      );
      expect(r.stdout).toContain('started');
      expect(fs.readFileSync(`${scene.ws}/daemon`, 'utf8')).toBe('started\n');
      if (/setsid/.test(r.enforcement.gaps.join('\n'))) {
        // Only acceptable where the report admits it (never in isolated mode).
        expect(isolated).toBe(false);
        expect(r.enforcement.guarantees.treeTeardown).toBe('partial');
      } else {
        expect(r.enforcement.guarantees.treeTeardown).toBe('enforced');
        await expectNoProcess(daemon);
      }
      // Either way the non-setsid background child dies with the command's process group.
      await expectNoProcess(bg);
      // Control: unsandboxed, the daemon survives the command.
      const m2 = uniqueSleep();
      markers.push(m2);
      await sh(`setsid sh -c 'sleep ${m2} &' </dev/null >/dev/null 2>&1`, { policy: null });
      // setsid(1) forks and returns at once: poll until the daemon has exec'd sleep (one look raced it).
      expect(await eventually(() => sleepers(m2).length === 1)).toBe(true);
    });

    it.skipIf(skip)('PROC-24: Landlock and seccomp bind every thread and exec\'d descendant', async () => {
      const before = snapshot(scene.out);
      const js = `
        const { Worker } = require('worker_threads');
        const fs = require('fs');
        const target = process.argv[1];
        const w = new Worker("const fs=require('fs');try{fs.appendFileSync(" + JSON.stringify(target) + ",'x');console.log('thread=ok')}catch(e){console.log('thread='+e.code)}", { eval: true });
        w.on('exit', () => {
          const r = require('child_process').spawnSync('/bin/sh', ['-c', 'echo x >> "$0"; echo exec=$?; grep Seccomp: /proc/self/status', target], { encoding: 'utf8' });
          console.log(r.stdout.trim());
        });`;
      const r = await run(NODE, ['-e', js, `${scene.out}/ro.txt`], { env: BASE_ENV, policy });
      expect(r.stdout).toMatch(/thread=(EROFS|EACCES|EPERM)/);
      expect(r.stdout).toMatch(/exec=[1-9]/);
      expect(r.stdout).toMatch(/Seccomp:\s+2/);
      expectUnchanged(before, snapshot(scene.out));
      const ctl = await run(NODE, ['-e', js, `${scene.out}/ro.txt`], { env: BASE_ENV, policy: modePolicy(mode, { filesystem: { write: [scene.ws, scene.out] } }) });
      expect(ctl.stdout).toContain('thread=ok');
      expect(ctl.stdout).toContain('exec=0');
    });
  });
});
