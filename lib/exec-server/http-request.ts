/**
 * http/request (+ `http/request/bodyDelta` notifications): an HTTP request made by the executor,
 * with the reference's shapes and texts. It never goes straight out: every request (and every
 * redirect hop) goes through a ManagedProxy from lib/network with the server's http policy
 * (`ExecServerOptions.httpPolicy`; none configured means every destination is denied), the same
 * proxy and domain rules a sandboxed process's traffic meets. A refused destination is an error,
 * and the proxy's audit event is sent as `network/policyDecision` (processId: the requestId).
 *
 * Bounded per connection: MAX_IN_FLIGHT requests at once, a buffered body of at most
 * MAX_BUFFERED_BODY and all buffered bodies together at most MAX_BUFFERED_TOTAL (larger: use
 * streamResponse, whose response is paused while the client's transport is congested), at most
 * MAX_REDIRECTS hops.
 */
import * as http from 'node:http';
import * as https from 'node:https';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as tls from 'node:tls';
import { ManagedProxy, type Attachment, type AuditEvent, type ProxyPolicyConfig } from '../network';
import { MAX_TIMER_MS } from '../errors';
import type { MethodContext } from './types';
import { decodeBase64, decodeStruct, decodeVariant, INVALID_REQUEST, invalidParams, RpcError } from './decode';
import { Deferred } from './types';

const MAX_IN_FLIGHT = 16;
export const MAX_BUFFERED_BODY = 16 * 1024 * 1024;
const MAX_BUFFERED_TOTAL = 32 * 1024 * 1024;
const MAX_REDIRECTS = 10;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

interface Req {
  method: string;
  url: URL;
  headers: Array<[string, string]>;
  body: Buffer | null;
  timeoutMs: number | null;
  follow: boolean;
  requestId: string;
  stream: boolean;
}

export class HttpRequests {
  private proxy: Promise<{ proxy: ManagedProxy; at: Attachment }> | null = null;
  private readonly inFlight = new Map<string, AbortController>();
  /** The requestId each proxy client port belongs to, for the audit events. */
  private readonly clientIds = new Map<number, string>();
  /** Bytes of buffered response bodies held now, all requests of the connection together. */
  private buffered = 0;

  constructor(private readonly ctx: MethodContext) {}

  async request(params: unknown): Promise<unknown> {
    const r = this.decode(params);
    this.ctx.gate('http');
    if (this.inFlight.has(r.requestId)) throw new RpcError(INVALID_REQUEST, `http request id \`${r.requestId}\` is already in use`);
    if (this.inFlight.size >= MAX_IN_FLIGHT) throw new RpcError(INVALID_REQUEST, `too many http/request calls in flight on this connection (at most ${MAX_IN_FLIGHT})`);
    const abort = new AbortController();
    this.inFlight.set(r.requestId, abort);
    // The transfer runs beside the request queue, as a long-poll does.
    return new Deferred(
      this.run(r, abort.signal).finally(() => {
        if (!r.stream) this.inFlight.delete(r.requestId);
      }),
    );
  }

  close(): void {
    for (const a of this.inFlight.values()) a.abort();
    this.inFlight.clear();
    const p = this.proxy;
    this.proxy = null;
    void p?.then(({ proxy }) => proxy.close()).catch(() => {});
  }

  private decode(params: unknown): Req {
    const p = decodeStruct(params, 'HttpRequestParams', [
      { name: 'method', kind: 'string', required: true },
      { name: 'url', kind: 'string', required: true },
      { name: 'headers', kind: 'any' },
      { name: 'bodyBase64', kind: 'string' },
      { name: 'timeoutMs', kind: 'u64' },
      { name: 'redirectPolicy', kind: 'string' },
      { name: 'requestId', kind: 'string', required: true },
      { name: 'streamResponse', kind: 'bool' },
    ]);
    const headers: Array<[string, string]> = [];
    if (p.headers !== undefined && p.headers !== null) {
      if (!Array.isArray(p.headers)) throw invalidParams('invalid type: map, expected a sequence');
      for (const h of p.headers) {
        const d = decodeStruct(h, 'HttpHeader', [
          { name: 'name', kind: 'string', required: true },
          { name: 'value', kind: 'string', required: true },
        ]);
        headers.push([d.name as string, d.value as string]);
      }
    }
    const follow = p.redirectPolicy === undefined || p.redirectPolicy === null ? true : decodeVariant(p.redirectPolicy, ['follow', 'stop']) === 'follow';
    const body = typeof p.bodyBase64 === 'string' ? decodeBase64(p.bodyBase64) : null;
    let url: URL;
    try {
      url = new URL(p.url as string);
    } catch {
      throw invalidParams('http/request url is invalid: relative URL without a base');
    }
    const scheme = url.protocol.replace(/:$/, '');
    if (scheme !== 'http' && scheme !== 'https') throw invalidParams(`http/request only supports http and https URLs, got ${scheme}`);
    if (!TOKEN.test(p.method as string)) throw invalidParams('http/request method is invalid: invalid HTTP method');
    for (const [n, v] of headers) {
      if (!TOKEN.test(n)) throw invalidParams('http/request header name is invalid: invalid HTTP header name');
      if (/[\r\n\0]/.test(v)) throw invalidParams('http/request header value is invalid: failed to parse header value');
    }
    return {
      method: p.method as string,
      url,
      headers,
      body,
      // The protocol's u64: past Node's timer limit (about 24.8 days) setTimeout would fire at
      // once, so a longer timeout waits that long instead (no request is meant to outlast it).
      timeoutMs: p.timeoutMs === undefined || p.timeoutMs === null ? null : Math.min(p.timeoutMs as number, MAX_TIMER_MS),
      follow,
      requestId: p.requestId as string,
      stream: p.streamResponse === true,
    };
  }

