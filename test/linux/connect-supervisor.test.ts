/**
 * Landlock mode's connect supervisor (native/linux/supervisor/supervise_connect.cc): with a proxy-only
 * network, the command's TCP connections go to the proxy at 127.0.0.1:P and nowhere else, port P
 * of other addresses included (Landlock alone is per port). Checked from outside: a listener on
 * 127.0.0.2:P counts what it accepts. A C program (test/fixtures/connect_race.c) connects
 * blocking, non-blocking, and from a loop whose sockaddr another thread flips between 127.0.0.1
 * and 127.0.0.2 (a TOCTOU attacker). Control: the same program unsandboxed reaches 127.0.0.2:P.
 */
import { execFileSync, spawn as spawnHost } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { spawn } from '../../lib/index';
import { clearSpares } from '../../lib/platform/linux/spare';
import { caps, modePolicy } from '../helpers/capabilities';
import { landlockProxyMissing } from '../helpers/host';
import { BASE_ENV, eventually, makeScene, type Scene } from '../helpers/sandbox';
import { int80Outcomes } from '../helpers/try-syscall';
import { lookup } from '../network/enforced-helpers';

const ROOT = path.resolve(__dirname, '..', '..');
const SOURCE = path.resolve(__dirname, '..', 'fixtures', 'connect_race.c');
const ATTACKS = path.resolve(__dirname, '..', 'fixtures', 'connect_attacks.c');
const ROUNDS = 2000;

const skip =
  landlockProxyMissing() ??
  (!caps.connectSupervisor
    ? 'this kernel has no seccomp user notification with ADDFD (Linux 5.9+): the gap stays listed (test/network/enforced.test.ts checks that)'
    : !caps.cc
      ? 'no C compiler (cc) to build the racing client'
      : undefined);
// eslint-disable-next-line no-console
if (skip) console.warn(`[connect-supervisor] SKIPPING: ${skip}`);

interface Outcome {
  lines: Record<string, string>;
  hits: number;
  code: number | null;
  enforcement: Record<string, unknown> | undefined;
}

/**
 * Starts a test program sandboxed (Landlock mode, proxy-only network) or, as the control, plainly
 * with HTTP_PROXY naming a free port; resolves once it has printed "port P" (the proxy port it
 * will attack around). `output()` returns everything it printed so far.
 */
async function startProgram(program: string, args: string[], sandboxed: boolean) {
  const freePort = await new Promise<number>((res) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => res(p));
    });
  });
  const child = spawn(program, args, {
    cwd: '/',
    env: sandboxed ? BASE_ENV : { ...BASE_ENV, HTTP_PROXY: `http://127.0.0.1:${freePort}` },
    stdio: 'pipe',
    policy: sandboxed ? modePolicy('landlock', { network: { proxy: { allow: ['*.test'] } } }) : null,
    ...(sandboxed ? { proxy: { lookup } } : {}),
  });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c));
  child.stderr!.on('data', (c: Buffer) => (out += c));
  expect(await eventually(() => /^port \d+$/m.test(out)), out).toBe(true);
  return { child, port: Number(/^port (\d+)$/m.exec(out)![1]), output: () => out };
}

