/**
 * The seccomp filter, seen from inside a real sandbox (both Linux modes).
 *
 * Every probe runs twice with the same arguments: unsandboxed (`policy: null`, the positive
 * control, which must reach the kernel) and sandboxed (which must be refused with the errno the
 * filter returns). Network probes aim at listeners this process owns, and the test also checks
 * that nothing arrived there. Probes with deliberately bad arguments (TIOCSTI on fd -1, mount on a
 * missing target, ...) never change the host; see test/fixtures/try_syscall.c.
 *
 * Inside the sandbox other layers (dropped capabilities, namespaces, Landlock) may refuse some of
 * these calls too; the errno and the paired control still pin the expected outcome, and the
 * native filter itself was checked rule by rule without those layers.
 */
import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { run, spawn as sandboxSpawn } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy, type LinuxMode } from '../helpers/capabilities';
import { int80Outcomes, parseTrySyscall, trySyscallPath, TRY_SYSCALL_EXIT } from '../helpers/try-syscall';

const isLinux = process.platform === 'linux';
const isX64 = process.arch === 'x64';

type Net = 'none' | 'full';

interface ProbeRun {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  result: ReturnType<typeof parseTrySyscall>;
}

/** /tmp stays the host's (read-only) so the cached probe binary and the listeners are visible. */
function policyFor(mode: LinuxMode, network: Net): SandboxPolicy {
  return modePolicy(mode, { network, filesystem: { tmp: 'none' } });
}

async function probe(policy: SandboxPolicy | null, args: string[]): Promise<ProbeRun> {
  const res = await run(trySyscallPath(), args, {
    cwd: '/',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    policy,
  });
  const stdout = String(res.stdout);
  return {
    code: res.code,
    signal: res.signal ?? null,
    stdout,
    stderr: String(res.stderr),
    result: parseTrySyscall(stdout),
  };
}

/** Positive controls, one unsandboxed run per distinct argv. */
const controls = new Map<string, Promise<ProbeRun>>();
function control(args: string[]): Promise<ProbeRun> {
  const key = args.join('\0');
  let p = controls.get(key);
  if (p === undefined) {
    p = probe(null, args);
    controls.set(key, p);
  }
  return p;
}

function expectAllowed(r: ProbeRun, what: string): void {
  expect(r.signal, `${what}: ${r.stdout}${r.stderr}`).toBeNull();
  expect(r.result?.ok, `${what}: ${r.stdout}${r.stderr}`).toBe(true);
  expect(r.code).toBe(TRY_SYSCALL_EXIT.allowed);
}

function expectDenied(r: ProbeRun, errno: string, what: string): void {
  expect(r.signal, `${what}: ${r.stdout}${r.stderr}`).toBeNull();
  expect(r.result, `${what}: ${r.stdout}${r.stderr}`).toEqual(
    expect.objectContaining({ ok: false, errno }),
  );
  expect(r.code).toBe(TRY_SYSCALL_EXIT.denied);
}

// ---- host-side listeners (the outside state) ---------------------------------------------------

class Listeners {
  dir = '';
  unixPath = '';
  dgramPath = '';
  tcpPort = 0;
  udpPort = 0;
  hits = { unix: 0, tcp: 0, udp: 0 };
  private servers: net.Server[] = [];
  private udp: dgram.Socket | null = null;

