/**
 * TLS interception (`interception` with an InterceptionCa): limited mode over HTTPS and
 * credential injection, with curl as the client against real TLS servers on loopback. The origins'
 * certificates come from a separate "public" CA that only the proxy trusts for origins
 * (`originCa`); the client trusts the interception CA's bundle. Every origin records what reached
 * it, so refusals and swapped credentials are checked from the outside.
 */
import * as crypto from 'crypto';
import { once } from 'events';
import * as fs from 'fs';
import * as http2 from 'http2';
import * as https from 'https';
import * as net from 'net';
import * as tls from 'tls';
import { WebSocket, WebSocketServer } from 'ws';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';

import { run as sandboxedRun } from '../../lib/index';
import { CUSTOM_CA_ENV_KEYS, InterceptionCa, ManagedProxy, type AuditEvent, type ManagedProxyOptions } from '../../lib/network';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { runsOk } from '../helpers/host';
import { BASE_ENV, makeScene } from '../helpers/sandbox';
import { connectViaProxy, listenOnLoopback, lookupDotTest as lookup, run } from './helpers';

interface Origin {
  port: number;
  seen: Array<{ method: string; url: string; authorization: string | undefined; host: string | undefined }>;
  close(): Promise<void>;
}

let publicCa: InterceptionCa;
let ca: InterceptionCa;
let secure: Origin;
let other: Origin;
const curl = runsOk('curl');
const proxies: ManagedProxy[] = [];

async function origin(name: string): Promise<Origin> {
  const { key, cert } = publicCa.leafFor(name);
  const state: Origin = { port: 0, seen: [], close: async () => {} };
  const server = https.createServer({ key, cert }, (req, res) => {
    state.seen.push({ method: req.method ?? '', url: req.url ?? '', authorization: req.headers.authorization, host: req.headers.host });
    req.resume();
    req.on('end', () => res.end(`hello from ${name}`));
  });
  Object.assign(state, await listenOnLoopback(server));
  return state;
}

beforeAll(async () => {
  if (!curl) console.warn('curl not installed: the interception cases are skipped');
  publicCa = InterceptionCa.create();
  ca = InterceptionCa.create();
  secure = await origin('secure.test');
  other = await origin('other.test');
}, 60_000);

afterAll(async () => {
  await secure.close();
  await other.close();
  ca.dispose();
  publicCa.dispose();
});

afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

async function startProxy(opts: Partial<ManagedProxyOptions> & { policy: ManagedProxyOptions['policy'] }) {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({ lookup, onAudit: (e) => events.push(e), ...opts });
  proxies.push(proxy);
  const { port } = await proxy.attach('tls-proc');
  return { proxy, port, events };
}

/** curl through the proxy; prints "<status>\n<body>". */
async function curlVia(port: number, url: string, args: string[] = [], cacert = ca.bundlePath) {
  const r = await run('curl', ['-sS', '--max-time', '20', '--proxy', `http://127.0.0.1:${port}`, '--cacert', cacert, '-w', '\n%{http_code}', ...args, url]);
  const lines = r.stdout.split('\n');
  return { code: r.code, status: Number(lines.at(-1)), body: lines.slice(0, -1).join('\n'), stderr: r.stderr };
}

