/**
 * Limits: the process-wide socket budget (fds are shared by every proxy and the host), each
 * sandbox's connection accounting, the defaults of the per-sandbox caps, and the audit event a
 * refusal over a cap produces. The deadlines are set where the connection they bound is made:
 * the first-head deadline in listener.ts, the session head deadline in intercept.ts, the connect
 * timeout in dial.ts, the tunnel idle timeout in relay.ts.
 */
import * as fs from 'fs';
import type * as net from 'net';

import { clientOf, refusalBody, replyRaw, type Allowed, type Listener, type Outcome, type ProxyContext } from './context';
import type { ProxyLimits } from './options';

/**
 * Process-wide socket budget. File descriptors are a per-process resource shared by every proxy
 * and by the host itself: the proxy stops accepting and dialing well before the soft
 * RLIMIT_NOFILE, leaving headroom (a quarter of the limit, at least 256) for the host's own files.
 */
export const socketBudget = (() => {
  let soft = 1024;
  try {
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(fs.readFileSync('/proc/self/limits', 'utf8'));
    if (m) soft = m[1] === 'unlimited' ? 1 << 20 : Number(m[1]);
  } catch {
    /* not Linux: assume the conservative default */
  }
  return { max: Math.max(64, soft - Math.max(256, Math.floor(soft / 4))), open: 0, reserved: 0 };
})();

/**
 * Accepted clients that still hold a reservation for their first upstream socket. Without it a
 * burst of connections accepted before any head is parsed fills the budget with client sockets
 * alone, and then every tunnel is refused at dial time: whether anything is served would depend on
 * how the event loop happened to interleave accepts and reads.
 */
export const upstreamReservations = new WeakSet<net.Socket>();

export function releaseReservation(client: net.Socket): void {
  if (upstreamReservations.delete(client)) socketBudget.reserved--;
}

export const DEFAULT_LIMITS: Required<ProxyLimits> = {
  connectionsPerProcess: 256,
  pendingHandshakesPerProcess: 32,
  tunnelIdleTimeoutMs: 600_000,
};

/** Idle pooled upstream connections kept per sandbox (over all origins), and for how long. */
export const MAX_IDLE_UPSTREAM = 16;
export const IDLE_UPSTREAM_MS = 15_000;

/** Counts `socket` against the listener's sockets and the budget until it closes; false (and destroyed) once the listener is closing. */
export function track(listener: Listener, socket: net.Socket): boolean {
  if (listener.closing) {
    socket.destroy();
    return false;
  }
  if (listener.sockets.has(socket)) return true; // a pooled upstream connection, reused
  listener.sockets.add(socket);
  socketBudget.open++;
  socket.once('close', () => {
    listener.sockets.delete(socket);
    socketBudget.open--;
  });
  return true;
}

/** One audit event per second at most per sandbox while its connections are being refused. */
export function noteRefusal(ctx: ProxyContext, listener: Listener, reason: 'connection_limit' | 'socket_budget', client: string | null): void {
  listener.refusedSinceEvent++;
  const now = Date.now();
  if (now - listener.lastLimitEvent < 1000) return;
  listener.lastLimitEvent = now;
  const count = listener.refusedSinceEvent;
  listener.refusedSinceEvent = 0;
  ctx.audit.emit({
    processId: listener.processId,
    timestamp: new Date(now).toISOString(),
    scope: 'non_domain',
    decision: 'deny',
    source: 'policy',
    reason,
    protocol: 'http',
    host: '',
    port: 0,
    method: null,
    client,
    count,
  });
}

/** True when the process-wide socket budget has room for `n` more sockets. */
export function budgetAllows(n: number): boolean {
  return socketBudget.open + socketBudget.reserved + n <= socketBudget.max;
}

/**
 * Admission of a CONNECT or upgrade once decided: a refusal is answered on the raw socket (403 with
 * its x-proxy-error, 502 when `host` did not resolve), so is a full socket budget (503); a socket
 * closed meanwhile gets nothing. True when the request may dial, its upstream slot claimed.
 */
export function admitUpstream(ctx: ProxyContext, listener: Listener, socket: net.Socket, outcome: Outcome, host: string): outcome is Allowed {
  if (!outcome.allowed) {
    if (outcome.header) replyRaw(socket, '403 Forbidden', refusalBody(outcome.reason), `x-proxy-error: ${outcome.header}\r\n`);
    else replyRaw(socket, '502 Bad Gateway', `proxy could not resolve ${host}\n`);
    return false;
  }
  if (socket.destroyed) return false;
  if (!claimUpstreamSlot(socket)) {
    noteRefusal(ctx, listener, 'socket_budget', clientOf(socket));
    replyRaw(socket, '503 Service Unavailable', 'blocked by network policy: proxy socket budget exhausted\n', 'x-proxy-error: blocked-by-connection-limit\r\n');
    return false;
  }
  return true;
}

/** Room for one upstream socket of `client`: its own reservation, else a free slot. */
export function claimUpstreamSlot(client: net.Socket): boolean {
  if (upstreamReservations.has(client)) {
    releaseReservation(client);
    return true;
  }
  return budgetAllows(1);
}
