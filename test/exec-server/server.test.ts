/**
 * Our exec-server beyond what the reference comparison covers: load (200 processes on one
 * connection; a fast producer's notifications neither lost nor reordered), a slow client
 * (bounded memory: output is paused, not queued), bad input on both transports (huge messages
 * are refused and the connection survives), and the WebSocket transport with capability-token
 * auth (unauthenticated clients are refused before any connection exists).
 */
import fs from 'node:fs';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, describe, expect, it, vi } from 'vitest';
import WebSocket from 'ws';

import { createExecServer, spawnPrepared } from '../../lib';
import { ExecConnection, RETAIN_BYTES, type ExecServer } from '../../lib/exec-server';
import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { b64, pidsWith, poll, wsConnection, type Message } from './client';

const scene = makeScene('exec-srv');
afterAll(() => scene.cleanup());
const uri = (p: string) => 'file://' + p;
const start = (processId: string, argv: string[], extra: Record<string, unknown> = {}) => ({
  processId,
  argv,
  cwd: uri(scene.ws),
  env: { PATH: '/usr/bin:/bin' },
  tty: false,
  pipeStdin: false,
  ...extra,
});


/** An in-process client over the stdio transport (PassThrough pipes). */
class StdioPeer {
  readonly input = new PassThrough();
  readonly output = new PassThrough();
  readonly messages: Message[] = [];
  server!: ExecServer;
  private buf = '';
  private id = 1;

  static async create(maxMessageBytes?: number, maxProcesses?: number): Promise<StdioPeer> {
    const p = new StdioPeer();
    p.server = await createExecServer({
      transport: { kind: 'stdio', input: p.input, output: p.output },
      ...(maxMessageBytes ? { maxMessageBytes } : {}),
      ...(maxProcesses ? { maxProcesses } : {}),
    });
    p.output.setEncoding('utf8');
    p.output.on('data', (d: string) => {
      p.buf += d;
      let i: number;
      while ((i = p.buf.indexOf('\n')) >= 0) {
        const line = p.buf.slice(0, i);
        p.buf = p.buf.slice(i + 1);
        if (line) p.messages.push(JSON.parse(line) as Message);
      }
    });
    return p;
  }

  async request(method: string, params?: unknown): Promise<Message> {
    const id = this.id++;
    this.input.write(JSON.stringify({ id, method, params }) + '\n');
    return poll(() => this.messages.find((m) => m.id === id && m.method === undefined), `response #${id} (${method})`);
  }

  async init(): Promise<void> {
    await this.request('initialize', { clientName: 'test' });
    this.input.write('{"method":"initialized"}\n');
  }

  events(pid: string): Message[] {
    return this.messages.filter((m) => m.method !== undefined && m.params?.processId === pid);
  }

  closedEvent(pid: string): Promise<Message> {
    return poll(() => this.events(pid).find((m) => m.method === 'process/closed'), `process/closed ${pid}`);
  }

  async close(): Promise<void> {
    this.input.end();
    await this.server.done;
  }
}

