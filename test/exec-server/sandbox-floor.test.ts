/**
 * The sandbox floor (`--require-sandbox`, implied by `--ws-dangerously-allow-unauthenticated`),
 * from outside: the CLI runs as its own process. Under the floor every request that would run a
 * command or touch the file system without a sandbox is refused, and what it would have done is
 * checked not to have happened (the marker its command writes, the file fs/writeFile would create,
 * the content fs/readFile would return). Each refusal has its positive controls: the same request
 * with a sandbox works under the floor, and without the floor (Codex's default) the same
 * unsandboxed request works.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { b64, Client, startWsServer, workspaceWrite, wsAttempt } from './client';

const scene = makeScene('exec-floor');
afterAll(() => scene.cleanup());
const uri = (p: string) => 'file://' + p;
const SECRET = path.join(scene.out, 'secret.txt'); // 'top secret', outside the workspace

let n = 0;
/** A process/start whose command writes a fresh marker in the workspace. */
function markedStart(sandbox?: object): { marker: string; params: Record<string, unknown> } {
  const marker = path.join(scene.ws, `ran-${process.pid}-${n++}`);
  const params = {
    processId: `p${n}`,
    argv: ['sh', '-c', `echo ran > ${marker}`],
    cwd: uri(scene.ws),
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    pipeStdin: false,
    ...(sandbox ? { sandbox } : {}),
  };
  return { marker, params };
}

async function client(args: string[]): Promise<Client> {
  const c = new Client('ours', {}, args);
  await c.init();
  return c;
}

const FLOOR = /this exec-server requires a sandbox on every request \(--require-sandbox, always on for a WebSocket listener without authentication\)/;

