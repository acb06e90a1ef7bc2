/**
 * PROC-06 by every route, in both modes and in Landlock mode without Landlock's signal scope:
 * kill (a pid, -1), tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_send_signal and a
 * SIGIO owner (F_SETOWN) aimed at a host process must not reach it, while signals inside keep
 * working (own children by each route, raise/abort, kill(0), kill(-1), job control, `timeout`,
 * node's child.kill, python's os.kill).
 *
 * Landlock ABI 6+ scopes signals in the kernel; below it the signal supervisor
 * (native/linux/supervisor/supervise_signals.cc) does. This host's kernel is emulated as ABI 5 with
 * PSB_LANDLOCK_ABI_MAX=5 (the whole run then sees ABI 5: report, gaps and filter). The victim is
 * a host python process that logs every signal it gets: checked from outside, it is alive and
 * logged nothing.
 */
import { spawn as spawnHost, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps, MODES } from '../helpers/capabilities';
import { BASE_ENV, DIST_INDEX, eventually, makeScene, NODE, PYTHON, type Scene } from '../helpers/sandbox';

// The host process aimed at: logs each catchable signal it receives, then keeps sleeping.
const VICTIM = String.raw`
import os, signal, sys, time
log = sys.argv[1]
def got(n, f):
    with open(log, 'a') as fh: fh.write('sig %d\n' % n)
for s in (1, 2, 10, 12, 14, 15, 23, 29):
    signal.signal(s, got)
with open(log, 'a') as fh: fh.write('ready pid %d\n' % os.getpid())
while True: time.sleep(1)
`;

// Inside: every route at the victim (argv[1]), then the same routes at the sandbox's own processes.
const PROBE = String.raw`
import ctypes, errno, fcntl, json, os, signal, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
V = int(sys.argv[1])
NR = {'x86_64': dict(kill=62, tkill=200, tgkill=234, sigq=129, tgsigq=297, pidfd_open=434, pidfd_send=424),
      'aarch64': dict(kill=129, tkill=130, tgkill=131, sigq=138, tgsigq=240, pidfd_open=434, pidfd_send=424)}[os.uname().machine]
def sc(name, *a):
    r = libc.syscall(NR[name], *a)
    return 'ok' if r >= 0 else errno.errorcode[ctypes.get_errno()]
info = ctypes.create_string_buffer(128)
ctypes.memmove(info, (ctypes.c_int * 3)(15, 0, -1), 12)  # si_signo 15, si_code SI_QUEUE
out, ins = {}, {}
out['kill'] = sc('kill', V, 15)
out['tkill'] = sc('tkill', V, 15)
out['tgkill'] = sc('tgkill', V, V, 15)
out['rt_sigqueueinfo'] = sc('sigq', V, 15, info)
out['rt_tgsigqueueinfo'] = sc('tgsigq', V, V, 15, info)
pfd = libc.syscall(NR['pidfd_open'], V, 0)
out['pidfd_send_signal'] = sc('pidfd_send', pfd, 15, None, 0) if pfd >= 0 else 'open:' + errno.errorcode[ctypes.get_errno()]
r, w = os.pipe()
try:
    fcntl.fcntl(r, fcntl.F_SETOWN, V)
    fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
    os.write(w, b'x')
    out['f_setown'] = 'ok'
except OSError as e:
    out['f_setown'] = errno.errorcode[e.errno]
def child():
    c = os.fork()
    if c == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        time.sleep(60)
        os._exit(0)
    return c
def status(c):
    return os.waitpid(c, 0)[1]
c = child(); ins['kill'] = [sc('kill', c, 15), status(c)]
c = child(); ins['rt_sigqueueinfo'] = [sc('sigq', c, 15, info), status(c)]
c = child(); ins['tgkill'] = [sc('tgkill', c, c, 15), status(c)]
c = child(); ins['tkill'] = [sc('tkill', c, 15), status(c)]
c = child(); ins['rt_tgsigqueueinfo'] = [sc('tgsigq', c, c, 15, info), status(c)]
c = child(); cfd = libc.syscall(NR['pidfd_open'], c, 0); ins['pidfd_send_signal'] = [sc('pidfd_send', cfd, 15, None, 0), status(c)]
c = os.fork()
if c == 0:
    os.abort()
ins['abort'] = status(c)
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
signal.raise_signal(signal.SIGUSR1)
os.kill(os.getpid(), signal.SIGUSR1)
ev = threading.Event()
t = threading.Thread(target=ev.wait); t.start()
signal.pthread_kill(t.ident, signal.SIGUSR1)
ev.set(); t.join()
time.sleep(0.05)
ins['own_handlers'] = len(got)
got.clear()
signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))
c = child()
ins['kill0'] = sc('kill', 0, signal.SIGUSR2)
time.sleep(0.05)
ins['kill0_self'] = len(got)
os.kill(c, 15); status(c)
fcntl.fcntl(r, fcntl.F_SETOWN, os.getpid())
ins['f_setown_self'] = fcntl.fcntl(r, fcntl.F_GETOWN) == os.getpid()
# kill(-1) only where a signal to the host process is refused: unconfined, it would signal
# every process of this uid on the host (as root: every process but pid 1).
if sc('kill', V, 0) != 'ok':
    c = child()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(0.05)
    ins['kill-1'] = [sc('kill', -1, 15), status(c)]
else:
    ins['kill-1'] = 'not tried: the host process is signallable'
print('PROBE ' + json.dumps({'out': out, 'in': ins}))
`;

