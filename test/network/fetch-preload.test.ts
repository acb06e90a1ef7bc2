/**
 * The opt-in fetch preload (lib/network/fetch-preload.ts): Node's built-in fetch, which ignores
 * proxy variables before Node 22.21, goes through the managed proxy when the preload is on
 * NODE_OPTIONS. Real clients (node child processes) against a real HTTP server and a real TLS
 * server on loopback (a throwaway CA made with openssl, trusted through NODE_EXTRA_CA_CERTS);
 * every server counts what reached it, so refusals are checked from the outside too.
 */
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as https from 'https';
import * as os from 'os';
import * as path from 'path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { ManagedProxy, nodeFetchPreloadPath, type AuditEvent } from '../../lib/network';
import { bypassesProxy } from '../../lib/network/fetch-preload';
import { caps, MODES } from '../helpers/capabilities';
import { runsOk } from '../helpers/host';
import { BASE_ENV, lookup, nodeHonoursEnvProxy, runWithProxy } from './enforced-helpers';
import { listenOnLoopback, run, startHttpServer, type CountingHttpServer } from './helpers';

const PRELOAD = nodeFetchPreloadPath();
const havePreload = fs.existsSync(PRELOAD);
const haveOpenssl = runsOk('openssl', ['version']);
if (!havePreload) console.warn(`fetch preload not built (${PRELOAD}): run npm run build:ts; cases skipped`);
if (!haveOpenssl) console.warn('openssl not found: the https cases are skipped');

let web: CountingHttpServer;
let tls: { port: number; hits: number; close(): Promise<void> } | null = null;
let dir: string;
let caFile = '';

const FETCH = `
fetch(process.argv[1]).then(async (r) => console.log(JSON.stringify({ status: r.status, body: await r.text() })),
  (e) => console.log(JSON.stringify({ error: String(e && e.cause ? e.cause.message || e.cause.code : e) })));`;

