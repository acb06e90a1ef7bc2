/**
 * Dialling the checked address: directly (upstream bytes go straight to the client from the read
 * callback), or as a CONNECT tunnel through the configured upstream proxy. Callers wait for READY
 * (or 'error'); the connect timeout covers the TCP connect and the upstream proxy's answer.
 */
import * as net from 'net';

import { replyRaw, type Allowed, type Listener, type ProxyContext, type UpstreamProxy } from './context';
import { track } from './limits';
import { chainedSockets, useNativeRelay } from './relay';

/** Emitted on a socket from dial() once bytes can flow to the target (TCP connect, or the upstream proxy's 200). */
export const READY = 'psb:ready';

export function parseUpstreamProxy(raw: string): UpstreamProxy {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new TypeError(`Expected upstreamProxy to be an http:// URL, got ${JSON.stringify(raw)}`);
  }
  if (u.protocol !== 'http:' || !u.hostname || (u.pathname !== '/' && u.pathname !== '') || u.search || u.hash) {
    throw new TypeError(`Expected upstreamProxy to be http://[user:password@]host:port, got ${JSON.stringify(raw)}`);
  }
  const user = decodeURIComponent(u.username);
  const password = decodeURIComponent(u.password);
  return {
    host: u.hostname.replace(/^\[|\]$/g, ''),
    port: u.port ? Number(u.port) : 80,
    authorization: user || password ? `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` : null,
  };
}

/** `host:port` for a request line (IPv6 bracketed). */
export function authorityOf(address: string, port: number): string {
  return net.isIPv6(address) ? `[${address}]:${port}` : `${address}:${port}`;
}

// Upstream reads land in fresh buffers that grow while reads fill them (bulk downloads: fewer,
// larger read/write syscalls) and shrink when they do not (chatty connections keep little memory).
const MIN_READ = 64 << 10;
const MAX_READ = 1 << 20;

/**
 * Connect to the checked address. Upstream bytes go straight to `client` from the read callback
 * (no 'data' events, no intermediate stream buffering); the client's bytes are piped the other
 * way by splice(). Reading only starts after 'connect' listeners ran, so the caller's success
 * reply (200 / SOCKS OK) always precedes upstream data.
 */
export function dial(ctx: ProxyContext, listener: Listener, target: Allowed, port: number, client: net.Socket, paused = false): net.Socket {
  if (ctx.upstreamProxy) return dialUpstream(ctx, listener, target, port, paused);
  let size = MIN_READ;
  const upstream: net.Socket = net.connect({
    host: target.address,
    port,
    family: target.family,
    allowHalfOpen: true,
    onread: {
      buffer: () => Buffer.allocUnsafe(size),
      callback: (nread: number, buf: Uint8Array): boolean => {
        if (nread === buf.length) size = Math.min(size * 2, MAX_READ);
        else if (nread < buf.length >> 2) size = Math.max(size >> 1, MIN_READ);
        if (client.destroyed) return false;
        if (!client.write(buf.subarray(0, nread))) {
          client.once('drain', () => upstream.resume());
          return false;
        }
        return true;
      },
    },
  });
  // A tunnel bound for the native relay must not start reading into JS when it connects.
  if (paused) upstream.pause();
  track(listener, upstream);
  upstream.setTimeout(ctx.connectTimeoutMs, () => {
    const err: NodeJS.ErrnoException = new Error('connect timed out');
    err.code = 'ETIMEDOUT';
    upstream.destroy(err);
  });
  upstream.once('connect', () => {
    upstream.setTimeout(0);
    upstream.emit(READY);
  });
  return upstream;
}

/**
 * A tunnel to the checked address through the upstream proxy: `CONNECT address:port`, READY
 * after its 2xx. Bytes the upstream sent behind its reply (a server-first protocol's banner)
 * stay buffered in the socket, and the socket is left paused when `paused`.
 */
export function dialUpstream(ctx: ProxyContext, listener: Listener, target: Allowed, port: number, paused: boolean): net.Socket {
  const up = ctx.upstreamProxy!;
  const authority = authorityOf(ctx.options.upstreamTarget === 'address' ? target.address : target.host, port);
  const socket = net.connect({ host: up.host, port: up.port, allowHalfOpen: true });
  chainedSockets.add(socket);
  track(listener, socket);
  // The connect timeout covers the upstream's answer as well.
  socket.setTimeout(ctx.connectTimeoutMs, () => {
    socket.destroy(Object.assign(new Error('upstream proxy timed out'), { code: 'ETIMEDOUT' }));
  });
  let head: Buffer = Buffer.alloc(0);
  let ready = false;
  // An upstream that hangs up before answering is an error (callers wait for READY or 'error').
  socket.once('end', () => {
    if (!ready) socket.destroy(Object.assign(new Error('upstream proxy closed the connection'), { code: 'ECONNRESET' }));
  });
  const onData = (chunk: Buffer) => {
    head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) {
      if (head.length > 16 * 1024) socket.destroy(Object.assign(new Error('upstream proxy reply too large'), { code: 'EPROTO' }));
      return;
    }
    socket.off('data', onData);
    socket.pause();
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(head.subarray(0, Math.min(end, 64)).toString('latin1'));
    if (!status || status[1]![0] !== '2') {
      const err: NodeJS.ErrnoException = new Error(`upstream proxy refused CONNECT ${authority}: ${status ? status[1] : 'bad reply'}`);
      err.code = status?.[1] === '407' ? 'EPROXYAUTH' : 'ECONNREFUSED';
      return void socket.destroy(err);
    }
    if (head.length > end + 4) socket.unshift(head.subarray(end + 4));
    socket.setTimeout(0);
    ready = true;
    if (!paused) socket.resume();
    socket.emit(READY);
  };
  socket.on('data', onData);
  socket.once('connect', () => {
    socket.write(
      `CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n` +
        (up.authorization ? `Proxy-Authorization: ${up.authorization}\r\n` : '') +
        '\r\n',
    );
  });
  return socket;
}

/**
 * Dials an admitted tunnel's target (paused for the native relay), answers 502 on the client
 * socket when that fails, and once bytes can flow pauses the client and calls `ready`, which
 * sends any success reply and hands both sockets to tunnel().
 */
export function openTunnel(ctx: ProxyContext, listener: Listener, socket: net.Socket, target: Allowed, port: number, ready: (upstream: net.Socket) => void): void {
  const upstream = dial(ctx, listener, target, port, socket, useNativeRelay(ctx));
  let up = false;
  upstream.on('error', (err: NodeJS.ErrnoException) => {
    if (!up && socket.writable) replyRaw(socket, '502 Bad Gateway', `upstream connect failed: ${err.code ?? err.message}\n`);
  });
  upstream.once(READY, () => {
    up = true;
    socket.pause();
    ready(upstream);
  });
}