describe.skipIf(skip)('Landlock mode: the connect supervisor', () => {
  let scene: Scene;
  let bin: string;
  beforeAll(() => {
    scene = makeScene('connsup');
    bin = path.join(scene.root, 'connect_race');
    execFileSync('cc', ['-O2', '-pthread', '-o', bin, SOURCE], { stdio: 'pipe' });
    fs.chmodSync(bin, 0o755);
  });
  afterAll(() => scene?.cleanup());

  // Runs the racer; once it has printed the port P, the host listens on 127.0.0.2:P (and, for the
  // unsandboxed control, on 127.0.0.1:P in place of the proxy) and counts the connections.
  async function race(sandboxed: boolean): Promise<Outcome> {
    const go = path.join(scene.root, `go-${sandboxed}`);
    fs.rmSync(go, { force: true });
    const { child, port, output } = await startProgram(bin, [go, String(ROUNDS)], sandboxed);
    let hits = 0;
    const servers: net.Server[] = [];
    const listen = (host: string, count: boolean) =>
      new Promise<void>((res, rej) => {
        const srv = net.createServer((c) => {
          if (count) hits++;
          c.on('error', () => {});
          c.destroy();
        });
        servers.push(srv);
        srv.once('error', rej);
        srv.listen(port, host, () => res());
      });
    await listen('127.0.0.2', true);
    if (!sandboxed) await listen('127.0.0.1', false);
    fs.writeFileSync(go, '');
    const exit = await child.exited;
    // Connections still in the listener's queue are counted before it closes.
    await new Promise((r) => setTimeout(r, 200));
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
    const lines = Object.fromEntries(
      output()
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf(' ')), l.slice(l.indexOf(' ') + 1)]),
    );
    return { lines, hits, code: exit.code, enforcement: child.enforcement as unknown as Record<string, unknown> };
  }

  it('connects reach the proxy only: 127.0.0.2 on the proxy port gets nothing, even from a thread racing the sockaddr', async () => {
    const inside = await race(true);
    expect(inside.code, JSON.stringify(inside.lines)).toBe(0);
    const report = inside.enforcement as { mechanisms: Record<string, unknown>; gaps: string[]; guarantees: Record<string, string> };
    expect(report.mechanisms.connectSupervisor).toBe('seccomp-user-notif');
    expect(report.guarantees.network).toBe('enforced');
    expect(report.gaps.some((g) => /proxy's port \d+ are not blocked/.test(g))).toBe(false);
    // Refused by Landlock (no TCP port is allowed to the command itself).
    expect(inside.lines.direct).toBe('EACCES');
    // The proxy is reached, blocking and non-blocking; a second connect says EISCONN as usual.
    expect(inside.lines.proxy).toBe('ok');
    expect(inside.lines.nonblock).toBe('ok');
    expect(inside.lines.again).toBe('EISCONN');
    const m = /^ok=(\d+) denied=(\d+)$/.exec(inside.lines.race ?? '');
    expect(m, JSON.stringify(inside.lines)).not.toBeNull();
    expect(Number(m![1]) + Number(m![2])).toBe(ROUNDS);
    expect(Number(m![1])).toBeGreaterThan(0); // the ones the supervisor read as 127.0.0.1 went to the proxy
    // From outside: the other address never accepted a connection.
    expect(inside.hits).toBe(0);

    // Control: unsandboxed, the direct connect reaches 127.0.0.2:P and the listener counts it.
    // Usually many raced ones do too, but how many the flipping thread lands is the scheduler's
    // call: with both CPUs busy it can be none, so only the direct one is counted on.
    const outside = await race(false);
    expect(outside.code).toBe(0);
    expect(outside.lines.direct).toBe('ok');
    expect(outside.lines.proxy).toBe('ok');
    expect(outside.hits).toBeGreaterThanOrEqual(1);
  });

  // test/fixtures/connect_attacks.c: the ways around the supervisor a hostile command would try,
  // aimed at 127.0.0.2:P and at 127.0.0.1:Q (another port), with a flood of threads connecting
  // at the end. Outside checks: both listeners' accept counts, the host's open fds before and
  // after, and a timer that must keep firing on the host's loop while the command floods.
  async function attack(sandboxed: boolean) {
    const go = path.join(scene.root, `attack-go-${sandboxed}`);
    fs.rmSync(go, { force: true });
    const bin2 = path.join(scene.root, 'connect_attacks');
    if (!fs.existsSync(bin2)) execFileSync('cc', ['-O2', '-pthread', '-o', bin2, ATTACKS], { stdio: 'pipe' });
    const hits = { addr: 0, port: 0 };
    const servers: net.Server[] = [];
    const listen = (host: string, port: number, count?: 'addr' | 'port') =>
      new Promise<number>((res, rej) => {
        const srv = net.createServer((c) => {
          if (count) hits[count]++;
          c.on('error', () => {});
          c.destroy();
        });
        servers.push(srv);
        srv.once('error', rej);
        srv.listen(port, host, () => res((srv.address() as net.AddressInfo).port));
      });
    const other = await listen('127.0.0.1', 0, 'port');
    const fdsBefore = fs.readdirSync('/proc/self/fd').length;
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    const { child, port, output } = await startProgram(bin2, [go, String(other)], sandboxed);
    await listen('127.0.0.2', port, 'addr');
    if (!sandboxed) await listen('127.0.0.1', port);
    const ticksAtGo = ticks;
    fs.writeFileSync(go, '');
    const exit = await child.exited;
    const ticksDuring = ticks - ticksAtGo;
    clearInterval(timer);
    await new Promise((r) => setTimeout(r, 200));
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
    // The host holds no more fds than before once the sandbox and its proxy connections are gone
    // (and the sandbox prepared ahead for a next run of this shape, which holds fds of its own).
    clearSpares();
    const fdsSettled = await eventually(() => fs.readdirSync('/proc/self/fd').length <= fdsBefore);
    const lines = Object.fromEntries(
      output()
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf(' ')), l.slice(l.indexOf(' ') + 1)]),
    );
    return { lines, hits, code: exit.code, ticksDuring, fdsSettled, fds: [fdsBefore, fs.readdirSync('/proc/self/fd').length] };
  }

  it('hostile commands: Fast Open, passed, reused and swapped sockets, vfork, odd arguments, other socket kinds, compat ABIs, a flood: only the proxy is reached', async () => {
    const inside = await attack(true);
    const l = inside.lines;
    expect(inside.code, JSON.stringify(l)).toBe(0);
    expect(l.proxy).toBe('ok');
    // Landlock refuses every TCP connect the supervisor lets through.
    for (const k of ['other-addr', 'other-port', 'tfo-connect', 'reuse-injected', 'passed-socket', 'addrlen-high-bits', 'fd-high-bits']) {
      expect([k, l[k]]).toEqual([k, 'EACCES']);
    }
    // The seccomp filter refuses Fast Open sends and every socket but AF_INET/TCP.
    for (const k of ['tfo-sendto', 'tfo-sendmsg', 'tfo-sendmmsg', 'mptcp', 'udp', 'inet6', 'raw', 'packet', 'netlink', 'vsock', 'xdp', 'sctp']) {
      expect([k, l[k]]).toEqual([k, 'EPERM']);
    }
    expect(l.io_uring).toMatch(/^(EPERM|ENOSYS)$/);
    // What the kernel itself refuses stays refused, with the kernel's errno.
    expect([l['addrlen-15'], l['addrlen-minus-1'], l['addrlen-huge'], l['bad-pointer'], l['bad-fd']]).toEqual(['EINVAL', 'EINVAL', 'EINVAL', 'EFAULT', 'EBADF']);
    if (process.arch === 'x64') expect(l.x32).toBe('SYS');
    // No seccomp listener of the command's own: the sandbox's filter holds the chain's one.
    expect(l['own-listener']).toBe('EBUSY');
    // A vfork child's connect is answered in the child's fd table only: the parent's socket (the
    // same open file description in the kernel's own connect) stays unconnected.
    expect([l['vfork-child'], l['vfork-parent']]).toEqual(['ok', 'ENOTCONN']);
    // Swapping other files onto the fd and flipping the address while connecting: connections
    // are made (to the proxy) and none has another peer.
    const r = /^ok=(\d+) other=(\d+)$/.exec(l['fd-race'] ?? '');
    expect(r, JSON.stringify(l)).not.toBeNull();
    expect(Number(r![1])).toBeGreaterThan(0);
    expect(Number(r![2])).toBe(0);
    // The flood: connects to the proxy went through, none to 127.0.0.2.
    const m = /^ok=(\d+) other=(\d+)$/.exec(l.flood ?? '');
    expect(m, JSON.stringify(l)).not.toBeNull();
    expect(Number(m![1])).toBeGreaterThan(0);
    expect(Number(m![2])).toBe(0);
    // From outside: neither listener accepted anything; the host's loop kept turning; no fd leaked.
    expect(inside.hits).toEqual({ addr: 0, port: 0 });
    expect(inside.ticksDuring).toBeGreaterThan(0);
    expect(inside.fdsSettled, JSON.stringify(inside.fds)).toBe(true);

    // Control: unsandboxed, the same attacks reach both listeners.
    const outside = await attack(false);
    const o = outside.lines;
    expect(outside.code).toBe(0);
    for (const k of ['other-addr', 'other-port', 'tfo-sendto', 'tfo-sendmsg', 'tfo-sendmmsg', 'tfo-connect', 'reuse-injected', 'passed-socket', 'addrlen-high-bits', 'fd-high-bits', 'udp', 'inet6']) {
      expect([k, o[k]]).toEqual([k, 'ok']);
    }
    expect(Number(/other=(\d+)/.exec(o.flood ?? '')?.[1])).toBeGreaterThan(0);
    expect([o['vfork-child'], o['vfork-parent']]).toEqual(['ok', 'ok']);
    expect(o['own-listener']).toBe('ok');
    expect(Number(/ok=(\d+)/.exec(o['fd-race'] ?? '')?.[1])).toBeGreaterThan(0);
    expect(outside.hits.addr).toBeGreaterThan(10);
    expect(outside.hits.port).toBeGreaterThan(0);

    // int 0x80 (i386 socketcall connect to 127.0.0.2:P): what the control did decides what to
    // expect inside (int80Outcomes); its connection never arrived (inside.hits above).
    if (process.arch === 'x64') {
      const signalOf = (word: string | undefined) => (word !== undefined && `SIG${word}` in os.constants.signals ? `SIG${word}` : null);
      const expected = int80Outcomes(signalOf(o.int80));
      // eslint-disable-next-line no-console
      if (signalOf(o.int80) !== null) console.warn(`[connect-supervisor] ${expected.why}`);
      else expect(o.int80, 'control').toBe('ok');
      expect(expected.signals, `${expected.why}; got ${l.int80}`).toContain(signalOf(l.int80));
    }
  }, 60_000);

  // A host process of its own (a crash must not take the test runner down) runs `what`:
  //   worker: a Worker spawns the racer (connecting to the proxy in a loop, so notifications are
  //           in flight) and is terminated while it runs: the supervisor's teardown hook must
  //           close its handles without a crash; the host then exits by itself.
  // (An unref'd command does not release the loop here: the managed proxy serving it holds it,
  // as the README says; the supervisor's own handles are always unref'd.)
  async function host(what: 'worker'): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
    const go = path.join(scene.root, `go-host-${what}`);
    fs.writeFileSync(go, '');
    const script = path.join(scene.root, `host-${what}.js`);
    fs.writeFileSync(
      script,
      `const { Worker, isMainThread, parentPort } = require('worker_threads');
require(${JSON.stringify(path.join(ROOT, 'test/network/ts-register.cjs'))});
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const start = (go, rounds, onPort) => {
  const { spawn } = require(${JSON.stringify(path.join(ROOT, 'lib/index.ts'))});
  const child = spawn(${JSON.stringify(bin)}, [go, String(rounds)], {
    cwd: '/', env: ${JSON.stringify(BASE_ENV)}, stdio: 'pipe',
    policy: { mode: 'landlock', degraded: true, network: { proxy: { allow: ['*.test'] } } },
  });
  let buf = '';
  child.stdout.on('data', (c) => { buf += c; if (/^port \\d+$/m.test(buf)) { onPort(child.enforcement.mechanisms.connectSupervisor); onPort = () => {}; } });
  return child;
};
if (isMainThread) {
  const w = new Worker(__filename);
  w.on('error', (e) => out({ error: String(e) }));
  w.on('message', (mech) => setTimeout(() => w.terminate().then(() => out({ mech, terminated: true })), 300));
} else {
  start(${JSON.stringify(go)}, 100000000, (mech) => parentPort.postMessage(mech));
}
`,
    );
    const child = spawnHost(process.execPath, [script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c));
    child.stderr.on('data', (c: Buffer) => (stderr += c));
    const [code, signal] = await new Promise<[number | null, string | null]>((r) => child.on('exit', (c, sig) => r([c, sig])));
    return { code, signal, stdout, stderr };
  }

  it('terminating a Worker whose sandbox is connecting through the supervisor neither crashes nor hangs the host', async () => {
    const r = await host('worker');
    expect(r).toEqual({ code: 0, signal: null, stdout: '{"mech":"seccomp-user-notif","terminated":true}\n', stderr: '' });
  }, 60_000);
});

