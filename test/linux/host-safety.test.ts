/**
 * Host safety: what runs inside must never harm the Node host or defeat init.
 *
 *   HS-01 limits, priorities, scheduling and I/O priority of other processes (host, init)
 *   HS-02 OOM preference: the command 1000, init's (= the host's) oom_score_adj out of reach
 *   HS-03 private tmpfs sizes (limits.tmpBytes)
 *   HS-04 per-uid kernel quotas (RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE, inotify in the userns)
 *   HS-05 /proc shows nothing of the host's identity (argv, environment, name)
 *   HS-06 no channel between two network: 'none' sandboxes through abstract unix names
 *   HS-07 a deny-read file fails to open (EACCES) instead of reading empty
 *   HS-08 Landlock-mode teardown holds although the command tries to lower init's limits
 *   HS-11 a hostile temp dir (chmod 000 trees, deep paths, symlinks) neither crashes the host nor
 *         survives it, and no symlink target's mode changes
 *   HS-12/13 Landlock mode's TMPDIR is checked against limits.tmpBytes (bytes, and entries)
 *
 * Each denial is paired with a positive control (the same probe unsandboxed, or on the command
 * itself) and checked from outside (the host's /proc, the real file, the other sandbox).
 */
import { spawn as spawnHost, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

import { run, spawn } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, eventually, expectNoProcess, hostScript, killAll, makeScene, NODE, PYTHON, sleepers, uniqueSleep } from '../helpers/sandbox';

/** "Max open files" etc. from /proc/<pid>/limits, as the raw line. */
function limitLine(pid: number, name: string): string {
  return fs.readFileSync(`/proc/${pid}/limits`, 'utf8').split('\n').find((l) => l.startsWith(name)) ?? '';
}
function hostState(pid: number): string {
  const prio = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return JSON.stringify({
    nofile: limitLine(pid, 'Max open files'),
    cpu: limitLine(pid, 'Max cpu time'),
    nproc: limitLine(pid, 'Max processes'),
    nice: prio[16],
    policy: prio[38],
    affinity: /Cpus_allowed_list:\s*(\S+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1],
    oom: fs.readFileSync(`/proc/${pid}/oom_score_adj`, 'utf8').trim(),
  });
}

/**
 * Tries every way of changing another process's limits and scheduling on each pid given, then the
 * same on itself (pid 0, which must keep working). Harmless values: a soft NOFILE one below the
 * current, a 10^9 s CPU limit, nice +1, affinity to the CPUs it already has, best-effort I/O.
 */
const PRIO_PROBE = String.raw`
import ctypes, json, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
NR = {'x86_64': {'ioprio_set': 251, 'sched_setattr': 314}, 'aarch64': {'ioprio_set': 30, 'sched_setattr': 274}}[os.uname().machine]
def t(f):
    try:
        f(); return 'ok'
    except OSError as e:
        return os.strerror(e.errno) if e.errno else 'err'
def raw(nr, *a):
    r = libc.syscall(nr, *a)
    if r < 0: raise OSError(ctypes.get_errno(), '')
class Attr(ctypes.Structure):
    _fields_ = [('size', ctypes.c_uint32), ('policy', ctypes.c_uint32), ('flags', ctypes.c_uint64), ('nice', ctypes.c_int32),
                ('prio', ctypes.c_uint32), ('rt', ctypes.c_uint64 * 3), ('umin', ctypes.c_uint32), ('umax', ctypes.c_uint32)]
def attempts(pid):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    a = Attr(); a.size = ctypes.sizeof(Attr); a.nice = 1
    return {
        'nofile': t(lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft - 1, hard))),
        'cpu': t(lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (10**9, resource.RLIM_INFINITY))),
        'nice': t(lambda: os.setpriority(os.PRIO_PROCESS, pid, 1)),
        'affinity': t(lambda: os.sched_setaffinity(pid, os.sched_getaffinity(0))),
        'sched': t(lambda: os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))),
        'param': t(lambda: os.sched_setparam(pid, os.sched_param(0))),
        'attr': t(lambda: raw(NR['sched_setattr'], pid, ctypes.byref(a), 0)),
        'ioprio': t(lambda: raw(NR['ioprio_set'], 1, pid, (2 << 13) | 4)),
    }
out = {str(p): attempts(int(p)) for p in sys.argv[1:]}
out['self'] = attempts(0)
out['ppid'] = os.getppid()
print(json.dumps(out), flush=True)
sys.stdin.read()
`;

const markers: string[] = [];
afterEach(() => {
  for (const m of markers.splice(0)) killAll(m);
});

