/**
 * process-sandbox/srt as a library: the subpath export (CJS and ESM, typed), SandboxManager driven
 * as srt's users drive it (initialize, wrapWithSandbox run with spawn({ shell: true }), annotate),
 * side by side with the real srt's SandboxManager, and spawnSandboxed (in-process). Outcomes are
 * checked from outside: the host file, the loopback listener.
 */
import { spawn as cpSpawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type * as net from 'node:net';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probe } from '../../lib/index';
import { SandboxManager, spawnSandboxed } from '../../lib/srt/index';
import { makeScene, type Scene } from '../helpers/sandbox';

const ROOT = path.resolve(__dirname, '..', '..');
const DRIVER = path.join(ROOT, 'test', 'fixtures', 'srt-driver.mjs');
const SRT_CLI = path.join(ROOT, 'node_modules', '@anthropic-ai', 'sandbox-runtime', 'dist', 'cli.js');
const SYS_PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';

const report = process.platform === 'linux' ? probe() : null;
const oursMissing = report?.defaultMode === 'isolated' ? null : `isolated mode is unavailable (default mode ${report?.defaultMode})`;
function srtMissing(): string | null {
  if (!fs.existsSync(SRT_CLI)) return 'the pinned @anthropic-ai/sandbox-runtime is not installed';
  const tools = ['bwrap', 'socat', 'rg', 'curl'].filter((t) => spawnSync('/bin/sh', ['-c', `command -v ${t}`]).status !== 0);
  return tools.length ? `missing ${tools.join(', ')} (apt-get install -y --no-install-recommends bubblewrap socat ripgrep curl)` : null;
}
const srtWhy = oursMissing ?? srtMissing();
if (oursMissing) console.warn(`SKIPPING srt SandboxManager tests: ${oursMissing}`);
else if (srtWhy) console.warn(`SKIPPING the side-by-side SandboxManager test: ${srtWhy}`);

const base = (over: { allowWrite?: string[]; allowedDomains?: string[] } = {}) => ({
  network: { allowedDomains: over.allowedDomains ?? [], deniedDomains: [] },
  filesystem: { denyRead: [], allowWrite: over.allowWrite ?? [], denyWrite: [] },
});

describe('the process-sandbox/srt export', () => {
  it('package.json exports ./srt for import and require, with types, and the build has them', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    expect(pkg.exports['./srt']).toEqual({
      import: { types: './dist/srt/index.d.mts', default: './dist/srt/index.mjs' },
      require: { types: './dist/srt/index.d.ts', default: './dist/srt/index.js' },
    });
    for (const f of ['index.js', 'index.mjs', 'index.d.ts', 'index.d.mts']) expect(fs.existsSync(path.join(ROOT, 'dist', 'srt', f)), f).toBe(true);
    // Resolved by name, as a user's code does (the package resolves itself through "exports").
    const cjs = spawnSync(process.execPath, ['-e', "const m = require('process-sandbox/srt'); console.log(typeof m.SandboxManager.wrapWithSandbox, typeof m.spawnSandboxed)"], { cwd: ROOT, encoding: 'utf8' });
    expect(cjs.stdout.trim(), cjs.stderr).toBe('function function');
    const esm = spawnSync(process.execPath, ['--input-type=module', '-e', "import { SandboxManager, spawnSandboxed } from 'process-sandbox/srt'; console.log(typeof SandboxManager.initialize, typeof spawnSandboxed)"], { cwd: ROOT, encoding: 'utf8' });
    expect(esm.stdout.trim(), esm.stderr).toBe('function function');
  });

  it('the CLI lists srt and prints its usage', () => {
    const cli = path.join(ROOT, 'dist', 'cli.js');
    const top = spawnSync(process.execPath, [cli, '--help'], { encoding: 'utf8' });
    expect(top.stdout).toMatch(/^  srt +run a command under sandbox-runtime \(srt\) settings/m);
    for (const args of [['srt', '--help'], ['help', 'srt']]) {
      const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' });
      expect(r.status, args.join(' ')).toBe(0);
      expect(r.stdout).toMatch(/^Usage: process-sandbox srt \[options\] \[command\.\.\.\]/);
    }
    const none = spawnSync(process.execPath, [cli, 'srt', '--settings', '/nonexistent-srt.json'], { encoding: 'utf8' });
    expect(none.status).toBe(1);
    expect(none.stderr).toMatch(/^Error: \/nonexistent-srt\.json does not exist\./);
  });

  it('wrapWithSandbox before initialize, and settings we cannot enforce, are refused by name', async () => {
    await expect(SandboxManager.wrapWithSandbox('true')).rejects.toThrow(/not initialized/);
    await expect(SandboxManager.initialize({ ...base(), filesystem: { ...base().filesystem, allowGitConfig: true } })).rejects.toThrow(/filesystem\.allowGitConfig/);
    expect(SandboxManager.isSandboxingEnabled()).toBe(false);
  });
});

