/**
 * Plain-HTTP response bodies through the proxy, in both relay modes: `auto` hands a large counted
 * body (Content-Length >= BODY_RELAY_MIN) to the addon once its head is written; `js` and every
 * other body (chunked, small, HEAD) go through JS streams. Checked from the outside: sha256 of
 * every body, the client connection kept alive across bodies, how many connections the origin
 * saw (the native path does not return its upstream connection to the pool: that is the positive
 * control that it was used), a short or stalled origin and an aborting client ending the
 * exchange, proxy.close() mid-body, one audit event per request, and this process's fd table (it
 * runs the proxy) back at its baseline.
 */
import { createHash } from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { ManagedProxy, type AuditEvent, type LookupFn, type ManagedProxyOptions } from '../../lib/network';
import { BODY_RELAY_MIN } from '../../lib/network/http-request';
import { nativeRelay } from '../../lib/network/relay';
import { listenOnLoopback, waitFor } from './helpers';

const lookup: LookupFn = async () => [{ address: '127.0.0.1', family: 4 }];
const haveNative = nativeRelay() !== null;
if (!haveNative) console.warn(`native relay unavailable on ${process.platform}: the native body relay cases are skipped`);
const haveProcFd = fs.existsSync('/proc/self/fd');

const MB = 1 << 20;
/** Deterministic body bytes: byte i is (i * 7 + i >> 11) & 0xff, so an offset error changes the hash. */
function bodyOf(n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7 + (i >> 11)) & 0xff;
  return b;
}
const BIG = bodyOf(8 * MB + 4321);
const SMALL = bodyOf(1000);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let origin: { port: number; close(): Promise<void> };
let originConnections = 0;
const originSockets = new Set<net.Socket>();
const proxies: ManagedProxy[] = [];

beforeAll(async () => {
  const server = http.createServer((req, res) => {
    const url = req.url ?? '/';
    if (url === '/big' || url === '/head') return void res.writeHead(200, { 'content-length': BIG.length }).end(req.method === 'HEAD' ? undefined : BIG);
    if (url === '/small') return void res.writeHead(200, { 'content-length': SMALL.length }).end(SMALL);
    if (url === '/chunked') {
      res.writeHead(200, { 'content-type': 'application/octet-stream' }); // no length: chunked
      return void res.end(BIG);
    }
    // Promises the whole length, sends half, then hangs up (/short) or goes quiet (/stall).
    res.writeHead(200, { 'content-length': BIG.length });
    res.write(BIG.subarray(0, BIG.length >> 1), () => {
      if (url === '/short') res.socket?.destroy();
    });
  });
  server.on('connection', (s) => {
    originConnections++;
    originSockets.add(s);
    s.once('close', () => originSockets.delete(s));
  });
  origin = await listenOnLoopback(server);
});

afterAll(async () => {
  for (const s of originSockets) s.destroy();
  await origin.close();
});

afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

async function startProxy(relay: 'auto' | 'js', opts: Partial<ManagedProxyOptions> = {}) {
  const events: AuditEvent[] = [];
  const proxy = await ManagedProxy.start({ lookup, onAudit: (e) => events.push(e), policy: { allow: ['o.test'], allowLocal: true }, relay, ...opts });
  proxies.push(proxy);
  return { proxy, port: (await proxy.attach('body-proc')).port, events };
}

/** One GET through the proxy; the whole body (or what arrived before the exchange ended) and how it ended. */
function get(port: number, pathname: string, agent: http.Agent | false, method = 'GET') {
  return new Promise<{ status: number; body: Buffer; complete: boolean; socket: net.Socket }>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: `http://o.test:${origin.port}${pathname}`, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      const done = () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks), complete: res.complete, socket: res.socket });
      res.on('end', done);
      res.on('aborted', done);
      res.on('error', done);
    });
    req.on('error', reject);
    req.end();
  });
}

/** A GET whose body has begun to arrive (`started`: the response head and its first bytes are through). */
function startedGet(port: number, pathname: string) {
  let began!: () => void;
  const started = new Promise<void>((r) => (began = r));
  const done = new Promise<{ complete: boolean; bytes: number }>((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: `http://o.test:${origin.port}${pathname}`, agent: false }, (res) => {
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        began();
      });
      const end = () => resolve({ complete: res.complete, bytes });
      res.on('end', end);
      res.on('aborted', end);
      res.on('error', end);
    });
    req.on('error', reject);
  });
  return { started, done };
}

function fdCount(): number {
  return fs.readdirSync('/proc/self/fd').length;
}

