/**
 * The managed proxy against real loopback servers, with curl, node and python3 as clients.
 * The proxy runs unsandboxed here; enforcement (the proxy being the only way out) is tested with
 * the Linux backend. Names resolve through an injected lookup; /etc/hosts is never touched.
 */
import { spawn } from 'child_process';
import { createHash } from 'crypto';
import * as fs from 'fs';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { ManagedProxy, type AuditEvent, type Decider, type LookupFn, type ManagedProxyOptions } from '../../lib/network';
import {
  closedPort,
  connectViaProxy,
  exchange,
  hasTool,
  httpViaProxy,
  resourceCounts,
  run,
  socks5,
  startHttpServer,
  startTcpServer,
  waitFor,
  type CountingHttpServer,
  type CountingTcpServer,
} from './helpers';

const ROOT = path.resolve(__dirname, '..', '..');

// Every *.test name resolves to loopback, except the few with special answers below.
const lookupCalls: string[] = [];
const lookup: LookupFn = async (host) => {
  lookupCalls.push(host);
  if (host === 'nxdomain.test') throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
  if (host === 'metadata.test') return [{ address: '169.254.169.254', family: 4 }];
  if (host === 'mixed.test') return [{ address: '8.8.8.8', family: 4 }, { address: '127.0.0.1', family: 4 }];
  if (host.endsWith('.test')) return [{ address: '127.0.0.1', family: 4 }];
  throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
};

let web: CountingHttpServer;
let tcp: CountingTcpServer;
let curl = false;
let python = false;
const proxies: ManagedProxy[] = [];

beforeAll(async () => {
  web = await startHttpServer();
  tcp = await startTcpServer();
  curl = await hasTool('curl');
  python = await hasTool('python3');
  if (!curl) console.warn('curl not found: curl cases are skipped');
  if (!python) console.warn('python3 not found: python cases are skipped');
});

afterAll(async () => {
  await web.close();
  await tcp.close();
});

afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

async function startProxy(
  opts: Partial<ManagedProxyOptions> & { policy: ManagedProxyOptions['policy'] },
  processId = 'proc-1',
): Promise<{ proxy: ManagedProxy; port: number; events: AuditEvent[]; detach: () => Promise<void> }> {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({ lookup, onAudit: (e) => events.push(e), ...opts });
  proxies.push(proxy);
  const { port, detach } = await proxy.attach(processId);
  return { proxy, port, events, detach };
}

const webUrl = (host: string, p = '/') => `http://${host}:${web.port}${p}`;

describe('allowed domains', () => {
  it('node http (absolute-form) reaches an allowed name and is audited', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const before = web.connections;
    const res = await httpViaProxy(port, webUrl('allowed.test', '/hello?x=1'), {
      method: 'POST',
      body: 'payload',
      headers: { 'proxy-authorization': 'Basic c2VjcmV0', 'proxy-connection': 'keep-alive', 'x-tag': 't1', connection: 'x-hop', 'x-hop': 'drop-me' },
    });
    expect(res.status).toBe(200);
    expect(res.headers['x-upstream']).toBe('yes');
    const body = JSON.parse(res.body);
    expect(body).toMatchObject({ method: 'POST', url: '/hello?x=1', host: `allowed.test:${web.port}`, body: 'payload', tag: 't1' });
    expect(web.connections).toBe(before + 1);
    const seen = web.requests.at(-1)!.headers;
    expect(seen['proxy-authorization']).toBeUndefined();
    expect(seen['proxy-connection']).toBeUndefined();
    expect(seen['x-hop']).toBeUndefined();
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      processId: 'proc-1',
      scope: 'domain',
      decision: 'allow',
      source: 'allowlist',
      protocol: 'http',
      host: 'allowed.test',
      port: web.port,
      method: 'POST',
    });
    expect(events[0].client).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(new Date(events[0].timestamp).toISOString()).toBe(events[0].timestamp);
  });

  it('CONNECT tunnels raw bytes to an allowed name', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['**.allowed.test'], allowLocal: true } });
    const before = tcp.connections;
    const r = await connectViaProxy(port, `api.allowed.test:${tcp.port}`);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const echoed = await exchange(r.socket, 'ECHO\nping through the tunnel', { end: true });
    expect(echoed.toString()).toBe('ping through the tunnel');
    expect(tcp.connections).toBe(before + 1);
    expect(events.map((e) => [e.protocol, e.decision, e.host, e.method])).toEqual([['httpsConnect', 'allow', 'api.allowed.test', 'CONNECT']]);
  });

  it('curl works through HTTP absolute-form, CONNECT (-p) and SOCKS5 (--socks5-hostname)', async (ctx) => {
    if (!curl) ctx.skip('curl not installed');
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const before = web.requests.length;
    const plain = await run('curl', ['-sS', '--proxy', `http://127.0.0.1:${port}`, webUrl('allowed.test', '/curl-plain')]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(JSON.parse(plain.stdout).url).toBe('/curl-plain');
    const tunnel = await run('curl', ['-sS', '-p', '--proxy', `http://127.0.0.1:${port}`, webUrl('allowed.test', '/curl-tunnel')]);
    expect(tunnel.code, tunnel.stderr).toBe(0);
    expect(JSON.parse(tunnel.stdout).url).toBe('/curl-tunnel');
    const socks = await run('curl', ['-sS', '--socks5-hostname', `127.0.0.1:${port}`, webUrl('allowed.test', '/curl-socks')]);
    expect(socks.code, socks.stderr).toBe(0);
    expect(JSON.parse(socks.stdout).url).toBe('/curl-socks');
    // The env a sandboxed child gets makes plain `curl URL` use the proxy too.
    const viaEnv = await run('curl', ['-sS', webUrl('allowed.test', '/curl-env')], ManagedProxy.proxyEnv({}, port));
    expect(viaEnv.code, viaEnv.stderr).toBe(0);
    expect(JSON.parse(viaEnv.stdout).url).toBe('/curl-env');
    expect(web.requests.length).toBe(before + 4);
    expect(events.map((e) => e.protocol)).toEqual(['http', 'httpsConnect', 'socks5Tcp', 'http']);
    expect(events.every((e) => e.decision === 'allow' && e.host === 'allowed.test')).toBe(true);
  });

  // Node honours NODE_USE_ENV_PROXY for fetch from 24 (backported to 22.21).
  const [major, minor] = process.versions.node.split('.').map(Number);
  const nodeEnvProxy = major >= 24 || (major === 22 && minor >= 21);
  it.skipIf(!nodeEnvProxy)(`node fetch follows NODE_USE_ENV_PROXY from the env (needs Node 22.21+ or 24+, this is ${process.versions.node})`, async () => {
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const before = web.connections;
    const script = 'fetch(process.argv[1]).then(async (r) => console.log(r.status, await r.text()))';
    const res = await run(process.execPath, ['-e', script, webUrl('allowed.test', '/fetch')], ManagedProxy.proxyEnv({}, port));
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/^200 /);
    expect(web.connections).toBe(before + 1);
    expect(events[0]).toMatchObject({ decision: 'allow', host: 'allowed.test' });
  });

  it('python3 urllib works through the proxy from its env', async (ctx) => {
    if (!python) ctx.skip('python3 not installed');
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const script = 'import sys, urllib.request\nr = urllib.request.urlopen(sys.argv[1], timeout=20)\nprint(r.status)\nprint(r.read().decode())';
    const res = await run('python3', ['-c', script, webUrl('allowed.test', '/py')], ManagedProxy.proxyEnv({}, port));
    expect(res.code, res.stderr).toBe(0);
    const [status, body] = res.stdout.split('\n');
    expect(status).toBe('200');
    expect(JSON.parse(body).url).toBe('/py');
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ decision: 'allow', protocol: 'http', host: 'allowed.test' });
  });
});