/** Runs `code` under python with stdin open; resolves with its first stdout line and a release(). */
async function interactive(code: string, args: string[], policy: SandboxPolicy | null) {
  const child = spawn(PYTHON, ['-c', code, ...args], { env: BASE_ENV, policy, cwd: '/' });
  let out = '';
  let err = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  const gotLine = await eventually(() => out.includes('\n'), 30_000);
  expect(gotLine, `no output: ${out} ${err}`).toBe(true);
  return {
    child,
    line: out.split('\n')[0]!,
    release: async () => {
      child.stdin!.end();
      return child.exited;
    },
  };
}

describe.runIf(caps.linux && caps.python !== null)('host safety', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const isolated = mode === 'isolated';
    const policy = modePolicy(mode, { filesystem: { tmp: 'none' } });

    it.skipIf(skip)('HS-01: no limit, priority, scheduling or I/O priority of the host or init can be changed; its own can', async () => {
      // Positive control: unsandboxed, the same probe changes a host process of ours.
      const victim = spawnHost('sleep', ['600'], { stdio: 'ignore' });
      try {
        await eventually(() => fs.existsSync(`/proc/${victim.pid}/limits`));
        const ctl = await interactive(PRIO_PROBE, [String(victim.pid)], null);
        await ctl.release();
        const c = JSON.parse(ctl.line) as Record<string, Record<string, string>>;
        for (const k of ['nofile', 'cpu', 'nice', 'affinity', 'sched', 'param', 'attr', 'ioprio']) expect(c[String(victim.pid)]![k], k).toBe('ok');

        // Sandboxed: the host (visible in Landlock mode), init (pid 1 inside isolated mode; the
        // command's parent in Landlock mode) and, in Landlock mode, the victim too.
        const before = hostState(process.pid);
        const targets = isolated ? ['1'] : [String(process.pid), String(victim.pid)];
        const victimBefore = hostState(victim.pid!);
        const boxed = await interactive(PRIO_PROBE, targets, policy);
        const r = JSON.parse(boxed.line) as Record<string, Record<string, string>> & { ppid: number };
        if (!isolated) {
          const init = await interactive(PRIO_PROBE, [String(r.ppid)], policy);
          const ri = JSON.parse(init.line) as Record<string, Record<string, string>>;
          for (const [k, v] of Object.entries(ri[String(r.ppid)]!)) expect(v, `init ${k}`).toBe('Operation not permitted');
          await init.release();
        }
        // From outside, while init still runs: init's state (boxed.child.pid is init's host pid).
        const initPid = boxed.child.pid;
        const initState = hostState(initPid);
        for (const t of targets) {
          for (const [k, v] of Object.entries(r[t]!)) expect(v, `${t} ${k}`).toBe('Operation not permitted');
        }
        for (const [k, v] of Object.entries(r.self!)) expect(v, `self ${k}`).toBe('ok');
        expect(hostState(initPid)).toBe(initState);
        await boxed.release();
        expect(hostState(process.pid)).toBe(before);
        expect(hostState(victim.pid!)).toBe(victimBefore);
        // init's own limits and name from outside: nothing of the attempts landed on it.
        expect(JSON.parse(initState).nofile).toBe(JSON.parse(before).nofile);
      } finally {
        victim.kill('SIGKILL');
      }
    });

    it.skipIf(skip)("HS-02: the command gets oom_score_adj 1000; init's (shared with the host) cannot be raised", async () => {
      const hostBefore = fs.readFileSync('/proc/self/oom_score_adj', 'utf8');
      const code = String.raw`
import os, sys
def w(p):
    try:
        with open(p, 'w') as f: f.write('500')
        return 'ok'
    except OSError as e: return os.strerror(e.errno)
init = '1' if sys.argv[1] == 'isolated' else str(os.getppid())
# Also the files that act on init's (= the host's) mm or session: clear_refs, coredump_filter, autogroup.
extra = [f for f in ('clear_refs', 'coredump_filter', 'autogroup') if os.path.exists('/proc/self/' + f)]
print(open('/proc/self/oom_score_adj').read().strip(), w('/proc/%s/oom_score_adj' % init), w('/proc/%s/oom_adj' % init),
      w('/proc/%s/task/%s/oom_score_adj' % (init, init)), *[w('/proc/%s/%s' % (init, f)) for f in extra], flush=True)
import sys; sys.stdin.read()
`;
      const boxed = await interactive(code, [mode], policy);
      const [own, ...writes] = boxed.line.split(' ');
      expect(writes.length).toBeGreaterThanOrEqual(3);
      const initAdj = fs.readFileSync(`/proc/${boxed.child.pid}/oom_score_adj`, 'utf8');
      // init never joins the sandbox's cgroups (a memory cgroup's OOM killer must not pick it).
      expect(fs.readFileSync(`/proc/${boxed.child.pid}/cgroup`, 'utf8')).not.toMatch(/psb-/);
      await boxed.release();
      expect(own).toBe('1000');
      for (const x of writes) expect(x, boxed.line).not.toBe('ok');
      // From outside: init and the host keep their value; the command's 1000 did not spread.
      expect(initAdj).toBe(hostBefore);
      expect(fs.readFileSync('/proc/self/oom_score_adj', 'utf8')).toBe(hostBefore);
      // Control: unsandboxed, the same write on a child of ours is possible (raising is unprivileged).
      const ctl = spawnSync(PYTHON, ['-c', "import os,subprocess;p=subprocess.Popen(['sleep','30']);open('/proc/%d/oom_score_adj'%p.pid,'w').write('500');print(open('/proc/%d/oom_score_adj'%p.pid).read().strip());p.kill()"], { encoding: 'utf8' });
      expect(ctl.stdout.trim()).toBe('500');
    });

    it.skipIf(skip || !isolated)('HS-03: the private /tmp and /dev/shm are bounded by limits.tmpBytes (default 1 GiB)', async () => {
      const sizes = 'df -B1 --output=size /tmp /dev/shm | tail -n 2 | tr "\\n" " "';
      const def = await run('/bin/sh', ['-c', sizes], { env: BASE_ENV, policy: modePolicy(mode) });
      const [tmp, shm] = def.stdout.trim().split(/\s+/).map(Number);
      expect(tmp! + shm!).toBeLessThanOrEqual(1 << 30);
      expect(tmp).toBe(768 << 20);
      const fill = (mb: number) => `head -c ${mb}M /dev/zero > /tmp/fill 2>/dev/null; echo tmp=$?; head -c ${mb}M /dev/zero > /dev/shm/fill 2>/dev/null; echo shm=$?`;
      const small = modePolicy(mode, { limits: { tmpBytes: 32 << 20 } });
      const over = await run('/bin/sh', ['-c', fill(30)], { env: BASE_ENV, policy: small });
      expect(over.stdout).toMatch(/tmp=[1-9]/);
      expect(over.stdout).toMatch(/shm=[1-9]/);
      // Control: what fits, fits.
      const fits = await run('/bin/sh', ['-c', fill(4)], { env: BASE_ENV, policy: small });
      expect(fits.stdout).toBe('tmp=0\nshm=0\n');
    });

    it.skipIf(skip)('HS-04: pending signals, mqueue bytes and (isolated) inotify are capped for the command', async () => {
      const r = await run('/bin/sh', ['-c', 'grep -E "pending signals|msgqueue" /proc/self/limits; cat /proc/sys/user/max_inotify_instances /proc/sys/user/max_inotify_watches'], { env: BASE_ENV, policy });
      expect(r.stdout).toMatch(/Max pending signals\s+1024\s+1024/);
      // mqueue bytes: isolated mode's share of the host's budget (linux/quotas.ts), at most 256 KiB.
      const mq = Number(/Max msgqueue size\s+(\d+)\s+\d+/.exec(r.stdout)?.[1]);
      expect(mq).toBeGreaterThan(0);
      expect(mq).toBeLessThanOrEqual(262144);
      const host = ['instances', 'watches'].map((f) => Number(fs.readFileSync(`/proc/sys/user/max_inotify_${f}`, 'utf8')));
      const inner = r.stdout.trim().split('\n').slice(-2).map(Number);
      if (isolated) {
        // A share of half the host's limits: a quarter of what is left of it (linux/quotas.ts).
        expect(inner[0]).toBeGreaterThanOrEqual(1);
        expect(inner[0]).toBeLessThanOrEqual(Math.max(1, host[0]! >> 3));
        expect(inner[1]).toBeGreaterThanOrEqual(64);
        expect(inner[1]).toBeLessThanOrEqual(Math.max(64, host[1]! >> 3));
        // The cap holds: creating instances stops there. Each run has a share of its own (what is
        // left depends on the sandboxes alive, a prepared-ahead one included), so the count is
        // checked against the cap of the run that counts, read in it first.
        const count = await run(PYTHON, ['-c', 'import ctypes\nlibc=ctypes.CDLL(None)\ncap=int(open("/proc/sys/user/max_inotify_instances").read())\nn=0\nfds=[]\nwhile n < 4096:\n  fd=libc.inotify_init1(0)\n  if fd < 0: break\n  fds.append(fd); n+=1\nprint(cap, n)'], { env: BASE_ENV, policy });
        const [cap, made] = count.stdout.trim().split(' ').map(Number);
        expect(cap).toBeGreaterThanOrEqual(1);
        expect(cap).toBeLessThanOrEqual(Math.max(1, host[0]! >> 3));
        expect(made).toBeLessThanOrEqual(cap!);
        expect(made).toBeGreaterThan(0);
      } else if (caps.connectSupervisor) {
        // No user namespace: the supervisor counts what the command creates (landlock-holes tests it).
        expect(r.enforcement.mechanisms.inotify).toMatch(/counted by the supervisor/);
      } else {
        expect(r.enforcement.gaps.join('\n')).toMatch(/inotify/);
      }
      // Control: the host's own limits are untouched.
      expect(limitLine(process.pid, 'Max pending signals')).not.toMatch(/\s1024\s+1024/);
    });

    it.skipIf(skip || !isolated)("HS-05: nothing under /proc shows the host's argv, environment or name", async () => {
      const scene = makeScene('hs-proc');
      try {
        const secret = `psb-argv-secret-${Date.now()}`;
        const envSecret = `psb-env-secret-${Date.now()}`;
        // Reads every file of every process (and task) dir and /proc's top-level files, 64 KiB each.
        const walker = String.raw`
import os, sys
needles = [s[::-1].encode() for s in sys.argv[1:]]  # given reversed: our own argv must not match
hits = []
def scan(p):
    try:
        with open(p, 'rb', buffering=0) as f: data = f.read(65536)
    except OSError: return
    if any(n in data for n in needles): hits.append(p)
def scandir(d):
    try: names = os.listdir(d)
    except OSError: return
    for n in names:
        p = os.path.join(d, n)
        if n in ('mem', 'pagemap', 'kcore', 'kmsg', 'clear_refs') or os.path.islink(p): continue
        if os.path.isfile(p): scan(p)
for e in os.listdir('/proc'):
    if e.isdigit():
        scandir('/proc/' + e)
        try: tids = os.listdir('/proc/%s/task' % e)
        except OSError: tids = []
        for t in tids: scandir('/proc/%s/task/%s' % (e, t))
scandir('/proc')
print(' '.join(hits) or 'none')
try: print(open('/proc/1/comm').read().strip())
except FileNotFoundError: print('hidden')
`;
        const driver = hostScript(
          scene.root,
          'hs05.js',
          `const pol = JSON.parse(process.argv[2]);
           lib.run(${JSON.stringify(PYTHON)}, ['-c', ${JSON.stringify(walker)}, ${JSON.stringify([...secret].reverse().join(''))}, ${JSON.stringify([...envSecret].reverse().join(''))}], { env: { PATH: '/usr/bin:/bin' }, policy: pol })
             .then((r) => console.log(JSON.stringify(r.stdout)));`,
        );
        const go = (pol: SandboxPolicy | null) => {
          const r = spawnSync(NODE, [driver, JSON.stringify(pol), secret], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, PSB_HS05: envSecret } });
          return JSON.parse(r.stdout || '""') as string;
        };
        const boxed = go(policy).split('\n');
        expect(boxed[0], boxed.join('\n')).toBe('none');
        // With Landlock on the command, init is not ptrace-readable, so hidepid=ptraceable hides
        // /proc/1 entirely; without it, init's files are masked and it names itself.
        expect(boxed[1]).toBe(caps.landlockAbi > 0 ? 'hidden' : 'psb-init');
        // Control: unsandboxed, the same walk finds the driver's argv (and its environment).
        expect(go(null).split('\n')[0]).not.toBe('none');
      } finally {
        scene.cleanup();
      }
    }, 300_000);

    it.skipIf(skip)("HS-06: two network: 'none' sandboxes cannot meet through abstract unix names", async () => {
      const name = `psb-hs06-${process.pid}-${Date.now()}`;
      const binder = String.raw`
import os, socket, sys
a, b = socket.socketpair()
try:
    a.bind('\0' + sys.argv[1]); r = 'bound'
except OSError as e: r = os.strerror(e.errno)
print(r, flush=True)
sys.stdin.read()
`;
      const seer = String.raw`
import os, socket, sys
seen = sys.argv[1] in open('/proc/net/unix').read()
a, b = socket.socketpair()
try:
    a.bind('\0' + sys.argv[1]); r = 'bound'
except OSError as e: r = os.strerror(e.errno)
print('seen' if seen else 'unseen', r)
`;
      const none = modePolicy(mode, { network: 'none', filesystem: { tmp: 'none' } });
      const first = await interactive(binder, [name], none);
      const second = await run(PYTHON, ['-c', seer, name], { env: BASE_ENV, policy: none });
      await first.release();
      expect(first.line).toBe('Operation not permitted');
      expect(second.stdout.trim()).toBe('unseen Operation not permitted');
      // Control: with the host network the same probes bind and see each other.
      const full = modePolicy(mode, { network: 'full', filesystem: { tmp: 'none' } });
      const c1 = await interactive(binder, [name], full);
      const c2 = await run(PYTHON, ['-c', seer, name], { env: BASE_ENV, policy: full });
      await c1.release();
      expect(c1.line).toBe('bound');
      expect(c2.stdout.trim()).toBe('seen Address already in use');
    });

    it.skipIf(skip)('HS-07: a deny-read file inside a writable root fails to open (EACCES); writes and chmod fail; the file is unchanged', async () => {
      const scene = makeScene('hs-deny');
      try {
        const f = path.join(scene.ws, '.env');
        fs.writeFileSync(f, 'TOKEN=abc\n', { mode: 0o644 });
        const before = fs.statSync(f);
        const code = String.raw`
import os, sys
def t(f):
    try: r = f(); return 'ok' if r is None else 'ok:' + str(r)
    except OSError as e: return os.strerror(e.errno)
p = sys.argv[1]
print(' | '.join([t(lambda: open(p).read()), t(lambda: os.close(os.open(p, os.O_WRONLY))), t(lambda: open(p, 'a').write('x')),
                  t(lambda: os.chmod(p, 0o666)), t(lambda: os.truncate(p, 0))]))
`;
        const r = await run(PYTHON, ['-c', code, f], { env: BASE_ENV, cwd: scene.ws, policy: modePolicy(mode, { filesystem: { write: [scene.ws], denyRead: [f] } }) });
        const res = r.stdout.trim().split(' | ');
        expect(res[0], r.stdout + r.stderr).toBe('Permission denied');
        expect(res[1]).toBe('Permission denied');
        expect(res[2]).toBe('Permission denied');
        // Isolated: the mask is a read-only mount; Landlock: the metadata supervisor refuses it.
        expect(res[3]).toBe(isolated ? 'Read-only file system' : 'Permission denied');
        expect(res[4]).not.toMatch(/^ok/);
        const after = fs.statSync(f);
        expect(fs.readFileSync(f, 'utf8')).toBe('TOKEN=abc\n');
        expect([after.mode, after.size, after.mtimeMs]).toEqual([before.mode, before.size, before.mtimeMs]);
        // Control: without the rule the file reads.
        const ctl = await run(PYTHON, ['-c', code, f], { env: BASE_ENV, cwd: scene.ws, policy: modePolicy(mode, { filesystem: { write: [scene.ws] } }) });
        expect(ctl.stdout.split(' | ')[0]).toBe('ok:TOKEN=abc\n');
      } finally {
        scene.cleanup();
      }
    });

    it.skipIf(skip || isolated)("HS-08: a setsid daemon dies at teardown although the command tried to lower init's limits", async () => {
      const marker = uniqueSleep();
      markers.push(marker);
      const code = String.raw`
import os, resource, subprocess, sys
init = os.getppid()
res = []
for lim in () if sys.argv[2] == 'control' else (resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC, resource.RLIMIT_CPU, resource.RLIMIT_AS):
    try: resource.prlimit(init, lim, (0, 0)); res.append('ok')
    except OSError as e: res.append(os.strerror(e.errno))
subprocess.Popen(['setsid', 'sleep', sys.argv[1]], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
print(','.join(res))
`;
      const r = await run(PYTHON, ['-c', code, marker, 'boxed'], { env: BASE_ENV, policy });
      expect(r.stdout.trim()).toBe(Array(4).fill('Operation not permitted').join(','));
      expect(r.enforcement.guarantees.treeTeardown).toBe('enforced');
      await expectNoProcess(marker);
      // Control: unsandboxed the daemon outlives its parent (polled, it may not have exec'd yet).
      const m2 = uniqueSleep();
      markers.push(m2);
      await run(PYTHON, ['-c', code, m2, 'control'], { env: BASE_ENV, policy: null }).catch(() => undefined);
      expect(await eventually(() => sleepers(m2).length === 1)).toBe(true);
    });
  });
});