for (const relay of ['auto', 'js'] as const) {
  const native = relay === 'auto' && haveNative;
  describe(`plain-HTTP bodies, relay: ${relay}${native ? ' (native body relay)' : ''}`, () => {
    it('large, small, chunked and HEAD responses arrive intact on one kept-alive client connection', async () => {
      expect(BIG.length).toBeGreaterThanOrEqual(BODY_RELAY_MIN);
      const { port, events } = await startProxy(relay);
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      const before = originConnections;
      const clientSockets = new Set<net.Socket>();
      const seen: Array<[string, number]> = [];
      for (const p of ['/big', '/small', '/big', '/chunked', '/big', '/small']) {
        const r = await get(port, p, agent);
        clientSockets.add(r.socket);
        expect(r.status).toBe(200);
        expect(r.complete).toBe(true);
        expect(sha(r.body)).toBe(sha(p === '/small' ? SMALL : BIG));
        seen.push([p, originConnections - before]);
      }
      const head = await get(port, '/head', agent, 'HEAD');
      expect(head.status).toBe(200);
      expect(head.body.length).toBe(0);
      clientSockets.add(head.socket);
      agent.destroy();
      // The client kept one connection to the proxy throughout.
      expect(clientSockets.size).toBe(1);
      // Each natively relayed body costs its upstream connection; JS returns it to the pool.
      const used = originConnections - before;
      if (native) expect(used).toBe(4); // three big bodies, then one pooled connection for the rest
      else expect(used).toBe(1);
      expect(events.filter((e) => e.protocol === 'http' && e.decision === 'allow')).toHaveLength(7);
    });

    it('an origin that hangs up mid-body ends the client exchange with what arrived (no hang, no extra bytes)', async () => {
      const { port } = await startProxy(relay);
      const r = await get(port, '/short', false);
      expect(r.status).toBe(200);
      expect(r.complete).toBe(false);
      expect(r.body.length).toBe(BIG.length >> 1);
      expect(sha(r.body)).toBe(sha(BIG.subarray(0, BIG.length >> 1)));
    });

    it.runIf(haveProcFd)('a client that goes away mid-body leaves no fd or origin connection behind', async () => {
      const { port } = await startProxy(relay);
      const base = fdCount();
      const originBefore = originSockets.size;
      await new Promise<void>((resolve, reject) => {
        const req = http.get({ host: '127.0.0.1', port, path: `http://o.test:${origin.port}/stall`, agent: false }, (res) => {
          res.once('data', () => {
            req.destroy();
            resolve();
          });
        });
        req.on('error', () => {});
        req.on('close', () => resolve());
        setTimeout(() => reject(new Error('no body bytes')), 10_000).unref();
      });
      expect(await waitFor(() => originSockets.size === originBefore && fdCount() <= base, 10_000)).toBe(true);
    });

    it.runIf(haveProcFd)('proxy.close() in the middle of a body ends the exchange and releases every fd', async () => {
      const { proxy, port } = await startProxy(relay);
      expect(await waitFor(() => originSockets.size === 0, 10_000)).toBe(true); // earlier cases' connections are gone
      const base = fdCount();
      const pending = startedGet(port, '/stall');
      await pending.started;
      await proxy.close();
      const r = await pending.done;
      expect(r.complete).toBe(false);
      expect(await waitFor(() => fdCount() <= base - 1, 10_000)).toBe(true); // the listener's own fd is gone too
    });
  });
}

describe.runIf(haveNative)('native body relay specifics', () => {
  it('a body that stalls is closed after the tunnel idle timeout (limits.tunnelIdleTimeoutMs)', async () => {
    const { port } = await startProxy('auto', { limits: { tunnelIdleTimeoutMs: 300 } });
    const r = await get(port, '/stall', false);
    expect(r.complete).toBe(false);
    expect(r.body.length).toBe(BIG.length >> 1);
  });

  it('a natively relayed body counts against the socket budget and the listener while it runs', async () => {
    const { port } = await startProxy('auto');
    expect(await waitFor(() => originSockets.size === 0, 10_000)).toBe(true); // earlier cases' connections are gone
    const before = fdCount();
    const pending = startedGet(port, '/stall');
    await pending.started;
    // While stalled: the client socket and the relay's two duplicates (the upstream JS socket is gone).
    expect(await waitFor(() => fdCount() >= before + 3, 5000)).toBe(true);
    for (const s of originSockets) s.destroy();
    const r = await pending.done;
    expect(r.complete).toBe(false);
    expect(r.bytes).toBeLessThanOrEqual(BIG.length >> 1); // the origin was cut off while sending its half
    expect(await waitFor(() => fdCount() <= before, 10_000)).toBe(true);
  });
});