describe('refusals', () => {
  it('a denied name gets 403 blocked-by-denylist (deny wins) and never reaches the server', async () => {
    const { port, events } = await startProxy({
      policy: { allow: ['**.example.test'], deny: ['blocked.example.test'], allowLocal: true },
    });
    const webBefore = web.connections;
    const tcpBefore = tcp.connections;
    const res = await httpViaProxy(port, webUrl('blocked.example.test'));
    expect(res.status).toBe(403);
    expect(res.headers['x-proxy-error']).toBe('blocked-by-denylist');
    expect(res.body).toMatch(/blocked/);
    const tunnel = await connectViaProxy(port, `blocked.example.test:${tcp.port}`);
    expect(tunnel.ok).toBe(false);
    if (!tunnel.ok) {
      expect(tunnel.status).toBe(403);
      expect(tunnel.headers['x-proxy-error']).toBe('blocked-by-denylist');
    }
    // Positive control on the same proxy.
    expect((await httpViaProxy(port, webUrl('ok.example.test'))).status).toBe(200);
    expect(web.connections).toBe(webBefore + 1);
    expect(tcp.connections).toBe(tcpBefore);
    expect(events.map((e) => [e.decision, e.source, e.reason])).toEqual([
      ['deny', 'denylist', 'denied'],
      ['deny', 'denylist', 'denied'],
      ['allow', 'allowlist', 'allowed'],
    ]);
  });

  it('curl and python see the 403 for a name that is not on the allow list', async (ctx) => {
    if (!curl || !python) ctx.skip('needs curl and python3');
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const before = web.connections;
    const c = await run('curl', ['-sS', '-o', '/dev/null', '-D', '-', '--proxy', `http://127.0.0.1:${port}`, webUrl('other.test')]);
    expect(c.stdout).toMatch(/^HTTP\/1\.1 403/);
    expect(c.stdout.toLowerCase()).toContain('x-proxy-error: blocked-by-allowlist');
    const tunnel = await run('curl', ['-sS', '-p', '--proxy', `http://127.0.0.1:${port}`, webUrl('other.test')]);
    expect(tunnel.code).not.toBe(0);
    expect(tunnel.stderr).toMatch(/403/);
    const script =
      'import sys, urllib.request, urllib.error\ntry:\n  urllib.request.urlopen(sys.argv[1], timeout=20)\nexcept urllib.error.HTTPError as e:\n  print(e.code, e.headers["x-proxy-error"])';
    const py = await run('python3', ['-c', script, webUrl('other.test')], ManagedProxy.proxyEnv({}, port));
    expect(py.stdout.trim()).toBe('403 blocked-by-allowlist');
    expect(web.connections).toBe(before);
    expect(events).toHaveLength(3);
    expect(events.every((e) => e.decision === 'deny' && e.source === 'allowlist' && e.reason === 'not_allowed')).toBe(true);
  });

  it('an IP literal needs its own allow entry', async () => {
    const denied = await startProxy({ policy: { allow: ['**.test', '*'], allowLocal: true } });
    const before = tcp.connections;
    const r = await connectViaProxy(denied.port, `127.0.0.1:${tcp.port}`);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.headers['x-proxy-error']).toBe('blocked-by-allowlist');
    expect((await socks5(denied.port, '127.0.0.1', tcp.port)).reply).toBe(0x02);
    expect(tcp.connections).toBe(before);
    expect(denied.events.map((e) => [e.scope, e.reason])).toEqual([
      ['non_domain', 'not_allowed'],
      ['non_domain', 'not_allowed'],
    ]);
    // Positive control: the exact literal is allowed, and an explicit literal reaches loopback
    // even without allowLocal.
    const allowed = await startProxy({ policy: { allow: ['127.0.0.1'] } });
    const ok = await connectViaProxy(allowed.port, `127.0.0.1:${tcp.port}`);
    expect(ok.ok).toBe(true);
    if (ok.ok) expect((await exchange(ok.socket, 'ECHO\nip', { end: true })).toString()).toBe('ip');
    expect(tcp.connections).toBe(before + 1);
  });

  it('a name that resolves to a local address is refused unless allowLocal', async () => {
    const strict = await startProxy({ policy: { allow: ['allowed.test', 'mixed.test'] } });
    const before = web.connections;
    lookupCalls.length = 0;
    const res = await httpViaProxy(strict.port, webUrl('allowed.test'));
    expect(res.status).toBe(403);
    expect(res.headers['x-proxy-error']).toBe('blocked-by-policy');
    // One public and one loopback answer: refused, whichever would have been dialled.
    const mixed = await httpViaProxy(strict.port, webUrl('mixed.test'));
    expect(mixed.status).toBe(403);
    expect((await socks5(strict.port, 'allowed.test', web.port)).reply).toBe(0x02);
    expect(web.connections).toBe(before);
    expect(strict.events.map((e) => [e.decision, e.source, e.reason])).toEqual([
      ['deny', 'policy', 'not_allowed_local'],
      ['deny', 'policy', 'not_allowed_local'],
      ['deny', 'policy', 'not_allowed_local'],
    ]);
    // Resolved once per request.
    expect(lookupCalls).toEqual(['allowed.test', 'mixed.test', 'allowed.test']);
    // Positive control.
    const local = await startProxy({ policy: { allow: ['allowed.test', 'metadata.test'], allowLocal: true } });
    expect((await httpViaProxy(local.port, webUrl('allowed.test'))).status).toBe(200);
    expect(web.connections).toBe(before + 1);
    // Metadata addresses stay refused even with allowLocal.
    const meta = await httpViaProxy(local.port, 'http://metadata.test/latest/meta-data/');
    expect(meta.status).toBe(403);
    expect(meta.headers['x-proxy-error']).toBe('blocked-by-policy');
  });

  it('a lookup failure is a 502 / SOCKS host unreachable, and a closed port is connection refused', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['**.test'], allowLocal: true } });
    const [webBefore, tcpBefore] = [web.connections, tcp.connections];
    expect((await httpViaProxy(port, 'http://nxdomain.test/')).status).toBe(502);
    const tunnel = await connectViaProxy(port, 'nxdomain.test:443');
    expect(tunnel.ok).toBe(false);
    if (!tunnel.ok) expect(tunnel.status).toBe(502);
    expect((await socks5(port, 'nxdomain.test', 443)).reply).toBe(0x04);
    const dead = await closedPort();
    expect((await socks5(port, 'allowed.test', dead)).reply).toBe(0x05);
    const refused = await connectViaProxy(port, `allowed.test:${dead}`);
    expect(refused.ok).toBe(false);
    if (!refused.ok) expect(refused.status).toBe(502);
    expect([web.connections, tcp.connections]).toEqual([webBefore, tcpBefore]);
    expect(events.map((e) => e.reason)).toEqual([
      'dns_resolution_failed',
      'dns_resolution_failed',
      'dns_resolution_failed',
      'allowed',
      'allowed',
    ]);
  });

  it('sends the checked name as Host, whatever Host header the client made up', async () => {
    const { port } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const res = await httpViaProxy(port, webUrl('allowed.test', '/h'), { headers: { host: 'forbidden.test' } });
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).host).toBe(`allowed.test:${web.port}`);
  });

  it('refuses to dial one of its own listeners', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const before = [web.connections, tcp.connections];
    const r = await connectViaProxy(port, `allowed.test:${port}`);
    expect(r.ok).toBe(false);
    expect([web.connections, tcp.connections]).toEqual(before);
    if (!r.ok) expect(r.headers['x-proxy-error']).toBe('blocked-by-policy');
    expect(events.map((e) => e.reason)).toEqual(['proxy_loop']);
  });

  it('rejects origin-form requests and https:// absolute-form (use CONNECT)', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const rawRequest = (head: string) =>
      new Promise<string>((resolve) => {
        const s = net.connect(port, '127.0.0.1', () => s.write(head));
        let out = '';
        s.on('data', (c) => (out += c));
        s.on('close', () => resolve(out));
      });
    expect(await rawRequest('GET /just-a-path HTTP/1.1\r\nHost: allowed.test\r\n\r\n')).toMatch(/^HTTP\/1\.1 400/);
    expect(await rawRequest('GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n')).toMatch(/^HTTP\/1\.1 400/);
    expect(events).toHaveLength(0);
    // Positive control.
    expect((await httpViaProxy(port, webUrl('allowed.test'))).status).toBe(200);
  });
});

