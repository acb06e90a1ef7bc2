/**
 * The managed proxy against hostile clients: numeric IPv4 spellings, metadata addresses, absurd
 * names, slow and huge heads, connection floods (one sandbox at its cap, another still served, the
 * host's own file system calls still working), Expect: 100-continue, WebSocket upgrades and idle
 * tunnels. Real loopback servers; names resolve through an injected lookup.
 */
import { spawn } from 'child_process';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { ManagedProxy, type AuditEvent, type LookupFn, type ManagedProxyOptions } from '../../lib/network';
import {
  connectViaProxy,
  exchange,
  httpViaProxy,
  socks5,
  startHttpServer,
  startTcpServer,
  waitFor,
  type CountingHttpServer,
  type CountingTcpServer,
} from './helpers';

const ROOT = path.resolve(__dirname, '..', '..');

const lookupCalls: string[] = [];
const lookup: LookupFn = async (host) => {
  lookupCalls.push(host);
  if (host === 'imds.test') return [{ address: '169.254.170.2', family: 4 }];
  if (host === 'alibaba.test') return [{ address: '100.100.100.200', family: 4 }];
  if (host === 'azure.test') return [{ address: '168.63.129.16', family: 4 }];
  if (host === 'imds6.test') return [{ address: 'fd00:ec2::23', family: 6 }];
  if (host.endsWith('.test')) return [{ address: '127.0.0.1', family: 4 }];
  throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
};

let web: CountingHttpServer;
let tcp: CountingTcpServer;
const proxies: ManagedProxy[] = [];
const sockets: net.Socket[] = [];

beforeAll(async () => {
  web = await startHttpServer();
  tcp = await startTcpServer();
});

afterAll(async () => {
  await web.close();
  await tcp.close();
});

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

async function startProxy(opts: Partial<ManagedProxyOptions> & { policy: ManagedProxyOptions['policy'] }, ids = ['proc-1']) {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({ lookup, onAudit: (e) => events.push(e), closeWithLastProcess: false, ...opts });
  proxies.push(proxy);
  const ports: number[] = [];
  for (const id of ids) ports.push((await proxy.attach(id)).port);
  return { proxy, port: ports[0]!, ports, events };
}

/** Raw bytes to the proxy; resolves with everything it answered once it closes (or after `ms`). */
function rawExchange(port: number, payload: string, ms = 5000): Promise<string> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    sockets.push(s);
    let out = '';
    const timer = setTimeout(() => resolve(out), ms);
    s.on('data', (c: Buffer) => (out += c.toString('latin1')));
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
    s.on('connect', () => s.write(payload));
  });
}