describe.runIf(caps.linux && caps.root && fs.existsSync('/sys/fs/cgroup/pids/cgroup.procs'))('cgroup leftovers (root, cgroup v1 pids)', () => {
  it('HS-09: a group left by a dead host is removed by the next process that runs a sandbox', async () => {
    const scene = makeScene('hs-cg');
    // A pid that is certainly dead: a child that has exited and been reaped.
    const dead = spawnSync('/bin/true').pid!;
    const own = /^\d+:pids:(.*)$/m.exec(fs.readFileSync('/proc/self/cgroup', 'utf8'))?.[1] ?? '/';
    const leftover = path.join('/sys/fs/cgroup/pids', own, `psb-${dead}-1`);
    const unrelated = path.join('/sys/fs/cgroup/pids', own, `psb-keep-${process.pid}`);
    try {
      fs.mkdirSync(leftover);
      fs.mkdirSync(unrelated);
      const driver = hostScript(scene.root, 'hs09.js', `lib.run('/bin/true', [], { env: { PATH: '/usr/bin:/bin' } }).then((r) => console.log(r.enforcement.mechanisms.processCap));`);
      const out = spawnSync(NODE, [driver], { encoding: 'utf8', timeout: 60_000 });
      expect(out.stdout, out.stderr).toMatch(/cgroup v1 pids/);
      expect(await eventually(() => !fs.existsSync(leftover))).toBe(true);
      // Control: a group that is not ours by name stays.
      expect(fs.existsSync(unrelated)).toBe(true);
    } finally {
      for (const d of [leftover, unrelated]) {
        try {
          fs.rmdirSync(d);
        } catch {
          /* gone */
        }
      }
      scene.cleanup();
    }
  });
});