  /** The connection's proxy, started on first use with the server's http policy. */
  private attachment(): Promise<{ proxy: ManagedProxy; at: Attachment }> {
    this.proxy ??= (async () => {
      const policy: ProxyPolicyConfig = this.ctx.options.httpPolicy ?? { allow: [] };
      const proxy = await ManagedProxy.start({
        policy,
        closeWithLastProcess: false,
        enableSocks5: false,
        onAudit: (e: AuditEvent) => this.audit(e),
      });
      return { proxy, at: await proxy.attach('http/request') };
    })();
    return this.proxy;
  }

  private audit(e: AuditEvent): void {
    const port = Number(/:(\d+)$/.exec(e.client ?? '')?.[1]);
    this.ctx.notify('network/policyDecision', { ...e, processId: this.clientIds.get(port) ?? 'http/request', policyOverride: e.policyOverride ?? false });
  }

  private async run(r: Req, signal: AbortSignal): Promise<unknown> {
    const timer = r.timeoutMs !== null ? setTimeout(() => this.inFlight.get(r.requestId)?.abort(new Error('timeout')), r.timeoutMs) : undefined;
    try {
      let url = r.url;
      let method = r.method;
      let body = r.body;
      for (let hop = 0; ; hop++) {
        const res = await this.once(r, url, method, body, signal);
        const loc = res.headers.location;
        if (r.follow && loc && [301, 302, 303, 307, 308].includes(res.statusCode ?? 0) && hop < MAX_REDIRECTS) {
          res.resume();
          url = new URL(loc, url);
          if (res.statusCode === 303 || ((res.statusCode === 301 || res.statusCode === 302) && method === 'POST')) {
            method = 'GET';
            body = null;
          }
          continue;
        }
        return await this.answer(r, res, signal);
      }
    } catch (e) {
      if (e instanceof RpcError) throw e;
      if (signal.aborted && (signal.reason as Error | undefined)?.message === 'timeout') throw new RpcError(-32603, 'http/request failed: request timed out');
      // The reference's text names the URL only (no cause), for every transport failure.
      throw new RpcError(-32603, `http/request failed: error sending request for url (${r.url.href})`);
    } finally {
      if (timer) clearTimeout(timer);
    }
  }

  /** One hop through the proxy: absolute-form for http, CONNECT then TLS for https. */
  private async once(r: Req, url: URL, method: string, body: Buffer | null, signal: AbortSignal): Promise<http.IncomingMessage> {
    const { at } = await this.attachment();
    // Given as a list (repeats kept), Node adds no Host of its own: the URL's, unless one was given.
    const headers = r.headers.some(([n]) => /^host$/i.test(n)) ? r.headers.flat() : ['host', url.host, ...r.headers.flat()];
    const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
    const track = (s: net.Socket) => {
      const p = s.localPort;
      if (p !== undefined) {
        this.clientIds.set(p, r.requestId);
        s.once('close', () => this.clientIds.delete(p));
      }
    };
    let req: http.ClientRequest;
    if (url.protocol === 'http:') {
      req = http.request({ host: at.host, port: at.port, method, path: url.href, headers, signal, agent: false });
      req.once('socket', (s) => (s.connecting ? s.once('connect', () => track(s)) : track(s)));
    } else {
      const ca = trustedRoots(); // before the tunnel, which a refusal here would leave open
      const tunnel = await new Promise<net.Socket>((resolve, reject) => {
        const c = http.request({ host: at.host, port: at.port, method: 'CONNECT', path: `${url.hostname}:${port}`, headers: { host: `${url.hostname}:${port}` }, signal, agent: false });
        c.once('socket', (s) => (s.connecting ? s.once('connect', () => track(s)) : track(s)));
        c.once('connect', (res, socket) => {
          if (res.statusCode === 200) return resolve(socket);
          socket.destroy();
          // A policy refusal carries the proxy's reason; any other answer is an unreachable upstream.
          const why = res.headers['x-proxy-error'];
          reject(typeof why === 'string' && why.startsWith('blocked-') ? denied(url, why, res.statusCode) : new Error(`proxy answered CONNECT with ${res.statusCode}`));
        });
        c.once('error', reject);
        c.end();
      });
      // The certificate is checked against the URL's host (an IP address too: Node would check
      // "localhost" when given no host); SNI carries names only (RFC 6066).
      const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
      const socket = tls.connect({ socket: tunnel, host, servername: net.isIP(host) ? undefined : host, ca });
      req = https.request({ host: url.hostname, port, method, path: url.pathname + url.search, headers, signal, createConnection: () => socket });
    }
    return new Promise((resolve, reject) => {
      req.once('response', (res) => {
        const why = res.headers['x-proxy-error'];
        if (url.protocol === 'http:' && typeof why === 'string' && why.startsWith('blocked-')) {
          res.resume();
          reject(denied(url, why, res.statusCode));
        } else resolve(res);
      });
      req.once('error', reject);
      req.end(body ?? undefined);
    });
  }

