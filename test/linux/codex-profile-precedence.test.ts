/**
 * Two Codex permission profiles that Codex runs, run here with Codex's semantics, through
 * prepareExecRequest + spawnPrepared (the exec-server's path), in both Linux modes:
 *
 * - write and deny on one path: Codex orders equally specific entries deny > write > read and
 *   runs; the path is denied (neither writable nor readable). Checked from outside: the file the
 *   command tried to write there does not exist and the secret is unchanged, while its write in
 *   the workspace landed. Control: the same profile without the deny writes there.
 * - a managed network with an `allowUnixSockets` path: Codex on Linux runs and keeps AF_UNIX
 *   refused (only `dangerouslyAllowAllUnixSockets` lifts that). The listener at that path gets
 *   nothing and the report says the list was not granted. Control: the all-sockets flag connects.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { spawnPrepared } from '../../lib/index';
import { pathToFileUri } from '../../lib/permissions';
import { prepareExecRequest, type ExecParams, type PreparedExecRequest } from '../../lib/prepare';
import { caps, MODES } from '../helpers/capabilities';
import { eventually, makeScene, PYTHON } from '../helpers/sandbox';

const scene = makeScene('codex-prec');
afterAll(() => scene.cleanup());

const at = (p: string) => ({ type: 'path', path: pathToFileUri(p) });
const special = (kind: string) => ({ type: 'special', value: { kind } });

function params(mode: string, argv: string[], entries: object[], extra: Partial<ExecParams> = {}): ExecParams {
  return {
    processId: `p-${mode}`,
    argv,
    cwd: pathToFileUri(scene.ws),
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    pipeStdin: false,
    sandbox: {
      permissions: { type: 'managed', file_system: { type: 'restricted', entries: [{ path: special('root'), access: 'read' }, { path: special('project_roots'), access: 'write' }, ...entries] }, network: 'restricted' },
      cwd: pathToFileUri(scene.ws),
      workspaceRoots: [pathToFileUri(scene.ws)],
      windowsSandboxLevel: 'disabled',
      // Codex's own switch to Landlock-only: our Landlock mode.
      useLegacyLandlock: mode === 'landlock',
    },
    ...extra,
  } as ExecParams;
}

async function runPrepared(p: PreparedExecRequest) {
  const child = spawnPrepared(p);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr?.on('data', (b: Buffer) => (stderr += b.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('close', (c: number | null) => resolve(c)));
  return { code, stdout, stderr, enforcement: child.enforcement };
}

for (const m of MODES) {
  // Landlock mode runs only with degraded (what it cannot hold is then listed).
  const runtime = { degraded: m.name === 'landlock' };
  describe.skipIf(m.skip)(`${m.name} mode: Codex profiles Codex runs${m.skip ? ` (skipped: ${m.skip})` : ''}`, () => {
    it('write and deny on one path: deny wins, the command runs, its write and read there are refused (checked outside)', async () => {
      const out = path.join(scene.out, `both-${m.name}`);
      fs.mkdirSync(out);
      fs.writeFileSync(path.join(out, 'secret.txt'), 'top secret');
      const script = [
        `(echo new > ${out}/new) 2>/dev/null && echo out-written || echo out-refused`,
        `cat ${out}/secret.txt 2>/dev/null || echo read-refused`,
        `echo ok > ${scene.ws}/ok-${m.name} && echo ws-written`,
      ].join('; ');
      const prepared = await prepareExecRequest(params(m.name, ['/bin/sh', '-c', script], [{ path: at(out), access: 'write' }, { path: at(out), access: 'deny' }]), runtime);
      expect(prepared.rules?.writeRoots).not.toContain(out);
      expect(prepared.rules?.denyRead).toContain(out);
      const r = await runPrepared(prepared);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe('out-refused\nread-refused\nws-written\n');
      expect(fs.existsSync(path.join(out, 'new'))).toBe(false);
      expect(fs.readFileSync(path.join(out, 'secret.txt'), 'utf8')).toBe('top secret');
      expect(fs.readFileSync(path.join(scene.ws, `ok-${m.name}`), 'utf8')).toBe('ok\n');
      // Control: without the deny the same write lands (the refusal above is the deny's).
      const ctl = await runPrepared(await prepareExecRequest(params(m.name, ['/bin/sh', '-c', script], [{ path: at(out), access: 'write' }]), runtime));
      expect(ctl.stdout).toBe('out-written\ntop secretws-written\n');
      expect(fs.readFileSync(path.join(out, 'new'), 'utf8')).toBe('new\n');
    });

    it.skipIf(!caps.python)('a managed network with an allowUnixSockets path: runs, AF_UNIX stays refused, the report says so; the all-sockets flag connects', async () => {
      const sock = path.join(scene.ws, `agent-${m.name}.sock`);
      let got = '';
      const server = net.createServer((c) => c.on('data', (d) => (got += d.toString())));
      await new Promise<void>((res) => server.listen(sock, res));
      fs.chmodSync(sock, 0o777);
      const connect = [
        'import socket, errno, sys',
        'try:',
        '    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1]); s.sendall(b"hi"); s.close(); print("connected")',
        'except OSError as e:',
        '    print(errno.errorcode.get(e.errno, str(e.errno)))',
      ].join('\n');
      const managed = (mn: object) => params(m.name, [PYTHON, '-c', connect, sock], [], { managedNetwork: { loopbackPorts: [], allowLocalBinding: false, ...mn } } as Partial<ExecParams>);
      try {
        const listed = await prepareExecRequest(managed({ allowUnixSockets: [sock], dangerouslyAllowAllUnixSockets: false }), runtime);
        expect(listed.rules?.network).toEqual({ kind: 'none', unixSocketsRefused: [sock] });
        const r = await runPrepared(listed);
        expect(r.code, r.stderr).toBe(0);
        expect(r.stdout).toBe('EPERM\n');
        expect(r.enforcement.mechanisms.unixSockets).toBe(`refused (asked: ${sock}; a managed network keeps AF_UNIX sockets refused, as Codex on Linux)`);
        expect(got).toBe('');
        // Positive control: Codex's all-sockets flag lets the same command reach the listener.
        const all = await runPrepared(await prepareExecRequest(managed({ allowUnixSockets: [], dangerouslyAllowAllUnixSockets: true }), runtime));
        expect(all.stdout).toBe('connected\n');
        expect(await eventually(() => got === 'hi')).toBe(true);
      } finally {
        await new Promise<void>((res) => server.close(() => res()));
      }
    });
  });
}