describe('TLS interception', () => {
  it('the CA keeps its private keys in memory: only the certificate and a bundle are on disk', () => {
    const files = fs.readdirSync(ca.dir).sort();
    expect(files).toEqual(['ca-bundle.pem', 'ca.pem']);
    for (const f of files) expect(fs.readFileSync(`${ca.dir}/${f}`, 'utf8')).not.toMatch(/PRIVATE KEY/);
    expect(fs.readFileSync(ca.bundlePath, 'utf8').endsWith(ca.certPem)).toBe(true);
    const env = ca.env();
    expect(Object.keys(env).sort()).toEqual([...CUSTOM_CA_ENV_KEYS].sort());
    expect(env.NODE_EXTRA_CA_CERTS).toBe(ca.certPath);
    expect(env.SSL_CERT_FILE).toBe(ca.bundlePath);
  });

  it.skipIf(!curl)('limited mode over HTTPS: GET passes, POST is refused inside the session and never reaches the origin', async () => {
    const { port, events } = await startProxy({
      policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' },
      interception: { ca, originCa: publicCa.certPem },
    });
    const before = secure.seen.length;
    const get = await curlVia(port, `https://secure.test:${secure.port}/read`);
    expect([get.code, get.status, get.body], get.stderr).toEqual([0, 200, 'hello from secure.test']);
    const post = await curlVia(port, `https://secure.test:${secure.port}/write`, ['-X', 'POST', '-d', 'x=1', '-i']);
    expect(post.status, JSON.stringify(post)).toBe(403);
    expect(post.body.toLowerCase()).toContain('x-proxy-error: blocked-by-method-policy');
    expect(secure.seen.slice(before).map((s) => [s.method, s.url])).toEqual([['GET', '/read']]);
    expect(events.map((e) => [e.protocol, e.method, e.decision, e.source])).toEqual([
      ['httpsConnect', 'CONNECT', 'allow', 'allowlist'],
      ['httpsConnect', 'GET', 'allow', 'allowlist'],
      ['httpsConnect', 'CONNECT', 'allow', 'allowlist'],
      ['httpsConnect', 'POST', 'deny', 'mode'],
    ]);
  });

  it.skipIf(!curl)('control: limited mode without interception refuses CONNECT outright', async () => {
    const { port } = await startProxy({ policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' } });
    const before = secure.seen.length;
    const r = await connectViaProxy(port, `secure.test:${secure.port}`);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.headers['x-proxy-error']).toBe('blocked-by-method-policy');
    expect(secure.seen.length).toBe(before);
  });

  it.skipIf(!curl)('credential injection: the origin of the rule gets the real value; any other host gets the placeholder, untouched and uninspected', async () => {
    const placeholder = 'PSB_PLACEHOLDER_7f3a9c';
    const { port } = await startProxy({
      policy: { allow: ['secure.test', 'other.test'], allowLocal: true },
      interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'secure.test', header: 'authorization', placeholder, value: 'real-secret-token' }] },
    });
    const a = await curlVia(port, `https://secure.test:${secure.port}/api`, ['-H', `Authorization: Bearer ${placeholder}`]);
    expect([a.status, a.body], a.stderr).toEqual([200, 'hello from secure.test']);
    expect(secure.seen.at(-1)).toMatchObject({ url: '/api', authorization: 'Bearer real-secret-token', host: `secure.test:${secure.port}` });
    // other.test has no rule: not intercepted. curl trusting only the origins' public CA (not
    // ours) still connects, so the certificate it saw is the origin's own.
    const b = await curlVia(port, `https://other.test:${other.port}/api`, ['-H', `Authorization: Bearer ${placeholder}`], publicCa.certPath);
    expect([b.status, b.body], b.stderr).toEqual([200, 'hello from other.test']);
    expect(other.seen.at(-1)).toMatchObject({ authorization: `Bearer ${placeholder}` });
    // And the intercepted host is really intercepted: trusting only the public CA fails there.
    const c = await curlVia(port, `https://secure.test:${secure.port}/api`, [], publicCa.certPath);
    expect(c.code).not.toBe(0);
  });

  it.skipIf(!curl)('a request inside an intercepted session for another host is refused (421), not forwarded', async () => {
    const { port, events } = await startProxy({
      policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' },
      interception: { ca, originCa: publicCa.certPem },
    });
    const before = secure.seen.length;
    const r = await curlVia(port, `https://secure.test:${secure.port}/`, ['-H', 'Host: evil.test']);
    expect(r.status).toBe(421);
    expect(secure.seen.length).toBe(before);
    expect(events.at(-1)).toMatchObject({ decision: 'deny', reason: 'host_mismatch' });
  });

  it('a cached leaf is made anew a day before it expires (a long-lived host process); control: cached before that', () => {
    const c = InterceptionCa.create();
    try {
      const first = c.leafFor('renew.test').cert;
      expect(c.leafFor('renew.test').cert).toBe(first);
      const expiry = Date.parse(new crypto.X509Certificate(first).validTo);
      vi.useFakeTimers({ now: expiry - 2 * 86_400_000, toFake: ['Date'] });
      expect(c.leafFor('renew.test').cert).toBe(first);
      vi.setSystemTime(expiry - 12 * 3_600_000);
      const later = c.leafFor('renew.test').cert;
      expect(later).not.toBe(first);
      expect(Date.parse(new crypto.X509Certificate(later).validTo)).toBeGreaterThan(expiry);
    } finally {
      vi.useRealTimers();
      c.dispose();
    }
  });

  it('rejects bad interception options', () => {
    const base = { policy: { allow: [] } };
    expect(() => ManagedProxy.create({ ...base, interception: {} as never })).toThrow(/InterceptionCa/);
    // Interception and an upstream proxy combine (see 'interception through an upstream proxy').
    expect(() => ManagedProxy.create({ ...base, interception: { ca }, upstreamProxy: 'http://127.0.0.1:3128' })).not.toThrow();
    expect(() => ManagedProxy.create({ ...base, interception: { ca, credentials: [{ host: 'x.test', header: 'authorization', placeholder: 'short', value: 'v' }] } })).toThrow(/too short/);
    expect(() => ManagedProxy.create({ ...base, interception: { ca, credentials: [{ host: 'X.test', header: 'authorization', placeholder: 'PLACEHOLDER1', value: 'v' }] } })).toThrow(/normalised/);
    expect(() => ManagedProxy.create({ ...base, interception: { ca, credentials: [{ host: 'x.test', header: 'authorization', placeholder: 'PLACEHOLDER1', value: 'a\r\nb' }] } })).toThrow(/bad header/);
  });
});