describe.skipIf(!caps.linux)('exec-server: load', () => {
  it('200 processes over one connection all run to completion with their own output and exit code', async () => {
    const peer = await StdioPeer.create();
    await peer.init();
    const n = 200;
    const starts = await Promise.all(
      Array.from({ length: n }, (_, i) => peer.request('process/start', start(`p${i}`, ['sh', '-c', `echo "out $0"; exit $(($0 % 7))`, String(i)]))),
    );
    for (const s of starts) expect(s.error).toBeUndefined();
    for (let i = 0; i < n; i++) await peer.closedEvent(`p${i}`);
    for (let i = 0; i < n; i++) {
      const ev = peer.events(`p${i}`);
      const out = ev.filter((e) => e.method === 'process/output').map((e) => Buffer.from(e.params!.chunk as string, 'base64').toString()).join('');
      expect(out).toBe(`out ${i}\n`);
      expect(ev.find((e) => e.method === 'process/exited')!.params!.exitCode).toBe(i % 7);
    }
    await peer.close();
  });

  it('a fast producer: thousands of output notifications, none lost or reordered by seq', async () => {
    const peer = await StdioPeer.create();
    await peer.init();
    const lines = 3000;
    // One line every ~0.3 ms: thousands of separate chunks (a pipe merges back-to-back writes).
    const producer = `const fs=require('fs');const a=new Int32Array(new SharedArrayBuffer(4));for(let i=0;i<${lines};i++){fs.writeSync(1,i+'\\n');Atomics.wait(a,0,0,0.3)}`;
    const t0 = Date.now();
    await peer.request('process/start', start('fast', [process.execPath, '-e', producer]));
    await peer.closedEvent('fast');
    const secs = (Date.now() - t0) / 1000;
    const out = peer.events('fast').filter((e) => e.method === 'process/output');
    const seqs = out.map((e) => e.params!.seq as number);
    // seq increases by exactly one per output event (exit/close events may sit between).
    expect(seqs.every((s, i) => i === 0 || s > seqs[i - 1]!)).toBe(true);
    const all = peer.events('fast').map((e) => e.params!.seq as number);
    expect(all).toEqual(Array.from({ length: all.length }, (_, i) => i + 1));
    const text = out.map((e) => Buffer.from(e.params!.chunk as string, 'base64').toString()).join('');
    expect(text).toBe(Array.from({ length: lines }, (_, i) => `${i}\n`).join(''));
    expect(out.length).toBeGreaterThanOrEqual(1000);
    // eslint-disable-next-line no-console
    console.log(`[load] ${out.length} notifications in ${secs.toFixed(2)} s (${Math.round(out.length / secs)}/s)`);
    await peer.close();
  });
});

describe.skipIf(!caps.linux)('exec-server: a slow client', () => {
  it('output is paused while the client cannot take more: memory stays bounded, nothing is lost after the drain', async () => {
    const sent: Message[] = [];
    let sentBytes = 0;
    let outputBytes = 0;
    let lastOutputSeq = 0;
    let ordered = true;
    let congested = false;
    let drained = false;
    let drain: (() => void) | undefined;
    const conn = new ExecConnection({
      send: (m) => {
        const s = JSON.stringify(m);
        const msg = JSON.parse(s) as Message;
        if (msg.method === 'process/output') {
          // Counted, not kept: the test itself must not hold 16 MiB of JSON.
          outputBytes += Buffer.from(msg.params!.chunk as string, 'base64').length;
          if ((msg.params!.seq as number) <= lastOutputSeq) ordered = false;
          lastOutputSeq = msg.params!.seq as number;
        } else sent.push(msg);
        sentBytes += s.length;
        // After the first 2 MB the "client" stops reading.
        if (sentBytes > 2_000_000 && !drained) congested = true;
        return !congested;
      },
      onDrain: (cb) => (drain = cb),
    }, { spawnPrepared });
    const req = async (id: number, method: string, params?: unknown) => {
      conn.handleText(JSON.stringify({ id, method, params }));
      return poll(() => sent.find((m) => m.id === id), `#${id}`);
    };
    await req(1, 'initialize', { clientName: 't' });
    conn.handleText('{"method":"initialized"}');
    const total = 16 * 1024 * 1024;
    await req(2, 'process/start', start('big', ['head', '-c', String(total), '/dev/zero']));
    await poll(() => drain !== undefined, 'congestion');
    // While congested the sent volume stops growing: it settles at the 2 MB threshold plus
    // what was already read from the pipes (a few chunks), far below the 64 MiB produced.
    let last = -1;
    let stable = 0;
    await poll(() => {
      if (sentBytes === last) stable++;
      else stable = 0;
      last = sentBytes;
      return stable >= 10;
    }, 'the sent volume to settle');
    expect(sentBytes).toBeLessThan(2_000_000 + 2 * 1024 * 1024);
    expect(sent.some((m) => m.method === 'process/exited')).toBe(false); // the producer is blocked, not finished
    // Retention for process/read is bounded too.
    const r = await req(3, 'process/read', { processId: 'big' });
    const retained = (r.result!.chunks as Array<{ chunk: string }>).reduce((a, c) => a + Buffer.from(c.chunk, 'base64').length, 0);
    expect(retained).toBeLessThanOrEqual(RETAIN_BYTES + 65536);
    // The client catches up: everything arrives, in order.
    congested = false;
    drained = true;
    drain!();
    await poll(() => sent.find((m) => m.method === 'process/closed'), 'closed', 20_000).catch((e) => { throw new Error(e.message + ' out=' + outputBytes + ' sent=' + JSON.stringify(sent.slice(-3)).slice(0, 500)); });
    expect(outputBytes).toBe(total);
    expect(ordered).toBe(true);
    expect(sent.find((m) => m.method === 'process/exited')!.params!.exitCode).toBe(0);
    await conn.close();
  });
});