describe.runIf(caps.linux && caps.userns)('isolated mode without Landlock (masks alone)', () => {
  it("HS-10: init's identity and host-acting /proc files stay masked and /proc/sys read-only when Landlock is not applied", async () => {
    // The same plan the backend makes, with its Landlock part removed (as on a kernel without it).
    const { loadLinuxNative } = await import('../../lib/native');
    const { planLinux } = await import('../../lib/platform/linux/plan');
    const native = loadLinuxNative();
    const probe = native.probe();
    const rules = {
      readAll: true, readRoots: [], writeRoots: ['/'], readOnly: [], denyRead: [], tmp: 'private', network: { kind: 'none' },
      mode: 'isolated', degraded: false, limits: {},
    } as unknown as Parameters<typeof planLinux>[0]['rules'];
    const script =
      'for f in oom_score_adj oom_adj clear_refs coredump_filter autogroup task/1/oom_score_adj task/1/clear_refs; do ' +
      '[ -e /proc/1/$f ] || continue; if echo 5 2>/dev/null > /proc/1/$f; then echo "$f=written"; else echo "$f=refused"; fi; done; ' +
      'echo cmdline=$(wc -c < /proc/1/cmdline); cat /proc/1/environ >/dev/null 2>&1 && echo environ=read || echo environ=refused; ' +
      'if echo 1 2>/dev/null > /proc/sys/vm/drop_caches; then echo sysctl=written; else echo sysctl=refused; fi; grep -c Landlock /proc/self/status || true';
    const p = planLinux({ rules, mode: 'isolated', file: '/bin/sh', argv: ['sh', '-c', script], env: { PATH: '/usr/bin:/bin' }, cwd: '/', probe });
    delete (p.native as { landlock?: unknown }).landlock;
    const hostOom = fs.readFileSync('/proc/self/oom_score_adj', 'utf8');
    const out = path.join(fs.mkdtempSync('/var/tmp/psb-hs10-'), 'out');
    const fd = fs.openSync(out, 'w');
    const exit = await new Promise<number | null>((resolve) => {
      native.spawn({ ...p.native, stdio: [-1, fd, fd] }, (code) => resolve(code));
    });
    fs.closeSync(fd);
    const text = fs.readFileSync(out, 'utf8');
    fs.rmSync(path.dirname(out), { recursive: true, force: true });
    expect(exit, text).toBe(0);
    expect(text).not.toMatch(/=written/);
    expect(text).toMatch(/oom_score_adj=refused/);
    expect(text).toMatch(/cmdline=0/);
    expect(text).toMatch(/environ=refused/);
    expect(text).toMatch(/sysctl=refused/);
    expect(fs.readFileSync('/proc/self/oom_score_adj', 'utf8')).toBe(hostOom);
    // Control: these files are writable by their owner (here, a child of ours).
    const ctl = spawnSync(PYTHON, ['-c', "import subprocess;p=subprocess.Popen(['sleep','30']);open('/proc/%d/coredump_filter'%p.pid,'w').write('0x33');open('/proc/%d/clear_refs'%p.pid,'w').write('1');print('ok');p.kill()"], { encoding: 'utf8' });
    expect(ctl.stdout.trim(), ctl.stderr).toBe('ok');
  });
});

