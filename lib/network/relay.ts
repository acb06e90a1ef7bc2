/**
 * The relay: moving an allowed tunnel's bytes (CONNECT, SOCKS5, WebSocket) until either side is
 * done. On Linux with the addon loaded, the addon relays between the two sockets in C++
 * (recv/send through a buffer per direction, on the libuv loop: see native/linux/relay.cc);
 * everywhere else, and when asked (`relay: 'js'`), stream piping in JS (splice()). Both keep the
 * tunnel idle timeout, pass a graceful end on as a half-close, and tear both sides down on error.
 */
import type * as net from 'net';
import type { Readable, Writable } from 'stream';

import { tryLoadNative, type NativeRelay } from '../native';
import type { Listener, ProxyContext, RelayEntry } from './context';
import { budgetAllows, socketBudget } from './limits';


let cached: NativeRelay | null | undefined;

/** The addon's relay, or null where it is unavailable (not Linux, addon missing or older). */
export function nativeRelay(): NativeRelay | null {
  if (cached !== undefined) return cached;
  cached = null;
  if (process.platform !== 'linux') return cached;
  const { binding: b } = tryLoadNative();
  if (b?.platform === 'linux' && typeof b.relay === 'function' && typeof b.relayStart === 'function' && typeof b.relayClose === 'function') cached = b;
  return cached;
}

/** The OS fd behind a connected net.Socket (libuv TCP handle), or -1. */
export function socketFd(socket: net.Socket): number {
  const handle = (socket as unknown as { _handle?: { fd?: number } })._handle;
  return typeof handle?.fd === 'number' && handle.fd >= 0 ? handle.fd : -1;
}

/**
 * Everything already read into the socket's JS buffer (it must reach the other side before the
 * native relay takes over). The socket must be paused.
 */
export function drainBuffered(socket: net.Socket): Buffer | null {
  const chunks: Buffer[] = [];
  for (let c = socket.read() as Buffer | null; c !== null; c = socket.read() as Buffer | null) chunks.push(c);
  return chunks.length === 0 ? null : Buffer.concat(chunks);
}

/** Sockets dialled through an upstream proxy: plain streams (no onread), piped both ways in JS. */
export const chainedSockets = new WeakSet<net.Socket>();

/** fds a natively relayed tunnel holds: its two socket duplicates. */
const RELAY_FDS = 2;

/**
 * Join a client socket and an upstream socket: the client's bytes are piped up with stream
 * backpressure; the other direction is dial()'s read callback for a direct upstream, a pipe for
 * any other (`upstreamIsStream`: chained, or a TLS socket to an intercepted origin). A graceful
 * end on one side is passed on as a half-close; an error or reset on either side tears both down.
 */
export function splice(client: net.Socket, upstream: net.Socket, idleMs: number, upstreamIsStream = chainedSockets.has(upstream)): void {
  // A tunnel nobody uses any more still holds two fds: close it after idleMs without traffic
  // (setTimeout re-arms on activity of that socket, in either direction).
  const idle = () => {
    client.destroy();
    upstream.destroy();
  };
  client.setTimeout(idleMs, idle);
  upstream.setTimeout(idleMs, idle);
  client.pipe(upstream);
  // dial()'s onread callback carries a direct upstream's bytes; a chained one (or any socket
  // dial() did not make) is a plain stream.
  if (upstreamIsStream) upstream.pipe(client, { end: false });
  upstream.on('end', () => {
    if (!client.destroyed) client.end();
  });
  const onClose = (other: net.Socket) => (hadError: boolean) => {
    if (hadError) other.destroy();
    else if (!other.destroyed) other.end();
  };
  client.on('close', onClose(upstream));
  upstream.on('close', onClose(client));
  client.on('error', () => upstream.destroy());
  upstream.on('error', () => client.destroy());
}

/**
 * A response body from the origin's message to the client's response, with backpressure: what
 * pipe() does for this one pair, without its bookkeeping (pipe adds eight listeners to the two
 * streams and removes them again at the end, and emits 'pipe'/'unpipe': per 1 kB keep-alive
 * request that showed in profiles). The caller destroys `from` when `to` closes before it has
 * finished, and `to` on an error of `from`; until then a destroyed `to` just drops what arrives.
 */
export function forwardBody(from: Readable, to: Writable): void {
  from.on('data', (chunk: Buffer) => {
    if (to.destroyed || to.write(chunk)) return;
    from.pause();
    to.once('drain', () => from.resume());
  });
  from.once('end', () => {
    if (!to.destroyed) to.end();
  });
}

export function useNativeRelay(ctx: ProxyContext): boolean {
  return ctx.options.relay !== 'js' && nativeRelay() !== null;
}

