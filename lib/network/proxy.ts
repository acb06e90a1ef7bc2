/**
 * ManagedProxy: a loopback HTTP + SOCKS5 proxy that enforces a domain policy for sandboxed
 * processes, reports every decision, and can defer allowlist misses to the host.
 *
 * Usage:
 *   const proxy = await ManagedProxy.start({ policy: { allow: ['**.npmjs.org'] }, onAudit });
 *   const { port, detach } = await proxy.attach('proc-1');           // proxy-owned 127.0.0.1:0
 *   const { port } = await proxy.attach('proc-2', { fd: listenerFd }); // listener made elsewhere
 *   spawn(cmd, { env: ManagedProxy.proxyEnv(process.env, port) });
 *   await detach();                                                  // closes with the last one
 *
 * One listener per attached process: every connection accepted on a listener is attributed to
 * that listener's processId, so one proxy serves many concurrent sandboxes. HTTP and SOCKS5 share
 * a listener; the first byte tells them apart (0x05 is a SOCKS5 greeting, anything else is HTTP).
 *
 * A destination is resolved once; the proxy dials exactly the address it checked, so a second DNS
 * answer cannot redirect an approved name to a local address.
 *
 * Everything here runs on the Node event loop; no method is safe to call after close() resolves
 * except close() itself.
 */
import * as dns from 'dns';
import * as fs from 'fs';
import * as http from 'http';
import * as https from 'https';
import * as net from 'net';
import * as tls from 'tls';
import type { AddressInfo } from 'net';

import { classifyAddress, looksNumericHost, type AddressClass } from './addresses';
import { buildProxyEnv, type ProxyEnvOptions } from './env';
import { badHostShape, DomainMatcher, isIpLiteral, MAX_HOST_LENGTH, normalizeHost } from './matcher';
import type { InterceptionCa } from './mitm';
import { drainBuffered, nativeRelay, socketFd } from './relay';

export interface ProxyPolicyConfig {
  allow: string[];
  deny?: string[];
  /** Let allowed names reach loopback and private addresses (local services). */
  allowLocal?: boolean;
  /** `limited`: only GET, HEAD and OPTIONS over plain HTTP; CONNECT and SOCKS5 are refused. */
  mode?: 'full' | 'limited';
}

export type AuditProtocol = 'http' | 'httpsConnect' | 'socks5Tcp' | 'socks5Udp';
export type AuditSource = 'allowlist' | 'denylist' | 'decider' | 'policy' | 'mode';

export interface AuditEvent {
  processId: string;
  /** ISO 8601. */
  timestamp: string;
  /** `domain` for host names, `non_domain` for IP literals. */
  scope: 'domain' | 'non_domain';
  decision: 'allow' | 'deny';
  source: AuditSource;
  reason: string;
  protocol: AuditProtocol;
  host: string;
  port: number;
  method: string | null;
  /** The client's address as `ip:port`, as seen by the proxy. */
  client: string | null;
  /** true when the decider allowed a host the allow list did not cover. */
  policyOverride?: boolean;
  /** Connection-limit events: how many connections were refused since the previous event. */
  count?: number;
}

export interface DeciderRequest {
  processId: string;
  protocol: AuditProtocol;
  host: string;
  port: number;
  method?: string;
}

export type Decider = (req: DeciderRequest) => Promise<{ decision: 'allow' | 'deny'; reason?: string }>;

export type LookupFn = (host: string) => Promise<Array<{ address: string; family: 4 | 6 }>>;

export interface ManagedProxyOptions {
  policy: ProxyPolicyConfig;
  onAudit?: (event: AuditEvent) => void;
  /** Consulted for allowlist misses only (never for explicit denies or local-address refusals). */
  decider?: Decider;
  /** Default 30000. A decider that does not answer in time counts as a denial. */
  deciderTimeoutMs?: number;
  /** Injectable resolver. Default: dns.promises.lookup(host, { all: true, verbatim: true }). */
  lookup?: LookupFn;
  /** Serve SOCKS5 on the listeners as well as HTTP. Default true. */
  enableSocks5?: boolean;
  /** Close the proxy when the last attached process detaches. Default true. */
  closeWithLastProcess?: boolean;
  /**
   * Absolute time allowed for a request head / SOCKS5 handshake, from the first byte of the
   * connection (a client trickling one byte at a time gets no more). Default 30000.
   */
  handshakeTimeoutMs?: number;
  /** Time allowed for the upstream TCP connect. Default 30000. */
  connectTimeoutMs?: number;
  /** Caps that keep one sandbox from exhausting the host (see ProxyLimits). */
  limits?: ProxyLimits;
  /**
   * How established CONNECT / SOCKS5 tunnels move bytes. `auto` (default): the addon's native
   * relay where available (Linux), else JS stream piping; `js`: always JS piping.
   */
  relay?: 'auto' | 'js';
  /**
   * Send all egress through this HTTP proxy (`http://[user:password@]host:port`), for networks
   * where only a corporate proxy reaches the outside. Tunnels (CONNECT, SOCKS5, WebSocket) become
   * `CONNECT <target>:<port>` to it; plain HTTP goes to it in absolute form. Every request is
   * still decided here first (names resolved and their addresses checked, so local DNS must
   * work). Credentials go out as `Proxy-Authorization: Basic`.
   */
  upstreamProxy?: string;
  /**
   * What the upstream proxy is asked for. `name` (default): the checked host name, as corporate
   * proxies that filter by name and name-based virtual hosts over plain HTTP need; the upstream
   * then resolves it itself, so our local-address checks cover our resolution only. `address`:
   * the address we checked (the upstream dials exactly that; plain-HTTP origins see that address
   * as Host after an RFC 9112 proxy rewrote it).
   */
  upstreamTarget?: 'name' | 'address';
  /**
   * TLS interception, for the hosts whose policy needs it; every other tunnel passes through
   * untouched. With it, `limited` mode allows CONNECT to allowed hosts and checks each request's
   * method inside the TLS session (GET/HEAD/OPTIONS), and credential rules swap a placeholder the
   * sandbox holds for the real value, only on requests to that rule's host. Sandboxed clients must
   * trust `ca`: spawn()/run() put InterceptionCa.env() into the child's env and keep the CA's
   * directory readable (see README). Intercepted sessions speak HTTP/1.1 only (ALPN), WebSocket
   * upgrades inside them are checked like requests and then relayed, and with upstreamProxy the
   * origin is reached through a CONNECT tunnel to it.
   */
  interception?: InterceptionOptions;
}

export interface CredentialRule {
  /** Exact host name (normalised) the real value may go to. */
  host: string;
  /** Request header carrying the credential, e.g. `authorization`. */
  header: string;
  /** What the sandbox has (in its env or config) instead of the secret. */
  placeholder: string;
  /** What replaces the placeholder in that header, on requests to `host` only. */
  value: string;
}

export interface InterceptionOptions {
  ca: InterceptionCa;
  credentials?: CredentialRule[];
  /** Extra CA certificates (PEM) trusted for origins, besides the system roots (tests, private PKI). */
  originCa?: string;
}

/**
 * Per-sandbox (per attached processId) caps, and the idle timeout of established tunnels. A
 * connection over a cap is answered `429 Too Many Requests` (`x-proxy-error:
 * blocked-by-connection-limit`) and closed; over the process-wide socket budget, `503`. Each
 * refusal is an audit event (reason `connection_limit` / `socket_budget`; at most one per second
 * per sandbox, with `count`).
 */
