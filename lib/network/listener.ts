/**
 * Listeners and admission: one listener per attached sandbox (its connections are attributed to
 * its processId), the per-sandbox connection caps and the socket budget checked on accept, the
 * absolute deadline for a connection's first head or handshake, and the first byte telling SOCKS5
 * (0x05) from HTTP, whose requests go to the plain-HTTP path, CONNECT or WebSocket upgrade.
 */
import * as http from 'http';
import * as net from 'net';
import type { AddressInfo } from 'net';

import { onConnect } from './connect';
import { clientOf, type Listener, type ProxyContext } from './context';
import { onHttpRequest, onUpgrade, upstreamAgent } from './http-request';
import { budgetAllows, noteRefusal, socketBudget, releaseReservation, track, upstreamReservations } from './limits';
import type { AttachOptions, Attachment } from './options';
import { nativeRelay } from './relay';
import { onSocks } from './socks5';

/**
 * Accept connections for `processId`. With `fd`, the proxy takes ownership of that TCP socket
 * (bound, or already listening) and closes it on detach; without, it listens on 127.0.0.1:0.
 * With `admit`, only the connections it admits are served (see AttachOptions).
 */
export async function attach(
  ctx: ProxyContext,
  processId: string,
  opts: AttachOptions,
  detach: (listener: Listener) => Promise<void>,
): Promise<Attachment> {
  if (ctx.closed) throw new Error('ManagedProxy is closed');
  if (typeof processId !== 'string' || processId === '') {
    throw new TypeError('Expected processId to be a non-empty string');
  }
  if (opts.fd !== undefined && (!Number.isInteger(opts.fd) || opts.fd < 0)) {
    throw new TypeError(`Expected fd to be a non-negative integer, got ${String(opts.fd)}`);
  }
  if (opts.admit !== undefined && typeof opts.admit !== 'function') throw new TypeError('Expected admit to be a function');
  const listener: Listener = {
    processId,
    server: net.createServer({ allowHalfOpen: true }),
    // Heads are capped at 16 KiB (a larger one is a 431) and must arrive within
    // handshakeTimeoutMs of their first byte, on kept-alive connections too.
    http: http.createServer({ maxHeaderSize: 16 * 1024, headersTimeout: ctx.handshakeTimeoutMs, requestTimeout: 0 }),
    sockets: new Set(),
    closing: null,
    clients: 0,
    pendingHandshakes: 0,
    refusedSinceEvent: 0,
    lastLimitEvent: 0,
    relays: new Set(),
    agent: upstreamAgent(),
    mitm: null,
    port: 0,
    admit: opts.admit ?? null,
  };
  listener.server.on('connection', (socket) => onConnection(ctx, listener, socket));
  // A bug in a handler must cost one connection, never the host process.
  listener.http.on('request', (req, res) => {
    onHttpRequest(ctx, listener, req, res, false).catch(() => req.socket.destroy());
  });
  // `Expect: 100-continue`: the client waits for the 100 before sending its body. Node would
  // send it at once; the policy decides first (onHttpRequest sends the 100 only when allowed).
  listener.http.on('checkContinue', (req, res) => {
    onHttpRequest(ctx, listener, req, res, true).catch(() => req.socket.destroy());
  });
  listener.http.on('connect', (req, socket: net.Socket, head: Buffer) => {
    onConnect(ctx, listener, req, socket, head).catch(() => socket.destroy());
  });
  listener.http.on('upgrade', (req, socket: net.Socket, head: Buffer) => {
    onUpgrade(ctx, listener, req, socket, head).catch(() => socket.destroy());
  });
  listener.http.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => {
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
    if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
    else socket.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    listener.server.once('error', onError);
    const done = () => {
      listener.server.off('error', onError);
      resolve();
    };
    if (opts.fd !== undefined) listener.server.listen({ fd: opts.fd }, done);
    else listener.server.listen({ host: '127.0.0.1', port: 0 }, done);
  });
  listener.server.on('error', () => {
    /* accept errors (EMFILE, ...) must not crash the host; the listener keeps going */
  });
  const port = (listener.server.address() as AddressInfo).port;
  listener.port = port;
  ctx.listeners.add(listener);
  if (ctx.closed) {
    await closeListener(ctx, listener);
    throw new Error('ManagedProxy is closed');
  }
  return {
    port,
    host: '127.0.0.1',
    detach: () => detach(listener),
  };
}