describe('decider', () => {
  it('is consulted for allowlist misses only, and can allow or deny', async () => {
    const asked: string[] = [];
    const decider: Decider = async (req) => {
      asked.push(`${req.processId} ${req.protocol} ${req.host}:${req.port} ${req.method ?? '-'}`);
      if (req.host === 'ask-allow.test') return { decision: 'allow', reason: 'user approved' };
      return { decision: 'deny', reason: 'user declined' };
    };
    const { port, events } = await startProxy({
      policy: { allow: ['allowed.test'], deny: ['denied.test'], allowLocal: true },
      decider,
    });
    const before = web.requests.length;
    expect((await httpViaProxy(port, webUrl('allowed.test'))).status).toBe(200);
    const denied = await httpViaProxy(port, webUrl('denied.test'));
    expect(denied.headers['x-proxy-error']).toBe('blocked-by-denylist');
    expect((await httpViaProxy(port, webUrl('ask-allow.test'))).status).toBe(200);
    const declined = await httpViaProxy(port, webUrl('ask-deny.test'));
    expect(declined.status).toBe(403);
    expect(declined.headers['x-proxy-error']).toBe('blocked-by-policy');
    const tunnel = await connectViaProxy(port, `ask-allow.test:${tcp.port}`);
    expect(tunnel.ok).toBe(true);
    if (tunnel.ok) tunnel.socket.destroy();
    expect(asked).toEqual([`proc-1 http ask-allow.test:${web.port} GET`, `proc-1 http ask-deny.test:${web.port} GET`, `proc-1 httpsConnect ask-allow.test:${tcp.port} CONNECT`]);
    expect(web.requests.length).toBe(before + 2);
    expect(events.map((e) => [e.host, e.decision, e.source, e.reason, e.policyOverride])).toEqual([
      ['allowed.test', 'allow', 'allowlist', 'allowed', undefined],
      ['denied.test', 'deny', 'denylist', 'denied', undefined],
      ['ask-allow.test', 'allow', 'decider', 'user approved', true],
      ['ask-deny.test', 'deny', 'decider', 'user declined', undefined],
      ['ask-allow.test', 'allow', 'decider', 'user approved', true],
    ]);
  });

  it('denies when the decider does not answer in time, and leaves no timer behind', async () => {
    const baseline = resourceCounts().Timeout ?? 0;
    let calls = 0;
    const { proxy, port, events } = await startProxy({
      policy: { allow: [], allowLocal: true },
      decider: () => {
        calls++;
        return new Promise(() => {});
      },
      deciderTimeoutMs: 150,
    });
    const before = web.connections;
    const res = await httpViaProxy(port, webUrl('slow.test'));
    expect(res.status).toBe(403);
    expect(res.headers['x-proxy-error']).toBe('blocked-by-policy');
    expect((await socks5(port, 'slow.test', web.port)).reply).toBe(0x02);
    expect(calls).toBe(2);
    expect(web.connections).toBe(before);
    expect(events.map((e) => [e.source, e.reason])).toEqual([
      ['decider', 'decider_timeout'],
      ['decider', 'decider_timeout'],
    ]);
    await proxy.close();
    expect(await waitFor(() => (resourceCounts().Timeout ?? 0) <= baseline)).toBe(true);
  });

  it('a throwing decider denies', async () => {
    const { port, events } = await startProxy({
      policy: { allow: [], allowLocal: true },
      decider: async () => {
        throw new Error('boom');
      },
    });
    const before = web.connections;
    expect((await httpViaProxy(port, webUrl('x.test'))).status).toBe(403);
    expect(events[0]).toMatchObject({ decision: 'deny', source: 'decider', reason: 'decider_error' });
    expect(web.connections).toBe(before);
  });
});