describe.runIf(caps.linux && curl)('TLS interception for a sandboxed curl', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    it.skipIf(skip)('limited mode over HTTPS from inside the sandbox: GET passes, POST gets 403 and reaches nothing', async () => {
      // The CA's files live where the sandbox can read them but not write them (not /tmp, which
      // is private inside isolated mode).
      const scene = makeScene('mitm');
      const sandboxCa = InterceptionCa.create({ dir: scene.out });
      const events: AuditEvent[] = [];
      const policy = { allow: ['secure.test'], allowLocal: true, mode: 'limited' as const };
      const proxy = ManagedProxy.create({ policy, lookup, onAudit: (e) => events.push(e), interception: { ca: sandboxCa, originCa: publicCa.certPem } });
      try {
        const before = secure.seen.length;
        const sh =
          `curl -sS --max-time 20 -w ' %{http_code}' "https://secure.test:${secure.port}/in"; echo; ` +
          `curl -sS --max-time 20 -o /dev/null -w '%{http_code}' -X POST -d x=1 "https://secure.test:${secure.port}/out"; echo`;
        const r = await sandboxedRun('/bin/sh', ['-c', sh], {
          cwd: '/',
          env: { ...BASE_ENV, ...sandboxCa.env() },
          timeout: 60_000,
          policy: modePolicy(mode, { network: { proxy: policy } }),
          proxy: { instance: proxy, processId: `${mode}-mitm` },
        });
        expect(r.code, r.stderr).toBe(0);
        expect(r.stdout.trim().split('\n')).toEqual(['hello from secure.test 200', '403']);
        expect(secure.seen.slice(before).map((x) => [x.method, x.url])).toEqual([['GET', '/in']]);
        expect(events.filter((e) => e.method !== 'CONNECT').map((e) => [e.processId, e.method, e.decision])).toEqual([
          [`${mode}-mitm`, 'GET', 'allow'],
          [`${mode}-mitm`, 'POST', 'deny'],
        ]);
      } finally {
        await proxy.close();
        sandboxCa.dispose();
        scene.cleanup();
      }
    }, 90_000);
  });
});

// ---- HTTP/2, WebSocket and upstream chaining inside intercepted sessions ----------------------

/** A TLS session through the proxy (CONNECT), trusting `trust` (our CA by default), with `alpn`. */
async function tlsVia(port: number, authority: string, alpn?: string[], trust = ca.certPem): Promise<tls.TLSSocket> {
  const t = await connectViaProxy(port, authority);
  if (!t.ok) throw new Error(`CONNECT refused: ${t.status} ${t.body}`);
  return tls.connect({ socket: t.socket, servername: authority.split(':')[0], ca: trust, ...(alpn ? { ALPNProtocols: alpn } : {}) });
}

interface WsOrigin {
  port: number;
  upgrades: Array<{ url: string; authorization: string | undefined; host: string | undefined }>;
  close(): Promise<void>;
}

/** A wss:// echo origin for `name` (certificate from the public CA); records every upgrade request. */
async function wsOrigin(name: string): Promise<WsOrigin> {
  const { key, cert } = publicCa.leafFor(name);
  const server = https.createServer({ key, cert }, (_req, res) => res.end('not a websocket request'));
  const wss = new WebSocketServer({ server });
  const state: WsOrigin = { port: 0, upgrades: [], close: async () => {} };
  wss.on('connection', (sock, req) => {
    state.upgrades.push({ url: req.url ?? '', authorization: req.headers.authorization, host: req.headers.host });
    sock.on('message', (data) => sock.send(`echo:${data.toString()}`));
  });
  const l = await listenOnLoopback(server);
  state.port = l.port;
  state.close = async () => {
    for (const c of wss.clients) c.terminate();
    wss.close();
    await l.close();
  };
  return state;
}

/** A WebSocket client through the proxy: one message out, the first answer (or the refusal). */
async function wsVia(port: number, url: string, headers: Record<string, string> = {}): Promise<{ ok: true; answer: string } | { ok: false; status: number; header: string | undefined }> {
  const u = new URL(url);
  const t = await connectViaProxy(port, u.host);
  if (!t.ok) return { ok: false, status: t.status, header: t.headers['x-proxy-error'] };
  return new Promise((resolve, reject) => {
    const client = new WebSocket(url, {
      headers,
      createConnection: () => tls.connect({ socket: t.socket, servername: u.hostname, ca: ca.certPem }),
    });
    client.on('open', () => client.send('ping'));
    client.on('message', (data) => {
      resolve({ ok: true, answer: data.toString() });
      client.close();
    });
    client.on('unexpected-response', (_req, res) => {
      resolve({ ok: false, status: res.statusCode ?? 0, header: res.headers['x-proxy-error'] as string | undefined });
      res.resume();
      t.socket.destroy();
    });
    client.on('error', reject);
  });
}