describe('address canonicalisation', () => {
  const spellings = ['2130706433', '0x7f.1', '0177.0.0.1', '127.1', '127.000.000.001', '0x7f000001'];

  it('every numeric IPv4 spelling meets the policy of its dotted quad (CONNECT and SOCKS5)', async () => {
    // `*` matches names, never IP literals; the deny entry names the dotted quad only.
    const { port, events } = await startProxy({ policy: { allow: ['*'], deny: ['127.0.0.1'], allowLocal: true } });
    const before = tcp.connections;
    lookupCalls.length = 0;
    for (const s of spellings) {
      const r = await connectViaProxy(port, `${s}:${tcp.port}`);
      expect(r.ok, s).toBe(false);
      if (!r.ok) expect(r.headers['x-proxy-error'], s).toBe('blocked-by-denylist');
      const socks = await socks5(port, s, tcp.port);
      sockets.push(socks.socket);
      expect(socks.reply, s).toBe(0x02);
    }
    // Nothing reached the listener, nothing was looked up, every event names 127.0.0.1.
    expect(tcp.connections).toBe(before);
    expect(lookupCalls).toEqual([]);
    expect(new Set(events.map((e) => `${e.host} ${e.reason} ${e.scope}`))).toEqual(new Set(['127.0.0.1 denied non_domain']));
    // HTTP absolute-form too.
    const h = await httpViaProxy(port, `http://2130706433:${web.port}/`);
    expect(h.status).toBe(403);
    // Control: a name (matching `*`) that resolves to loopback is served.
    const ok = await connectViaProxy(port, `api.allowed.test:${tcp.port}`);
    expect(ok.ok).toBe(true);
    if (ok.ok) expect((await exchange(ok.socket, 'ECHO\nname', { end: true })).toString()).toBe('name');
  });

  it('numeric spellings are refused as local without allowLocal, even under `*`', async () => {
    const { port } = await startProxy({ policy: { allow: ['*'] } });
    for (const s of spellings) {
      const r = await connectViaProxy(port, `${s}:${tcp.port}`);
      expect(r.ok, s).toBe(false);
    }
  });

  it('a numeric name that is no IPv4 address, or an absurd name, is refused before any lookup', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['*'], allowLocal: true } });
    lookupCalls.length = 0;
    const long = `${'a'.repeat(60)}.`.repeat(170) + 'test'; // ~10 kB
    for (const host of ['1.2.3.4.5', '256.1.1.1', '0x1g.test.4', long, 'a..b.test', 'bad%name.test']) {
      const r = await connectViaProxy(port, `${host}:${tcp.port}`);
      expect(r.ok, host.slice(0, 40)).toBe(false);
      // 403 from the policy, or 400 where the head parser already refuses the target.
      if (!r.ok) expect([400, 403, 431], host.slice(0, 40)).toContain(r.status);
    }
    expect(lookupCalls).toEqual([]);
    expect(events.every((e) => e.reason === 'invalid_target' && e.host.length <= 254)).toBe(true);
    // SOCKS5 domain names take the same path.
    const s = await socks5(port, '0x7f.0.0.1.5', tcp.port);
    sockets.push(s.socket);
    expect(s.reply).toBe(0x02);
  });

  it('metadata and platform endpoints are refused whatever allowLocal says', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['**.test'], allowLocal: true } });
    const before = tcp.connections;
    for (const host of ['imds.test', 'alibaba.test', 'azure.test', 'imds6.test']) {
      const r = await connectViaProxy(port, `${host}:${tcp.port}`);
      expect(r.ok, host).toBe(false);
    }
    for (const lit of ['169.254.170.2', '0251.0376.0251.0376', '2852039166', '[fd00:ec2::23]']) {
      const r = await connectViaProxy(port, `${lit}:80`);
      expect(r.ok, lit).toBe(false);
    }
    expect(tcp.connections).toBe(before);
    expect(events.every((e) => e.decision === 'deny')).toBe(true);
    // Control: allowLocal still reaches an ordinary loopback name.
    expect((await connectViaProxy(port, `ok.test:${tcp.port}`)).ok).toBe(true);
  });
});

describe('heads', () => {
  it('a head trickled one byte at a time is cut at the absolute deadline', async () => {
    const { port } = await startProxy({ policy: { allow: ['**.test'], allowLocal: true }, handshakeTimeoutMs: 400 });
    const before = web.requests.length;
    const head = `GET http://slow.test:${web.port}/ HTTP/1.1\r\nHost: slow.test\r\nX-Pad: ${'p'.repeat(40)}\r\n\r\n`;
    const s = net.connect(port, '127.0.0.1');
    sockets.push(s);
    let closed = false;
    let answer = '';
    s.on('close', () => (closed = true));
    s.on('error', () => undefined);
    s.on('data', (c: Buffer) => (answer += c.toString()));
    // 100 bytes, one every 50 ms: each byte would re-arm an idle timer; the deadline does not move.
    for (let i = 0; i < head.length && !closed; i++) {
      s.write(head[i]!);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await waitFor(() => closed, 5000)).toBe(true);
    expect(answer).not.toContain('200');
    expect(web.requests.length).toBe(before);
  });

  it('an oversized head is refused (431) and never forwarded', async () => {
    const { port } = await startProxy({ policy: { allow: ['**.test'], allowLocal: true } });
    const before = web.requests.length;
    const out = await rawExchange(port, `GET http://big.test:${web.port}/ HTTP/1.1\r\nHost: big.test\r\nX-Big: ${'b'.repeat(64 * 1024)}\r\n\r\n`);
    expect(out).toMatch(/^HTTP\/1\.1 431/);
    expect(web.requests.length).toBe(before);
    // Control: a normal head is served.
    expect((await httpViaProxy(port, `http://big.test:${web.port}/`)).status).toBe(200);
  });

  it('Expect: 100-continue is answered only after the policy allowed the request', async () => {
    const { port } = await startProxy({ policy: { allow: ['ok.test'], allowLocal: true } });
    const before = web.requests.length;
    const denied = await rawExchange(port, `POST http://no.test:${web.port}/ HTTP/1.1\r\nHost: no.test\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n`);
    expect(denied).toMatch(/^HTTP\/1\.1 403/);
    expect(denied).not.toContain('100 Continue');
    expect(web.requests.length).toBe(before);
    const allowed = await rawExchange(
      port,
      `POST http://ok.test:${web.port}/ HTTP/1.1\r\nHost: ok.test\r\nExpect: 100-continue\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbody`,
    );
    expect(allowed).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200/);
    expect(web.requests.length).toBe(before + 1);
  });
});

