/**
 * Opt-in preload that routes Node's built-in `fetch` (and anything else on undici's global
 * dispatcher, e.g. WebSocket on Node 22) through the proxy named in the environment, for Node
 * versions whose fetch ignores HTTP_PROXY / HTTPS_PROXY (Node 18, 20, and 22 before 22.21).
 *
 *   NODE_OPTIONS="--require /abs/path/to/dist/network/fetch-preload.js" node app.js
 *   // or: ManagedProxy.proxyEnv(env, port, { nodeFetchPreload: true })
 *
 * How: Node bundles undici but does not expose it (no ProxyAgent on Node 20). Its global
 * dispatcher is an undici Agent stored under a well-known symbol; the preload builds a new Agent
 * of the same class whose `connect` function opens each connection as a CONNECT tunnel through
 * the proxy (TLS to the origin on top for https:), and installs it. No dependency, no patching of
 * fetch itself; requests, redirects, bodies and keep-alive are undici's own.
 *
 * It does nothing when Node already honours NODE_USE_ENV_PROXY (22.21+, 24+) and that variable is
 * set, when no proxy variable is set, or when fetch is missing. Hosts listed in NO_PROXY /
 * no_proxy (names, `.suffix`, `*`, IPv4 CIDR) connect directly. Plain-http origins go through a
 * CONNECT tunnel as well, so the proxy's limited mode (which refuses CONNECT) refuses them too.
 *
 * Standalone on purpose: only Node built-ins, so it loads from any program without our package.
 */
import * as net from 'net';
import * as tls from 'tls';

type ConnectOptions = { hostname: string; host?: string; protocol: string; port: string | number; servername?: string };
type Callback = (err: Error | null, socket?: net.Socket) => void;

const DISPATCHER = Symbol.for('undici.globalDispatcher.1');

function nodeHonoursEnvProxy(): boolean {
  const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
  // The versions documented to honour it; anything else (Node 23 included) gets the preload.
  return major >= 24 || (major === 22 && minor >= 21);
}

function proxyFor(protocol: string): URL | null {
  const env = process.env;
  const raw = protocol === 'https:' ? env.HTTPS_PROXY ?? env.https_proxy ?? env.HTTP_PROXY ?? env.http_proxy : env.HTTP_PROXY ?? env.http_proxy;
  if (!raw) return null;
  try {
    const u = new URL(raw);
    return u.protocol === 'http:' ? u : null;
  } catch {
    return null;
  }
}

function ipv4ToInt(ip: string): number | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(ip);
  if (!m) return null;
  const parts = m.slice(1).map(Number);
  if (parts.some((p) => p > 255)) return null;
  return ((parts[0]! << 24) | (parts[1]! << 16) | (parts[2]! << 8) | parts[3]!) >>> 0;
}

/** NO_PROXY semantics as curl has them: exact names, domain suffixes, `*`, and IPv4 CIDRs. */
export function bypassesProxy(hostname: string, noProxy: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase().replace(/\.$/, '');
  for (let entry of noProxy.split(/[\s,]+/)) {
    entry = entry.trim().toLowerCase();
    if (!entry) continue;
    if (entry === '*') return true;
    const cidr = /^(\d+\.\d+\.\d+\.\d+)\/(\d{1,2})$/.exec(entry);
    if (cidr) {
      const base = ipv4ToInt(cidr[1]!);
      const ip = ipv4ToInt(host);
      const bits = Number(cidr[2]);
      if (base !== null && ip !== null && bits <= 32) {
        const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
        if ((base & mask) === (ip & mask)) return true;
      }
      continue;
    }
    const name = entry.replace(/^\[|\]$/g, '').replace(/^\*?\./, '');
    if (host === name || host.endsWith(`.${name}`)) return true;
  }
  return false;
}

/** Opens `host:port` as a CONNECT tunnel through `proxy`; the callback gets the raw socket. */
function tunnel(proxy: URL, host: string, port: number, cb: Callback): void {
  let done = false;
  const finish = (err: Error | null, s?: net.Socket) => {
    if (done) return;
    done = true;
    cb(err, s);
  };
  const authority = net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
  const socket = net.connect({ host: proxy.hostname.replace(/^\[|\]$/g, ''), port: Number(proxy.port || 80) });
  socket.setNoDelay(true);
  let head = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) {
      if (head.length > 16384) fail(new Error('proxy sent an oversized CONNECT reply'));
      return;
    }
    socket.off('data', onData);
    socket.off('error', fail);
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(head.subarray(0, end).toString('latin1'));
    if (!status || status[1] !== '200') {
      const line = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
      const blocked = /^x-proxy-error: *(.+)$/im.exec(head.subarray(0, end).toString('latin1'))?.[1]?.trim();
      socket.destroy();
      return finish(
        Object.assign(new Error(`proxy refused CONNECT ${authority}: ${line}${blocked ? ` (${blocked})` : ''}`), {
          code: 'ERR_PROXY_TUNNEL',
          proxyError: blocked,
        }),
      );
    }
    socket.pause();
    if (head.length > end + 4) socket.unshift(head.subarray(end + 4));
    finish(null, socket);
  };
  const fail = (err: Error) => {
    socket.destroy();
    finish(err);
  };
  socket.on('error', fail);
  socket.on('data', onData);
  socket.once('connect', () => socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`));
}

/** undici `connect` function: a tunnel through the proxy, TLS to the origin on top for https:. */
export function connectThroughProxy(opts: ConnectOptions, cb: Callback): void {
  const host = opts.hostname.replace(/^\[|\]$/g, '');
  const https = opts.protocol === 'https:';
  const port = Number(opts.port) || (https ? 443 : 80);
  const proxy = proxyFor(opts.protocol);
  const noProxy = process.env.NO_PROXY ?? process.env.no_proxy ?? '';
  const withTls = (raw: net.Socket) => {
    if (!https) return cb(null, raw);
    const servername = opts.servername ?? (net.isIP(host) ? undefined : host);
    const secure = tls.connect({ socket: raw, servername, ALPNProtocols: ['http/1.1'] });
    let settled = false;
    secure.once('secureConnect', () => {
      settled = true;
      cb(null, secure);
    });
    secure.once('error', (err) => {
      if (settled) return;
      settled = true;
      raw.destroy();
      cb(err);
    });
  };
  if (!proxy || bypassesProxy(host, noProxy)) {
    const direct = net.connect({ host, port });
    let settled = false;
    direct.once('connect', () => {
      settled = true;
      direct.setNoDelay(true);
      withTls(direct);
    });
    direct.once('error', (err) => {
      if (!settled) cb(err);
    });
    return;
  }
  tunnel(proxy, host, port, (err, raw) => (err ? cb(err) : withTls(raw!)));
}

/** Installs the proxying dispatcher; returns whether it did. */
export function install(): boolean {
  if (process.env.NODE_USE_ENV_PROXY === '1' && nodeHonoursEnvProxy()) return false;
  if (!proxyFor('https:') && !proxyFor('http:')) return false;
  if (typeof globalThis.fetch !== 'function') return false;
  const g = globalThis as unknown as Record<symbol, { constructor: new (opts: object) => object } | undefined>;
  if (g[DISPATCHER] === undefined) {
    // Node loads its undici on the first fetch call; a data: URL needs no network.
    void globalThis.fetch('data:,').catch(() => undefined);
  }
  const current = g[DISPATCHER];
  if (!current || typeof current.constructor !== 'function') return false;
  g[DISPATCHER] = new current.constructor({ connect: connectThroughProxy }) as never;
  return true;
}

install();