  private async answer(r: Req, res: http.IncomingMessage, signal: AbortSignal): Promise<unknown> {
    const headers: Array<{ name: string; value: string }> = [];
    for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) headers.push({ name: res.rawHeaders[i]!.toLowerCase(), value: res.rawHeaders[i + 1]! });
    const status = res.statusCode ?? 0;
    if (r.stream) {
      this.streamBody(r, res, signal);
      return { status, headers, bodyBase64: '' };
    }
    const parts: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of res as AsyncIterable<Buffer>) {
        size += chunk.length;
        this.buffered += chunk.length;
        if (size > MAX_BUFFERED_BODY || this.buffered > MAX_BUFFERED_TOTAL) {
          res.destroy();
          const what = size > MAX_BUFFERED_BODY ? `the response body exceeds ${MAX_BUFFERED_BODY} bytes` : `buffered responses on this connection exceed ${MAX_BUFFERED_TOTAL} bytes`;
          throw new RpcError(-32603, `http/request failed: ${what}; ask with streamResponse: true`);
        }
        parts.push(chunk);
      }
      return { status, headers, bodyBase64: Buffer.concat(parts).toString('base64') };
    } finally {
      this.buffered -= size;
    }
  }

  private streamBody(r: Req, res: http.IncomingMessage, signal: AbortSignal): void {
    let seq = 0;
    const delta = (chunk: Buffer, done: boolean, error: string | null = null): boolean =>
      this.ctx.notify('http/request/bodyDelta', { requestId: r.requestId, seq: ++seq, deltaBase64: chunk.toString('base64'), ...(done ? { done: true, error } : {}) });
    const end = (error: string | null) => {
      if (!this.inFlight.has(r.requestId)) return;
      this.inFlight.delete(r.requestId);
      delta(Buffer.alloc(0), true, error);
    };
    // A client slower than the body pauses the response (TCP backpressure reaches the origin)
    // instead of queueing deltas without end.
    res.on('data', (c: Buffer) => {
      if (!delta(c, false)) {
        res.pause();
        this.ctx.onDrain(() => res.resume());
      }
    });
    res.once('end', () => end(null));
    res.once('error', (e) => end(e.message));
    signal.addEventListener('abort', () => res.destroy(), { once: true });
  }
}

const CA_ENV = ['CODEX_CA_CERTIFICATE', 'SSL_CERT_FILE'] as const;
const MAX_CA_BYTES = 4 * 1024 * 1024;
let rootsCache: { key: string; roots: string[] } | null = null;

/**
 * The roots an https request trusts: the system's (Node's bundled set), plus the PEM bundle named
 * by CODEX_CA_CERTIFICATE (else SSL_CERT_FILE) in the server's environment, as Codex's HTTP client.
 */
function trustedRoots(): string[] | undefined {
  const name = CA_ENV.find((n) => (process.env[n] ?? '') !== '');
  if (name === undefined) return undefined;
  const file = process.env[name]!;
  let key: string;
  try {
    const st = fs.statSync(file);
    if (!st.isFile()) throw new RpcError(-32603, `http/request failed: ${name} does not point at a file (${file})`);
    if (st.size > MAX_CA_BYTES) throw new RpcError(-32603, `http/request failed: ${name} names a file larger than ${MAX_CA_BYTES} bytes (${file})`);
    key = `${file}:${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
  } catch (e) {
    if (e instanceof RpcError) throw e;
    throw new RpcError(-32603, `http/request failed: ${name} points at an unreadable path (${file})`);
  }
  if (rootsCache?.key === key) return rootsCache.roots;
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    throw new RpcError(-32603, `http/request failed: ${name} points at an unreadable file (${file})`);
  }
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) {
    throw new RpcError(-32603, `http/request failed: ${name} (${file}) holds no certificate. If you set CODEX_CA_CERTIFICATE or SSL_CERT_FILE, ensure it points to a PEM file containing one or more CERTIFICATE blocks, or unset it to use system roots.`);
  }
  rootsCache = { key, roots: [...tls.rootCertificates, ...blocks] };
  return rootsCache.roots;
}

function denied(url: URL, why: unknown, status: number | undefined): RpcError {
  return new RpcError(-32603, `http/request failed: ${url.hostname} is denied by the exec-server's network policy (${typeof why === 'string' ? why : `proxy status ${status}`})`);
}
