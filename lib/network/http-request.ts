/**
 * The plain-HTTP request path: absolute-form requests (`GET http://host/path`), decided, then
 * forwarded to the checked address over the sandbox's keep-alive pool with hop-by-hop headers
 * dropped and Host set to the checked authority; and absolute-form WebSocket upgrades, decided
 * like a request and then relayed as a tunnel.
 */
import * as http from 'http';
import * as net from 'net';

import { clientOf, HOP_BY_HOP, refusalBody, replyRaw, type Listener, type ProxyContext } from './context';
import { decide } from './decision';
import { authorityOf, openTunnel } from './dial';
import { admitUpstream, claimUpstreamSlot, IDLE_UPSTREAM_MS, MAX_IDLE_UPSTREAM, noteRefusal, track } from './limits';
import { forwardBody, holdBody, tunnel } from './relay';

export function upstreamAgent(): http.Agent {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64, maxFreeSockets: MAX_IDLE_UPSTREAM, timeout: IDLE_UPSTREAM_MS });
  // maxFreeSockets is per origin: a sandbox touching many origins would otherwise park that many
  // idle fds on each for the whole timeout, outside its connection cap. The agent's own 'free'
  // listener (registered first) has filed the socket; drop it again when over the total.
  agent.on('free', (socket: net.Socket) => {
    let idle = 0;
    for (const name in agent.freeSockets) idle += agent.freeSockets[name]?.length ?? 0;
    if (idle > MAX_IDLE_UPSTREAM) socket.destroy();
  });
  return agent;
}

/** Plain-HTTP bodies at least this long go through the native relay (shorter ones cost less in JS than the hand-over). */
export const BODY_RELAY_MIN = 256 << 10;

const EMPTY = Buffer.alloc(0);

/**
 * The length of a response body the native relay may move: a single Content-Length of at least
 * BODY_RELAY_MIN, no Transfer-Encoding, a status and method that have a body. Else null.
 */
function relayedBodyLength(method: string, status: number, raw: string[]): number | null {
  if (method === 'HEAD' || status < 200 || status === 204 || status === 304) return null;
  let length: string | null = null;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (name.length === 17 && name.toLowerCase() === 'transfer-encoding') return null;
    if (name.length !== 14 || name.toLowerCase() !== 'content-length') continue;
    if (length !== null) return null;
    length = raw[i + 1];
  }
  if (length === null || !/^\d{1,15}$/.test(length)) return null;
  const n = Number(length);
  return n >= BODY_RELAY_MIN ? n : null;
}

