/**
 * Network threat classes (reference/threats.md NET-01..NET-17) in both Linux modes.
 *
 * The host side is real: this process listens on loopback TCP (v4 and v6, and on a non-loopback
 * address), UDP (v4, v6, and 127.0.0.53 standing in for a local resolver), a pathname unix socket
 * and an abstract unix socket; a helper python process holds pathname and abstract unix datagram
 * sockets. Every attempt from inside with `network: 'none'` must fail AND the listener must have
 * received nothing. Positive controls run the same probe with `network: 'full'` (or unsandboxed)
 * and see it arrive.
 */
import { spawn as spawnHost, type ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { run } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { NET_DENIED } from '../helpers/denied';
import { BASE_ENV, eventually, makeScene, probeOps, py, PYTHON, syscallProbe, type Scene } from '../helpers/sandbox';
import { parseTrySyscall } from '../helpers/try-syscall';


class Host {
  scene!: Scene;
  tcp4 = 0;
  tcp6 = 0;
  tcpAny = 0;
  udp4 = 0;
  udp6 = 0;
  http = 0;
  resolverPort = 0;
  unixPath = '';
  abstract = `psb-abs-${process.pid}-${Date.now()}`;
  dgramPath = '';
  dgramAbstract = `psb-dg-${process.pid}-${Date.now()}`;
  externalIp: string | null = null;
  hasV6 = true;
  hits: string[] = [];
  private servers: net.Server[] = [];
  private sockets: dgram.Socket[] = [];
  private py: ChildProcess | null = null;

  private async tcp(name: string, host: string): Promise<number> {
    const srv = net.createServer((s) => {
      this.hits.push(name);
      s.on('error', () => {});
      s.destroy();
    });
    this.servers.push(srv);
    await new Promise<void>((res, rej) => {
      srv.once('error', rej);
      srv.listen({ host, port: 0 }, () => res());
    });
    return (srv.address() as net.AddressInfo).port;
  }

  private async udp(name: string, type: 'udp4' | 'udp6', host: string): Promise<number> {
    const s = dgram.createSocket(type);
    this.sockets.push(s);
    s.on('message', () => this.hits.push(name));
    await new Promise<void>((res, rej) => {
      s.once('error', rej);
      s.bind(0, host, () => res());
    });
    return s.address().port;
  }

  async start(): Promise<void> {
    this.scene = makeScene('net');
    this.tcp4 = await this.tcp('tcp4', '127.0.0.1');
    try {
      this.tcp6 = await this.tcp('tcp6', '::1');
      this.udp6 = await this.udp('udp6', 'udp6', '::1');
    } catch {
      this.hasV6 = false;
    }
    this.tcpAny = await this.tcp('tcpAny', '0.0.0.0');
    this.udp4 = await this.udp('udp4', 'udp4', '127.0.0.1');
    const web = http.createServer((req, res) => {
      this.hits.push('http');
      res.end('host-web');
    });
    this.servers.push(web as unknown as net.Server);
    await new Promise<void>((res) => web.listen(0, '127.0.0.1', () => res()));
    this.http = (web.address() as net.AddressInfo).port;
    this.resolverPort = await this.udp('resolver', 'udp4', '127.0.0.53');
    for (const addrs of Object.values(os.networkInterfaces())) {
      for (const a of addrs ?? []) if (!a.internal && a.family === 'IPv4' && !this.externalIp) this.externalIp = a.address;
    }
    this.unixPath = path.join(this.scene.root, 'host.sock');
    const unix = net.createServer((s) => {
      this.hits.push('unix');
      s.on('error', () => {});
      s.destroy();
    });
    const abs = net.createServer((s) => {
      this.hits.push('abstract');
      s.on('error', () => {});
      s.destroy();
    });
    this.servers.push(unix, abs);
    await new Promise<void>((res) => unix.listen(this.unixPath, () => res()));
    fs.chmodSync(this.unixPath, 0o777);
    await new Promise<void>((res) => abs.listen(`\0${this.abstract}`, () => res()));
    if (caps.python) {
      this.dgramPath = path.join(this.scene.root, 'host-dgram.sock');
      const code =
        'import socket,select,sys,os\n' +
        'a=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM); a.bind(sys.argv[1]); os.chmod(sys.argv[1],0o777)\n' +
        'b=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM); b.bind("\\0"+sys.argv[2])\n' +
        'print("READY",flush=True)\n' +
        'while True:\n' +
        '  r,_,_=select.select([a,b],[],[])\n' +
        '  for s in r:\n' +
        '    s.recv(65536); print("dgram" if s is a else "dgramAbstract",flush=True)\n';
      this.py = spawnHost(PYTHON, ['-c', code, this.dgramPath, this.dgramAbstract], { stdio: ['ignore', 'pipe', 'inherit'] });
      await new Promise<void>((res) => {
        this.py!.stdout!.on('data', (b: Buffer) => {
          for (const l of b.toString().split('\n').filter(Boolean)) {
            if (l === 'READY') res();
            else this.hits.push(l);
          }
        });
      });
    }
  }

  async stop(): Promise<void> {
    for (const s of this.servers) s.close();
    for (const s of this.sockets) s.close();
    this.py?.kill('SIGKILL');
    this.scene?.cleanup();
  }
}

const host = new Host();

async function tryProbe(policy: SandboxPolicy | null, args: string[]) {
  const r = await run(syscallProbe(), args, { cwd: '/', env: BASE_ENV, policy, timeout: 30_000 });
  return { ...r, result: parseTrySyscall(r.stdout) };
}

/** Let in-flight packets land before judging the listener (not a timing assertion). */
async function settle(): Promise<void> {
  await new Promise((r) => setTimeout(r, 200));
}

describe.runIf(caps.linux)('network threats', () => {
  beforeAll(async () => {
    await host.start();
  });
  afterAll(async () => {
    await host.stop();
  });

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const none = () => modePolicy(mode, { network: 'none', filesystem: { write: [host.scene.ws] } });
    const full = () => modePolicy(mode, { network: 'full', filesystem: { write: [host.scene.ws] } });
    beforeEach(() => {
      host.hits = [];
    });

    it.skipIf(skip)('reports the network as enforced', async () => {
      const r = await run('/bin/true', [], { env: BASE_ENV, policy: none() });
      expect(r.enforcement.guarantees.network).toBe('enforced');
      if (mode === 'isolated') expect(r.enforcement.mechanisms.namespaces).toEqual(expect.arrayContaining([expect.stringMatching(/^net/)]));
    });

    it.skipIf(skip)('NET-01/NET-02: no TCP egress, whatever the address spelling; allowed with network full', async () => {
      const targets: Array<[string, number]> = [
        ['127.0.0.1', host.tcp4],
        ['localhost', host.tcp4],
        ['127.1', host.tcp4],
        ['0.0.0.0', host.tcpAny],
        ['::ffff:127.0.0.1', host.tcp4],
        ...(host.hasV6 ? ([['::1', host.tcp6]] as Array<[string, number]>) : []),
        ...(host.externalIp ? ([[host.externalIp, host.tcpAny]] as Array<[string, number]>) : []),
      ];
      const ops = targets.map(([h, p]) => ['tcp', h, p]);
      const r = await probeOps(ops, { cwd: host.scene.ws, policy: none() });
      for (const [i, x] of r.entries()) expect(NET_DENIED, `${targets[i]!.join(':')} -> ${x}`).toContain(x);
      // Ordinary tools too: python's socket module and a shell's /dev/tcp-less world (nc-like).
      const p = await py(
        'import socket,sys\ntry:\n  socket.create_connection(("127.0.0.1",int(sys.argv[1])),timeout=3).sendall(b"LEAK"); print("ok")\nexcept OSError as e:\n  print(e.errno)',
        [String(host.tcp4)],
        { cwd: host.scene.ws, policy: none() },
      );
      expect(p.stdout.trim()).not.toBe('ok');
      await settle();
      expect(host.hits, 'a host TCP listener received a connection').toEqual([]);
      // Control: network full reaches every listener.
      const ctl = await probeOps(ops, { cwd: host.scene.ws, policy: full() });
      expect(ctl).toEqual(ops.map(() => 'ok'));
      await eventually(() => host.hits.length >= ops.length);
      expect(host.hits.length).toBe(ops.length);
    });

    it.skipIf(skip)('NET-03/NET-04: no UDP datagrams, no DNS to a local resolver', async () => {
      const ops = [
        ['udp4', '127.0.0.1', host.udp4],
        ['udp4', '127.0.0.53', host.resolverPort],
        ...(host.hasV6 ? [['udp6', '::1', host.udp6]] : []),
      ];
      const r = await probeOps(ops, { cwd: host.scene.ws, policy: none() });
      for (const x of r) expect(NET_DENIED).toContain(x);
      // A DNS query through node's resolver pointed at the fake local resolver.
      const dns = await run(
        process.execPath,
        ['-e', `const d=new (require('dns').promises.Resolver)({timeout:500,tries:1});d.setServers(['127.0.0.53:${host.resolverPort}']);d.resolve4('exfil.example.com').then(()=>console.log('ok'),e=>console.log(e.code))`],
        { env: BASE_ENV, policy: none(), timeout: 30_000 },
      );
      expect(dns.stdout.trim()).not.toBe('ok');
      // sendmsg() on UDP, which a connect/sendto-only filter would miss.
      const sm = await py(
        'import socket,sys\ntry:\n  s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.sendmsg([b"LEAK"],[],0,("127.0.0.1",int(sys.argv[1]))); print("ok")\nexcept OSError as e:\n  print(e.errno)',
        [String(host.udp4)],
        { cwd: host.scene.ws, policy: none() },
      );
      expect(sm.stdout.trim()).not.toBe('ok');
      await settle();
      expect(host.hits, 'a host UDP socket received a datagram').toEqual([]);
      // Control.
      expect(await probeOps(ops, { cwd: host.scene.ws, policy: full() })).toEqual(ops.map(() => 'ok'));
      await eventually(() => host.hits.length >= ops.length);
      expect(new Set(host.hits).size).toBe(ops.length);
    });

    it.skipIf(skip)('NET-05/NET-06/NET-17: raw, packet, ICMP, netlink and vsock sockets are refused', async () => {
      for (const probe of ['socket-raw', 'socket-packet', 'socket-netlink', 'socket-vsock']) {
        const r = await tryProbe(none(), [probe]);
        expect(r.signal, probe).toBeNull();
        expect(r.result, `${probe}: ${r.stdout}${r.stderr}`).toMatchObject({ ok: false });
        expect(['EPERM', 'EACCES']).toContain(r.result!.errno);
        // Control (unsandboxed): netlink needs no privilege; raw/packet need root; vsock needs the module.
        if (probe === 'socket-netlink' || caps.root) {
          const c = await tryProbe(null, [probe]);
          if (probe !== 'socket-vsock' || c.result?.ok) expect(c.result, `${probe} control`).toMatchObject({ ok: true });
        }
      }
      const icmp = await py(
        'import socket\ntry:\n  socket.socket(socket.AF_INET,socket.SOCK_DGRAM,socket.IPPROTO_ICMP); print("ok")\nexcept OSError as e:\n  print(e.errno)',
        [],
        { cwd: host.scene.ws, policy: none() },
      );
      expect(['1', '13']).toContain(icmp.stdout.trim());
    });

    it.skipIf(skip)('NET-06: no view of the host\'s sockets or interfaces (isolated) / listed in the report (Landlock)', async () => {
      const r = await run('/bin/cat', ['/proc/net/tcp', '/proc/net/unix'], { env: BASE_ENV, policy: none() });
      const portHex = host.tcp4.toString(16).toUpperCase().padStart(4, '0');
      if (mode === 'isolated') {
        expect(r.stdout).not.toContain(`:${portHex} `);
        expect(r.stdout).not.toContain(host.abstract);
        const ifs = await run('/bin/cat', ['/proc/net/dev'], { env: BASE_ENV, policy: none() });
        expect(ifs.stdout).not.toMatch(/eth\d|ens\d|enp\d/);
      } else {
        // Without a net namespace /proc/net shows the host's sockets; the probe must at least not
        // be able to act on them (the other NET tests), and the report says there is no netns.
        expect(r.enforcement.mechanisms.namespaces).toEqual([]);
      }
      // Control: the host sees its own listener.
      const ctl = await run('/bin/cat', ['/proc/net/tcp'], { env: BASE_ENV, policy: null });
      expect(ctl.stdout).toContain(`:${portHex} `);
    });

    // The host's /sys/class/net belongs to the host net namespace: interface names and MAC
    // addresses must not show through.
    it.runIf(!skip && mode === 'isolated')('NET-06: /sys shows only the sandbox\'s own interfaces', async () => {
      const ifs = await run('/bin/ls', ['/sys/class/net'], { env: BASE_ENV, policy: none() });
      expect(ifs.stdout.trim().split('\n')).toEqual(['lo']);
    });

    it.skipIf(skip)('NET-07/PROC-11: io_uring cannot be set up', async () => {
      const r = await tryProbe(none(), ['io_uring']);
      expect(r.result).toMatchObject({ ok: false });
      expect(['EPERM', 'ENOSYS']).toContain(r.result!.errno);
      const c = await tryProbe(null, ['io_uring']);
      if (fs.readFileSync('/proc/sys/kernel/io_uring_disabled', 'utf8').trim() === '0') expect(c.result).toMatchObject({ ok: true });
    });

    it.skipIf(skip)('NET-08: a foreign syscall ABI (x32) is killed or refused, never executed', async () => {
      const r = await tryProbe(none(), ['x32']);
      // Killed by the arch check (SIGSYS), or refused; never "OK".
      expect(r.result?.ok ?? false, r.stdout).toBe(false);
      if (r.signal === null) expect(['ENOSYS', 'EPERM']).toContain(r.result?.errno);
      else expect(r.signal).toBe('SIGSYS');
    });

    it.skipIf(skip)('NET-09/NET-10: host unix sockets (abstract and pathname) are unreachable', async () => {
      const ops = [
        ['unix', `@${host.abstract}`],
        ['unix', host.unixPath],
      ];
      const r = await probeOps(ops, { cwd: host.scene.ws, policy: none() });
      for (const x of r) expect(NET_DENIED).toContain(x);
      for (const target of [`@${host.abstract}`, host.unixPath]) {
        const t = await tryProbe(none(), ['connect-unix', target]);
        expect(t.result?.ok, t.stdout).toBe(false);
      }
      // Well-known daemons, if this host has them.
      for (const daemon of ['/run/docker.sock', '/var/run/docker.sock', '/run/dbus/system_bus_socket', '/run/systemd/private']) {
        if (!fs.existsSync(daemon)) continue;
        expect(await probeOps([['unix', daemon]], { cwd: host.scene.ws, policy: none() })).not.toEqual(['ok']);
      }
      await settle();
      expect(host.hits).toEqual([]);
      // Control: unsandboxed, both connect. (With network 'full' the isolated mode keeps the
      // abstract namespace of the host net namespace, so it connects too.)
      expect(await probeOps(ops, { cwd: host.scene.ws, policy: null })).toEqual(['ok', 'ok']);
      await eventually(() => host.hits.length >= 2);
      expect(host.hits.sort()).toEqual(['abstract', 'unix']);
    });

    it.skipIf(skip || !caps.python)('NET-11: sendmsg and datagram paths do not reach host unix datagram sockets', async () => {
      const targets = [host.dgramPath, `@${host.dgramAbstract}`];
      for (const t of targets) {
        for (const probe of ['sendmsg-unix-dgram', 'sendmsg-unix-streampair']) {
          const r = await tryProbe(none(), [probe, t]);
          expect(r.result?.ok, `${probe} ${t}: ${r.stdout}`).toBe(false);
        }
      }
      const viaPy = await py(
        'import socket,sys\nout=[]\nfor t in sys.argv[1:]:\n  a=("\\0"+t[1:]) if t.startswith("@") else t\n  try:\n    s=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM); s.sendto(b"LEAK",a); out.append("ok")\n  except OSError as e:\n    out.append(str(e.errno))\nprint(" ".join(out))',
        targets,
        { cwd: host.scene.ws, policy: none() },
      );
      expect(viaPy.stdout).not.toContain('ok');
      // socketpair IPC keeps working inside (the same sandbox).
      const pair = await tryProbe(none(), ['socketpair-sendto']);
      expect(pair.result).toMatchObject({ ok: true });
      await settle();
      expect(host.hits).toEqual([]);
      // Control: unsandboxed, both datagrams arrive.
      const ctl = await py('import socket,sys\nfor t in sys.argv[1:]:\n  a=("\\0"+t[1:]) if t.startswith("@") else t\n  socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM).sendto(b"x",a)\nprint("ok")', targets, { policy: null });
      expect(ctl.stdout.trim()).toBe('ok');
      await eventually(() => host.hits.length >= 2);
      expect(host.hits.sort()).toEqual(['dgram', 'dgramAbstract']);
    });

    it.skipIf(skip)('NET-12: a socket the host holds is not inherited; a passed one is the caller\'s choice', async () => {
      const sock = net.connect({ host: '127.0.0.1', port: host.tcp4 });
      await new Promise<void>((res) => sock.once('connect', () => res()));
      await eventually(() => host.hits.length === 1);
      host.hits = [];
      // Node's socket fd number in this process.
      const fd = (sock as unknown as { _handle: { fd: number } })._handle.fd;
      expect(fd).toBeGreaterThan(2);
      const r = await py(
        'import os,sys\nout=[]\nfor a in sys.argv[1:]:\n  try:\n    os.write(int(a),b"LEAK"); out.append("ok")\n  except OSError as e:\n    out.append(str(e.errno))\nprint(" ".join(out))',
        [String(fd), '3', '4', '5', '6', '7', '8', '9', '10'],
        { cwd: host.scene.ws, policy: none() },
      );
      expect(r.stdout.trim().split(' ').every((x) => x === '9'), r.stdout).toBe(true); // EBADF
      sock.destroy();
    });

    it.skipIf(skip)('NET-13: no listening socket can be opened; allowed with network full', async () => {
      const r = await probeOps([['listen', '0.0.0.0'], ['listen', '::'], ['listen', '127.0.0.1']], { cwd: host.scene.ws, policy: none() });
      for (const x of r) expect(NET_DENIED).toContain(x);
      const nb = await tryProbe(none(), ['listen-noBind']);
      expect(nb.result?.ok).toBe(false);
      const ctl = await probeOps([['listen', '127.0.0.1']], { cwd: host.scene.ws, policy: full() });
      expect(ctl[0]).toMatch(/^ok:\d+$/);
      expect((await tryProbe(null, ['listen-noBind'])).result?.ok).toBe(true);
    });

    it.skipIf(skip)('NET-14: under the proxy, loopback and the metadata service stay out of reach', async () => {
      // Inside: direct connects, then requests through the proxy the sandbox announces.
      const js = `
        const http = require('http');
        const net = require('net');
        const u = new URL(process.env.HTTP_PROXY || process.env.http_proxy);
        const via = (target) => new Promise((res) => {
          const r = http.request({ host: u.hostname, port: u.port, path: target, headers: { host: new URL(target).host }, timeout: 5000 }, (resp) => {
            let b = ''; resp.on('data', (d) => (b += d)); resp.on('end', () => res(resp.statusCode + ':' + b.slice(0, 20)));
          });
          r.on('error', (e) => res(e.code)); r.on('timeout', () => { r.destroy(); res('timeout'); }); r.end();
        });
        const direct = (host, port) => new Promise((res) => {
          const s = net.connect({ host, port }); s.setTimeout(3000, () => { s.destroy(); res('timeout'); });
          s.on('connect', () => { s.destroy(); res('ok'); }); s.on('error', (e) => res(e.code));
        });
        (async () => {
          const out = [
            await direct('127.0.0.1', ${host.http}),
            await direct('169.254.169.254', 80),
            await via('http://127.0.0.1:${host.http}/'),
            await via('http://localhost:${host.http}/'),
            await via('http://169.254.169.254/latest/meta-data/'),
          ];
          console.log(JSON.stringify(out));
        })();`;
      // Names only: an exact IP literal on the allow list is an explicit opt-in by design.
      const proxied = (allowLocal: boolean) => modePolicy(mode, { network: { proxy: { allow: ['localhost', '*.example.com'], allowLocal } } });
      let r;
      try {
        r = await run(process.execPath, ['-e', js], { env: BASE_ENV, policy: proxied(false), timeout: 60_000 });
      } catch (e) {
        // A build without the proxy must refuse with a code, never run unfiltered.
        expect(e).toMatchObject({ name: 'SandboxError', code: expect.stringMatching(/^E[A-Z_]+$/) });
        return;
      }
      const [d1, d2, v1, v2, v3] = JSON.parse(r.stdout.trim()) as string[];
      expect(NET_DENIED, `direct loopback: ${d1}`).toContain(d1);
      expect(NET_DENIED, `direct metadata: ${d2}`).toContain(d2);
      for (const v of [v1, v2, v3]) expect(v!.startsWith('200'), `${r.stdout}`).toBe(false);
      await settle();
      expect(host.hits, 'the host web server was reached').toEqual([]);
      // Even allowLocal never opens the metadata endpoint.
      const r2 = await run(process.execPath, ['-e', js], { env: BASE_ENV, policy: proxied(true), timeout: 60_000 });
      const res2 = JSON.parse(r2.stdout.trim()) as string[];
      await settle();
      const hitsWithLocal = host.hits.length;
      expect(res2[4]!.startsWith('200')).toBe(false);
      // Control: with allowLocal the allowed name reaches the host web server through the proxy.
      expect(res2[3]!.startsWith('200'), r2.stdout).toBe(true);
      expect(res2[2]!.startsWith('200'), r2.stdout).toBe(false); // 127.0.0.1 is not on the list
      expect(hitsWithLocal).toBeGreaterThan(0);
      expect(res2[0]).not.toBe('ok');
    });

    it.skipIf(skip)('NET-14: metadata service and loopback are unreachable with network none', async () => {
      const r = await probeOps([['tcp', '169.254.169.254', 80], ['tcp', '127.0.0.1', host.tcp4]], { cwd: host.scene.ws, policy: none() });
      for (const x of r) expect(NET_DENIED).toContain(x);
      await settle();
      expect(host.hits).toEqual([]);
    });
  });
});
