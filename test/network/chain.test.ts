/**
 * Upstream proxy chaining (`upstreamProxy`): every egress of the managed proxy goes through
 * another HTTP proxy. The upstream here is a second ManagedProxy (it audits what it is asked, so
 * the tests see from the outside that traffic went through it and named the checked address), and
 * a small raw proxy that demands Proxy-Authorization. Both relay modes for tunnels.
 */
import { createHash } from 'crypto';
import * as net from 'net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { ManagedProxy, type AuditEvent, type LookupFn } from '../../lib/network';
import { connectViaProxy, exchange, httpViaProxy, socks5, startHttpServer, startTcpServer, type CountingHttpServer, type CountingTcpServer } from './helpers';

const lookup: LookupFn = async (host) => {
  if (host.endsWith('.test')) return [{ address: '127.0.0.1', family: 4 }];
  throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
};

let web: CountingHttpServer;
let tcp: CountingTcpServer;
const proxies: ManagedProxy[] = [];

beforeAll(async () => {
  web = await startHttpServer();
  tcp = await startTcpServer();
});
afterAll(async () => {
  await web.close();
  await tcp.close();
});
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

/** The corporate proxy: resolves *.test itself, allows them and the loopback address. */
async function startUpstream() {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({ policy: { allow: ['**.test', '127.0.0.1'], allowLocal: true }, lookup, onAudit: (e) => events.push(e), closeWithLastProcess: false });
  proxies.push(proxy);
  const { port } = await proxy.attach('corporate');
  return { proxy, port, events };
}

async function startChained(upstreamProxy: string, relay: 'auto' | 'js' = 'auto', upstreamTarget?: 'name' | 'address') {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({
    policy: { allow: ['**.test'], deny: ['denied.test'], allowLocal: true },
    lookup,
    onAudit: (e) => events.push(e),
    upstreamProxy,
    upstreamTarget,
    relay,
    closeWithLastProcess: false,
  });
  proxies.push(proxy);
  const { port } = await proxy.attach('sandbox');
  return { proxy, port, events };
}