// Job control, kill 0, timeout, node's child.kill.
const SHELL = String.raw`set -m
sleep 60 & kill -TERM %1; wait %1; echo job=$?
trap 'echo trapped' USR1; kill -USR1 0; echo kill0=$?
timeout 0.3 sleep 30; echo timeout=$?
"$NODE" -e "const c = require('child_process').spawn('sleep', ['60']); c.on('exit', (code, sig) => console.log('node=' + sig)); setTimeout(() => c.kill(), 50)"
`;

// Run in its own node process, so that PSB_LANDLOCK_ABI_MAX applies from the first probe on.
const SCRIPT = `
const lib = require(${JSON.stringify(DIST_INDEX)});
const [mode, victim, python, probe, shell, victimCode, otherDir] = process.argv.slice(2);
const otherLog = otherDir + '/victim.log';
(async () => {
  const policy = { mode, degraded: mode === 'landlock' };
  const env = { ...${JSON.stringify(BASE_ENV)}, NODE: process.execPath };
  const p = await lib.run(python, ['-c', probe, victim], { policy, env, timeout: 60000 });
  const s = await lib.run('/bin/bash', ['-c', shell], { policy, env, timeout: 60000 });
  const parse = (r) => {
    const line = r.stdout.split('\\n').find((l) => l.startsWith('PROBE '));
    return line ? JSON.parse(line.slice(6)) : { stdout: r.stdout, stderr: r.stderr, code: r.code, signal: r.signal };
  };
  // Landlock mode: the same routes at a process of ANOTHER sandbox of the same host and uid.
  let other;
  if (mode === 'landlock') {
    const b = lib.spawn(python, ['-c', victimCode, otherLog], { policy: { ...policy, filesystem: { write: [otherDir] } }, env });
    const fs = require('fs');
    for (let i = 0; i < 600 && !(fs.existsSync(otherLog) && fs.readFileSync(otherLog, 'utf8').includes('ready')); i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const otherPid = /pid (\\d+)/.exec(fs.readFileSync(otherLog, 'utf8'))[1];
    const q = await lib.run(python, ['-c', probe, otherPid], { policy, env, timeout: 60000 });
    other = { probe: parse(q), log: fs.readFileSync(otherLog, 'utf8'), alive: b.exitCode === null };
    b.kill('SIGKILL');
    await b.exited;
  }
  console.log(JSON.stringify({
    probe: parse(p),
    other,
    shell: s.stdout + s.stderr,
    signals: p.enforcement.mechanisms.signals,
    abi: p.enforcement.mechanisms.landlockAbi,
    gaps: p.enforcement.gaps,
  }));
})().catch((e) => { console.log(JSON.stringify({ error: String(e && e.stack || e) })); });
`;

const scenes: Scene[] = [];
afterAll(() => scenes.forEach((s) => s.cleanup()));

interface Case {
  name: string;
  mode: 'isolated' | 'landlock';
  env: Record<string, string>;
  skip: string | undefined;
  signals?: string;
}

const landlockSkip = MODES.find((m) => m.name === 'landlock')!.skip;
const CASES: Case[] = [
  { name: 'isolated', mode: 'isolated', env: {}, skip: MODES.find((m) => m.name === 'isolated')!.skip },
  {
    name: `landlock (this kernel's ABI ${caps.landlockAbi})`,
    mode: 'landlock',
    env: {},
    skip: landlockSkip,
    signals: caps.landlockAbi >= 6 ? 'landlock-scope' : 'seccomp-user-notif',
  },
  {
    name: 'landlock, ABI 5 emulated (signal supervisor)',
    mode: 'landlock',
    env: { PSB_LANDLOCK_ABI_MAX: '5' },
    skip: landlockSkip ?? (caps.metadataSupervisor ? undefined : 'the signal supervisor needs seccomp user notification'),
    signals: 'seccomp-user-notif',
  },
];

