/**
 * The managed proxy as the Linux sandbox enforces it, in both modes: isolated
 * (the command's net namespace has only lo; the proxy listens inside it) and Landlock (TCP connect
 * only to the proxy's host port; needs degraded: true).
 *
 * From inside the sandbox, with curl, node and python3, each taking the proxy from the env the
 * sandbox gave it:
 *   - an allowed name works (HTTP absolute-form and CONNECT);
 *   - a denied name gets 403 + x-proxy-error, and the decider is not asked;
 *   - a name that is not listed goes to the decider, which allows one and denies another;
 *   - a direct connection to the server's address fails;
 *   - UDP to a host listener, a host unix socket (pathname and abstract) and DNS to any resolver
 *     all fail.
 * From outside, every server counts its connections: a refused request must have reached nothing.
 * Positive controls: the allowed requests above, and the same direct/UDP/unix/DNS probes run
 * unsandboxed, which do arrive.
 */
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { ProxyPolicy } from '../../lib/policy-types';
import { run, spawn } from '../../lib/index';
import type { AuditEvent } from '../../lib/network';
import { modePolicy } from '../helpers/capabilities';
import { caps, MODES } from '../helpers/capabilities';
import { NET_DENIED } from '../helpers/denied';
import { eventually, makeScene, NODE, PROBE, PYTHON, type Scene } from '../helpers/sandbox';
import { BASE_ENV, brief, lookup, NODE_CLIENT, nodeHonoursEnvProxy, parseResult, PY_CLIENT, runWithProxy } from './enforced-helpers';
import { httpViaProxy, startHttpServer, type CountingHttpServer } from './helpers';


/** allowed.test → web; denied.test → denied; ask-yes.test → yes; ask-no.test → no. */
let web: CountingHttpServer;
let denied: CountingHttpServer;
let yes: CountingHttpServer;
let no: CountingHttpServer;
let scene: Scene;
let unixPath: string;
const abstractName = `psb-proxy-abs-${process.pid}`;
const hostHits: string[] = [];
let udpPort = 0;
let resolverPort = 0;
const hostServers: Array<net.Server | dgram.Socket> = [];

const POLICY: ProxyPolicy = { allow: ['allowed.test'], deny: ['denied.test'], allowLocal: true };

const url = (name: string, srv: CountingHttpServer, p: string) => `http://${name}:${srv.port}${p}`;
const counts = () => ({ web: web.connections, denied: denied.connections, yes: yes.connections, no: no.connections });

async function hostUdp(name: string, host: string): Promise<number> {
  const s = dgram.createSocket('udp4');
  hostServers.push(s);
  s.on('message', () => hostHits.push(name));
  await new Promise<void>((res, rej) => {
    s.once('error', rej);
    s.bind(0, host, () => res());
  });
  return s.address().port;
}

async function hostUnix(name: string, address: string): Promise<void> {
  const srv = net.createServer((s) => {
    hostHits.push(name);
    s.on('error', () => {});
    s.destroy();
  });
  hostServers.push(srv);
  await new Promise<void>((res) => srv.listen(address, () => res()));
}

const hostHasV6Loopback = (() => {
  try {
    return fs.readFileSync('/proc/net/if_inet6', 'utf8').includes('00000000000000000000000000000001');
  } catch {
    return false;
  }
})();

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** Let in-flight packets land before judging a listener (not a timing assertion). */
const settle = () => new Promise((r) => setTimeout(r, 200));

if (!nodeHonoursEnvProxy()) {
  // eslint-disable-next-line no-console
  console.warn(`[enforced] SKIPPING the NODE_USE_ENV_PROXY variant: Node ${process.versions.node} does not honour it (22.21+ or 24+ does)`);
}

