/**
 * SOCKS5 (RFC 1928) on a listener: the no-auth greeting, CONNECT only (BIND and UDP ASSOCIATE are
 * refused and audited), the same decision as any other request, then the tunnel relay.
 */
import * as net from 'net';
import type { AddressInfo } from 'net';

import {
  clientOf,
  SOCKS_ATYP_UNSUPPORTED,
  SOCKS_CMD_UNSUPPORTED,
  SOCKS_CONN_REFUSED,
  SOCKS_GENERAL_FAILURE,
  SOCKS_HOST_UNREACHABLE,
  SOCKS_NET_UNREACHABLE,
  SOCKS_OK,
  type Listener,
  type ProxyContext,
} from './context';
import { decide } from './decision';
import { dial, READY } from './dial';
import { claimUpstreamSlot, noteRefusal } from './limits';
import { isIpLiteral, normalizeHost } from './matcher';
import type { AuditProtocol } from './options';
import { tunnel, useNativeRelay } from './relay';

export function socksReply(code: number, bound?: AddressInfo | null): Buffer {
  if (bound && net.isIPv4(bound.address)) {
    const parts = bound.address.split('.').map(Number);
    return Buffer.from([5, code, 0, 1, ...parts, (bound.port >> 8) & 0xff, bound.port & 0xff]);
  }
  return Buffer.from([5, code, 0, 1, 0, 0, 0, 0, 0, 0]);
}

export function socksCodeForError(err: NodeJS.ErrnoException): number {
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

/** Reads exact byte counts from a socket during the SOCKS5 handshake. */
export class ByteReader {
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

// ---- SOCKS5 --------------------------------------------------------------------------------

export async function onSocks(ctx: ProxyContext, listener: Listener, socket: net.Socket): Promise<void> {
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
  ctx.handshakes.get(socket)?.();
  const client = clientOf(socket);
  if (cmd === 0x03 || cmd === 0x02) {
    const protocol: AuditProtocol = cmd === 0x03 ? 'socks5Udp' : 'socks5Tcp';
    const normalized = normalizeHost(host);
    ctx.audit.emit({
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
  const outcome = await decide(ctx, listener, client, 'socks5Tcp', host, port, null);
  if (!outcome.allowed) return fail(outcome.socksReply);
  if (socket.destroyed) return;
  if (!claimUpstreamSlot(socket)) {
    noteRefusal(ctx, listener, 'socket_budget', client);
    return fail(SOCKS_GENERAL_FAILURE);
  }
  const upstream = dial(ctx, listener, outcome, port, socket, useNativeRelay(ctx));
  let up = false;
  upstream.on('error', (err: NodeJS.ErrnoException) => {
    if (!up) fail(socksCodeForError(err));
  });
  upstream.once(READY, () => {
    up = true;
    const bound = upstream.address();
    reader.release();
    socket.write(socksReply(SOCKS_OK, typeof bound === 'object' ? (bound as AddressInfo) : null), () =>
      tunnel(ctx, listener, socket, upstream, null),
    );
  });
}
