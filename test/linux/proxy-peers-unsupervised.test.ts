/**
 * Landlock mode WITHOUT the connect supervisor (simulated: the addon's probe is made to report it
 * missing, so the spawn really runs with Landlock's port rule and the command connects itself).
 * The host listener then admits by uid only: another uid gets nothing, the same uid is the listed
 * gap, and credential rules are refused before anything runs (their secrets would be open to
 * every process of this uid). test/linux/proxy-peers.test.ts covers the supervised case.
 */
import * as http from 'node:http';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

import { loadLinuxNative } from '../../lib/native';
import { modePolicy } from '../helpers/capabilities';
import { landlockProxyMissing, otherUser, runHost, runsOk } from '../helpers/host';
import { BASE_ENV, eventually, makeScene, type Scene } from '../helpers/sandbox';
import { listenOnLoopback } from '../network/helpers';

const skip = landlockProxyMissing() ?? (!runsOk('curl') ? 'no curl' : undefined);
// eslint-disable-next-line no-console
if (skip) console.warn(`[proxy-peers-unsupervised] SKIPPING: ${skip}`);

const otherUid = otherUser();
// eslint-disable-next-line no-console
if (!skip && otherUid === null) console.warn('[proxy-peers-unsupervised] SKIPPING the other-uid case: not root, no other uid to connect as');

function curlVia(proxyPort: number, url: string, as?: { uid: number; gid: number }): Promise<{ code: number | null; out: string }> {
  return runHost('curl', ['-sS', '-m', '20', '-x', `http://127.0.0.1:${proxyPort}`, url], as);
}

describe.skipIf(skip)('Landlock mode without the connect supervisor: the proxy admits by uid', () => {
  const native = loadLinuxNative();
  const realProbe = native.probe;
  let lib: typeof import('../../lib/index');
  let network: typeof import('../../lib/network');
  let scene: Scene;
  const hits: string[] = [];
  let origin: { port: number; close(): Promise<void> };

  beforeAll(async () => {
    // A backend probes once, on first use (the helpers' import made one already): the library
    // is loaded afresh after the addon's probe is patched, so that its backend sees no supervisor.
    native.probe = () => ({ ...realProbe.call(native), connectSupervisor: -95 });
    vi.resetModules();
    lib = await import('../../lib/index');
    network = await import('../../lib/network');
    scene = makeScene('proxy-peers-unsup');
    origin = await listenOnLoopback(
      http.createServer((q, r) => {
        hits.push(q.url ?? '');
        r.end('hi');
      }),
    );
  });

  afterAll(async () => {
    native.probe = realProbe;
    await origin?.close();
    scene?.cleanup();
  });

  const policy = () => modePolicy('landlock', { filesystem: { write: [scene.ws] }, network: { proxy: { allow: ['127.0.0.1'], allowLocal: true } } });

  it('the sandbox is served; another uid gets nothing; the same uid is served (the listed gap)', async () => {
    const p = lib.spawn('/bin/sh', ['-c', `echo "$HTTP_PROXY"; curl -s -m 10 http://127.0.0.1:${origin.port}/sandbox; echo; read x`], {
      cwd: scene.ws,
      env: BASE_ENV,
      policy: policy(),
      stdio: 'pipe',
    });
    let out = '';
    p.stdout!.on('data', (d: Buffer) => (out += d));
    try {
      expect(await eventually(() => out.split('\n').length >= 3, 20_000), out).toBe(true);
      // Really unsupervised: the port rule, and the gap listed.
      expect(p.enforcement.mechanisms.connectSupervisor).toBeUndefined();
      expect(p.enforcement.gaps.join('\n')).toMatch(/tells the sandbox's connections apart only by uid/);
      const proxyPort = Number(/^http:\/\/127\.0\.0\.1:(\d+)$/m.exec(out)?.[1]);
      expect(out.split('\n')[1], out).toBe('hi');
      if (otherUid) {
        const r = await curlVia(proxyPort, `http://127.0.0.1:${origin.port}/other-uid`, otherUid);
        expect(r.code, r.out).not.toBe(0);
        expect(r.out).not.toContain('hi');
      }
      const same = await curlVia(proxyPort, `http://127.0.0.1:${origin.port}/same-uid`);
      expect(same.out).toBe('hi');
      expect(hits).toEqual(['/sandbox', '/same-uid']);
    } finally {
      p.stdin!.end();
      p.kill('SIGKILL');
    }
  }, 60_000);

  it('credential rules are refused before anything runs (ENETWORK_NOT_ENFORCEABLE)', async () => {
    const ca = network.InterceptionCa.create({ dir: scene.out });
    const proxy = network.ManagedProxy.create({
      policy: { allow: ['127.0.0.1'], allowLocal: true },
      interception: { ca, credentials: [{ host: 'secure.test', header: 'authorization', placeholder: 'PSB_UNSUP_PLACEHOLDER', value: 'secret' }] },
    });
    try {
      const before = hits.length;
      await expect(
        lib.run('/bin/sh', ['-c', `curl -s -m 10 http://127.0.0.1:${origin.port}/credentials`], { cwd: scene.ws, env: BASE_ENV, policy: policy(), proxy: { instance: proxy } }),
      ).rejects.toMatchObject({ name: 'SandboxError', code: 'ENETWORK_NOT_ENFORCEABLE', message: expect.stringMatching(/credential rules .* need the connect supervisor/) });
      expect(hits.length).toBe(before);
      // Without credential rules the same run works.
      const r = await lib.run('/bin/sh', ['-c', `curl -s -m 10 http://127.0.0.1:${origin.port}/no-credentials`], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
      expect(r.stdout).toBe('hi');
    } finally {
      await proxy.close();
      ca.dispose();
    }
  }, 60_000);
});
