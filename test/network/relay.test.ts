/**
 * Tunnel relaying (CONNECT, SOCKS5, WebSocket) in both relay modes: the addon's native relay
 * (`auto` on Linux) and JS stream piping (`js`), against real loopback servers. Checked from the
 * outside: sha256 of every byte both ways, half-closes, aborts on either side, proxy.close() with
 * live tunnels, the connection cap still counting relayed tunnels, and the proxy process's own fd
 * table (/proc/self/fd: this test process runs the proxy) back at its baseline afterwards.
 */
import { spawn } from 'child_process';
import { createHash, randomBytes } from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { ManagedProxy, type AuditEvent, type LookupFn, type ManagedProxyOptions } from '../../lib/network';
import { nativeRelay } from '../../lib/network/relay';
import { connectViaProxy, socks5, startHttpServer, startTcpServer, waitFor, type CountingHttpServer, type CountingTcpServer } from './helpers';

const lookup: LookupFn = async (host) => {
  if (host.endsWith('.test')) return [{ address: '127.0.0.1', family: 4 }];
  throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
};

const ROOT = path.resolve(__dirname, '..', '..');
const haveProcFd = fs.existsSync('/proc/self/fd');
const haveNative = nativeRelay() !== null;
if (!haveNative) console.warn(`native relay unavailable on ${process.platform}: native-relay cases are skipped`);

let tcp: CountingTcpServer;
let web: CountingHttpServer;
const proxies: ManagedProxy[] = [];
const sockets: net.Socket[] = [];

beforeAll(async () => {
  tcp = await startTcpServer();
  web = await startHttpServer();
});

afterAll(async () => {
  await tcp.close();
  await web.close();
});

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

/** The fds of this process by kind (it runs the proxy). */
function fdTable(): { total: number; pipes: number; sockets: number } {
  const out = { total: 0, pipes: 0, sockets: 0 };
  for (const name of fs.readdirSync('/proc/self/fd')) {
    let target = '';
    try {
      target = fs.readlinkSync(`/proc/self/fd/${name}`);
    } catch {
      continue; // the directory's own fd, gone by now
    }
    out.total++;
    if (target.startsWith('pipe:')) out.pipes++;
    else if (target.startsWith('socket:')) out.sockets++;
  }
  return out;
}

/**
 * Tunnel sockets JS holds for the proxy listening on `proxyPort` (its accepted client sockets and
 * its connections to the test origin `tcp`): two per tunnel piped in JS, none for a tunnel the
 * addon relays (it holds duplicates of their fds, and JS destroyed its sockets).
 */
function jsTunnelSockets(proxyPort: number): number {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
  return handles.filter((h) => h instanceof net.Socket && (h.localPort === proxyPort || h.remotePort === tcp.port)).length;
}

function fdLinks(): string[] {
  return fs.readdirSync('/proc/self/fd').map((n) => {
    try {
      return `${n} ${fs.readlinkSync(`/proc/self/fd/${n}`)}`;
    } catch {
      return n;
    }
  });
}

async function startProxy(relay: 'auto' | 'js', opts: Partial<ManagedProxyOptions> = {}, ids = ['proc-1']) {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({
    lookup,
    onAudit: (e) => events.push(e),
    policy: { allow: ['**.test'], allowLocal: true },
    closeWithLastProcess: false,
    relay,
    ...opts,
  });
  proxies.push(proxy);
  const ports: number[] = [];
  for (const id of ids) ports.push((await proxy.attach(id)).port);
  return { proxy, port: ports[0]!, ports, events };
}

/** Opens a tunnel (CONNECT or SOCKS5) and returns the client socket, paused. */
async function open(kind: 'connect' | 'socks', port: number, host = 't.test', targetPort = tcp.port): Promise<net.Socket> {
  if (kind === 'connect') {
    const r = await connectViaProxy(port, `${host}:${targetPort}`);
    if (!r.ok) throw new Error(`CONNECT refused: ${r.status}`);
    sockets.push(r.socket);
    if (r.extra.length > 0) r.socket.unshift(r.extra);
    return r.socket;
  }
  const r = await socks5(port, host, targetPort);
  if (r.reply !== 0) throw new Error(`SOCKS5 refused: ${r.reply}`);
  sockets.push(r.socket);
  return r.socket;
}

