/**
 * The exec-server's WebSocket transport: one JSON-RPC message per text frame.
 *
 * Safe by default, because whoever connects can run commands as the server's user:
 * - no auth configured: refused at start, unless the caller passes the explicitly unsafe
 *   opt-out, and never on a non-loopback address; with the opt-out the sandbox floor is always on
 *   (sandbox-floor.ts: every request runs in a sandbox whose writable roots stay within the
 *   floor's bounds; nothing runs unsandboxed);
 * - a browser's handshake (it always carries `Origin`; hybi-08 ones `Sec-WebSocket-Origin`) is
 *   refused with 403 unless that origin is allowed, so a web page cannot drive a loopback server
 *   (Codex refuses every Origin); on a loopback listener a Host that is not loopback or an
 *   allowed name is refused with 421 (DNS rebinding), ws-host.ts;
 * - the credential is checked before the upgrade (ws-auth.ts): a refused client gets an HTTP
 *   error and never a connection, so nothing it sends is read.
 */
import * as http from 'node:http';
import type { Duplex } from 'node:stream';
import { SandboxError } from '../errors';
import { ExecConnection } from './connection';
import { limitOf } from './limits';
import { SessionRegistry } from './sessions';
import { validateFloorOptions } from './sandbox-floor';
import type { ConnectionSink, ExecServerOptions, SpawnPreparedFn } from './types';
import { isLoopbackHost, loadWsAuth, type WsAuth, type WsAuthCheck } from './ws-auth';
import { hostAllowed, originsAllowed, parseAllowHosts } from './ws-host';
import type { ExecServer } from './server';

export interface WsTransportOptions {
  kind: 'ws';
  host: string;
  port: number;
  /** How clients authenticate (Codex's two modes). */
  auth?: WsAuth;
  /** Shorthand for `auth: { mode: 'capability-token', tokenFile }`. */
  tokenFile?: string;
  /** Browser origins allowed to connect (exact `Origin` values); by default every one is refused. */
  allowOrigins?: string[];
  /**
   * Host names a loopback listener accepts besides loopback IP literals and `localhost` (the
   * `Host` header's name; its port, if any, must be the listening one). No effect off loopback.
   */
  allowHosts?: string[];
  /**
   * Listen on loopback without authentication: any local user, and any local program, can then
   * run commands as this server's user, in the sandbox each request names: it implies
   * `requireSandbox` (a request without a sandbox is refused). Never allowed on a non-loopback address.
   */
  dangerouslyAllowUnauthenticated?: boolean;
}

const UNAUTH_HINT =
  'configure --ws-auth capability-token with --ws-token-file <file> or --ws-token-sha256 <hex>, or --ws-auth signed-bearer-token with --ws-shared-secret-file <file>';

/** The upgrade check for these options, or a refusal to start. */
function authFor(t: WsTransportOptions): WsAuthCheck | null {
  if (t.auth !== undefined && t.tokenFile !== undefined) throw new SandboxError('EINVALID_ARGUMENT', 'give either transport.auth or transport.tokenFile, not both');
  const auth: WsAuth | undefined = t.auth ?? (t.tokenFile !== undefined ? { mode: 'capability-token', tokenFile: t.tokenFile } : undefined);
  if (auth !== undefined) return loadWsAuth(auth);
  if (!isLoopbackHost(t.host)) {
    throw new SandboxError('EINVALID_ARGUMENT', `a WebSocket exec-server on ${t.host} (not loopback) needs authentication: ${UNAUTH_HINT}`);
  }
  if (t.dangerouslyAllowUnauthenticated !== true) {
    throw new SandboxError(
      'EINVALID_ARGUMENT',
      `a WebSocket exec-server without authentication lets every local user run commands as this one; ${UNAUTH_HINT} ` +
        '(to accept that risk on loopback: --ws-dangerously-allow-unauthenticated, or dangerouslyAllowUnauthenticated: true)',
    );
  }
  return null;
}

/** Writes a plain HTTP refusal on the upgrade socket and closes it. */
function refuse(socket: Duplex, status: number, reason: string, body = ''): void {
  const head = [`HTTP/1.1 ${status} ${reason}`, 'connection: close', `content-length: ${Buffer.byteLength(body)}`];
  if (body) head.push('content-type: text/plain; charset=utf-8');
  socket.end(head.join('\r\n') + '\r\n\r\n' + body);
  socket.once('finish', () => socket.destroy());
}

