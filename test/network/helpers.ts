/**
 * Loopback servers and proxy clients for the managed-proxy tests. Every server counts the
 * connections it accepted, so a test can prove from the outside that a refused request never
 * reached it.
 */
import { execFile } from 'child_process';
import { createHash, randomBytes } from 'crypto';
import * as http from 'http';
import * as net from 'net';

import type { LookupFn } from '../../lib/network';

/** Every name ending in `.test` resolves to 127.0.0.1; any other name fails as not found (ENOTFOUND). */
export const lookupDotTest: LookupFn = async (host) => {
  if (host.endsWith('.test')) return [{ address: '127.0.0.1', family: 4 }];
  throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
};

/** Listens on 127.0.0.1 at a free port; `close` also drops kept-alive connections. */
export async function listenOnLoopback(server: http.Server): Promise<{ port: number; close(): Promise<void> }> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export interface CountingHttpServer {
  port: number;
  connections: number;
  requests: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; body: string; remotePort: number }>;
  /** Connections open right now. */
  open: number;
  close(): Promise<void>;
}

/** Replies with JSON describing the request it got. */
export async function startHttpServer(): Promise<CountingHttpServer> {
  const state: CountingHttpServer = { port: 0, connections: 0, open: 0, requests: [], close: async () => {} };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      state.requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body, remotePort: req.socket.remotePort ?? 0 });
      const out = JSON.stringify({ method: req.method, url: req.url, host: req.headers.host, body, tag: req.headers['x-tag'] ?? null });
      res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'yes' });
      res.end(req.method === 'HEAD' ? undefined : out);
    });
  });
  server.on('connection', (sock: net.Socket) => {
    state.connections++;
    state.open++;
    sock.once('close', () => state.open--);
  });
  Object.assign(state, await listenOnLoopback(server));
  return state;
}

export interface CountingTcpServer {
  port: number;
  connections: number;
  /** sha256 (hex) of each SEND stream the server finished writing. */
  sent: string[];
  /** sha256 (hex) of each HASH stream the server read to its end. */
  received: string[];
  /** Connections open right now. */
  open: number;
  close(): Promise<void>;
}

/**
 * A raw TCP server standing in for a TLS origin behind CONNECT. First line decides:
 *   "ECHO\n"      echo everything back;
 *   "SEND <n>\n"  stream n pseudo-random bytes, then end (digest recorded in `sent`);
 *   "HASH\n"      read until the peer half-closes, then answer "<bytes> <sha256 hex>\n" and end
 *                 (the digest is also recorded in `received`);
 *   "HOLD\n"      send nothing, close when the peer half-closes.
 */
export async function startTcpServer(): Promise<CountingTcpServer> {
  const block = randomBytes(1 << 20);
  const state: CountingTcpServer = { port: 0, connections: 0, sent: [], received: [], open: 0, close: async () => {} };
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true }, (sock) => {
    state.connections++;
    state.open++;
    sockets.add(sock);
    sock.on('close', () => {
      state.open--;
      sockets.delete(sock);
    });
    sock.on('error', () => {});
    let head = Buffer.alloc(0);
    let started = false;
    // A peer that leaves before sending its command line gets closed (half-open is kept only
    // for ECHO, whose pipe ends the socket itself).
    sock.on('end', () => {
      if (!started) sock.end();
    });
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const nl = head.indexOf('\n');
      if (nl < 0) return;
      sock.off('data', onData);
      started = true;
      const line = head.subarray(0, nl).toString();
      const rest = head.subarray(nl + 1);
      if (line === 'ECHO') {
        if (rest.length) sock.write(rest);
        sock.pipe(sock);
        return;
      }
      if (line === 'HASH') {
        const hash = createHash('sha256').update(rest);
        let bytes = rest.length;
        sock.on('data', (c: Buffer) => {
          bytes += c.length;
          hash.update(c);
        });
        sock.on('end', () => {
          const hex = hash.digest('hex');
          state.received.push(hex);
          sock.end(`${bytes} ${hex}\n`);
        });
        return;
      }
      if (line === 'HOLD') return void sock.on('end', () => sock.end());
      const m = /^SEND (\d+)$/.exec(line);
      if (!m) return void sock.destroy();
      let left = Number(m[1]);
      let i = 0;
      const hash = createHash('sha256');
      const pump = () => {
        while (left > 0) {
          const chunk = Buffer.from(block.subarray(0, Math.min(left, block.length)));
          chunk.writeUInt32BE(i++ >>> 0, 0);
          left -= chunk.length;
          hash.update(chunk);
          if (!sock.write(chunk)) return void sock.once('drain', pump);
        }
        state.sent.push(hash.digest('hex'));
        sock.end();
      };
      pump();
    };
    sock.on('data', onData);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.port = (server.address() as net.AddressInfo).port;
  state.close = () =>
    new Promise<void>((r) => {
      for (const s of sockets) s.destroy();
      server.close(() => r());
    });
  return state;
}

