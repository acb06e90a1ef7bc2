/**
 * The WebSocket upgrade's Host and legacy Origin checks, from outside, with raw HTTP upgrade
 * requests on loopback sockets: each request carries, right behind its headers, the masked frames
 * of initialize, initialized and a process/start that writes a marker. A refused upgrade must
 * answer with its status and read none of them (the marker never appears); the positive control
 * is the same raw request with an acceptable Host, which gets 101 and whose command runs.
 *
 * - DNS rebinding: a page at attacker.example resolving to 127.0.0.1 sends `Host:
 *   attacker.example`; a loopback listener accepts only loopback IPs and localhost (no port or
 *   the listening one) and the names given to --ws-allow-host, else 421.
 * - hybi-08 handshakes carry `Sec-WebSocket-Origin` instead of `Origin`; `ws` accepts them, so the
 *   header is checked exactly as Origin is (403 unless --ws-allow-origin names it).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { startWsServer, wsAttempt } from './client';

const scene = makeScene('exec-ws-host');
afterAll(() => scene.cleanup());
const TOKEN = 'a-capability-token-0123456789';
const tokenFile = path.join(scene.root, 'token');
fs.writeFileSync(tokenFile, TOKEN, { mode: 0o600 });
const AUTH = ['--ws-auth', 'capability-token', '--ws-token-file', tokenFile];

/** A masked client text frame (RFC 6455 5.2). */
function frame(text: string): Buffer {
  const payload = Buffer.from(text);
  const mask = crypto.randomBytes(4);
  const len = payload.length;
  const head = len < 126 ? Buffer.from([0x81, 0x80 | len]) : Buffer.from([0x81, 0x80 | 126, len >> 8, len & 0xff]);
  const masked = Buffer.from(payload.map((b, i) => b ^ mask[i % 4]!));
  return Buffer.concat([head, mask, masked]);
}

let n = 0;
/**
 * One raw upgrade on a fresh socket: the request with these headers, then at once the frames of a
 * session that starts a marker-writing command. Resolves with the status code and the marker path;
 * on 101 it waits for the marker (the command's run) before closing.
 */