/** Stops the listener and drops its connections and tunnels; resolves once it is closed. */
export function closeListener(ctx: ProxyContext, listener: Listener): Promise<void> {
  if (!listener.closing) {
    listener.closing = new Promise<void>((resolve) => {
      listener.server.close(() => resolve());
      for (const s of listener.sockets) s.destroy();
      listener.sockets.clear();
      const relay = nativeRelay();
      for (const entry of [...listener.relays]) if (entry.handle) relay?.relayClose(entry.handle);
      listener.agent.destroy();
      listener.mitm?.agent.destroy();
    }).then(() => {
      ctx.listeners.delete(listener);
    });
  }
  return listener.closing;
}

function onConnection(ctx: ProxyContext, listener: Listener, socket: net.Socket): void {
  socket.on('error', () => {
    /* resets from either side are routine for a proxy */
  });
  // Not the sandbox's (another local process on a host listener): closed before anything is
  // read or counted, so it gets no answer and cannot use up the sandbox's caps. A throwing
  // check refuses.
  if (listener.admit !== null) {
    let ok = false;
    try {
      ok = listener.admit(socket) === true;
    } catch {
      ok = false;
    }
    if (!ok) {
      socket.destroy();
      return;
    }
  }
  // Over a cap the connection is answered and closed at once: it costs the host one fd for
  // the time of one write, and the sandbox gets a clear status instead of a hang.
  const overBudget = !budgetAllows(2);
  if (
    overBudget ||
    listener.clients >= ctx.limits.connectionsPerProcess ||
    listener.pendingHandshakes >= ctx.limits.pendingHandshakesPerProcess
  ) {
    noteRefusal(ctx, listener, overBudget ? 'socket_budget' : 'connection_limit', clientOf(socket));
    const status = overBudget ? '503 Service Unavailable' : '429 Too Many Requests';
    const body = `blocked by network policy: ${overBudget ? 'proxy socket budget exhausted' : 'too many connections from this sandbox'}\n`;
    socket.end(
      `HTTP/1.1 ${status}\r\nx-proxy-error: blocked-by-connection-limit\r\ncontent-type: text/plain; charset=utf-8\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
    socket.destroySoon();
    setTimeout(() => socket.destroy(), 1000).unref();
    return;
  }
  if (!track(listener, socket)) return;
  upstreamReservations.add(socket);
  socketBudget.reserved++;
  listener.clients++;
  listener.pendingHandshakes++;
  let pending = true;
  const handshakeDone = () => {
    if (!pending) return;
    pending = false;
    listener.pendingHandshakes--;
    clearTimeout(deadline);
  };
  socket.once('close', () => {
    releaseReservation(socket);
    listener.clients--;
    handshakeDone();
  });
  // An absolute deadline for the first head or handshake: a timer that re-armed on every byte
  // would let a client trickling one byte at a time hold the connection forever.
  const deadline = setTimeout(() => socket.destroy(), ctx.handshakeTimeoutMs);
  ctx.handshakes.set(socket, handshakeDone);
  // The listener allows half-open sockets (tunnels need them); a client that goes away before
  // its head is complete must not hold the slot until the deadline.
  socket.once('end', () => {
    if (pending) socket.destroy();
  });
  socket.once('data', (first: Buffer) => {
    socket.pause();
    socket.unshift(first);
    if (first[0] === 0x05) {
      if (ctx.options.enableSocks5 === false) {
        socket.destroy();
        return;
      }
      onSocks(ctx, listener, socket).catch(() => socket.destroy());
    } else {
      listener.http.emit('connection', socket);
      socket.resume();
    }
  });
}