describe('WebSocket upgrade over plain HTTP', () => {
  let wsServer: http.Server;
  let wsPort = 0;
  let upgrades = 0;
  const upgraded: net.Socket[] = [];
  beforeAll(async () => {
    wsServer = http.createServer((_req, res) => res.end('plain'));
    wsServer.on('upgrade', (req, socket: net.Socket, head: Buffer) => {
      upgrades++;
      upgraded.push(socket);
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Seen-Host: ${req.headers.host}\r\n\r\n`);
      if (head.length) socket.write(head);
      socket.on('data', (c: Buffer) => socket.write(c)); // echo
    });
    await new Promise<void>((r) => wsServer.listen(0, '127.0.0.1', r));
    wsPort = (wsServer.address() as net.AddressInfo).port;
  });
  afterAll(() => {
    for (const s of upgraded) s.destroy();
    return new Promise<void>((r) => wsServer.close(() => r()));
  });

  const upgradeHead = (host: string) =>
    `GET http://${host}:${wsPort}/chat HTTP/1.1\r\nHost: ${host}:${wsPort}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`;

  it('is relayed to an allowed host, refused for others and in limited mode', async () => {
    const { port } = await startProxy({ policy: { allow: ['ws.test'], allowLocal: true } });
    const s = net.connect(port, '127.0.0.1');
    sockets.push(s);
    let got = '';
    s.on('data', (c: Buffer) => (got += c.toString()));
    await new Promise<void>((r) => s.on('connect', () => r()));
    s.write(upgradeHead('ws.test'));
    expect(await waitFor(() => got.includes('\r\n\r\n'))).toBe(true);
    expect(got).toMatch(/^HTTP\/1\.1 101/);
    expect(got).toContain(`X-Seen-Host: ws.test:${wsPort}`);
    s.write('frame-bytes');
    expect(await waitFor(() => got.endsWith('frame-bytes'))).toBe(true);

    const before = upgrades;
    const denied = await rawExchange(port, upgradeHead('other.test'));
    expect(denied).toMatch(/^HTTP\/1\.1 403/);
    const limited = await startProxy({ policy: { allow: ['ws.test'], allowLocal: true, mode: 'limited' } });
    const lim = await rawExchange(limited.port, upgradeHead('ws.test'));
    expect(lim).toMatch(/^HTTP\/1\.1 403/);
    expect(lim).toContain('blocked-by-method-policy');
    expect(upgrades).toBe(before);
  });
});

describe('connection exhaustion', () => {
  it('one sandbox at its caps gets 429s and audit events; another sandbox is still served', async () => {
    const { ports, events } = await startProxy(
      { policy: { allow: ['**.test'], allowLocal: true }, limits: { connectionsPerProcess: 40, pendingHandshakesPerProcess: 10 } },
      ['hostile', 'victim'],
    );
    const [hostile, victim] = ports as [number, number];
    // 60 idle connections that never send a byte: only 10 may wait for their head.
    const idle: net.Socket[] = [];
    const answers: string[] = [];
    for (let i = 0; i < 60; i++) {
      const s = net.connect(hostile, '127.0.0.1');
      sockets.push(s);
      idle.push(s);
      let a = '';
      s.on('data', (c: Buffer) => (a += c.toString()));
      s.on('close', () => answers.push(a));
      s.on('error', () => undefined);
    }
    expect(await waitFor(() => answers.length >= 50)).toBe(true);
    expect(answers.filter((a) => a.startsWith('HTTP/1.1 429')).length).toBeGreaterThanOrEqual(50);
    expect(answers.every((a) => a.includes('x-proxy-error: blocked-by-connection-limit'))).toBe(true);
    for (const s of idle) s.destroy();
    // Established tunnels count against the connection cap (once the proxy has seen the idle
    // ones close: poll until a tunnel is accepted again).
    const tunnels: net.Socket[] = [];
    let refused = 0;
    for (const end = Date.now() + 5000; tunnels.length === 0 && Date.now() < end; ) {
      const r = await connectViaProxy(hostile, `t.test:${tcp.port}`).catch(() => null);
      if (r && r.ok) {
        tunnels.push(r.socket);
        sockets.push(r.socket);
      } else await new Promise((res) => setTimeout(res, 50));
    }
    for (let i = 1; i < 60; i++) {
      const r = await connectViaProxy(hostile, `t.test:${tcp.port}`).catch(() => null);
      if (r && r.ok) {
        tunnels.push(r.socket);
        sockets.push(r.socket);
      } else refused++;
    }
    expect(tunnels.length).toBeLessThanOrEqual(40);
    expect(tunnels.length).toBeGreaterThanOrEqual(30);
    expect(refused).toBeGreaterThanOrEqual(20);
    // The other sandbox is served, and the host's own fs calls work.
    expect((await httpViaProxy(victim, `http://v.test:${web.port}/`)).status).toBe(200);
    const ok = await connectViaProxy(victim, `v.test:${tcp.port}`);
    expect(ok.ok).toBe(true);
    if (ok.ok) expect((await exchange(ok.socket, 'ECHO\nvictim', { end: true })).toString()).toBe('victim');
    expect(fs.readFileSync(__filename, 'utf8').length).toBeGreaterThan(0);
    const limitEvents = events.filter((e) => e.reason === 'connection_limit');
    expect(limitEvents.length).toBeGreaterThan(0);
    expect(limitEvents.every((e) => e.processId === 'hostile' && e.decision === 'deny' && (e.count ?? 0) >= 1)).toBe(true);
  });

  it('the process-wide socket budget keeps headroom for the host (a proxy under a 400-fd limit)', async () => {
    // The proxy runs in a child node process with RLIMIT_NOFILE 400: its budget is 400 - 256 =
    // 144 sockets. From here (another process, as a sandbox would be) 300 CONNECT tunnels are
    // opened with the per-sandbox caps out of the way. The child must answer every one (200 or a
    // clear 503), and its own fs.openSync must keep working while the tunnels are up.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxy-budget-'));
    const script = path.join(dir, 'child.js');
    fs.writeFileSync(
      script,
      `require(${JSON.stringify(path.join(ROOT, 'test/network/ts-register.cjs'))});
const { ManagedProxy } = require(${JSON.stringify(path.join(ROOT, 'lib/network/index.ts'))});
const fs = require('fs');
(async () => {
  const proxy = await ManagedProxy.start({
    policy: { allow: ['**.test'], allowLocal: true },
    lookup: async () => [{ address: '127.0.0.1', family: 4 }],
    limits: { connectionsPerProcess: 100000, pendingHandshakesPerProcess: 100000 },
  });
  const { port } = await proxy.attach('hostile');
  process.stdout.write(JSON.stringify({ port }) + '\\n');
  process.stdin.once('data', () => {
    let fsWorks = true;
    try { const fds = []; for (let i = 0; i < 20; i++) fds.push(fs.openSync(__filename, 'r')); fds.forEach((f) => fs.closeSync(f)); } catch (e) { fsWorks = String(e.code); }
    process.stdout.write(JSON.stringify({ fsWorks }) + '\\n');
    process.exit(0);
  });
})().catch((e) => { process.stdout.write(JSON.stringify({ error: String(e && e.stack) }) + '\\n'); process.exit(1); });
`,
    );
    const child = spawn('/bin/sh', ['-c', 'ulimit -n 400 && exec "$0" "$1"', process.execPath, script], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines: Array<Record<string, unknown>> = [];
    let partial = '';
    child.stdout!.on('data', (c: Buffer) => {
      partial += c.toString();
      const parts = partial.split('\n');
      partial = parts.pop()!;
      for (const l of parts) if (l.trim()) lines.push(JSON.parse(l));
    });
    const closed = new Promise<number | null>((r) => child.on('close', (c) => r(c)));
    try {
      expect(await waitFor(() => lines.length > 0, 20_000)).toBe(true);
      const port = lines[0]!.port as number;
      expect(port, JSON.stringify(lines[0])).toBeGreaterThan(0);
      const statuses = await Promise.all(
        Array.from({ length: 300 }, () =>
          connectViaProxy(port, `t.test:${tcp.port}`).then(
            (r) => {
              if (r.ok) {
                sockets.push(r.socket);
                return 200;
              }
              return r.status;
            },
            () => -1,
          ),
        ),
      );
      child.stdin!.write('check\n');
      expect(await waitFor(() => lines.length > 1, 20_000)).toBe(true);
      expect(lines[1]!.fsWorks).toBe(true);
      const ok = statuses.filter((x) => x === 200).length;
      const s503 = statuses.filter((x) => x === 503).length;
      expect(ok).toBeGreaterThan(20);
      expect(ok).toBeLessThanOrEqual(72); // two sockets per tunnel
      expect(s503).toBe(300 - ok);
      expect(await closed).toBe(0);
    } finally {
      child.kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an idle tunnel is closed after tunnelIdleTimeoutMs', async () => {
    const { port } = await startProxy({ policy: { allow: ['**.test'], allowLocal: true }, limits: { tunnelIdleTimeoutMs: 300 } });
    const r = await connectViaProxy(port, `idle.test:${tcp.port}`);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    sockets.push(r.socket);
    let closed = false;
    r.socket.on('close', () => (closed = true));
    r.socket.resume();
    expect(await waitFor(() => closed, 5000)).toBe(true);
  });

  it('rejects unknown limit fields and bad values', () => {
    expect(() => ManagedProxy.create({ policy: { allow: [] }, limits: { bogus: 1 } as never })).toThrow(/Unknown field limits.bogus/);
    expect(() => ManagedProxy.create({ policy: { allow: [] }, limits: { connectionsPerProcess: 0 } })).toThrow(/positive/);
  });
});

describe('attach({ admit }): connections that are not the sandbox own', () => {
  it('are closed unanswered before anything is read, count against no cap, and leave the admitted ones served', async () => {
    const events: AuditEvent[] = [];
    const proxy = await ManagedProxy.start({
      lookup,
      onAudit: (e) => events.push(e),
      closeWithLastProcess: false,
      policy: { allow: ['**.test'], allowLocal: true },
      limits: { connectionsPerProcess: 4, pendingHandshakesPerProcess: 2 },
    });
    proxies.push(proxy);
    let verdict: boolean | 'throw' = false;
    const { port } = await proxy.attach('admitted', {
      admit: () => {
        if (verdict === 'throw') throw new Error('lookup failed');
        return verdict;
      },
    });
    const requests = web.requests.length;
    // Ten held-open refused connections, far over both caps; each one got no byte.
    const got: number[] = [];
    for (let i = 0; i < 10; i++) {
      const s = net.connect(port, '127.0.0.1');
      sockets.push(s);
      let n = 0;
      s.on('data', (c: Buffer) => (n += c.length));
      s.on('error', () => undefined);
      await new Promise<void>((r) => s.once('close', () => r()));
      got.push(n);
    }
    expect(got).toEqual(Array(10).fill(0));
    // A check that throws refuses too.
    verdict = 'throw';
    expect(await rawExchange(port, `GET http://a.test:${web.port}/thrown HTTP/1.1\r\nHost: a.test\r\n\r\n`)).toBe('');
    verdict = true;
    const h = await httpViaProxy(port, `http://a.test:${web.port}/admitted`);
    expect(h.status).toBe(200);
    expect(web.requests.slice(requests).map((r) => r.url)).toEqual(['/admitted']);
    expect(events.filter((e) => e.reason === 'connection_limit' || e.reason === 'socket_budget')).toEqual([]);
    expect(events.map((e) => e.processId)).toEqual(['admitted']);
  });

  it('must be a function', async () => {
    const proxy = await ManagedProxy.start({ lookup, closeWithLastProcess: false, policy: { allow: [] } });
    proxies.push(proxy);
    await expect(proxy.attach('x', { admit: 1 as never })).rejects.toThrow(/Expected admit to be a function/);
  });
});