beforeAll(async () => {
  web = await startHttpServer();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psb-fetch-'));
  fs.chmodSync(dir, 0o755);
  if (!haveOpenssl) return;
  // A CA and a leaf for secure.test, as a real origin would have.
  const o = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  o(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=psb test CA']);
  o(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'leaf.key', '-out', 'leaf.csr', '-subj', '/CN=secure.test']);
  fs.writeFileSync(path.join(dir, 'ext.cnf'), 'subjectAltName=DNS:secure.test\nbasicConstraints=CA:FALSE\n');
  o(['x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'leaf.pem', '-days', '2', '-extfile', 'ext.cnf']);
  caFile = path.join(dir, 'ca.pem');
  fs.chmodSync(caFile, 0o644);
  const state = { port: 0, hits: 0, close: async () => {} };
  const server = https.createServer({ key: fs.readFileSync(path.join(dir, 'leaf.key')), cert: fs.readFileSync(path.join(dir, 'leaf.pem')) }, (req, res) => {
    state.hits++;
    res.end(`tls says hi to ${req.headers.host}`);
  });
  Object.assign(state, await listenOnLoopback(server));
  tls = state;
});

afterAll(async () => {
  await web.close();
  await tls?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function withProxy(policy = { allow: ['allowed.test', 'secure.test'], allowLocal: true }) {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({ policy, lookup, onAudit: (e) => events.push(e) });
  const { port } = await proxy.attach('fetcher');
  return { proxy, port, events };
}

async function fetchIn(env: Record<string, string>, url: string): Promise<{ status?: number; body?: string; error?: string }> {
  const r = await run(process.execPath, ['-e', FETCH, url], env);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
}

describe.skipIf(!havePreload)('fetch preload (unsandboxed client, managed proxy)', () => {
  it('plain http: fetch goes through the proxy (audited), and a denied name reaches nothing', async () => {
    const { proxy, port, events } = await withProxy();
    try {
      const env = ManagedProxy.proxyEnv({ PATH: process.env.PATH ?? '/usr/bin:/bin' }, port, { nodeFetchPreload: true });
      expect(env.NODE_OPTIONS).toBe(`--require ${PRELOAD}`);
      const before = web.requests.length;
      const ok = await fetchIn(env, `http://allowed.test:${web.port}/via-preload`);
      expect(ok.status).toBe(200);
      expect(JSON.parse(ok.body!).url).toBe('/via-preload');
      expect(web.requests.length).toBe(before + 1);
      const denied = await fetchIn(env, `http://other.test:${web.port}/nope`);
      expect(denied.error).toMatch(/blocked-by-allowlist/);
      expect(web.requests.length).toBe(before + 1);
      expect(events.map((e) => [e.protocol, e.host, e.decision])).toEqual([
        ['httpsConnect', 'allowed.test', 'allow'],
        ['httpsConnect', 'other.test', 'deny'],
      ]);
    } finally {
      await proxy.close();
    }
  });

  it.skipIf(!haveOpenssl)(`https: TLS to the origin inside the tunnel, certificate checked${haveOpenssl ? '' : ' (needs openssl)'}`, async () => {
    const { proxy, port, events } = await withProxy();
    try {
      const env = ManagedProxy.proxyEnv({ PATH: process.env.PATH ?? '/usr/bin:/bin', NODE_EXTRA_CA_CERTS: caFile }, port, { nodeFetchPreload: true });
      const hits = tls!.hits;
      const ok = await fetchIn(env, `https://secure.test:${tls!.port}/`);
      expect(ok).toEqual({ status: 200, body: `tls says hi to secure.test:${tls!.port}` });
      expect(tls!.hits).toBe(hits + 1);
      expect(events.at(-1)).toMatchObject({ protocol: 'httpsConnect', host: 'secure.test', port: tls!.port, decision: 'allow' });
      // Without the CA the same fetch fails certificate verification (the check is real).
      const untrusted = await fetchIn(ManagedProxy.proxyEnv({ PATH: process.env.PATH ?? '/usr/bin:/bin' }, port, { nodeFetchPreload: true }), `https://secure.test:${tls!.port}/`);
      expect(untrusted.error).toMatch(/certificate|self.signed|issuer/i);
      expect(tls!.hits).toBe(hits + 1);
    } finally {
      await proxy.close();
    }
  });

  it.skipIf(nodeHonoursEnvProxy())(
    `control: without the preload this Node's fetch ignores the proxy variables${nodeHonoursEnvProxy() ? ' (SKIPPED: this Node honours NODE_USE_ENV_PROXY)' : ''}`,
    async () => {
      const { proxy, port, events } = await withProxy();
      try {
        const env = ManagedProxy.proxyEnv({ PATH: process.env.PATH ?? '/usr/bin:/bin' }, port);
        const r = await fetchIn(env, `http://allowed.test:${web.port}/`);
        expect(r.error).toMatch(/ENOTFOUND|EAI_AGAIN|getaddrinfo/);
        expect(events).toEqual([]);
      } finally {
        await proxy.close();
      }
    },
  );

  it('NO_PROXY entries connect directly (names, suffixes, *, IPv4 CIDR)', () => {
    expect(bypassesProxy('localhost', 'localhost,127.0.0.1')).toBe(true);
    expect(bypassesProxy('api.internal.test', '.internal.test')).toBe(true);
    expect(bypassesProxy('internal.test', '*.internal.test')).toBe(true);
    expect(bypassesProxy('evilinternal.test', '.internal.test')).toBe(false);
    expect(bypassesProxy('10.1.2.3', '10.0.0.0/8')).toBe(true);
    expect(bypassesProxy('11.1.2.3', '10.0.0.0/8')).toBe(false);
    expect(bypassesProxy('[::1]', '::1')).toBe(true);
    expect(bypassesProxy('anything.test', '*')).toBe(true);
    expect(bypassesProxy('anything.test', '')).toBe(false);
  });
});

describe('nodeFetchPreloadPath() is part of the public API', () => {
  const DIST = path.resolve(__dirname, '..', '..', 'dist');
  const built = fs.existsSync(path.join(DIST, 'index.mjs'));
  if (!built) console.warn(`SKIPPING the built-package export cases: ${DIST}/index.mjs is missing (npm run build:ts)`);
  const PRINT = 'console.log(typeof nodeFetchPreloadPath === "function" ? nodeFetchPreloadPath() : "missing")';
  it.skipIf(!built).each([
    ['ES module', ['--input-type=module', '-e', `import { nodeFetchPreloadPath } from ${JSON.stringify(path.join(DIST, 'index.mjs'))};${PRINT}`]],
    ['CommonJS', ['-e', `const { nodeFetchPreloadPath } = require(${JSON.stringify(path.join(DIST, 'index.js'))});${PRINT}`]],
  ])('%s: the package entry exports it, naming the built preload', (_name, args) => {
    const out = execFileSync(process.execPath, args, { encoding: 'utf8' }).trim();
    expect(out).toBe(path.join(DIST, 'network', 'fetch-preload.js'));
    expect(fs.existsSync(out)).toBe(true);
  });
});

describe.runIf(caps.linux && havePreload)('fetch preload inside the sandbox', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    it.skipIf(skip)("without the preload the report says how to route Node's fetch through the proxy; with it, it says nothing", async () => {
      const url = `http://allowed.test:${web.port}/no-preload`;
      const before = web.requests.length;
      const r = await runWithProxy(mode, { allow: ['allowed.test'], allowLocal: true }, process.execPath, ['-e', FETCH, url], { env: BASE_ENV });
      expect(r.code, r.stderr).toBe(0);
      const note = (r.enforcement.notes ?? []).find((n) => n.startsWith("Node's built-in fetch"));
      expect(note).toBe(
        "Node's built-in fetch uses the proxy only in Node 22.21+ and 24+ (NODE_USE_ENV_PROXY=1 is set); an older Node ignores HTTP(S)_PROXY " +
          `and its fetch fails to connect (EACCES, ECONNREFUSED or a DNS error). To route it through the proxy, set env.NODE_OPTIONS to '--require ${PRELOAD}' ` +
          "(nodeFetchPreloadPath() from 'process-sandbox')",
      );
      if (nodeHonoursEnvProxy()) {
        console.warn("[fetch-preload] this Node honours NODE_USE_ENV_PROXY: its fetch works without the preload; the failing half is not shown");
      } else {
        // What the note is for: this Node's fetch went around the proxy and was refused.
        expect(JSON.parse(r.stdout.trim()).error).toBeDefined();
        expect(web.requests.length).toBe(before);
      }
      // Following the note: the same fetch works, and the report has nothing more to say.
      const ok = await runWithProxy(mode, { allow: ['allowed.test'], allowLocal: true }, process.execPath, ['-e', FETCH, url], {
        env: { ...BASE_ENV, NODE_OPTIONS: `--require ${PRELOAD}` },
      });
      expect(JSON.parse(ok.stdout.trim()).status, ok.stderr).toBe(200);
      expect(ok.enforcement.notes ?? []).toEqual([]);
      expect(web.requests.length).toBe(before + 1);
    });

    it.skipIf(skip)('node fetch reaches an allowed name only through the proxy', async () => {
      const env = { ...BASE_ENV, NODE_OPTIONS: `--require ${PRELOAD}` };
      const before = web.requests.length;
      const r = await runWithProxy(mode, { allow: ['allowed.test'], allowLocal: true }, process.execPath, ['-e', FETCH, `http://allowed.test:${web.port}/in-sandbox`], { env, processId: `${mode}-fetch` });
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout.trim()).status).toBe(200);
      expect(web.requests.length).toBe(before + 1);
      expect(r.events.map((e) => `${e.processId} ${e.protocol} ${e.host} ${e.decision}`)).toEqual([`${mode}-fetch httpsConnect allowed.test allow`]);
      const d = await runWithProxy(mode, { allow: ['allowed.test'], allowLocal: true }, process.execPath, ['-e', FETCH, `http://elsewhere.test:${web.port}/`], { env });
      // runWithProxy's decider refuses names it is asked about: 403, blocked-by-policy.
      expect(JSON.parse(d.stdout.trim()).error).toMatch(/proxy refused CONNECT elsewhere\.test:\d+: HTTP\/1\.1 403 .*blocked-by-policy/);
      expect(web.requests.length).toBe(before + 1);
    });
  });
});
