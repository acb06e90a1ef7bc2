/**
 * TLS interception (`interception` with an InterceptionCa): limited mode over HTTPS and
 * credential injection, with curl as the client against real TLS servers on loopback. The origins'
 * certificates come from a separate "public" CA that only the proxy trusts for origins
 * (`originCa`); the client trusts the interception CA's bundle. Every origin records what reached
 * it, so refusals and swapped credentials are checked from the outside.
 */
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as https from 'https';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { run as sandboxedRun } from '../../lib/index';
import { CUSTOM_CA_ENV_KEYS, InterceptionCa, ManagedProxy, type AuditEvent, type LookupFn, type ManagedProxyOptions } from '../../lib/network';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, makeScene } from '../helpers/sandbox';
import { connectViaProxy, listenOnLoopback, run } from './helpers';

const lookup: LookupFn = async (host) => {
  if (host.endsWith('.test')) return [{ address: '127.0.0.1', family: 4 }];
  throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
};

interface Origin {
  port: number;
  seen: Array<{ method: string; url: string; authorization: string | undefined; host: string | undefined }>;
  close(): Promise<void>;
}

let publicCa: InterceptionCa;
let ca: InterceptionCa;
let secure: Origin;
let other: Origin;
const curl = (() => {
  try {
    execFileSync('curl', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
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

  it('rejects bad interception options', () => {
    const base = { policy: { allow: [] } };
    expect(() => ManagedProxy.create({ ...base, interception: {} as never })).toThrow(/InterceptionCa/);
    expect(() => ManagedProxy.create({ ...base, interception: { ca }, upstreamProxy: 'http://127.0.0.1:3128' })).toThrow(/cannot be combined/);
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