/** Reads the socket to its end; sha256 and byte count. */
function drain(socket: net.Socket): Promise<{ bytes: number; hex: string; text: string }> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    let bytes = 0;
    let text = '';
    socket.on('data', (c: Buffer) => {
      bytes += c.length;
      hash.update(c);
      if (text.length < 4096) text += c.toString('latin1');
    });
    socket.on('end', () => resolve({ bytes, hex: hash.digest('hex'), text }));
    socket.on('error', reject);
    socket.resume();
  });
}

/** Writes `total` random bytes in 1 MiB chunks with backpressure, then ends; resolves with the sha256. */
function upload(socket: net.Socket, total: number): Promise<string> {
  const block = randomBytes(1 << 20);
  const hash = createHash('sha256');
  let left = total;
  let i = 0;
  return new Promise((resolve, reject) => {
    socket.on('error', reject);
    const pump = () => {
      while (left > 0) {
        const chunk = Buffer.from(block.subarray(0, Math.min(left, block.length)));
        chunk.writeUInt32BE(i++ >>> 0, 0);
        left -= chunk.length;
        hash.update(chunk);
        if (!socket.write(chunk)) return void socket.once('drain', pump);
      }
      socket.end(() => resolve(hash.digest('hex')));
    };
    pump();
  });
}

const MB = 1024 * 1024;