describe.skipIf(!caps.linux)('exec-server: bad input', () => {
  it('stdio: a line over the cap is refused with an error and the connection carries on', async () => {
    const peer = await StdioPeer.create(4096);
    await peer.init();
    peer.input.write('{"id":99,"method":"environment/status","pad":"' + 'x'.repeat(10_000) + '"}\n');
    const err = await poll(() => peer.messages.find((m) => m.id === -1), 'the parse error');
    expect(err.error).toEqual({ code: -32600, message: 'failed to parse JSON-RPC message from exec-server stdio: message exceeds 4096 bytes' });
    expect(peer.messages.find((m) => m.id === 99)).toBeUndefined();
    expect((await peer.request('environment/status')).result).toEqual({ status: 'ready' });
    // Base64 garbage and a truncated line of JSON: clear errors, still alive.
    const w = await peer.request('process/write', { processId: 'x', chunk: '@@@@', writeId: 'a' });
    expect(w.error).toEqual({ code: -32602, message: 'Invalid symbol 64, offset 0.' });
    peer.input.write('{"id":5,"method":\n');
    await poll(() => peer.messages.filter((m) => m.id === -1).length === 2, 'second parse error');
    expect((await peer.request('environment/status')).result).toEqual({ status: 'ready' });
    await peer.close();
  });

  it('the number of live processes per connection is capped; a slot frees when one exits', async () => {
    const peer = await StdioPeer.create(undefined, 2);
    await peer.init();
    expect((await peer.request('process/start', start('a', ['sleep', '1000']))).error).toBeUndefined();
    expect((await peer.request('process/start', start('b', ['sleep', '1000']))).error).toBeUndefined();
    const third = await peer.request('process/start', start('c', ['true']));
    expect(third.error).toEqual({ code: -32600, message: 'too many processes on this connection (at most 2 starting or running)' });
    expect(peer.events('c')).toEqual([]); // nothing ran
    await peer.request('process/terminate', { processId: 'a' });
    await peer.closedEvent('a');
    expect((await peer.request('process/start', start('c', ['true']))).error).toBeUndefined();
    await peer.close();
  });

  it('closing the stdio input ends the server and kills its processes (checked from outside)', async () => {
    const peer = await StdioPeer.create();
    await peer.init();
    const marker = `1000.7${process.pid}`;
    await peer.request('process/start', start('s', ['sh', '-c', `sleep ${marker}; true`]));
    await poll(() => pidsWith(marker).length >= 2, 'the sleeper');
    await peer.close();
    await poll(() => pidsWith(marker).length === 0, 'no survivors', 20_000);
  });
});

