/**
 * The enforced managed network under load and at teardown, in both Linux modes:
 *   - 100 MB through CONNECT from inside the sandbox arrive with the server's sha256;
 *   - 200 concurrent requests from 8 concurrent sandboxes sharing ONE ManagedProxy
 *     (`proxy.instance`, distinct processIds) are attributed to the right sandbox;
 *   - the proxy closes with its last process: no listener, socket, timer or fd is left in this
 *     process (process.getActiveResourcesInfo() and /proc/self/fd before and after).
 * From outside, the servers count what reached them.
 */
import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { run } from '../../lib/index';
import { ManagedProxy, type AuditEvent } from '../../lib/network';
import type { ProxyPolicy } from '../../lib/policy-types';
import { caps, modePolicy, MODES } from '../helpers/capabilities';
import { eventually, NODE } from '../helpers/sandbox';
import { BASE_ENV, lookup, parseResult, runWithProxy } from './enforced-helpers';
import { startHttpServer, startTcpServer, type CountingHttpServer, type CountingTcpServer } from './helpers';

const MB100 = 100 * 1024 * 1024;

/** Inside the sandbox: CONNECT through HTTP_PROXY, ask the raw server for n bytes, hash them. */
const BULK_CLIENT = String.raw`
const net = require('net');
const crypto = require('crypto');
const proxy = new URL(process.env.HTTP_PROXY);
const [target, n] = process.argv.slice(1);
const s = net.connect(Number(proxy.port), proxy.hostname);
const hash = crypto.createHash('sha256');
let head = Buffer.alloc(0), tunnel = false, bytes = 0, status = '';
s.on('connect', () => s.write('CONNECT ' + target + ' HTTP/1.1\r\nHost: ' + target + '\r\n\r\n'));
s.on('data', (c) => {
  if (!tunnel) {
    head = Buffer.concat([head, c]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) return;
    status = head.subarray(0, head.indexOf('\r\n')).toString();
    tunnel = true;
    c = head.subarray(end + 4);
    s.write('SEND ' + n + '\n');
  }
  bytes += c.length;
  hash.update(c);
});
s.on('end', () => console.log('RESULT ' + JSON.stringify([status, bytes, hash.digest('hex')])));
s.on('error', (e) => console.log('RESULT ' + JSON.stringify([status, bytes, e.code])));
`;

/** Inside the sandbox: `count` concurrent absolute-form requests through HTTP_PROXY. */
const FLEET_CLIENT = String.raw`
const http = require('http');
const proxy = new URL(process.env.HTTP_PROXY);
const [host, port, tag, count] = process.argv.slice(1);
const one = (j) => new Promise((resolve) => {
  const url = 'http://' + host + ':' + port + '/' + tag + '/' + j;
  const req = http.request({ host: proxy.hostname, port: proxy.port, path: url, headers: { host: host + ':' + port, 'x-tag': tag }, agent: false }, (res) => {
    let body = '';
    res.on('data', (c) => (body += c));
    res.on('end', () => resolve(res.statusCode === 200 && JSON.parse(body).tag === tag ? 'ok' : 'bad ' + res.statusCode));
  });
  req.on('error', (e) => resolve('error ' + e.code));
  req.end();
});
Promise.all(Array.from({ length: Number(count) }, (_, j) => one(j))).then((r) => console.log('RESULT ' + JSON.stringify(r)));
`;

let web: CountingHttpServer;
let raw: CountingTcpServer;

/** Active handles by type, and this process's open fds. */
function resources(): { handles: Record<string, number>; fds: number } {
  const handles: Record<string, number> = {};
  for (const r of process.getActiveResourcesInfo()) handles[r] = (handles[r] ?? 0) + 1;
  return { handles, fds: fs.readdirSync('/proc/self/fd').length };
}

/** A reading that holds for a few consecutive looks (earlier tests' sockets finish closing first). */
async function steady(): Promise<ReturnType<typeof resources>> {
  let last = JSON.stringify(resources());
  let same = 0;
  for (let i = 0; i < 100 && same < 3; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const now = JSON.stringify(resources());
    same = now === last ? same + 1 : 0;
    last = now;
  }
  return JSON.parse(last) as ReturnType<typeof resources>;
}

/** Waits until the resources are back to `before` (closes finish a loop turn later); returns the last reading. */
async function backTo(before: ReturnType<typeof resources>): Promise<ReturnType<typeof resources>> {
  await eventually(() => JSON.stringify(resources()) === JSON.stringify(before), 5000);
  return resources();
}