describe('inside intercepted sessions', () => {
  it.skipIf(!curl)('HTTP/2: curl --http2 falls back to HTTP/1.1 (ALPN offers http/1.1 only) and still gets the checked, audited request', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' }, interception: { ca, originCa: publicCa.certPem } });
    const before = secure.seen.length;
    const r = await run('curl', ['-sS', '--max-time', '20', '--http2', '--proxy', `http://127.0.0.1:${port}`, '--cacert', ca.bundlePath, '-w', '\n%{http_version}', `https://secure.test:${secure.port}/h2`]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split('\n')).toEqual(['hello from secure.test', '1.1']);
    expect(secure.seen.slice(before).map((x) => [x.method, x.url])).toEqual([['GET', '/h2']]);
    expect(events.at(-1)).toMatchObject({ method: 'GET', decision: 'allow' });
  });

  it('HTTP/2: a client that offers h2 only fails the handshake clearly; a client offering both negotiates http/1.1', async () => {
    const { port } = await startProxy({ policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' }, interception: { ca, originCa: publicCa.certPem } });
    const before = secure.seen.length;
    const both = await tlsVia(port, `secure.test:${secure.port}`, ['h2', 'http/1.1']);
    await once(both, 'secureConnect');
    expect(both.alpnProtocol).toBe('http/1.1');
    both.destroy();
    // Node's http2 client offers only h2.
    const t = await connectViaProxy(port, `secure.test:${secure.port}`);
    expect(t.ok).toBe(true);
    if (!t.ok) return;
    const session = http2.connect(`https://secure.test:${secure.port}`, {
      createConnection: () => tls.connect({ socket: t.socket, servername: 'secure.test', ca: ca.certPem, ALPNProtocols: ['h2'] }),
    });
    const err = await new Promise<NodeJS.ErrnoException>((resolve) => {
      session.on('error', resolve);
      session.request({ ':path': '/h2-only' }).on('error', () => undefined);
    });
    session.destroy();
    expect(`${err.code} ${err.message}`).toMatch(/NO_APPLICATION_PROTOCOL|no application protocol/i);
    expect(secure.seen.length).toBe(before);
  });

  it('Expect: 100-continue: a refused request gets its 403 and never a 100; an allowed one gets the 100, then the answer', async () => {
    const { port } = await startProxy({ policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' }, interception: { ca, originCa: publicCa.certPem } });
    const before = secure.seen.length;
    const ask = async (method: string) => {
      const s = await tlsVia(port, `secure.test:${secure.port}`);
      await once(s, 'secureConnect');
      s.write(`${method} /expect HTTP/1.1\r\nHost: secure.test:${secure.port}\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n`);
      const first = ((await once(s, 'data')) as [Buffer])[0].toString('latin1');
      let all = first;
      if (first.startsWith('HTTP/1.1 100')) {
        s.write('hello');
        s.on('data', (d: Buffer) => (all += d.toString('latin1')));
        await new Promise((r) => setTimeout(r, 300));
      }
      s.destroy();
      return { first: first.split('\r\n')[0], all };
    };
    const post = await ask('POST');
    expect(post.first).toBe('HTTP/1.1 403 Forbidden');
    const options = await ask('OPTIONS');
    expect(options.first).toBe('HTTP/1.1 100 Continue');
    expect(options.all).toContain('hello from secure.test');
    expect(secure.seen.slice(before).map((x) => x.method)).toEqual(['OPTIONS']);
  });

  describe('WebSocket upgrades', () => {
    let echo: WsOrigin;
    beforeAll(async () => {
      echo = await wsOrigin('ws.test');
    });
    afterAll(async () => {
      await echo.close();
    });

    it('full mode: the upgrade is checked, gets the credential swapped in, and the frames are relayed both ways', async () => {
      const placeholder = 'PSB_WS_PLACEHOLDER_1234';
      const { port, events } = await startProxy({
        policy: { allow: ['ws.test'], allowLocal: true },
        interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'ws.test', header: 'authorization', placeholder, value: 'ws-real-secret' }] },
      });
      const r = await wsVia(port, `wss://ws.test:${echo.port}/socket?x=1`, { Authorization: `Bearer ${placeholder}` });
      expect(r).toEqual({ ok: true, answer: 'echo:ping' });
      expect(echo.upgrades.at(-1)).toEqual({ url: '/socket?x=1', authorization: 'Bearer ws-real-secret', host: `ws.test:${echo.port}` });
      expect(events.map((e) => [e.protocol, e.method, e.decision])).toEqual([
        ['httpsConnect', 'CONNECT', 'allow'],
        ['httpsConnect', 'GET', 'allow'],
      ]);
    });

    it('limited mode: the upgrade is refused inside the session (403, audited as UPGRADE) and never reaches the origin', async () => {
      const { port, events } = await startProxy({ policy: { allow: ['ws.test'], allowLocal: true, mode: 'limited' }, interception: { ca, originCa: publicCa.certPem } });
      const before = echo.upgrades.length;
      const r = await wsVia(port, `wss://ws.test:${echo.port}/socket`);
      expect(r).toEqual({ ok: false, status: 403, header: 'blocked-by-method-policy' });
      expect(echo.upgrades.length).toBe(before);
      expect(events.at(-1)).toMatchObject({ method: 'UPGRADE', decision: 'deny', source: 'mode', reason: 'method_not_allowed' });
    });

    it('an upgrade for another Host than the CONNECT target is refused (421)', async () => {
      const { port } = await startProxy({ policy: { allow: ['ws.test'], allowLocal: true }, interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'ws.test', header: 'authorization', placeholder: 'PSB_WS_PLACEHOLDER_1234', value: 'v' }] } });
      const before = echo.upgrades.length;
      const r = await wsVia(port, `wss://ws.test:${echo.port}/socket`, { Host: 'evil.test' });
      expect(r).toMatchObject({ ok: false, status: 421 });
      expect(echo.upgrades.length).toBe(before);
    });
  });

  describe('through an upstream proxy', () => {
    /** A raw CONNECT proxy that wants Basic corp:pw, resolves *.test to loopback, and records what it was asked. */
    async function corporate() {
      const seen: Array<{ target: string; auth: string }> = [];
      const open = new Set<net.Socket>();
      const server = net.createServer({ allowHalfOpen: true }, (c) => {
        open.add(c);
        c.once('close', () => open.delete(c));
        c.on('error', () => undefined);
        let head = '';
        const onData = (d: Buffer) => {
          head += d.toString('latin1');
          const end = head.indexOf('\r\n\r\n');
          if (end < 0) return;
          c.off('data', onData);
          const auth = /^proxy-authorization: *(.+)$/im.exec(head.slice(0, end))?.[1]?.trim() ?? '';
          const target = /^CONNECT ([^ ]+) /.exec(head)?.[1] ?? '';
          seen.push({ target, auth });
          if (auth !== `Basic ${Buffer.from('corp:pw').toString('base64')}`) return void c.end('HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n');
          const port = Number(target.slice(target.lastIndexOf(':') + 1));
          const o = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => {
            c.write('HTTP/1.1 200 Connection Established\r\n\r\n');
            const rest = Buffer.from(head.slice(end + 4), 'latin1');
            if (rest.length > 0) o.write(rest);
            c.pipe(o).pipe(c);
          });
          o.on('error', () => c.destroy());
        };
        c.on('data', onData);
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      return { seen, port: (server.address() as net.AddressInfo).port, close: () => new Promise<void>((r) => {
          server.close(() => r());
          for (const c of open) c.destroy();
        }) };
    }

    it.skipIf(!curl)('intercepted requests reach the origin through CONNECT <host>:<port> with Basic credentials, TLS verified on top', async () => {
      const up = await corporate();
      try {
        const placeholder = 'PSB_CHAIN_PLACEHOLDER_99';
        const { port, events } = await startProxy({
          policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' },
          upstreamProxy: `http://corp:pw@127.0.0.1:${up.port}`,
          interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'secure.test', header: 'authorization', placeholder, value: 'chained-secret' }] },
        });
        const before = secure.seen.length;
        const get = await curlVia(port, `https://secure.test:${secure.port}/via-corp`, ['-H', `Authorization: Bearer ${placeholder}`]);
        expect([get.code, get.status, get.body], get.stderr).toEqual([0, 200, 'hello from secure.test']);
        const post = await curlVia(port, `https://secure.test:${secure.port}/nope`, ['-X', 'POST', '-d', 'x']);
        expect(post.status).toBe(403);
        expect(secure.seen.slice(before).map((x) => [x.method, x.url, x.authorization])).toEqual([['GET', '/via-corp', 'Bearer chained-secret']]);
        // The corporate proxy saw one tunnel, for the checked name, with our credentials; the refused POST never left.
        expect(up.seen).toEqual([{ target: `secure.test:${secure.port}`, auth: `Basic ${Buffer.from('corp:pw').toString('base64')}` }]);
        expect(events.filter((e) => e.method !== 'CONNECT').map((e) => [e.method, e.decision])).toEqual([
          ['GET', 'allow'],
          ['POST', 'deny'],
        ]);
      } finally {
        await up.close();
      }
    });

    it.skipIf(!curl)("the origin's certificate is still verified through the tunnel (no originCa: 502), and a 407 from the upstream is a 502", async () => {
      const up = await corporate();
      try {
        const unverified = await startProxy({ policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' }, upstreamProxy: `http://corp:pw@127.0.0.1:${up.port}`, interception: { ca } });
        const before = secure.seen.length;
        const a = await curlVia(unverified.port, `https://secure.test:${secure.port}/x`);
        expect(a.status).toBe(502);
        expect(a.body).toMatch(/upstream request failed/);
        expect(secure.seen.length).toBe(before);
        const noAuth = await startProxy({ policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' }, upstreamProxy: `http://127.0.0.1:${up.port}`, interception: { ca, originCa: publicCa.certPem } });
        const b = await curlVia(noAuth.port, `https://secure.test:${secure.port}/y`);
        expect(b.status).toBe(502);
        expect(up.seen.map((x) => x.auth)).toEqual([`Basic ${Buffer.from('corp:pw').toString('base64')}`, '']);
      } finally {
        await up.close();
      }
    });

    it("upstreamTarget 'address' asks the upstream for the checked address; SNI and verification stay the host's; WebSocket works through it", async () => {
      const up = await corporate();
      const echo = await wsOrigin('ws.test');
      try {
        const { port } = await startProxy({
          policy: { allow: ['ws.test'], allowLocal: true },
          upstreamProxy: `http://corp:pw@127.0.0.1:${up.port}`,
          upstreamTarget: 'address',
          interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'ws.test', header: 'authorization', placeholder: 'PSB_WS_PLACEHOLDER_1234', value: 'chained-ws' }] },
        });
        const r = await wsVia(port, `wss://ws.test:${echo.port}/c`, { Authorization: 'PSB_WS_PLACEHOLDER_1234' });
        expect(r).toEqual({ ok: true, answer: 'echo:ping' });
        expect(echo.upgrades.at(-1)).toMatchObject({ url: '/c', authorization: 'chained-ws' });
        expect(up.seen.map((x) => x.target)).toEqual([`127.0.0.1:${echo.port}`]);
      } finally {
        await echo.close();
        await up.close();
      }
    });
  });
});

