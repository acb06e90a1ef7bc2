/**
 * The srt drop-in's wrapped line (lib/srt/attach.ts): run by a shell this host spawned, it hands
 * the command to the host (no Node start); run any other way (a grandchild, a blocked host) it
 * falls back to the CLI, and the command runs exactly once either way. The CLI fallback starts
 * process.execPath as Node also where that is an Electron-like application.
 *
 * "Electron-like": a stand-in for process.execPath that runs Node only with ELECTRON_RUN_AS_NODE=1
 * (as Electron's and VS Code's executables do) and otherwise exits 42 without running anything;
 * it also records each start, which tells the fast path (no start) from the fallback.
 */
import { spawn as cpSpawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probe } from '../../lib/index';
import { SandboxManager } from '../../lib/srt/index';
import { makeScene, SYS_PATH, type Scene } from '../helpers/sandbox';

const report = process.platform === 'linux' ? probe() : null;
const why = report?.defaultMode ? null : `no sandbox mode on this host (${report?.defaultMode ?? process.platform})`;
if (why) console.warn(`SKIPPING the wrapped-line tests: ${why}`);

const REAL_NODE = process.execPath;
let scene: Scene;
let fakeElectron: string;
let starts: string;

function runLine(line: string, opts: { env?: Record<string, string>; via?: 'shell' | 'grandchild' } = {}) {
  const env = { PATH: SYS_PATH, HOME: '/nonexistent', ...(opts.env ?? {}) };
  // A grandchild: the line's shell is not this host's child, so the host must not adopt it.
  const c = opts.via === 'grandchild' ? cpSpawn('/bin/sh', ['-c', '/bin/sh -c "$PSB_LINE"'], { env: { ...env, PSB_LINE: line } }) : cpSpawn(line, { shell: true, env });
  let out = '';
  let err = '';
  c.stdout.on('data', (d) => (out += d));
  c.stderr.on('data', (d) => (err += d));
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string; err: string }>((resolve) =>
    c.on('close', (code, signal) => resolve({ code, signal, out, err })),
  );
  const saw = (text: string) =>
    new Promise<void>((resolve) => {
      const check = () => (out.includes(text) ? resolve() : c.stdout.once('data', check));
      check();
    });
  return { child: c, closed, saw };
}

const startCount = () => (fs.existsSync(starts) ? fs.readFileSync(starts, 'utf8').split('\n').filter(Boolean).length : 0);

