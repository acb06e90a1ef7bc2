/**
 * The managed proxy's public option, policy and audit-event types (re-exported by proxy.ts and
 * lib/network/index.ts).
 */
import type { InterceptionCa } from './mitm';

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

/** A resolver for the proxy: `port` is the one the request will dial (a resolver may judge by it). */
export type LookupFn = (host: string, port?: number) => Promise<Array<{ address: string; family: 4 | 6 }>>;

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

/** Options of ManagedProxy.attach(). */
export interface AttachOptions {
  /** A TCP socket (bound, or already listening) the proxy takes over and closes on detach. */
  fd?: number;
  /**
   * Called for every accepted connection before anything else: only those it returns true for
   * are served. The others are closed at once, unanswered, and count against no cap or budget.
   * spawn() sets it for a listener on the host's loopback (Landlock mode), where any local
   * process could connect, so that only the sandbox's own connections are served.
   */
  admit?: (socket: import('net').Socket) => boolean;
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
