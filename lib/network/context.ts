/**
 * What the proxy's mechanisms share: the per-proxy state (ProxyContext, one per ManagedProxy), a
 * listener's per-sandbox state (Listener), the outcome of a decision, and the few constants and
 * helpers every request path uses. Types and small pure helpers only; no mechanism lives here.
 */
import type * as http from 'http';
import type * as https from 'https';
import type * as net from 'net';
import type * as tls from 'tls';

import type { AuditLog } from './audit';
import type { DomainMatcher } from './matcher';
import type { BlockHeader, LookupFn, ManagedProxyOptions, ProxyLimits, ProxyPolicyConfig } from './options';

export interface ProxyContext {
  readonly options: ManagedProxyOptions;
  /**
   * The policy and its compiled matcher, replaced together by update(). A decision reads both
   * once, at its start, so it never mixes an old list with a new one.
   */
  rules: { matcher: DomainMatcher; policy: Readonly<Required<ProxyPolicyConfig>> };
  readonly listeners: Set<Listener>;
  readonly pending: Set<PendingDecision>;
  readonly lookup: LookupFn;
  readonly deciderTimeoutMs: number;
  readonly handshakeTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly limits: Required<ProxyLimits>;
  /** Client socket -> "its first head / handshake is complete" (clears the absolute deadline). */
  readonly handshakes: WeakMap<net.Socket, () => void>;
  readonly upstreamProxy: UpstreamProxy | null;
  /** Intercepted TLS sessions -> the checked target of their CONNECT. */
  readonly mitmTargets: WeakMap<tls.TLSSocket, MitmTarget>;
  readonly audit: AuditLog;
  /** close() was called. */
  readonly closed: boolean;
}

export interface UpstreamProxy {
  host: string;
  port: number;
  /** `Basic …` or null. */
  authorization: string | null;
}

// SOCKS5 reply codes (RFC 1928 §6).
export const SOCKS_OK = 0x00;
export const SOCKS_GENERAL_FAILURE = 0x01;
export const SOCKS_NOT_ALLOWED = 0x02;
export const SOCKS_NET_UNREACHABLE = 0x03;
export const SOCKS_HOST_UNREACHABLE = 0x04;
export const SOCKS_CONN_REFUSED = 0x05;
export const SOCKS_CMD_UNSUPPORTED = 0x07;
export const SOCKS_ATYP_UNSUPPORTED = 0x08;

export const LIMITED_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** `host`: the checked name (normalised), or the literal. */
export type Allowed = { allowed: true; address: string; family: 4 | 6; host: string };
export type Refused = {
  allowed: false;
  /** 403 + header for policy refusals; 502 for resolution failures. */
  status: 403 | 502;
  header: BlockHeader | null;
  socksReply: number;
  reason: string;
};
export type Outcome = Allowed | Refused;

/**
 * What an intercepted TLS session was allowed for (its CONNECT), and the session's head deadline:
 * `begin` when a request head is complete, `end` when its answer is done (see intercept()).
 */
export type MitmTarget = { target: Allowed; port: number; client: string | null; begin(): void; end(): void };

export interface Listener {
  processId: string;
  server: net.Server;
  http: http.Server;
  sockets: Set<net.Socket>;
  closing: Promise<void> | null;
  /** Client connections (not upstream sockets) open now. */
  clients: number;
  /** Client connections whose first head / handshake is not complete. */
  pendingHandshakes: number;
  /** Refusals not yet reported, and when the last limit event went out. */
  refusedSinceEvent: number;
  lastLimitEvent: number;
  /** Tunnels handed to the native relay (closed with the listener). */
  relays: Set<RelayEntry>;
  /**
   * Keep-alive pool for plain-HTTP upstream connections. One per sandbox: a connection is reused
   * only for the same checked address and port (the agent's key is the address we dialled, never
   * a name), and never carries another sandbox's requests.
   */
  agent: http.Agent;
  /** HTTP server for intercepted TLS sessions and its origin pool (made on first use). */
  mitm: { server: http.Server; agent: https.Agent } | null;
  /** The listening port, once listening (0 before). */
  port: number;
  /** AttachOptions.admit: which accepted connections are served at all (null: every one). */
  admit: ((socket: net.Socket) => boolean) | null;
}

/** A tunnel in the native relay: it counts as one client connection and RELAY_FDS fds. */
export interface RelayEntry {
  handle: object | null;
  released: boolean;
}

export type DeciderAnswer = { decision: 'allow' | 'deny'; reason?: string } | 'timeout' | 'closed';

export interface PendingDecision {
  timer: NodeJS.Timeout;
  settle: (value: DeciderAnswer) => void;
}

export function clientOf(socket: net.Socket): string | null {
  if (!socket.remoteAddress) return null;
  return socket.remoteAddress.includes(':')
    ? `[${socket.remoteAddress}]:${socket.remotePort}`
    : `${socket.remoteAddress}:${socket.remotePort}`;
}

export function refusalBody(reason: string): string {
  return `blocked by network policy: ${reason}\n`;
}

/** Answers on a client socket that has no HTTP response object (CONNECT, upgrades), and closes it. */
export function replyRaw(socket: net.Socket, status: string, body: string, extra = ''): void {
  socket.end(
    `HTTP/1.1 ${status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `${extra}connection: close\r\n\r\n${body}`,
  );
}
