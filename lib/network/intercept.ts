/**
 * TLS interception of a CONNECT tunnel whose host's policy needs it (limited mode, a credential
 * rule): the client's TLS is terminated with a leaf from the interception CA, and every request
 * inside the session is checked (Host and target naming the CONNECT host, the method in limited
 * mode), audited, has its credential rules applied, and goes over TLS to the checked address.
 */
import * as http from 'http';
import * as https from 'https';
import type * as net from 'net';
import * as tls from 'tls';

import { clientOf, HOP_BY_HOP, LIMITED_METHODS, refusalBody, type Allowed, type Listener, type MitmTarget, type ProxyContext } from './context';
import { dialUpstream, READY } from './dial';
import { IDLE_UPSTREAM_MS, MAX_IDLE_UPSTREAM, track } from './limits';
import { isIpLiteral, normalizeHost } from './matcher';
import type { AuditSource, BlockHeader } from './options';
import { forwardBody, splice } from './relay';

/** Bytes an intercepted session's socket buffers before it applies backpressure (either way). */
const SESSION_HIGH_WATER = 256 << 10;

/** ALPN of intercepted sessions, both towards the client and towards the origin. */
const MITM_ALPN = ['http/1.1'] as const;

/** What Node's https.Agent hands createConnection (request options merged with the agent's). */
type ChainedConnectOptions = { port: number; ca?: string | string[]; psbTarget?: Allowed };
type ChainedConnect = (opts: ChainedConnectOptions, cb: (err: Error | null, socket?: net.Socket) => void) => undefined;

/** Interception is on and this host's policy needs it (limited mode, or a credential rule). */
export function needsInterception(ctx: ProxyContext, host: string): boolean {
  const i = ctx.options.interception;
  if (!i) return false;
  return ctx.rules.policy.mode === 'limited' || (i.credentials ?? []).some((c) => c.host === host);
}

/**
 * Terminates the client's TLS with a leaf for the CONNECT host and serves the requests inside
 * it (mitmRequest, mitmUpgrade), each forwarded over TLS to the checked address with that host
 * as SNI (through the upstream proxy when there is one: mitmChained).
 *
 * HTTP/1.1 only, both ways: the client is offered ALPN `http/1.1` and nothing else (a client
 * that offers `h2` and `http/1.1` gets HTTP/1.1; one that insists on `h2` alone fails the
 * handshake with a no_application_protocol alert), and the origin side is Node's HTTP/1.1
 * client. Every request is then parsed, checked and audited one by one.
 */
export function intercept(ctx: ProxyContext, listener: Listener, socket: net.Socket, head: Buffer, target: Allowed, port: number): void {
  let leaf: { key: string; cert: string };
  try {
    leaf = ctx.options.interception!.ca.leafFor(target.host);
  } catch {
    return void socket.destroy();
  }
  socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
  if (head.length > 0) socket.unshift(head);
  // A response body piped to the session stops and starts its origin socket once per 256 KiB
  // instead of per 16 KiB record (A/B, interleaved: 2-7% less proxy CPU per GB).
  // (Node's TLSSocket passes highWaterMark on to the socket; its typings lack it.)
  const options: tls.TLSSocketOptions & { highWaterMark: number } = { isServer: true, key: leaf.key, cert: leaf.cert, ALPNProtocols: [...MITM_ALPN], highWaterMark: SESSION_HIGH_WATER };
  const secure = new tls.TLSSocket(socket, options);
  secure.on('error', () => secure.destroy());
  socket.once('close', () => secure.destroy());
  // The first-head deadline (onConnection) ended with the CONNECT head. The TLS handshake and
  // every request head in the session get one too, armed while no request is in flight: else a
  // client stalling in the handshake, never sending a request, or trickling a head one byte at a
  // time holds its connection forever (the session's HTTP server never listens, so Node never
  // enforces its headersTimeout; keepAliveTimeout only sees inactivity).
  let deadline: NodeJS.Timeout | null = null;
  let inFlight = 0;
  const arm = () => {
    deadline ??= setTimeout(() => secure.destroy(), ctx.handshakeTimeoutMs);
  };
  const disarm = () => {
    if (deadline) clearTimeout(deadline);
    deadline = null;
  };
  arm();
  secure.once('close', disarm);
  ctx.mitmTargets.set(secure, {
    target,
    port,
    client: clientOf(socket),
    begin: () => {
      inFlight++;
      disarm();
    },
    end: () => {
      if (--inFlight === 0 && !secure.destroyed) arm();
    },
  });
  if (!listener.mitm) {
    const server = http.createServer({ maxHeaderSize: 16 * 1024, headersTimeout: ctx.handshakeTimeoutMs, requestTimeout: 0 });
    server.on('request', (req, res) => mitmRequest(ctx, listener, req, res, false));
    // `Expect: 100-continue`: the 100 goes out only once the request is allowed (as on the
    // plain path); Node would send it before the checks.
    server.on('checkContinue', (req, res) => mitmRequest(ctx, listener, req, res, true));
    server.on('upgrade', (req: http.IncomingMessage, s: net.Socket, upgradeHead: Buffer) => {
      try {
        mitmUpgrade(ctx, listener, req, s as tls.TLSSocket, upgradeHead);
      } catch {
        s.destroy();
      }
    });
    server.on('clientError', (_err, s: net.Socket) => s.destroy());
    const ca = ctx.options.interception!.originCa;
    const agent = new https.Agent({
      keepAlive: true,
      maxSockets: 64,
      maxFreeSockets: MAX_IDLE_UPSTREAM,
      timeout: IDLE_UPSTREAM_MS,
      ...(ca ? { ca: [...tls.rootCertificates, ca] } : {}),
    });
    if (ctx.upstreamProxy) {
      // The agent keeps pooling (keyed by the checked address and SNI); only how a new
      // connection is made changes: a tunnel through the upstream proxy, TLS on top.
      (agent as unknown as { createConnection: ChainedConnect }).createConnection = (opts, cb) => mitmChained(ctx, listener, opts, cb);
    }
    listener.mitm = { server, agent };
  }
  listener.mitm.server.emit('connection', secure);
}