describe('limited mode', () => {
  it('allows GET/HEAD/OPTIONS over plain HTTP and refuses other methods, CONNECT and SOCKS5', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true, mode: 'limited' } });
    const webBefore = web.requests.length;
    const tcpBefore = tcp.connections;
    expect((await httpViaProxy(port, webUrl('allowed.test'))).status).toBe(200);
    expect((await httpViaProxy(port, webUrl('allowed.test'), { method: 'HEAD' })).status).toBe(200);
    expect((await httpViaProxy(port, webUrl('allowed.test'), { method: 'OPTIONS' })).status).toBe(200);
    const post = await httpViaProxy(port, webUrl('allowed.test'), { method: 'POST', body: 'x' });
    expect(post.status).toBe(403);
    expect(post.headers['x-proxy-error']).toBe('blocked-by-method-policy');
    const tunnel = await connectViaProxy(port, `allowed.test:${tcp.port}`);
    expect(tunnel.ok).toBe(false);
    if (!tunnel.ok) expect(tunnel.headers['x-proxy-error']).toBe('blocked-by-method-policy');
    expect((await socks5(port, 'allowed.test', tcp.port)).reply).toBe(0x02);
    expect(web.requests.length).toBe(webBefore + 3);
    expect(tcp.connections).toBe(tcpBefore);
    expect(events.map((e) => [e.method, e.decision, e.source])).toEqual([
      ['GET', 'allow', 'allowlist'],
      ['HEAD', 'allow', 'allowlist'],
      ['OPTIONS', 'allow', 'allowlist'],
      ['POST', 'deny', 'mode'],
      ['CONNECT', 'deny', 'mode'],
      [null, 'deny', 'mode'],
    ]);
  });
});