/**
 * The tree a command leaves in its temp dir is the command's: directories with mode 000 (nested),
 * files with none, read-only directories, symlinks to host files, paths past PATH_MAX. Removing it
 * must neither crash the host (it runs in the exit path) nor touch what a symlink points to.
 * Landlock mode's TMPDIR is on the host and removed by it; isolated mode's /tmp is a tmpfs that
 * goes with the sandbox (the host must survive there too). Each host is a node process of its own
 * whose TMPDIR is a private directory, so nothing a failing run leaves reaches other tests' /tmp.
 */
describe.runIf(caps.linux && caps.python !== null)('cleanup of what the command leaves', () => {
  const HOSTILE = (hostFile: string) => String.raw`
T="$TMPDIR"; [ -n "$T" ] || T=/tmp
echo TMPDIR=$T
cd "$T" || exit 9
mkdir -p a/b/c && echo x > a/b/c/f && chmod 000 a/b/c/f a/b/c a/b a
echo y > nop && chmod 000 nop
mkdir ro && touch ro/f && chmod 500 ro
ln -s ${hostFile} link && mkdir d && ln -s ${hostFile} d/l && chmod 000 d
echo LINKMODE=$(stat -L -c %a link)
${PYTHON} -c "
import os
for i in range(1200):
    os.mkdir('dddd'); os.chdir('dddd')
open('f', 'w').write('x')
print('DEEP', 5 * (i + 1))
"
cd / && chmod 000 "$T" && echo TOP=000
`;

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    it.skipIf(skip)('HS-11: chmod 000 trees, a deep tree and symlinks left in the temp dir: the host lives, the tree goes, the link target keeps its mode', () => {
      const scene = makeScene(`hs11-${mode}`);
      try {
        const hostTmp = path.join(scene.root, 'tmp');
        fs.mkdirSync(hostTmp, { mode: 0o700 });
        const hostFile = path.join(scene.out, 'owner-only.txt');
        fs.writeFileSync(hostFile, 'keep', { mode: 0o600 });
        fs.chmodSync(hostFile, 0o600);
        const policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
        const script = hostScript(
          scene.root,
          'hs11.js',
          `process.on('warning', (w) => console.log('WARNING ' + w.code + ' ' + w.message));
           lib.run('/bin/sh', ['-c', ${JSON.stringify(HOSTILE(hostFile))}], { env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(policy)} })
             .then((r) => console.log('CODE ' + r.code + '\\nLEFT ' + JSON.stringify(r.cleanupLeft ?? []) + '\\n' + r.stdout + r.stderr));`,
        );
        const host = spawnSync(NODE, [script], { encoding: 'utf8', env: { ...process.env, TMPDIR: hostTmp }, timeout: 120_000 });
        // The host process ran to its end: no uncaught exception or rejection from the exit path.
        expect(host.status, host.stdout + host.stderr).toBe(0);
        expect(host.signal).toBe(null);
        expect(host.stdout).toMatch(/^CODE 0$/m);
        expect(host.stdout).toMatch(/^LEFT \[\]$/m);
        expect(host.stdout).not.toMatch(/WARNING/);
        // The tree was what it should be: the link resolved to the host file (mode 600), the deep
        // directory's path (5 bytes a level) was past PATH_MAX.
        expect(host.stdout).toMatch(/^LINKMODE=600$/m);
        expect(Number(/^DEEP (\d+)$/m.exec(host.stdout)?.[1])).toBeGreaterThan(4096);
        expect(host.stdout).toMatch(/^TOP=000$/m); // the temp dir itself, too
        const tmpdir = /^TMPDIR=(\S+)$/m.exec(host.stdout)![1]!;
        if (mode === 'landlock') {
          // From outside: the host's copy of the tree is gone, nothing else was made beside it.
          // The TMPDIR lives in the user's shield directory (0700, kept for good: removing it
          // would race the user's other runs), which is empty again.
          expect(tmpdir.startsWith(hostTmp + '/')).toBe(true);
          expect(fs.existsSync(tmpdir)).toBe(false);
          const shield = `process-sandbox-u${process.getuid!()}`;
          expect(fs.readdirSync(hostTmp).filter((n) => n !== shield)).toEqual([]);
          if (fs.existsSync(path.join(hostTmp, shield))) expect(fs.readdirSync(path.join(hostTmp, shield))).toEqual([]);
        } else {
          expect(tmpdir).toBe('/tmp');
        }
        // Never chmod-ed through a symlink: the host file keeps 0600 and its content.
        expect(fs.statSync(hostFile).mode & 0o7777).toBe(0o600);
        expect(fs.readFileSync(hostFile, 'utf8')).toBe('keep');
      } finally {
        scene.cleanup();
      }
    });
  });

  // macOS's private tmp dir is removed the same way from its exit path (plain fs calls there):
  // checked here on Linux, where an unprivileged uid cannot list a chmod 000 directory either.
  it('HS-11: the macOS private tmp dir removal fixes modes, never follows a symlink and never throws', async () => {
    const { makePrivateTmpDir } = await import('../../lib/platform/darwin');
    const scene = makeScene('hs11-darwin');
    try {
      const hostFile = path.join(scene.out, 'owner-only.txt');
      fs.writeFileSync(hostFile, 'keep', { mode: 0o600 });
      fs.chmodSync(hostFile, 0o600);
      const tmp = makePrivateTmpDir(scene.root);
      fs.mkdirSync(path.join(tmp.path, 'a', 'b'), { recursive: true });
      fs.writeFileSync(path.join(tmp.path, 'a', 'b', 'f'), 'x');
      fs.symlinkSync(hostFile, path.join(tmp.path, 'link'));
      for (const p of ['a/b/f', 'a/b', 'a']) fs.chmodSync(path.join(tmp.path, p), 0);
      expect(() => tmp.remove()).not.toThrow();
      expect(fs.existsSync(tmp.path)).toBe(false);
      expect(fs.statSync(hostFile).mode & 0o7777).toBe(0o600);
    } finally {
      scene.cleanup();
    }
  });

  describe.skipIf(MODES[1]!.skip)('Landlock mode', () => {
    it('HS-12: the TMPDIR is bounded by limits.tmpBytes: a command writing past it is stopped and says why; under it, it runs', async () => {
      const scene = makeScene('hs12');
      const marker = uniqueSleep();
      try {
        const limited = modePolicy('landlock', { filesystem: { write: [scene.ws] }, limits: { tmpBytes: 8 << 20 } });
        // Control first: writes 4 MiB, says so, and stays until the test lets it go (after the
        // run over the limit was stopped, so the check has had the time to look at it).
        const ctl = spawn('/bin/sh', ['-c', `head -c 4M /dev/zero > "$TMPDIR/fits" && echo written; while [ ! -e ${scene.ws}/go ]; do sleep 0.05; done; echo TMPDIR=$TMPDIR`], { env: BASE_ENV, policy: limited });
        let ctlOut = '';
        ctl.stdout!.on('data', (b: Buffer) => (ctlOut += b.toString()));
        expect(await eventually(() => ctlOut.includes('written'), 30_000)).toBe(true);
        expect(ctl.enforcement.mechanisms.tmpDirCheck).toMatch(/every 250 ms.*8388608 bytes/);
        expect(ctl.enforcement.gaps.join('\n')).toMatch(/limits\.tmpBytes is checked, not enforced/);

        const over = await run('/bin/sh', ['-c', `echo TMPDIR=$TMPDIR; head -c 32M /dev/zero > "$TMPDIR/big"; sleep ${marker}`], { env: BASE_ENV, policy: limited });
        expect(over.signal).toBe('SIGKILL');
        expect(over.killed).toBe(false); // not run()'s doing
        expect(over.limitExceeded?.limit).toBe('tmpBytes');
        expect(over.limitExceeded?.message).toMatch(/more than 8388608 bytes \(limits\.tmpBytes\)/);
        await expectNoProcess(marker);
        // From outside: the 32 MiB are gone from the host's disk with the directory.
        const overTmp = /^TMPDIR=(\S+)$/m.exec(over.stdout)![1]!;
        expect(fs.existsSync(overTmp)).toBe(false);

        fs.writeFileSync(path.join(scene.ws, 'go'), '');
        const done = await ctl.exited;
        expect(done.code).toBe(0);
        expect(done.limitExceeded).toBeUndefined();
        expect(ctlOut).toMatch(/^TMPDIR=/m);
        expect(fs.existsSync(/^TMPDIR=(\S+)$/m.exec(ctlOut)![1]!)).toBe(false);
      } finally {
        killAll(marker);
        scene.cleanup();
      }
    });

    it('HS-12b: what the command makes unreadable (chmod 000 on a subdirectory, or on the TMPDIR itself) is still counted', async () => {
      // As root the host reads mode-000 directories anyway; as an unprivileged user the check had
      // to give them back u+rwx, or 32 MiB hid behind one chmod.
      for (const hide of ['"$TMPDIR/hide"', '"$TMPDIR"']) {
        const marker = uniqueSleep();
        try {
          const limited = modePolicy('landlock', { limits: { tmpBytes: 8 << 20 } });
          const r = await run('/bin/sh', ['-c', `mkdir "$TMPDIR/hide" && head -c 32M /dev/zero > "$TMPDIR/hide/big" && chmod 000 ${hide} && echo hidden; sleep ${marker}`], { env: BASE_ENV, policy: limited });
          expect(r.stdout, hide).toContain('hidden'); // control: the command did write and hide it
          expect(r.signal, hide).toBe('SIGKILL');
          expect(r.limitExceeded?.message, hide).toMatch(/more than 8388608 bytes/);
          await expectNoProcess(marker);
        } finally {
          killAll(marker);
        }
      }
    });

    it('HS-13: many small files count too (entries are capped like the tmpfs inodes of isolated mode)', async () => {
      const marker = uniqueSleep();
      try {
        const limited = modePolicy('landlock', { limits: { tmpBytes: 4 << 20 } }); // 1024 entries
        const r = await run('/bin/sh', ['-c', `cd "$TMPDIR" && mkdir d && cd d && i=0; while [ $i -lt 3000 ]; do : > f$i; i=$((i+1)); done; sleep ${marker}`], { env: BASE_ENV, policy: limited });
        expect(r.signal).toBe('SIGKILL');
        expect(r.limitExceeded?.message).toMatch(/more than 1024 entries/);
        await expectNoProcess(marker);
      } finally {
        killAll(marker);
      }
    });
  });
});