/**
 * A new origin connection for an intercepted session through the upstream proxy: `CONNECT
 * <checked name or address>:<port>` (Proxy-Authorization as configured, see dialUpstream), then
 * TLS to the origin on top of that tunnel: SNI = the checked host, the certificate verified
 * against the system roots (plus originCa) for that host, ALPN http/1.1. Hands the TLS socket to
 * the agent asynchronously (Node's Agent accepts a createConnection that calls back).
 */
function mitmChained(ctx: ProxyContext, listener: Listener, opts: ChainedConnectOptions, cb: (err: Error | null, socket?: net.Socket) => void): undefined {
  const target = opts.psbTarget;
  if (!target) {
    cb(new Error('internal: intercepted request without a checked target'));
    return undefined;
  }
  const raw = dialUpstream(ctx, listener, target, opts.port, true);
  let handedOver = false;
  raw.once('error', (err) => {
    if (!handedOver) {
      handedOver = true;
      cb(err);
    }
  });
  raw.once(READY, () => {
    if (handedOver) return void raw.destroy();
    handedOver = true;
    const secure = tls.connect({
      socket: raw,
      // Identity is checked against the servername, else (IP literals) against `host`.
      servername: isIpLiteral(target.host) ? undefined : target.host,
      host: target.host,
      ALPNProtocols: [...MITM_ALPN],
      ...(opts.ca !== undefined ? { ca: opts.ca } : {}),
      rejectUnauthorized: true,
    });
    // The fd is the tunnel's, already counted by dialUpstream: the TLS socket on top must not
    // count again (track() skips sockets it knows), and it takes the tunnel down with it.
    listener.sockets.add(secure);
    const handshake = setTimeout(() => {
      secure.destroy(Object.assign(new Error('TLS handshake with the origin timed out'), { code: 'ETIMEDOUT' }));
    }, ctx.connectTimeoutMs);
    secure.once('secureConnect', () => clearTimeout(handshake));
    secure.once('close', () => {
      clearTimeout(handshake);
      listener.sockets.delete(secure);
      raw.destroy();
    });
    raw.on('error', () => secure.destroy());
    cb(null, secure);
  });
  return undefined;
}

/**
 * The checks every request inside an intercepted session gets, with its audit event: one Host
 * line (else 400) naming the CONNECT target, and a request target in origin-form or absolute-form
 * naming it too (else 421: domain fronting), and in `limited` mode the method must be
 * GET/HEAD/OPTIONS and an Upgrade is refused (403; after an upgrade the bytes are no longer
 * HTTP requests that could be checked, the same reason the plain-HTTP WebSocket path refuses it
 * in limited mode). Returns the headers to forward (hop-by-hop ones dropped, this host's
 * credential rules applied) and the origin-form path, or null after `refuse` was called.
 */