describe.skipIf(!caps.linux || !caps.userns)(
  `exec-server --require-sandbox: nothing runs or is touched outside a sandbox${caps.userns ? '' : ' (skipped: no unprivileged user namespaces for the sandboxed controls)'}`,
  () => {
    it('process/start without a sandbox, or with permissions that confine nothing, is refused and does not run; with a sandbox it runs; without the floor it runs', async () => {
      const floor = await client(['--require-sandbox']);
      const plain = await client([]);
      try {
        const bare = markedStart();
        const r = await floor.request('process/start', bare.params);
        expect(r.error?.code).toBe(-32602);
        expect(r.error?.message).toMatch(/^process\/start without a `sandbox` is refused: /);
        expect(r.error?.message).toMatch(FLOOR);
        expect(r.error?.message).toMatch(/send a `sandbox` \(FileSystemSandboxContext/);
        for (const permissions of [{ type: 'disabled' }, { type: 'external', network: 'enabled' }, { type: 'managed', file_system: { type: 'unrestricted' }, network: 'enabled' }]) {
          const open = markedStart({ ...workspaceWrite(scene.ws), permissions });
          const o = await floor.request('process/start', open.params);
          expect(o.error?.code, JSON.stringify(permissions)).toBe(-32602);
          expect(o.error?.message).toMatch(/with `sandbox.permissions` that confine nothing .* is refused: .*--require-sandbox/);
          expect(fs.existsSync(open.marker)).toBe(false);
        }
        // Controls: a sandboxed start under the floor runs; the unsandboxed one runs without it.
        const boxed = markedStart(workspaceWrite(scene.ws));
        expect((await floor.request('process/start', boxed.params)).result).toMatchObject({ sandboxType: 'linuxSeccomp' });
        await floor.closed(boxed.params.processId as string);
        expect(fs.readFileSync(boxed.marker, 'utf8')).toBe('ran\n');
        const unboxed = markedStart();
        expect((await plain.request('process/start', unboxed.params)).result).toMatchObject({ sandboxType: 'none' });
        await plain.closed(unboxed.params.processId as string);
        expect(fs.readFileSync(unboxed.marker, 'utf8')).toBe('ran\n');
        // Checked last, after the controls' commands finished: the refused one never ran.
        expect(fs.existsSync(bare.marker)).toBe(false);
      } finally {
        await floor.close();
        await plain.close();
      }
    });

    it('fs/* and fs/open without a sandbox are refused (nothing read, nothing written); with one they work; without the floor they work', async () => {
      const floor = await client(['--require-sandbox']);
      const plain = await client([]);
      try {
        const read = { path: uri(SECRET) };
        const r = await floor.request('fs/readFile', read);
        expect(r.error?.code).toBe(-32602);
        expect(r.error?.message).toMatch(/^fs\/readFile without a `sandbox` is refused: .*--require-sandbox/);
        expect(r.result).toBeUndefined();
        const target = path.join(scene.ws, 'written-unsandboxed');
        const w = await floor.request('fs/writeFile', { path: uri(target), dataBase64: b64('x') });
        expect(w.error?.message).toMatch(/^fs\/writeFile without a `sandbox` is refused/);
        for (const [method, params] of [
          ['fs/getMetadata', { path: uri(SECRET) }],
          ['fs/readDirectory', { path: uri(scene.out) }],
          ['fs/remove', { path: uri(SECRET) }],
          ['fs/copy', { sourcePath: uri(SECRET), destinationPath: uri(path.join(scene.ws, 'copied')), recursive: false }],
          ['fs/open', { handleId: 'h', path: uri(SECRET) }],
        ] as const) {
          const e = await floor.request(method, params);
          expect(e.error?.code, method).toBe(-32602);
          expect(e.error?.message).toContain(`${method} without a \`sandbox\` is refused`);
        }
        expect(fs.existsSync(target)).toBe(false);
        expect(fs.existsSync(path.join(scene.ws, 'copied'))).toBe(false);
        expect(fs.readFileSync(SECRET, 'utf8')).toBe('top secret'); // fs/remove did not run
        // Controls: with a sandbox (workspace-write reads everything) under the floor, and without the floor.
        const sandbox = workspaceWrite(scene.ws);
        const boxed = await floor.request('fs/readFile', { ...read, sandbox });
        expect(Buffer.from(boxed.result!.dataBase64 as string, 'base64').toString()).toBe('top secret');
        expect((await floor.request('fs/writeFile', { path: uri(target), dataBase64: b64('x'), sandbox })).error).toBeUndefined();
        expect(fs.readFileSync(target, 'utf8')).toBe('x');
        expect((await floor.request('fs/open', { handleId: 'h', path: uri(SECRET), sandbox })).result).toEqual({ handleId: 'h' });
        const unboxed = await plain.request('fs/readFile', read);
        expect(Buffer.from(unboxed.result!.dataBase64 as string, 'base64').toString()).toBe('top secret');
      } finally {
        await floor.close();
        await plain.close();
      }
    });

    it('methods that cannot carry a sandbox are refused and not advertised; discoverV2 needs one; without the floor all answer', async () => {
      const floor = await client(['--require-sandbox']);
      const plain = await client([]);
      try {
        for (const c of [floor, plain]) fs.writeFileSync(path.join(c.home, 'config.toml'), 'model = "m"\n');
        const calls = [
          ['fs/watchMissing', { watchId: 1, missing: [uri(path.join(scene.ws, 'not-yet'))] }, /poll fs\/getMetadata with a `sandbox` instead/],
          ['environmentConfig/read', { cwd: uri(scene.ws), configPaths: [['model']], requirementsPaths: [] }, /read \$CODEX_HOME\/config.toml with fs\/readFile and a `sandbox` instead/],
          ['capabilityRoots/discoverV1', { roots: [{ id: 'r', path: uri(scene.out) }] }, /use capabilities\/discoverV2 with a `sandbox` instead/],
        ] as const;
        for (const [method, params, instead] of calls) {
          const e = await floor.request(method, params);
          expect(e.error?.code, method).toBe(-32600);
          expect(e.error?.message).toMatch(new RegExp(`^${method.replace('/', '\\/')} reads this server's file system outside any sandbox and is refused: `));
          expect(e.error?.message).toMatch(FLOOR);
          expect(e.error?.message).toMatch(instead);
          expect((await plain.request(method, params)).error, method).toBeUndefined();
        }
        expect(JSON.stringify((await plain.request('environmentConfig/read', calls[1][1])).result)).toContain('model');
        // No fs/missingChanged can come for a refused watch.
        fs.mkdirSync(path.join(scene.ws, 'not-yet'));
        await plain.waitFor(() => plain.notifications.find((m) => m.method === 'fs/missingChanged'), 'the control watch firing');
        expect(floor.notifications.filter((m) => m.method === 'fs/missingChanged')).toEqual([]);
        const caps_ = async (c: Client) => (await c.request('environment/info', undefined)).result!.capabilities as Record<string, boolean>;
        expect(await caps_(floor)).toMatchObject({ fsWatchMissing: false, environmentConfigRead: false, capabilityDiscoveryV2: true });
        expect(await caps_(plain)).toMatchObject({ fsWatchMissing: true, environmentConfigRead: true });
        const d = await floor.request('capabilities/discoverV2', { cwd: uri(scene.ws) });
        expect(d.error?.message).toMatch(/^capabilities\/discoverV2 without a `sandbox` is refused/);
        expect((await floor.request('capabilities/discoverV2', { cwd: uri(scene.ws), sandbox: workspaceWrite(scene.ws) })).result).toBeDefined();
      } finally {
        await floor.close();
        await plain.close();
      }
    });

    it('an unauthenticated ws listener always has the floor: an unsandboxed start does not run, a sandboxed one does', async () => {
      const srv = await startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', '--ws-dangerously-allow-unauthenticated']);
      try {
        const bare = markedStart();
        const refused = await wsAttempt(srv.url, {}, bare.params);
        expect(refused).toMatchObject({ initialized: 'string', started: { code: -32602 } });
        expect((refused as { started: { message: string } }).started.message).toMatch(FLOOR);
        const boxed = markedStart(workspaceWrite(scene.ws));
        expect(await wsAttempt(srv.url, {}, boxed.params)).toEqual({ initialized: 'string', started: 'closed' });
        expect(fs.readFileSync(boxed.marker, 'utf8')).toBe('ran\n');
        expect(fs.existsSync(bare.marker)).toBe(false);
        expect(srv.stderr()).toMatch(/requests without one are refused: --require-sandbox is on/);
      } finally {
        await srv.stop();
      }
    });
  },
);