export interface HttpResult {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** An absolute-form request through the proxy, as an HTTP_PROXY-aware client sends it. */
export function httpViaProxy(
  proxyPort: number,
  url: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<HttpResult> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: proxyPort,
        method: opts.method ?? 'GET',
        path: url,
        headers: { host: u.host, ...(opts.headers ?? {}) },
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

export type ConnectResult =
  | { ok: true; socket: net.Socket; extra: Buffer }
  | { ok: false; status: number; headers: Record<string, string>; body: string };

/** Send CONNECT target through the proxy; resolve with the tunnel socket or the refusal. */
export function connectViaProxy(proxyPort: number, target: string): Promise<ConnectResult> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(proxyPort, '127.0.0.1');
    let buf = Buffer.alloc(0);
    socket.on('error', reject);
    socket.on('connect', () => socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const lines = buf.subarray(0, end).toString().split('\r\n');
      const status = Number(lines[0].split(' ')[1]);
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      socket.off('data', onData);
      if (status === 200) {
        socket.pause();
        resolve({ ok: true, socket, extra: buf.subarray(end + 4) });
        return;
      }
      let body = buf.subarray(end + 4).toString();
      socket.on('data', (c: Buffer) => (body += c.toString()));
      socket.on('close', () => resolve({ ok: false, status, headers, body }));
    };
    socket.on('data', onData);
  });
}

export interface SocksResult {
  reply: number;
  socket: net.Socket;
}

/**
 * A SOCKS5 handshake with a domain name (ATYP 3) or IPv4 (ATYP 1) target.
 * cmd: 1 CONNECT, 2 BIND, 3 UDP ASSOCIATE.
 */
export function socks5(proxyPort: number, host: string, port: number, cmd = 1): Promise<SocksResult> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(proxyPort, '127.0.0.1');
    let stage = 0;
    let buf = Buffer.alloc(0);
    socket.on('error', reject);
    socket.on('close', () => stage < 2 && reject(new Error(`proxy closed during SOCKS5 stage ${stage}`)));
    socket.on('connect', () => socket.write(Buffer.from([5, 1, 0])));
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (stage === 0 && buf.length >= 2) {
        if (buf[0] !== 5 || buf[1] !== 0) return reject(new Error('bad method selection'));
        buf = buf.subarray(2);
        stage = 1;
        let addr: Buffer;
        if (net.isIPv4(host)) addr = Buffer.from([1, ...host.split('.').map(Number)]);
        else if (net.isIPv6(host)) {
          // Expand "::" and write the 8 groups (the tests only use simple forms like ::1).
          const [l, r = ''] = host.split('::');
          const left = l ? l.split(':') : [];
          const right = r ? r.split(':') : [];
          const groups = [...left, ...new Array(8 - left.length - right.length).fill('0'), ...right];
          addr = Buffer.alloc(17);
          addr[0] = 4;
          groups.forEach((g, i) => addr.writeUInt16BE(parseInt(g, 16), 1 + i * 2));
        } else addr = Buffer.concat([Buffer.from([3, Buffer.byteLength(host)]), Buffer.from(host)]);
        socket.write(Buffer.concat([Buffer.from([5, cmd, 0]), addr, Buffer.from([port >> 8, port & 0xff])]));
      }
      if (stage === 1 && buf.length >= 10) {
        stage = 2;
        socket.off('data', onData);
        socket.pause();
        if (buf.length > 10) socket.unshift(buf.subarray(10));
        resolve({ reply: buf[1], socket });
      }
    };
    socket.on('data', onData);
  });
}

/** Write `line`, collect everything until the peer ends. */
export function exchange(socket: net.Socket, payload: string | Buffer, opts: { end?: boolean } = {}): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('end', () => resolve(Buffer.concat(chunks)));
    socket.on('error', reject);
    socket.resume();
    socket.write(payload);
    if (opts.end) socket.end();
  });
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Run a tool with a minimal env (no inherited proxy variables). */
export function run(cmd: string, args: string[], env: Record<string, string> = {}): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(
      cmd,
      args,
      { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', ...env }, timeout: 30_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof (err as NodeJS.ErrnoException).code === 'number' ? Number((err as NodeJS.ErrnoException).code) : 1) : 0;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

export async function hasTool(cmd: string, args: string[] = ['--version']): Promise<boolean> {
  return (await run(cmd, args)).code === 0;
}

/** Poll until `cond()` holds (or give up after `ms`); returns the last value of cond(). */
export async function waitFor(cond: () => boolean, ms = 5000): Promise<boolean> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
  return true;
}

/** Count of active libuv resources by type (TCPServerWrap, TCPSocketWrap, Timeout, ...). */
export function resourceCounts(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of process.getActiveResourcesInfo()) out[r] = (out[r] ?? 0) + 1;
  return out;
}

/** A loopback port with nothing listening on it. */
export async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}