// ---- hostile clients inside intercepted sessions ------------------------------------------------

/** Raw bytes into a fresh intercepted session; everything the proxy answers until it closes. */
async function rawSession(port: number, authority: string, bytes: string): Promise<string> {
  const s = await tlsVia(port, authority);
  await once(s, 'secureConnect');
  let out = '';
  s.on('data', (d: Buffer) => (out += d.toString('latin1')));
  s.on('error', () => undefined);
  s.write(bytes);
  await Promise.race([once(s, 'close'), new Promise((r) => setTimeout(r, 10_000))]);
  s.destroy();
  return out;
}

/** The status lines of every answer in `raw` (a body without a line end may run into the next one). */
const statusLines = (raw: string) => raw.match(/HTTP\/1\.1 \d{3} [^\r\n]*/g) ?? [];

describe('hostile requests inside intercepted sessions', () => {
  it('a second Host line (any case: 400), an absolute-form target for another host or a pipelined request for another host (421) is refused and never reaches the origin; control: one Host, origin-form passes', async () => {
    const placeholder = 'PSB_FRONT_PLACEHOLDER_99';
    const { port, events } = await startProxy({
      policy: { allow: ['secure.test'], allowLocal: true },
      interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'secure.test', header: 'authorization', placeholder, value: 'front-secret' }] },
    });
    const authority = `secure.test:${secure.port}`;
    const before = secure.seen.length;
    const ask = (head: string) => rawSession(port, authority, `${head}Authorization: ${placeholder}\r\nConnection: close\r\n\r\n`);
    // Node's parser keeps the first Host in req.headers, but a forwarded header object keyed by
    // the raw name would let `host:` (another case) replace it on the way out.
    const caseDup = await ask(`GET /case HTTP/1.1\r\nHost: ${authority}\r\nhost: evil.test\r\n`);
    const sameCaseDup = await ask(`GET /dup HTTP/1.1\r\nHost: ${authority}\r\nHost: evil.test\r\n`);
    // RFC 9112: an origin given an absolute-form target uses its authority, not Host.
    const absolute = await ask(`GET https://evil.test/abs HTTP/1.1\r\nHost: ${authority}\r\n`);
    const authorityForm = await ask(`GET evil.test:443 HTTP/1.1\r\nHost: ${authority}\r\n`);
    for (const r of [caseDup, sameCaseDup]) expect(statusLines(r), r).toEqual(['HTTP/1.1 400 Bad Request']);
    expect(statusLines(absolute), absolute).toEqual(['HTTP/1.1 421 Misdirected Request']);
    expect(statusLines(authorityForm).every((l) => !l.startsWith('HTTP/1.1 2')), authorityForm).toBe(true);
    expect(secure.seen.slice(before)).toEqual([]);
    expect(events.filter((e) => e.method !== 'CONNECT').map((e) => e.reason)).toEqual(['host_mismatch', 'host_mismatch', 'host_mismatch']);
    // Control: the same request with one Host and an origin-form target gets through, credential swapped in.
    const ok = await ask(`GET /one HTTP/1.1\r\nHost: ${authority}\r\n`);
    expect(statusLines(ok)).toEqual(['HTTP/1.1 200 OK']);
    // Absolute form naming the CONNECT target itself is fine, and reaches the origin in origin-form.
    const selfAbs = await ask(`GET https://${authority}/self HTTP/1.1\r\nHost: ${authority}\r\n`);
    expect(statusLines(selfAbs)).toEqual(['HTTP/1.1 200 OK']);
    // Pipelined on one connection: the first request (the target) gets the credential, the second
    // (another host) is refused and nothing reaches that host.
    const otherBefore = other.seen.length;
    const pipelined = await rawSession(
      port,
      authority,
      `GET /first HTTP/1.1\r\nHost: ${authority}\r\nAuthorization: ${placeholder}\r\n\r\n` +
        `GET /second HTTP/1.1\r\nHost: other.test:${other.port}\r\nAuthorization: ${placeholder}\r\nConnection: close\r\n\r\n`,
    );
    expect(statusLines(pipelined), pipelined).toEqual(['HTTP/1.1 200 OK', 'HTTP/1.1 421 Misdirected Request']);
    expect(other.seen.length).toBe(otherBefore);
    expect(secure.seen.slice(before)).toEqual([
      { method: 'GET', url: '/one', authorization: 'front-secret', host: authority },
      { method: 'GET', url: '/self', authorization: 'front-secret', host: authority },
      { method: 'GET', url: '/first', authorization: 'front-secret', host: authority },
    ]);
  });
});

