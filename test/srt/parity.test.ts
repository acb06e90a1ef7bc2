/**
 * process-sandbox/srt against srt's own surface: every SandboxManager member srt exports is here
 * (or refused by name), spawnSandboxed's wait() comes after the output, the CLI's --version,
 * -d / SRT_DEBUG, unknown options and settings-file errors, the tool proxy settings and git over
 * ssh through the proxy, and a name /etc/hosts maps to loopback reached through a port-scoped
 * literal. Outcomes are checked from outside (marker files, listener hits).
 */
import { spawn as cpSpawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as dns from 'node:dns';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ManagedProxy, probe, SandboxError } from '../../lib/index';
import { MAX_SETTINGS_BYTES } from '../../lib/cli/srt';
import { SandboxManager, spawnSandboxed, SRT_REFUSED_CALLS } from '../../lib/srt/index';
import { makeScene, type Scene } from '../helpers/sandbox';

const ROOT = path.resolve(__dirname, '..', '..');
const CLI = path.join(ROOT, 'dist', 'cli.js');
const SRT_INDEX = path.join(ROOT, 'node_modules', '@anthropic-ai', 'sandbox-runtime', 'dist', 'index.js');

const report = process.platform === 'linux' ? probe() : null;
const MODES = (['isolated', 'landlock'] as const).filter((m) => (m === 'isolated' ? report?.features.isolatedMode : report?.features.landlockMode));
const noSandbox = MODES.length === 0 ? `no sandbox mode on this host (${process.platform})` : null;
if (noSandbox) console.warn(`SKIPPING srt parity tests: ${noSandbox}`);
for (const m of ['isolated', 'landlock'] as const) if (!MODES.includes(m)) console.warn(`SKIPPING the ${m}-mode srt parity cases: ${m} mode is unavailable here`);

const cfg = (mode: string, over: { allowWrite?: string[]; allowedDomains?: string[]; denyRead?: string[] } = {}) => ({
  network: { allowedDomains: over.allowedDomains ?? [], deniedDomains: [] },
  filesystem: { denyRead: over.denyRead ?? [], allowWrite: over.allowWrite ?? [], denyWrite: [] },
  processSandbox: { mode: mode as 'isolated' | 'landlock', degraded: true },
});

/** Runs a command with spawnSandboxed, reading its output through 'data' handlers. */
async function run(command: string, options: Parameters<typeof spawnSandboxed>[1] = {}) {
  const p = await spawnSandboxed(command, options);
  let stdout = '';
  let stderr = '';
  p.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  p.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const r = await p.wait();
  return { ...r, stdout, stderr };
}

