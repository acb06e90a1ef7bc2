/**
 * The exec-server's server-wide bounds, from outside: the CLI runs as its own process (the
 * reported setup: an unauthenticated loopback listener, so the sandbox floor is on), real
 * WebSocket clients drive it, and what runs is counted in /proc, not asked of the server.
 *
 * - processes: two sessions together cannot pass --max-server-processes (each stays under its own
 *   per-session cap); the refused start is -32600 like the per-session refusal, and its command
 *   is not running; below the cap (positive control) every start runs, and a slot freed by a
 *   terminate is usable again;
 * - sessions: --max-sessions counts detached sessions too; one frees when its detached lifetime ends;
 * - connections: --max-connections-per-peer refuses a third connection from one address with HTTP
 *   503 before any connection exists (its process/start never runs), while another address still
 *   connects; --max-connections refuses past the total; a closed connection frees its slot.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';

import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { OUR_CLI, pidsWith, poll, startWsServer, workspaceWrite, wsAttempt, wsConnection, type Message } from './client';

const scene = makeScene('exec-limits');
afterAll(() => scene.cleanup());
const uri = (p: string) => 'file://' + p;
const UNAUTH = ['--listen', 'ws://127.0.0.1:0', '--ws-dangerously-allow-unauthenticated', '--floor-write', scene.ws];


/** One open WebSocket connection (from `localAddress` when given), initialized. */
async function session(url: string, localAddress?: string) {
  const { ws, messages, opened, request } = wsConnection(url, localAddress ? { localAddress } : {});
  await opened;
  const init = await request('initialize', { clientName: 'limits' });
  if (!init.error) ws.send('{"method":"initialized"}');
  return { ws, request, init, closed: new Promise<void>((r) => ws.once('close', () => r())) };
}

let n = 0;
/** A sandboxed sleeper whose argv carries `marker` (counted from outside with pidsWith). */
function sleeper(marker: string) {
  n++;
  return {
    processId: `s${n}`,
    argv: ['sh', '-c', `sleep ${marker}; true`],
    cwd: uri(scene.ws),
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    pipeStdin: false,
    sandbox: workspaceWrite(scene.ws),
  };
}

describe.skipIf(!caps.linux || !caps.userns)(
  `exec-server: server-wide bounds on an unauthenticated listener${caps.userns ? '' : ' (skipped: no user namespaces for the sandboxed processes the floor requires)'}`,
  () => {
    it('two sessions together cannot pass --max-server-processes; below it every start runs (counted in /proc)', async () => {
      const srv = await startWsServer('ours', [...UNAUTH, '--max-session-processes', '2', '--max-server-processes', '3']);
      const a = await session(srv.url);
      const b = await session(srv.url);
      // Distinct sleep lengths, so /proc tells each start's command apart (1000.xN never ends in time).
      const mark = (k: number) => `1000.${k}${process.pid}`;
      try {
        // Positive control: 3 starts over two sessions, each within its per-session cap of 2.
        for (const [c, k] of [[a, 1], [a, 2], [b, 3]] as const) {
          const r = await c.request('process/start', sleeper(mark(k)));
          expect(r.error, `start ${k}`).toBeUndefined();
          expect(r.result?.sandboxType).not.toBe('none');
        }
        for (const k of [1, 2, 3]) await poll(() => pidsWith(mark(k)).length >= 1, `sleeper ${k} running`);
        // Session b holds 1 of its 2, but the server holds 3 of 3.
        const refused = await b.request('process/start', sleeper(mark(4)));
        expect(refused.error).toEqual({ code: -32600, message: 'too many processes on this server (at most 3 starting or running)' });
        // A third session is refused too, whatever its own cap.
        const c = await session(srv.url);
        expect((await c.request('process/start', sleeper(mark(5)))).error?.message).toBe('too many processes on this server (at most 3 starting or running)');
        expect(pidsWith(mark(4))).toEqual([]);
        expect(pidsWith(mark(5))).toEqual([]);
        // The per-session refusal keeps its own text.
        expect((await a.request('process/start', sleeper(mark(6)))).error).toEqual({ code: -32600, message: 'too many processes on this connection (at most 2 starting or running)' });
        // A terminated process frees its slot for any session.
        const first = (await a.request('process/terminate', { processId: `s1` })).result;
        expect(first).toEqual({ running: true });
        await poll(() => pidsWith(mark(1)).length === 0, 'sleeper 1 gone');
        let again: Message | undefined;
        for (let i = 0; i < 200; i++) {
          again = await b.request('process/start', sleeper(mark(7)));
          if (!again.error) break;
          await new Promise((r) => setTimeout(r, 50)); // the exit is seen a moment after the process is gone
        }
        expect(again!.error).toBeUndefined();
        await poll(() => pidsWith(mark(7)).length >= 1, 'sleeper 7 running');
        c.ws.close();
      } finally {
        a.ws.close();
        b.ws.close();
        await srv.stop();
      }
      // The server is gone: so are its processes.
      for (const k of [2, 3, 7]) await poll(() => pidsWith(mark(k)).length === 0, `sleeper ${k} gone`, 20_000);
    });

    it('a sandboxed fs/open handle holds a helper process: it counts toward --max-server-processes, and its fs/close frees the slot', async () => {
      const srv = await startWsServer('ours', [...UNAUTH, '--max-server-processes', '2']);
      const a = await session(srv.url);
      const mark = (k: number) => `1000.${k}${process.pid}`;
      fs.writeFileSync(path.join(scene.ws, 'file.txt'), 'data');
      const open = (handleId: string) => a.request('fs/open', { handleId, path: uri(path.join(scene.ws, 'file.txt')), mode: 'read', sandbox: workspaceWrite(scene.ws) });
      try {
        expect((await open('h1')).error).toBeUndefined();
        expect((await a.request('process/start', sleeper(mark(11)))).error).toBeUndefined();
        await poll(() => pidsWith(mark(11)).length >= 1, 'sleeper 11 running');
        const full = 'too many processes on this server (at most 2 starting or running)';
        expect((await open('h2')).error).toEqual({ code: -32600, message: full });
        expect((await a.request('process/start', sleeper(mark(12)))).error).toEqual({ code: -32600, message: full });
        expect(pidsWith(mark(12))).toEqual([]);
        // The handle still works; closing it frees its slot.
        expect((await a.request('fs/readBlock', { handleId: 'h1', offset: 0, len: 4 })).error).toBeUndefined();
        expect((await a.request('fs/close', { handleId: 'h1' })).error).toBeUndefined();
        let again: Message | undefined;
        for (let i = 0; i < 200; i++) {
          again = await a.request('process/start', sleeper(mark(13)));
          if (!again.error) break;
          await new Promise((r) => setTimeout(r, 50)); // the helper's exit is seen a moment after fs/close
        }
        expect(again!.error).toBeUndefined();
        await poll(() => pidsWith(mark(13)).length >= 1, 'sleeper 13 running');
      } finally {
        a.ws.close();
        await srv.stop();
      }
      for (const k of [11, 13]) await poll(() => pidsWith(mark(k)).length === 0, `sleeper ${k} gone`, 20_000);
    });
  },
);