async function rawUpgrade(port: number, headers: Record<string, string>, version = 13): Promise<{ status: number; body: string; marker: string }> {
  const marker = path.join(scene.ws, `ran-${process.pid}-${n++}`);
  const start = { processId: 'p', argv: ['sh', '-c', `echo ran > ${marker}`], cwd: 'file://' + scene.ws, env: { PATH: '/usr/bin:/bin' }, tty: false, pipeStdin: false };
  const lines = [
    'GET / HTTP/1.1',
    'Upgrade: websocket',
    'Connection: Upgrade',
    `Sec-WebSocket-Key: ${crypto.randomBytes(16).toString('base64')}`,
    `Sec-WebSocket-Version: ${version}`,
    `Authorization: Bearer ${TOKEN}`,
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  const request = Buffer.concat([
    Buffer.from(lines.join('\r\n') + '\r\n\r\n'),
    frame(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'raw' } })),
    frame(JSON.stringify({ method: 'initialized' })),
    frame(JSON.stringify({ id: 2, method: 'process/start', params: start })),
  ]);
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  let got = Buffer.alloc(0);
  const ended = new Promise<void>((r) => sock.once('close', () => r()));
  sock.on('data', (d: Buffer) => (got = Buffer.concat([got, d])));
  sock.write(request);
  // The status line, or the server closing.
  const end = Date.now() + 20_000;
  while (!got.includes('\r\n\r\n') && !sock.destroyed && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
  const text = got.toString('latin1');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
  if (status === 101) {
    while (!fs.existsSync(marker) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    sock.destroy();
  } else {
    await ended;
  }
  const body = text.slice(text.indexOf('\r\n\r\n') + 4);
  return { status, body, marker };
}

describe.skipIf(!caps.linux)('exec-server ws: Host (DNS rebinding) and Sec-WebSocket-Origin, raw upgrades on loopback', () => {
  it('a loopback listener refuses a non-loopback Host with 421, reading nothing; loopback names and localhost, with or without its port, run', async () => {
    const srv = await startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', ...AUTH]);
    try {
      const port = Number(new URL(srv.url).port);
      const refused: Array<{ marker: string }> = [];
      for (const host of ['attacker.example', `attacker.example:${port}`, 'localhost.attacker.example', `127.0.0.1:${port === 65535 ? 1 : port + 1}`, '127.0.0.1.nip.io', '[::2]', 'localhost:0']) {
        const r = await rawUpgrade(port, { Host: host });
        expect(r.status, host).toBe(421);
        expect(r.body).toMatch(/accepts only a loopback Host .* --ws-allow-host/);
        refused.push(r);
      }
      // No Host at all: Node's HTTP parser answers 400 before the upgrade; either way nothing is read.
      const none = await rawUpgrade(port, {});
      expect([400, 421]).toContain(none.status);
      refused.push(none);
      // Controls: each acceptable Host upgrades and its command runs.
      for (const host of ['127.0.0.1', `127.0.0.1:${port}`, 'localhost', `LOCALHOST:${port}`, '[::1]', `[::1]:${port}`]) {
        const r = await rawUpgrade(port, { Host: host });
        expect(r.status, host).toBe(101);
        expect(fs.existsSync(r.marker), host).toBe(true);
      }
      // Checked after the controls ran: no refused request's command ever did.
      for (const r of refused) expect(fs.existsSync(r.marker)).toBe(false);
    } finally {
      await srv.stop();
    }
  });

  it('--ws-allow-host adds a name (with no port or the listening one); it stays refused without the flag', async () => {
    const srv = await startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', ...AUTH, '--ws-allow-host', 'Dev.Example.Test', '--ws-allow-host', 'other.test']);
    try {
      const port = Number(new URL(srv.url).port);
      const wrongPort = await rawUpgrade(port, { Host: `dev.example.test:${port === 1 ? 2 : port - 1}` });
      expect(wrongPort.status).toBe(421);
      const notListed = await rawUpgrade(port, { Host: 'third.test' });
      expect(notListed.status).toBe(421);
      for (const host of ['dev.example.test', `DEV.example.test:${port}`, 'other.test']) {
        const r = await rawUpgrade(port, { Host: host });
        expect(r.status, host).toBe(101);
        expect(fs.existsSync(r.marker), host).toBe(true);
      }
      expect(fs.existsSync(wrongPort.marker)).toBe(false);
      expect(fs.existsSync(notListed.marker)).toBe(false);
    } finally {
      await srv.stop();
    }
  });

  it('Sec-WebSocket-Origin (hybi-08) is refused with 403 like Origin unless allowed; a version-8 handshake without one runs', async () => {
    const srv = await startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', ...AUTH, '--ws-allow-origin', 'http://allowed.example']);
    try {
      const port = Number(new URL(srv.url).port);
      const host = { Host: `127.0.0.1:${port}` };
      const refused = [
        await rawUpgrade(port, { ...host, 'Sec-WebSocket-Origin': 'http://evil.example' }, 8),
        await rawUpgrade(port, { ...host, 'Sec-WebSocket-Origin': 'http://evil.example' }, 13),
        // An allowed Origin does not excuse a refused Sec-WebSocket-Origin beside it.
        await rawUpgrade(port, { ...host, Origin: 'http://allowed.example', 'Sec-WebSocket-Origin': 'http://evil.example' }, 13),
        await rawUpgrade(port, { ...host, Origin: 'http://evil.example' }, 8),
      ];
      for (const r of refused) expect(r.status).toBe(403);
      // Controls: version 8 without an origin, and with the allowed one, in either header.
      for (const extra of [{}, { 'Sec-WebSocket-Origin': 'http://allowed.example' }, { Origin: 'http://allowed.example' }]) {
        const r = await rawUpgrade(port, { ...host, ...extra }, 8);
        expect(r.status, JSON.stringify(extra)).toBe(101);
        expect(fs.existsSync(r.marker)).toBe(true);
      }
      for (const r of refused) expect(fs.existsSync(r.marker)).toBe(false);
    } finally {
      await srv.stop();
    }
  });

  it('the ws client library (Host 127.0.0.1:PORT) connects and runs a command; a malformed --ws-allow-host is refused at start', async () => {
    const srv = await startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', ...AUTH]);
    try {
      const marker = path.join(scene.ws, `ran-lib-${process.pid}`);
      const start = { processId: 'p', argv: ['sh', '-c', `echo ran > ${marker}`], cwd: 'file://' + scene.ws, env: { PATH: '/usr/bin:/bin' }, tty: false, pipeStdin: false };
      expect(await wsAttempt(srv.url, { Authorization: `Bearer ${TOKEN}` }, start)).toEqual({ initialized: 'string', started: 'closed' });
      expect(fs.readFileSync(marker, 'utf8')).toBe('ran\n');
    } finally {
      await srv.stop();
    }
    await expect(startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', ...AUTH, '--ws-allow-host', 'example.test:80'])).rejects.toThrow(/--ws-allow-host takes a host name or IP address without a port/);
  });
});