for (const relay of ['auto', 'js'] as const) {
  const native = relay === 'auto' && haveNative;
  describe(`relay: ${relay}${relay === 'auto' ? (haveNative ? ' (native relay)' : ' (no addon: JS piping)') : ''}`, () => {
    for (const kind of ['connect', 'socks'] as const) {
      it(`${kind}: 64 MB each way at once arrive intact (sha256), then both sides half-close`, async () => {
        const { port } = await startProxy(relay);
        // Download: SEND streams bytes and ends; the client's end of the tunnel stays open.
        const down = await open(kind, port);
        down.write(`SEND ${64 * MB}\n`);
        // Upload: HASH reads until our half-close, then answers; so the answer also proves the
        // half-close travelled through while the other direction stayed open.
        const up = await open(kind, port);
        const sentBefore = tcp.sent.length;
        up.write('HASH\n');
        const [downResult, upHex, answer] = await Promise.all([drain(down), upload(up, 64 * MB), drain(up)]);
        expect(downResult.bytes).toBe(64 * MB);
        expect(tcp.sent.length).toBe(sentBefore + 1);
        expect(downResult.hex).toBe(tcp.sent.at(-1));
        expect(answer.text).toBe(`${64 * MB} ${upHex}\n`);
        expect(tcp.received).toContain(upHex);
        down.end();
      }, 120_000);
    }

    it('bytes the client sends right behind CONNECT or the SOCKS5 request are not lost', async () => {
      const { port } = await startProxy(relay);
      // CONNECT head and payload in one write (as a TLS client with early data would send it).
      const c = net.connect(port, '127.0.0.1');
      sockets.push(c);
      await new Promise((r) => c.once('connect', r));
      c.write(`CONNECT t.test:${tcp.port} HTTP/1.1\r\nHost: t.test:${tcp.port}\r\n\r\nECHO\npipelined`);
      c.end();
      const got = await drain(c);
      expect(got.text).toBe('HTTP/1.1 200 Connection Established\r\n\r\npipelined');
    });

    it('the client aborting mid-download closes the upstream connection, and the cap slot comes back', async () => {
      const { port } = await startProxy(relay, { limits: { connectionsPerProcess: 1 } });
      const openBefore = tcp.open;
      const s = await open('connect', port);
      s.write(`SEND ${1024 * MB}\n`);
      let got = 0;
      s.on('data', (c: Buffer) => {
        got += c.length;
        if (got > 4 * MB) s.destroy();
      });
      s.resume();
      expect(await waitFor(() => s.destroyed, 20_000)).toBe(true);
      // Outside: the origin saw its connection close long before 1 GB.
      expect(await waitFor(() => tcp.open === openBefore, 10_000)).toBe(true);
      // The one slot is free again (poll: the proxy learns of the close asynchronously).
      let again: net.Socket | null = null;
      for (const end = Date.now() + 10_000; !again && Date.now() < end; ) {
        again = await open('connect', port).catch(() => null);
        if (!again) await new Promise((r) => setTimeout(r, 50));
      }
      expect(again).not.toBeNull();
      again!.write('ECHO\nagain');
      again!.end();
      expect((await drain(again!)).text).toBe('again');
    });

    it('the origin resetting mid-download ends the client side too', async () => {
      // An origin that sends 8 MB and then resets (RST).
      const origin = net.createServer((sock) => {
        sock.on('error', () => undefined);
        sock.write(Buffer.alloc(8 * MB, 1), () => sock.resetAndDestroy());
      });
      await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
      try {
        const { port } = await startProxy(relay);
        const s = await open('connect', port, 'reset.test', (origin.address() as net.AddressInfo).port);
        let closed = false;
        s.on('close', () => (closed = true));
        s.on('error', () => undefined);
        s.resume();
        expect(await waitFor(() => closed, 20_000)).toBe(true);
      } finally {
        await new Promise((r) => origin.close(r));
      }
    });

    it('a tunnel the client leaves half-open while the origin answers late still gets the answer', async () => {
      // The client ends right after its command; ECHO pipes back, and the origin only ends once it
      // read our EOF: everything arrives and the tunnel then closes.
      const { port } = await startProxy(relay);
      const s = await open('socks', port);
      s.write('ECHO\nfirst ');
      await new Promise((r) => setTimeout(r, 20)); // two segments, not one
      s.end('second');
      expect((await drain(s)).text).toBe('first second');
    });

    it('proxy.close() with live tunnels (busy and idle) closes them all', async () => {
      const { proxy, port } = await startProxy(relay);
      const openBefore = tcp.open;
      const busy = await open('connect', port);
      busy.write(`SEND ${1024 * MB}\n`);
      busy.resume();
      busy.on('error', () => undefined);
      const idle = await open('socks', port);
      idle.write('HOLD\n');
      idle.on('error', () => undefined);
      idle.resume();
      expect(await waitFor(() => tcp.open === openBefore + 2)).toBe(true);
      await proxy.close();
      expect(await waitFor(() => busy.destroyed && idle.destroyed, 10_000)).toBe(true);
      expect(await waitFor(() => tcp.open === openBefore, 10_000)).toBe(true);
    });

    it('relayed tunnels count against the per-sandbox connection cap; another sandbox is still served', async () => {
      const { ports } = await startProxy(relay, { limits: { connectionsPerProcess: 3 } }, ['capped', 'other']);
      const [capped, other] = ports as [number, number];
      const held: net.Socket[] = [];
      // ECHO: the origin closes when the client does (HOLD would keep a half-open tunnel).
      for (let i = 0; i < 3; i++) {
        const s = await open('connect', capped);
        s.write('ECHO\n');
        held.push(s);
      }
      // Let the hand-over to the relay finish (the JS sockets close a tick later).
      await new Promise((r) => setTimeout(r, 50));
      const fourth = await connectViaProxy(capped, `t.test:${tcp.port}`);
      expect(fourth.ok).toBe(false);
      if (!fourth.ok) expect(fourth.status).toBe(429);
      const fine = await open('connect', other);
      fine.write('ECHO\nother');
      fine.end();
      expect((await drain(fine)).text).toBe('other');
      // Close one held tunnel from the client side: a slot opens again.
      held[0]!.destroy();
      let again: net.Socket | null = null;
      for (const end = Date.now() + 10_000; !again && Date.now() < end; ) {
        again = await open('connect', capped).catch(() => null);
        if (!again) await new Promise((r) => setTimeout(r, 50));
      }
      expect(again).not.toBeNull();
    });

    it('WebSocket upgrades over plain HTTP are relayed both ways', async () => {
      const server = http.createServer();
      const upgraded: net.Socket[] = [];
      server.on('upgrade', (req, sock: net.Socket, head: Buffer) => {
        upgraded.push(sock);
        sock.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
        if (head.length) sock.write(head);
        sock.pipe(sock);
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      try {
        const { port } = await startProxy(relay);
        const wsPort = (server.address() as net.AddressInfo).port;
        const c = net.connect(port, '127.0.0.1');
        sockets.push(c);
        await new Promise((r) => c.once('connect', r));
        c.write(`GET http://ws.test:${wsPort}/chat HTTP/1.1\r\nHost: ws.test:${wsPort}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nframe-1`);
        let text = '';
        c.on('data', (d: Buffer) => (text += d.toString('latin1')));
        expect(await waitFor(() => text.endsWith('frame-1'))).toBe(true);
        c.write('frame-2');
        expect(await waitFor(() => text.endsWith('frame-1frame-2'))).toBe(true);
        expect(text.startsWith('HTTP/1.1 101')).toBe(true);
      } finally {
        for (const u of upgraded) u.destroy();
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      }
    });

    it.skipIf(!haveProcFd)(`leaves no fd behind: 40 tunnels (transfers, aborts, idle) then close${haveProcFd ? '' : ' (needs /proc/self/fd)'}`, async () => {
      // Warm up (lazy module loads, the addon) so the baseline is steady.
      const warm = await startProxy(relay);
      const w = await open('connect', warm.port);
      w.end('ECHO\n');
      await drain(w);
      await warm.proxy.close();
      proxies.splice(0);
      await new Promise((r) => setTimeout(r, 50));
      const baseline = fdTable();
      const { proxy, port } = await startProxy(relay);
      const live: net.Socket[] = [];
      const work: Array<Promise<unknown>> = [];
      for (let i = 0; i < 40; i++) {
        const kind = i % 2 === 0 ? 'connect' : 'socks';
        const s = await open(kind, port);
        s.on('error', () => undefined);
        if (i % 4 === 0) {
          s.write(`SEND ${2 * MB}\n`);
          work.push(drain(s).then((r) => expect(r.bytes).toBe(2 * MB)));
        } else if (i % 4 === 1) {
          s.write(`SEND ${512 * MB}\n`);
          s.once('data', () => s.destroy());
          s.resume();
        } else if (i % 4 === 2) {
          s.write('HOLD\n');
          live.push(s);
        } else {
          s.end('ECHO\nx');
          work.push(drain(s));
        }
      }
      await Promise.all(work);
      // The held tunnels are in the native relay (no JS sockets), or piped in JS (two each).
      expect(jsTunnelSockets(port)).toBe(native ? 0 : 2 * live.length);
      await proxy.close();
      for (const s of live) s.destroy();
      const settled = await waitFor(() => fdTable().total <= baseline.total, 10_000);
      if (!settled) console.log(JSON.stringify({ now: fdTable(), baseline, links: fdLinks() }));
      expect({ settled, now: fdTable(), baseline, links: settled ? [] : fdLinks() }).toMatchObject({ settled: true });
    }, 60_000);
  });
}

describe.runIf(haveNative)('native relay specifics', () => {
  it('the addon, not JS, carries an auto tunnel (JS holds none of its sockets); js mode pipes it in JS', async () => {
    for (const relay of ['auto', 'js'] as const) {
      const { proxy, port } = await startProxy(relay);
      const s = await open('connect', port);
      s.write('HOLD\n');
      await new Promise((r) => setTimeout(r, 50));
      expect([relay, jsTunnelSockets(port)]).toEqual([relay, relay === 'auto' ? 0 : 2]);
      await proxy.close();
    }
  });

  it('more stalled bulk tunnels than the process-wide bulk-buffer budget all complete intact', async () => {
    // 72 downloads whose clients do not read yet: every relay fills its buffer, and past 64 MiB
    // of 1 MiB bulk buffers the rest keep relaying through 64 KiB ones.
    const { port } = await startProxy('auto');
    const socks: net.Socket[] = [];
    for (let i = 0; i < 72; i++) {
      const s = await open('connect', port);
      s.write(`SEND ${4 * MB}\n`);
      socks.push(s);
    }
    await new Promise((r) => setTimeout(r, 300));
    const got = await Promise.all(socks.map((s) => drain(s)));
    expect(got.map((g) => g.bytes)).toEqual(socks.map(() => 4 * MB));
  }, 60_000);

  it('rejects bad arguments without taking anything over', () => {
    const relay = nativeRelay()!;
    const fd = fs.openSync('/dev/null', 'r');
    try {
      expect(() => relay.relay(fd, fd, null, null, 1000, () => undefined)).toThrow(/stream sockets/);
      expect(() => relay.relay(-1, 0, null, null, 1000, () => undefined)).toThrow(TypeError);
      expect(() => relay.relayClose({})).toThrow(/relay handle/);
      expect(() => ManagedProxy.create({ policy: { allow: [] }, relay: 'kernel' as 'auto' })).toThrow(/relay/);
      expect(() => fs.fstatSync(fd)).not.toThrow();
    } finally {
      fs.closeSync(fd);
    }
  });

  it('terminating a Worker that runs a proxy with live native tunnels neither crashes nor leaves them open', async () => {
    // In a child process (a crash must not take the test runner down). A Worker runs the proxy;
    // the main thread holds a relayed tunnel to an echo server, then terminates the Worker.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxy-worker-'));
    const script = path.join(dir, 'main.js');
    fs.writeFileSync(
      script,
      `const { Worker, isMainThread, parentPort } = require('worker_threads');
const net = require('net');
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
if (isMainThread) {
  const echo = net.createServer((s) => { s.on('error', () => {}); s.pipe(s); }).listen(0, '127.0.0.1', () => {
    const w = new Worker(__filename);
    w.on('error', (e) => out({ error: String(e) }));
    w.on('message', ({ port }) => {
      const c = net.connect(port, '127.0.0.1', () => c.write('CONNECT e.test:' + echo.address().port + ' HTTP/1.1\\r\\n\\r\\n'));
      let got = '';
      let closed = false;
      c.on('error', () => {});
      c.on('close', () => { closed = true; });
      c.on('data', (d) => {
        got += d;
        if (got === 'HTTP/1.1 200 Connection Established\\r\\n\\r\\n') c.write('ping');
        if (got.endsWith('ping')) {
          w.terminate().then(() => {
            const t = setInterval(() => { if (closed) { clearInterval(t); out({ echoed: true, closed }); echo.close(); } }, 10);
          });
        }
      });
    });
  });
} else {
  require(${JSON.stringify(path.join(ROOT, 'test/network/ts-register.cjs'))});
  const { ManagedProxy } = require(${JSON.stringify(path.join(ROOT, 'lib/network/index.ts'))});
  (async () => {
    const p = await ManagedProxy.start({ policy: { allow: ['e.test'], allowLocal: true }, lookup: async () => [{ address: '127.0.0.1', family: 4 }] });
    parentPort.postMessage({ port: (await p.attach('w')).port });
  })();
}
`,
    );
    try {
      const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c));
      child.stderr.on('data', (c: Buffer) => (stderr += c));
      const [code, signal] = await new Promise<[number | null, string | null]>((r) => child.on('exit', (c, sig) => r([c, sig])));
      expect({ code, signal, stdout, stderr }).toEqual({ code: 0, signal: null, stdout: '{"echoed":true,"closed":true}\n', stderr: '' });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a relay whose tunnel is already over when it is set up reports once, on a later turn', async () => {
    const relay = nativeRelay()!;
    const [a, b] = await socketPair();
    const [c, d] = await socketPair();
    // b and c are handed over; a and d are the outside ends, both already ended.
    a.end();
    d.end();
    await new Promise((r) => setTimeout(r, 20));
    const calls: Array<[string | null, number, number]> = [];
    let returned = false;
    const h = relay.relay(socketFdOf(b), socketFdOf(c), Buffer.from('hi'), null, 10_000, (err, ab, ba) => {
      expect(returned).toBe(true);
      calls.push([err, ab, ba]);
    });
    returned = true;
    b.destroy();
    c.destroy();
    expect(calls).toEqual([]);
    expect(await waitFor(() => calls.length === 1)).toBe(true);
    expect(relay.relayClose(h)).toBe(false);
    await new Promise((r) => setTimeout(r, 20));
    expect(calls).toEqual([[null, 2, 0]]);
    a.destroy();
    d.destroy();
  });
});

/** Two connected loopback sockets (this process holds both ends). */
async function socketPair(): Promise<[net.Socket, net.Socket]> {
  const server = net.createServer({ allowHalfOpen: true });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r));
  const client = net.connect({ port: (server.address() as net.AddressInfo).port, host: '127.0.0.1', allowHalfOpen: true });
  const [s] = await Promise.all([accepted, new Promise((r) => client.once('connect', r))]);
  server.close();
  s.pause();
  client.pause();
  s.on('error', () => undefined);
  client.on('error', () => undefined);
  return [client, s];
}

function socketFdOf(s: net.Socket): number {
  return (s as unknown as { _handle: { fd: number } })._handle.fd;
}