describe('a hostile upstream proxy', () => {
  it('answers CONNECT with 200 and then garbage: the intercepted request fails with 502; the upstream saw the configured credentials only, never the sandbox\'s Proxy-Authorization or the credential', async () => {
    const received: Buffer[] = [];
    const sockets = new Set<net.Socket>();
    const up = net.createServer((sock) => {
      sockets.add(sock);
      sock.on('error', () => undefined);
      sock.on('data', (d: Buffer) => {
        received.push(d);
        if (d.includes('\r\n\r\n')) sock.write('HTTP/1.1 200 Connection Established\r\n\r\nGARBAGE\r\n\r\nMORE GARBAGE');
      });
    });
    await new Promise<void>((r) => up.listen(0, '127.0.0.1', r));
    try {
      const placeholder = 'PSB_UP_PLACEHOLDER_77';
      const { port } = await startProxy({
        policy: { allow: ['secure.test'], allowLocal: true },
        upstreamProxy: `http://corp:pw@127.0.0.1:${(up.address() as net.AddressInfo).port}`,
        interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'secure.test', header: 'authorization', placeholder, value: 'upstream-real-secret' }] },
      });
      const before = secure.seen.length;
      const r = await rawSession(port, `secure.test:${secure.port}`, `GET / HTTP/1.1\r\nHost: secure.test:${secure.port}\r\nAuthorization: ${placeholder}\r\nProxy-Authorization: Basic c2FuZGJveA==\r\nConnection: close\r\n\r\n`);
      expect(statusLines(r)).toEqual(['HTTP/1.1 502 Bad Gateway']);
      const all = Buffer.concat(received).toString('latin1');
      expect(all.startsWith(`CONNECT secure.test:${secure.port} HTTP/1.1\r\n`)).toBe(true);
      expect(all).toContain(`Basic ${Buffer.from('corp:pw').toString('base64')}`);
      for (const leak of ['c2FuZGJveA==', placeholder, 'upstream-real-secret']) expect(all).not.toContain(leak);
      expect(secure.seen.length).toBe(before);
    } finally {
      for (const x of sockets) x.destroy();
      await new Promise((r) => up.close(r));
    }
  });
});