export async function wsServer(t: WsTransportOptions, opts: ExecServerOptions, max: number): Promise<ExecServer> {
  const check = authFor(t);
  // Whoever reaches an unauthenticated listener gets sandboxed execution only (sandbox-floor.ts).
  const options: ExecServerOptions = check === null ? { ...opts, requireSandbox: true } : opts;
  validateFloorOptions(options);
  const origins = new Set(t.allowOrigins ?? []);
  const hosts = parseAllowHosts(t.allowHosts ?? []);
  const { WebSocketServer } = require('ws') as typeof import('ws');
  const conns = new Set<ExecConnection>();
  const peers = new ConnectionCount(limitOf(options, 'maxConnections'), limitOf(options, 'maxConnectionsPerPeer'));
  // Sessions outlive their connection (a client may resume one): they belong to the server.
  const sessions = new SessionRegistry(options as ExecServerOptions & { spawnPrepared: SpawnPreparedFn });
  const wss = new WebSocketServer({
    noServer: true,
    // Frames up to twice the cap are read and refused with an error (the connection survives);
    // beyond that ws closes the connection (1009) without buffering more.
    maxPayload: max * 2,
  });
  const server = http.createServer((req, res) => {
    res.writeHead(pathOf(req) === '/' ? 400 : 404, { 'content-type': 'text/plain; charset=utf-8' });
    res.end(pathOf(req) === '/' ? "Connection header did not include 'upgrade'" : '');
  });
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => {});
    if (pathOf(req) !== '/') return refuse(socket, 404, 'Not Found');
    if (!hostAllowed(req.headers, t.host, listeningPort(), hosts)) {
      return refuse(socket, 421, 'Misdirected Request', 'this loopback exec-server accepts only a loopback Host (127.0.0.1, [::1], localhost) or one named by --ws-allow-host');
    }
    if (!originsAllowed(req.headers, origins)) return refuse(socket, 403, 'Forbidden');
    const refusal = check?.(req.headers) ?? null;
    if (refusal) return refuse(socket, refusal.status, 'Unauthorized', refusal.message);
    const full = peers.admit(req.socket.remoteAddress ?? '', socket);
    if (full) return refuse(socket, 503, 'Service Unavailable', full);
    wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
  });
  const listeningPort = (): number => {
    const a = server.address();
    return typeof a === 'object' && a !== null ? a.port : t.port;
  };
  server.listen(t.port, t.host);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  if (check === null) {
    process.emitWarning(
      `exec-server on ws://${t.host} accepts unauthenticated clients: every local user can run commands as this one, in the sandbox each request names or the default one, within the sandbox floor's bounds (--require-sandbox is on)`,
      { code: 'PSB_WS_UNAUTHENTICATED' },
    );
  }
  wss.on('connection', (socket) => {
    // Frames the client cannot take yet stay in ws's buffer; past this, output is paused.
    const HIGH_WATER = 4 * 1024 * 1024;
    const drainers: Array<() => void> = [];
    let poll: NodeJS.Timeout | undefined;
    const sink: ConnectionSink = {
      send: (m) => {
        if (socket.readyState !== socket.OPEN) return true;
        socket.send(JSON.stringify(m));
        return socket.bufferedAmount < HIGH_WATER;
      },
      onDrain: (cb) => {
        drainers.push(cb);
        // ws has no drain event; poll the buffered amount while congested.
        poll ??= setInterval(() => {
          if (socket.bufferedAmount < HIGH_WATER / 2 || socket.readyState !== socket.OPEN) {
            clearInterval(poll);
            poll = undefined;
            for (const d of drainers.splice(0)) d();
          }
        }, 10);
      },
    };
    const conn = new ExecConnection(sink, { ...options, transportName: 'websocket' }, sessions);
    conns.add(conn);
    socket.on('message', (data, isBinary) => {
      if (isBinary) {
        conn.parseError('expected a text frame');
        return;
      }
      const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      if (buf.length > max) {
        conn.parseError(`message exceeds ${max} bytes`);
        return;
      }
      conn.handleText(buf.toString('utf8'));
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      if (poll) clearInterval(poll);
      conns.delete(conn);
      void conn.close();
    });
  });
  const addr = server.address();
  const address = typeof addr === 'object' && addr ? { host: addr.address, port: addr.port } : { host: t.host, port: t.port };
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  return {
    address,
    connections: () => [...conns],
    done,
    close: async () => {
      for (const c of wss.clients) c.terminate();
      await Promise.all([...conns].map((c) => c.close()));
      await sessions.shutdown();
      await new Promise<void>((r) => wss.close(() => r()));
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      resolveDone();
    },
  };
}

/**
 * Open WebSocket connections, in all and per peer address. A connection counts from its
 * admission at the upgrade until its socket closes, so upgrades in progress count too.
 */
class ConnectionCount {
  private total = 0;
  private readonly byPeer = new Map<string, number>();

  constructor(
    private readonly max: number,
    private readonly perPeer: number,
  ) {}

  /** Counts `socket` in, until it closes; or returns why it is refused (nothing counted). */
  admit(address: string, socket: Duplex): string | null {
    // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d: one peer either way.
    const peer = address.replace(/^::ffff:(?=\d+\.)/, '');
    const mine = this.byPeer.get(peer) ?? 0;
    if (this.total >= this.max) return `too many connections to this exec-server (at most ${this.max})`;
    if (mine >= this.perPeer) return `too many connections from ${peer} (at most ${this.perPeer} per peer address)`;
    this.total++;
    this.byPeer.set(peer, mine + 1);
    socket.once('close', () => {
      this.total--;
      const n = (this.byPeer.get(peer) ?? 1) - 1;
      if (n === 0) this.byPeer.delete(peer);
      else this.byPeer.set(peer, n);
    });
    return null;
  }
}

function pathOf(req: http.IncomingMessage): string {
  const u = req.url ?? '/';
  const q = u.indexOf('?');
  return q < 0 ? u : u.slice(0, q);
}
