/**
 * Allow and deny patterns with a port (`api.example.com:443`, `*.example.com:8443`, `[::1]:8080`):
 * such a pattern covers that port only; a pattern without one covers every port. Driven through
 * the managed proxy's real decision path (CONNECT, absolute-form HTTP and SOCKS5) against two
 * counting loopback servers, so a refusal is proved from the outside: the other server hears
 * nothing; and once through spawn() from inside the sandbox, in each Linux mode. The regression:
 * `host:port` passed validation and then never matched.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { run } from '../../lib/index';
import { DomainMatcher, ManagedProxy, type AuditEvent, type LookupFn, type ManagedProxyOptions } from '../../lib/network';
import { MODES, modePolicy } from '../helpers/capabilities';
import { NODE } from '../helpers/sandbox';
import { BASE_ENV, NODE_CLIENT, parseResult } from './enforced-helpers';
import { connectViaProxy, exchange, httpViaProxy, socks5, startHttpServer, startTcpServer, type CountingHttpServer, type CountingTcpServer } from './helpers';

// Every *.test name resolves to loopback; /etc/hosts is never touched.
const lookup: LookupFn = async (host) => {
  if (host.endsWith('.test')) return [{ address: '127.0.0.1', family: 4 }];
  throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
};

let open: CountingTcpServer;
let other: CountingTcpServer;
let web: CountingHttpServer;
let webOther: CountingHttpServer;
const proxies: ManagedProxy[] = [];

beforeAll(async () => {
  [open, other, web, webOther] = await Promise.all([startTcpServer(), startTcpServer(), startHttpServer(), startHttpServer()]);
});
afterAll(async () => {
  await Promise.all([open.close(), other.close(), web.close(), webOther.close()]);
});
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

async function startProxy(policy: ManagedProxyOptions['policy']): Promise<{ port: number; events: AuditEvent[] }> {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({ lookup, onAudit: (e) => events.push(e), policy });
  proxies.push(proxy);
  const { port } = await proxy.attach('ports');
  return { port, events };
}

/** CONNECT to host:port and echo one line through; true when the tunnel worked. */
async function tunnel(proxyPort: number, target: string): Promise<{ ok: boolean; status?: number }> {
  const r = await connectViaProxy(proxyPort, target);
  if (!r.ok) return { ok: false, status: r.status };
  const echoed = await exchange(r.socket, 'ECHO\nhi', { end: true });
  return { ok: echoed.toString() === 'hi' };
}

describe('a pattern with a port covers that port only', () => {
  it.each([
    ['exact name', (p: number) => `api.port.test:${p}`, 'api.port.test'],
    ['subdomain wildcard', (p: number) => `*.port.test:${p}`, 'api.port.test'],
    ['apex-and-subdomain wildcard', (p: number) => `**.port.test:${p}`, 'port.test'],
  ])('%s: CONNECT to the allowed port reaches the server, to another port is refused and that server hears nothing', async (_name, pattern, host) => {
    const { port, events } = await startProxy({ allow: [pattern(open.port)], allowLocal: true });
    const before = { open: open.connections, other: other.connections };
    expect(await tunnel(port, `${host}:${open.port}`)).toEqual({ ok: true });
    expect(open.connections).toBe(before.open + 1);
    expect(await tunnel(port, `${host}:${other.port}`)).toEqual({ ok: false, status: 403 });
    expect(other.connections).toBe(before.other);
    expect(events.map((e) => [e.port, e.decision, e.reason])).toEqual([
      [open.port, 'allow', 'allowed'],
      [other.port, 'deny', 'not_allowed'],
    ]);
  });

  it('plain HTTP and SOCKS5 follow the same rule', async () => {
    const { port } = await startProxy({ allow: [`api.port.test:${web.port}`, `api.port.test:${open.port}`], allowLocal: true });
    const before = { web: web.connections, webOther: webOther.connections, other: other.connections };
    expect((await httpViaProxy(port, `http://api.port.test:${web.port}/in`)).status).toBe(200);
    expect(web.connections).toBe(before.web + 1);
    const refused = await httpViaProxy(port, `http://api.port.test:${webOther.port}/out`);
    expect(refused.status).toBe(403);
    expect(refused.headers['x-proxy-error']).toBe('blocked-by-allowlist');
    expect(webOther.connections).toBe(before.webOther);
    const s = await socks5(port, 'api.port.test', other.port);
    expect(s.reply).not.toBe(0);
    s.socket.destroy();
    expect(other.connections).toBe(before.other);
    const ok = await socks5(port, 'api.port.test', open.port);
    expect(ok.reply).toBe(0);
    expect((await exchange(ok.socket, 'ECHO\nsocks', { end: true })).toString()).toBe('socks');
  });

  it('an IP literal with a port lets that one local port through, without allowLocal', async () => {
    const { port, events } = await startProxy({ allow: [`127.0.0.1:${open.port}`] });
    const before = other.connections;
    expect(await tunnel(port, `127.0.0.1:${open.port}`)).toEqual({ ok: true });
    expect(await tunnel(port, `127.0.0.1:${other.port}`)).toEqual({ ok: false, status: 403 });
    expect(other.connections).toBe(before);
    expect(events.map((e) => [e.port, e.decision, e.reason])).toEqual([
      [open.port, 'allow', 'allowed'],
      [other.port, 'deny', 'not_allowed_local'],
    ]);
  });

  it('a deny pattern with a port refuses that port only; deny still wins over allow', async () => {
    const { port } = await startProxy({ allow: ['**.port.test'], deny: [`api.port.test:${other.port}`], allowLocal: true });
    const before = other.connections;
    expect(await tunnel(port, `api.port.test:${other.port}`)).toEqual({ ok: false, status: 403 });
    expect(other.connections).toBe(before);
    expect(await tunnel(port, `api.port.test:${open.port}`)).toEqual({ ok: true });
    expect(await tunnel(port, `www.port.test:${other.port}`)).toEqual({ ok: true });
    expect(other.connections).toBe(before + 1);
  });

  it('control: without a port a pattern covers every port, as before', async () => {
    const { port } = await startProxy({ allow: ['api.port.test'], allowLocal: true });
    expect(await tunnel(port, `api.port.test:${open.port}`)).toEqual({ ok: true });
    expect(await tunnel(port, `api.port.test:${other.port}`)).toEqual({ ok: true });
  });
});