function mitmCheck(
  ctx: ProxyContext,
  listener: Listener,
  t: MitmTarget,
  req: http.IncomingMessage,
  upgrade: boolean,
  refuse: (status: number, body: string, header: BlockHeader) => void,
): { headers: http.OutgoingHttpHeaders; path: string } | null {
  const method = (req.method ?? 'GET').toUpperCase();
  const event = (decision: 'allow' | 'deny', source: AuditSource, reason: string, m = method) =>
    ctx.audit.emit({
      processId: listener.processId,
      timestamp: new Date().toISOString(),
      scope: isIpLiteral(t.target.host) ? 'non_domain' : 'domain',
      decision,
      source,
      reason,
      protocol: 'httpsConnect',
      host: t.target.host,
      port: t.port,
      method: m,
      client: t.client,
    });
  // The session was allowed for the CONNECT host: a request inside it for another host (domain
  // fronting) is refused, so every decision names the host that is really asked.
  const isTarget = (hostname: string, port: string | undefined, defaultPort: number | null) =>
    normalizeHost(hostname.replace(/^\[|\]$/g, '')) === t.target.host &&
    (port === undefined || port === '' ? defaultPort === null || defaultPort === t.port : Number(port) === t.port);
  // Exactly one Host line (RFC 9112 3.2: more is a 400). Node keeps the first in req.headers;
  // the origin (or a front) may use another, so a second line is fronting past the check.
  let hostLines = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i]!.toLowerCase() === 'host') hostLines++;
  if (hostLines > 1) {
    event('deny', 'policy', 'host_mismatch');
    refuse(400, 'blocked by network policy: more than one Host header\n', 'blocked-by-policy');
    return null;
  }
  const hostHeader = String(req.headers.host ?? '');
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(hostHeader);
  // The request target: origin-form, `*` for OPTIONS, or absolute-form naming the CONNECT
  // target (sent on in origin-form). An origin given absolute-form uses its authority instead of
  // Host (RFC 9112 3.2.2), so another host there would be fronting past the Host check too.
  let target: string | null = req.url ?? '';
  if (!target.startsWith('/') && !(target === '*' && method === 'OPTIONS')) {
    let u: URL | null = null;
    try {
      u = /^https:\/\//i.test(target) ? new URL(target) : null;
    } catch {
      u = null;
    }
    target = u && u.username === '' && u.password === '' && isTarget(u.hostname, u.port, 443) ? `${u.pathname}${u.search}` : null;
  }
  if (!m || !isTarget(m[1]!, m[2], null) || target === null) {
    event('deny', 'policy', 'host_mismatch');
    refuse(421, 'blocked by network policy: Host does not match the CONNECT target\n', 'blocked-by-policy');
    return null;
  }
  if (ctx.rules.policy.mode === 'limited' && (upgrade || !LIMITED_METHODS.has(method))) {
    // As on the plain path, a refused upgrade is audited as method UPGRADE.
    event('deny', 'mode', 'method_not_allowed', upgrade ? 'UPGRADE' : method);
    refuse(403, refusalBody('method_not_allowed'), 'blocked-by-method-policy');
    return null;
  }
  // Only WebSocket upgrades: after any other 101 (h2c, say) the bytes would be HTTP requests
  // this proxy cannot check (Host, credentials), so the Host check above would end at the 101.
  if (upgrade && !/^websocket$/i.test(String(req.headers.upgrade ?? '').trim())) {
    event('deny', 'policy', 'upgrade_not_allowed', 'UPGRADE');
    refuse(403, refusalBody('upgrade_not_allowed'), 'blocked-by-policy');
    return null;
  }
  event('allow', 'allowlist', 'allowed');
  const connectionTokens = String(req.headers.connection ?? '')
    .split(',')
    .map((x) => x.trim().toLowerCase())
    .filter(Boolean);
  const rules = (ctx.options.interception!.credentials ?? []).filter((c) => c.host === t.target.host);
  const headers: http.OutgoingHttpHeaders = {};
  // Lines of one header in different cases go out under the first spelling: keyed by the raw
  // name, Node's client would let a later `host:` line replace `Host:` (setHeader ignores case).
  const spelling = new Map<string, string>();
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    const lower = name.toLowerCase();
    // Expect was answered here (after the checks); the body follows unconditionally.
    if (HOP_BY_HOP.has(lower) || lower === 'expect' || connectionTokens.includes(lower)) continue;
    let value = req.rawHeaders[i + 1]!;
    // Credential injection: only this host's rules, only in their header.
    for (const r of rules) if (r.header.toLowerCase() === lower && value.includes(r.placeholder)) value = value.split(r.placeholder).join(r.value);
    const key = spelling.get(lower) ?? name;
    spelling.set(lower, key);
    const prev = headers[key];
    headers[key] = prev === undefined ? value : Array.isArray(prev) ? [...prev, value] : [String(prev), value];
  }
  return { headers, path: target };
}

