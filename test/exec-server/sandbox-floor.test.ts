/**
 * The sandbox floor (`--require-sandbox`, implied by `--ws-dangerously-allow-unauthenticated`),
 * from outside: the CLI runs as its own process, a real client drives it. The floor judges what a
 * sandbox resolves to: every spelling of "writable outside the --floor-write directories" is
 * refused with nothing started, and the target each would have written is checked not to exist
 * (the outside directory is writable by this user, and the same profile without the floor does
 * write there: the refusal is the floor's). With --floor-read, a sandbox that reads outside it
 * (`:root`, /etc) is refused. Positive controls: a workspace-write sandbox within the bound runs
 * and writes inside; a request without a sandbox runs in the default one.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { caps } from '../helpers/capabilities';
import { makeScene } from '../helpers/sandbox';
import { b64, Client, OUR_CLI, startWsServer, workspaceWrite, wsAttempt } from './client';

const scene = makeScene('exec-floor');
afterAll(() => scene.cleanup());
const uri = (p: string) => 'file://' + p;
const SECRET = path.join(scene.out, 'secret.txt'); // 'top secret', outside the workspace
const PUB = path.join(scene.root, 'pub'); // the --floor-read directory
fs.mkdirSync(PUB);
fs.writeFileSync(path.join(PUB, 'notes.txt'), 'public');
fs.symlinkSync(scene.out, path.join(scene.ws, 'link-out'));

const special = (kind: string) => ({ type: 'special', value: { kind } });
const at = (p: string) => ({ type: 'path', path: uri(p) });
function managed(entries: object[], network = 'restricted', cwd = scene.ws, roots = [scene.ws]) {
  return {
    permissions: { type: 'managed', file_system: { type: 'restricted', entries }, network },
    cwd: uri(cwd),
    workspaceRoots: roots.map(uri),
    windowsSandboxLevel: 'disabled',
  };
}

let n = 0;
/** A process/start whose command writes `target` (default: a fresh marker in the workspace). */
function markedStart(sandbox?: object, target?: string, cwd = scene.ws): { marker: string; params: Record<string, unknown> } {
  const marker = target ?? path.join(scene.ws, `ran-${process.pid}-${n}`);
  n++;
  const params = {
    processId: `p${n}`,
    argv: ['sh', '-c', `echo ran > ${marker}`],
    cwd: uri(cwd),
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
const OUTSIDE_WRITE = /is refused: its sandbox makes \S+ writable, outside the floor; .*the floor bounds writes to \S+ \(--floor-write\)/;

describe.skipIf(!caps.linux || !caps.userns)(
  `exec-server --require-sandbox: a sandbox is judged by what it resolves to${caps.userns ? '' : ' (skipped: no unprivileged user namespaces for the sandboxed controls)'}`,
  () => {
    it('every spelling of "writable outside the floor" is refused and writes nothing; a workspace-write sandbox inside runs', async () => {
      const floor = await client(['--require-sandbox', '--floor-write', scene.ws]);
      const plain = await client([]);
      const tmpTarget = `/tmp/psb-floor-${process.pid}`;
      try {
        const out = (name: string) => path.join(scene.out, `${name}-${process.pid}`);
        const cases: Array<[string, object, string]> = [
          ['unrestricted file system, network restricted', { ...managed([]), permissions: { type: 'managed', file_system: { type: 'unrestricted' }, network: 'restricted' } }, out('unrestricted')],
          [':root write', managed([{ path: special('root'), access: 'write' }]), out('root-write')],
          ['literal / write, network on', managed([{ path: special('root'), access: 'read' }, { path: at('/'), access: 'write' }], 'enabled'), out('slash')],
          ['literal / write, network restricted', managed([{ path: special('root'), access: 'read' }, { path: at('/'), access: 'write' }]), out('slash-restricted')],
          ['.. out of the workspace', managed([{ path: special('root'), access: 'read' }, { path: at(`${scene.ws}/../out`), access: 'write' }]), out('dotdot')],
          ['a symlink in the workspace to the outside', managed([{ path: special('root'), access: 'read' }, { path: at(path.join(scene.ws, 'link-out')), access: 'write' }]), path.join(scene.ws, 'link-out', `symlink-${process.pid}`)],
          ['workspace roots the client names outside the bound', managed([{ path: special('root'), access: 'read' }, { path: special('project_roots'), access: 'write' }], 'restricted', scene.out, [scene.out]), out('roots')],
          [':slash_tmp write', managed([{ path: special('root'), access: 'read' }, { path: special('project_roots'), access: 'write' }, { path: special('slash_tmp'), access: 'write' }]), tmpTarget],
        ];
        const refused: string[] = [];
        for (const [name, sandbox, target] of cases) {
          const s = markedStart(sandbox, target);
          const r = await floor.request('process/start', s.params);
          expect(r.error?.code, name).toBe(-32602);
          expect(r.error?.message, name).toMatch(/^process\/start is refused: /);
          expect(r.error?.message, name).toMatch(OUTSIDE_WRITE);
          expect(floor.events(s.params.processId as string), name).toEqual([]);
          refused.push(target);
        }
        // The other methods that take a sandbox, with the :root write spelling.
        const rootWrite = cases[1]![1];
        const viaFs = out('fs-write');
        for (const [method, params] of [
          ['fs/writeFile', { path: uri(viaFs), dataBase64: b64('x'), sandbox: rootWrite }],
          ['fs/createDirectory', { path: uri(out('fs-dir')), sandbox: rootWrite }],
          ['fs/copy', { sourcePath: uri(SECRET), destinationPath: uri(out('fs-copy')), recursive: false, sandbox: rootWrite }],
          ['fs/remove', { path: uri(SECRET), sandbox: rootWrite }],
          ['fs/open', { handleId: 'h', path: uri(out('fs-open')), mode: 'replace', sandbox: rootWrite }],
          ['capabilities/discoverV2', { cwd: uri(scene.ws), sandbox: rootWrite }],
        ] as const) {
          const e = await floor.request(method, params);
          expect(e.error?.code, method).toBe(-32602);
          expect(e.error?.message, method).toMatch(new RegExp(`^${method.replace('/', '\\/')} is refused: `));
          expect(e.error?.message, method).toMatch(OUTSIDE_WRITE);
        }
        // Controls: a workspace-write sandbox within the bound runs and writes inside; fs too.
        const boxed = markedStart(workspaceWrite(scene.ws));
        expect((await floor.request('process/start', boxed.params)).result).toMatchObject({ sandboxType: 'linuxSeccomp' });
        await floor.closed(boxed.params.processId as string);
        expect(fs.readFileSync(boxed.marker, 'utf8')).toBe('ran\n');
        const inside = path.join(scene.ws, 'fs-inside');
        expect((await floor.request('fs/writeFile', { path: uri(inside), dataBase64: b64('in'), sandbox: workspaceWrite(scene.ws) })).error).toBeUndefined();
        expect(fs.readFileSync(inside, 'utf8')).toBe('in');
        // Without the floor the same :root write profile does write outside: the outside is writable.
        const ctl = markedStart(rootWrite, out('control'));
        expect((await plain.request('process/start', ctl.params)).result).toMatchObject({ sandboxType: 'linuxSeccomp' });
        await plain.closed(ctl.params.processId as string);
        expect(fs.readFileSync(ctl.marker, 'utf8')).toBe('ran\n');
        // Checked last, after the controls finished: nothing refused ran or wrote.
        for (const t of [...refused, viaFs, out('fs-dir'), out('fs-copy'), out('fs-open')]) expect(fs.existsSync(t), t).toBe(false);
        expect(fs.readFileSync(SECRET, 'utf8')).toBe('top secret'); // fs/remove did not run
      } finally {
        fs.rmSync(tmpTarget, { force: true });
        await floor.close();
        await plain.close();
      }
    });

    it('permissions that confine nothing are refused; a request without a sandbox runs in the default one, within the bound', async () => {
      const floor = await client(['--require-sandbox', '--floor-write', scene.ws]);
      try {
        for (const permissions of [{ type: 'disabled' }, { type: 'external', network: 'enabled' }, { type: 'managed', file_system: { type: 'unrestricted' }, network: 'enabled' }]) {
          const open = markedStart({ ...workspaceWrite(scene.ws), permissions });
          const o = await floor.request('process/start', open.params);
          expect(o.error?.code, JSON.stringify(permissions)).toBe(-32602);
          expect(o.error?.message).toMatch(/with `sandbox.permissions` that confine nothing .* is refused: .*--require-sandbox/);
          expect(fs.existsSync(open.marker)).toBe(false);
        }
        // No sandbox: the default (workspace-write over the request's cwd) runs it, sandboxed.
        const bare = markedStart();
        expect((await floor.request('process/start', bare.params)).result).toMatchObject({ sandboxType: 'linuxSeccomp' });
        await floor.closed(bare.params.processId as string);
        expect(fs.readFileSync(bare.marker, 'utf8')).toBe('ran\n');
        // ... and its cwd outside the bound makes the default sandbox leave it: refused.
        const away = markedStart(undefined, path.join(scene.out, `default-away-${process.pid}`), scene.out);
        const a = await floor.request('process/start', away.params);
        expect(a.error?.message).toMatch(OUTSIDE_WRITE);
        // fs/* without a sandbox: the default over the floor's write bound.
        const viaFs = path.join(scene.ws, 'default-fs');
        expect((await floor.request('fs/writeFile', { path: uri(viaFs), dataBase64: b64('d') })).error).toBeUndefined();
        expect(fs.readFileSync(viaFs, 'utf8')).toBe('d');
        const outFs = path.join(scene.out, `default-fs-${process.pid}`);
        expect((await floor.request('fs/writeFile', { path: uri(outFs), dataBase64: b64('d') })).error).toBeDefined();
        expect(fs.existsSync(away.marker)).toBe(false);
        expect(fs.existsSync(outFs)).toBe(false);
      } finally {
        await floor.close();
      }
    });

    it('--floor-read: a sandbox reading the whole file system or outside the bound is refused (no /etc/shadow); reads inside work', async () => {
      const floor = await client(['--require-sandbox', '--floor-write', scene.ws, '--floor-read', PUB]);
      const shadow = '/etc/shadow';
      try {
        const narrow = (extra: object[]) => managed([{ path: special('minimal'), access: 'read' }, { path: special('project_roots'), access: 'write' }, ...extra]);
        const cases: Array<[string, object, RegExp]> = [
          [':root read (workspace-write)', workspaceWrite(scene.ws), /its sandbox reads the whole file system/],
          ['/etc read', narrow([{ path: at('/etc'), access: 'read' }]), /its sandbox makes \/etc readable, outside the floor/],
          ['an outside directory read', narrow([{ path: at(scene.out), access: 'read' }]), /its sandbox makes \S+\/out readable, outside the floor/],
        ];
        for (const [name, sandbox, why] of cases) {
          for (const file of [shadow, SECRET]) {
            const r = await floor.request('fs/readFile', { path: uri(file), sandbox });
            expect(r.error?.code, name).toBe(-32602);
            expect(r.error?.message, name).toMatch(why);
            expect(r.error?.message, name).toMatch(/the floor bounds reads to \S+\/pub \(--floor-read\)/);
            expect(r.result, name).toBeUndefined();
          }
          const s: Record<string, unknown> = { ...markedStart(sandbox).params, argv: ['cat', shadow] };
          const p = await floor.request('process/start', s);
          expect(p.error?.message, name).toMatch(why);
          expect(floor.events(s.processId as string)).toEqual([]);
        }
        // Controls: reads inside the bound work, with a sandbox and with the default (which then
        // reads only the platform minimum and the bound); outside files stay unreadable.
        const notes = path.join(PUB, 'notes.txt');
        const inBound = await floor.request('fs/readFile', { path: uri(notes), sandbox: narrow([{ path: at(PUB), access: 'read' }]) });
        expect(Buffer.from(inBound.result!.dataBase64 as string, 'base64').toString()).toBe('public');
        const byDefault = await floor.request('fs/readFile', { path: uri(notes) });
        expect(Buffer.from(byDefault.result!.dataBase64 as string, 'base64').toString()).toBe('public');
        const secret = await floor.request('fs/readFile', { path: uri(SECRET) });
        expect(secret.result).toBeUndefined();
        expect(secret.error).toBeDefined();
      } finally {
        await floor.close();
      }
    });

    it('the host network and host unix sockets are refused (a host socket gets no connection) unless --floor-allow-network', async () => {
      const sock = path.join(scene.out, 'host.sock');
      const conns: string[] = [];
      const host = net.createServer((c) => {
        conns.push('x');
        c.end('hi');
      });
      await new Promise<void>((r) => host.listen(sock, r));
      const floor = await client(['--require-sandbox', '--floor-write', scene.ws]);
      const open = await client(['--require-sandbox', '--floor-write', scene.ws, '--floor-allow-network']);
      try {
        const connect = { ...markedStart().params, argv: [process.execPath, '-e', `require('net').connect(${JSON.stringify(sock)}).on('data', (d) => process.stdout.write(d))`] };
        const withNet = (sandbox: object, id: string, extra: object = {}) => ({ ...connect, processId: id, sandbox, ...extra });
        const netOn = managed([{ path: special('root'), access: 'read' }, { path: special('project_roots'), access: 'write' }], 'enabled');
        const netOff = workspaceWrite(scene.ws);
        const on = await floor.request('process/start', withNet(netOn, 'on'));
        expect(on.error?.message).toMatch(/^process\/start is refused: its sandbox has the host network, which reaches every host service and unix socket; .*--floor-allow-network/);
        const all = await floor.request('process/start', withNet(netOff, 'all', { managedNetwork: { dangerouslyAllowAllUnixSockets: true } }));
        expect(all.error?.message).toMatch(/its sandbox may connect to host unix sockets/);
        expect(conns).toEqual([]);
        // Controls: with the network closed it runs and cannot connect; with the flag the host network does.
        expect((await floor.request('process/start', withNet(netOff, 'off'))).result).toMatchObject({ sandboxType: 'linuxSeccomp' });
        await floor.closed('off');
        expect(conns).toEqual([]);
        expect((await open.request('process/start', withNet(netOn, 'allowed'))).result).toMatchObject({ sandboxType: 'linuxSeccomp' });
        await open.closed('allowed');
        expect(open.output('allowed').stdout).toBe('hi');
        expect(conns).toEqual(['x']);
      } finally {
        await floor.close();
        await open.close();
        await new Promise((r) => host.close(r));
      }
    });

    it('methods that cannot carry a sandbox are refused and not advertised; without the floor all answer', async () => {
      const floor = await client(['--require-sandbox', '--floor-write', scene.ws]);
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
        expect((await floor.request('capabilities/discoverV2', { cwd: uri(scene.ws), sandbox: workspaceWrite(scene.ws) })).result).toBeDefined();
      } finally {
        await floor.close();
        await plain.close();
      }
    });

    it('an unauthenticated ws listener always has the floor: a sandbox writing outside its bound does not run, one inside does', async () => {
      const srv = await startWsServer('ours', ['--listen', 'ws://127.0.0.1:0', '--ws-dangerously-allow-unauthenticated', '--floor-write', scene.ws]);
      try {
        const wide = markedStart(managed([{ path: special('root'), access: 'write' }]), path.join(scene.out, `ws-wide-${process.pid}`));
        const refused = await wsAttempt(srv.url, {}, wide.params);
        expect(refused).toMatchObject({ initialized: 'string', started: { code: -32602 } });
        expect((refused as { started: { message: string } }).started.message).toMatch(OUTSIDE_WRITE);
        const boxed = markedStart(workspaceWrite(scene.ws));
        expect(await wsAttempt(srv.url, {}, boxed.params)).toEqual({ initialized: 'string', started: 'closed' });
        expect(fs.readFileSync(boxed.marker, 'utf8')).toBe('ran\n');
        expect(fs.existsSync(wide.marker)).toBe(false);
        expect(srv.stderr()).toMatch(/within the sandbox floor's bounds \(--require-sandbox is on\)/);
      } finally {
        await srv.stop();
      }
    });
  },
);

describe('exec-server start-up refusals: one line and a hint, exit 125, no stack trace', () => {
  /** Runs the CLI to its exit (a refusal never serves, so it exits at once; stdin is empty). */
  const start = (args: string[], cwd = '/') =>
    spawnSync(process.execPath, [OUR_CLI, 'exec-server', ...args], { cwd, input: '', encoding: 'utf8', timeout: 60_000 });

  it('each refusal is one line naming the problem, then the --help hint', async () => {
    const busy = net.createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    const port = (busy.address() as net.AddressInfo).port;
    try {
      const cases: Array<[string[], RegExp, string?]> = [
        [['--bogus'], /unknown exec-server option: --bogus/],
        [['--require-sandbox'], /bounds writes to this server's working directory, which is the file system root \(\/\); .*--floor-write <dir>/],
        [['--require-sandbox', '--floor-write', '/'], /--floor-write \/ is the file system root/],
        [['--require-sandbox', '--floor-write', scene.ws, '--default-sandbox', 'none'], /--default-sandbox none .* which the sandbox floor forbids/],
        [['--floor-write', scene.ws], /--floor-write, --floor-read and --floor-allow-network set the sandbox floor: give them with --require-sandbox/],
        [['--require-sandbox', '--floor-write', path.join(scene.root, 'missing')], /--floor-write \S+missing: ENOENT/],
        [['--default-sandbox', 'sometimes'], /--default-sandbox must be workspace-write, read-only or none/],
        [['--listen', 'ws://127.0.0.1:0'], /./],
        [['--listen', `ws://127.0.0.1:${port}`, '--ws-dangerously-allow-unauthenticated'], /EADDRINUSE/, scene.ws],
      ];
      for (const [args, why, cwd] of cases) {
        const r = start(args, cwd);
        const what = args.join(' ');
        expect(r.status, what).toBe(125);
        const lines = r.stderr.split('\n').filter((l) => l !== '' && !/Warning|--trace-warnings/.test(l));
        expect(lines, what).toHaveLength(2);
        expect(lines[0], what).toMatch(/^process-sandbox: exec-server: /);
        expect(lines[0], what).toMatch(why);
        expect(lines[1]).toBe("Try 'process-sandbox exec-server --help' for the options.");
        expect(r.stderr, what).not.toMatch(/^\s+at /m);
      }
      // Control: a floor with a bound starts (and ends with its empty stdin), exit 0. As root
      // without --floor-read it warns that reads are not bounded; with it, it does not.
      const ok = start(['--require-sandbox', '--floor-write', scene.ws]);
      expect(ok.status, ok.stderr).toBe(0);
      const warning = /warning: the sandbox floor does not bound reads \(no --floor-read\).*\/etc\/shadow/;
      if (caps.root) expect(ok.stderr).toMatch(warning);
      else expect(ok.stderr).not.toMatch(warning);
      const bounded = start(['--require-sandbox', '--floor-write', scene.ws, '--floor-read', PUB]);
      expect(bounded.status, bounded.stderr).toBe(0);
      expect(bounded.stderr).not.toMatch(warning);
    } finally {
      busy.close();
    }
  });
});