describe.runIf(caps.linux)('PROC-06: signals reach the sandbox\'s own processes only', () => {
  describe.each(CASES)('$name', (c) => {
    it.skipIf(c.skip ?? (caps.python ? undefined : 'needs /usr/bin/python3'))('every route at a host process fails; every route inside works', async () => {
      const scene = makeScene(`signals-${c.mode}`);
      scenes.push(scene);
      const log = path.join(scene.out, 'victim.log');
      const victim = spawnHost(PYTHON, ['-c', VICTIM, log], { stdio: 'ignore' });
      try {
        expect(await eventually(() => fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('ready'))).toBe(true);
        const script = path.join(scene.root, 'signals.js');
        fs.writeFileSync(script, SCRIPT);
        const otherDir = path.join(scene.ws, 'other');
        fs.mkdirSync(otherDir);
        const r = spawnSync(NODE, [script, c.mode, String(victim.pid), PYTHON, PROBE, SHELL, VICTIM, otherDir], {
          encoding: 'utf8',
          timeout: 220_000,
          env: { ...process.env, ...c.env },
        });
        const res = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}');
        expect(res.error, r.stderr).toBeUndefined();
        const { out, in: ins } = res.probe;
        expect(out, JSON.stringify(res.probe)).toBeDefined();
        // At the host process: refused (EPERM by Landlock's scope or the supervisor; isolated
        // mode's pid namespace has no such pid: ESRCH).
        for (const route of ['kill', 'tkill', 'tgkill', 'rt_sigqueueinfo', 'rt_tgsigqueueinfo', 'pidfd_send_signal']) {
          expect(['EPERM', 'ESRCH', 'open:ESRCH'], `${route}: ${JSON.stringify(out)}`).toContain(out[route]);
        }
        // Checked from outside: the victim is alive and logged no signal (F_SETOWN + O_ASYNC's
        // SIGIO and kill(-1)'s SIGTERM included).
        expect(victim.exitCode).toBeNull();
        expect(victim.signalCode).toBeNull();
        expect(fs.readFileSync(log, 'utf8')).toBe(`ready pid ${victim.pid}\n`);
        const state = /^State:\s+(\S)/m.exec(fs.readFileSync(`/proc/${victim.pid}/status`, 'utf8'))?.[1];
        expect(['S', 'R']).toContain(state);
        // Inside, every route reaches the sandbox's own child (killed by SIGTERM: status 15).
        for (const route of ['kill', 'rt_sigqueueinfo', 'tgkill', 'tkill', 'rt_tgsigqueueinfo', 'pidfd_send_signal']) {
          expect(ins[route], `${route}: ${JSON.stringify(ins)}`).toEqual(['ok', 15]);
        }
        expect(ins.abort).toBe(6); // SIGABRT
        expect(ins.own_handlers).toBe(3); // raise(), os.kill(getpid()), pthread_kill
        expect(ins.kill0).toBe('ok');
        expect(ins.kill0_self).toBe(1);
        expect(ins.f_setown_self).toBe(true);
        expect(ins['kill-1']).toEqual(['ok', 15]);
        expect(res.shell).toMatch(/^job=143$/m);
        expect(res.shell).toMatch(/^trapped$/m);
        expect(res.shell).toMatch(/^kill0=0$/m);
        expect(res.shell).toMatch(/^timeout=124$/m);
        expect(res.shell).toMatch(/^node=SIGTERM$/m);
        if (c.mode === 'landlock') {
          // Another sandbox's process is outside too: refused by every route, and it logged nothing.
          const o = res.other.probe.out;
          for (const route of ['kill', 'tkill', 'tgkill', 'rt_sigqueueinfo', 'rt_tgsigqueueinfo', 'pidfd_send_signal']) {
            expect(['EPERM', 'ESRCH'], `${route} (other sandbox): ${JSON.stringify(o)}`).toContain(o[route]);
          }
          expect(res.other.log).toMatch(/^ready pid \d+\n$/);
          expect(res.other.alive).toBe(true);
        }
        if (c.signals) {
          expect(res.signals).toBe(c.signals);
          expect(res.gaps.join('\n')).not.toMatch(/signal/);
        }
        // (It only lowers: a kernel below ABI 5 stays what it is.)
        if (c.env.PSB_LANDLOCK_ABI_MAX) expect(res.abi).toBe(Math.min(5, caps.landlockAbi));
      } finally {
        victim.kill('SIGKILL');
      }
      // Two sandboxed runs (three in Landlock mode) of a python probe: over a minute in the
      // kernel matrix's emulated guests.
    }, 240_000);
  });
});