/** The request to the origin of an intercepted session (pooled per sandbox, see intercept()). */
function mitmOrigin(ctx: ProxyContext, listener: Listener, t: MitmTarget, method: string, reqPath: string, headers: http.OutgoingHttpHeaders): http.ClientRequest {
  const options: https.RequestOptions & { psbTarget: Allowed } = {
    host: t.target.address,
    family: t.target.family,
    port: t.port,
    servername: isIpLiteral(t.target.host) ? undefined : t.target.host,
    method,
    path: reqPath,
    headers,
    setHost: false,
    agent: listener.mitm!.agent,
    timeout: ctx.connectTimeoutMs,
    // Read by mitmChained (the agent hands request options to createConnection).
    psbTarget: t.target,
  };
  const upstreamReq = https.request(options);
  upstreamReq.on('socket', (s: net.Socket) => {
    track(listener, s);
    if (s.connecting) s.once('secureConnect', () => upstreamReq.setTimeout(0));
    else upstreamReq.setTimeout(0);
  });
  upstreamReq.on('timeout', () => upstreamReq.destroy(Object.assign(new Error('upstream timed out'), { code: 'ETIMEDOUT' })));
  return upstreamReq;
}

function mitmRequest(ctx: ProxyContext, listener: Listener, req: http.IncomingMessage, res: http.ServerResponse, expectContinue: boolean): void {
  const t = ctx.mitmTargets.get(req.socket as tls.TLSSocket);
  if (!t) return void res.destroy();
  t.begin();
  res.once('close', () => t.end());
  const method = (req.method ?? 'GET').toUpperCase();
  const plain = (status: number, body: string, extra: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(body), connection: 'close', ...extra });
    res.end(body);
  };
  const checked = mitmCheck(ctx, listener, t, req, false, (status, body, header) => plain(status, body, { 'x-proxy-error': header }));
  if (!checked) return;
  if (expectContinue) res.writeContinue();
  const upstreamReq = mitmOrigin(ctx, listener, t, method, checked.path, checked.headers);
  upstreamReq.on('error', (err: NodeJS.ErrnoException) => {
    if (!res.headersSent) plain(502, `upstream request failed: ${err.code ?? err.message}\n`);
    else res.destroy();
  });
  upstreamReq.on('response', (upstreamRes) => {
    res.writeHead(upstreamRes.statusCode ?? 502, scrubCredentials(ctx, t, upstreamRes.statusMessage ?? ''), mitmResponseHeaders(ctx, t, upstreamRes));
    forwardBody(upstreamRes, res);
    upstreamRes.on('error', () => res.destroy());
  });
  res.on('close', () => {
    if (!res.writableFinished) upstreamReq.destroy();
  });
  req.pipe(upstreamReq);
}


/**
 * A response's headers without the hop-by-hop ones (and those its Connection header names), with
 * every real credential value of `t`'s host put back as its placeholder: an origin reflecting
 * the request's Authorization (an error header, a debug endpoint) must not hand the sandbox the
 * secret it was given a placeholder for. Lines differing only in case go out under one name.
 */
function mitmResponseHeaders(ctx: ProxyContext, t: MitmTarget, res: http.IncomingMessage): http.OutgoingHttpHeaders {
  const tokens = String(res.headers.connection ?? '')
    .split(',')
    .map((x) => x.trim().toLowerCase());
  const out: http.OutgoingHttpHeaders = {};
  const spelling = new Map<string, string>();
  for (let i = 0; i < res.rawHeaders.length; i += 2) {
    const name = res.rawHeaders[i]!;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || tokens.includes(lower)) continue;
    const value = scrubCredentials(ctx, t, res.rawHeaders[i + 1]!);
    const key = spelling.get(lower) ?? name;
    spelling.set(lower, key);
    const prev = out[key];
    out[key] = prev === undefined ? value : Array.isArray(prev) ? [...prev, value] : [String(prev), value];
  }
  return out;
}

/**
 * `text` with each real credential value of `t`'s host replaced by its placeholder (values of 8+
 * characters: a shorter one would rewrite ordinary header text, and is no secret anyway).
 */
