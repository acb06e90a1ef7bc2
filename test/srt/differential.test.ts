/**
 * Differential tests: the same srt settings and the same command, run by the real sandbox-runtime
 * (`srt`, the pinned devDependency, its CLI run by this Node: its package asks for Node 22, its
 * CLI runs on Node 20 here) and by ours (`process-sandbox srt`). Each outcome is checked from
 * outside: the host file really written or unchanged, the loopback listener really got the
 * request or nothing, the unix listener really accepted or not. Where we deliberately contain
 * more, the test says so and asserts both sides (docs/srt.md lists each case).
 *
 * srt on Linux needs bubblewrap, socat and ripgrep (apt: bubblewrap socat ripgrep) and
 * unprivileged user namespaces; without them the suite skips, naming what is missing.
 */
import { spawn as cpSpawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probe } from '../../lib/index';
import { makeScene, type Scene } from '../helpers/sandbox';

const ROOT = path.resolve(__dirname, '..', '..');
const OUR_CLI = path.join(ROOT, 'dist', 'cli.js');
const SRT_CLI = path.join(ROOT, 'node_modules', '@anthropic-ai', 'sandbox-runtime', 'dist', 'cli.js');
const SYS_PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';

function which(cmd: string): boolean {
  return spawnSync('/bin/sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

/** Why the real srt cannot run here, or null. */
function srtMissing(): string | null {
  if (process.platform !== 'linux') return 'srt differential tests run on Linux';
  if (!fs.existsSync(SRT_CLI)) return `${SRT_CLI} is missing (npm ci installs the pinned devDependency)`;
  const tools = ['bwrap', 'socat', 'rg', 'curl'].filter((t) => !which(t));
  if (tools.length) return `missing ${tools.join(', ')} (apt-get install -y --no-install-recommends bubblewrap socat ripgrep curl)`;
  const dir = fs.mkdtempSync('/var/tmp/psb-srt-trial-');
  try {
    fs.writeFileSync(path.join(dir, 's.json'), JSON.stringify(settings({})));
    const r = spawnSync(process.execPath, [SRT_CLI, '--settings', path.join(dir, 's.json'), '-c', 'true'], {
      cwd: dir,
      env: { PATH: SYS_PATH, HOME: dir },
      encoding: 'utf8',
      timeout: 60_000,
    });
    if (r.status !== 0) return `srt cannot run here: ${(r.stderr || r.error?.message || '').trim().split('\n').slice(-2).join(' ')}`;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return null;
}

const report = process.platform === 'linux' ? probe() : null;
const oursMissing = report?.defaultMode === 'isolated' ? null : `our isolated mode is unavailable here (default mode ${report?.defaultMode})`;
const missing = oursMissing ?? srtMissing();
if (missing) console.warn(`SKIPPING srt differential tests: ${missing}`);

interface Settings {
  network?: Record<string, unknown>;
  filesystem?: Record<string, unknown>;
  [k: string]: unknown;
}
function settings(s: Settings): Settings {
  return {
    ...s,
    network: { allowedDomains: [], deniedDomains: [], ...(s.network ?? {}) },
    filesystem: { denyRead: [], allowWrite: [], denyWrite: [], ...(s.filesystem ?? {}) },
  };
}

interface Out {
  code: number | null;
  stdout: string;
  stderr: string;
}
type Side = 'srt' | 'ours';

/** Runs a CLI asynchronously (the loopback servers of this process must keep answering). */
function runCli(argv: string[], cwd: string, env: Record<string, string>, wrap?: string[]): Promise<Out> {
  const [file, ...args] = wrap ? [...wrap, process.execPath, ...argv] : [process.execPath, ...argv];
  return new Promise((resolve, reject) => {
    const c = cpSpawn(file!, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d) => (stdout += d));
    c.stderr.on('data', (d) => (stderr += d));
    // Not a timing assertion: a hung CLI must fail the test instead of the whole run.
    const t = setTimeout(() => c.kill('SIGKILL'), 50_000);
    c.on('error', reject);
    c.on('close', (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
  });
}

let scene: Scene;
let home: string;
let n = 0;

async function side(which: Side, s: Settings | null, command: string, opts: { cwd?: string; settingsArg?: 'file' | 'none'; wrap?: string[]; rawSettings?: string } = {}): Promise<Out> {
  const file = path.join(scene.root, `settings-${which}-${n++}.json`);
  if (opts.rawSettings !== undefined) fs.writeFileSync(file, opts.rawSettings);
  else if (s) fs.writeFileSync(file, JSON.stringify(s));
  const cli = which === 'srt' ? [SRT_CLI] : [OUR_CLI, 'srt'];
  const argv = [...cli, ...(opts.settingsArg === 'none' ? [] : ['--settings', file]), '-c', command];
  return runCli(argv, opts.cwd ?? scene.ws, { PATH: SYS_PATH, HOME: home, LANG: 'C.UTF-8' }, opts.wrap);
}

async function both(s: Settings | null, command: string, opts: Parameters<typeof side>[3] = {}, between?: (w: Side) => void): Promise<Record<Side, Out>> {
  const srt = await side('srt', s, command, opts);
  between?.('srt');
  const ours = await side('ours', s, command, opts);
  between?.('ours');
  return { srt, ours };
}

const read = (p: string) => (fs.existsSync(p) ? fs.readFileSync(p, 'utf8') : null);

describe.skipIf(missing !== null)(`srt and process-sandbox srt: same settings, same outcome${missing ? ` (SKIPPED: ${missing})` : ''}`, () => {
  let server: http.Server;
  let port: number;
  let other: http.Server;
  let otherPort: number;
  const hits: string[] = [];

  beforeAll(async () => {
    scene = makeScene('srt-diff');
    home = path.join(scene.root, 'home');
    fs.mkdirSync(home);
    server = http.createServer((req, res) => {
      hits.push(req.url ?? '');
      res.end('ok');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as net.AddressInfo).port;
    other = http.createServer((req, res) => res.end('other'));
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    otherPort = (other.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((r) => server?.close(r));
    await new Promise((r) => other?.close(r));
    scene?.cleanup();
  });

  // ---- filesystem ----

  it('a write inside allowWrite reaches the host; one outside it does not (both)', async () => {
    const s = settings({ filesystem: { allowWrite: ['.'] } });
    for (const w of ['srt', 'ours'] as const) {
      const inside = path.join(scene.ws, `in-${w}.txt`);
      const outside = path.join(scene.out, `new-${w}.txt`);
      const r = await side(w, s, `echo ${w} > ${inside}; echo ${w} > ${outside}; exit 0`);
      expect(r.code, `${w}: ${r.stderr}`).toBe(0);
      expect(read(inside), w).toBe(`${w}\n`);
      expect(fs.existsSync(outside), w).toBe(false);
    }
  });

  it('denyWrite inside allowWrite keeps the host file unchanged (both)', async () => {
    const s = settings({ filesystem: { allowWrite: ['.'], denyWrite: ['./locked.txt'] } });
    fs.writeFileSync(path.join(scene.ws, 'locked.txt'), 'orig');
    const r = await both(s, 'echo changed > locked.txt; echo changed >> locked.txt; echo ok > free.txt');
    for (const w of ['srt', 'ours'] as const) expect(r[w].stderr, w).toMatch(/locked\.txt/);
    expect(read(path.join(scene.ws, 'locked.txt'))).toBe('orig');
    expect(read(path.join(scene.ws, 'free.txt'))).toBe('ok\n');
  });

  it('denyWrite over a writable root wins: the root under it is not writable (both)', async () => {
    fs.mkdirSync(path.join(scene.ws, 'src'), { recursive: true });
    const s = settings({ filesystem: { allowWrite: ['./src', './free'], denyWrite: ['.'] } });
    for (const w of ['srt', 'ours'] as const) {
      const r = await side(w, s, `echo ${w} > src/${w}.txt; exit 0`);
      expect(fs.existsSync(path.join(scene.ws, 'src', `${w}.txt`)), `${w}: ${r.stderr}`).toBe(false);
    }
    // Positive control: without the deny the same write lands.
    const ok = settings({ filesystem: { allowWrite: ['./src'] } });
    for (const w of ['srt', 'ours'] as const) {
      await side(w, ok, `echo ${w} > src/${w}-ok.txt`);
      expect(read(path.join(scene.ws, 'src', `${w}-ok.txt`)), w).toBe(`${w}\n`);
    }
  });

  it("srt's mandatory deny set holds by default: start-up files, .git/hooks, .git/config, .vscode, .idea, .claude/commands, .mcp.json (both)", async () => {
    const ws = path.join(scene.root, 'mand');
    fs.mkdirSync(path.join(ws, '.git', 'hooks'), { recursive: true });
    fs.writeFileSync(path.join(ws, '.git', 'HEAD'), 'ref: refs/heads/main\n');
    fs.writeFileSync(path.join(ws, '.git', 'config'), '[core]\n');
    for (const d of ['.vscode', '.idea', '.claude/commands']) {
      fs.mkdirSync(path.join(ws, d), { recursive: true });
      fs.writeFileSync(path.join(ws, d, 'keep'), 'orig');
    }
    fs.writeFileSync(path.join(ws, '.gitconfig'), 'orig');
    fs.writeFileSync(path.join(ws, '.mcp.json'), 'orig');
    const s = settings({ filesystem: { allowWrite: ['.'] } });
    const names = ['.bashrc', '.zshrc', '.profile', '.gitconfig', '.mcp.json', '.git/hooks/pre-commit', '.git/config', '.vscode/keep', '.idea/keep', '.claude/commands/keep'];
    const script = names.map((f) => `echo evil >> ${f}`).join('; ') + '; echo fine > ok.txt';
    for (const w of ['srt', 'ours'] as const) {
      const r = await side(w, s, script, { cwd: ws });
      expect(read(path.join(ws, 'ok.txt')), `${w}: ${r.stderr}`).toBe('fine\n');
      for (const f of names) {
        const body = read(path.join(ws, f));
        expect(body === null || !body.includes('evil'), `${w}: ${f} = ${body}`).toBe(true);
      }
      fs.rmSync(path.join(ws, 'ok.txt'));
    }
  });

  it('denyRead hides a file; allowRead re-opens a directory inside a denied one, the more specific deny still wins (both)', async () => {
    const s = settings({ filesystem: { denyRead: [scene.out], allowRead: [path.join(scene.out, 'dir')] } });
    const r = await both(s, `cat ${scene.out}/secret.txt; cat ${scene.out}/dir/inner.txt`);
    for (const w of ['srt', 'ours'] as const) {
      expect(r[w].stdout, w).not.toContain('top secret');
      expect(r[w].stdout, w).toContain('inner');
    }
  });

  it('denyRead patterns (**/.env, **/build/**) hide what they match and nothing else (both)', async () => {
    const ws = path.join(scene.root, 'globs');
    for (const f of ['.env', 'a/.env', 'a/b/c/.env', 'a/ok.txt', 'x/build/out.o']) {
      fs.mkdirSync(path.dirname(path.join(ws, f)), { recursive: true });
      fs.writeFileSync(path.join(ws, f), `content-of-${f}`);
    }
    const s = settings({ filesystem: { denyRead: ['**/.env', '**/build/**'] } });
    const r = await both(s, 'cat .env a/.env a/b/c/.env x/build/out.o a/ok.txt', { cwd: ws });
    for (const w of ['srt', 'ours'] as const) {
      expect(r[w].stdout, `${w}: ${r[w].stderr}`).toBe('content-of-a/ok.txt');
    }
  });

  it('~ and relative paths resolve as srt resolves them (HOME and the working directory)', async () => {
    fs.mkdirSync(path.join(home, 'hw'), { recursive: true });
    fs.mkdirSync(path.join(scene.ws, 'sub'), { recursive: true });
    const s = settings({ filesystem: { allowWrite: ['~/hw', 'sub'] } });
    for (const w of ['srt', 'ours'] as const) {
      const r = await side(w, s, `echo ${w} > ${home}/hw/${w}; echo ${w} > sub/${w}; echo ${w} > top-${w}`);
      expect(read(path.join(home, 'hw', w)), `${w}: ${r.stderr}`).toBe(`${w}\n`);
      expect(read(path.join(scene.ws, 'sub', w)), w).toBe(`${w}\n`);
      expect(fs.existsSync(path.join(scene.ws, `top-${w}`)), w).toBe(false);
    }
  });

  // ---- network, through each side's proxy to a listener on the host's loopback ----

  const viaProxy = (url: string) => `curl -s -m 20 -o /dev/null -w '%{http_code}' --noproxy '' -x "$HTTP_PROXY" ${url}`;

  async function net2(s: Settings, command: (tag: string) => string): Promise<Record<Side, { out: Out; got: boolean }>> {
    const res = {} as Record<Side, { out: Out; got: boolean }>;
    for (const w of ['srt', 'ours'] as const) {
      const tag = `/${w}-${n++}`;
      const before = hits.length;
      const out = await side(w, s, command(tag));
      res[w] = { out, got: hits.slice(before).includes(tag) };
    }
    return res;
  }

  it('an allow-listed IP literal with its port reaches the loopback listener; nothing else does (both)', async () => {
    const ok = await net2(settings({ network: { allowedDomains: [`127.0.0.1:${port}`] } }), (t) => viaProxy(`http://127.0.0.1:${port}${t}`));
    expect(ok.srt.got, ok.srt.out.stderr).toBe(true);
    expect(ok.ours.got, ok.ours.out.stderr).toBe(true);
    const none = await net2(settings({}), (t) => viaProxy(`http://127.0.0.1:${port}${t}`));
    expect(none.srt.got).toBe(false);
    expect(none.ours.got).toBe(false);
    const otherPortOnly = await net2(settings({ network: { allowedDomains: [`127.0.0.1:${otherPort}`] } }), (t) => viaProxy(`http://127.0.0.1:${port}${t}`));
    expect(otherPortOnly.srt.got).toBe(false);
    expect(otherPortOnly.ours.got).toBe(false);
  });

  it('deniedDomains wins over allowedDomains (both)', async () => {
    const r = await net2(settings({ network: { allowedDomains: [`127.0.0.1:${port}`], deniedDomains: ['127.0.0.1'] } }), (t) => viaProxy(`http://127.0.0.1:${port}${t}`));
    expect(r.srt.got).toBe(false);
    expect(r.ours.got).toBe(false);
  });

  it("no_proxy: a client that honours it goes to the sandbox's own loopback, not the host's (both)", async () => {
    const r = await net2(settings({ network: { allowedDomains: [`127.0.0.1:${port}`] } }), (t) => `curl -s -m 20 -o /dev/null http://127.0.0.1:${port}${t}; echo "$no_proxy"`);
    expect(r.srt.got).toBe(false);
    expect(r.ours.got).toBe(false);
    expect(r.ours.out.stdout).toContain('127.0.0.1');
    expect(r.srt.out.stdout).toContain('127.0.0.1');
  });

  it('an allow-listed localhost reaches the loopback listener, unless its IP literal is in deniedDomains (both)', async () => {
    // srt: `localhost` names loopback and only loopback; allow-listing it is the explicit choice.
    const listed = await net2(settings({ network: { allowedDomains: ['localhost'] } }), (t) => viaProxy(`http://localhost:${port}${t}`));
    expect(listed.srt.got, listed.srt.out.stderr).toBe(true);
    expect(listed.ours.got, listed.ours.out.stderr).toBe(true);
    const refused = await net2(settings({ network: { allowedDomains: ['localhost'], deniedDomains: ['127.0.0.1', '[::1]'] } }), (t) => viaProxy(`http://localhost:${port}${t}`));
    expect(refused.srt.got).toBe(false);
    expect(refused.ours.got).toBe(false);
    const notListed = await net2(settings({ network: { allowedDomains: ['example.com'] } }), (t) => viaProxy(`http://localhost:${port}${t}`));
    expect(notListed.srt.got).toBe(false);
    expect(notListed.ours.got).toBe(false);
  });

  // ---- unix sockets ----

  it('unix sockets: blocked by default, allowAllUnixSockets lets a connect reach a host listener (both)', async () => {
    const sock = path.join(scene.out, 'u.sock');
    let accepted = 0;
    const us = net.createServer((c) => {
      accepted++;
      c.end();
    });
    await new Promise<void>((r) => us.listen(sock, r));
    fs.chmodSync(sock, 0o777);
    try {
      const py = `python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("${sock}"); print("connected")'`;
      for (const w of ['srt', 'ours'] as const) {
        const before = accepted;
        const r = await side(w, settings({}), py);
        expect(r.stdout, w).not.toContain('connected');
        expect(accepted, w).toBe(before);
        const r2 = await side(w, settings({ network: { allowAllUnixSockets: true } }), py);
        expect(r2.stdout, `${w}: ${r2.stderr}`).toContain('connected');
        expect(accepted, w).toBe(before + 1);
      }
    } finally {
      await new Promise((r) => us.close(r));
    }
  });

  // ---- the command line: exit statuses and messages scripts see ----

  it("exit statuses and messages: the command's status, a signal, bad or missing settings, no command", async () => {
    const s = settings({});
    const seven = await both(s, 'exit 7');
    expect([seven.srt.code, seven.ours.code]).toEqual([7, 7]);
    // A command that kills itself: 128+N (bubblewrap reports the signal to srt as a status).
    const segv = await both(s, 'kill -SEGV $$');
    expect([segv.srt.code, segv.ours.code]).toEqual([139, 139]);
    const term = await both(s, 'kill -TERM $$');
    expect([term.srt.code, term.ours.code]).toEqual([143, 143]);
    const missingFile = await both(null, 'true', { settingsArg: 'file' });
    for (const w of ['srt', 'ours'] as const) {
      expect(missingFile[w].code, w).toBe(1);
      expect(missingFile[w].stderr, w).toMatch(/^Error: .*does not exist\./);
    }
    for (const [raw, re] of [
      ['', /is empty/],
      ['{', /is not valid JSON/],
      [JSON.stringify(settings({ network: { allowedDomains: ['*.com'] } })), /^Error: /],
      [JSON.stringify({ filesystem: {} }), /^Error: /],
    ] as const) {
      const r = await both(null, 'echo ran', { rawSettings: raw });
      if (raw === '') expect(r.srt.stderr).toMatch(/Refusing to run with the built-in defaults/);
      for (const w of ['srt', 'ours'] as const) {
        expect(r[w].code, `${w} ${raw}`).toBe(1);
        expect(r[w].stdout, w).not.toContain('ran');
        expect(r[w].stderr, `${w} ${raw}`).toMatch(re);
      }
    }
    // No settings file named and none in HOME: srt's defaults (no network, no writes).
    const dflt = await both(null, `echo hi > ${scene.ws}/dflt.txt; echo $?`, { settingsArg: 'none' });
    for (const w of ['srt', 'ours'] as const) expect(dflt[w].code, `${w}: ${dflt[w].stderr}`).toBe(0);
    expect(fs.existsSync(path.join(scene.ws, 'dflt.txt'))).toBe(false);
  });

  it('~/.srt-settings.json is read when no file is named (both)', async () => {
    fs.writeFileSync(path.join(home, '.srt-settings.json'), JSON.stringify(settings({ filesystem: { allowWrite: ['.'] } })));
    try {
      for (const w of ['srt', 'ours'] as const) {
        const r = await side(w, null, `echo ${w} > home-settings-${w}.txt`, { settingsArg: 'none' });
        expect(read(path.join(scene.ws, `home-settings-${w}.txt`)), `${w}: ${r.stderr}`).toBe(`${w}\n`);
      }
    } finally {
      fs.rmSync(path.join(home, '.srt-settings.json'));
    }
  });

  // ---- where srt cannot run at all ----

  const unshareOk = which('unshare') && spawnSync('unshare', ['--user', '--map-root-user', 'true']).status === 0;
  it.skipIf(!unshareOk)(
    `no user namespaces (user.max_user_namespaces=0 in a user namespace of this test only): srt cannot run, we run in Landlock mode${unshareOk ? '' : ' (SKIPPED: unshare --user is unavailable)'}`,
    async () => {
      // The limit is set inside a fresh user namespace, so it binds only what runs in there.
      const wrap = ['unshare', '--user', '--map-root-user', 'sh', '-c', 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', 'sh'];
      const s = settings({ filesystem: { allowWrite: ['.'] }, processSandbox: { degraded: true } });
      const cmd = (w: string) => `echo ${w} > nouserns-${w}.txt; echo ${w} > ${scene.out}/nouserns-${w}.txt`;
      const srt = await side('srt', s, cmd('srt'), { wrap });
      expect(srt.code).not.toBe(0);
      expect(srt.stderr).toMatch(/namespace/i);
      expect(fs.existsSync(path.join(scene.ws, 'nouserns-srt.txt'))).toBe(false);
      const ours = await side('ours', s, cmd('ours'), { wrap });
      expect(read(path.join(scene.ws, 'nouserns-ours.txt')), ours.stderr).toBe('ours\n');
      expect(fs.existsSync(path.join(scene.out, 'nouserns-ours.txt'))).toBe(false);
      // Without `processSandbox.degraded`: Landlock mode runs when every guarantee asked for holds
      // there, and is refused naming `degraded` (and what does not hold) otherwise.
      const plain = await side('ours', settings({ filesystem: { allowWrite: ['.'] } }), 'echo ran', { wrap });
      if (plain.code === 0) expect(plain.stdout).toBe('ran\n');
      else {
        expect(plain.code).toBe(1);
        expect(plain.stderr).toMatch(/^Error: .*degraded/);
      }
    },
  );
});
