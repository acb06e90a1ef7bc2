/**
 * The CONNECT tunnel: `CONNECT host:port` decided like any request, then either intercepted
 * (intercept.ts) or dialled and, after `200 Connection Established`, handed to the relay.
 */
import type * as http from 'http';
import type * as net from 'net';

import { clientOf, refusalBody, type Listener, type ProxyContext } from './context';
import { decide } from './decision';
import { dial, READY } from './dial';
import { intercept, needsInterception } from './intercept';
import { claimUpstreamSlot, noteRefusal } from './limits';
import { tunnel, useNativeRelay } from './relay';

export async function onConnect(ctx: ProxyContext, listener: Listener, req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
  ctx.handshakes.get(socket)?.();
  const reply = (status: string, body: string, extra = '') =>
    socket.end(
      `HTTP/1.1 ${status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `${extra}connection: close\r\n\r\n${body}`,
    );
  const target = /^\[([^\]]+)\]:(\d{1,5})$/.exec(req.url ?? '') ?? /^([^:[\]]+):(\d{1,5})$/.exec(req.url ?? '');
  const port = target ? Number(target[2]) : 0;
  if (!target || port < 1 || port > 65535) return void reply('400 Bad Request', 'CONNECT target must be host:port\n');
  const outcome = await decide(ctx, listener, clientOf(socket), 'httpsConnect', target[1], port, 'CONNECT');
  if (!outcome.allowed) {
    if (outcome.header) {
      return void reply('403 Forbidden', refusalBody(outcome.reason), `x-proxy-error: ${outcome.header}\r\n`);
    }
    return void reply('502 Bad Gateway', `proxy could not resolve ${target[1]}\n`);
  }
  if (socket.destroyed) return;
  if (!claimUpstreamSlot(socket)) {
    noteRefusal(ctx, listener, 'socket_budget', clientOf(socket));
    return void reply('503 Service Unavailable', 'blocked by network policy: proxy socket budget exhausted\n', 'x-proxy-error: blocked-by-connection-limit\r\n');
  }
  if (needsInterception(ctx, outcome.host)) return intercept(ctx, listener, socket, head, outcome, port);
  const upstream = dial(ctx, listener, outcome, port, socket, useNativeRelay(ctx));
  let tunnelUp = false;
  upstream.on('error', (err: NodeJS.ErrnoException) => {
    if (!tunnelUp && socket.writable) reply('502 Bad Gateway', `upstream connect failed: ${err.code ?? err.message}\n`);
  });
  upstream.once(READY, () => {
    tunnelUp = true;
    socket.pause();
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n', () => tunnel(ctx, listener, socket, upstream, head));
  });
}