describe('the real credential value in answers', () => {
  it("an origin reflecting the swapped-in credential in its response headers: the sandbox gets the placeholder back, never the real value; control: the origin did get the real value", async () => {
    const { key, cert } = publicCa.leafFor('echo.test');
    const got: Array<string | undefined> = [];
    const server = https.createServer({ key, cert }, (req, res) => {
      got.push(req.headers.authorization);
      res.setHeader('x-seen-authorization', String(req.headers.authorization));
      res.setHeader('www-authenticate', `Bearer error="invalid_token", token="${String(req.headers.authorization)}"`);
      res.end('ok');
    });
    const l = await listenOnLoopback(server);
    try {
      const placeholder = 'PSB_ECHO_PLACEHOLDER_5';
      const { port } = await startProxy({
        policy: { allow: ['echo.test'], allowLocal: true },
        interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'echo.test', header: 'authorization', placeholder, value: 'echo-real-secret' }] },
      });
      const r = await rawSession(port, `echo.test:${l.port}`, `GET / HTTP/1.1\r\nHost: echo.test:${l.port}\r\nAuthorization: ${placeholder}\r\nConnection: close\r\n\r\n`);
      expect(got).toEqual(['echo-real-secret']);
      expect(statusLines(r)).toEqual(['HTTP/1.1 200 OK']);
      expect(r).not.toContain('echo-real-secret');
      expect(r.toLowerCase()).toContain(`x-seen-authorization: ${placeholder.toLowerCase()}`);
    } finally {
      await l.close();
    }
  });
});