describe.each(MODES)('a sandboxed command, $name mode', ({ name: mode, skip }) => {
  it.skipIf(skip)('spawn() policy api.port.test:<port>: that port answers through the proxy, another port is refused and hears nothing', async () => {
    const events: AuditEvent[] = [];
    const before = { web: web.connections, webOther: webOther.connections };
    const actions = [
      ['http', `http://api.port.test:${web.port}/in`],
      ['http', `http://api.port.test:${webOther.port}/out`],
      ['connect', `api.port.test:${webOther.port}`, '/tunnel'],
    ];
    const r = await run(NODE, ['-e', NODE_CLIENT, JSON.stringify(actions)], {
      cwd: '/',
      env: BASE_ENV,
      timeout: 60_000,
      policy: modePolicy(mode, { network: { proxy: { allow: [`api.port.test:${web.port}`], allowLocal: true } } }),
      proxy: { lookup, onAudit: (e) => events.push(e) },
    });
    const out = parseResult<{ status: number; xerr: string | null }>(r);
    expect(out.map((o) => [o.status, o.xerr]), r.stderr).toEqual([
      [200, null],
      [403, 'blocked-by-allowlist'],
      [403, 'blocked-by-allowlist'],
    ]);
    expect(web.connections).toBe(before.web + 1);
    expect(webOther.connections).toBe(before.webOther);
    expect(events.map((e) => [e.port, e.decision])).toEqual([
      [web.port, 'allow'],
      [webOther.port, 'deny'],
      [webOther.port, 'deny'],
    ]);
  });
});

describe('port pattern validation', () => {
  it('accepts host:port, wildcard:port, IPv4:port, [IPv6]:port and *:port (allow)', () => {
    for (const good of ['api.example.com:443', '*.example.com:8443', '**.example.com:1', '10.1.2.3:65535', '[::1]:8080', '*:443', 'localhost:3000']) {
      expect(() => new DomainMatcher([good]), good).not.toThrow();
    }
  });

  it('refuses a bad port, a port on a bare IPv6 literal, and stray colons', () => {
    for (const bad of ['example.com:0', 'example.com:65536', 'example.com:', 'example.com:https', 'example.com:+1', 'example.com:0443', '[::1]:', 'a:b:c.example.com']) {
      expect(() => new DomainMatcher([bad]), bad).toThrow(/invalid domain pattern/);
    }
    // A bare IPv6 literal has no port: `::1:443` is the address ::1:443, not ::1 on 443.
    const m = new DomainMatcher(['::1:443']);
    expect(m.evaluate('::1', 443).verdict).toBe('notAllowed');
    expect(m.evaluate('::1:443', 80).verdict).toBe('allowed');
  });

  it('a URL and an address range get a reason of their own; a name with a slash is just not a host', () => {
    expect(() => new DomainMatcher(['https://api.example.com/v1'])).toThrow(/: a URL; give the host alone/);
    for (const cidr of ['127.0.0.0/8', '10.0.0.0/16', '[fd00::]/8', 'fd00::/8']) expect(() => new DomainMatcher([cidr]), cidr).toThrow(/an address range \(CIDR\)/);
    expect(() => new DomainMatcher(['cafe.de/24'])).toThrow(/"cafe\.de\/24": not a host name/);
  });

  it('evaluate without a port: port patterns match nothing, portless ones everything', () => {
    const m = new DomainMatcher(['a.example.com:443', 'b.example.com']);
    expect(m.evaluate('a.example.com').verdict).toBe('notAllowed');
    expect(m.evaluate('a.example.com', 443).verdict).toBe('allowed');
    expect(m.evaluate('a.example.com', 80).verdict).toBe('notAllowed');
    expect(m.evaluate('b.example.com', 80).verdict).toBe('allowed');
    expect(m.evaluate('b.example.com').verdict).toBe('allowed');
  });
});