describe('SOCKS5', () => {
  it('CONNECT to an allowed name works; a denied one gets 0x02; UDP ASSOCIATE and BIND get 0x07', async () => {
    const { port, events } = await startProxy({ policy: { allow: ['allowed.test'], deny: ['denied.test'], allowLocal: true } });
    const before = tcp.connections;
    const ok = await socks5(port, 'allowed.test', tcp.port);
    expect(ok.reply).toBe(0x00);
    expect((await exchange(ok.socket, 'ECHO\nover socks', { end: true })).toString()).toBe('over socks');
    expect((await socks5(port, 'denied.test', tcp.port)).reply).toBe(0x02);
    expect((await socks5(port, 'unlisted.test', tcp.port)).reply).toBe(0x02);
    expect((await socks5(port, 'allowed.test', tcp.port, 3)).reply).toBe(0x07);
    expect((await socks5(port, 'allowed.test', tcp.port, 2)).reply).toBe(0x07);
    expect(tcp.connections).toBe(before + 1);
    expect(events.map((e) => [e.protocol, e.decision, e.host, e.reason])).toEqual([
      ['socks5Tcp', 'allow', 'allowed.test', 'allowed'],
      ['socks5Tcp', 'deny', 'denied.test', 'denied'],
      ['socks5Tcp', 'deny', 'unlisted.test', 'not_allowed'],
      ['socks5Udp', 'deny', 'allowed.test', 'socks5_udp_unsupported'],
      ['socks5Tcp', 'deny', 'allowed.test', 'socks5_bind_unsupported'],
    ]);
  });

  it('CONNECT to an IPv6 literal (ATYP 4) needs its exact allow entry', async () => {
    const v6 = net.createServer((sock) => sock.end('hello over v6'));
    let v6Connections = 0;
    v6.on('connection', () => v6Connections++);
    await new Promise<void>((resolve) => v6.listen(0, '::1', resolve));
    const v6Port = (v6.address() as net.AddressInfo).port;
    try {
      const denied = await startProxy({ policy: { allow: ['**.test'], allowLocal: true } });
      expect((await socks5(denied.port, '::1', v6Port)).reply).toBe(0x02);
      expect(v6Connections).toBe(0);
      const allowed = await startProxy({ policy: { allow: ['[::1]'] } });
      const ok = await socks5(allowed.port, '::1', v6Port);
      expect(ok.reply).toBe(0x00);
      expect((await exchange(ok.socket, '')).toString()).toBe('hello over v6');
      expect(v6Connections).toBe(1);
      expect(allowed.events[0]).toMatchObject({ scope: 'non_domain', host: '0:0:0:0:0:0:0:1', decision: 'allow' });
    } finally {
      await new Promise((r) => v6.close(r));
    }
  });

  it('is not served when enableSocks5 is false', async () => {
    const { port } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true }, enableSocks5: false });
    const before = tcp.connections;
    await expect(socks5(port, 'allowed.test', tcp.port)).rejects.toThrow(/closed/);
    expect(tcp.connections).toBe(before);
    expect((await httpViaProxy(port, webUrl('allowed.test'))).status).toBe(200);
  });
});

describe('bulk and concurrency', () => {
  it('100 MB through CONNECT arrives with the same sha256', async () => {
    const { port } = await startProxy({ policy: { allow: ['bulk.test'], allowLocal: true } });
    const size = 100 * 1024 * 1024;
    const r = await connectViaProxy(port, `bulk.test:${tcp.port}`);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const digest = await new Promise<{ hex: string; bytes: number }>((resolve, reject) => {
      const hash = createHash('sha256');
      let bytes = 0;
      r.socket.on('data', (c: Buffer) => {
        bytes += c.length;
        hash.update(c);
      });
      r.socket.on('end', () => resolve({ hex: hash.digest('hex'), bytes }));
      r.socket.on('error', reject);
      r.socket.resume();
      r.socket.write(`SEND ${size}\n`);
    });
    r.socket.end();
    expect(digest.bytes).toBe(size);
    expect(digest.hex).toBe(tcp.sent.at(-1));
  });

  it('200 concurrent requests from 8 attached processes are attributed to the right process', async () => {
    const events: AuditEvent[] = [];
    const proxy = await ManagedProxy.start({ lookup, onAudit: (e) => events.push(e), policy: { allow: ['**.fleet.test'], allowLocal: true } });
    proxies.push(proxy);
    const attachments = await Promise.all(Array.from({ length: 8 }, (_, i) => proxy.attach(`sandbox-${i}`)));
    expect(new Set(attachments.map((a) => a.port)).size).toBe(8);
    expect(proxy.attachedProcessIds.sort()).toEqual(Array.from({ length: 8 }, (_, i) => `sandbox-${i}`).sort());
    const before = web.requests.length;
    const connectionsBefore = web.connections;
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, n) => {
        const i = n % 8;
        // Even requests over HTTP, odd ones over a CONNECT tunnel.
        if (n % 2 === 0) return httpViaProxy(attachments[i].port, webUrl(`p${i}.fleet.test`, `/r${n}`), { headers: { 'x-tag': `sandbox-${i}` } });
        return connectViaProxy(attachments[i].port, `p${i}.fleet.test:${tcp.port}`).then(async (t) => {
          if (!t.ok) return { status: t.status, headers: {}, body: '' };
          const back = await exchange(t.socket, `ECHO\nsandbox-${i}`, { end: true });
          return { status: 200, headers: {}, body: JSON.stringify({ tag: back.toString() }) };
        });
      }),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    results.forEach((r, n) => expect(JSON.parse(r.body).tag).toBe(`sandbox-${n % 8}`));
    expect(web.requests.length).toBe(before + 100);
    // Each sandbox has its own upstream pool: at least one connection each, never one per request.
    expect(web.connections - connectionsBefore).toBeGreaterThanOrEqual(8);
    expect(web.connections - connectionsBefore).toBeLessThanOrEqual(100);
    expect(events).toHaveLength(200);
    for (const e of events) {
      expect(e.decision).toBe('allow');
      expect(e.host).toBe(`p${e.processId.slice('sandbox-'.length)}.fleet.test`);
    }
    const perProcess = new Map<string, number>();
    for (const e of events) perProcess.set(e.processId, (perProcess.get(e.processId) ?? 0) + 1);
    expect([...perProcess.values()]).toEqual(new Array(8).fill(25));
  });
});