/**
 * Relay an established tunnel (the success reply, if any, has been flushed to the client;
 * `toUpstream` goes first, then everything else). Native relay where available: whatever JS
 * already read from the client goes first, then the addon owns duplicates of both fds and the JS
 * sockets are destroyed in the same tick. Otherwise stream piping.
 */
export function tunnel(ctx: ProxyContext, listener: Listener, client: net.Socket, upstream: net.Socket, toUpstream: Buffer | null): void {
  if (client.destroyed || upstream.destroyed || listener.closing) {
    client.destroy();
    upstream.destroy();
    return;
  }
  const idle = ctx.limits.tunnelIdleTimeoutMs;
  let prefix = toUpstream && toUpstream.length > 0 ? toUpstream : null;
  let toClient: Buffer | null = null;
  const relay = useNativeRelay(ctx) ? nativeRelay() : null;
  const fa = socketFd(client);
  const fb = socketFd(upstream);
  // The relay holds as many fds as the two sockets it replaces (the duplicates briefly coexist
  // with the originals, destroyed in this tick).
  if (relay && fa >= 0 && fb >= 0 && budgetAllows(RELAY_FDS - 2)) {
    client.pause();
    upstream.pause();
    const fromClient = drainBuffered(client);
    if (fromClient) prefix = prefix ? Buffer.concat([prefix, fromClient]) : fromClient;
    toClient = chainedSockets.has(upstream) ? drainBuffered(upstream) : null;
    // The tunnel keeps counting against the sandbox's connection cap and the fd budget until
    // the relay reports it done (exactly once; the JS sockets' own accounting ends when they
    // are destroyed below).
    const entry: RelayEntry = { handle: null, released: false };
    const release = () => {
      if (entry.released) return;
      entry.released = true;
      listener.relays.delete(entry);
      listener.clients--;
      socketBudget.open -= RELAY_FDS;
    };
    listener.relays.add(entry);
    listener.clients++;
    socketBudget.open += RELAY_FDS;
    try {
      // Direct upstream sockets use onread (never buffered in the stream) and were paused
      // before connecting; a chained one may hold bytes the upstream sent behind its 200.
      entry.handle = relay.relay(fa, fb, prefix, toClient, idle, release);
    } catch {
      release(); // fall back to piping below
    }
    if (entry.handle !== null) {
      client.destroy();
      upstream.destroy();
      return;
    }
  }
  if (prefix) upstream.write(prefix);
  if (toClient) client.write(toClient);
  splice(client, upstream, idle);
  client.resume();
  upstream.resume();
}

/**
 * A counted body the addon moves from one socket to another (see holdBody()); `start` once
 * everything JS wrote to the receiving socket before it has been flushed.
 */
export interface HeldBody {
  start(length: number): void;
}

/**
 * Takes a body's source over for the native relay, for a plain-HTTP response whose head has just
 * been parsed: duplicates of `from`'s and `to`'s fds go to a held relay, and `from` is destroyed
 * in this tick, so JS reads nothing more from it (what its parser already read is the caller's
 * to send first; the connection is not reused, its parser never sees the body). `to` stays with
 * JS. Until onDone (exactly once: null when the whole body was sent, else why not) the duplicates
 * count against the fd budget and the relay is closed with the listener, when `to` closes, and
 * after idleMs without progress. Null (nothing taken over) where the native relay is not used.
 */
export function holdBody(ctx: ProxyContext, listener: Listener, from: net.Socket, to: net.Socket, onDone: (err: string | null) => void): HeldBody | null {
  const relay = useNativeRelay(ctx) ? nativeRelay() : null;
  const fa = socketFd(from);
  const fb = socketFd(to);
  if (!relay || fa < 0 || fb < 0 || listener.closing || !budgetAllows(RELAY_FDS)) return null;
  const entry: RelayEntry = { handle: null, released: false };
  const close = () => {
    if (entry.handle) relay.relayClose(entry.handle);
  };
  const release = (err: string | null) => {
    if (entry.released) return;
    entry.released = true;
    listener.relays.delete(entry);
    socketBudget.open -= RELAY_FDS;
    to.off('close', close);
    onDone(err);
  };
  listener.relays.add(entry);
  socketBudget.open += RELAY_FDS;
  try {
    entry.handle = relay.relay(fa, fb, null, null, ctx.limits.tunnelIdleTimeoutMs, release, true);
  } catch {
    entry.released = true;
    listener.relays.delete(entry);
    socketBudget.open -= RELAY_FDS;
    return null;
  }
  from.destroy();
  to.once('close', close);
  const handle = entry.handle;
  return {
    start: (length) => {
      relay.relayStart(handle, length);
    },
  };
}