describe.skipIf(why !== null)('the wrapped line: attached to the host, or its CLI fallback', () => {
  beforeAll(async () => {
    // A loaded test machine may take the line late; the fallback is still correct, but these
    // tests want to see the attached path (the spawnSync test sets a short one for itself).
    process.env.PSB_SRT_TAKE_TIMEOUT_S = '20';
    scene = makeScene('srt-attach');
    starts = path.join(scene.root, 'execpath-starts.log');
    fakeElectron = path.join(scene.root, 'fake-electron');
    fs.writeFileSync(
      fakeElectron,
      `#!/bin/sh\necho start >> '${starts}'\nif [ "$ELECTRON_RUN_AS_NODE" = 1 ]; then exec '${REAL_NODE}' "$@"; fi\necho 'an Electron app would open its window here' >&2\nexit 42\n`,
      { mode: 0o755 },
    );
    process.execPath = fakeElectron;
    await SandboxManager.initialize({
      network: { allowedDomains: [], deniedDomains: [] },
      filesystem: { denyRead: [], allowWrite: [scene.ws], denyWrite: [] },
    });
  });
  afterAll(async () => {
    process.execPath = REAL_NODE;
    delete process.env.PSB_SRT_TAKE_TIMEOUT_S;
    await SandboxManager.reset();
    scene?.cleanup();
  });

  it('run by the shell this host spawned: the caller\'s stdio, cwd and env, the exit status, the sandbox holding; no Node started', async () => {
    const before = startCount();
    const line = await SandboxManager.wrapWithSandbox(`echo out; echo err >&2; echo "$PWD $PSB_CALLER"; echo in > ok.txt; echo x > ${scene.out}/x.txt; exit 3`);
    const r = await runLine(`cd '${scene.ws}' && ${line}`, { env: { PSB_CALLER: 'from-caller' } }).closed;
    expect(r.code).toBe(3);
    expect(r.out).toBe(`out\n${scene.ws} from-caller\n`);
    expect(r.err).toMatch(/^err\n.*Read-only file system/s);
    expect(fs.readFileSync(path.join(scene.ws, 'ok.txt'), 'utf8')).toBe('in\n');
    expect(fs.existsSync(path.join(scene.out, 'x.txt'))).toBe(false);
    expect(startCount()).toBe(before); // the host ran it: the application was not started
  });

  it('run by a grandchild: the CLI fallback, started as Node in an Electron-like host; the command sees ELECTRON_RUN_AS_NODE as the caller had it', async () => {
    const before = startCount();
    const cmd = `echo "ERAN=\${ELECTRON_RUN_AS_NODE-unset} SAVED=\${PSB_SAVED_ELECTRON_RUN_AS_NODE-none}"; echo x > ${scene.out}/g.txt; exit 5`;
    const unset = await runLine(await SandboxManager.wrapWithSandbox(cmd), { via: 'grandchild' }).closed;
    expect(unset.err).not.toMatch(/Electron app/);
    expect(unset.code).toBe(5);
    expect(unset.out).toBe('ERAN=unset SAVED=none\n');
    const set = await runLine(await SandboxManager.wrapWithSandbox(cmd), { via: 'grandchild', env: { ELECTRON_RUN_AS_NODE: 'mine' } }).closed;
    expect(set.code).toBe(5);
    expect(set.out).toBe('ERAN=mine SAVED=none\n');
    expect(fs.existsSync(path.join(scene.out, 'g.txt'))).toBe(false);
    expect(startCount()).toBe(before + 2); // the control: this path does start the application
  });

  it('a host blocked in spawnSync of its own line does not deadlock: the line runs it through the CLI, once', async () => {
    process.env.PSB_SRT_TAKE_TIMEOUT_S = '0.5';
    const line = await SandboxManager.wrapWithSandbox(`echo once >> runs.txt; echo sync-ok`);
    process.env.PSB_SRT_TAKE_TIMEOUT_S = '20';
    const r = spawnSync(line, { shell: true, cwd: scene.ws, encoding: 'utf8', env: { PATH: SYS_PATH }, timeout: 60_000 });
    expect(r.error).toBeUndefined();
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('sync-ok\n');
    // The host's loop now reads the line's stale request: it must not run the command again.
    await new Promise((res) => setTimeout(res, 300));
    const again = await runLine(await SandboxManager.wrapWithSandbox('true')).closed;
    expect(again.code).toBe(0);
    expect(fs.readFileSync(path.join(scene.ws, 'runs.txt'), 'utf8')).toBe('once\n');
  });

  it('TERM and INT to the line reach the command (srt: 0 when the passed-on signal ended it, else the command\'s own status)', async () => {
    for (let i = 0; i < 3; i++) {
      const trapped = runLine(await SandboxManager.wrapWithSandbox('trap "echo got-term; exit 7" TERM; echo ready; while :; do sleep 0.05; done'));
      await trapped.saw('ready');
      trapped.child.kill('SIGTERM');
      const t = await trapped.closed;
      expect(t.out).toContain('got-term');
      expect(t.code).toBe(7);
      for (const sig of ['SIGTERM', 'SIGINT'] as const) {
        const plain = runLine(await SandboxManager.wrapWithSandbox('echo ready; exec sleep 600'));
        await plain.saw('ready');
        plain.child.kill(sig);
        const p = await plain.closed;
        expect([p.code, p.signal]).toEqual([0, null]);
      }
    }
  });

  it('a line killed outright (SIGKILL) takes its command with it; the host goes on', async () => {
    const ticks = path.join(scene.ws, 'ticks.txt');
    const l = runLine(`cd '${scene.ws}' && ${await SandboxManager.wrapWithSandbox('echo ready; while :; do echo t >> ticks.txt; sleep 0.05; done')}`);
    await l.saw('ready');
    l.child.kill('SIGKILL');
    expect((await l.closed).signal).toBe('SIGKILL');
    // The command stops (checked from outside: the file stops growing), within a bounded wait.
    let last = -1;
    for (let i = 0; i < 100; i++) {
      await new Promise((res) => setTimeout(res, 200));
      const n = fs.statSync(ticks).size;
      if (n === last) break;
      last = n;
    }
    await new Promise((res) => setTimeout(res, 500));
    expect(fs.statSync(ticks).size).toBe(last);
    const after = await runLine(await SandboxManager.wrapWithSandbox('echo still-here')).closed;
    expect(after.out).toBe('still-here\n');
  });

  it('wrapWithSandboxArgv: the argv runs attached, exactly as the line', async () => {
    const { argv, env } = await SandboxManager.wrapWithSandboxArgv(`echo argv-ok; echo x > ${scene.out}/a.txt`);
    const c = cpSpawn(argv[0]!, argv.slice(1), { env: { ...env, PATH: SYS_PATH } });
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    const code = await new Promise((res) => c.on('close', res));
    expect(out).toBe('argv-ok\n');
    expect(code).not.toBe(0);
    expect(fs.existsSync(path.join(scene.out, 'a.txt'))).toBe(false);
  });
});