describe('live policy update and recent refusals', () => {
  it('update() changes what every attached sandbox may reach, for new requests; a bad update changes nothing', async () => {
    const events: AuditEvent[] = [];
    const proxy = await ManagedProxy.start({ lookup, onAudit: (e) => events.push(e), policy: { allow: ['allowed.test'], allowLocal: true } });
    proxies.push(proxy);
    const a = await proxy.attach('a');
    const b = await proxy.attach('b');
    const before = web.requests.length;
    expect((await httpViaProxy(a.port, webUrl('later.test'))).status).toBe(403);
    expect((await httpViaProxy(b.port, webUrl('allowed.test'))).status).toBe(200);
    // A tunnel opened before the update keeps running afterwards (not re-checked).
    const early = await connectViaProxy(a.port, `allowed.test:${tcp.port}`);
    expect(early.ok).toBe(true);
    proxy.update({ allow: ['allowed.test', 'later.test'], deny: ['allowed.test'] });
    expect(proxy.policy).toEqual({ allow: ['allowed.test', 'later.test'], deny: ['allowed.test'], allowLocal: true, mode: 'full' });
    expect((await httpViaProxy(a.port, webUrl('later.test'))).status).toBe(200);
    const nowDenied = await httpViaProxy(b.port, webUrl('allowed.test'));
    expect([nowDenied.status, nowDenied.headers['x-proxy-error']]).toEqual([403, 'blocked-by-denylist']);
    if (early.ok) expect((await exchange(early.socket, 'ECHO\nstill up', { end: true })).toString()).toBe('still up');
    // Invalid updates throw and leave the policy in force.
    expect(() => proxy.update({ allow: ['*.com'] })).toThrow(TypeError);
    expect(() => proxy.update({ mode: 'open' as 'full' })).toThrow(/mode/);
    expect(() => proxy.update({ bogus: 1 } as never)).toThrow(/Unknown policy field bogus/);
    expect((await httpViaProxy(a.port, webUrl('later.test'))).status).toBe(200);
    // allowLocal can be withdrawn: the same allowed name now resolves to a refused local address.
    proxy.update({ allowLocal: false });
    expect((await httpViaProxy(a.port, webUrl('later.test'))).status).toBe(403);
    expect(web.requests.length).toBe(before + 3);
  });

  it('recentBlocked() lists the latest refusals as their audit events, newest last, capped', async () => {
    const { proxy, port } = await startProxy({ policy: { allow: ['allowed.test'], deny: ['denied.test'], allowLocal: true } });
    expect(proxy.recentBlocked()).toEqual([]);
    await httpViaProxy(port, webUrl('allowed.test'));
    await httpViaProxy(port, webUrl('denied.test'));
    await connectViaProxy(port, 'unlisted.test:443');
    const got = proxy.recentBlocked();
    expect(got.map((e) => [e.processId, e.protocol, e.host, e.reason])).toEqual([
      ['proc-1', 'http', 'denied.test', 'denied'],
      ['proc-1', 'httpsConnect', 'unlisted.test', 'not_allowed'],
    ]);
    expect(proxy.recentBlocked(1).map((e) => e.host)).toEqual(['unlisted.test']);
    expect(proxy.recentBlocked(0)).toEqual([]);
    got[0]!.host = 'mutated';
    expect(proxy.recentBlocked()[0]!.host).toBe('denied.test');
    for (let i = 0; i < 300; i++) await socks5(port, `n${i}.nowhere.test`, 80).then((r) => r.socket.destroy());
    const capped = proxy.recentBlocked();
    expect(capped).toHaveLength(256);
    expect(capped.at(-1)!.host).toBe('n299.nowhere.test');
    expect(() => proxy.recentBlocked(-1)).toThrow(TypeError);
  });
});