describe('upstream proxy chaining', () => {
  for (const relay of ['auto', 'js'] as const) {
    it(`CONNECT and SOCKS5 tunnels go through the upstream as CONNECT <checked name> (relay: ${relay})`, async () => {
      const up = await startUpstream();
      const { port, events } = await startChained(`http://127.0.0.1:${up.port}`, relay);
      const before = tcp.connections;
      const t = await connectViaProxy(port, `echo.test:${tcp.port}`);
      expect(t.ok).toBe(true);
      if (t.ok) expect((await exchange(t.socket, 'ECHO\nchained', { end: true })).toString()).toBe('chained');
      const s = await socks5(port, 'echo.test', tcp.port);
      expect(s.reply).toBe(0);
      expect((await exchange(s.socket, 'ECHO\nchained socks', { end: true })).toString()).toBe('chained socks');
      // 16 MB down through both proxies, intact.
      const big = await connectViaProxy(port, `bulk.test:${tcp.port}`);
      expect(big.ok).toBe(true);
      if (big.ok) {
        const data = await exchange(big.socket, `SEND ${16 << 20}\n`);
        expect(data.length).toBe(16 << 20);
        expect(createHash('sha256').update(data).digest('hex')).toBe(tcp.sent.at(-1));
      }
      expect(tcp.connections).toBe(before + 3);
      expect(events.map((e) => [e.protocol, e.host, e.decision])).toEqual([
        ['httpsConnect', 'echo.test', 'allow'],
        ['socks5Tcp', 'echo.test', 'allow'],
        ['httpsConnect', 'bulk.test', 'allow'],
      ]);
      // Outside: the upstream was asked for the names we allowed.
      expect(up.events.map((e) => [e.protocol, e.host, e.port, e.decision])).toEqual([
        ['httpsConnect', 'echo.test', tcp.port, 'allow'],
        ['httpsConnect', 'echo.test', tcp.port, 'allow'],
        ['httpsConnect', 'bulk.test', tcp.port, 'allow'],
      ]);
    });
  }

  it('plain HTTP goes to the upstream in absolute form; the origin sees the name as Host', async () => {
    const up = await startUpstream();
    const { port } = await startChained(`http://127.0.0.1:${up.port}`);
    const before = web.requests.length;
    for (let i = 0; i < 3; i++) {
      const r = await httpViaProxy(port, `http://plain.test:${web.port}/p${i}`);
      expect(r.status).toBe(200);
    }
    expect(web.requests.slice(before).map((q) => [q.url, q.headers.host])).toEqual([0, 1, 2].map((i) => [`/p${i}`, `plain.test:${web.port}`]));
    expect(up.events.map((e) => [e.protocol, e.host, e.method])).toEqual([0, 1, 2].map(() => ['http', 'plain.test', 'GET']));
  });

  it("upstreamTarget 'address': the upstream is asked for exactly the checked address", async () => {
    const up = await startUpstream();
    const { port } = await startChained(`http://127.0.0.1:${up.port}`, 'auto', 'address');
    const t = await connectViaProxy(port, `echo.test:${tcp.port}`);
    expect(t.ok).toBe(true);
    if (t.ok) expect((await exchange(t.socket, 'ECHO\nby address', { end: true })).toString()).toBe('by address');
    expect((await httpViaProxy(port, `http://plain.test:${web.port}/a`)).status).toBe(200);
    expect(up.events.map((e) => [e.protocol, e.host])).toEqual([
      ['httpsConnect', '127.0.0.1'],
      ['http', '127.0.0.1'],
    ]);
    expect(() => ManagedProxy.create({ policy: { allow: [] }, upstreamTarget: 'ip' as 'name' })).toThrow(TypeError);
  });

  it('a name we refuse never reaches the upstream; an upstream refusal is a 502 / SOCKS failure', async () => {
    const up = await startUpstream();
    const { port } = await startChained(`http://127.0.0.1:${up.port}`);
    const denied = await connectViaProxy(port, `denied.test:${tcp.port}`);
    expect(denied.ok).toBe(false);
    expect((await httpViaProxy(port, `http://denied.test:${web.port}/`)).status).toBe(403);
    expect(up.events).toEqual([]);
    // The upstream refuses everything now.
    up.proxy.update({ allow: [] });
    const refused = await connectViaProxy(port, `echo.test:${tcp.port}`);
    expect(refused.ok).toBe(false);
    if (!refused.ok) expect(refused.status).toBe(502);
    expect((await socks5(port, 'echo.test', tcp.port)).reply).not.toBe(0);
    expect(up.events.every((e) => e.decision === 'deny')).toBe(true);
  });

  it('sends Proxy-Authorization: Basic from the URL; without it the upstream says 407 and the client gets 502', async () => {
    // A raw upstream that wants user "corp", password "s3cret/x", then tunnels to the target.
    const seen: string[] = [];
    const raw = net.createServer({ allowHalfOpen: true }, (c) => {
      c.on('error', () => undefined);
      let head = '';
      const onData = (d: Buffer) => {
        head += d.toString('latin1');
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        c.off('data', onData);
        const auth = /^proxy-authorization: *(.+)$/im.exec(head.slice(0, end))?.[1]?.trim() ?? '';
        seen.push(auth);
        const target = /^CONNECT ([^ ]+) /.exec(head)?.[1] ?? '';
        if (auth !== `Basic ${Buffer.from('corp:s3cret/x').toString('base64')}`) return void c.end('HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n');
        const [h, p] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
        const o = net.connect({ port: p, host: h, allowHalfOpen: true }, () => {
          c.write('HTTP/1.1 200 OK\r\n\r\n');
          c.pipe(o).pipe(c);
        });
        o.on('error', () => c.destroy());
      };
      c.on('data', onData);
    });
    await new Promise<void>((r) => raw.listen(0, '127.0.0.1', r));
    const rawPort = (raw.address() as net.AddressInfo).port;
    try {
      // This upstream cannot resolve *.test names: ask it for addresses.
      const good = await startChained(`http://corp:s3cret%2Fx@127.0.0.1:${rawPort}`, 'auto', 'address');
      const t = await connectViaProxy(good.port, `echo.test:${tcp.port}`);
      expect(t.ok).toBe(true);
      if (t.ok) expect((await exchange(t.socket, 'ECHO\nauthed', { end: true })).toString()).toBe('authed');
      const bad = await startChained(`http://127.0.0.1:${rawPort}`, 'auto', 'address');
      const r = await connectViaProxy(bad.port, `echo.test:${tcp.port}`);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.status).toBe(502);
      expect(seen).toEqual([`Basic ${Buffer.from('corp:s3cret/x').toString('base64')}`, '']);
      // An upstream that cannot reach the target hangs up before answering: 502, no hang.
      const dead = await startChained(`http://corp:s3cret%2Fx@127.0.0.1:${rawPort}`);
      const d = await connectViaProxy(dead.port, `echo.test:${tcp.port}`);
      expect(d.ok).toBe(false);
      if (!d.ok) expect(d.status).toBe(502);
    } finally {
      await new Promise((r) => raw.close(r));
    }
  });

  it('rejects a bad upstreamProxy', () => {
    for (const bad of ['socks5://127.0.0.1:1080', 'not a url', 'http://127.0.0.1:3128/path', 42]) {
      expect(() => ManagedProxy.create({ policy: { allow: [] }, upstreamProxy: bad as string })).toThrow(TypeError);
    }
  });
});
