/**
 * Landlock mode's supervision in a process of its own (the default; PSB_SUPERVISION=process asks
 * for it even under Electron, PSB_SUPERVISION=thread keeps it in the host;
 * native/linux/supervision_process.cc, lib/platform/linux/supervision-process.ts): one process,
 * started from the host's executable, spawns and supervises every Landlock-mode sandbox of the
 * host; none of it runs in the host process.
 *
 * - It enforces as the host's supervision did (a carve-out refused, a write inside done) and the
 *   report names its pid; the host has none of the supervision's threads, the process has them.
 * - Killed (SIGKILL) or crashed (SIGSEGV) mid-run: that run's command is stopped (its init gets
 *   its parent-death signal and kills the tree), the host lives on, reports the command killed
 *   and warns that the supervision process ended (PSB_SUPERVISION_LOST), and its next spawn works
 *   through a new supervision process.
 * - The host's end (an exit, or a kill) ends the supervision process and every sandbox in it.
 * - It cannot be started (the host's executable is not runnable as node): the spawn fails with
 *   ESPAWN and nothing runs.
 * The other Landlock suites run with it too (scripts/test-all.sh, the process pass); the lock and
 * SQLite tests have a host row with it.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { run, spawn } from '../../lib/index';
import { loadLinuxNative } from '../../lib/native';
import { caps, MODES } from '../helpers/capabilities';
import { BASE_ENV, DIST_INDEX, eventually, hostScript, makeScene, NODE, pidsWith, type Scene, sleepers, uniqueSleep } from '../helpers/sandbox';

const landlockSkip =
  MODES.find((m) => m.name === 'landlock')!.skip ??
  (caps.metadataSupervisor ? undefined : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode has no supervision');
// eslint-disable-next-line no-console
if (landlockSkip) console.warn(`[supervision-process] SKIPPING: ${landlockSkip}`);

const threadsOf = (pid: number | 'self'): string[] =>
  fs.readdirSync(`/proc/${pid}/task`).flatMap((t) => {
    try {
      return [fs.readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim()];
    } catch {
      return [];
    }
  });
const alive = (pid: number): boolean => {
  try {
    return !fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].startsWith('Z');
  } catch {
    return false;
  }
};
const supervisionPid = (mechanisms: Record<string, unknown>): number => Number(/in a process of its own \(pid (\d+)/.exec(String(mechanisms.supervision))?.[1] ?? 0);

describe.skipIf(landlockSkip)('Landlock mode: the supervision in a process of its own', () => {
  let scene: Scene;
  let saved: string | undefined;
  const policy = () => ({ mode: 'landlock' as const, filesystem: { write: [scene.ws] } });
  beforeAll(() => {
    saved = process.env.PSB_SUPERVISION;
    process.env.PSB_SUPERVISION = 'process';
    scene = makeScene('supervision-process');
    fs.mkdirSync(path.join(scene.ws, '.git', 'hooks'), { recursive: true });
  });
  afterAll(() => {
    if (saved === undefined) delete process.env.PSB_SUPERVISION;
    else process.env.PSB_SUPERVISION = saved;
    scene?.cleanup();
  });

  it('enforces from a process of its own: a carve-out refused, a write inside done; no supervision thread in the host', async () => {
    const marker = uniqueSleep();
    const child = spawn('/bin/sh', ['-c', `echo inside > a.txt; echo hook > .git/hooks/pre-commit; echo rc=$?; exec sleep ${marker}`], {
      cwd: scene.ws,
      env: BASE_ENV,
      policy: policy(),
    });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d));
    expect(await eventually(() => sleepers(marker).length > 0)).toBe(true);
    const pid = supervisionPid(child.enforcement.mechanisms);
    expect(pid, String(child.enforcement.mechanisms.supervision)).toBeGreaterThan(0);
    expect(String(child.enforcement.mechanisms.supervision)).toMatch(/^confined by Landlock to the policy's outer envelope/);
    // A process of its own, from the host's executable; the supervision's threads are there.
    expect(pid).not.toBe(process.pid);
    expect(fs.readFileSync(`/proc/${pid}/status`, 'utf8')).toMatch(new RegExp(`\\nTgid:\\s+${pid}\\n`));
    expect(fs.realpathSync(`/proc/${pid}/exe`)).toBe(fs.realpathSync(process.execPath));
    expect(threadsOf(pid)).toContain('psb-supervisor');
    expect(threadsOf('self').filter((t) => t.startsWith('psb-'))).toEqual([]);
    // (Written before the sleep began; read once the loop gets to it.)
    expect(await eventually(() => out === 'rc=2\n'), out).toBe(true);
    child.kill('SIGKILL');
    await child.exited;
    expect(fs.readFileSync(path.join(scene.ws, 'a.txt'), 'utf8')).toBe('inside\n');
    expect(fs.existsSync(path.join(scene.ws, '.git', 'hooks', 'pre-commit'))).toBe(false);
    expect(loadLinuxNative().supervisionProcess()).toBe(pid);
  });

  it("the command gets the host's umask at each spawn, and its own session", async () => {
    const old = process.umask(0o027);
    try {
      const r = await run('/bin/sh', ['-c', 'umask; cut -d" " -f6 /proc/$$/stat'], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
      const [mask, sid] = r.stdout.trim().split('\n');
      expect(mask).toBe('0027');
      // Not the host's session, nor the supervision process's: the command's own (setsid).
      expect(Number(sid)).not.toBe(Number(fs.readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ')[4]));
      expect(Number(sid)).not.toBe(supervisionPid(r.enforcement.mechanisms));
    } finally {
      process.umask(old);
    }
  });

  for (const sig of ['SIGKILL', 'SIGSEGV'] as const) {
    it(`the supervision process ${sig === 'SIGKILL' ? 'killed' : 'crashing'} mid-run (${sig}): the command is stopped, the host lives on, its next spawn works`, async () => {
      fs.writeFileSync(path.join(scene.ws, 'f'), 'x');
      const pidFile = path.join(scene.ws, `cmd-${sig}.pid`);
      // Supervised calls (chmod inside the writable root) in a loop, its pid written first.
      const child = spawn('/bin/sh', ['-c', `echo $$ > ${pidFile}; while :; do chmod 644 f && echo ok; sleep 0.05; done`], {
        cwd: scene.ws,
        env: BASE_ENV,
        policy: policy(),
      });
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d));
      expect(await eventually(() => out.includes('ok\nok\n'))).toBe(true);
      const pid = supervisionPid(child.enforcement.mechanisms);
      const cmd = Number(fs.readFileSync(pidFile, 'utf8'));
      expect(alive(cmd)).toBe(true);
      const warnings: string[] = [];
      const onWarning = (w: Error & { code?: string }) => void (w.code === 'PSB_SUPERVISION_LOST' && warnings.push(w.message));
      process.on('warning', onWarning);
      process.kill(pid, sig);
      const r = await child.exited;
      expect(r).toMatchObject({ code: null, signal: 'SIGKILL' });
      // The host says so (a process warning).
      expect(await eventually(() => warnings.length > 0)).toBe(true);
      process.off('warning', onWarning);
      expect(warnings[0]).toContain(`pid ${pid}) ended (${sig})`);
      // (Its channel closes once its last thread is gone, which may follow the leader's exit. A
      // new one may be running already: a sandbox prepared ahead for the next spawn starts it.)
      expect(await eventually(() => !alive(cmd) && !alive(pid) && loadLinuxNative().supervisionProcess() !== pid)).toBe(true);
      // The next spawn: a new supervision process, enforcing again.
      const next = await run('/bin/sh', ['-c', 'chmod 600 f && echo again; echo x > .git/hooks/h; echo rc=$?'], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
      expect(next.stdout).toBe('again\nrc=2\n');
      expect(fs.statSync(path.join(scene.ws, 'f')).mode & 0o777).toBe(0o600);
      const again = supervisionPid(next.enforcement.mechanisms);
      expect(again).toBeGreaterThan(0);
      expect(again).not.toBe(pid);
    });
  }

  // A host of its own (a node process on the built package) that ends while a sandbox runs.
  const HOST = `
const marker = process.argv[2], how = process.argv[3];
process.env.PSB_SUPERVISION = 'process';
const child = lib.spawn('/bin/sh', ['-c', 'exec sleep ' + marker], { cwd: process.argv[4], env: { PATH: '/usr/bin:/bin' }, policy: { mode: 'landlock', filesystem: { write: [process.argv[4]] } } });
const pid = Number(/in a process of its own \\(pid (\\d+)/.exec(child.enforcement.mechanisms.supervision)[1]);
// Once the sandbox's sleep runs: its pid, then the end.
const fs = require('fs');
const sleeper = () => fs.readdirSync('/proc').find((d) => { try { return fs.readFileSync('/proc/' + d + '/cmdline', 'utf8') === 'sleep\\0' + marker + '\\0'; } catch { return false; } });
const wait = () => { const s = sleeper(); if (!s) return setTimeout(wait, 20); console.log(JSON.stringify({ pid, sleeper: Number(s) })); how === 'exit' ? process.exit(0) : process.kill(process.pid, 'SIGKILL'); };
wait();
`;
  for (const how of ['exit', 'kill'] as const) {
    it(`the host's end (${how === 'exit' ? 'process.exit' : 'SIGKILL'}) ends the supervision process and its sandbox`, async () => {
      const marker = uniqueSleep();
      const script = hostScript(scene.root, `host-${how}.js`, HOST);
      const r = spawnSync(NODE, [script, marker, how, scene.ws], { encoding: 'utf8', timeout: 60_000 });
      const { pid, sleeper } = JSON.parse(r.stdout.trim().split('\n')[0]) as { pid: number; sleeper: number };
      expect(pid).toBeGreaterThan(0);
      expect(sleeper).toBeGreaterThan(0);
      expect(await eventually(() => !alive(pid) && !alive(sleeper) && pidsWith(marker).length === 0)).toBe(true);
    });
  }

  it('a supervision process that cannot start: ESPAWN, and nothing runs', async () => {
    const marker = path.join(scene.ws, 'ran');
    const host = (tag: string, execPath: string) =>
      spawnSync(
        NODE,
        [
          hostScript(
            scene.root,
            `host-${tag}.js`,
            `process.env.PSB_SUPERVISION = 'process';
${execPath ? `process.execPath = ${JSON.stringify(execPath)};` : ''}
lib.run('/bin/sh', ['-c', 'touch ${marker}'], { cwd: ${JSON.stringify(scene.ws)}, env: { PATH: '/usr/bin:/bin' }, policy: { mode: 'landlock', filesystem: { write: [${JSON.stringify(scene.ws)}] } } })
  .then(() => console.log('"ran"'), (e) => console.log(JSON.stringify({ name: e.name, code: e.code, message: e.message })));`,
          ),
        ],
        { encoding: 'utf8', timeout: 60_000 },
      );
    const r = host('nostart', '/bin/false');
    const e = JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null') as { name: string; code: string; message: string };
    expect(e, r.stderr).toMatchObject({ name: 'SandboxError', code: 'ESPAWN' });
    expect(e.message).toMatch(/supervision process/);
    expect(fs.existsSync(marker)).toBe(false);
    // Control: the same host with its real executable runs it.
    expect(host('start', '').stdout.trim()).toBe('"ran"');
    expect(fs.existsSync(marker)).toBe(true);
  });
  it('sends the plan as bytes that read back to the same plan, and refuses every truncation of them', async () => {
    // The plan of a rich policy (carve-out, deny-read, the proxy's connect class, changes
    // recorded), as the host hands it to the native side, caught there.
    const native = loadLinuxNative();
    const orig = native.spawnInSupervisionProcess;
    const plans: Parameters<typeof orig>[0][] = [];
    native.spawnInSupervisionProcess = (plan, onExit) => (plans.push(plan), orig.call(native, plan, onExit));
    const secret = path.join(scene.root, 'wire-secret');
    fs.mkdirSync(secret, { recursive: true });
    try {
      const r = await run('/bin/true', [], {
        cwd: scene.ws,
        env: BASE_ENV,
        stdio: 'ignore',
        changes: 'record',
        policy: { mode: 'landlock', filesystem: { write: [scene.ws], denyRead: [secret] }, network: { proxy: { allow: ['example.com'] } } },
      });
      expect(r.code).toBe(0);
    } finally {
      native.spawnInSupervisionProcess = orig;
    }
    expect(plans.length).toBe(1);
    const plan = plans[0] as unknown as Record<string, unknown>;
    expect(JSON.stringify(plan)).toContain('wire-secret');
    const w = native.testPlanWire({ ...plan, stdio: [0, 1, 2] } as never);
    expect(w.same).toBe(true);
    expect(w.fds).toBeGreaterThanOrEqual(3);
    expect(w.bytes).toBeGreaterThan(1000);
    expect(w.refused).toBe(w.bytes);
  });
  it("is the default; PSB_SUPERVISION=thread keeps it in the host, and says so; an unknown value is refused and nothing runs", async () => {
    const marker = path.join(scene.ws, 'ran-bogus');
    const withSetting = async (value: string | undefined) => {
      if (value === undefined) delete process.env.PSB_SUPERVISION;
      else process.env.PSB_SUPERVISION = value;
      try {
        const marker = uniqueSleep();
        const child = spawn('/bin/sh', ['-c', `exec sleep ${marker}`], { cwd: scene.ws, env: BASE_ENV, policy: policy() });
        expect(await eventually(() => sleepers(marker).length > 0)).toBe(true);
        const count = () => threadsOf('self').filter((t) => t === 'psb-supervisor').length;
        // The serving task takes its name as it starts serving, which the spawn does not wait for.
        if (value === 'thread') await eventually(() => count() > 0);
        const hostThreads = count();
        child.kill('SIGKILL');
        await child.exited;
        return { supervision: String(child.enforcement.mechanisms.supervision), hostThreads };
      } finally {
        process.env.PSB_SUPERVISION = 'process';
      }
    };
    const byDefault = await withSetting(undefined);
    expect(byDefault.supervision).toMatch(/, in a process of its own \(pid \d+/);
    expect(byDefault.hostThreads).toBe(0);
    const thread = await withSetting('thread');
    expect(thread.supervision).toMatch(/^confined by Landlock to the policy's outer envelope .*, as threads of the host process \(PSB_SUPERVISION=thread\)$/);
    expect(thread.hostThreads).toBeGreaterThan(0);
    process.env.PSB_SUPERVISION = 'bogus';
    try {
      expect(() => spawn('/bin/sh', ['-c', `touch ${marker}`], { cwd: scene.ws, env: BASE_ENV, policy: policy() })).toThrow(
        expect.objectContaining({ code: 'EINVALID_ARGUMENT', message: expect.stringMatching(/PSB_SUPERVISION="bogus"/) }),
      );
    } finally {
      process.env.PSB_SUPERVISION = 'process';
    }
    expect(fs.existsSync(marker)).toBe(false);
  });
  it("the CLI (one command, then it ends) keeps it in its own process unless PSB_SUPERVISION=process; says which", () => {
    const cli = (value: string | undefined) => {
      const env: NodeJS.ProcessEnv = { ...process.env };
      if (value === undefined) delete env.PSB_SUPERVISION;
      else env.PSB_SUPERVISION = value;
      const r = spawnSync(NODE, [path.resolve(DIST_INDEX, '..', 'cli.js'), 'run', '--mode', 'landlock', '--write', scene.ws, '--json', '--', '/bin/sh', '-c', 'echo cli > cli.txt'], {
        cwd: scene.ws,
        env,
        encoding: 'utf8',
        timeout: 60_000,
      });
      const json = JSON.parse(r.stderr.trim().split('\n').pop() ?? 'null') as { enforcement: { mechanisms: Record<string, unknown> } };
      expect(r.status, r.stderr).toBe(0);
      expect(fs.readFileSync(path.join(scene.ws, 'cli.txt'), 'utf8')).toBe('cli\n');
      fs.rmSync(path.join(scene.ws, 'cli.txt'));
      return String(json.enforcement.mechanisms.supervision);
    };
    expect(cli(undefined)).toMatch(/, as threads of the host process \(a one-command CLI: /);
    expect(cli('process')).toMatch(/, in a process of its own \(pid \d+/);
  });
  const pid1Skip =
    process.getuid?.() !== 0
      ? 'a pid namespace of its own for the host needs root here (unshare --pid)'
      : spawnSync('unshare', ['--pid', '--fork', '--mount-proc', '/bin/true']).status !== 0
        ? 'unshare --pid --fork --mount-proc fails on this host'
        : undefined;
  // eslint-disable-next-line no-console
  if (pid1Skip) console.warn(`[supervision-process] SKIPPING the PID 1 host case: ${pid1Skip}`);
  it.skipIf(pid1Skip)('a host that is PID 1 (a container entry point) is left no zombie by the inits it inherits when the supervision process dies', () => {
    const script = hostScript(
      scene.root,
      'host-pid1.js',
      `const fs = require('fs');
const mine = () => fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p)).flatMap((p) => {
  try {
    const st = fs.readFileSync('/proc/' + p + '/stat', 'utf8');
    const comm = st.slice(st.indexOf('(') + 1, st.lastIndexOf(')'));
    const [state, ppid] = st.slice(st.lastIndexOf(')') + 2).split(' ');
    return comm === 'psb-init' && Number(ppid) === process.pid ? [state] : [];
  } catch { return []; }
});
(async () => {
  const child = lib.spawn('/bin/sleep', ['30'], { cwd: ${JSON.stringify(scene.ws)}, env: { PATH: '/usr/bin:/bin' }, policy: { mode: 'landlock', filesystem: { write: [${JSON.stringify(scene.ws)}] } } });
  const m = /in a process of its own \\(pid (\\d+)/.exec(String(child.enforcement.mechanisms.supervision));
  process.kill(Number(m[1]), 'SIGKILL');
  let seen = 0;
  const r = await child.exited;
  // Watched for a second at least (they come, then go), then until none is left (at most 20 s).
  const first = Date.now() + 1000, last = Date.now() + 20000;
  while (Date.now() < first || (mine().length > 0 && Date.now() < last)) { seen = Math.max(seen, mine().length); await new Promise((res) => setTimeout(res, 10)); }
  console.log(JSON.stringify({ pid: process.pid, signal: r.signal, seen, left: mine() }));
  process.exit(0);
})();`,
    );
    const r = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', NODE, script], { encoding: 'utf8', timeout: 60_000 });
    const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null') as { pid: number; signal: string; seen: number; left: string[] };
    expect(out, r.stderr).toMatchObject({ pid: 1, signal: 'SIGKILL' });
    // The inits did come to the host (the case is real), and none is left a zombie: the host's
    // exit watch holds each init's pidfd and, once init is its child, its wait reaps it.
    expect(out.seen).toBeGreaterThan(0);
    expect(out.left).toEqual([]);
  });
});