  async start(): Promise<void> {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-seccomp-'));
    fs.chmodSync(this.dir, 0o755);
    this.unixPath = path.join(this.dir, 'host.sock');
    this.dgramPath = path.join(this.dir, 'host-dgram.sock');
    const count = (key: keyof Listeners['hits']) => (sock: net.Socket) => {
      this.hits[key] += 1;
      sock.on('error', () => {});
      sock.destroy();
    };
    const listen = (server: net.Server, arg: net.ListenOptions) =>
      new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(arg, () => resolve());
        this.servers.push(server);
      });
    await listen(net.createServer(count('unix')), { path: this.unixPath });
    fs.chmodSync(this.unixPath, 0o777);
    const tcp = net.createServer(count('tcp'));
    await listen(tcp, { host: '127.0.0.1', port: 0 });
    this.tcpPort = (tcp.address() as net.AddressInfo).port;
    const udp = dgram.createSocket('udp4');
    udp.on('message', () => {
      this.hits.udp += 1;
    });
    await new Promise<void>((resolve) => udp.bind(0, '127.0.0.1', () => resolve()));
    this.udpPort = udp.address().port;
    this.udp = udp;
  }

  async stop(): Promise<void> {
    for (const s of this.servers) await new Promise((r) => s.close(() => r(undefined)));
    this.udp?.close();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  reset(): void {
    this.hits = { unix: 0, tcp: 0, udp: 0 };
  }

  /** Lets in-flight connections and datagrams land before the outside state is read. */
  settle(): Promise<void> {
    return new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Unix listeners Node cannot make: a datagram socket (Node has none) and an abstract stream socket
 * with an exact-length name (Node pads abstract names to the full sun_path). python3 binds, prints
 * "ready", and on a line on stdin reports how many datagrams or connections are queued.
 */
const UNIX_RECEIVER = `
import socket, sys, os
kind, addr = sys.argv[1], sys.argv[2]
if kind == "dgram":
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(addr); os.chmod(addr, 0o777)
else:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\\0" + addr); s.listen(16)
s.setblocking(False)
print("ready", flush=True)
sys.stdin.readline()
n = 0
while True:
    try:
        if kind == "dgram":
            s.recv(100)
        else:
            s.accept()[0].close()
        n += 1
    except BlockingIOError:
        break
print(n, flush=True)
`;

/** Runs `during` while a python3 listener is bound; returns what reached it. */
async function countUnixArrivals(
  kind: 'dgram' | 'abstract',
  addr: string,
  during: () => Promise<void>,
): Promise<number> {
  if (kind === 'dgram') fs.rmSync(addr, { force: true });
  const py = spawn(caps.python ?? 'python3', ['-c', UNIX_RECEIVER, kind, addr], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  py.stdout.setEncoding('utf8');
  await new Promise<void>((resolve, reject) => {
    py.once('error', reject);
    py.stdout.on('data', (chunk: string) => {
      out += chunk;
      if (out.includes('ready')) resolve();
    });
  });
  try {
    await during();
  } finally {
    py.stdin.end('go\n');
    await new Promise((r) => py.on('close', r));
    if (kind === 'dgram') fs.rmSync(addr, { force: true });
  }
  return Number(out.replace('ready', '').trim());
}

// ---- host files: leases, locks, file-system ioctls ---------------------------------------------

/**
 * Runs `args` with "hold" (the probe keeps what it took until stdin closes), calls `during` with its
 * RESULT while it holds, then ends it and waits until the run is over (torn down, streams closed).
 */
async function holding(
  policy: SandboxPolicy | null,
  args: string[],
  during: (r: ReturnType<typeof parseTrySyscall>, out: string) => Promise<void> | void,
): Promise<void> {
  const child = sandboxSpawn(trySyscallPath(), [...args, 'hold'], {
    cwd: '/',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    policy,
  });
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  let out = '';
  child.stdout!.setEncoding('utf8');
  child.stderr!.on('data', (c) => {
    out += String(c);
  });
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (c: string) => {
      out += c;
      if (out.includes('\n')) resolve(out);
    });
    child.exited.then(() => resolve(out), reject);
  });
  try {
    await during(parseTrySyscall(line), line);
  } finally {
    child.stdin!.end();
    await child.exited;
    await closed;
  }
}

/** A host writer's open that must not wait for a lease holder: null when it opened, else the code. */
function nonBlockingWriteOpen(file: string): string | null {
  try {
    fs.closeSync(fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK));
    return null;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? 'unknown';
  }
}

function fileState(p: string): { mode: number; mtimeMs: number; ctimeMs: number; content: string } {
  const st = fs.statSync(p);
  return { mode: st.mode, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, content: st.isFile() ? fs.readFileSync(p, 'utf8') : '' };
}

/** Errnos that show a file-system ioctl got past the filter (supported: EINVAL; not: the others). */
const FS_REACHED = ['EINVAL', 'EOPNOTSUPP', 'ENOTTY'];
const FS_IOCTLS = ['verity', 'verity-high', 'encrypt-policy', 'add-key', 'remove-key', 'remove-key-all'];

// ---- the cases ---------------------------------------------------------------------------------

interface DenyCase {
  args: string[];
  errno: string;
  /** Threat ids from reference/threats.md. */
  threat: string;
  /** The positive control needs this (false: skipped, with the reason in the title). */
  controlNeeds?: 'root' | 'userns';
}