describe.runIf(caps.linux)('enforced managed network: bulk, concurrency, cleanup', () => {
  beforeAll(async () => {
    [web, raw] = await Promise.all([startHttpServer(), startTcpServer()]);
  });
  afterAll(async () => {
    await Promise.all([web?.close(), raw?.close()]);
  });

  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    it.skipIf(skip)('100 MB through CONNECT from inside the sandbox arrive with the same sha256', async () => {
      const before = raw.connections;
      const sentBefore = raw.sent.length;
      const r = await runWithProxy(mode, { allow: ['bulk.test'], allowLocal: true }, NODE, ['-e', BULK_CLIENT, `bulk.test:${raw.port}`, String(MB100)], {
        processId: `${mode}-bulk`,
        timeout: 180_000,
      });
      const [status, bytes, digest] = parseResult<string | number>(r);
      expect(status, r.stderr).toBe('HTTP/1.1 200 Connection Established');
      expect(bytes).toBe(MB100);
      expect(raw.sent.length).toBe(sentBefore + 1);
      expect(digest).toBe(raw.sent[raw.sent.length - 1]);
      expect(raw.connections).toBe(before + 1);
      expect(r.events.map((e) => `${e.processId} ${e.protocol} ${e.host} ${e.decision}`)).toEqual([`${mode}-bulk httpsConnect bulk.test allow`]);
    }, 240_000);

    it.skipIf(skip)('200 concurrent requests from 8 sandboxes sharing one proxy are attributed to the right sandbox', async () => {
      const events: AuditEvent[] = [];
      const policy: ProxyPolicy = { allow: ['**.fleet.test'], allowLocal: true };
      const proxy = ManagedProxy.create({ policy, lookup, onAudit: (e) => events.push(e) });
      const requestsBefore = web.requests.length;
      const connectionsBefore = web.connections;
      const N = 8;
      const PER = 25;
      const runs = await Promise.all(
        Array.from({ length: N }, (_, i) =>
          run(NODE, ['-e', FLEET_CLIENT, `s${i}.fleet.test`, String(web.port), `${mode}-s${i}`, String(PER)], {
            env: BASE_ENV,
            timeout: 120_000,
            policy: modePolicy(mode, { network: { proxy: policy } }),
            proxy: { instance: proxy, processId: `${mode}-fleet-${i}` },
          }),
        ),
      );
      for (const [i, r] of runs.entries()) {
        expect(r.code, `sandbox ${i}: ${r.stderr}`).toBe(0);
        expect(parseResult(r)).toEqual(Array(PER).fill('ok'));
      }
      // Every decision is attributed to the sandbox that made it (its host name says which).
      expect(events).toHaveLength(N * PER);
      for (const e of events) {
        const i = /^s(\d)\.fleet\.test$/.exec(e.host)?.[1];
        expect(e.processId, `${e.host} from ${e.client}`).toBe(`${mode}-fleet-${i}`);
        expect(e.decision).toBe('allow');
      }
      const perProcess: Record<string, number> = {};
      for (const e of events) perProcess[e.processId] = (perProcess[e.processId] ?? 0) + 1;
      expect(perProcess).toEqual(Object.fromEntries(Array.from({ length: N }, (_, i) => [`${mode}-fleet-${i}`, PER])));
      // Outside: the server got exactly these 200 requests, each from the sandbox it names.
      const got = web.requests.slice(requestsBefore);
      expect(got).toHaveLength(N * PER);
      // Pooled upstream connections: at least one, never more than one per request.
      expect(web.connections - connectionsBefore).toBeGreaterThan(0);
      expect(web.connections - connectionsBefore).toBeLessThanOrEqual(N * PER);
      for (const q of got) expect(q.url.split('/')[1]).toBe(q.headers['x-tag']);
      // The shared proxy closed with its last process.
      expect(proxy.closed).toBe(true);
      expect(proxy.attachedProcessIds).toEqual([]);
    }, 180_000);

    it.skipIf(skip)('the proxy closes with its last process: no listener, socket, timer or fd left behind', async () => {
      // Warm up once (lazy module loads, the addon, the probe) so the baseline is steady.
      await runWithProxy(mode, { allow: ['allowed.test'], allowLocal: true }, '/bin/true', []);
      const before = await steady();
      const r = await runWithProxy(
        mode,
        { allow: ['allowed.test'], allowLocal: true },
        '/usr/bin/curl',
        ['-sS', '-m', '20', '-o', '/dev/null', '-w', '%{http_code}', `http://allowed.test:${web.port}/cleanup`],
        { processId: `${mode}-cleanup` },
      );
      expect(r.stdout, r.stderr).toBe('200');
      expect(r.events).toHaveLength(1);
      const after = await backTo(before);
      expect(after).toEqual(before);

      // The same with a shared instance: gone once its only process has exited.
      const proxy = ManagedProxy.create({ policy: { allow: ['allowed.test'], allowLocal: true }, lookup });
      const s = await run('/usr/bin/curl', ['-sS', '-m', '20', '-o', '/dev/null', '-w', '%{http_code}', `http://allowed.test:${web.port}/cleanup2`], {
        env: BASE_ENV,
        policy: modePolicy(mode, { network: { proxy: { allow: ['allowed.test'] } } }),
        proxy: { instance: proxy, processId: `${mode}-cleanup-shared` },
      });
      expect(s.stdout, s.stderr).toBe('200');
      expect(proxy.closed).toBe(true);
      expect(await backTo(before)).toEqual(before);
    });

    // A shared `proxy.instance` that is already closed (e.g. it closed with the previous process
    // that used it) is refused before anything runs.
    (skip ? it.skip : it)('spawning with a closed shared proxy is refused before anything runs', async () => {
      const proxy = ManagedProxy.create({ policy: { allow: ['allowed.test'] }, lookup });
      await proxy.close();
      let err: unknown;
      let result: unknown;
      try {
        result = await run('/bin/echo', ['started'], {
          env: BASE_ENV,
          policy: modePolicy(mode, { network: { proxy: { allow: ['allowed.test'] } } }),
          proxy: { instance: proxy, processId: `${mode}-closed` },
        });
      } catch (e) {
        err = e;
      }
      expect(result, 'the command ran').toBeUndefined();
      expect(err).toMatchObject({ name: 'SandboxError' });
    });
  });
});
