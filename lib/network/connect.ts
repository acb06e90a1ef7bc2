/**
 * The CONNECT tunnel: `CONNECT host:port` decided like any request, then either intercepted
 * (intercept.ts) or dialled and, after `200 Connection Established`, handed to the relay.
 */
import type * as http from 'http';
import type * as net from 'net';

import { clientOf, replyRaw, type Listener, type ProxyContext } from './context';
import { decide } from './decision';
import { openTunnel } from './dial';
import { intercept, needsInterception } from './intercept';
import { admitUpstream } from './limits';
import { tunnel } from './relay';

export async function onConnect(ctx: ProxyContext, listener: Listener, req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
  ctx.handshakes.get(socket)?.();
  const reply = (status: string, body: string) => replyRaw(socket, status, body);
  const target = /^\[([^\]]+)\]:(\d{1,5})$/.exec(req.url ?? '') ?? /^([^:[\]]+):(\d{1,5})$/.exec(req.url ?? '');
  const port = target ? Number(target[2]) : 0;
  if (!target || port < 1 || port > 65535) return void reply('400 Bad Request', 'CONNECT target must be host:port\n');
  const outcome = await decide(ctx, listener, clientOf(socket), 'httpsConnect', target[1], port, 'CONNECT');
  if (!admitUpstream(ctx, listener, socket, outcome, target[1]!)) return;
  if (needsInterception(ctx, outcome.host)) return intercept(ctx, listener, socket, head, outcome, port);
  openTunnel(ctx, listener, socket, outcome, port, (upstream) => {
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n', () => tunnel(ctx, listener, socket, upstream, head));
  });
}