/** Refused in every mode and network setting. */
const ALWAYS_DENIED: DenyCase[] = [
  { args: ['io_uring'], errno: 'EPERM', threat: 'NET-07/PROC-11' },
  { args: ['ptrace-attach'], errno: 'EPERM', threat: 'PROC-04' },
  { args: ['process_vm_readv'], errno: 'EPERM', threat: 'PROC-05' },
  { args: ['pidfd_getfd'], errno: 'EPERM', threat: 'PROC-04' },
  { args: ['bpf'], errno: 'EPERM', threat: 'PROC-15' },
  { args: ['perf'], errno: 'EPERM', threat: 'PROC-15' },
  { args: ['userfaultfd'], errno: 'EPERM', threat: 'PROC-15' },
  { args: ['keyctl'], errno: 'EPERM', threat: 'PROC-15' },
  { args: ['unshare-user'], errno: 'EPERM', threat: 'PROC-08', controlNeeds: 'userns' },
  { args: ['unshare-net'], errno: 'EPERM', threat: 'PROC-08', controlNeeds: 'userns' },
  { args: ['clone-newuser'], errno: 'EPERM', threat: 'PROC-08', controlNeeds: 'userns' },
  { args: ['clone3'], errno: 'ENOSYS', threat: 'PROC-09' },
  { args: ['mount'], errno: 'EPERM', threat: 'PROC-10' },
  { args: ['umount'], errno: 'EPERM', threat: 'PROC-10' },
  { args: ['fsopen'], errno: 'EPERM', threat: 'PROC-10', controlNeeds: 'root' },
  { args: ['open_tree'], errno: 'EPERM', threat: 'PROC-10' },
  { args: ['setns'], errno: 'EPERM', threat: 'PROC-10' },
  { args: ['chroot'], errno: 'EPERM', threat: 'PROC-10' },
  { args: ['tiocsti'], errno: 'EPERM', threat: 'PROC-01' },
  { args: ['tiocsti-high'], errno: 'EPERM', threat: 'PROC-02' },
  { args: ['tioclinux'], errno: 'EPERM', threat: 'PROC-03' },
  { args: ['personality'], errno: 'EPERM', threat: 'PROC-15' },
];

/** Refused when the network is 'none' (both modes). */
const NET_NONE_DENIED: DenyCase[] = [
  { args: ['socket-inet-tcp'], errno: 'EPERM', threat: 'NET-01' },
  { args: ['socket-inet6'], errno: 'EPERM', threat: 'NET-02' },
  { args: ['socket-inet-udp'], errno: 'EPERM', threat: 'NET-03' },
  { args: ['socket-raw'], errno: 'EPERM', threat: 'NET-05', controlNeeds: 'root' },
  { args: ['socket-packet'], errno: 'EPERM', threat: 'NET-05', controlNeeds: 'root' },
  { args: ['socket-netlink'], errno: 'EPERM', threat: 'NET-06' },
  { args: ['socket-unix'], errno: 'EPERM', threat: 'NET-09/NET-10' },
  { args: ['socketpair-dgram'], errno: 'EPERM', threat: 'NET-11' },
  { args: ['listen-noBind'], errno: 'EPERM', threat: 'NET-13' },
];

/** Ordinary IPC that must keep working in every mode. */
const ALWAYS_ALLOWED: string[][] = [
  ['getpid'],
  ['socketpair-stream'],
  ['socketpair-seqpacket'],
  ['socketpair-sendto'],
  ['personality-query'],
  ['memfd-exec'],
];

function controlSkipReason(c: DenyCase): string | null {
  if (c.controlNeeds === 'root' && !caps.root) return 'positive control needs root';
  if (c.controlNeeds === 'userns' && !caps.userns) return 'positive control needs user namespaces';
  return null;
}