/** A loopback TCP listener that records the first bytes of each connection, then answers `reply`. */
async function recorder(reply: string): Promise<{ port: number; got: string[]; close: () => Promise<void> }> {
  const got: string[] = [];
  const server = net.createServer((c) => {
    c.on('error', () => {});
    c.once('data', (d) => {
      got.push(d.toString('latin1'));
      c.end(reply);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as net.AddressInfo).port, got, close: () => new Promise((r) => server.close(() => r())) };
}

/** A port nothing listens on (bound, then released). */
async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const p = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return p;
}

const SRT_CLI = path.join(ROOT, 'node_modules', '@anthropic-ai', 'sandbox-runtime', 'dist', 'cli.js');
const srtWhy = (() => {
  if (!fs.existsSync(SRT_CLI)) return 'the pinned @anthropic-ai/sandbox-runtime is not installed';
  const tools = ['bwrap', 'socat', 'rg', 'curl'].filter((t) => spawnSync('/bin/sh', ['-c', `command -v ${t}`]).status !== 0);
  return tools.length ? `missing ${tools.join(', ')} (apt-get install -y --no-install-recommends bubblewrap socat ripgrep curl)` : null;
})();
if (srtWhy) console.warn(`SKIPPING the side-by-side cases with the real srt: ${srtWhy}`);

/** `srt` (the real one) or `process-sandbox srt` with a settings file, without blocking the event loop. */
function srtSide(which: 'srt' | 'ours', settings: object, command: string, cwd: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const file = path.join(cwd, `settings-${which}-${Math.random().toString(36).slice(2)}.json`);
  fs.writeFileSync(file, JSON.stringify(settings));
  const argv = [...(which === 'srt' ? [SRT_CLI] : [CLI, 'srt']), '--settings', file, '-c', command];
  // A home outside the writable root: srt makes a writable root's .gitconfig unreadable, and git
  // stops at that.
  const home = path.join(path.dirname(cwd), 'home');
  fs.mkdirSync(home, { recursive: true });
  return new Promise((resolve) => {
    const c = cpSpawn(process.execPath, argv, { cwd, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, LANG: 'C.UTF-8' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    c.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    c.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe("srt's SandboxManager surface", () => {
  afterEach(async () => SandboxManager.reset());

  const noSrtIndex = fs.existsSync(SRT_INDEX) ? null : 'the pinned @anthropic-ai/sandbox-runtime is not installed (npm ci installs it)';
  if (noSrtIndex) console.warn(`SKIPPING the srt surface comparison: ${noSrtIndex}`);
  it.skipIf(noSrtIndex !== null)(`every member srt exports is here, or refused by name with a clear error (and listed in docs/srt.md)${noSrtIndex ? ` (SKIPPED: ${noSrtIndex})` : ''}`, () => {
    const listed = spawnSync(process.execPath, ['--input-type=module', '-e', `const m = await import(${JSON.stringify(SRT_INDEX)}); console.log(JSON.stringify(Object.fromEntries(Object.entries(m.SandboxManager).map(([k, v]) => [k, typeof v]))))`], { encoding: 'utf8' });
    expect(listed.status, listed.stderr).toBe(0);
    const theirs = JSON.parse(listed.stdout) as Record<string, string>;
    expect(Object.keys(theirs).length).toBeGreaterThan(30);
    const ours = SandboxManager as unknown as Record<string, unknown>;
    const docs = fs.readFileSync(path.join(ROOT, 'docs', 'srt.md'), 'utf8');
    const missing = Object.keys(theirs).filter((k) => typeof ours[k] !== theirs[k]);
    expect(missing, 'members srt exports that are missing here (or of another type)').toEqual([]);
    for (const name of Object.keys(SRT_REFUSED_CALLS)) {
      expect(theirs[name], `${name} is one of srt's`).toBe('function');
      expect(docs, `docs/srt.md names the refused ${name}`).toContain(`\`${name}\``);
      let err: unknown;
      try {
        (ours[name] as (...a: unknown[]) => unknown)('x'.repeat(22), { allowedDomains: ['example.com'] });
      } catch (e) {
        err = e;
      }
      expect(err, name).toBeInstanceOf(SandboxError);
      expect((err as SandboxError).code).toBe('EUNSUPPORTED_POLICY');
      expect((err as SandboxError).message).toContain(`SandboxManager.${name} is not supported by process-sandbox`);
    }
  });

  it.skipIf(noSandbox !== null)("the getters answer in srt's shapes, before and after initialize", async () => {
    expect(SandboxManager.getNetworkRestrictionConfig()).toEqual({});
    expect(SandboxManager.getFsReadConfig()).toEqual({ denyOnly: [], allowWithinDeny: [] });
    const scene = makeScene('srt-getters');
    try {
      fs.writeFileSync(path.join(scene.out, 'hidden.txt'), 'x');
      await SandboxManager.initialize({
        network: { allowedDomains: ['example.com'], deniedDomains: ['evil.example'] },
        filesystem: { denyRead: [path.join(scene.out, 'hidden.txt')], allowWrite: [scene.ws], denyWrite: [path.join(scene.ws, 'keep')] },
        enableWeakerNestedSandbox: true,
      });
      expect(SandboxManager.getNetworkRestrictionConfig()).toEqual({ allowedHosts: ['example.com'], deniedHosts: ['evil.example'] });
      expect(SandboxManager.getFsReadConfig()).toEqual({ denyOnly: [fs.realpathSync(path.join(scene.out, 'hidden.txt'))], allowWithinDeny: [] });
      expect(SandboxManager.getFsWriteConfig()).toEqual({ allowOnly: [fs.realpathSync(scene.ws)], denyWithinAllow: [path.join(fs.realpathSync(scene.ws), 'keep')] });
      expect(SandboxManager.getEnableWeakerNestedSandbox()).toBe(true);
      expect(SandboxManager.getProxyAuthToken()).toBeUndefined();
      expect(SandboxManager.getLinuxHttpSocketPath()).toBeUndefined();
      expect(SandboxManager.getMitmCA()).toBeUndefined();
      // Nothing can be registered, so unregistering (srt users call it from 'exit') is a no-op.
      expect(() => SandboxManager.unregisterCommandNetworkLists('x'.repeat(22))).not.toThrow();
      await SandboxManager.updateConfig({ network: { allowedDomains: [], deniedDomains: [] }, filesystem: { denyRead: [], allowWrite: [], denyWrite: [] } });
      expect(SandboxManager.getNetworkRestrictionConfig()).toEqual({ allowedHosts: [] });
    } finally {
      scene.cleanup();
    }
  });
});

describe.skipIf(noSandbox !== null)('spawnSandboxed wait() and the output', () => {
  let busy: ChildProcess[] = [];
  beforeAll(() => {
    // Both CPUs busy for the whole block: the ordering must not depend on a quiet machine.
    busy = [0, 1].map(() => cpSpawn('/bin/sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' }));
  });
  afterAll(async () => {
    for (const b of busy) if (b.pid !== undefined) process.kill(b.pid, 'SIGKILL');
    await SandboxManager.reset();
  });

  for (const mode of MODES) {
    it(`[${mode}] wait() settles when nobody reads the output too (drained on exit, as Node's child_process does)`, async () => {
      await SandboxManager.initialize(cfg(mode));
      const p = await spawnSandboxed('echo out; echo err >&2; exit 4');
      // A hang guard, not a timing assertion: without the drain, wait() never settles.
      const r = await Promise.race([p.wait(), new Promise((res) => setTimeout(() => res('wait() never settled'), 60_000))]);
      expect(r).toEqual({ exitCode: 4, timedOut: false });
    }, 120_000);

    it(`[${mode}] wait() settles only after stdout and stderr have ended: 40 runs, each output complete`, async () => {
      await SandboxManager.initialize(cfg(mode));
      const expected = Array.from({ length: 300 }, (_, i) => `line ${i + 1}\n`).join('');
      for (let i = 0; i < 40; i++) {
        const r = await run(`i=1; while [ $i -le 300 ]; do echo "line $i"; i=$((i+1)); done; echo done >&2`);
        expect(r.exitCode, `run ${i}`).toBe(0);
        expect(r.stdout, `run ${i}: stdout complete when wait() settled`).toBe(expected);
        expect(r.stderr, `run ${i}: stderr complete when wait() settled`).toBe('done\n');
      }
    }, 300_000);
  }
});

describe('the srt command line', () => {
  let scene: Scene;
  let good: string;
  beforeAll(() => {
    scene = makeScene('srt-cli');
    good = path.join(scene.root, 'good.json');
    fs.writeFileSync(good, JSON.stringify({ network: { allowedDomains: [], deniedDomains: [] }, filesystem: { denyRead: [], allowWrite: [scene.ws], denyWrite: [] } }));
  });
  afterAll(() => scene?.cleanup());
  const cli = (args: string[], env: NodeJS.ProcessEnv = process.env) =>
    spawnSync(process.execPath, [CLI, 'srt', ...args], { encoding: 'utf8', env, timeout: 120_000, cwd: scene.root });
  const marker = () => path.join(scene.ws, 'ran.txt');

  it('--version and -V print the version', () => {
    const version = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version;
    for (const flag of ['--version', '-V']) {
      const r = cli([flag]);
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toBe(`${version}\n`);
    }
  });

  it('settings that are not a regular file, or too large, are refused at once: the file is named, nothing runs', () => {
    const fifo = path.join(scene.root, 'settings.fifo');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const big = path.join(scene.root, 'big.json');
    fs.writeFileSync(big, ' '.repeat(MAX_SETTINGS_BYTES + 1));
    for (const [file, why] of [
      ['/dev/zero', 'is not a regular file'],
      [fifo, 'is not a regular file'], // no writer: opened without blocking
      [scene.ws, 'is not a regular file'],
      [big, `is larger than ${MAX_SETTINGS_BYTES} bytes`],
    ] as const) {
      const r = cli(['--settings', file, '-c', `echo ran > ${marker()}`]);
      expect(r.signal, `${file}: ended on its own`).toBeNull();
      expect(r.status, file).toBe(1);
      expect(r.stderr).toBe(`Error: ${file} ${why}.\nRefusing to run with the built-in defaults, which would drop this file's rules (its denyRead, allowRead and credential entries included).\n`);
      expect(fs.existsSync(marker()), `${file}: nothing ran`).toBe(false);
    }
    // Positive control: a regular file just under the cap is read and used.
    fs.writeFileSync(big, JSON.stringify(JSON.parse(fs.readFileSync(good, 'utf8'))).padEnd(MAX_SETTINGS_BYTES, ' '));
    const ok = cli(['--settings', big, '-c', `echo ran > ${marker()}`]);
    expect(ok.status, ok.stderr).toBe(0);
    expect(fs.readFileSync(marker(), 'utf8')).toBe('ran\n');
    fs.rmSync(marker());
  });

  it('an invalid config names the file and says it refuses to run; nothing runs', () => {
    const bad = path.join(scene.root, 'bad.json');
    fs.writeFileSync(bad, JSON.stringify({ network: { allowedDomains: 5, deniedDomains: [] }, filesystem: { denyRead: [], allowWrite: [], denyWrite: [] } }));
    const r = cli(['--settings', bad, '-c', `echo ran > ${marker()}`]);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(
      `Error: ${bad} does not hold a valid config — network.allowedDomains: Expected array, received number\nRefusing to run with the built-in defaults, which would drop this file's rules (its denyRead, allowRead and credential entries included).\n`,
    );
    expect(fs.existsSync(marker())).toBe(false);
  });

  it.skipIf(noSandbox !== null)('-d and SRT_DEBUG print [SandboxDebug] lines on stderr (and the command sees SRT_DEBUG); without them, none', () => {
    const env = { ...process.env };
    delete env.SRT_DEBUG;
    const d = cli(['-d', '--settings', good, '-c', 'echo "in:$SRT_DEBUG"'], env);
    expect(d.status, d.stderr).toBe(0);
    expect(d.stdout).toBe('in:true\n');
    expect(d.stderr).toContain('[SandboxDebug] Initializing sandbox...\n');
    expect(d.stderr).toContain('[SandboxDebug] Command string mode (-c): echo "in:$SRT_DEBUG"\n');
    const e = cli(['--settings', good, 'echo', 'a b'], { ...env, SRT_DEBUG: '1' });
    expect(e.stdout).toBe('a b\n');
    expect(e.stderr).toContain("[SandboxDebug] Original command: echo 'a b'\n");
    const quiet = cli(['--settings', good, '-c', 'echo "in:$SRT_DEBUG"'], env);
    expect(quiet.stdout).toBe('in:\n');
    expect(quiet.stderr).not.toContain('[SandboxDebug]');
  });

  it.skipIf(noSandbox !== null)('unknown options are ignored as srt ignores them: with -c the command runs; without, they are words of the command', () => {
    const r = cli(['--settings', good, '--no-such-flag', '-x', '-c', `echo ran > ${marker()}`]);
    expect(r.status, r.stderr).toBe(0);
    expect(fs.readFileSync(marker(), 'utf8')).toBe('ran\n');
    fs.rmSync(marker());
    // Short options run together are srt's options, never unknown ones: the file named so is used
    // (here an invalid one, so nothing runs), and --control-fd=N is refused as --control-fd is.
    const bad = path.join(scene.root, 'bad-joined.json');
    fs.writeFileSync(bad, '{"network":{"allowedDomains":5}}');
    for (const args of [[`-s${bad}`, '-c', `echo ran > ${marker()}`], [`-ds${bad}`, `-cecho ran > ${marker()}`]]) {
      const j = cli(args);
      expect(j.status, args.join(' ')).toBe(1);
      expect(j.stderr).toContain(`Error: ${bad} does not hold a valid config`);
    }
    const fd = cli(['--settings', good, '--control-fd=5', '-c', `echo ran > ${marker()}`]);
    expect(fd.status).toBe(1);
    expect(fd.stderr).toMatch(/^Error: --control-fd is not supported/);
    expect(fs.existsSync(marker())).toBe(false);
    const joined = cli([`-s${good}`, `-cecho ran > ${marker()}`]);
    expect(joined.status, joined.stderr).toBe(0);
    expect(fs.readFileSync(marker(), 'utf8')).toBe('ran\n');
    fs.rmSync(marker());
    // srt: `srt --foo=bar echo a` runs the command `--foo=bar echo a` (bash refuses the option: 2).
    const w = cli(['--settings', good, '--foo=bar', 'echo', 'a']);
    expect(w.status).toBe(2);
    expect(w.stdout).toBe('');
    expect(w.stderr).toMatch(/--: invalid option/);
  });
});

describe.skipIf(noSandbox !== null)('tool proxy settings, git over ssh, and names /etc/hosts maps to loopback', () => {
  let scene: Scene;
  beforeAll(() => {
    scene = makeScene('srt-net');
  });
  afterAll(async () => {
    await SandboxManager.reset();
    scene?.cleanup();
  });

  for (const mode of MODES) {
    it(`[${mode}] the command sees srt's gRPC, rsync, gcloud, JVM and GIT_SSH_COMMAND settings, all on the sandbox's proxy`, async () => {
      await SandboxManager.initialize(cfg(mode));
      const r = await run('env', { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', JAVA_TOOL_OPTIONS: '-Xmx64m', RSYNC_PROXY: 'elsewhere:1' } });
      expect(r.exitCode, r.stderr).toBe(0);
      const env = Object.fromEntries(r.stdout.split('\n').filter((l) => l.includes('=')).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
      const m = /^http:\/\/127\.0\.0\.1:(\d+)$/.exec(env.HTTP_PROXY ?? '');
      expect(m, `HTTP_PROXY=${env.HTTP_PROXY}`).not.toBeNull();
      const p = m![1];
      expect(env).toMatchObject({
        GRPC_PROXY: `http://127.0.0.1:${p}`,
        grpc_proxy: `http://127.0.0.1:${p}`,
        RSYNC_PROXY: `127.0.0.1:${p}`,
        CLOUDSDK_PROXY_TYPE: 'http',
        CLOUDSDK_PROXY_ADDRESS: '127.0.0.1',
        CLOUDSDK_PROXY_PORT: p,
        JAVA_TOOL_OPTIONS: `-Xmx64m -Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=${p} -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=${p}`,
        NO_PROXY: 'localhost,127.0.0.1,::1,169.254.0.0/16,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16',
      });
      expect(env.GIT_SSH_COMMAND).toMatch(new RegExp(`^ssh -o ControlMaster=no -o ControlPath=none -o 'ProxyCommand=env ELECTRON_RUN_AS_NODE=1 \\S+ \\S+/ssh-connect\\.js 127\\.0\\.0\\.1 ${p} %h %p'$`));
    });
  }

  const gitSsh = ['git', 'ssh'].filter((t) => spawnSync('/bin/sh', ['-c', `command -v ${t}`]).status !== 0);
  if (gitSsh.length) console.warn(`SKIPPING the git-over-ssh cases: ${gitSsh.join(' and ')} not installed`);
  for (const mode of MODES) {
    it.skipIf(gitSsh.length > 0)(`[${mode}] git over ssh reaches an allowed host through the proxy; a host not allowed gets nothing`, async () => {
      const server = await recorder('SSH-2.0-fake\r\n');
      try {
        const cmd = `git ls-remote ssh://git@127.0.0.1:${server.port}/repo.git </dev/null`;
        const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: scene.ws };
        // Not allowed: the proxy refuses the tunnel, the server hears nothing.
        await SandboxManager.initialize(cfg(mode, { allowWrite: [scene.ws] }));
        const no = await run(cmd, { env, cwd: scene.ws });
        expect(no.exitCode).not.toBe(0);
        expect(no.stderr).toContain(`sandbox proxy: 127.0.0.1:${server.port}: 403`);
        expect(server.got).toEqual([]);
        // Allowed: ssh's own greeting arrives at the server (the handshake then fails on the fake).
        await SandboxManager.initialize(cfg(mode, { allowWrite: [scene.ws], allowedDomains: [`127.0.0.1:${server.port}`] }));
        const yes = await run(cmd, { env, cwd: scene.ws });
        expect(yes.exitCode).not.toBe(0);
        expect(server.got.length, yes.stderr).toBe(1);
        expect(server.got[0]).toMatch(/^SSH-2\.0-/);
      } finally {
        await server.close();
      }
    }, 120_000);
  }

  // A name /etc/hosts maps to 127.0.0.1, added for this file alone (srt takes dotted names only,
  // and a stock /etc/hosts has none but localhost, which both sides treat specially). Root only:
  // one line appended, and exactly that line removed afterwards.
  const HOSTS = '/etc/hosts';
  const hostsName = `psb-${process.pid}-${Math.random().toString(36).slice(2, 8)}.test`;
  const hostsLine = `127.0.0.1 ${hostsName}`;
  let hostsWhy: string | null = process.getuid?.() === 0 ? null : 'not root: /etc/hosts cannot be given a test name';
  beforeAll(async () => {
    if (hostsWhy) return;
    try {
      const text = fs.readFileSync(HOSTS, 'utf8');
      fs.appendFileSync(HOSTS, `${text.endsWith('\n') || text === '' ? '' : '\n'}${hostsLine}\n`);
      const a = await dns.promises.lookup(hostsName, { all: true });
      if (!a.every((x) => x.address === '127.0.0.1')) hostsWhy = `${hostsName} resolves to ${a.map((x) => x.address).join(', ')}`;
    } catch (e) {
      hostsWhy = `${hostsName} could not be put in /etc/hosts and resolved (${(e as Error).message})`;
    }
  });
  afterAll(() => {
    if (process.getuid?.() !== 0) return;
    const text = fs.readFileSync(HOSTS, 'utf8');
    if (text.includes(hostsLine)) fs.writeFileSync(HOSTS, text.split('\n').filter((l) => l !== hostsLine).join('\n'));
  });
  it.skipIf(srtWhy !== null)('side by side with srt: both reach the /etc/hosts name through 127.0.0.1:<port>, neither with the literal on another port', async (ctx) => {
    if (hostsWhy) {
      console.warn(`SKIPPING the side-by-side /etc/hosts case: ${hostsWhy}`);
      ctx.skip();
      return;
    }
    const server = await recorder('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok');
    const other = await freePort();
    try {
      const curl = `curl -s -m 20 -o /dev/null -w '%{http_code}' --noproxy '' -x "$HTTP_PROXY" http://${hostsName}:${server.port}/x`;
      const net = (allowed: string[]) => ({ network: { allowedDomains: allowed, deniedDomains: [] }, filesystem: { denyRead: [], allowWrite: [], denyWrite: [] } });
      for (const which of ['srt', 'ours'] as const) {
        const no = await srtSide(which, net([hostsName, `127.0.0.1:${other}`]), curl, scene.ws);
        expect(no.stdout, `${which}: ${no.stderr}`).not.toBe('200');
        const yes = await srtSide(which, net([hostsName, `127.0.0.1:${server.port}`]), curl, scene.ws);
        expect(yes.stdout, `${which}: ${yes.stderr}`).toBe('200');
      }
      expect(server.got.length).toBe(2);
    } finally {
      await server.close();
    }
  }, 180_000);

  it.skipIf(srtWhy !== null || gitSsh.length > 0)('side by side with srt: git over ssh reaches an allowed host through each one\'s proxy', async () => {
    const server = await recorder('SSH-2.0-fake\r\n');
    try {
      const cmd = `git ls-remote ssh://git@127.0.0.1:${server.port}/repo.git </dev/null`;
      const settings = { network: { allowedDomains: [`127.0.0.1:${server.port}`], deniedDomains: [] }, filesystem: { denyRead: [], allowWrite: [scene.ws], denyWrite: [] } };
      for (const which of ['srt', 'ours'] as const) {
        const before = server.got.length;
        const r = await srtSide(which, settings, cmd, scene.ws);
        expect(r.code, `${which}: ${r.stderr}`).not.toBe(0);
        expect(server.got.length, `${which}: ${r.stderr}`).toBe(before + 1);
        expect(server.got[before]).toMatch(/^SSH-2\.0-/);
      }
    } finally {
      await server.close();
    }
  }, 180_000);

  for (const mode of MODES) {
    it(`[${mode}] an allowed name that resolves to 127.0.0.1 is reached when 127.0.0.1:<port> is allowed, on that port only`, async (ctx) => {
      if (hostsWhy) {
        console.warn(`SKIPPING the /etc/hosts name case: ${hostsWhy} (test/srt/config.test.ts covers the rule with a resolver of its own)`);
        ctx.skip();
        return;
      }
      const name = hostsName;
      const server = await recorder('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok');
      const other = await freePort();
      try {
        const curl = `curl -s -m 20 -o /dev/null -w '%{http_code}' --noproxy '' -x "$HTTP_PROXY" http://${name}:${server.port}/x`;
        // Control: the literal allowed for another port does not open the name on this one.
        await SandboxManager.initialize(cfg(mode, { allowedDomains: [name, `127.0.0.1:${other}`] }));
        const no = await run(curl);
        expect(no.stdout).not.toBe('200');
        expect(server.got).toEqual([]);
        await SandboxManager.initialize(cfg(mode, { allowedDomains: [name, `127.0.0.1:${server.port}`] }));
        const yes = await run(curl);
        expect(yes.stdout, yes.stderr).toBe('200');
        expect(server.got.length).toBe(1);
        expect(server.got[0]).toMatch(new RegExp(`^GET /x HTTP/1\\.1\\r\\nHost: ${name.replace(/\./g, '\\.')}:${server.port}`));
      } finally {
        await server.close();
      }
    }, 120_000);
  }
});

describe("the proxy's resolver learns the port it serves", () => {
  it('lookup(host, port) gets the port of the CONNECT (what a port-scoped literal is judged by)', async () => {
    const server = await recorder('hello');
    const calls: Array<[string, number | undefined]> = [];
    const proxy = await ManagedProxy.start({
      policy: { allow: ['named.example'], allowLocal: true },
      lookup: async (host, port) => {
        calls.push([host, port]);
        return [{ address: '127.0.0.1', family: 4 }];
      },
    });
    try {
      const a = await proxy.attach('lookup-port');
      const sock = net.connect(a.port, '127.0.0.1');
      let answer = '';
      sock.on('data', (d) => (answer += d.toString('latin1')));
      sock.write(`CONNECT named.example:${server.port} HTTP/1.1\r\nHost: named.example:${server.port}\r\n\r\n`);
      await new Promise<void>((r) => sock.on('data', () => answer.includes('\r\n\r\n') && r()));
      expect(answer).toMatch(/^HTTP\/1\.1 200/);
      sock.write('ping');
      await new Promise<void>((r) => sock.on('data', () => answer.endsWith('hello') && r()));
      sock.destroy();
      expect(calls).toEqual([['named.example', server.port]]);
      expect(server.got).toEqual(['ping']);
    } finally {
      await proxy.close();
      await server.close();
    }
  });
});