describe('keep-alive upstream pool (plain HTTP)', () => {
  it('sequential requests reuse one upstream connection', async () => {
    const { port } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
    const [requestsBefore, connectionsBefore] = [web.requests.length, web.connections];
    for (let i = 0; i < 20; i++) expect((await httpViaProxy(port, webUrl('allowed.test', `/seq${i}`))).status).toBe(200);
    expect(web.requests.length - requestsBefore).toBe(20);
    // One connection, or two if the origin closed one meanwhile (never one per request).
    expect(web.connections - connectionsBefore).toBeGreaterThanOrEqual(1);
    expect(web.connections - connectionsBefore).toBeLessThanOrEqual(2);
  });

  it("never carries one sandbox's request on another sandbox's connection", async () => {
    const events: AuditEvent[] = [];
    const proxy = await ManagedProxy.start({ lookup, onAudit: (e) => events.push(e), policy: { allow: ['allowed.test'], allowLocal: true } });
    proxies.push(proxy);
    const a = await proxy.attach('a');
    const b = await proxy.attach('b');
    const before = web.requests.length;
    for (let i = 0; i < 10; i++) {
      const [ra, rb] = await Promise.all([
        httpViaProxy(a.port, webUrl('allowed.test', '/a'), { headers: { 'x-tag': 'a' } }),
        httpViaProxy(b.port, webUrl('allowed.test', '/b'), { headers: { 'x-tag': 'b' } }),
      ]);
      expect([ra.status, rb.status]).toEqual([200, 200]);
    }
    const got = web.requests.slice(before);
    expect(got).toHaveLength(20);
    const portsOf = (tag: string) => new Set(got.filter((q) => q.headers['x-tag'] === tag).map((q) => q.remotePort));
    const [pa, pb] = [portsOf('a'), portsOf('b')];
    expect(pa.size).toBeGreaterThan(0);
    expect(pb.size).toBeGreaterThan(0);
    expect([...pa].filter((p) => pb.has(p))).toEqual([]);
    // Pooling happened within each sandbox (fewer connections than requests).
    expect(pa.size + pb.size).toBeLessThan(20);
  });

  it('a request without a body is sent again when the pooled connection was closed under it; one with a body is not', async () => {
    // An origin that answers the first request on a connection and resets it on the second.
    let requests = 0;
    const origin = net.createServer((sock) => {
      let n = 0;
      let buf = '';
      sock.on('error', () => undefined);
      sock.on('data', (c: Buffer) => {
        buf += c.toString('latin1');
        while (buf.includes('\r\n\r\n')) {
          const head = buf.slice(0, buf.indexOf('\r\n\r\n'));
          const len = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
          if (buf.length < head.length + 4 + len) return;
          buf = buf.slice(head.length + 4 + len);
          requests++;
          if (++n === 1) sock.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nok');
          else return void sock.resetAndDestroy();
        }
      });
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    try {
      const { port } = await startProxy({ policy: { allow: ['flaky.test'], allowLocal: true } });
      const url = `http://flaky.test:${(origin.address() as net.AddressInfo).port}/`;
      expect((await httpViaProxy(port, url)).status).toBe(200);
      // GET on the pooled connection: reset, then retried on a fresh one.
      const again = await httpViaProxy(port, url);
      expect([again.status, again.body]).toEqual([200, 'ok']);
      expect(requests).toBe(3);
      // POST with a body on the pooled connection: reset, not retried (502).
      const post = await httpViaProxy(port, url, { method: 'POST', body: 'once' });
      expect(post.status).toBe(502);
      expect(requests).toBe(4);
    } finally {
      await new Promise((r) => origin.close(r));
    }
  });

  it('keeps at most 16 idle upstream connections per sandbox, over all origins', async () => {
    const servers = await Promise.all(Array.from({ length: 24 }, () => startHttpServer()));
    try {
      const { port } = await startProxy({ policy: { allow: ['allowed.test'], allowLocal: true } });
      for (const srv of servers) expect((await httpViaProxy(port, `http://allowed.test:${srv.port}/`)).status).toBe(200);
      const open = () => servers.reduce((n, srv) => n + srv.open, 0);
      expect(await waitFor(() => open() <= 16)).toBe(true);
      expect(open()).toBeGreaterThanOrEqual(1);
    } finally {
      await Promise.all(servers.map((srv) => srv.close()));
    }
  });
});

describe('listeners and cleanup', () => {
  it('closing leaves no listener, socket or timer; the proxy closes with its last process', async () => {
    await new Promise((r) => setTimeout(r, 50));
    const baseline = resourceCounts();
    const proxy = await ManagedProxy.start({ lookup, policy: { allow: ['allowed.test'], allowLocal: true }, deciderTimeoutMs: 60_000, decider: () => new Promise(() => {}) });
    const a = await proxy.attach('one');
    const b = await proxy.attach('two');
    // An open tunnel, an idle keep-alive-less HTTP socket mid-request and a pending decision.
    const tunnel = await connectViaProxy(a.port, `allowed.test:${tcp.port}`);
    expect(tunnel.ok).toBe(true);
    const pendingDecision = httpViaProxy(b.port, webUrl('undecided.test')).catch((e: Error) => e);
    await waitFor(() => (resourceCounts().Timeout ?? 0) > (baseline.Timeout ?? 0));
    const half = net.connect(b.port, '127.0.0.1');
    await new Promise((r) => half.once('connect', r));
    half.write('GET http://allowed.test/ HT');

    await a.detach();
    expect(proxy.closed).toBe(false);
    expect(proxy.attachedProcessIds).toEqual(['two']);
    await expect(new Promise((resolve, reject) => net.connect(a.port, '127.0.0.1').on('connect', resolve).on('error', reject))).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await b.detach();
    expect(proxy.closed).toBe(true);
    await expect(proxy.attach('three')).rejects.toThrow(/closed/);
    const settled = await pendingDecision;
    expect(settled instanceof Error || (settled as { status: number }).status === 403).toBe(true);
    if (tunnel.ok) tunnel.socket.destroy();
    half.destroy();
    const clean = await waitFor(() => {
      const now = resourceCounts();
      return ['TCPServerWrap', 'TCPSocketWrap', 'Timeout'].every((k) => (now[k] ?? 0) <= (baseline[k] ?? 0));
    });
    // At most what was there before (`clean`): a timer of the test runner's that was alive at the
    // baseline may fire meanwhile, so exact equality would race with the runner, not test the proxy.
    expect({ clean, now: resourceCounts(), baseline }).toMatchObject({ clean: true });
  });

  it('with closeWithLastProcess false the proxy stays up until close()', async () => {
    const proxy = await ManagedProxy.start({ lookup, policy: { allow: [] }, closeWithLastProcess: false });
    proxies.push(proxy);
    const a = await proxy.attach('x');
    await a.detach();
    expect(proxy.closed).toBe(false);
    const b = await proxy.attach('y');
    expect(b.port).toBeGreaterThan(0);
    await proxy.close();
    expect(proxy.closed).toBe(true);
  });

  it('rejects bad arguments and bad policies', async () => {
    await expect(ManagedProxy.start({ policy: { allow: [], deny: ['*'] } })).rejects.toThrow(/global wildcard/);
    await expect(ManagedProxy.start({ policy: { allow: 'x' as unknown as string[] } })).rejects.toThrow(TypeError);
    await expect(ManagedProxy.start({ policy: { allow: [], mode: 'open' as 'full' } })).rejects.toThrow(/mode/);
    const proxy = await ManagedProxy.start({ policy: { allow: [] } });
    proxies.push(proxy);
    await expect(proxy.attach('')).rejects.toThrow(TypeError);
    await expect(proxy.attach('p', { fd: -1 })).rejects.toThrow(TypeError);
    // An fd that is not a TCP socket: attach fails, nothing is left listening, and the fd stays
    // the caller's.
    const fd = fs.openSync('/dev/null', 'r');
    try {
      await expect(proxy.attach('p', { fd })).rejects.toThrow();
      expect(proxy.attachedProcessIds).toEqual([]);
      expect(() => fs.fstatSync(fd)).not.toThrow();
    } finally {
      fs.closeSync(fd);
    }
  });

  it('serves on a listener fd handed over from elsewhere and closes that fd on detach', async (ctx) => {
    // python3 makes the listening socket outside Node (as the sandbox's init does inside its
    // namespace), puts it on fd 3 and execs a node process that runs the proxy on { fd: 3 }.
    if (!python) ctx.skip('python3 not installed');
    const script = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'proxy-fd-')), 'child.js');
    fs.writeFileSync(
      script,
      `require(${JSON.stringify(path.join(ROOT, 'test/network/ts-register.cjs'))});
const { ManagedProxy } = require(${JSON.stringify(path.join(ROOT, 'lib/network/index.ts'))});
const fs = require('fs');
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
(async () => {
  const proxy = await ManagedProxy.start({
    policy: { allow: ['allowed.test'], allowLocal: true },
    lookup: async () => [{ address: '127.0.0.1', family: 4 }],
    onAudit: (event) => out({ event }),
  });
  const a = await proxy.attach('fd-proc', { fd: 3 });
  out({ port: a.port });
  process.stdin.once('data', async () => {
    await a.detach();
    let fd3Open = true;
    try { fs.fstatSync(3); } catch { fd3Open = false; }
    out({ closed: proxy.closed, fd3Open });
    process.exit(0);
  });
})().catch((err) => { out({ error: String(err && err.stack) }); process.exit(1); });
`,
    );
    const child = spawn(
      'python3',
      [
        '-c',
        [
          'import os, socket, sys',
          's = socket.socket()',
          "s.bind(('127.0.0.1', 0))",
          's.listen(64)',
          "print(s.getsockname()[1], flush=True)",
          'os.dup2(s.fileno(), 3)',
          'os.set_inheritable(3, True)',
          'os.execv(sys.argv[1], [sys.argv[1], sys.argv[2]])',
        ].join('\n'),
        process.execPath,
        script,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    const lines: Array<Record<string, unknown>> = [];
    let partial = '';
    let expectedPort = 0;
    child.stdout!.on('data', (c: Buffer) => {
      partial += c.toString();
      const parts = partial.split('\n');
      partial = parts.pop()!;
      for (const p of parts) {
        if (expectedPort === 0) expectedPort = Number(p);
        else lines.push(JSON.parse(p));
      }
    });
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    try {
      expect(await waitFor(() => lines.some((l) => 'port' in l || 'error' in l), 20_000)).toBe(true);
      expect(lines.find((l) => 'error' in l)).toBeUndefined();
      expect(lines.find((l) => 'port' in l)!.port).toBe(expectedPort);
      const before = web.connections;
      expect((await httpViaProxy(expectedPort, webUrl('allowed.test', '/via-fd'))).status).toBe(200);
      const refused = await httpViaProxy(expectedPort, webUrl('elsewhere.test'));
      expect(refused.headers['x-proxy-error']).toBe('blocked-by-allowlist');
      expect(web.connections).toBe(before + 1);
      child.stdin!.write('detach\n');
      expect(await exited).toBe(0);
      const events = lines.filter((l) => 'event' in l).map((l) => l.event as AuditEvent);
      expect(events.map((e) => [e.processId, e.host, e.decision])).toEqual([
        ['fd-proc', 'allowed.test', 'allow'],
        ['fd-proc', 'elsewhere.test', 'deny'],
      ]);
      expect(lines.at(-1)).toEqual({ closed: true, fd3Open: false });
      await expect(new Promise((resolve, reject) => net.connect(expectedPort, '127.0.0.1').on('connect', resolve).on('error', reject))).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    } finally {
      child.kill();
      fs.rmSync(path.dirname(script), { recursive: true, force: true });
    }
  });
});