describe.skipIf(!caps.linux)('exec-server: session and connection bounds', () => {
  it('--max-sessions counts detached sessions; one frees when its connection is gone past the detached lifetime', async () => {
    const { createExecServer } = await import('../../lib');
    const tokenFile = path.join(scene.root, 'token');
    fs.writeFileSync(tokenFile, 'a-capability-token-0123456789\n', { mode: 0o600 });
    const server = await createExecServer({ transport: { kind: 'ws', host: '127.0.0.1', port: 0, tokenFile }, maxSessions: 2, detachedSessionTtlMs: 500 });
    const url = `ws://127.0.0.1:${server.address!.port}`;
    const open = async () => {
      const ws = new WebSocket(url, { headers: { Authorization: 'Bearer a-capability-token-0123456789' } });
      const got = new Promise<Message>((resolve) => ws.once('message', (d) => resolve(JSON.parse(d.toString()) as Message)));
      await new Promise((r) => ws.once('open', r));
      ws.send(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'limits' } }));
      return { ws, init: await got };
    };
    try {
      const one = await open();
      const two = await open();
      expect(one.init.result?.sessionId).toBeTypeOf('string');
      expect(two.init.result?.sessionId).toBeTypeOf('string');
      const three = await open();
      expect(three.init.error).toEqual({ code: -32600, message: 'too many sessions on this server (at most 2, detached ones included)' });
      // A closed connection leaves its session detached (still counted), then it ends.
      one.ws.close();
      let later = await open();
      for (let i = 0; later.init.error && i < 200; i++) {
        later.ws.close();
        await new Promise((r) => setTimeout(r, 50));
        later = await open();
      }
      expect(later.init.result?.sessionId).toBeTypeOf('string');
      for (const c of [two, three, later]) c.ws.close();
    } finally {
      await server.close();
    }
  });

  it('connections: a third from one address gets 503 and runs nothing; another address connects; the total is bounded too', async () => {
    const srv = await startWsServer('ours', [...UNAUTH, '--max-connections', '3', '--max-connections-per-peer', '2']);
    const held: Array<Awaited<ReturnType<typeof session>>> = [];
    try {
      held.push(await session(srv.url, '127.0.0.1'), await session(srv.url, '127.0.0.1'));
      for (const h of held) expect(h.init.result?.sessionId).toBeTypeOf('string');
      const marker = path.join(scene.ws, `conn-${process.pid}`);
      const params = { processId: 'p', argv: ['sh', '-c', `echo ran > ${marker}`], cwd: uri(scene.ws), env: { PATH: '/usr/bin:/bin' }, tty: false, pipeStdin: false };
      expect(await wsAttempt(srv.url, {}, params)).toEqual({ http: 503, body: 'too many connections from 127.0.0.1 (at most 2 per peer address)' });
      expect(fs.existsSync(marker)).toBe(false);
      // Another peer address (all of 127/8 is loopback) still connects: the positive control.
      held.push(await session(srv.url, '127.0.0.2'));
      expect(held[2]!.init.result?.sessionId).toBeTypeOf('string');
      await expect(session(srv.url, '127.0.0.3')).rejects.toThrow('HTTP 503');
      // A closed connection frees its slot.
      held.shift()!.ws.close();
      let back: Awaited<ReturnType<typeof session>> | undefined;
      for (let i = 0; !back && i < 200; i++) {
        back = await session(srv.url, '127.0.0.1').catch(() => undefined);
        if (!back) await new Promise((r) => setTimeout(r, 50));
      }
      expect(back?.init.result?.sessionId).toBeTypeOf('string');
      held.push(back!);
    } finally {
      for (const h of held) h.ws.close();
      await srv.stop();
    }
  });

  it('a bound that is not a positive integer is refused at start (exit 125)', () => {
    for (const bad of [['--max-server-processes', '0'], ['--max-sessions', 'x'], ['--max-connections-per-peer', '-1']]) {
      const r = spawnSync(process.execPath, [OUR_CLI, 'exec-server', '--listen', 'stdio', ...bad], { input: '', encoding: 'utf8', timeout: 60_000 });
      expect(r.status).toBe(125);
      expect(r.stderr).toMatch(new RegExp(`^process-sandbox: exec-server: ${bad[0]} must be a positive integer`));
    }
  });
});