describe.runIf(isLinux)('seccomp filter', () => {
  const L = new Listeners();

  beforeAll(async () => {
    trySyscallPath();
    await L.start();
  });
  afterAll(async () => {
    await L.stop();
  });

  describe('positive controls (unsandboxed)', () => {
    for (const c of [...ALWAYS_DENIED, ...NET_NONE_DENIED]) {
      const reason = controlSkipReason(c);
      it.skipIf(reason !== null)(`${c.args.join(' ')} reaches the kernel${reason ? ` (${reason})` : ''}`, async () => {
        expectAllowed(await control(c.args), 'control');
      });
    }
    it('socket-vsock reaches the kernel (or the host has no AF_VSOCK)', async (ctx) => {
      const r = await control(['socket-vsock']);
      if (r.result?.errno === 'EAFNOSUPPORT') ctx.skip('AF_VSOCK is not available on this host');
      expectAllowed(r, 'control');
    });
    for (const args of ALWAYS_ALLOWED) {
      it(`${args.join(' ')} works`, async () => {
        expectAllowed(await control(args), 'control');
      });
    }
    it('shmget and mq_open work', async () => {
      expectAllowed(await control(['shmget']), 'control');
      expectAllowed(await control(['mq_open']), 'control');
    });
  });

  for (const { name: mode, skip } of MODES) {
    describe.skipIf(skip !== undefined)(`${mode} mode${skip ? ` (skipped: ${skip})` : ''}`, () => {
      describe("network 'none'", () => {
        const policy = policyFor(mode, 'none');

        for (const c of [...ALWAYS_DENIED, ...NET_NONE_DENIED]) {
          it(`${c.threat}: ${c.args.join(' ')} -> ${c.errno}`, async () => {
            expectDenied(await probe(policy, c.args), c.errno, 'sandboxed');
          });
        }

        it('NET-17: socket(AF_VSOCK) -> EPERM', async () => {
          expectDenied(await probe(policy, ['socket-vsock']), 'EPERM', 'sandboxed');
        });

        for (const args of ALWAYS_ALLOWED) {
          it(`keeps working: ${args.join(' ')}`, async () => {
            expectAllowed(await probe(policy, args), 'sandboxed');
          });
        }

        it('NET-01: tcp connect to a host listener fails and nothing arrives', async () => {
          const args = ['tcp-connect', '127.0.0.1', String(L.tcpPort)];
          L.reset();
          expectAllowed(await probe(null, args), 'control');
          await L.settle();
          expect(L.hits.tcp).toBe(1);
          L.reset();
          expectDenied(await probe(policy, args), 'EPERM', 'sandboxed');
          await L.settle();
          expect(L.hits.tcp).toBe(0);
        });

        it('NET-03: udp send to a host listener fails and nothing arrives', async () => {
          const args = ['udp-send', '127.0.0.1', String(L.udpPort)];
          L.reset();
          expectAllowed(await probe(null, args), 'control');
          await L.settle();
          expect(L.hits.udp).toBe(1);
          L.reset();
          expectDenied(await probe(policy, args), 'EPERM', 'sandboxed');
          await L.settle();
          expect(L.hits.udp).toBe(0);
        });

        it('NET-10: connect to a host pathname unix socket fails and nothing arrives', async () => {
          const args = ['connect-unix', L.unixPath];
          L.reset();
          expectAllowed(await probe(null, args), 'control');
          await L.settle();
          expect(L.hits.unix).toBe(1);
          L.reset();
          expectDenied(await probe(policy, args), 'EPERM', 'sandboxed');
          await L.settle();
          expect(L.hits.unix).toBe(0);
        });

        it.skipIf(caps.python === null)('NET-09: connect to a host abstract unix socket fails and nothing arrives', async () => {
          const name = `psb-seccomp-${process.pid}-${mode}`;
          const args = ['connect-unix', `@${name}`];
          let ctl: ProbeRun | undefined;
          expect(await countUnixArrivals('abstract', name, async () => {
            ctl = await probe(null, args);
          })).toBe(1);
          expectAllowed(ctl!, 'control');
          let sandboxed: ProbeRun | undefined;
          expect(await countUnixArrivals('abstract', name, async () => {
            sandboxed = await probe(policy, args);
          })).toBe(0);
          expectDenied(sandboxed!, 'EPERM', 'sandboxed');
        });

        it.skipIf(caps.python === null)('NET-11: sendmsg to a host unix datagram socket fails and nothing arrives', async () => {
          const sock = path.join(L.dir, 'host-dgram.sock');
          const args = ['sendmsg-unix-dgram', sock];
          let ctl: ProbeRun | undefined;
          const delivered = await countUnixArrivals('dgram', sock, async () => {
            ctl = await probe(null, args);
          });
          expectAllowed(ctl!, 'control');
          expect(delivered).toBe(1);
          let sandboxed: ProbeRun | undefined;
          const leaked = await countUnixArrivals('dgram', sock, async () => {
            sandboxed = await probe(policy, args);
          });
          expectDenied(sandboxed!, 'EPERM', 'sandboxed');
          expect(leaked).toBe(0);
          // The stream pair that stays allowed cannot name a destination.
          let pair: ProbeRun | undefined;
          const viaPair = await countUnixArrivals('dgram', sock, async () => {
            pair = await probe(policy, ['sendmsg-unix-streampair', sock]);
          });
          expect(pair!.result).toEqual(expect.objectContaining({ ok: false, errno: 'EISCONN' }));
          expect(viaPair).toBe(0);
        });

        it.skipIf(!isX64)('NET-08/PROC-14: an x32 syscall kills the process', async () => {
          const c = await control(['x32']);
          expect(c.signal, 'control').toBeNull();
          const r = await probe(policy, ['x32']);
          expect(r.signal).toBe('SIGSYS');
          expect(r.result).toBeNull();
        });

        // The control decides what to expect: where the kernel has no i386 entry, int 0x80
        // faults with SIGSEGV unsandboxed too, and the filter never sees it (int80Outcomes).
        it.skipIf(!isX64)('NET-08/PROC-14: an int 0x80 (i386) syscall kills the process (SIGSYS; SIGSEGV too where it faults unsandboxed)', async () => {
          const c = await control(['int80']);
          const expected = int80Outcomes(c.signal);
          // eslint-disable-next-line no-console
          if (c.signal !== null) console.warn(`[seccomp] ${expected.why}`);
          else expectAllowed(c, 'control');
          const r = await probe(policy, ['int80']);
          expect(expected.signals, `${expected.why}; got ${r.signal}`).toContain(r.signal);
          expect(r.result).toBeNull();
        });

        if (mode === 'landlock') {
          it('PROC-16: SysV shm and POSIX mqueues (shared with the host here) -> EPERM', async () => {
            expectDenied(await probe(policy, ['shmget']), 'EPERM', 'sandboxed');
            expectDenied(await probe(policy, ['mq_open']), 'EPERM', 'sandboxed');
          });
        } else {
          // mq_open is left out here: the filter allows it, but the private ipc namespace's
          // mqueue mount refuses the sandbox's uid (EACCES) on its own.
          it('PROC-16: SysV shm works in the private ipc namespace', async () => {
            expectAllowed(await probe(policy, ['shmget']), 'sandboxed');
          });
        }
      });

      describe("network 'full' (socket rules lifted, the rest kept)", () => {
        const policy = policyFor(mode, 'full');

        it('socket(AF_INET), socket(AF_UNIX), netlink and listen() work', async () => {
          for (const args of [['socket-inet-tcp'], ['socket-inet-udp'], ['socket-unix'], ['socket-netlink'], ['socketpair-dgram'], ['listen-noBind']]) {
            expectAllowed(await probe(policy, args), `sandboxed ${args[0]}`);
          }
        });

        it('tcp connect to the host loopback listener arrives', async () => {
          L.reset();
          expectAllowed(await probe(policy, ['tcp-connect', '127.0.0.1', String(L.tcpPort)]), 'sandboxed');
          await L.settle();
          expect(L.hits.tcp).toBe(1);
        });

        it('NET-07: io_uring stays denied', async () => {
          expectDenied(await probe(policy, ['io_uring']), 'EPERM', 'sandboxed');
        });

        it('PROC-02: TIOCSTI with high bits stays denied', async () => {
          expectDenied(await probe(policy, ['tiocsti-high']), 'EPERM', 'sandboxed');
        });

        it('PROC-09: clone3 stays ENOSYS', async () => {
          expectDenied(await probe(policy, ['clone3']), 'ENOSYS', 'sandboxed');
        });
      });

      describe('host files: leases, locks and file-system ioctls', () => {
        const policy = policyFor(mode, 'none');
        let dir = '';
        let host = '';
        let emptyDir = '';
        let ws = '';
        beforeAll(() => {
          dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-seccomp-files-'));
          fs.chmodSync(dir, 0o755);
          host = path.join(dir, 'host.txt');
          fs.writeFileSync(host, 'host data\n', { mode: 0o644 });
          emptyDir = path.join(dir, 'empty');
          fs.mkdirSync(emptyDir, { mode: 0o755 });
          ws = path.join(dir, 'ws');
          fs.mkdirSync(ws, { mode: 0o755 });
        });
        afterAll(() => {
          fs.rmSync(dir, { recursive: true, force: true });
        });

        it('F_SETLEASE on a readable host file the uid owns -> EPERM, and a host writer is not held up', async () => {
          // Control, unsandboxed: the lease is taken and a non-blocking write-open fails while it is held.
          await holding(null, ['setlease', host], (r, out) => {
            expect(r, out).toEqual(expect.objectContaining({ ok: true, reached: false }));
            expect(nonBlockingWriteOpen(host)).toBe('EAGAIN');
          });
          expect(nonBlockingWriteOpen(host)).toBeNull();
          // Sandboxed: refused by the filter, and the same open works while the command still runs.
          await holding(policy, ['setlease', host], (r, out) => {
            expect(r, out).toEqual(expect.objectContaining({ ok: false, errno: 'EPERM' }));
            expect(nonBlockingWriteOpen(host)).toBeNull();
          });
          expect(fs.readFileSync(host, 'utf8')).toBe('host data\n');
        });

        it('F_SETLEASE with the high word of cmd set (the kernel reads the low 32 bits) -> EPERM', async () => {
          // Control: the kernel takes it as F_SETLEASE (the probe exits, and the lease with it).
          expectAllowed(await control(['setlease-high', host]), 'control');
          expectDenied(await probe(policy, ['setlease-high', host]), 'EPERM', 'sandboxed');
        });

        it('F_SETDELEG (the same lease machinery, Linux 6.19+) -> EPERM', async () => {
          const ctl = await control(['setdeleg', host]);
          expect(ctl.result?.ok, `control: ${ctl.stdout}`).toBe(true);
          expectDenied(await probe(policy, ['setdeleg', host]), 'EPERM', 'sandboxed');
        });

        it('keeps working: F_GETFL and F_GETLEASE on a host file, every lock kind in a writable root', async () => {
          expectAllowed(await probe(policy, ['fcntl-getfl', host]), 'sandboxed fcntl');
          const wsPolicy = modePolicy(mode, { network: 'none', filesystem: { tmp: 'none', write: [ws] } });
          const lockFile = path.join(ws, `lock-${mode}`);
          expectAllowed(await probe(wsPolicy, ['lock-all', lockFile]), 'sandboxed locks in the workspace');
          expect(fs.existsSync(lockFile)).toBe(true);
        });

        // Locks are bounded, not refused (see kFSetLease in native/linux/seccomp_table.h): a
        // read-only fd may lock a host file, the lock holds while the run lives, and teardown ends
        // it, daemons included.
        it('locks a run takes on a host file from read-only fds end with the run', async () => {
          const kinds = ['flock', 'posix', 'ofd'];
          for (const k of kinds) expectAllowed(await control(['lock-try', k, host]), `control ${k} before`);
          await holding(policy, ['lock-hold', host], async (r, out) => {
            expect(r, out).toEqual(expect.objectContaining({ ok: true }));
            // The accepted residual: while the run lives, a host tool that locks this file is held up.
            for (const k of kinds) {
              const t = await probe(null, ['lock-try', k, host]);
              expect(t.result, `${k} while the run lives: ${t.stdout}`).toEqual(expect.objectContaining({ ok: false, errno: 'EAGAIN' }));
            }
          });
          // The run is over: its setsid daemon that kept the flock and the OFD lock is gone too.
          for (const k of kinds) {
            const t = await probe(null, ['lock-try', k, host]);
            expect(t.result, `${k} after the run: ${t.stdout}`).toEqual(expect.objectContaining({ ok: true }));
          }
        });

        for (const which of FS_IOCTLS) {
          it(`FS-14: ${which} ioctl on a host ${which === 'encrypt-policy' ? 'directory' : 'file'} the uid owns -> EPERM`, async () => {
            const target = which === 'encrypt-policy' ? emptyDir : host;
            const before = fileState(target);
            // Control: past the filter the file system answers (EINVAL, or EOPNOTSUPP/ENOTTY where it
            // lacks the feature), never EPERM; the bad argument makes sure nothing changes.
            const ctl = await control(['ioctl-fs', which, target]);
            expect(ctl.result?.reached, `control: ${ctl.stdout}`).toBe(true);
            expect(FS_REACHED).toContain(ctl.result?.errno);
            expectDenied(await probe(policy, ['ioctl-fs', which, target]), 'EPERM', 'sandboxed');
            expect(fileState(target)).toEqual(before);
          });
        }
      });

      it.todo(`${mode}: network proxy (AF_INET stream only, listen() and MSG_FASTOPEN refused in landlock mode) — tested with the proxy issue`);
    });
  }
});