export interface ProxyLimits {
  /** Client connections open at once, tunnels included. Default 256. */
  connectionsPerProcess?: number;
  /** Client connections still sending their request head or SOCKS5 handshake. Default 32. */
  pendingHandshakesPerProcess?: number;
  /** An established tunnel (CONNECT, SOCKS5, WebSocket) with no traffic either way for this long is closed. Default 600000. */
  tunnelIdleTimeoutMs?: number;
}

export interface Attachment {
  port: number;
  host: '127.0.0.1';
  detach(): Promise<void>;
}

/** Header value of `x-proxy-error` on a refusal. */
export type BlockHeader =
  | 'blocked-by-allowlist'
  | 'blocked-by-denylist'
  | 'blocked-by-method-policy'
  | 'blocked-by-policy'
  | 'blocked-by-connection-limit';

/** Emitted on a socket from dial() once bytes can flow to the target (TCP connect, or the upstream proxy's 200). */
const READY = 'psb:ready';

interface UpstreamProxy {
  host: string;
  port: number;
  /** `Basic …` or null. */
  authorization: string | null;
}

function parseUpstreamProxy(raw: string): UpstreamProxy {
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
function authorityOf(address: string, port: number): string {
  return net.isIPv6(address) ? `[${address}]:${port}` : `${address}:${port}`;
}

/** Sockets dialled through an upstream proxy: plain streams (no onread), piped both ways in JS. */
const chainedSockets = new WeakSet<net.Socket>();

// SOCKS5 reply codes (RFC 1928 §6).
const SOCKS_OK = 0x00;
const SOCKS_GENERAL_FAILURE = 0x01;
const SOCKS_NOT_ALLOWED = 0x02;
const SOCKS_NET_UNREACHABLE = 0x03;
const SOCKS_HOST_UNREACHABLE = 0x04;
const SOCKS_CONN_REFUSED = 0x05;
const SOCKS_CMD_UNSUPPORTED = 0x07;
const SOCKS_ATYP_UNSUPPORTED = 0x08;

// Upstream reads land in fresh buffers that grow while reads fill them (bulk downloads: fewer,
// larger read/write syscalls) and shrink when they do not (chatty connections keep little memory).
const MIN_READ = 64 << 10;
const MAX_READ = 1 << 20;

const LIMITED_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

const HOP_BY_HOP = new Set([
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
type Allowed = { allowed: true; address: string; family: 4 | 6; host: string };
type Refused = {
  allowed: false;
  /** 403 + header for policy refusals; 502 for resolution failures. */
  status: 403 | 502;
  header: BlockHeader | null;
  socksReply: number;
  reason: string;
};
type Outcome = Allowed | Refused;

/**
 * What an intercepted TLS session was allowed for (its CONNECT), and the session's head deadline:
 * `begin` when a request head is complete, `end` when its answer is done (see intercept()).
 */
type MitmTarget = { target: Allowed; port: number; client: string | null; begin(): void; end(): void };

/** ALPN of intercepted sessions, both towards the client and towards the origin. */
const MITM_ALPN = ['http/1.1'] as const;

/** What Node's https.Agent hands createConnection (request options merged with the agent's). */
type ChainedConnectOptions = { port: number; ca?: string | string[]; psbTarget?: Allowed };
type ChainedConnect = (opts: ChainedConnectOptions, cb: (err: Error | null, socket?: net.Socket) => void) => undefined;

interface Listener {
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
}

/** A tunnel in the native relay: it counts as one client connection and RELAY_FDS fds. */
interface RelayEntry {
  handle: object | null;
  released: boolean;
}

/** fds a natively relayed tunnel holds: its two socket duplicates. */
const RELAY_FDS = 2;

/** How many refusals recentBlocked() keeps. */
const RECENT_BLOCKED = 256;

/** Idle pooled upstream connections kept per sandbox (over all origins), and for how long. */
const MAX_IDLE_UPSTREAM = 16;
const IDLE_UPSTREAM_MS = 15_000;

function upstreamAgent(): http.Agent {
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

/**
 * Process-wide socket budget. File descriptors are a per-process resource shared by every proxy
 * and by the host itself: the proxy stops accepting and dialing well before the soft
 * RLIMIT_NOFILE, leaving headroom (a quarter of the limit, at least 256) for the host's own files.
 */
const socketBudget = (() => {
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
const upstreamReservations = new WeakSet<net.Socket>();

function releaseReservation(client: net.Socket): void {
  if (upstreamReservations.delete(client)) socketBudget.reserved--;
}

const DEFAULT_LIMITS: Required<ProxyLimits> = {
  connectionsPerProcess: 256,
  pendingHandshakesPerProcess: 32,
  tunnelIdleTimeoutMs: 600_000,
};

type DeciderAnswer = { decision: 'allow' | 'deny'; reason?: string } | 'timeout' | 'closed';

interface PendingDecision {
  timer: NodeJS.Timeout;
  settle: (value: DeciderAnswer) => void;
}

const defaultLookup: LookupFn = async (host) => {
  const results = await dns.promises.lookup(host, { all: true, verbatim: true });
  return results.map((r) => ({ address: r.address, family: r.family === 6 ? 6 : 4 }));
};

function isLocalClass(c: AddressClass): boolean {
  return c !== 'public';
}

function clientOf(socket: net.Socket): string | null {
  if (!socket.remoteAddress) return null;
  return socket.remoteAddress.includes(':')
    ? `[${socket.remoteAddress}]:${socket.remotePort}`
    : `${socket.remoteAddress}:${socket.remotePort}`;
}

function socksReply(code: number, bound?: AddressInfo | null): Buffer {
  if (bound && net.isIPv4(bound.address)) {
    const parts = bound.address.split('.').map(Number);
    return Buffer.from([5, code, 0, 1, ...parts, (bound.port >> 8) & 0xff, bound.port & 0xff]);
  }
  return Buffer.from([5, code, 0, 1, 0, 0, 0, 0, 0, 0]);
}

function socksCodeForError(err: NodeJS.ErrnoException): number {
  switch (err.code) {
    case 'ECONNREFUSED':
      return SOCKS_CONN_REFUSED;
    case 'ENETUNREACH':
      return SOCKS_NET_UNREACHABLE;
    case 'EHOSTUNREACH':
    case 'ETIMEDOUT':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return SOCKS_HOST_UNREACHABLE;
    default:
      return SOCKS_GENERAL_FAILURE;
  }
}

/**
 * Join a client socket and an upstream socket: the client's bytes are piped up with stream
 * backpressure; the other direction is dial()'s read callback for a direct upstream, a pipe for
 * any other (`upstreamIsStream`: chained, or a TLS socket to an intercepted origin). A graceful
 * end on one side is passed on as a half-close; an error or reset on either side tears both down.
 */
function splice(client: net.Socket, upstream: net.Socket, idleMs: number, upstreamIsStream = chainedSockets.has(upstream)): void {
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

/** Reads exact byte counts from a socket during the SOCKS5 handshake. */
class ByteReader {
  private buffered: Buffer = Buffer.alloc(0);
  private want = 0;
  private waiter: { resolve: (b: Buffer) => void; reject: (e: Error) => void } | null = null;
  private ended = false;
  private readonly onData = (chunk: Buffer) => {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    this.pump();
  };
  private readonly onEnd = () => {
    this.ended = true;
    this.pump();
  };

  constructor(private readonly socket: net.Socket) {
    socket.on('data', this.onData);
    socket.on('end', this.onEnd);
    socket.on('close', this.onEnd);
    socket.resume();
  }

  read(n: number): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.want = n;
      this.waiter = { resolve, reject };
      this.pump();
    });
  }

  /** Stop reading; unread bytes go back to the socket for the next consumer. */
  release(): void {
    this.socket.off('data', this.onData);
    this.socket.off('end', this.onEnd);
    this.socket.off('close', this.onEnd);
    this.socket.pause();
    if (this.buffered.length > 0) this.socket.unshift(this.buffered);
    this.buffered = Buffer.alloc(0);
  }

  private pump(): void {
    if (!this.waiter) return;
    if (this.buffered.length >= this.want) {
      const out = this.buffered.subarray(0, this.want);
      this.buffered = this.buffered.subarray(this.want);
      const w = this.waiter;
      this.waiter = null;
      w.resolve(out);
    } else if (this.ended) {
      const w = this.waiter;
      this.waiter = null;
      w.reject(new Error('connection closed during SOCKS5 handshake'));
    }
  }
}

export class ManagedProxy {
  /**
   * The policy and its compiled matcher, replaced together by update(). A decision reads both
   * once, at its start, so it never mixes an old list with a new one.
   */
  private rules: { matcher: DomainMatcher; policy: Readonly<Required<ProxyPolicyConfig>> };
  /** The last refusals (newest last), for `recentBlocked()`. */
  private readonly blocked: AuditEvent[] = [];
  private readonly listeners = new Set<Listener>();
  private readonly pending = new Set<PendingDecision>();
  private readonly lookup: LookupFn;
  private readonly deciderTimeoutMs: number;
  private readonly handshakeTimeoutMs: number;
  private readonly connectTimeoutMs: number;
  private readonly limits: Required<ProxyLimits>;
  /** Client socket -> "its first head / handshake is complete" (clears the absolute deadline). */
  private readonly handshakes = new WeakMap<net.Socket, () => void>();
  private closePromise: Promise<void> | null = null;
  private readonly upstreamProxy: UpstreamProxy | null;
  /** Intercepted TLS sessions -> the checked target of their CONNECT. */
  private readonly mitmTargets = new WeakMap<tls.TLSSocket, MitmTarget>();

  private constructor(private readonly options: ManagedProxyOptions, matcher: DomainMatcher) {
    this.rules = { matcher, policy: ManagedProxy.fullPolicy(options.policy) };
    this.lookup = options.lookup ?? defaultLookup;
    this.deciderTimeoutMs = options.deciderTimeoutMs ?? 30_000;
    this.handshakeTimeoutMs = options.handshakeTimeoutMs ?? 30_000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 30_000;
    this.limits = { ...DEFAULT_LIMITS, ...(options.limits ?? {}) };
    this.upstreamProxy = options.upstreamProxy !== undefined ? parseUpstreamProxy(options.upstreamProxy) : null;
  }

  /** Validates the policy and returns a proxy with no listeners yet (attach() creates them). */
  static async start(options: ManagedProxyOptions): Promise<ManagedProxy> {
    return ManagedProxy.create(options);
  }

  /** Synchronous form of start() (it opens nothing until attach()); spawn() uses it. */
  static create(options: ManagedProxyOptions): ManagedProxy {
    const matcher = ManagedProxy.compilePolicy(options.policy);
    for (const [name, value] of [
      ['deciderTimeoutMs', options.deciderTimeoutMs],
      ['handshakeTimeoutMs', options.handshakeTimeoutMs],
      ['connectTimeoutMs', options.connectTimeoutMs],
      ['limits.connectionsPerProcess', options.limits?.connectionsPerProcess],
      ['limits.pendingHandshakesPerProcess', options.limits?.pendingHandshakesPerProcess],
      ['limits.tunnelIdleTimeoutMs', options.limits?.tunnelIdleTimeoutMs],
    ] as const) {
      if (value !== undefined && (!Number.isFinite(value) || value <= 0)) {
        throw new TypeError(`Expected ${name} to be a positive number, got ${String(value)}`);
      }
    }
    if (options.limits !== undefined) {
      if (options.limits === null || typeof options.limits !== 'object') throw new TypeError('Expected limits to be an object');
      for (const k of Object.keys(options.limits)) {
        if (!(k in DEFAULT_LIMITS)) throw new TypeError(`Unknown field limits.${k}`);
      }
    }
    if (options.upstreamProxy !== undefined) {
      if (typeof options.upstreamProxy !== 'string') throw new TypeError('Expected upstreamProxy to be a string');
      parseUpstreamProxy(options.upstreamProxy);
    }
    if (options.upstreamTarget !== undefined && options.upstreamTarget !== 'name' && options.upstreamTarget !== 'address') {
      throw new TypeError(`Expected upstreamTarget to be "name" or "address", got ${JSON.stringify(options.upstreamTarget)}`);
    }
    if (options.interception !== undefined) ManagedProxy.checkInterception(options.interception);
    if (options.relay !== undefined && options.relay !== 'auto' && options.relay !== 'js') {
      throw new TypeError(`Expected relay to be "auto" or "js", got ${JSON.stringify(options.relay)}`);
    }
    if (options.decider !== undefined && typeof options.decider !== 'function') {
      throw new TypeError('Expected decider to be a function');
    }
    return new ManagedProxy(options, matcher);
  }

  private static fullPolicy(p: ProxyPolicyConfig): Readonly<Required<ProxyPolicyConfig>> {
    return Object.freeze({
      allow: [...p.allow],
      deny: [...(p.deny ?? [])],
      allowLocal: p.allowLocal === true,
      mode: p.mode ?? 'full',
    });
  }

  /** The policy in force now (a copy). */
  get policy(): Required<ProxyPolicyConfig> {
    const p = this.rules.policy;
    return { allow: [...p.allow], deny: [...p.deny], allowLocal: p.allowLocal, mode: p.mode };
  }

  /**
   * Replaces the policy of a live proxy, for every attached sandbox at once. Fields left out keep
   * their current value (`update({ allow: [...] })` changes the allow list only). The new policy is
   * validated first: a bad one throws TypeError and the old one stays in force. It applies to
   * every decision that starts afterwards (requests on kept-alive client connections included);
   * tunnels already established are not re-checked and keep running.
   */
  update(changes: Partial<ProxyPolicyConfig>): void {
    if (changes === null || typeof changes !== 'object') throw new TypeError('Expected update() to get a policy object');
    for (const k of Object.keys(changes)) {
      if (!['allow', 'deny', 'allowLocal', 'mode'].includes(k)) throw new TypeError(`Unknown policy field ${k}`);
    }
    const next: ProxyPolicyConfig = { ...this.rules.policy, ...changes };
    const matcher = ManagedProxy.compilePolicy(next);
    this.rules = { matcher, policy: ManagedProxy.fullPolicy(next) };
  }

  /**
   * The most recent refused requests and connections (newest last, at most 256), as the audit
   * events that reported them: policy refusals and cap/budget refusals alike.
   */
  recentBlocked(limit = RECENT_BLOCKED): AuditEvent[] {
    if (!Number.isInteger(limit) || limit < 0) throw new TypeError(`Expected limit to be a non-negative integer, got ${String(limit)}`);
    const n = Math.min(limit, this.blocked.length);
    return this.blocked.slice(this.blocked.length - n).map((e) => ({ ...e }));
  }

  /** The interception CA the sandboxed clients must trust, or null without interception. */
  get interceptionCa(): InterceptionCa | null {
    return this.options.interception?.ca ?? null;
  }

  /** Validates `interception` (TypeError with a precise message); spawn() checks its option with it. */
  static checkInterception(i: InterceptionOptions): void {
    if (i === null || typeof i !== 'object') throw new TypeError('Expected interception to be an object');
    const ca = i.ca as Partial<InterceptionCa> | undefined;
    if (!ca || typeof ca.leafFor !== 'function') throw new TypeError('Expected interception.ca to be an InterceptionCa');
    if (i.originCa !== undefined && typeof i.originCa !== 'string') throw new TypeError('Expected interception.originCa to be a PEM string');
    if (i.credentials !== undefined && !Array.isArray(i.credentials)) throw new TypeError('Expected interception.credentials to be an array');
    for (const [n, c] of (i.credentials ?? []).entries()) {
      for (const k of ['host', 'header', 'placeholder', 'value'] as const) {
        if (typeof c?.[k] !== 'string' || c[k] === '') throw new TypeError(`Expected interception.credentials[${n}].${k} to be a non-empty string`);
      }
      if (normalizeHost(c.host) !== c.host || isIpLiteral(c.host) || badHostShape(c.host)) {
        throw new TypeError(`interception.credentials[${n}].host must be a normalised host name, got ${JSON.stringify(c.host)}`);
      }
      if (!/^[a-z0-9-]+$/i.test(c.header) || /[\r\n]/.test(c.value)) throw new TypeError(`interception.credentials[${n}] has a bad header name or value`);
      if (c.placeholder.length < 8) throw new TypeError(`interception.credentials[${n}].placeholder is too short to be unique`);
    }
  }

  /** Validates a policy; throws TypeError with a precise message. */
  static compilePolicy(policy: ProxyPolicyConfig): DomainMatcher {
    if (policy === null || typeof policy !== 'object') throw new TypeError('Expected policy to be an object');
    if (!Array.isArray(policy.allow)) throw new TypeError('Expected policy.allow to be an array of domain patterns');
    if (policy.deny !== undefined && !Array.isArray(policy.deny)) {
      throw new TypeError('Expected policy.deny to be an array of domain patterns');
    }
    if (policy.mode !== undefined && policy.mode !== 'full' && policy.mode !== 'limited') {
      throw new TypeError(`Expected policy.mode to be "full" or "limited", got ${JSON.stringify(policy.mode)}`);
    }
    if (policy.allowLocal !== undefined && typeof policy.allowLocal !== 'boolean') {
      throw new TypeError('Expected policy.allowLocal to be a boolean');
    }
    return new DomainMatcher(policy.allow, policy.deny ?? []);
  }

  /** Environment for a child that should use the listener on `port`. See lib/network/env.ts. */
  static proxyEnv(
    baseEnv: Record<string, string>,
    port: number,
    options?: ProxyEnvOptions,
  ): Record<string, string> {
    return buildProxyEnv(baseEnv, port, options);
  }

  get closed(): boolean {
    return this.closePromise !== null;
  }

  /** processIds with a live listener. */
  get attachedProcessIds(): string[] {
    return [...this.listeners].filter((l) => !l.closing).map((l) => l.processId);
  }

  /**
   * Accept connections for `processId`. With `fd`, the proxy takes ownership of that TCP socket
   * (bound, or already listening) and closes it on detach; without, it listens on 127.0.0.1:0.
   */
  async attach(processId: string, opts: { fd?: number } = {}): Promise<Attachment> {
    if (this.closed) throw new Error('ManagedProxy is closed');
    if (typeof processId !== 'string' || processId === '') {
      throw new TypeError('Expected processId to be a non-empty string');
    }
    if (opts.fd !== undefined && (!Number.isInteger(opts.fd) || opts.fd < 0)) {
      throw new TypeError(`Expected fd to be a non-negative integer, got ${String(opts.fd)}`);
    }
    const listener: Listener = {
      processId,
      server: net.createServer({ allowHalfOpen: true }),
      // Heads are capped at 16 KiB (a larger one is a 431) and must arrive within
      // handshakeTimeoutMs of their first byte, on kept-alive connections too.
      http: http.createServer({ maxHeaderSize: 16 * 1024, headersTimeout: this.handshakeTimeoutMs, requestTimeout: 0 }),
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
    };
    listener.server.on('connection', (socket) => this.onConnection(listener, socket));
    // A bug in a handler must cost one connection, never the host process.
    listener.http.on('request', (req, res) => {
      this.onHttpRequest(listener, req, res, false).catch(() => req.socket.destroy());
    });
    // `Expect: 100-continue`: the client waits for the 100 before sending its body. Node would
    // send it at once; the policy decides first (onHttpRequest sends the 100 only when allowed).
    listener.http.on('checkContinue', (req, res) => {
      this.onHttpRequest(listener, req, res, true).catch(() => req.socket.destroy());
    });
    listener.http.on('connect', (req, socket: net.Socket, head: Buffer) => {
      this.onConnect(listener, req, socket, head).catch(() => socket.destroy());
    });
    listener.http.on('upgrade', (req, socket: net.Socket, head: Buffer) => {
      this.onUpgrade(listener, req, socket, head).catch(() => socket.destroy());
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
    this.listeners.add(listener);
    if (this.closed) {
      await this.closeListener(listener);
      throw new Error('ManagedProxy is closed');
    }
    return {
      port,
      host: '127.0.0.1',
      detach: () => this.detach(listener),
    };
  }

  /** Stops every listener, drops every connection and pending decision. Idempotent. */
  close(): Promise<void> {
    if (!this.closePromise) {
      for (const p of this.pending) {
        p.settle('closed');
      }
      this.pending.clear();
      this.closePromise = Promise.all([...this.listeners].map((l) => this.closeListener(l))).then(() => undefined);
    }
    return this.closePromise;
  }

  private async detach(listener: Listener): Promise<void> {
    await this.closeListener(listener);
    if (this.options.closeWithLastProcess !== false && this.listeners.size === 0) await this.close();
  }

  private closeListener(listener: Listener): Promise<void> {
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
        this.listeners.delete(listener);
      });
    }
    return listener.closing;
  }

  private track(listener: Listener, socket: net.Socket): boolean {
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
  private noteRefusal(listener: Listener, reason: 'connection_limit' | 'socket_budget', client: string | null): void {
    listener.refusedSinceEvent++;
    const now = Date.now();
    if (now - listener.lastLimitEvent < 1000) return;
    listener.lastLimitEvent = now;
    const count = listener.refusedSinceEvent;
    listener.refusedSinceEvent = 0;
    this.emit({
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
  private static budgetAllows(n: number): boolean {
    return socketBudget.open + socketBudget.reserved + n <= socketBudget.max;
  }

  /** Room for one upstream socket of `client`: its own reservation, else a free slot. */
  private static claimUpstreamSlot(client: net.Socket): boolean {
    if (upstreamReservations.has(client)) {
      releaseReservation(client);
      return true;
    }
    return ManagedProxy.budgetAllows(1);
  }

  private onConnection(listener: Listener, socket: net.Socket): void {
    socket.on('error', () => {
      /* resets from either side are routine for a proxy */
    });
    // Over a cap the connection is answered and closed at once: it costs the host one fd for
    // the time of one write, and the sandbox gets a clear status instead of a hang.
    const overBudget = !ManagedProxy.budgetAllows(2);
    if (
      overBudget ||
      listener.clients >= this.limits.connectionsPerProcess ||
      listener.pendingHandshakes >= this.limits.pendingHandshakesPerProcess
    ) {
      this.noteRefusal(listener, overBudget ? 'socket_budget' : 'connection_limit', clientOf(socket));
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
    if (!this.track(listener, socket)) return;
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
    const deadline = setTimeout(() => socket.destroy(), this.handshakeTimeoutMs);
    this.handshakes.set(socket, handshakeDone);
    // The listener allows half-open sockets (tunnels need them); a client that goes away before
    // its head is complete must not hold the slot until the deadline.
    socket.once('end', () => {
      if (pending) socket.destroy();
    });
    socket.once('data', (first: Buffer) => {
      socket.pause();
      socket.unshift(first);
      if (first[0] === 0x05) {
        if (this.options.enableSocks5 === false) {
          socket.destroy();
          return;
        }
        this.onSocks(listener, socket).catch(() => socket.destroy());
      } else {
        listener.http.emit('connection', socket);
        socket.resume();
      }
    });
  }

  // ---- policy --------------------------------------------------------------------------------

  private emit(event: AuditEvent): void {
    if (event.decision === 'deny') {
      this.blocked.push(event);
      if (this.blocked.length > RECENT_BLOCKED) this.blocked.splice(0, this.blocked.length - RECENT_BLOCKED);
    }
    if (!this.options.onAudit) return;
    try {
      this.options.onAudit(event);
    } catch {
      /* an audit sink must not break the proxy */
    }
  }

  private consultDecider(req: DeciderRequest): Promise<DeciderAnswer> {
    return new Promise((resolve) => {
      let done = false;
      const entry: PendingDecision = {
        timer: setTimeout(() => entry.settle('timeout'), this.deciderTimeoutMs),
        settle: (value) => {
          if (done) return;
          done = true;
          clearTimeout(entry.timer);
          this.pending.delete(entry);
          resolve(value);
        },
      };
      this.pending.add(entry);
      let call: Promise<{ decision: 'allow' | 'deny'; reason?: string }>;
      try {
        call = Promise.resolve(this.options.decider!(req));
      } catch (err) {
        call = Promise.reject(err);
      }
      call.then(
        (answer) => {
          const ok = answer && (answer.decision === 'allow' || answer.decision === 'deny');
          entry.settle(
            ok
              ? { decision: answer.decision, reason: typeof answer.reason === 'string' ? answer.reason : undefined }
              : { decision: 'deny', reason: 'decider_invalid_answer' },
          );
        },
        () => entry.settle({ decision: 'deny', reason: 'decider_error' }),
      );
    });
  }

  /**
   * The whole decision for one request: mode, deny list, local-literal check, allow list or
   * decider, then one resolution and a check of every resolved address. Emits exactly one event.
   */
  private async decide(
    listener: Listener,
    client: string | null,
    protocol: AuditProtocol,
    rawHost: string,
    port: number,
    method: string | null,
  ): Promise<Outcome> {
    const { matcher, policy } = this.rules;
    const host = normalizeHost(rawHost);
    const literal = isIpLiteral(host);
    const base = {
      processId: listener.processId,
      scope: literal ? ('non_domain' as const) : ('domain' as const),
      protocol,
      // A refused 10 kB name is reported, not echoed whole.
      host: host.length > MAX_HOST_LENGTH ? `${host.slice(0, MAX_HOST_LENGTH)}…` : host,
      port,
      method,
      client,
    };
    // One literal, not spreads: this runs for every plain-HTTP request (it showed in profiles).
    const record = (decision: 'allow' | 'deny', source: AuditSource, reason: string, override?: boolean) => {
      const event: AuditEvent = {
        processId: base.processId,
        scope: base.scope,
        protocol,
        host: base.host,
        port,
        method,
        client,
        timestamp: new Date().toISOString(),
        decision,
        source,
        reason,
      };
      if (override !== undefined) event.policyOverride = override;
      this.emit(event);
    };
    const refuse = (source: AuditSource, reason: string, header: BlockHeader, socks = SOCKS_NOT_ALLOWED): Refused => {
      record('deny', source, reason);
      return { allowed: false, status: 403, header, socksReply: socks, reason };
    };

    if (host === '' || !(port > 0 && port <= 65535)) return refuse('policy', 'invalid_target', 'blocked-by-policy');
    // A name is looked up only when it is a well-formed host name: never an over-long one, and
    // never a numeric one that is not an IPv4 address in any inet_aton spelling.
    if (!literal && (badHostShape(host) || looksNumericHost(host) || !/^[a-z0-9_.-]+$/.test(host))) {
      return refuse('policy', 'invalid_target', 'blocked-by-policy');
    }
    if (policy.mode === 'limited') {
      // With interception, a CONNECT is opened and each request inside it is checked.
      const intercepted = this.options.interception !== undefined && protocol === 'httpsConnect' && method === 'CONNECT';
      const ok = intercepted || (protocol === 'http' && method !== null && LIMITED_METHODS.has(method));
      if (!ok) return refuse('mode', 'method_not_allowed', 'blocked-by-method-policy');
    }
    const verdict = matcher.evaluate(host);
    if (verdict.verdict === 'denied') return refuse('denylist', 'denied', 'blocked-by-denylist');

    const explicitIp = literal && matcher.isExplicitlyAllowedIp(host);
    if (literal && !explicitIp) {
      const cls = classifyAddress(host);
      if (isLocalClass(cls) && (!policy.allowLocal || cls === 'metadata')) {
        return refuse('policy', 'not_allowed_local', 'blocked-by-policy');
      }
    }

    let source: AuditSource = 'allowlist';
    let reason = 'allowed';
    let override: boolean | undefined;
    if (verdict.verdict !== 'allowed') {
      if (!this.options.decider) return refuse('allowlist', 'not_allowed', 'blocked-by-allowlist');
      const answer = await this.consultDecider({
        processId: listener.processId,
        protocol,
        host,
        port,
        ...(method !== null ? { method } : {}),
      });
      if (answer === 'timeout') return refuse('decider', 'decider_timeout', 'blocked-by-policy');
      if (answer === 'closed') return refuse('policy', 'proxy_closed', 'blocked-by-policy');
      if (answer.decision === 'deny') return refuse('decider', answer.reason ?? 'policy_denied', 'blocked-by-policy');
      source = 'decider';
      reason = answer.reason ?? 'policy_allowed';
      override = true;
    }
    if (this.closed || listener.closing) return refuse('policy', 'proxy_closed', 'blocked-by-policy');

    let addresses: Array<{ address: string; family: 4 | 6 }>;
    if (literal) {
      addresses = [{ address: host, family: net.isIPv6(host) ? 6 : 4 }];
    } else {
      try {
        addresses = (await this.lookup(host)).filter((a) => net.isIP(a.address) !== 0);
      } catch {
        addresses = [];
      }
      if (addresses.length === 0) {
        record('deny', 'policy', 'dns_resolution_failed');
        return { allowed: false, status: 502, header: null, socksReply: SOCKS_HOST_UNREACHABLE, reason: 'dns_resolution_failed' };
      }
      // Every answer must pass: a name with one public and one private answer is refused, so the
      // choice of address can never land on a local service.
      for (const a of addresses) {
        const cls = classifyAddress(a.address);
        if (isLocalClass(cls) && (!policy.allowLocal || cls === 'metadata')) {
          return refuse('policy', 'not_allowed_local', 'blocked-by-policy');
        }
      }
    }
    // Never dial one of our own listeners: that would hand the request to another sandbox's
    // listener and blur attribution.
    // (Ports cached at attach: a getsockname per listener per request showed in strace.)
    let ownPort = false;
    for (const l of this.listeners) if (l.port === port) ownPort = true;
    for (const a of addresses) {
      const cls = classifyAddress(a.address);
      if ((cls === 'loopback' || cls === 'unspecified') && ownPort) {
        return refuse('policy', 'proxy_loop', 'blocked-by-policy');
      }
    }
    record('allow', source, reason, override);
    const chosen = addresses[0];
    return { allowed: true, address: chosen.address, family: net.isIPv6(chosen.address) ? 6 : 4, host };
  }

  /**
   * Connect to the checked address. Upstream bytes go straight to `client` from the read callback
   * (no 'data' events, no intermediate stream buffering); the client's bytes are piped the other
   * way by splice(). Reading only starts after 'connect' listeners ran, so the caller's success
   * reply (200 / SOCKS OK) always precedes upstream data.
   */
  private dial(listener: Listener, target: Allowed, port: number, client: net.Socket, paused = false): net.Socket {
    if (this.upstreamProxy) return this.dialUpstream(listener, target, port, paused);
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
    this.track(listener, upstream);
    upstream.setTimeout(this.connectTimeoutMs, () => {
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
  private dialUpstream(listener: Listener, target: Allowed, port: number, paused: boolean): net.Socket {
    const up = this.upstreamProxy!;
    const authority = authorityOf(this.options.upstreamTarget === 'address' ? target.address : target.host, port);
    const socket = net.connect({ host: up.host, port: up.port, allowHalfOpen: true });
    chainedSockets.add(socket);
    this.track(listener, socket);
    // The connect timeout covers the upstream's answer as well.
    socket.setTimeout(this.connectTimeoutMs, () => {
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

  // ---- HTTP ----------------------------------------------------------------------------------

  private static refusalBody(reason: string): string {
    return `blocked by network policy: ${reason}\n`;
  }

  private async onHttpRequest(
    listener: Listener,
    req: http.IncomingMessage,
    res: http.ServerResponse,
    expectContinue: boolean,
  ): Promise<void> {
    const socket = req.socket as net.Socket;
    this.handshakes.get(socket)?.();
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
    const outcome = await this.decide(listener, clientOf(socket), 'http', url.hostname, port, method);
    if (!outcome.allowed) {
      if (outcome.header) return plain(outcome.status, ManagedProxy.refusalBody(outcome.reason), { 'x-proxy-error': outcome.header });
      return plain(outcome.status, `proxy could not resolve ${url.hostname}\n`);
    }
    if (socket.destroyed) return;
    if (!ManagedProxy.claimUpstreamSlot(socket)) {
      this.noteRefusal(listener, 'socket_budget', clientOf(socket));
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
    let retried = false;
    const send = (): void => {
      const up = this.upstreamProxy;
      // Through an upstream proxy: absolute form, naming the target as upstreamTarget says.
      // (No spreads: this runs for every request.)
      const upstreamReq = http.request(
        up
          ? {
              host: up.host,
              port: up.port,
              path: `http://${authorityOf(this.options.upstreamTarget === 'address' ? outcome.address : outcome.host, port)}${url.pathname}${url.search}`,
              headers: up.authorization ? [...headers, 'Proxy-Authorization', up.authorization] : headers,
              method,
              agent: listener.agent,
              setHost: false,
              timeout: this.connectTimeoutMs,
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
              timeout: this.connectTimeoutMs,
            },
      );
      current = upstreamReq;
      upstreamReq.on('socket', (s: net.Socket) => {
        this.track(listener, s);
        // The timeout bounds the connect only; a reused keep-alive connection is already up.
        if (s.connecting) s.once('connect', () => upstreamReq.setTimeout(0));
        else upstreamReq.setTimeout(0);
      });
      upstreamReq.on('timeout', () => upstreamReq.destroy(Object.assign(new Error('upstream timed out'), { code: 'ETIMEDOUT' })));
      upstreamReq.on('error', (err: NodeJS.ErrnoException) => {
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
        res.writeHead(upstreamRes.statusCode ?? 502, upstreamRes.statusMessage, out);
        upstreamRes.pipe(res);
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

  private async onConnect(listener: Listener, req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
    this.handshakes.get(socket)?.();
    const reply = (status: string, body: string, extra = '') =>
      socket.end(
        `HTTP/1.1 ${status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
          `${extra}connection: close\r\n\r\n${body}`,
      );
    const target = /^\[([^\]]+)\]:(\d{1,5})$/.exec(req.url ?? '') ?? /^([^:[\]]+):(\d{1,5})$/.exec(req.url ?? '');
    const port = target ? Number(target[2]) : 0;
    if (!target || port < 1 || port > 65535) return void reply('400 Bad Request', 'CONNECT target must be host:port\n');
    const outcome = await this.decide(listener, clientOf(socket), 'httpsConnect', target[1], port, 'CONNECT');
    if (!outcome.allowed) {
      if (outcome.header) {
        return void reply('403 Forbidden', ManagedProxy.refusalBody(outcome.reason), `x-proxy-error: ${outcome.header}\r\n`);
      }
      return void reply('502 Bad Gateway', `proxy could not resolve ${target[1]}\n`);
    }
    if (socket.destroyed) return;
    if (!ManagedProxy.claimUpstreamSlot(socket)) {
      this.noteRefusal(listener, 'socket_budget', clientOf(socket));
      return void reply('503 Service Unavailable', 'blocked by network policy: proxy socket budget exhausted\n', 'x-proxy-error: blocked-by-connection-limit\r\n');
    }
    if (this.needsInterception(outcome.host)) return this.intercept(listener, socket, head, outcome, port);
    const upstream = this.dial(listener, outcome, port, socket, this.useNativeRelay());
    let tunnelUp = false;
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (!tunnelUp && socket.writable) reply('502 Bad Gateway', `upstream connect failed: ${err.code ?? err.message}\n`);
    });
    upstream.once(READY, () => {
      tunnelUp = true;
      socket.pause();
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n', () => this.tunnel(listener, socket, upstream, head));
    });
  }

  /** Interception is on and this host's policy needs it (limited mode, or a credential rule). */
  private needsInterception(host: string): boolean {
    const i = this.options.interception;
    if (!i) return false;
    return this.rules.policy.mode === 'limited' || (i.credentials ?? []).some((c) => c.host === host);
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
  private intercept(listener: Listener, socket: net.Socket, head: Buffer, target: Allowed, port: number): void {
    let leaf: { key: string; cert: string };
    try {
      leaf = this.options.interception!.ca.leafFor(target.host);
    } catch {
      return void socket.destroy();
    }
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) socket.unshift(head);
    const secure = new tls.TLSSocket(socket, { isServer: true, key: leaf.key, cert: leaf.cert, ALPNProtocols: [...MITM_ALPN] });
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
      deadline ??= setTimeout(() => secure.destroy(), this.handshakeTimeoutMs);
    };
    const disarm = () => {
      if (deadline) clearTimeout(deadline);
      deadline = null;
    };
    arm();
    secure.once('close', disarm);
    this.mitmTargets.set(secure, {
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
      const server = http.createServer({ maxHeaderSize: 16 * 1024, headersTimeout: this.handshakeTimeoutMs, requestTimeout: 0 });
      server.on('request', (req, res) => this.mitmRequest(listener, req, res, false));
      // `Expect: 100-continue`: the 100 goes out only once the request is allowed (as on the
      // plain path); Node would send it before the checks.
      server.on('checkContinue', (req, res) => this.mitmRequest(listener, req, res, true));
      server.on('upgrade', (req: http.IncomingMessage, s: net.Socket, upgradeHead: Buffer) => {
        try {
          this.mitmUpgrade(listener, req, s as tls.TLSSocket, upgradeHead);
        } catch {
          s.destroy();
        }
      });
      server.on('clientError', (_err, s: net.Socket) => s.destroy());
      const ca = this.options.interception!.originCa;
      const agent = new https.Agent({
        keepAlive: true,
        maxSockets: 64,
        maxFreeSockets: MAX_IDLE_UPSTREAM,
        timeout: IDLE_UPSTREAM_MS,
        ...(ca ? { ca: [...tls.rootCertificates, ca] } : {}),
      });
      if (this.upstreamProxy) {
        // The agent keeps pooling (keyed by the checked address and SNI); only how a new
        // connection is made changes: a tunnel through the upstream proxy, TLS on top.
        (agent as unknown as { createConnection: ChainedConnect }).createConnection = (opts, cb) => this.mitmChained(listener, opts, cb);
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
  private mitmChained(listener: Listener, opts: ChainedConnectOptions, cb: (err: Error | null, socket?: net.Socket) => void): undefined {
    const target = opts.psbTarget;
    if (!target) {
      cb(new Error('internal: intercepted request without a checked target'));
      return undefined;
    }
    const raw = this.dialUpstream(listener, target, opts.port, true);
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
      }, this.connectTimeoutMs);
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
  private mitmCheck(
    listener: Listener,
    t: MitmTarget,
    req: http.IncomingMessage,
    upgrade: boolean,
    refuse: (status: number, body: string, header: BlockHeader) => void,
  ): { headers: http.OutgoingHttpHeaders; path: string } | null {
    const method = (req.method ?? 'GET').toUpperCase();
    const event = (decision: 'allow' | 'deny', source: AuditSource, reason: string, m = method) =>
      this.emit({
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
    if (this.rules.policy.mode === 'limited' && (upgrade || !LIMITED_METHODS.has(method))) {
      // As on the plain path, a refused upgrade is audited as method UPGRADE.
      event('deny', 'mode', 'method_not_allowed', upgrade ? 'UPGRADE' : method);
      refuse(403, ManagedProxy.refusalBody('method_not_allowed'), 'blocked-by-method-policy');
      return null;
    }
    // Only WebSocket upgrades: after any other 101 (h2c, say) the bytes would be HTTP requests
    // this proxy cannot check (Host, credentials), so the Host check above would end at the 101.
    if (upgrade && !/^websocket$/i.test(String(req.headers.upgrade ?? '').trim())) {
      event('deny', 'policy', 'upgrade_not_allowed', 'UPGRADE');
      refuse(403, ManagedProxy.refusalBody('upgrade_not_allowed'), 'blocked-by-policy');
      return null;
    }
    event('allow', 'allowlist', 'allowed');
    const connectionTokens = String(req.headers.connection ?? '')
      .split(',')
      .map((x) => x.trim().toLowerCase())
      .filter(Boolean);
    const rules = (this.options.interception!.credentials ?? []).filter((c) => c.host === t.target.host);
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
  private mitmOrigin(listener: Listener, t: MitmTarget, method: string, reqPath: string, headers: http.OutgoingHttpHeaders): http.ClientRequest {
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
      timeout: this.connectTimeoutMs,
      // Read by mitmChained (the agent hands request options to createConnection).
      psbTarget: t.target,
    };
    const upstreamReq = https.request(options);
    upstreamReq.on('socket', (s: net.Socket) => {
      this.track(listener, s);
      if (s.connecting) s.once('secureConnect', () => upstreamReq.setTimeout(0));
      else upstreamReq.setTimeout(0);
    });
    upstreamReq.on('timeout', () => upstreamReq.destroy(Object.assign(new Error('upstream timed out'), { code: 'ETIMEDOUT' })));
    return upstreamReq;
  }

  private mitmRequest(listener: Listener, req: http.IncomingMessage, res: http.ServerResponse, expectContinue: boolean): void {
    const t = this.mitmTargets.get(req.socket as tls.TLSSocket);
    if (!t) return void res.destroy();
    t.begin();
    res.once('close', () => t.end());
    const method = (req.method ?? 'GET').toUpperCase();
    const plain = (status: number, body: string, extra: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(body), connection: 'close', ...extra });
      res.end(body);
    };
    const checked = this.mitmCheck(listener, t, req, false, (status, body, header) => plain(status, body, { 'x-proxy-error': header }));
    if (!checked) return;
    if (expectContinue) res.writeContinue();
    const upstreamReq = this.mitmOrigin(listener, t, method, checked.path, checked.headers);
    upstreamReq.on('error', (err: NodeJS.ErrnoException) => {
      if (!res.headersSent) plain(502, `upstream request failed: ${err.code ?? err.message}\n`);
      else res.destroy();
    });
    upstreamReq.on('response', (upstreamRes) => {
      res.writeHead(upstreamRes.statusCode ?? 502, this.scrubCredentials(t, upstreamRes.statusMessage ?? ''), this.mitmResponseHeaders(t, upstreamRes));
      upstreamRes.pipe(res);
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
  private mitmResponseHeaders(t: MitmTarget, res: http.IncomingMessage): http.OutgoingHttpHeaders {
    const tokens = String(res.headers.connection ?? '')
      .split(',')
      .map((x) => x.trim().toLowerCase());
    const out: http.OutgoingHttpHeaders = {};
    const spelling = new Map<string, string>();
    for (let i = 0; i < res.rawHeaders.length; i += 2) {
      const name = res.rawHeaders[i]!;
      const lower = name.toLowerCase();
      if (HOP_BY_HOP.has(lower) || tokens.includes(lower)) continue;
      const value = this.scrubCredentials(t, res.rawHeaders[i + 1]!);
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
  private scrubCredentials(t: MitmTarget, text: string): string {
    for (const r of this.options.interception!.credentials ?? []) {
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
  private mitmUpgrade(listener: Listener, req: http.IncomingMessage, socket: tls.TLSSocket, head: Buffer): void {
    const t = this.mitmTargets.get(socket);
    if (!t) return void socket.destroy();
    // The session ends with this request (relayed after a 101, else closed): no next head.
    t.begin();
    const raw = (status: number, reason: string, headerLines: string[], body = '') => {
      socket.end(`HTTP/1.1 ${status} ${reason}\r\n${headerLines.map((l) => `${l}\r\n`).join('')}\r\n${body}`);
    };
    const refuse = (status: number, body: string, header: BlockHeader) =>
      raw(status, http.STATUS_CODES[status] ?? '', ['content-type: text/plain; charset=utf-8', `content-length: ${Buffer.byteLength(body)}`, `x-proxy-error: ${header}`, 'connection: close'], body);
    const checked = this.mitmCheck(listener, t, req, true, refuse);
    if (!checked) return;
    const headers = checked.headers;
    const upgrade = String(req.headers.upgrade ?? '');
    if (upgrade === '' || /[\r\n]/.test(upgrade)) return void refuse(400, 'bad Upgrade header\n', 'blocked-by-policy');
    headers.Connection = 'Upgrade';
    headers.Upgrade = upgrade;
    const method = (req.method ?? 'GET').toUpperCase();
    const upstreamReq = this.mitmOrigin(listener, t, method, checked.path, headers);
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
      const out = this.mitmResponseHeaders(t, upstreamRes);
      const lines: string[] = [];
      for (const [k, v] of Object.entries(out)) for (const x of Array.isArray(v) ? v : [v]) if (x !== undefined) lines.push(`${k}: ${String(x)}`);
      socket.write(`HTTP/1.1 ${upstreamRes.statusCode ?? 502} ${this.scrubCredentials(t, upstreamRes.statusMessage ?? '')}\r\n${lines.map((l) => `${l}\r\n`).join('')}connection: close\r\n\r\n`);
      upstreamRes.pipe(socket);
      upstreamRes.on('error', () => socket.destroy());
    });
    upstreamReq.on('upgrade', (upstreamRes: http.IncomingMessage, upstream: net.Socket, upstreamHead: Buffer) => {
      answered = true;
      const lines: string[] = [];
      for (let i = 0; i < upstreamRes.rawHeaders.length; i += 2) lines.push(`${upstreamRes.rawHeaders[i]}: ${this.scrubCredentials(t, upstreamRes.rawHeaders[i + 1]!)}`);
      socket.write(`HTTP/1.1 ${upstreamRes.statusCode ?? 101} ${this.scrubCredentials(t, upstreamRes.statusMessage ?? '')}\r\n${lines.map((l) => `${l}\r\n`).join('')}\r\n`);
      if (upstreamHead.length > 0) socket.write(upstreamHead);
      if (head.length > 0) upstream.write(head);
      splice(socket, upstream, this.limits.tunnelIdleTimeoutMs, true);
    });
    upstreamReq.end();
  }

  private useNativeRelay(): boolean {
    return this.options.relay !== 'js' && nativeRelay() !== null;
  }

  /**
   * Relay an established tunnel (the success reply, if any, has been flushed to the client;
   * `toUpstream` goes first, then everything else). Native relay where available: whatever JS
   * already read from the client goes first, then the addon owns duplicates of both fds and the JS
   * sockets are destroyed in the same tick. Otherwise stream piping.
   */
  private tunnel(listener: Listener, client: net.Socket, upstream: net.Socket, toUpstream: Buffer | null): void {
    if (client.destroyed || upstream.destroyed || listener.closing) {
      client.destroy();
      upstream.destroy();
      return;
    }
    const idle = this.limits.tunnelIdleTimeoutMs;
    let prefix = toUpstream && toUpstream.length > 0 ? toUpstream : null;
    let toClient: Buffer | null = null;
    const relay = this.useNativeRelay() ? nativeRelay() : null;
    const fa = socketFd(client);
    const fb = socketFd(upstream);
    // The relay holds as many fds as the two sockets it replaces (the duplicates briefly coexist
    // with the originals, destroyed in this tick).
    if (relay && fa >= 0 && fb >= 0 && ManagedProxy.budgetAllows(RELAY_FDS - 2)) {
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
   * An absolute-form `Upgrade` request (WebSocket over plain HTTP): the same decision as any
   * request to that host (limited mode refuses it: a tunnel carries any method), then the head is
   * replayed to the checked address and both directions are relayed as a tunnel.
   */
  private async onUpgrade(listener: Listener, req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
    this.handshakes.get(socket)?.();
    const reply = (status: string, body: string, extra = '') =>
      socket.end(
        `HTTP/1.1 ${status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
          `${extra}connection: close\r\n\r\n${body}`,
      );
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
      this.rules.policy.mode === 'limited'
        ? await this.decide(listener, clientOf(socket), 'httpsConnect', url.hostname, port, 'UPGRADE')
        : await this.decide(listener, clientOf(socket), 'http', url.hostname, port, method);
    if (!outcome.allowed) {
      if (outcome.header) {
        return void reply('403 Forbidden', ManagedProxy.refusalBody(outcome.reason), `x-proxy-error: ${outcome.header}\r\n`);
      }
      return void reply('502 Bad Gateway', `proxy could not resolve ${url.hostname}\n`);
    }
    if (socket.destroyed) return;
    if (!ManagedProxy.claimUpstreamSlot(socket)) {
      this.noteRefusal(listener, 'socket_budget', clientOf(socket));
      return void reply('503 Service Unavailable', 'blocked by network policy: proxy socket budget exhausted\n', 'x-proxy-error: blocked-by-connection-limit\r\n');
    }
    // The origin sees the checked authority as Host; proxy credentials never leave.
    const lines = [`${method} ${url.pathname}${url.search} HTTP/1.1`, `Host: ${url.host}`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const lower = req.rawHeaders[i].toLowerCase();
      if (lower === 'host' || lower === 'proxy-connection' || lower === 'proxy-authorization') continue;
      lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    }
    const upstream = this.dial(listener, outcome, port, socket, this.useNativeRelay());
    let up = false;
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (!up && socket.writable) reply('502 Bad Gateway', `upstream connect failed: ${err.code ?? err.message}\n`);
    });
    upstream.once(READY, () => {
      up = true;
      socket.pause();
      const replay = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
      this.tunnel(listener, socket, upstream, head.length > 0 ? Buffer.concat([replay, head]) : replay);
    });
  }

  // ---- SOCKS5 --------------------------------------------------------------------------------

  private async onSocks(listener: Listener, socket: net.Socket): Promise<void> {
    const reader = new ByteReader(socket);
    const fail = (code: number) => {
      reader.release();
      if (socket.writable) socket.end(socksReply(code));
      else socket.destroy();
    };
    let host: string;
    let port: number;
    let cmd: number;
    try {
      const greeting = await reader.read(2);
      const methods = await reader.read(greeting[1]);
      if (!methods.includes(0x00)) {
        reader.release();
        socket.end(Buffer.from([5, 0xff]));
        return;
      }
      socket.write(Buffer.from([5, 0x00]));
      const headBytes = await reader.read(4);
      if (headBytes[0] !== 5) return void socket.destroy();
      cmd = headBytes[1];
      const atyp = headBytes[3];
      if (atyp === 0x01) {
        host = [...(await reader.read(4))].join('.');
      } else if (atyp === 0x03) {
        const len = (await reader.read(1))[0];
        host = (await reader.read(len)).toString('latin1');
      } else if (atyp === 0x04) {
        const b = await reader.read(16);
        const groups: string[] = [];
        for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
        host = groups.join(':');
      } else {
        return fail(SOCKS_ATYP_UNSUPPORTED);
      }
      port = (await reader.read(2)).readUInt16BE(0);
    } catch {
      socket.destroy();
      return;
    }
    this.handshakes.get(socket)?.();
    const client = clientOf(socket);
    if (cmd === 0x03 || cmd === 0x02) {
      const protocol: AuditProtocol = cmd === 0x03 ? 'socks5Udp' : 'socks5Tcp';
      const normalized = normalizeHost(host);
      this.emit({
        processId: listener.processId,
        timestamp: new Date().toISOString(),
        scope: isIpLiteral(normalized) ? 'non_domain' : 'domain',
        decision: 'deny',
        source: 'policy',
        reason: cmd === 0x03 ? 'socks5_udp_unsupported' : 'socks5_bind_unsupported',
        protocol,
        host: normalized,
        port,
        method: null,
        client,
      });
      return fail(SOCKS_CMD_UNSUPPORTED);
    }
    if (cmd !== 0x01) return fail(SOCKS_CMD_UNSUPPORTED);
    const outcome = await this.decide(listener, client, 'socks5Tcp', host, port, null);
    if (!outcome.allowed) return fail(outcome.socksReply);
    if (socket.destroyed) return;
    if (!ManagedProxy.claimUpstreamSlot(socket)) {
      this.noteRefusal(listener, 'socket_budget', client);
      return fail(SOCKS_GENERAL_FAILURE);
    }
    const upstream = this.dial(listener, outcome, port, socket, this.useNativeRelay());
    let up = false;
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (!up) fail(socksCodeForError(err));
    });
    upstream.once(READY, () => {
      up = true;
      const bound = upstream.address();
      reader.release();
      socket.write(socksReply(SOCKS_OK, typeof bound === 'object' ? (bound as AddressInfo) : null), () =>
        this.tunnel(listener, socket, upstream, null),
      );
    });
  }
}