function scrubCredentials(ctx: ProxyContext, t: MitmTarget, text: string): string {
  for (const r of ctx.options.interception!.credentials ?? []) {
    if (r.host === t.target.host && r.value.length >= 8 && text.includes(r.value)) text = text.split(r.value).join(r.placeholder);
  }
  return text;
}

/**
 * An `Upgrade` request (WebSocket) inside an intercepted session: mitmCheck's decision (refused
 * in limited mode), credential rules applied to its headers, then the request goes to the origin
 * with `Connection: Upgrade` and its `Upgrade` header. A 101 is passed back whole and the two TLS
 * streams are relayed (in JS: both ends are TLS here) until either side closes or the tunnel idle
 * timeout; any other answer is passed back and the session closed.
 */
function mitmUpgrade(ctx: ProxyContext, listener: Listener, req: http.IncomingMessage, socket: tls.TLSSocket, head: Buffer): void {
  const t = ctx.mitmTargets.get(socket);
  if (!t) return void socket.destroy();
  // The session ends with this request (relayed after a 101, else closed): no next head.
  t.begin();
  const raw = (status: number, reason: string, headerLines: string[], body = '') => {
    socket.end(`HTTP/1.1 ${status} ${reason}\r\n${headerLines.map((l) => `${l}\r\n`).join('')}\r\n${body}`);
  };
  const refuse = (status: number, body: string, header: BlockHeader) =>
    raw(status, http.STATUS_CODES[status] ?? '', ['content-type: text/plain; charset=utf-8', `content-length: ${Buffer.byteLength(body)}`, `x-proxy-error: ${header}`, 'connection: close'], body);
  const checked = mitmCheck(ctx, listener, t, req, true, refuse);
  if (!checked) return;
  const headers = checked.headers;
  const upgrade = String(req.headers.upgrade ?? '');
  if (upgrade === '' || /[\r\n]/.test(upgrade)) return void refuse(400, 'bad Upgrade header\n', 'blocked-by-policy');
  headers.Connection = 'Upgrade';
  headers.Upgrade = upgrade;
  const method = (req.method ?? 'GET').toUpperCase();
  const upstreamReq = mitmOrigin(ctx, listener, t, method, checked.path, headers);
  let answered = false;
  socket.once('close', () => {
    if (!answered) upstreamReq.destroy();
  });
  upstreamReq.on('error', (err: NodeJS.ErrnoException) => {
    if (answered) return;
    answered = true;
    const body = `upstream request failed: ${err.code ?? err.message}\n`;
    raw(502, 'Bad Gateway', ['content-type: text/plain; charset=utf-8', `content-length: ${Buffer.byteLength(body)}`, 'connection: close'], body);
  });
  upstreamReq.on('response', (upstreamRes) => {
    // The origin declined the upgrade: its answer, delimited by closing the session.
    answered = true;
    const out = mitmResponseHeaders(ctx, t, upstreamRes);
    const lines: string[] = [];
    for (const [k, v] of Object.entries(out)) for (const x of Array.isArray(v) ? v : [v]) if (x !== undefined) lines.push(`${k}: ${String(x)}`);
    socket.write(`HTTP/1.1 ${upstreamRes.statusCode ?? 502} ${scrubCredentials(ctx, t, upstreamRes.statusMessage ?? '')}\r\n${lines.map((l) => `${l}\r\n`).join('')}connection: close\r\n\r\n`);
    upstreamRes.pipe(socket);
    upstreamRes.on('error', () => socket.destroy());
  });
  upstreamReq.on('upgrade', (upstreamRes: http.IncomingMessage, upstream: net.Socket, upstreamHead: Buffer) => {
    answered = true;
    const lines: string[] = [];
    for (let i = 0; i < upstreamRes.rawHeaders.length; i += 2) lines.push(`${upstreamRes.rawHeaders[i]}: ${scrubCredentials(ctx, t, upstreamRes.rawHeaders[i + 1]!)}`);
    socket.write(`HTTP/1.1 ${upstreamRes.statusCode ?? 101} ${scrubCredentials(ctx, t, upstreamRes.statusMessage ?? '')}\r\n${lines.map((l) => `${l}\r\n`).join('')}\r\n`);
    if (upstreamHead.length > 0) socket.write(upstreamHead);
    if (head.length > 0) upstream.write(head);
    splice(socket, upstream, ctx.limits.tunnelIdleTimeoutMs, true);
  });
  upstreamReq.end();
}