describe.skipIf(oursMissing !== null)(`SandboxManager (ours)${oursMissing ? ` (SKIPPED: ${oursMissing})` : ''}`, () => {
  let scene: Scene;
  let server: http.Server;
  let port: number;
  const hits: string[] = [];
  beforeAll(async () => {
    scene = makeScene('srt-mgr');
    server = http.createServer((req, res) => {
      hits.push(req.url ?? '');
      res.end('ok');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await SandboxManager.reset();
    await new Promise((r) => server?.close(r));
    scene?.cleanup();
  });

  it('spawnSandboxed runs in-process under srt settings: writes, refusals and proxy denials are real, and land in the violation store', async () => {
    await SandboxManager.initialize(base({ allowWrite: [scene.ws], allowedDomains: [`127.0.0.1:${port}`] }));
    expect(SandboxManager.isSandboxingEnabled()).toBe(true);
    expect(SandboxManager.getProxyPort()).toBeGreaterThan(0);
    const cmd = `echo in > ${scene.ws}/sp.txt; echo out > ${scene.out}/sp.txt; curl -s -m 20 -o /dev/null --noproxy '' -x "$HTTP_PROXY" http://127.0.0.1:${port}/sp-ok; curl -s -m 20 -o /dev/null --noproxy '' -x "$HTTP_PROXY" http://127.0.0.1:${port + 1 > 65535 ? port - 1 : port + 1}/sp-no; exit 3`;
    const p = await spawnSandboxed(cmd, { cwd: scene.ws, commandId: 'sp-1' });
    expect(p.pid).toBeGreaterThan(0);
    p.stdout!.resume();
    p.stderr!.resume();
    const r = await p.wait();
    expect(r).toEqual({ exitCode: 3, timedOut: false });
    expect(fs.readFileSync(path.join(scene.ws, 'sp.txt'), 'utf8')).toBe('in\n');
    expect(fs.existsSync(path.join(scene.out, 'sp.txt'))).toBe(false);
    expect(hits).toContain('/sp-ok');
    expect(hits).not.toContain('/sp-no');
    const v = SandboxManager.getSandboxViolationStore().getViolationsForCommand('sp-1');
    expect(v.map((x) => x.line)).toContainEqual(expect.stringMatching(/^deny network-outbound 127\.0\.0\.1:\d+ \(/));
    expect(SandboxManager.annotateStderrWithSandboxFailures('sp-1', 'err')).toMatch(/^err\n<sandbox_violations>\ndeny network-outbound 127\.0\.0\.1:\d+ .*\n<\/sandbox_violations>$/);
    // ignoreViolations hides what it names, and only that.
    SandboxManager.updateConfig({ ...base({ allowWrite: [scene.ws] }), ignoreViolations: { '*': ['127.0.0.1'] } });
    const q = await spawnSandboxed(`curl -s -m 20 -o /dev/null --noproxy '' -x "$HTTP_PROXY" http://127.0.0.1:${port}/ignored`, { cwd: scene.ws, commandId: 'sp-2' });
    q.stdout!.resume();
    q.stderr!.resume();
    await q.wait();
    expect(hits).not.toContain('/ignored');
    expect(SandboxManager.getSandboxViolationStore().getViolationsForCommand('sp-2')).toEqual([]);
  });

  it("spawnSandboxed refuses a timeoutMs past Node's timer limit before anything runs; the limit itself is taken", async () => {
    await SandboxManager.initialize(base({ allowWrite: [scene.ws] }));
    const marker = path.join(scene.ws, 'timer-marker');
    for (const timeoutMs of [2 ** 31, 2 ** 31 + 1000, 0]) {
      await expect(spawnSandboxed(`touch ${marker}`, { cwd: scene.ws, timeoutMs })).rejects.toMatchObject({
        code: 'EINVALID_ARGUMENT',
        message: expect.stringMatching(/^timeoutMs must be a positive number of milliseconds, at most 2147483647 \(Node's timer limit\), got \d+$/),
      });
      expect(fs.existsSync(marker)).toBe(false);
    }
    const p = await spawnSandboxed(`sleep 1; touch ${marker}`, { cwd: scene.ws, timeoutMs: 2 ** 31 - 1 });
    p.stdout!.resume();
    p.stderr!.resume();
    expect(await p.wait()).toEqual({ exitCode: 0, timedOut: false });
    expect(fs.existsSync(marker)).toBe(true);
  });

  it('spawnSandboxed timeoutMs stops the tree and says so', async () => {
    await SandboxManager.initialize(base());
    const p = await spawnSandboxed('sleep 600', { timeoutMs: 200 });
    p.stdout!.resume();
    p.stderr!.resume();
    const r = await p.wait();
    expect(r.timedOut).toBe(true);
    expect(r.exitCode).toBe(137);
  });

  it('wrapWithSandbox quotes the command for the caller\'s shell: quotes, $, ;, newlines reach the sandboxed shell as written', async () => {
    await SandboxManager.initialize(base({ allowWrite: [scene.ws] }));
    const tricky = `printf '%s\\n' "it's" '$HOME' "a;b" > ${scene.ws}/q.txt\necho second >> ${scene.ws}/q.txt`;
    const wrapped = await SandboxManager.wrapWithSandbox(tricky);
    const code = await new Promise((resolve) => cpSpawn(wrapped, { shell: true, stdio: 'ignore', env: { PATH: SYS_PATH, HOME: '/nonexistent' } }).on('close', resolve));
    expect(code).toBe(0);
    expect(fs.readFileSync(path.join(scene.ws, 'q.txt'), 'utf8')).toBe("it's\n$HOME\na;b\nsecond\n");
  });

  it('a FIFO put in place of a wrap\'s violations file neither hangs the wrapped CLI nor the host: the command does not run', async () => {
    await SandboxManager.initialize(base({ allowWrite: [scene.ws] }));
    const wrapped = await SandboxManager.wrapWithSandbox(`echo ran > ${scene.ws}/fifo-run.txt`);
    const file = /'--violations-file' '([^']+)'/.exec(wrapped)![1]!;
    fs.rmSync(file);
    expect(spawnSync('mkfifo', [file]).status).toBe(0);
    const r = spawnSync(wrapped, { shell: true, encoding: 'utf8', env: { PATH: SYS_PATH }, timeout: 30_000 });
    expect(r.error).toBeUndefined();
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/not a regular file|cannot be opened \(ENXIO\)/);
    expect(fs.existsSync(path.join(scene.ws, 'fifo-run.txt'))).toBe(false);
    // The host's own read of it returns (no reader would otherwise block this event loop).
    expect(SandboxManager.annotateStderrWithSandboxFailures(wrapped, 'e')).toBe('e');
  });

  it('wrapWithSandbox: customConfig widens one command only, and its refusals are keyed by commandId', async () => {
    await SandboxManager.initialize(base({ allowedDomains: [`127.0.0.1:${port}`] }));
    const extra = path.join(scene.root, 'extra');
    fs.mkdirSync(extra, { recursive: true });
    const run = (cmd: string) => new Promise((resolve) => cpSpawn(cmd, { shell: true, stdio: 'ignore', env: { PATH: SYS_PATH } }).on('close', resolve));
    const denied = `curl -s -m 20 -o /dev/null --noproxy '' -x "$HTTP_PROXY" http://127.0.0.3:${port}/cid`;
    const w1 = await SandboxManager.wrapWithSandbox(`echo one > ${extra}/one.txt; ${denied}`, undefined, { filesystem: { denyRead: [], allowWrite: [extra], denyWrite: [] } }, undefined, { commandId: 'cid-1' });
    const w2 = await SandboxManager.wrapWithSandbox(`echo two > ${extra}/two.txt`, undefined, undefined, undefined, { commandId: 'cid-2' });
    await run(w1);
    await run(w2);
    expect(fs.readFileSync(path.join(extra, 'one.txt'), 'utf8')).toBe('one\n');
    expect(fs.existsSync(path.join(extra, 'two.txt'))).toBe(false);
    SandboxManager.cleanupAfterCommand();
    expect(SandboxManager.getViolationsForCommand('cid-1').map((v) => v.line)).toEqual([expect.stringMatching(/^deny network-outbound 127\.0\.0\.3:\d+ /)]);
    expect(SandboxManager.getViolationsForCommand('cid-2')).toEqual([]);
  });

  it('a wrapped command fails closed once its manager was reset (its violations file is gone): nothing runs', async () => {
    await SandboxManager.initialize(base({ allowWrite: [scene.ws] }));
    const wrapped = await SandboxManager.wrapWithSandbox(`echo ran > ${scene.ws}/after-reset.txt`);
    await SandboxManager.reset();
    const r = spawnSync(wrapped, { shell: true, encoding: 'utf8', env: { PATH: SYS_PATH } });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^Error: the violations file/);
    expect(fs.existsSync(path.join(scene.ws, 'after-reset.txt'))).toBe(false);
  });
});

describe.skipIf(srtWhy !== null)(`SandboxManager side by side with srt's (wrapWithSandbox + spawn({ shell: true }))${srtWhy ? ` (SKIPPED: ${srtWhy})` : ''}`, () => {
  let scene: Scene;
  let server: http.Server;
  let port: number;
  const hits: string[] = [];
  beforeAll(async () => {
    scene = makeScene('srt-mgr2');
    server = http.createServer((req, res) => {
      hits.push(req.url ?? '');
      res.end('ok');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((r) => server?.close(r));
    scene?.cleanup();
  });

  function drive(impl: 'srt' | 'ours', cfg: object, command: string): Promise<{ code: number; stderr: string; annotated: string; proxyPort: number }> {
    return new Promise((resolve, reject) => {
      const c = cpSpawn(process.execPath, [DRIVER, impl, JSON.stringify(cfg), command], { cwd: scene.ws, env: { PATH: SYS_PATH, HOME: scene.root }, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      c.stdout.on('data', (d) => (out += d));
      c.stderr.on('data', (d) => (err += d));
      const t = setTimeout(() => c.kill('SIGKILL'), 50_000);
      c.on('close', () => {
        clearTimeout(t);
        try {
          resolve(JSON.parse(out.trim().split('\n').pop()!));
        } catch {
          reject(new Error(`${impl} driver: ${out} ${err}`));
        }
      });
    });
  }

  it('the same config and command: the same files, the same listener hits, a <sandbox_violations> block for the refused request', async () => {
    for (const impl of ['srt', 'ours'] as const) {
      const cfg = base({ allowWrite: ['.'], allowedDomains: [`127.0.0.1:${port}`] });
      const cmd = `echo ${impl} > lib-${impl}.txt; echo x > ${scene.out}/lib-${impl}.txt; curl -s -m 20 -o /dev/null --noproxy '' -x "$HTTP_PROXY" http://127.0.0.1:${port}/lib-${impl}; curl -s -m 20 -o /dev/null --noproxy '' -x "$HTTP_PROXY" http://127.0.0.2:${port}/lib-no-${impl}; exit 5`;
      const r = await drive(impl, cfg, cmd);
      expect(r.code, `${impl}: ${r.stderr}`).toBe(5);
      expect(fs.readFileSync(path.join(scene.ws, `lib-${impl}.txt`), 'utf8')).toBe(`${impl}\n`);
      expect(fs.existsSync(path.join(scene.out, `lib-${impl}.txt`)), impl).toBe(false);
      expect(hits, impl).toContain(`/lib-${impl}`);
      expect(hits, impl).not.toContain(`/lib-no-${impl}`);
      expect(r.proxyPort, impl).toBeGreaterThan(0);
      expect(r.annotated, impl).toMatch(/<sandbox_violations>\n(.*\n)*deny network-outbound 127\.0\.0\.2:\d+.*\n(.*\n)*<\/sandbox_violations>$/);
    }
  });
});