describe.skipIf(!caps.linux)('exec-server: WebSocket transport', () => {
  const tokenFile = path.join(scene.root, 'token');
  fs.writeFileSync(tokenFile, 'a-capability-token-0123456789\n', { mode: 0o600 });
  // The transport tests run unsandboxed commands: an authenticated listener (an unauthenticated
  // one refuses them, sandbox-floor.test.ts).
  const AUTH = { Authorization: 'Bearer a-capability-token-0123456789' };

  function connect(port: number, headers: Record<string, string> = AUTH) {
    return wsConnection(`ws://127.0.0.1:${port}`, { headers });
  }

  it('one message per text frame: initialize, start a process, get its output; bad frames do not kill the connection', async () => {
    const server = await createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0, tokenFile }, maxMessageBytes: 4096 });
    const c = connect(server.address!.port);
    await c.opened;
    expect((await c.request('initialize', { clientName: 'ws' })).result?.sessionId).toBeTypeOf('string');
    c.ws.send('{"method":"initialized"}');
    await c.request('process/start', start('e', ['sh', '-c', 'echo over-ws']));
    const out = await poll(() => c.messages.find((m) => m.method === 'process/output' && m.params?.processId === 'e'), 'output');
    expect(Buffer.from(out.params!.chunk as string, 'base64').toString()).toBe('over-ws\n');
    c.ws.send('not json');
    c.ws.send('x'.repeat(5000));
    await poll(() => c.messages.filter((m) => m.id === -1).length === 2, 'two errors');
    expect(c.messages.filter((m) => m.id === -1).map((m) => m.error!.message)).toEqual([
      expect.stringMatching(/^failed to parse JSON-RPC message from exec-server websocket: /),
      'failed to parse JSON-RPC message from exec-server websocket: message exceeds 4096 bytes',
    ]);
    expect((await c.request('environment/status')).result).toEqual({ status: 'ready' });
    c.ws.close();
    await server.close();
  });

  it('a closed socket detaches its session: processes live on, a resume finds them with their output, then they die when the detached session expires (checked from outside)', async () => {
    const server = await createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0, tokenFile }, detachedSessionTtlMs: 1500 });
    const c = connect(server.address!.port);
    await c.opened;
    const sessionId = (await c.request('initialize', { clientName: 'ws' })).result?.sessionId as string;
    c.ws.send('{"method":"initialized"}');
    const marker = `1000.8${process.pid}`;
    for (let i = 0; i < 3; i++) await c.request('process/start', start(`s${i}`, ['sh', '-c', `echo up-${i}; sleep ${marker}; true`]));
    await poll(() => pidsWith(marker).length >= 6, 'sleepers');
    c.ws.terminate();
    // A resume of an unknown session is refused; another connection cannot take an attached one.
    const other = connect(server.address!.port);
    await other.opened;
    expect((await other.request('initialize', { clientName: 'ws', resumeSessionId: 'nope' })).error).toEqual({ code: -32600, message: 'unknown session id nope' });
    // The server sees the close a moment later: until then the session is still attached (-32010).
    let r = connect(server.address!.port);
    await r.opened;
    let resumed = await r.request('initialize', { clientName: 'ws', resumeSessionId: sessionId });
    for (let i = 0; resumed.error?.code === -32010 && i < 100; i++) {
      r.ws.close();
      await new Promise((res) => setTimeout(res, 50));
      r = connect(server.address!.port);
      await r.opened;
      resumed = await r.request('initialize', { clientName: 'ws', resumeSessionId: sessionId });
    }
    expect(resumed.result?.sessionId).toBe(sessionId);
    expect(pidsWith(marker).length).toBeGreaterThanOrEqual(6);
    const dup = connect(server.address!.port);
    await dup.opened;
    expect((await dup.request('initialize', { clientName: 'ws', resumeSessionId: sessionId })).error).toEqual({
      code: -32010,
      message: `session ${sessionId} is already attached to another connection`,
    });
    r.ws.send('{"method":"initialized"}');
    const read = await r.request('process/read', { processId: 's1', afterSeq: 0 });
    const text = ((read.result?.chunks as Array<{ chunk: string }>) ?? []).map((ch) => Buffer.from(ch.chunk, 'base64').toString()).join('');
    expect(text).toBe('up-1\n');
    r.ws.terminate();
    await poll(() => pidsWith(marker).length === 0, 'no survivors after the detached lifetime', 20_000);
    for (const x of [other, dup]) x.ws.close();
    await server.close();
  });

  it('server.close() kills the processes of every session, attached or detached (checked from outside)', async () => {
    const server = await createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0, tokenFile } });
    const marker = `1000.9${process.pid}`;
    for (const detach of [true, false]) {
      const c = connect(server.address!.port);
      await c.opened;
      await c.request('initialize', { clientName: 'ws' });
      c.ws.send('{"method":"initialized"}');
      await c.request('process/start', start('s', ['sleep', `${marker}`]));
      if (detach) c.ws.terminate();
    }
    await poll(() => pidsWith(marker).length === 2, 'two sleepers');
    await server.close();
    await poll(() => pidsWith(marker).length === 0, 'no survivors', 20_000);
  });

  it('capability token: no token or a wrong one is refused with 401 before any connection; the right one works', async () => {
    const server = await createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0, tokenFile } });
    const port = server.address!.port;
    await expect(connect(port, {}).opened).rejects.toThrow('HTTP 401');
    await expect(connect(port, { Authorization: 'Bearer wrong-token-0123456789' }).opened).rejects.toThrow('HTTP 401');
    await expect(connect(port, { Authorization: 'Basic a-capability-token-0123456789' }).opened).rejects.toThrow('HTTP 401');
    expect(server.connections()).toEqual([]);
    const ok = connect(port, { Authorization: 'Bearer a-capability-token-0123456789' });
    await ok.opened;
    expect((await ok.request('initialize', { clientName: 'ws' })).result?.sessionId).toBeTypeOf('string');
    ok.ws.close();
    await server.close();
  });

  it('bad token files are refused at start', async () => {
    await expect(createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0, tokenFile: path.join(scene.root, 'missing') } })).rejects.toThrow(/failed to read websocket auth secret/);
    await expect(createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0 } })).rejects.toThrow(/without authentication/);
    await expect(createExecServer({ transport: { kind: 'ws', host: '0.0.0.0', port: 0, dangerouslyAllowUnauthenticated: true } })).rejects.toThrow(/not loopback/);
    const short = path.join(scene.root, 'short');
    fs.writeFileSync(short, 'abc', { mode: 0o600 });
    await expect(createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0, tokenFile: short } })).rejects.toThrow(/too short/);
  });
});