describe.skipIf(process.platform !== 'linux')('Landlock-mode plan with and without the connect supervisor', () => {
  const plan = async (connectSupervisor: number | undefined) => {
    const { planLinux } = await import('../../lib/platform/linux/plan');
    const probe = { landlockAbi: 7, seccomp: 0, userns: -1, euid: 1000, connectSupervisor };
    const rules = {
      readAll: true, readRoots: [], writeRoots: [], readOnly: [], denyRead: [], tmp: 'private',
      network: { kind: 'proxy' }, mode: 'landlock', degraded: true, limits: {},
    } as unknown as Parameters<typeof planLinux>[0]['rules'];
    return planLinux({ rules, mode: 'landlock', file: '/bin/true', argv: ['true'], env: {}, cwd: '/', probe, proxyPort: 4321 });
  };
  const portGap = (gaps: string[]) => gaps.filter((g) => /proxy's port 4321 are not blocked/.test(g));
  // Who else can use the host listener: nobody but the sandbox with the supervisor (test/linux/proxy-peers.test.ts).
  const listenerGap = (gaps: string[]) => gaps.filter((g) => /listens on the host's 127\.0\.0\.1:4321/.test(g));

  it('supported: no Landlock port rule, connect() supervised for 127.0.0.1:4321, no gap, network enforced', async () => {
    const p = await plan(0);
    expect(p.native.landlock!.connectPorts).toBeUndefined();
    expect(p.native.seccomp).toMatchObject({ net: 'proxy', connectSupervisor: 4321 });
    // The same listener carries the metadata supervisor (landlock-holes.test.ts).
    expect(p.native.seccomp!.metadataSupervisor).toBeDefined();
    expect(p.enforcement.mechanisms.connectSupervisor).toBe('seccomp-user-notif');
    expect(portGap(p.enforcement.gaps)).toEqual([]);
    expect(listenerGap(p.enforcement.gaps)).toEqual([]);
    expect(p.enforcement.guarantees.network).toBe('enforced');
  });

  it.each([[-95], [undefined]])('unsupported (probe %s): the port rule and the listed gap stay, network partial', async (errno) => {
    const p = await plan(errno);
    expect(p.native.landlock!.connectPorts).toEqual([4321]);
    expect(p.native.seccomp).toEqual({ net: 'proxy' });
    expect(p.enforcement.mechanisms.connectSupervisor).toBeUndefined();
    // Nor metadata supervision: chmod/chown/utime/xattr and inotify are listed gaps instead.
    expect(p.enforcement.mechanisms.metadataSupervisor).toBeUndefined();
    expect(p.enforcement.gaps.join('\n')).toMatch(/chmod, chown, utime and xattr changes .* not blocked/);
    expect(p.enforcement.gaps.join('\n')).toMatch(/inotify instances and watches are not capped/);
    expect(portGap(p.enforcement.gaps)).toHaveLength(1);
    expect(listenerGap(p.enforcement.gaps).join('\n')).toMatch(/only by uid: other processes of this uid can use it too/);
    expect(p.enforcement.guarantees.network).toBe('partial');
  });
});