export async function onHttpRequest(
  ctx: ProxyContext,
  listener: Listener,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  expectContinue: boolean,
): Promise<void> {
  const socket = req.socket as net.Socket;
  ctx.handshakes.get(socket)?.();
  const plain = (status: number, body: string, extra: Record<string, string> = {}) => {
    if (res.headersSent) return void res.destroy();
    res.writeHead(status, {
      'content-type': 'text/plain; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      connection: 'close',
      ...extra,
    });
    res.end(body);
  };
  let url: URL;
  try {
    url = new URL(req.url ?? '');
  } catch {
    return plain(400, 'this is a proxy: send absolute-form requests (http://host/path) or CONNECT\n');
  }
  if (url.protocol !== 'http:') {
    return plain(400, `unsupported scheme ${url.protocol} in absolute-form request; use CONNECT\n`);
  }
  const port = url.port ? Number(url.port) : 80;
  const method = (req.method ?? 'GET').toUpperCase();
  // Do not read the body until the request is allowed.
  req.pause();
  const outcome = await decide(ctx, listener, clientOf(socket), 'http', url.hostname, port, method);
  if (!outcome.allowed) {
    if (outcome.header) return plain(outcome.status, refusalBody(outcome.reason), { 'x-proxy-error': outcome.header });
    return plain(outcome.status, `proxy could not resolve ${url.hostname}\n`);
  }
  if (socket.destroyed) return;
  if (!claimUpstreamSlot(socket)) {
    noteRefusal(ctx, listener, 'socket_budget', clientOf(socket));
    return plain(503, 'blocked by network policy: proxy socket budget exhausted\n', { 'x-proxy-error': 'blocked-by-connection-limit' });
  }
  if (expectContinue) res.writeContinue();

  const connectionTokens = String(req.headers.connection ?? '')
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter(Boolean);
  // RFC 9112 §3.2.2: with an absolute-form target the Host header is replaced by the target's
  // authority, so the origin sees the name that was checked, not one the client made up.
  // A flat [name, value, ...] list, as Node takes it: written in one go (validated like
  // setHeader), repeated fields stay separate lines, no per-field setHeader bookkeeping.
  const headers: string[] = ['Host', url.host];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i];
    const lower = name.toLowerCase();
    // Expect was answered here (after the decision); the body follows unconditionally.
    if (HOP_BY_HOP.has(lower) || lower === 'host' || lower === 'expect' || connectionTokens.includes(lower)) continue;
    headers.push(name, req.rawHeaders[i + 1]);
  }

  // A request without a body can be sent again when a pooled connection turns out to have been
  // closed by the origin meanwhile (the keep-alive race); one with a body cannot.
  const bodiless =
    req.headers['transfer-encoding'] === undefined &&
    (req.headers['content-length'] === undefined || req.headers['content-length'] === '0');
  let current: http.ClientRequest | null = null;
  /** The response body went to the native relay (holdBody): the upstream socket is no longer ours. */
  let handedOff = false;
  let retried = false;
  const send = (): void => {
    const up = ctx.upstreamProxy;
    // Through an upstream proxy: absolute form, naming the target as upstreamTarget says.
    // (No spreads: this runs for every request.)
    const upstreamReq = http.request(
      up
        ? {
            host: up.host,
            port: up.port,
            path: `http://${authorityOf(ctx.options.upstreamTarget === 'address' ? outcome.address : outcome.host, port)}${url.pathname}${url.search}`,
            headers: up.authorization ? [...headers, 'Proxy-Authorization', up.authorization] : headers,
            method,
            agent: listener.agent,
            setHost: false,
            timeout: ctx.connectTimeoutMs,
          }
        : {
            host: outcome.address,
            family: outcome.family,
            port,
            path: url.pathname + url.search,
            headers,
            method,
            agent: listener.agent,
            setHost: false,
            timeout: ctx.connectTimeoutMs,
          },
    );
    current = upstreamReq;
    upstreamReq.on('socket', (s: net.Socket) => {
      track(listener, s);
      // The timeout bounds the connect only; a reused keep-alive connection is already up.
      if (s.connecting) s.once('connect', () => upstreamReq.setTimeout(0));
      else upstreamReq.setTimeout(0);
    });
    upstreamReq.on('timeout', () => upstreamReq.destroy(Object.assign(new Error('upstream timed out'), { code: 'ETIMEDOUT' })));
    upstreamReq.on('error', (err: NodeJS.ErrnoException) => {
      if (handedOff) return;
      if (
        upstreamReq.reusedSocket &&
        bodiless &&
        !retried &&
        !res.headersSent &&
        !socket.destroyed &&
        (err.code === 'ECONNRESET' || err.code === 'EPIPE')
      ) {
        retried = true;
        return send();
      }
      if (!res.headersSent) plain(502, `upstream request failed: ${err.code ?? err.message}\n`);
      else res.destroy();
    });
    upstreamReq.on('response', (upstreamRes) => {
      // From rawHeaders only: reading upstreamRes.headers would build the parsed header object
      // for nothing. Every Connection field counts (Node would join them with ", ").
      const raw = upstreamRes.rawHeaders;
      let tokens: string[] | null = null;
      for (let i = 0; i < raw.length; i += 2) {
        if (raw[i].length !== 10 || raw[i].toLowerCase() !== 'connection') continue;
        tokens ??= [];
        for (const t of raw[i + 1].split(',')) tokens.push(t.trim().toLowerCase());
      }
      const out: string[] = [];
      for (let i = 0; i < raw.length; i += 2) {
        const lower = raw[i].toLowerCase();
        if (HOP_BY_HOP.has(lower) || (tokens !== null && tokens.includes(lower))) continue;
        out.push(raw[i], raw[i + 1]);
      }
      const status = upstreamRes.statusCode ?? 502;
      const length = relayedBodyLength(method, status, raw);
      // A large counted body goes through the addon once its head is written, unless JS still has
      // request bytes to send upstream or this response waits behind an earlier one.
      if (length !== null && req.complete && upstreamReq.writableFinished && res.socket === socket && (socket as { _httpMessage?: unknown })._httpMessage === res) {
        const body = holdBody(ctx, listener, upstreamRes.socket as net.Socket, socket, (err) => (err === null ? res.end() : res.destroy()));
        if (body) {
          handedOff = true;
          // The parser never sees the rest of the body: its 'aborted' is expected.
          upstreamRes.on('error', () => {});
          // After the parser has handed over what it read with the head (this tick).
          process.nextTick(() => {
            if (res.destroyed || socket.destroyed) return; // closed meanwhile: the relay reported it
            const chunks: Buffer[] = [];
            for (let c = upstreamRes.read() as Buffer | null; c !== null; c = upstreamRes.read() as Buffer | null) chunks.push(c);
            const prefix = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
            try {
              res.writeHead(status, upstreamRes.statusMessage, out);
              if (prefix.length > 0) res.write(prefix);
              else res.flushHeaders();
            } catch {
              return void res.destroy(); // a head Node will not write: the client's close ends the relay
            }
            // Writes complete in order: once this one has, the head and prefix are in the kernel.
            socket.write(EMPTY, (err) => {
              if (!err && !socket.destroyed) body.start(length - prefix.length);
            });
          });
          return;
        }
      }
      res.writeHead(status, upstreamRes.statusMessage, out);
      forwardBody(upstreamRes, res);
      upstreamRes.on('error', () => res.destroy());
    });
    if (bodiless) upstreamReq.end();
    else req.pipe(upstreamReq);
  };
  res.on('close', () => {
    if (!res.writableFinished) current?.destroy();
  });
  send();
  req.resume();
}