describe.runIf(caps.linux)('managed network enforced by the Linux sandbox', () => {
  beforeAll(async () => {
    [web, denied, yes, no] = await Promise.all([startHttpServer(), startHttpServer(), startHttpServer(), startHttpServer()]);
    scene = makeScene('proxy');
    unixPath = path.join(scene.root, 'host.sock');
    await hostUnix('unix', unixPath);
    fs.chmodSync(unixPath, 0o777);
    await hostUnix('abstract', `\0${abstractName}`);
    udpPort = await hostUdp('udp', '127.0.0.1');
    resolverPort = await hostUdp('resolver', '127.0.0.53');
  });
  afterAll(async () => {
    await Promise.all([web, denied, yes, no].map((s) => s?.close()));
    for (const s of hostServers) s.close();
    scene?.cleanup();
  });
  beforeEach(() => {
    hostHits.length = 0;
  });

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const id = (what: string) => `${mode}-${what}`;

    it.skipIf(skip)('the report says the network goes through the proxy only', async () => {
      const r = await runWithProxy(mode, POLICY, '/bin/true', []);
      expect(r.code).toBe(0);
      // Landlock mode is enforced only with the connect supervisor (this kernel has it or not).
      const supervised = mode === 'landlock' && caps.connectSupervisor;
      expect(r.enforcement.guarantees.network).toBe(mode === 'isolated' || supervised ? 'enforced' : 'partial');
      expect(String(r.enforcement.mechanisms.network)).toMatch(/^proxy only \(127\.0\.0\.1:\d+/);
      expect(r.enforcement.mechanisms.connectSupervisor).toBe(supervised ? 'seccomp-user-notif' : undefined);
      if (mode === 'isolated') {
        expect(r.enforcement.mechanisms.namespaces).toContain('net');
      }
      // Without the supervisor, the residual gap of the Landlock mode is stated; with it, not.
      expect(r.enforcement.gaps.some((g) => /proxy's port \d+ are not blocked/.test(g))).toBe(mode === 'landlock' && !supervised);
    });

    it.skipIf(skip)('the command sees only our proxy variables: caller-supplied ones pointing elsewhere are replaced or dropped', async () => {
      const env = {
        ...BASE_ENV,
        HTTP_PROXY: 'http://evil.example:3128',
        https_proxy: 'http://evil.example:3128',
        ALL_PROXY: 'socks5://evil.example:1080',
        NO_PROXY: '*',
        RSYNC_PROXY: 'evil.example:873',
        GIT_PROXY_COMMAND: '/bin/evil',
        npm_config_https_proxy: 'http://evil.example:3128',
      };
      const r = await runWithProxy(mode, POLICY, '/usr/bin/env', [], { env });
      const seen = Object.fromEntries(
        r.stdout
          .trim()
          .split('\n')
          .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
      );
      const port = /^http:\/\/127\.0\.0\.1:(\d+)$/.exec(seen.HTTP_PROXY)?.[1];
      expect(port, r.stdout).toBeDefined();
      expect(String(r.enforcement.mechanisms.network)).toContain(`127.0.0.1:${port}`);
      expect(seen).toMatchObject({
        https_proxy: `http://127.0.0.1:${port}`,
        npm_config_https_proxy: `http://127.0.0.1:${port}`,
        ALL_PROXY: `socks5h://127.0.0.1:${port}`,
        NO_PROXY: '',
        NODE_USE_ENV_PROXY: '1',
      });
      expect(seen.RSYNC_PROXY).toBeUndefined();
      expect(seen.GIT_PROXY_COMMAND).toBeUndefined();
      expect(r.stdout).not.toContain('evil.example');
    });

    it.skipIf(skip)('SOCKS5 (curl -x $ALL_PROXY): an allowed name works, a denied one is refused and reaches nothing', async () => {
      const before = counts();
      const sh = [
        `curl -sS -m 20 -x "$ALL_PROXY" -o /dev/null -w '%{http_code}\n' "${url('allowed.test', web, '/s1')}"`,
        `curl -sS -m 20 -x "$ALL_PROXY" -o /dev/null "${url('denied.test', denied, '/s2')}" 2>/dev/null; echo "denied=$?"`,
      ].join('\n');
      const r = await runWithProxy(mode, POLICY, '/bin/sh', ['-c', sh], { processId: id('socks') });
      const [ok, refused] = r.stdout.trim().split('\n');
      expect(ok, r.stderr).toBe('200');
      expect(refused).toMatch(/^denied=[1-9]\d*$/);
      expect(brief(r.events)).toEqual([`${id('socks')} socks5Tcp allowed.test allow allowlist`, `${id('socks')} socks5Tcp denied.test deny denylist`]);
      expect(counts()).toEqual({ ...before, web: before.web + 1 });
    });

    it.skipIf(skip)('limited mode: GET passes; POST and CONNECT get 403 blocked-by-method-policy and reach nothing', async () => {
      const before = counts();
      const u = url('allowed.test', web, '/lim');
      const hdr = (args: string) => `curl -sS -m 20 ${args} -D - -o /dev/null "${u}" | tr -d '\r' | grep -Ei '^(HTTP/|x-proxy-error:)' | tr '\n' ' '; echo`;
      const sh = [hdr(''), hdr('-X POST -d x=1'), `curl -sS -m 20 -p -o /dev/null -w '%{http_connect}\n' "${u}" 2>/dev/null || true`].join('\n');
      const r = await runWithProxy(mode, { ...POLICY, mode: 'limited' }, '/bin/sh', ['-c', sh], { processId: id('limited') });
      expect(r.stdout.trim().split('\n').map((l) => l.trim()), r.stderr).toEqual([
        'HTTP/1.1 200 OK',
        'HTTP/1.1 403 Forbidden x-proxy-error: blocked-by-method-policy',
        '403',
      ]);
      expect(r.events.map((e) => `${e.protocol} ${e.method} ${e.decision}`)).toEqual(['http GET allow', 'http POST deny', 'httpsConnect CONNECT deny']);
      expect(counts()).toEqual({ ...before, web: before.web + 1 });
    });

    // In the isolated mode the listener lives in the sandbox's namespace: a host process cannot
    // reach it. In the Landlock mode it is a host loopback listener that serves only the
    // connections the connect supervisor made (test/linux/proxy-peers.test.ts). Without the
    // supervisor it tells them apart by uid only, so this host process (same uid) can use it:
    // a KNOWN GAP listed in the report's gaps, which `.fails` marks.
    (skip ? it.skip : mode === 'landlock' && !caps.connectSupervisor ? it.fails : it)('only the sandboxed command can use its proxy listener', async () => {
      const events: AuditEvent[] = [];
      const child = spawn('/bin/sleep', ['30'], {
        env: BASE_ENV,
        policy: modePolicy(mode, { network: { proxy: POLICY } }),
        proxy: { lookup, onAudit: (e) => events.push(e), processId: id('listener') },
      });
      try {
        const port = Number(/127\.0\.0\.1:(\d+)/.exec(String(child.enforcement.mechanisms.network))?.[1]);
        expect(port).toBeGreaterThan(0);
        await settle(); // the parent attaches the listener asynchronously
        const before = web.connections;
        const outcome = await httpViaProxy(port, url('allowed.test', web, '/from-host')).then(
          (res) => String(res.status),
          (e: NodeJS.ErrnoException) => e.code ?? 'error',
        );
        expect(events, `a host process used the sandbox's proxy (${outcome})`).toEqual([]);
        expect(web.connections).toBe(before);
      } finally {
        child.kill('SIGKILL');
        await child.exited;
      }
    });

    it.skipIf(skip)('without degraded: true, a proxy policy in this mode runs exactly when every guarantee it asks for holds (isolated: always)', async () => {
      const opts = { env: BASE_ENV, proxy: { lookup: async () => [] } };
      const withDegraded = await run('/bin/true', [], { ...opts, policy: { mode, degraded: true, network: { proxy: POLICY } } });
      const needs = withDegraded.enforcement.degradedBy ?? [];
      let err: unknown;
      try {
        await run('/bin/true', [], { ...opts, policy: { mode, network: { proxy: POLICY } } });
      } catch (e) {
        err = e;
      }
      if (mode === 'landlock' && needs.length > 0) {
        expect(err).toMatchObject({ name: 'SandboxError', code: expect.stringMatching(/^E[A-Z_]+$/) });
        for (const g of needs) expect((err as Error).message).toContain(g);
      } else expect(err).toBeUndefined();
    });

    it.skipIf(skip)('curl: allowed works (HTTP and CONNECT), denied gets 403, unlisted names go to the decider', async () => {
      const before = counts();
      const script = [
        // HTTP absolute-form: status and the x-proxy-error header.
        ...[url('allowed.test', web, '/c1'), url('denied.test', denied, '/c2'), url('ask-yes.test', yes, '/c3'), url('ask-no.test', no, '/c4')].map(
          (u) => `curl -sS -m 20 -D - -o /dev/null "${u}" | tr -d '\\r' | grep -Ei '^(HTTP/|x-proxy-error:)' | tr '\\n' ' '; echo`,
        ),
        // CONNECT (-p): the CONNECT reply code and the code of the request made inside the tunnel.
        `curl -sS -m 20 -p -o /dev/null -w '%{http_connect} %{http_code}\\n' "${url('allowed.test', web, '/c5')}" 2>/dev/null || true`,
        `curl -sS -m 20 -p -o /dev/null -w '%{http_connect} %{http_code}\\n' "${url('denied.test', denied, '/c6')}" 2>/dev/null || true`,
      ].join('\n');
      const r = await runWithProxy(mode, POLICY, '/bin/sh', ['-c', script], { processId: id('curl') });
      const lines = r.stdout.trim().split('\n').map((l) => l.trim());
      expect(lines, r.stderr).toEqual([
        'HTTP/1.1 200 OK',
        'HTTP/1.1 403 Forbidden x-proxy-error: blocked-by-denylist',
        'HTTP/1.1 200 OK',
        'HTTP/1.1 403 Forbidden x-proxy-error: blocked-by-policy',
        '200 200',
        '403 000',
      ]);
      expect(brief(r.events)).toEqual([
        `${id('curl')} http allowed.test allow allowlist`,
        `${id('curl')} http denied.test deny denylist`,
        `${id('curl')} http ask-yes.test allow decider`,
        `${id('curl')} http ask-no.test deny decider`,
        `${id('curl')} httpsConnect allowed.test allow allowlist`,
        `${id('curl')} httpsConnect denied.test deny denylist`,
      ]);
      // The decider hears only the allowlist misses, never the explicit deny.
      expect(r.deciderCalls.map((c) => `${c.processId} ${c.host}`)).toEqual([`${id('curl')} ask-yes.test`, `${id('curl')} ask-no.test`]);
      // Outside: the allowed servers saw exactly their requests; the refused ones saw nothing.
      expect(counts()).toEqual({ ...before, web: before.web + 2, yes: before.yes + 1 });
      expect(web.requests.map((q) => q.url)).toEqual(expect.arrayContaining(['/c1', '/c5']));
    });

    it.skipIf(skip || !caps.python)('python3 urllib (proxy from the env): allowed, denied, decider yes and no', async () => {
      const before = counts();
      const urls = [url('allowed.test', web, '/p1'), url('denied.test', denied, '/p2'), url('ask-yes.test', yes, '/p3'), url('ask-no.test', no, '/p4')];
      const r = await runWithProxy(mode, POLICY, PYTHON, ['-c', PY_CLIENT, ...urls], { processId: id('py') });
      const out = parseResult<{ status: number; xerr: string | null; body: string }>(r);
      expect(out.map((o) => [o.status, o.xerr]), r.stderr).toEqual([
        [200, null],
        [403, 'blocked-by-denylist'],
        [200, null],
        [403, 'blocked-by-policy'],
      ]);
      expect(JSON.parse(out[0].body).url).toBe('/p1');
      expect(brief(r.events)).toEqual([
        `${id('py')} http allowed.test allow allowlist`,
        `${id('py')} http denied.test deny denylist`,
        `${id('py')} http ask-yes.test allow decider`,
        `${id('py')} http ask-no.test deny decider`,
      ]);
      expect(r.deciderCalls.map((c) => c.host)).toEqual(['ask-yes.test', 'ask-no.test']);
      expect(counts()).toEqual({ ...before, web: before.web + 1, yes: before.yes + 1 });
    });

    it.skipIf(skip)('node http (proxy from HTTP_PROXY): allowed, denied, decider, and CONNECT', async () => {
      const before = counts();
      const actions = [
        ['http', url('allowed.test', web, '/n1')],
        ['http', url('denied.test', denied, '/n2')],
        ['http', url('ask-yes.test', yes, '/n3')],
        ['http', url('ask-no.test', no, '/n4')],
        ['connect', `allowed.test:${web.port}`, '/n5'],
        ['connect', `denied.test:${denied.port}`, '/n6'],
        ['connect', `ask-no.test:${no.port}`, '/n7'],
      ];
      const r = await runWithProxy(mode, POLICY, NODE, ['-e', NODE_CLIENT, JSON.stringify(actions)], { processId: id('node') });
      const out = parseResult<{ status: number; xerr: string | null; inner?: string }>(r);
      expect(out.map((o) => [o.status, o.xerr]), r.stderr).toEqual([
        [200, null],
        [403, 'blocked-by-denylist'],
        [200, null],
        [403, 'blocked-by-policy'],
        [200, null],
        [403, 'blocked-by-denylist'],
        [403, 'blocked-by-policy'],
      ]);
      expect(out[4].inner).toBe('HTTP/1.1 200 OK');
      expect(brief(r.events).map((e) => e.split(' ').slice(1).join(' '))).toEqual([
        'http allowed.test allow allowlist',
        'http denied.test deny denylist',
        'http ask-yes.test allow decider',
        'http ask-no.test deny decider',
        'httpsConnect allowed.test allow allowlist',
        'httpsConnect denied.test deny denylist',
        'httpsConnect ask-no.test deny decider',
      ]);
      expect(new Set(r.events.map((e) => e.processId))).toEqual(new Set([id('node')]));
      expect(counts()).toEqual({ ...before, web: before.web + 2, yes: before.yes + 1 });
    });

    it.skipIf(skip || !nodeHonoursEnvProxy())(
      `node fetch and http.get follow NODE_USE_ENV_PROXY (needs Node 22.21+ or 24+, this is ${process.versions.node})`,
      async () => {
        const before = counts();
        const code =
          "const http=require('http');const [a,b,c]=process.argv.slice(1);" +
          "(async()=>{const r1=await fetch(a);const r2=await fetch(b);" +
          "const s3=await new Promise((res)=>http.get(c,(r)=>{r.resume();res(r.statusCode)}).on('error',(e)=>res(e.code)));" +
          "console.log('RESULT '+JSON.stringify([r1.status,r2.status,r2.headers.get('x-proxy-error'),s3]))})()";
        const r = await runWithProxy(mode, POLICY, NODE, ['-e', code, url('allowed.test', web, '/f1'), url('denied.test', denied, '/f2'), url('allowed.test', web, '/f3')], {
          processId: id('fetch'),
        });
        expect(parseResult(r), r.stderr).toEqual([200, 403, 'blocked-by-denylist', 200]);
        expect(counts()).toEqual({ ...before, web: before.web + 2 });
      },
    );

    it.skipIf(skip)('a direct connection to the server\'s address fails (curl, node, python); unsandboxed it arrives', async () => {
      const before = counts();
      const sh = `curl -sS -m 5 --noproxy '*' -o /dev/null "http://127.0.0.1:${web.port}/direct" 2>&1; echo "curl=$?"`;
      const c = await runWithProxy(mode, POLICY, '/bin/sh', ['-c', sh], { processId: id('direct') });
      const curlRc = Number(/curl=(\d+)/.exec(c.stdout)?.[1]);
      expect(curlRc, c.stdout).not.toBe(0);
      const n = await runWithProxy(mode, POLICY, NODE, ['-e', NODE_CLIENT, JSON.stringify([['direct', '127.0.0.1', web.port], ['direct', 'localhost', web.port]])]);
      for (const x of parseResult<string>(n)) expect(NET_DENIED, n.stdout).toContain(x);
      if (caps.python) {
        const p = await runWithProxy(mode, POLICY, PYTHON, ['-c', PY_CLIENT, `direct:127.0.0.1:${web.port}`]);
        for (const x of parseResult<string>(p)) expect(NET_DENIED, p.stdout).toContain(x);
      }
      await settle();
      // No request went through the proxy either, and the server saw nothing.
      expect([...c.events, ...n.events]).toEqual([]);
      expect(counts()).toEqual(before);
      // Control: the same node client unsandboxed connects.
      const ctl = await run(NODE, ['-e', NODE_CLIENT, JSON.stringify([['direct', '127.0.0.1', web.port]])], { env: BASE_ENV, policy: null });
      expect(parseResult(ctl)).toEqual(['ok']);
      await eventually(() => web.connections === before.web + 1);
      expect(web.connections).toBe(before.web + 1);
    });

    it.skipIf(skip || mode !== 'landlock' || !hostHasV6Loopback)(
      `Landlock mode: the proxy's port is closed on ::1 (no IPv6 sockets) and, with the connect supervisor, on other IPv4 addresses (else a listed gap)${mode !== 'landlock' ? ' (Landlock mode only)' : hostHasV6Loopback ? '' : ' (SKIPPED: the host has no ::1)'}`,
      async () => {
        // The command learns the proxy's port P from its env and waits for the go-file; then the
        // host listens on [::1]:P and 127.0.0.2:P, and the command tries both.
        const go = path.join(scene.root, `go-${mode}`);
        const script = `
const net = require('net'); const fs = require('fs');
const port = Number(new URL(process.env.HTTP_PROXY).port);
console.log('port ' + port);
const tryConnect = (host) => new Promise((r) => {
  const s = net.connect({ host, port }); s.once('connect', () => { s.end('hello'); r('ok'); }); s.once('error', (e) => r(e.code));
});
const wait = () => fs.existsSync(process.argv[1]) ? Promise.resolve() : new Promise((r) => setTimeout(r, 20)).then(wait);
wait().then(async () => console.log(JSON.stringify([await tryConnect('::1'), await tryConnect('127.0.0.2'), await tryConnect('127.0.0.1')])));`;
        const hits: string[] = [];
        const servers: net.Server[] = [];
        const listen = (host: string, port: number) =>
          new Promise<void>((res, rej) => {
            const srv = net.createServer((c) => {
              hits.push(host);
              c.on('error', () => {});
              c.resume();
            });
            servers.push(srv);
            srv.once('error', rej);
            srv.listen(port, host, () => res());
          });
        const runOnce = async (sandboxed: boolean) => {
          hits.length = 0;
          fs.rmSync(go, { force: true });
          const child = spawn(NODE, ['-e', script, go], {
            cwd: '/',
            env: sandboxed ? BASE_ENV : { ...BASE_ENV, HTTP_PROXY: `http://127.0.0.1:${await freePort()}` },
            stdio: 'pipe',
            policy: sandboxed ? modePolicy(mode, { network: { proxy: POLICY } }) : null,
            ...(sandboxed ? { proxy: { lookup } } : {}),
          });
          let out = '';
          child.stdout!.on('data', (c: Buffer) => (out += c));
          expect(await eventually(() => /^port \d+$/m.test(out)), out).toBe(true);
          const port = Number(/^port (\d+)$/m.exec(out)![1]);
          await listen('::1', port);
          await listen('127.0.0.2', port);
          fs.writeFileSync(go, '');
          const exit = await child.exited;
          expect(exit.code, out).toBe(0);
          for (const srv of servers.splice(0)) srv.close();
          return { results: JSON.parse(out.trim().split('\n').at(-1)!) as string[], hits: [...hits], report: child.enforcement };
        };
        const sandboxed = await runOnce(true);
        await settle();
        // ::1 refused inside; the proxy itself (127.0.0.1) is reached.
        expect(NET_DENIED).toContain(sandboxed.results[0]);
        expect(sandboxed.results[2]).toBe('ok');
        if (caps.connectSupervisor) {
          // The supervisor hands over connections to 127.0.0.1:P only: 127.0.0.2:P is refused by
          // Landlock, and its listener never sees a connection.
          expect(sandboxed.report!.mechanisms.connectSupervisor).toBe('seccomp-user-notif');
          expect(NET_DENIED).toContain(sandboxed.results[1]);
          expect(sandboxed.hits).toEqual([]);
          expect(sandboxed.report!.gaps.some((g) => /any IPv4 address on that port/.test(g))).toBe(false);
        } else {
          // 127.0.0.2 on the proxy's port gets through: the gap the report lists.
          expect(sandboxed.results[1]).toBe('ok');
          expect(sandboxed.hits).toEqual(['127.0.0.2']);
          expect(sandboxed.report!.gaps.some((g) => /any IPv4 address on that port/.test(g) && /IPv6 sockets are refused/.test(g))).toBe(true);
        }
        // Control: unsandboxed, both listeners are reached (nothing listens on 127.0.0.1:P then).
        const plain = await runOnce(false);
        await settle();
        expect(plain.results.slice(0, 2)).toEqual(['ok', 'ok']);
        expect(plain.hits.sort()).toEqual(['127.0.0.2', '::1']);
      },
    );

    it.skipIf(skip)('UDP to a host listener and host unix sockets (pathname, abstract) are unreachable', async () => {
      const ops = [
        ['udp4', '127.0.0.1', udpPort],
        ['unix', unixPath],
        ['unix', `@${abstractName}`],
      ];
      // A non-loopback destination too (sandboxed only: the control must not send it anywhere).
      const external = ['udp4', '192.0.2.1', 53];
      const r = await runWithProxy(mode, POLICY, NODE, [PROBE, JSON.stringify([...ops, external])], { cwd: scene.ws, write: [scene.ws] });
      const line = r.stdout.split('\n').find((l) => l.startsWith('PROBE '));
      expect(line, r.stderr).toBeDefined();
      const results = JSON.parse(line!.slice('PROBE '.length)) as string[];
      const [udpLoop, ...rest] = results;
      for (const x of rest) expect(NET_DENIED, JSON.stringify(results)).toContain(x);
      // Isolated mode: UDP sockets exist, and a datagram to 127.0.0.1 goes to the namespace's own
      // lo, where nothing listens (sendto reports success). What counts is that the host listener
      // below receives nothing. Landlock mode: no UDP socket at all.
      if (mode === 'isolated') expect(['ok', ...NET_DENIED]).toContain(udpLoop);
      else expect(NET_DENIED).toContain(udpLoop);
      await settle();
      expect(hostHits, 'a host listener received something').toEqual([]);
      expect(r.events).toEqual([]);
      // Control: unsandboxed, all three arrive.
      const ctl = await run(NODE, [PROBE, JSON.stringify(ops)], { env: BASE_ENV, policy: null });
      expect(ctl.stdout).toContain('PROBE ["ok","ok","ok"]');
      await eventually(() => hostHits.length >= 3);
      expect([...hostHits].sort()).toEqual(['abstract', 'udp', 'unix']);
    });

    it.skipIf(skip)('DNS to any resolver fails (a host resolver listener, and the system resolver)', async () => {
      const code =
        "const dns=require('dns');const r=new dns.promises.Resolver({timeout:1000,tries:1});r.setServers([process.argv[1]]);" +
        "const q=(p)=>p.then(()=>'ok',(e)=>e.code);" +
        "(async()=>console.log('RESULT '+JSON.stringify([await q(r.resolve4('exfil.example.com')),await q(dns.promises.lookup('example.com'))])))()";
      const r = await runWithProxy(mode, POLICY, NODE, ['-e', code, `127.0.0.53:${resolverPort}`]);
      const [viaResolver, viaSystem] = parseResult<string>(r);
      expect(viaResolver, r.stderr).not.toBe('ok');
      expect(viaSystem, r.stderr).not.toBe('ok');
      if (caps.python) {
        const p = await runWithProxy(mode, POLICY, PYTHON, [
          '-c',
          'import socket,sys\ntry:\n  s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.sendto(b"\\x12\\x34DNS",("127.0.0.53",int(sys.argv[1]))); print("ok")\nexcept OSError as e:\n  print(e.errno)',
          String(resolverPort),
        ]);
        // Isolated mode: the datagram lands on the namespace's own lo (see the UDP test).
        if (mode === 'landlock') expect(p.stdout.trim()).not.toBe('ok');
      }
      await settle();
      expect(hostHits, 'the resolver listener received a query').toEqual([]);
      // Control: unsandboxed, the query reaches the resolver listener (which never answers).
      await run(NODE, ['-e', code, `127.0.0.53:${resolverPort}`], { env: BASE_ENV, policy: null });
      await eventually(() => hostHits.includes('resolver'));
      expect(hostHits).toContain('resolver');
    });
  });
});