describe('upgrades other than WebSocket inside intercepted sessions', () => {
  it('full mode: `Upgrade: h2c` (HTTP/2 requests the proxy could not check after a 101) is refused (403) and never reaches the origin; control: the same request without the upgrade passes', async () => {
    const { port, events } = await startProxy({
      policy: { allow: ['secure.test'], allowLocal: true },
      interception: { ca, originCa: publicCa.certPem, credentials: [{ host: 'secure.test', header: 'authorization', placeholder: 'PSB_H2C_PLACEHOLDER_1', value: 'v' }] },
    });
    const authority = `secure.test:${secure.port}`;
    const before = secure.seen.length;
    const h2c = await rawSession(port, authority, `GET /h2c HTTP/1.1\r\nHost: ${authority}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n`);
    expect(statusLines(h2c), h2c).toEqual(['HTTP/1.1 403 Forbidden']);
    expect(h2c.toLowerCase()).toContain('x-proxy-error: blocked-by-policy');
    expect(events.at(-1)).toMatchObject({ method: 'UPGRADE', decision: 'deny', reason: 'upgrade_not_allowed' });
    const plain = await rawSession(port, authority, `GET /no-upgrade HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`);
    expect(statusLines(plain)).toEqual(['HTTP/1.1 200 OK']);
    expect(secure.seen.slice(before).map((x) => x.url)).toEqual(['/no-upgrade']);
  });
});

describe('slow or silent clients inside intercepted sessions', () => {
  it('a session that stalls in the TLS handshake, never sends a request, or trickles a head is closed after handshakeTimeoutMs; control: a prompt request is answered', async () => {
    const { port } = await startProxy({ policy: { allow: ['secure.test'], allowLocal: true, mode: 'limited' }, interception: { ca, originCa: publicCa.certPem }, handshakeTimeoutMs: 400 });
    const authority = `secure.test:${secure.port}`;
    const closedWithin = (s: net.Socket, ms: number) => Promise.race([once(s, 'close').then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
    // 1. CONNECT accepted, then no ClientHello.
    const silent = await connectViaProxy(port, authority);
    expect(silent.ok).toBe(true);
    if (!silent.ok) return;
    silent.socket.on('error', () => undefined);
    // 2. Handshake done, no request.
    const idle = await tlsVia(port, authority);
    await once(idle, 'secureConnect');
    idle.on('error', () => undefined);
    // 3. Handshake done, a head trickled one byte at a time.
    const trickle = await tlsVia(port, authority);
    await once(trickle, 'secureConnect');
    trickle.on('error', () => undefined);
    const head = `GET /trickle HTTP/1.1\r\nHost: ${authority}\r\n\r\n`;
    let i = 0;
    const drip = setInterval(() => (i < head.length && !trickle.destroyed ? trickle.write(head[i++]!) : clearInterval(drip)), 150);
    // Control: a prompt request in a fresh session is answered.
    const ok = await rawSession(port, authority, `GET /prompt HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`);
    expect(statusLines(ok)).toEqual(['HTTP/1.1 200 OK']);
    // Generous bounds (the timeout is 400 ms): a loaded shared host once took more than 10 s.
    const closed = await Promise.all([closedWithin(silent.socket, 30_000), closedWithin(idle, 30_000), closedWithin(trickle, 30_000)]);
    clearInterval(drip);
    expect(closed).toEqual([true, true, true]);
    expect(secure.seen.map((x) => x.url)).not.toContain('/trickle');
  }, 90_000);
});