/**
 * An absolute-form `Upgrade` request (WebSocket over plain HTTP): the same decision as any
 * request to that host (limited mode refuses it: a tunnel carries any method), then the head is
 * replayed to the checked address and both directions are relayed as a tunnel.
 */
export async function onUpgrade(ctx: ProxyContext, listener: Listener, req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
  ctx.handshakes.get(socket)?.();
  const reply = (status: string, body: string) => replyRaw(socket, status, body);
  let url: URL;
  try {
    url = new URL(req.url ?? '');
  } catch {
    return void reply('400 Bad Request', 'this is a proxy: send absolute-form requests (http://host/path) or CONNECT\n');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'ws:') {
    return void reply('400 Bad Request', `unsupported scheme ${url.protocol} in absolute-form request; use CONNECT\n`);
  }
  const port = url.port ? Number(url.port) : 80;
  const method = (req.method ?? 'GET').toUpperCase();
  const outcome =
    ctx.rules.policy.mode === 'limited'
      ? await decide(ctx, listener, clientOf(socket), 'httpsConnect', url.hostname, port, 'UPGRADE')
      : await decide(ctx, listener, clientOf(socket), 'http', url.hostname, port, method);
  if (!admitUpstream(ctx, listener, socket, outcome, url.hostname)) return;
  // The origin sees the checked authority as Host; proxy credentials never leave.
  const lines = [`${method} ${url.pathname}${url.search} HTTP/1.1`, `Host: ${url.host}`];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const lower = req.rawHeaders[i].toLowerCase();
    if (lower === 'host' || lower === 'proxy-connection' || lower === 'proxy-authorization') continue;
    lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
  }
  openTunnel(ctx, listener, socket, outcome, port, (upstream) => {
    const replay = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
    tunnel(ctx, listener, socket, upstream, head.length > 0 ? Buffer.concat([replay, head]) : replay);
  });
}
