/**
 * network.unixSockets: which unix sockets a command may connect to by path.
 *
 * What this kernel can enforce is whether the command may create unix sockets at all (seccomp).
 * Which socket a connect() reaches cannot be checked: seccomp cannot read the path, a read-only
 * mount does not stop connect() on a socket inode, and Landlock (ABI <= 7) has no unix-connect
 * right. So: 'all' runs as asked; an allow list is refused unless degraded, and with degraded the
 * report says that any visible socket is connectable (and this test shows that it is).
 *
 * Oracle from outside: a host listener counts what reached it.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { eventually, makeScene, py, type Scene } from '../helpers/sandbox';

const CONNECT = [
  'import socket, sys, errno',
  'out = []',
  'for p in sys.argv[1:]:',
  '    try:',
  '        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)',
  '        s.connect(p); s.sendall(b"hi"); s.close(); out.append("ok")',
  '    except OSError as e:',
  '        out.append(errno.errorcode.get(e.errno, str(e.errno)))',
  'try:',
  '    socket.socket(socket.AF_INET, socket.SOCK_STREAM); out.append("inet-ok")',
  'except OSError as e:',
  '    out.append("inet-" + errno.errorcode.get(e.errno, str(e.errno)))',
  'print(" ".join(out))',
].join('\n');

interface Listener {
  path: string;
  got: () => string;
  close: () => Promise<void>;
}

async function listen(p: string): Promise<Listener> {
  let data = '';
  const server = net.createServer((c) => c.on('data', (d) => (data += d.toString())));
  await new Promise<void>((res) => server.listen(p, res));
  fs.chmodSync(p, 0o777); // the unprivileged pass connects as another uid
  return { path: p, got: () => data, close: () => new Promise((res) => server.close(() => res())) };
}

describe.runIf(caps.linux && caps.python)('network.unixSockets', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    let allowed: Listener;
    let other: Listener;
    const pol = (network: SandboxPolicy['network'], degraded = false): SandboxPolicy => {
      const p = modePolicy(mode, { filesystem: { write: [scene.ws] }, network });
      return degraded ? { ...p, degraded: true } : p;
    };
    beforeEach(async () => {
      scene = makeScene(`unix-${mode}`);
      allowed = await listen(path.join(scene.ws, 'allowed.sock'));
      other = await listen(path.join(scene.out, 'other.sock'));
    });
    afterEach(async () => {
      await allowed.close();
      await other.close();
      scene.cleanup();
    });

    it.skipIf(skip)('default: no unix socket is reachable (and the listeners get nothing)', async () => {
      const r = await py(CONNECT, [allowed.path], { cwd: scene.ws, policy: pol('none') });
      expect(r.stdout.trim()).toBe('EPERM inet-EPERM');
      expect(allowed.got()).toBe('');
    });

    it.skipIf(skip)('an allow list is refused unless degraded, with a clear code; nothing runs', async () => {
      const e = await py(CONNECT, [allowed.path], { cwd: scene.ws, policy: { ...pol({ unixSockets: [allowed.path] }), degraded: false } }).catch((x: unknown) => x);
      expect(e).toMatchObject({ name: 'SandboxError', code: 'ENETWORK_NOT_ENFORCEABLE' });
      expect((e as Error).message).toContain('any pathname unix socket the command can see is connectable');
      expect(allowed.got()).toBe('');
    });

    it.skipIf(skip)('degraded: the listed socket works, and the report says any visible socket does (it does)', async () => {
      const r = await py(CONNECT, [allowed.path, other.path], { cwd: scene.ws, policy: pol({ unixSockets: [allowed.path] }, true) });
      expect(r.stdout.trim()).toBe('ok ok inet-EPERM');
      expect(await eventually(() => allowed.got() === 'hi' && other.got() === 'hi')).toBe(true);
      expect(r.enforcement.gaps.join('\n')).toContain(`any pathname unix socket the command can see is connectable, not only ${allowed.path}`);
      expect(r.enforcement.guarantees.network).toBe('partial');
    });

    it.skipIf(skip)("'all': unix sockets are reachable as asked, other families stay blocked", async () => {
      const r = await py(CONNECT, [allowed.path], { cwd: scene.ws, policy: pol({ unixSockets: 'all' }, mode === 'landlock') });
      expect(r.stdout.trim()).toBe('ok inet-EPERM');
      expect(await eventually(() => allowed.got() === 'hi')).toBe(true);
      expect(r.enforcement.mechanisms.unixSockets).toBe('all');
      if (mode === 'isolated') expect(r.enforcement.guarantees.network).toBe('enforced');
    });
  });
});