// The plan alone (no spawn): which mechanism holds PROC-06 in Landlock mode on each kernel, and
// what the report says, including the process cap without a cgroup.
describe('PROC-06 and the process cap in a Landlock-mode plan', () => {
  const plan = async (landlockAbi: number, connectSupervisor: number, uidTasks?: number, euid = 1000, processTracing?: number) => {
    const { planLinux } = await import('../../lib/platform/linux/plan');
    const probe = { landlockAbi, seccomp: 0, userns: -1, euid, connectSupervisor, processTracing };
    const rules = {
      readAll: true, readRoots: [], writeRoots: ['/srv/ws'], readOnly: [], denyRead: [],
      tmp: 'none', network: { kind: 'none' }, mode: 'landlock', degraded: true, limits: {},
    } as unknown as Parameters<typeof planLinux>[0]['rules'];
    return planLinux({ rules, mode: 'landlock', file: '/bin/true', argv: ['true'], env: {}, cwd: '/', probe, uidTasks });
  };

  it('ABI 6+: Landlock scopes signals, no supervisor', async () => {
    const p = await plan(6, 0);
    expect(p.native.seccomp!.signalSupervisor).toBeUndefined();
    expect(p.enforcement.mechanisms.signals).toBe('landlock-scope');
    expect(p.enforcement.gaps.join('\n')).not.toMatch(/signal/);
  });

  it('below ABI 6: the signal supervisor where the kernel has user notification, else a listed gap', async () => {
    const p = await plan(2, 0);
    expect(p.native.seccomp!.signalSupervisor).toBe(true);
    expect(p.enforcement.mechanisms.signals).toBe('seccomp-user-notif');
    expect(p.enforcement.gaps.join('\n')).not.toMatch(/signal/);
    const none = await plan(2, -95);
    expect(none.native.seccomp!.signalSupervisor).toBeUndefined();
    expect(none.enforcement.mechanisms.signals).toBe('none');
    expect(none.enforcement.gaps.join('\n')).toMatch(/no signal scoping .*processes outside the sandbox can be signalled/);
  });

  it('without a cgroup: RLIMIT_NPROC is the uid\'s count plus the cap; as root init traces and counts, or the report says nothing binds', async () => {
    const p = await plan(7, 0, 123);
    expect(p.native.rlimitNproc).toBe(123 + 4096);
    expect(p.enforcement.mechanisms.processCap).toBe("RLIMIT_NPROC 4219 (the uid's 123 tasks at spawn + 4096: counts all of the user's processes)");
    expect(p.enforcement.limits.maxProcesses).toBe(4096);
    const uncounted = await plan(7, 0, undefined);
    expect(uncounted.native.rlimitNproc).toBeUndefined();
    expect(uncounted.enforcement.gaps.join('\n')).toMatch(/no process cap: this uid's processes could not be counted/);
    // Where init can trace the command, it counts instead.
    const tracedUser = await plan(7, 0, undefined, 1000, 0);
    expect(tracedUser.native.rlimitNproc).toBeUndefined();
    expect(tracedUser.native.traceProcessCap).toBe(4096);
    expect(tracedUser.enforcement.gaps.join('\n')).not.toMatch(/process cap|capped/);
    expect((await plan(7, 0, 123, 1000, 0)).native.traceProcessCap).toBeUndefined();  // RLIMIT_NPROC binds then
    const root = await plan(7, 0, undefined, 0, 0);
    expect(root.native.traceProcessCap).toBe(4096);
    expect(root.native.rlimitNproc).toBeUndefined();
    expect(root.enforcement.mechanisms.processCap).toBe('traced by init: 4096 tasks, threads included (creations past them fail EAGAIN)');
    expect(root.enforcement.limits.maxProcesses).toBe(4096);
    expect(root.enforcement.gaps.join('\n')).not.toMatch(/capped/);
    const untraceable = await plan(7, 0, undefined, 0, -1);
    expect(untraceable.native.traceProcessCap).toBeUndefined();
    expect(untraceable.enforcement.mechanisms.processCap).toBe('none');
    expect(untraceable.enforcement.gaps.join('\n')).toMatch(
      /RLIMIT_NPROC does not bind uid 0, so the number of processes is not capped \(init cannot trace the command here to count them: errno 1\)/,
    );
  });
});