describe.skipIf(!caps.linux)('exec-server: CLI', () => {
  it('process-sandbox exec-server refuses bad --listen values: one line and a hint on stderr, exit 125', async () => {
    const { main: execServerMain } = await import('../../lib/cli/exec-server');
    const refused = async (argv: string[], why: RegExp) => {
      let err = '';
      const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((err += chunk.toString()), true));
      try {
        expect(await execServerMain(argv)).toBe(125);
      } finally {
        spy.mockRestore();
      }
      const lines = err.split('\n').filter((l) => l !== '');
      expect(lines, argv.join(' ')).toHaveLength(2);
      expect(lines[0]).toMatch(/^process-sandbox: exec-server: /);
      expect(lines[0]).toMatch(why);
      expect(lines[1]).toBe("Try 'process-sandbox exec-server --help' for the options.");
    };
    await refused(['--listen', 'tcp://1.2.3.4:5'], /--listen must be stdio or ws:\/\/IP:PORT/);
    await refused(['--listen', 'stdio', '--ws-token-file', '/x'], /applies only/);
    await refused(['--bogus'], /unknown exec-server option/);
    await refused(['--listen', 'ws://127.0.0.1:0', '--ws-auth', 'signed-bearer-token'], /--ws-shared-secret-file` is required/);
    await refused(['--listen', 'ws://127.0.0.1:0', '--ws-auth', 'capability-token'], /--ws-token-sha256` is required/);
    await refused(['--listen', 'ws://localhost:0'], /--listen must be stdio or ws:\/\/IP:PORT/);
  });
  void b64;
});
