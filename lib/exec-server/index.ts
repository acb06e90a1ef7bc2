/**
 * createExecServer: a Codex-compatible exec-server (JSON-RPC, Codex dialect) over stdio or
 * WebSocket. The protocol lives in ./connection.ts and knows nothing of transports.
 *
 *   const server = await createExecServer({ transport: { kind: 'stdio' } });
 *   const server = await createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0, tokenFile } });
 *   server.address   // ws: { host, port }
 *   await server.close();   // closes every connection, killing the processes they started
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import type { IncomingMessage } from 'node:http';
import * as path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { SandboxError } from '../errors';
import { ExecConnection, type ConnectionSink, type ExecServerOptions } from './connection';

export { ExecConnection, RETAIN_BYTES, RETAIN_CHUNKS, type ExecServerOptions, type ConnectionSink } from './connection';

/** Largest message accepted on either transport (a longer line or frame is refused). */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export type ExecServerTransport =
  | { kind: 'stdio'; input?: Readable; output?: Writable }
  | {
      kind: 'ws';
      host: string;
      port: number;
      /** Capability token: clients must send `Authorization: Bearer <token>` on the upgrade. */
      tokenFile?: string;
    };

export interface CreateExecServerOptions extends ExecServerOptions {
  transport: ExecServerTransport;
  maxMessageBytes?: number;
}

export interface ExecServer {
  /** ws only: where it listens. */
  readonly address?: { host: string; port: number };
  /** Open connections (stdio: one). */
  connections(): ExecConnection[];
  /** Resolves when the stdio input ends (and its processes are gone), or after close(). */
  readonly done: Promise<void>;
  close(): Promise<void>;
}

export async function createExecServer(options: CreateExecServerOptions): Promise<ExecServer> {
  if (!options || typeof options !== 'object' || !options.transport) {
    throw new SandboxError('EINVALID_ARGUMENT', 'createExecServer needs { transport: { kind: "stdio" } | { kind: "ws", host, port } }');
  }
  const max = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const t = options.transport;
  if (t.kind === 'stdio') return stdioServer(t.input ?? process.stdin, t.output ?? process.stdout, options, max);
  if (t.kind === 'ws') return wsServer(t, options, max);
  throw new SandboxError('EINVALID_ARGUMENT', `unknown transport kind: ${String((t as { kind: unknown }).kind)}`);
}

function stdioServer(input: Readable, output: Writable, options: ExecServerOptions, max: number): ExecServer {
  const sink: ConnectionSink = {
    send: (m) => output.write(JSON.stringify(m) + '\n'),
    onDrain: (cb) => output.once('drain', cb),
  };
  const conn = new ExecConnection(sink, { ...options, transportName: 'stdio' });
  let parts: Buffer[] = [];
  let size = 0;
  let skipping = false;
  const onData = (b: Buffer) => {
    let start = 0;
    for (;;) {
      const nl = b.indexOf(0x0a, start);
      const piece = nl === -1 ? b.subarray(start) : b.subarray(start, nl);
      if (!skipping) {
        size += piece.length;
        if (size > max) {
          // A line beyond the cap is refused once and skipped up to its newline; the connection lives on.
          skipping = true;
          parts = [];
          conn.parseError(`message exceeds ${max} bytes`);
        } else parts.push(piece);
      }
      if (nl === -1) break;
      if (!skipping) conn.handleText(Buffer.concat(parts).toString('utf8'));
      parts = [];
      size = 0;
      skipping = false;
      start = nl + 1;
    }
  };
  input.on('data', onData);
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  const finish = () => {
    input.off('data', onData);
    void conn.close().then(resolveDone);
  };
  input.once('end', finish);
  input.once('close', finish);
  output.on('error', finish);
  return {
    connections: () => [conn],
    done,
    close: async () => {
      finish();
      await done;
    },
  };
}

function readToken(file: string): Buffer {
  if (!path.isAbsolute(file)) throw new SandboxError('EINVALID_ARGUMENT', `--ws-token-file must be an absolute path, got ${file}`);
  let token: string;
  try {
    token = fs.readFileSync(file, 'utf8').trim();
  } catch (e) {
    throw new SandboxError('EINVALID_ARGUMENT', `cannot read the capability-token file ${file}: ${(e as Error).message}`);
  }
  if (token.length < 16) throw new SandboxError('EINVALID_ARGUMENT', `the capability token in ${file} is too short (at least 16 characters)`);
  return crypto.createHash('sha256').update(token).digest();
}

function authorized(req: IncomingMessage, digest: Buffer | null): boolean {
  if (digest === null) return true;
  const h = req.headers.authorization;
  const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
  if (!m) return false;
  // Compare digests, so the comparison is constant-time whatever the lengths.
  return crypto.timingSafeEqual(crypto.createHash('sha256').update(m[1]!).digest(), digest);
}

async function wsServer(t: Extract<ExecServerTransport, { kind: 'ws' }>, options: ExecServerOptions, max: number): Promise<ExecServer> {
  const { WebSocketServer } = require('ws') as typeof import('ws');
  const digest = t.tokenFile !== undefined ? readToken(t.tokenFile) : null;
  const conns = new Set<ExecConnection>();
  const wss = new WebSocketServer({
    host: t.host,
    port: t.port,
    // Frames up to twice the cap are read and refused with an error (the connection survives);
    // beyond that ws closes the connection (1009) without buffering more.
    maxPayload: max * 2,
    // Refused before the upgrade: an unauthenticated client never gets a connection.
    verifyClient: (info: { req: IncomingMessage }, cb: (ok: boolean, code?: number, message?: string) => void) =>
      authorized(info.req, digest) ? cb(true) : cb(false, 401, 'Unauthorized'),
  });
  await new Promise<void>((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', reject);
  });
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
    const conn = new ExecConnection(sink, { ...options, transportName: 'websocket' });
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
  const addr = wss.address();
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
      await new Promise<void>((r) => wss.close(() => r()));
      resolveDone();
    },
  };
}
