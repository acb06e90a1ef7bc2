/**
 * createExecServer: a Codex-compatible exec-server (JSON-RPC, Codex dialect) over stdio or
 * WebSocket. The protocol lives in ./connection.ts and knows nothing of transports.
 *
 *   const server = await createExecServer({ transport: { kind: 'stdio' } });
 *   const server = await createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0,
 *     auth: { mode: 'capability-token', tokenFile } } });   // no auth: refused (see ws-transport.ts)
 *   server.address   // ws: { host, port }
 *   await server.close();   // closes every connection, killing the processes they started
 */
import type { Readable, Writable } from 'node:stream';
import { SandboxError } from '../errors';
import { ManagedProxy } from '../network';
import { ExecConnection } from './connection';
import { validateLimits } from './limits';
import { validateFloorOptions } from './sandbox-floor';
import type { ConnectionSink, ExecServerOptions } from './types';
import type { ExecServer } from './server';

export type { ExecServer } from './server';
import { wsServer, type WsTransportOptions } from './ws-transport';

export type { WsAuth } from './ws-auth';
export { DEFAULT_LIMITS } from './limits';
export type { WsTransportOptions } from './ws-transport';
export { ExecConnection, RETAIN_BYTES, RETAIN_CHUNKS, type ExecServerOptions, type ConnectionSink } from './connection';

/** Largest message accepted on either transport (a longer line or frame is refused). */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export type ExecServerTransport =
  | { kind: 'stdio'; input?: Readable; output?: Writable }
  | WsTransportOptions;

export interface CreateExecServerOptions extends ExecServerOptions {
  transport: ExecServerTransport;
  maxMessageBytes?: number;
}


export async function createExecServer(options: CreateExecServerOptions): Promise<ExecServer> {
  if (!options || typeof options !== 'object' || !options.transport) {
    throw new SandboxError('EINVALID_ARGUMENT', 'createExecServer needs { transport: { kind: "stdio" } | { kind: "ws", host, port } }');
  }
  if (typeof options.spawnPrepared !== 'function') {
    throw new SandboxError('EINVALID_ARGUMENT', 'createExecServer needs options.spawnPrepared (the package root\'s createExecServer passes it)');
  }
  if (options.httpPolicy !== undefined) {
    // A bad pattern is refused now, not at the first http/request.
    try {
      ManagedProxy.compilePolicy(options.httpPolicy);
    } catch (e) {
      throw new SandboxError('EINVALID_ARGUMENT', `httpPolicy: ${(e as Error).message}`);
    }
  }
  validateLimits(options);
  const max = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const t = options.transport;
  if (t.kind === 'stdio') {
    validateFloorOptions(options);
    return stdioServer(t.input ?? process.stdin, t.output ?? process.stdout, options, max);
  }
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

