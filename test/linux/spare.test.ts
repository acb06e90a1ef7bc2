/**
 * Sandboxes prepared ahead (lib/platform/linux/spare.ts, spawn_spare.cc), in both modes. After
 * two spawns of one shape, the next sandbox of that shape is set up while the command runs, and
 * the third spawn only hands it argv, env, cwd and stdio. Each case checks that a spare behaves
 * exactly like a sandbox made on the spot: what it enforces, what the command gets, what is left
 * afterwards, and that a spare made before the filesystem or the policy changed is not used.
 */
import { execFileSync, spawn as spawnChild } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';

import { run, spawn } from '../../lib/index';
import { TMP_PARENT_PREFIX } from '../../lib/platform/linux/landlock-rules';
import { clearSpares, setSpareIdleMs, sparesSettled, spareStats } from '../../lib/platform/linux/spare';
import { loadLinuxNative } from '../../lib/native';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, DIST_INDEX, eventually, makeScene, PYTHON, sh, type Scene } from '../helpers/sandbox';

/** Our live children named psb-init (a sandbox's init, spare or running). */
function initChildren(): number[] {
  const out: number[] = [];
  // (By default Landlock mode's inits are the supervision process's children.)
  const parents = [process.pid, ...(caps.linux ? [loadLinuxNative().supervisionProcess()] : [])];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
      if (comm === 'psb-init' && parents.includes(ppid) && state !== 'Z') out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

function childrenOf(pid: number): number[] {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Running, or dead but not yet a zombie (a zombie has closed all its files). */
function alive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] !== 'Z';
  } catch {
    return false;
  }
}

/** How many sockets this process holds (a spare for the proxy holds its listener). */
function socketFds(): number {
  let n = 0;
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      if (fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith('socket:')) n++;
    } catch {
      // closed meanwhile
    }
  }
  return n;
}

/**
 * Local ports of TCP sockets on 127.0.0.1 in a state (/proc/net/tcp: 0A listening, 01 established):
 * this process's own, or with `any`, every one (a connection still in a listener's queue belongs
 * to no process yet).
 */
function loopbackPorts(state: '0A' | '01', any = false): number[] {
  const inodes = new Set<string>();
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/self/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // closed meanwhile
    }
  }
  const ports: number[] = [];
  for (const line of fs.readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10 || f[3] !== state || (!any && !inodes.has(f[9]!))) continue;
    const [ip, port] = f[1]!.split(':');
    if (ip === '0100007F') ports.push(parseInt(port!, 16));
  }
  return ports;
}

/** An HTTP server on 127.0.0.1 that answers "hi" and records every path it was asked for. */
async function loopbackServer(): Promise<{ hits: string[]; server: http.Server; port: number }> {
  const hits: string[] = [];
  const server = http.createServer((q, r) => {
    hits.push(q.url ?? '');
    r.end('hi');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { hits, server, port: (server.address() as AddressInfo).port };
}

/** This process's Landlock-mode TMPDIRs that exist now (in this uid's directory for them in either temp dir, or the host's temp dir). */
function ourTmpDirs(pid = process.pid): string[] {
  const list = (d: string) => (fs.existsSync(d) ? fs.readdirSync(d) : []);
  const parents = [...new Set([os.tmpdir(), '/tmp', '/var/tmp'])].map((b) => path.join(b, `${TMP_PARENT_PREFIX}${process.getuid?.() ?? 0}`));
  return [os.tmpdir(), ...parents].flatMap(list).filter((n) => n.startsWith(`process-sandbox-tmp-${pid}-`));
}

describe.each(MODES)('$name mode: a sandbox prepared ahead', ({ name: mode, skip }) => {
  let scene: Scene;
  beforeEach(() => {
    if (skip) return;
    clearSpares();
    scene = makeScene(`spare-${mode}`);
  });
  afterEach(() => {
    if (skip) return;
    clearSpares();
    setSpareIdleMs(30_000);
    scene.cleanup();
  });
  const policyFor = (ws: string) => modePolicy(mode, { filesystem: { write: [ws] } });
  const it = skip ? test.skip : test;

  /**
   * Two runs of the shape, so that a spare for it is prepared, and until it is ready (its rules
   * are made from what the paths name while it is prepared); then the caller's run uses it.
   */
  async function warm(policy: ReturnType<typeof policyFor>, cwd = scene.ws): Promise<void> {
    const ready = spareStats().ready;
    for (let i = 0; i < 2; i++) expect((await sh('true', { cwd, policy })).code).toBe(0);
    expect(await eventually(() => spareStats().ready > ready, 30_000), 'a spare was prepared').toBe(true);
  }

  it('serves the third spawn of a shape with its own argv, env, cwd, stdio and umask, and enforces the policy', async () => {
    const hostOom = fs.readFileSync('/proc/self/oom_score_adj', 'utf8');
    const policy = policyFor(scene.ws);
    await warm(policy);
    // Parked, no process of the spare has raised its OOM preference: the command still shares the
    // host's memory, and the OOM killer kills every process sharing its victim's memory.
    const parked = initChildren().flatMap((pid) => [pid, ...childrenOf(pid)]);
    expect(parked.length, 'init and the parked command').toBeGreaterThan(1);
    for (const pid of parked) expect(fs.readFileSync(`/proc/${pid}/oom_score_adj`, 'utf8'), `pid ${pid}`).toBe(hostOom);
    const before = spareStats();
    const old = process.umask(0o027);
    let r;
    try {
      r = await run('/bin/sh', ['-c', 'echo "x=$X cwd=$(pwd) umask=$(umask)"; read line; echo "in=$line"; echo made > f; touch f2; echo w=$?; { echo evil > "$OUT/evil"; } 2>/dev/null; echo o=$?; echo err >&2; exit 7'], {
        cwd: scene.ws,
        policy,
        env: { ...BASE_ENV, X: 'third', OUT: scene.out },
        input: 'hello\n',
      });
    } finally {
      process.umask(old);
    }
    expect(spareStats().used, 'the spawn was served by the spare').toBe(before.used + 1);
    expect(r.code).toBe(7);
    expect(r.stdout).toBe(`x=third cwd=${scene.ws} umask=0027\nin=hello\nw=0\no=2\n`); // dash: a failed redirection is 2
    expect(r.stderr).toBe('err\n');
    // Outside: the workspace got the file, with the umask of this spawn; nothing reached out/.
    expect(fs.readFileSync(path.join(scene.ws, 'f'), 'utf8')).toBe('made\n');
    expect(fs.statSync(path.join(scene.ws, 'f2')).mode & 0o777).toBe(0o640);
    expect(fs.existsSync(path.join(scene.out, 'evil'))).toBe(false);
    expect(r.enforcement.sandboxed).toBe(true);
    expect(r.enforcement.mechanisms.preparedAhead).toBe(true);
    // The OOM preference is the command's alone: the host, which the sandbox's init shares
    // memory with, keeps its own. (The next spare is made once the last exit was delivered.)
    expect(await eventually(() => spareStats().ready > before.ready + 0 && sparesSettled(), 5000)).toBe(true);
    const oom = await sh('cat /proc/self/oom_score_adj', { cwd: scene.ws, policy });
    expect(oom.stdout).toBe('1000\n');
    expect(oom.enforcement.mechanisms.preparedAhead).toBe(true);
    expect(fs.readFileSync('/proc/self/oom_score_adj', 'utf8')).toBe(hostOom);
    const fresh = await run('/bin/true', [], { cwd: scene.ws, policy: policyFor(scene.out), env: BASE_ENV });
    expect(fresh.enforcement.mechanisms.preparedAhead, 'another shape: made on the spot').toBeUndefined();
  });

  it('serves a network: full spawn whose command binds a TCP socket, as a fresh spawn does', async () => {
    const policy = modePolicy(mode, { filesystem: { write: [scene.ws] }, network: 'full' });
    const bind = `${PYTHON} -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print('bound')"`;
    const fresh = await sh(bind, { cwd: scene.ws, policy });
    expect(fresh.stdout, fresh.stderr).toBe('bound\n');
    await warm(policy);
    const before = spareStats();
    const r = await sh(bind, { cwd: scene.ws, policy });
    expect(spareStats().used, 'the spawn was served by the spare').toBe(before.used + 1);
    expect(r.stdout, r.stderr).toBe('bound\n');
  });

  it('leaves nothing in the workspace while it waits, and holds the missing protected paths while it runs', async () => {
    const policy = policyFor(scene.ws);
    await warm(policy);
    // Parked: no placeholder for .codex, .agents, .aws or .git (isolated mode makes them only
    // when the spare is used).
    expect(fs.readdirSync(scene.ws)).toEqual([]);
    const before = spareStats();
    const r = await sh('mkdir .codex 2>/dev/null; echo mk=$?; echo ok > f; echo f=$?; ls -A', { cwd: scene.ws, policy });
    expect(spareStats().used).toBe(before.used + 1);
    const [made, wrote, ...listed] = r.stdout.trim().split('\n');
    // Landlock mode holds carve-outs with its path supervisor where the kernel has one.
    if (mode === 'isolated' || caps.metadataSupervisor) expect([made, wrote]).toEqual(['mk=1', 'f=0']);
    else expect([made, wrote]).toEqual([expect.stringMatching(/^mk=\d$/), 'f=0']); // Landlock mode without it: a gap (README)
    // The spare's filter and supervisor leave isolated mode's placeholders out of listings, as a
    // fresh sandbox's do (where the kernel has seccomp user notification).
    if (caps.connectSupervisor) expect(listed).toEqual(['f']);
    fs.rmSync(path.join(scene.ws, '.codex'), { recursive: true, force: true });
    expect(await eventually(() => spareStats().ready > before.ready, 5000)).toBe(true);
    expect(fs.readdirSync(scene.ws)).toEqual(['f']);
  });

  it('is not used once a protected path it held as missing exists, which the run then protects', async () => {
    const policy = policyFor(scene.ws);
    await warm(policy);
    const before = spareStats();
    fs.mkdirSync(path.join(scene.ws, '.codex'));
    fs.writeFileSync(path.join(scene.ws, '.codex', 'config.toml'), 'model = "x"\n');
    const r = await sh('cat .codex/config.toml; { echo evil >> .codex/config.toml; } 2>/dev/null; echo w=$?', { cwd: scene.ws, policy });
    expect(r.stdout).toMatch(/^model = "x"\nw=\d\n$/);
    if (mode === 'isolated') {
      expect(spareStats().used, 'its plan held .codex as missing').toBe(before.used);
      expect(r.stdout).toMatch(/w=[1-9]/);
      expect(fs.readFileSync(path.join(scene.ws, '.codex', 'config.toml'), 'utf8')).toBe('model = "x"\n');
    } else if (caps.metadataSupervisor) {
      // Landlock mode: a spare may serve the run (its plan names the same paths), and its path
      // supervisor looks the carve-outs up again when it is used: .codex is held as it is now.
      expect(r.stdout).toMatch(/w=[1-9]/);
      expect(fs.readFileSync(path.join(scene.ws, '.codex', 'config.toml'), 'utf8')).toBe('model = "x"\n');
    }
  });

  it.skipIf(mode !== 'isolated')('is not used when a deny-read file was replaced after it was made (its mask covered the old one)', async () => {
    const secret = path.join(scene.ws, 'secret.txt');
    fs.writeFileSync(secret, 'old secret\n');
    const policy = modePolicy(mode, { filesystem: { write: [scene.ws], denyRead: [secret] } });
    const cat = 'cat secret.txt 2>/dev/null; echo r=$?';
    const ready = spareStats().ready;
    expect((await sh(cat, { cwd: scene.ws, policy })).stdout).toBe('r=1\n');
    expect((await sh(cat, { cwd: scene.ws, policy })).stdout).toBe('r=1\n');
    expect(await eventually(() => spareStats().ready > ready, 30_000), 'a spare was prepared').toBe(true);
    const before = spareStats();
    // The name now holds a new file; the spare's mask sits on the old one, which moved away.
    fs.renameSync(secret, path.join(scene.ws, 'old.txt'));
    fs.writeFileSync(secret, 'new secret\n');
    const r = await sh(cat, { cwd: scene.ws, policy });
    expect(r.stdout, 'the new file is masked too').toBe('r=1\n');
    expect(spareStats().used).toBe(before.used);
    expect(spareStats().discarded).toBe(before.discarded + 1);
    // Control: the moved file is readable (it is no longer the deny-read path).
    expect((await sh('cat old.txt', { cwd: scene.ws, policy })).stdout).toBe('old secret\n');
  });

  it.skipIf(mode !== 'isolated')('is not made from a plan that binds placeholders another run holds', async () => {
    const policy = policyFor(scene.ws);
    // A runs while B and C start: its placeholders (.codex, ...) exist, and their plans bind them
    // as existing paths. Those go when A ends, so no spare may be made from such a plan.
    const a = sh('sleep 1', { cwd: scene.ws, policy });
    expect(await eventually(() => fs.existsSync(path.join(scene.ws, '.codex')), 5000)).toBe(true);
    const before = spareStats();
    for (let i = 0; i < 3; i++) expect((await sh('true', { cwd: scene.ws, policy })).code).toBe(0);
    expect(spareStats().prepared, 'none made while A holds its placeholders').toBe(before.prepared);
    await a;
    // Control: without A, the same shape gets its spare again.
    await warm(policy);
    expect(spareStats().prepared).toBeGreaterThan(before.prepared);
  });

  it('is not used when the writable root was replaced by another directory after it was made', async () => {
    const policy = policyFor(scene.ws);
    await warm(policy);
    const before = spareStats();
    // The same path now names a new directory; the old one (which the spare's rule was made
    // from) lives on elsewhere.
    const moved = `${scene.ws}-moved`;
    fs.renameSync(scene.ws, moved);
    fs.mkdirSync(scene.ws);
    const r = await sh('echo here > f; echo w=$?', { cwd: scene.ws, policy });
    expect(r.stdout).toBe('w=0\n');
    const after = spareStats();
    expect(after.used, 'the spare was not used').toBe(before.used);
    expect(after.discarded).toBe(before.discarded + 1);
    expect(fs.readFileSync(path.join(scene.ws, 'f'), 'utf8')).toBe('here\n');
    expect(fs.existsSync(path.join(moved, 'f')), 'the old directory got nothing').toBe(false);
    // And the old directory is not writable from a sandbox of the new policy.
    const w = await sh(`echo x > ${moved}/g 2>/dev/null; echo w=$?`, { cwd: scene.ws, policy });
    expect(w.stdout).toBe('w=2\n');
    expect(fs.existsSync(path.join(moved, 'g'))).toBe(false);
    fs.rmSync(moved, { recursive: true, force: true });
  });

  it('is not used once the writable root is a symlink to another directory, whose target is what is written', async () => {
    const policy = policyFor(scene.ws);
    await warm(policy);
    const before = spareStats();
    // The workspace path now names a link to a directory elsewhere: the policy resolves to the
    // link's target, so it is another shape, and the spare made for the old directory goes unused.
    const target = path.join(scene.root, 'target');
    fs.mkdirSync(target);
    const old = `${scene.ws}-old`;
    fs.renameSync(scene.ws, old);
    fs.symlinkSync(target, scene.ws);
    const r = await sh(`echo t > f; echo w=$?; echo x > ${old}/g 2>/dev/null; echo o=$?`, { cwd: scene.ws, policy });
    expect(r.stdout).toBe('w=0\no=2\n');
    expect(spareStats().used).toBe(before.used);
    expect(fs.readFileSync(path.join(target, 'f'), 'utf8')).toBe('t\n');
    expect(fs.readdirSync(old), 'the old directory got nothing').toEqual([]);
    fs.unlinkSync(scene.ws);
    fs.renameSync(old, scene.ws);
  });

  it('is not used for another policy, which gets exactly its own rights', async () => {
    await warm(policyFor(scene.ws));
    const before = spareStats();
    const other = path.join(scene.root, 'other');
    fs.mkdirSync(other);
    const r = await sh(`echo a > ${other}/a; echo a=$?; echo b > ${scene.ws}/b 2>/dev/null; echo b=$?`, { cwd: other, policy: policyFor(other) });
    expect(r.stdout).toBe('a=0\nb=2\n');
    expect(spareStats().used).toBe(before.used);
    expect(fs.existsSync(path.join(other, 'a'))).toBe(true);
    expect(fs.existsSync(path.join(scene.ws, 'b'))).toBe(false);
  });

  it('fails like a fresh spawn when the workspace was removed; the spare made for the old one is never used', async () => {
    const policy = policyFor(scene.ws);
    await warm(policy);
    fs.rmSync(scene.ws, { recursive: true, force: true });
    const second = await sh('echo two > f', { cwd: scene.ws, policy }).catch((e: unknown) => e);
    expect(second).toMatchObject({ name: 'SandboxError', code: 'EINVALID_ARGUMENT' });
    expect(fs.existsSync(scene.ws)).toBe(false);
    // Control: a new directory at that path is the workspace, written for real, by a sandbox made
    // afresh (the spare's rule was made from the removed directory).
    const before = spareStats();
    fs.mkdirSync(scene.ws);
    expect((await sh('echo three > f; echo $?', { cwd: scene.ws, policy })).stdout).toBe('0\n');
    expect(fs.readFileSync(path.join(scene.ws, 'f'), 'utf8')).toBe('three\n');
    expect(spareStats().used).toBe(before.used);
    expect(spareStats().discarded).toBe(before.discarded + 1);
    clearSpares();
    expect(await eventually(() => initChildren().length === 0, 5000), 'no sandbox process is left').toBe(true);
    expect(ourTmpDirs()).toEqual([]);
  });

  it('is not used when it died while it waited (killed from outside); the spawn is made on the spot', async () => {
    const policy = policyFor(scene.ws);
    await warm(policy);
    const inits = initChildren();
    expect(inits.length, 'the spare is waiting').toBe(1);
    // Its init and everything below it (the command; isolated: also the helper that made it).
    const tree = [inits[0]!, ...childrenOf(inits[0]!)];
    expect(tree.length).toBeGreaterThan(1);
    for (const pid of tree) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already (isolated: init's death ends the namespace)
      }
    }
    expect(await eventually(() => tree.every((pid) => !alive(pid)), 5000), 'all of it is dead').toBe(true);
    const before = spareStats();
    const r = await sh('echo ok > f; echo $?', { cwd: scene.ws, policy });
    expect(r.stdout).toBe('0\n');
    expect(fs.readFileSync(path.join(scene.ws, 'f'), 'utf8')).toBe('ok\n');
    expect(spareStats().used).toBe(before.used);
    expect(spareStats().discarded).toBe(before.discarded + 1);
  });

  it('reports a missing command as a fresh spawn does, and the next spawn works', async () => {
    const policy = policyFor(scene.ws);
    await warm(policy);
    const before = spareStats();
    const e = await run('/nonexistent/cmd', [], { cwd: scene.ws, policy, env: BASE_ENV }).catch((x: unknown) => x);
    expect(e).toMatchObject({ name: 'SandboxError', code: 'ENOT_FOUND' });
    expect(await eventually(() => initChildren().length <= 1, 5000), 'only a new spare may be left').toBe(true);
    const r = await sh('echo ok', { cwd: scene.ws, policy });
    expect(r.stdout).toBe('ok\n');
    expect(await eventually(() => spareStats().prepared > before.prepared, 5000), 'and a new spare is made').toBe(true);
  });

  it('serves 8 concurrent spawns of one shape correctly', async () => {
    const policy = policyFor(scene.ws);
    await warm(policy);
    const rs = await Promise.all(
      Array.from({ length: 8 }, (_, i) => sh(`echo ${i} > f${i}; cat f${i}; echo x > ${scene.out}/x${i} 2>/dev/null; echo o=$?`, { cwd: scene.ws, policy })),
    );
    rs.forEach((r, i) => expect(r.stdout).toBe(`${i}\no=2\n`));
    for (let i = 0; i < 8; i++) expect(fs.readFileSync(path.join(scene.ws, `f${i}`), 'utf8')).toBe(`${i}\n`);
    expect(fs.readdirSync(scene.out).filter((n) => n.startsWith('x'))).toEqual([]);
  });

  it('serves network-proxy spawns: each reaches the proxy on its own port, and nothing directly', async () => {
    const { hits, server, port } = await loopbackServer();
    const sockets = socketFds();
    try {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] }, network: { proxy: { allow: ['127.0.0.1'] } } });
      await warm(policy);
      expect(socketFds(), 'the spare holds its sockets (the go socket, the proxy listener)').toBeGreaterThan(sockets);
      const proxies = new Set<string>();
      for (let i = 0; i < 3; i++) {
        const before = spareStats();
        const r = await sh(
          `curl -s -m 10 http://127.0.0.1:${port}/via${i}; echo " c=$?"; curl -s -m 5 --noproxy '*' http://127.0.0.1:${port}/direct${i} >/dev/null 2>&1; echo "d=$?"; echo "$HTTP_PROXY"`,
          { cwd: scene.ws, policy },
        );
        expect(spareStats().used, `run ${i} was served by a spare`).toBe(before.used + 1);
        expect(r.enforcement.mechanisms.preparedAhead).toBe(true);
        const [via, direct, proxyUrl] = r.stdout.trim().split('\n');
        expect(via).toBe('hi c=0');
        expect(direct).toMatch(/^d=[1-9]\d*$/);
        expect(proxyUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
        proxies.add(proxyUrl!);
        expect(await eventually(() => spareStats().ready > before.ready, 5000), 'the next spare is ready').toBe(true);
      }
      // Outside: the server saw exactly the proxied requests; each run had its own port.
      expect(hits).toEqual(['/via0', '/via1', '/via2']);
      expect(proxies.size).toBe(3);
      // Another network policy is another shape: not served by this spare, and held to its own
      // allow-list (the proxy refuses the loopback server, which hears nothing).
      const other = modePolicy(mode, { filesystem: { write: [scene.ws] }, network: { proxy: { allow: ['example.com'] } } });
      const o = await sh(`curl -s -m 10 -o /dev/null -w '%{http_code}' http://127.0.0.1:${port}/other; echo " c=$?"`, { cwd: scene.ws, policy: other });
      expect(o.stdout).toBe('403 c=0\n');
      expect(o.enforcement.mechanisms.preparedAhead).toBeUndefined();
      expect(hits).toEqual(['/via0', '/via1', '/via2']);
      // A spare that cannot be used (its writable root was replaced): the spawn is made on the
      // spot, with a proxy and a port of its own, and works the same.
      const before = spareStats();
      fs.renameSync(scene.ws, `${scene.ws}-old`);
      fs.mkdirSync(scene.ws);
      const r = await sh(`curl -s -m 10 http://127.0.0.1:${port}/fresh; echo " c=$?"`, { cwd: scene.ws, policy });
      expect(r.stdout).toBe('hi c=0\n');
      expect(spareStats().used).toBe(before.used);
      expect(spareStats().discarded).toBe(before.discarded + 1);
      expect(hits.at(-1)).toBe('/fresh');
      fs.rmSync(`${scene.ws}-old`, { recursive: true, force: true });
      // A spare discarded unused closes what it held, the listener included.
      clearSpares();
      expect(await eventually(() => socketFds() === sockets, 5000), 'no socket of the spare is left').toBe(true);
    } finally {
      server.close();
    }
  });

  it.skipIf(mode !== 'landlock')('drops what another local process queued on a waiting spare\'s proxy listener, rather than serve it as the run\'s', async () => {
    const { hits, server, port } = await loopbackServer();
    let stranger: ReturnType<typeof spawnChild> | undefined;
    try {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] }, network: { proxy: { allow: ['127.0.0.1'] } } });
      await warm(policy);
      // The waiting spare's listener on 127.0.0.1 (the earlier runs' proxies are closed).
      const listeners = loopbackPorts('0A').filter((p) => p !== port);
      expect(listeners, 'the waiting spare holds one loopback listener').toHaveLength(1);
      const spareListener = listeners[0]!;
      // Something else on the host, unsandboxed, connects to it while the spare waits: the kernel
      // completes the connection into the listener's queue, and curl sends its request.
      stranger = spawnChild('curl', ['-s', '-m', '20', '-x', `http://127.0.0.1:${spareListener}`, `http://127.0.0.1:${port}/stranger`], { stdio: 'ignore' });
      const strangerExit = new Promise<number | null>((r) => stranger!.on('exit', (c) => r(c)));
      expect(await eventually(() => loopbackPorts('01', true).includes(spareListener), 5000), 'the connection is queued').toBe(true);
      const before = spareStats();
      const r = await sh(`curl -s -m 10 http://127.0.0.1:${port}/via; echo " c=$?"`, { cwd: scene.ws, policy });
      expect(spareStats().used, 'the run was served by the spare').toBe(before.used + 1);
      expect(r.stdout).toBe('hi c=0\n');
      // The stranger's connection was closed unanswered; the server heard the run only.
      expect(await strangerExit, 'curl got no reply (52: empty reply, 56: reset)').not.toBe(0);
      expect(hits).toEqual(['/via']);
    } finally {
      stranger?.kill('SIGKILL');
      server.close();
    }
  });

  it.skipIf(mode !== 'landlock')('a run served by a spare serves only its own connections: another local process connecting to its proxy gets nothing', async () => {
    const { hits, server, port } = await loopbackServer();
    let p: ReturnType<typeof spawn> | undefined;
    try {
      const policy = modePolicy(mode, { filesystem: { write: [scene.ws] }, network: { proxy: { allow: ['127.0.0.1'] } } });
      await warm(policy);
      const before = spareStats();
      // One request now, then one per line read.
      const get = (name: string) => `curl -s -m 10 http://127.0.0.1:${port}/${name}; echo " c=$?"`;
      p = spawn('/bin/sh', ['-c', `echo "$HTTP_PROXY"; ${get('first')}; while read n; do ${get('"$n"')}; done`], { cwd: scene.ws, env: BASE_ENV, policy, stdio: 'pipe' });
      let out = '';
      p.stdout!.on('data', (d: Buffer) => (out += d));
      expect(await eventually(() => out.includes(' c='), 20_000), out).toBe(true);
      expect(spareStats().used, 'the run was served by the spare').toBe(before.used + 1);
      const proxyPort = Number(/^http:\/\/127\.0\.0\.1:(\d+)$/m.exec(out)?.[1]);
      expect(out.split('\n').slice(1, 2), out).toEqual(['hi c=0']);
      // An unsandboxed curl on the host, through the run's proxy: closed unanswered.
      const stranger = spawnChild('curl', ['-s', '-m', '20', '-x', `http://127.0.0.1:${proxyPort}`, `http://127.0.0.1:${port}/stranger`], { stdio: 'ignore' });
      const code = await new Promise<number | null>((r) => stranger.on('exit', (c) => r(c)));
      expect(code, 'curl got no reply (52: empty reply, 56: reset)').not.toBe(0);
      // The run is still served.
      p.stdin!.write('second\n');
      expect(await eventually(() => out.split(' c=').length === 3, 20_000), out).toBe(true);
      expect(out.split('\n').slice(1, 3)).toEqual(['hi c=0', 'hi c=0']);
      expect(hits).toEqual(['/first', '/second']);
    } finally {
      p?.stdin?.end();
      p?.kill('SIGKILL');
      server.close();
    }
  });

  /** A command on a terminal made inside the sandbox (`pty`): its output, once it has exited. */
  async function onPty(script: string, policy: ReturnType<typeof policyFor>, size: { cols: number; rows: number }) {
    const p = spawn('/bin/sh', ['-c', script], { pty: size, policy, cwd: scene.ws, env: BASE_ENV });
    let out = '';
    p.onData((d) => (out += d));
    const closed = await new Promise<[number | null, string | null]>((r) => p.on('close', (c, sig) => r([c, sig])));
    return { closed, out, enforcement: p.enforcement };
  }

  it.skipIf(mode !== 'isolated')('serves spawns with a terminal inside the sandbox, in each spawn\'s own size, as its controlling terminal', async () => {
    const policy = policyFor(scene.ws);
    // The shell leads the session whose controlling terminal this is; python is its child.
    const fg = `${PYTHON} -c "import os; print('fg', os.tcgetpgrp(0) == os.getpgrp(), os.getsid(0) == os.getppid())"`;
    const script = (n: number) =>
      `stty size; tty; test -t 0 && test -t 1 && test -t 2 && echo all-ttys; ${fg}; echo x > f${n}; echo w=$?; { echo y > ${scene.out}/y${n}; } 2>/dev/null; echo o=$?`;
    const ready = spareStats().ready;
    for (let i = 0; i < 2; i++) expect((await onPty('true', policy, { cols: 80, rows: 24 })).closed).toEqual([0, null]);
    expect(await eventually(() => spareStats().ready > ready, 30_000), 'a spare was prepared').toBe(true);
    for (const size of [{ cols: 100, rows: 30 }, { cols: 132, rows: 43 }]) {
      const before = spareStats();
      const r = await onPty(script(size.cols), policy, size);
      expect(spareStats().used, `served by a spare (${size.cols}x${size.rows})`).toBe(before.used + 1);
      expect(r.enforcement.mechanisms.preparedAhead).toBe(true);
      expect(r.enforcement.mechanisms.pty).toBe(true);
      expect(r.closed).toEqual([0, null]);
      const lines = r.out.split(/\r?\n/);
      expect(lines[0], 'the size of this spawn, not the one it was prepared with').toBe(`${size.rows} ${size.cols}`);
      expect(lines[1]).toMatch(/^\/dev\/pts\/\d+$/);
      expect(lines.slice(2, 6)).toEqual(['all-ttys', 'fg True True', 'w=0', 'o=2']);
      expect(await eventually(() => spareStats().ready > before.ready, 5000), 'the next spare is ready').toBe(true);
    }
    expect(fs.readdirSync(scene.out).filter((n) => n.startsWith('y'))).toEqual([]);
    expect(fs.readdirSync(scene.ws).filter((n) => n.startsWith('f'))).toHaveLength(2);
    // A spawn without a terminal is another shape: made on the spot, not from the terminal's spare.
    const before = spareStats();
    const plainRun = await sh('test -t 0; echo t=$?', { cwd: scene.ws, policy });
    expect(plainRun.stdout).toBe('t=1\n');
    expect(spareStats().used).toBe(before.used);
    // The spare with a terminal still waits, holding its master; discarded, it closes it.
    const masters = () => fs.readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return fs.readlinkSync(`/proc/self/fd/${fd}`).endsWith('ptmx');
      } catch {
        return false;
      }
    }).length;
    expect(masters()).toBe(1);
    clearSpares();
    expect(masters()).toBe(0);
  });

  it('is discarded when unused, with its processes, TMPDIR and cgroup', async () => {
    setSpareIdleMs(100);
    const policy = policyFor(scene.ws);
    // Counted before the warm-up: on a loaded host the 100 ms can pass before warm() returns, and a
    // discard already made then is the one this test waits for.
    const before = spareStats();
    await warm(policy);
    // The spare exists now (prepared, or being prepared, or already discarded).
    expect(spareStats().prepared).toBeGreaterThan(before.prepared);
    expect(await eventually(() => spareStats().discarded > before.discarded, 5000), 'discarded after 100 ms').toBe(true);
    expect(await eventually(() => initChildren().length === 0, 5000), 'its processes are gone').toBe(true);
    // Reaped on a thread of libuv's pool; what it held is released after that.
    expect(await eventually(() => ourTmpDirs().length === 0, 5000), 'its TMPDIR is gone').toBe(true);
  });

  it('leaves no process, TMPDIR or cgroup behind when the host exits right after spawning', () => {
    const script = path.join(scene.root, `spare-exit-${process.pid}.js`);
    fs.writeFileSync(
      script,
      `const { run } = require(${JSON.stringify(DIST_INDEX)});
       (async () => {
         const policy = { mode: 'landlock', degraded: true, filesystem: { write: [${JSON.stringify(scene.ws)}] } };
         const { spareStats } = require(${JSON.stringify(path.join(path.dirname(DIST_INDEX), 'platform', 'linux', 'spare.js'))});
         const go = () => run('/bin/true', [], { cwd: ${JSON.stringify(scene.ws)}, policy, env: { PATH: '/usr/bin:/bin' } });
         await go();
         await go();
         while (spareStats().ready < 1) await new Promise((r) => setTimeout(r, 5));
         await go();
         console.log(process.pid, JSON.stringify(spareStats()));
       })();`,
    );
    const out = execFileSync(process.execPath, [script], { encoding: 'utf8', timeout: 30_000 }).trim().split(' ');
    const pid = Number(out[0]);
    const stats = JSON.parse(out[1]!) as { prepared: number; used: number };
    expect(stats.used, 'the third run was served by a spare').toBe(1);
    expect(stats.prepared).toBeGreaterThanOrEqual(1); // the next one begins once the exit was delivered
    // Nothing of the exited host: its spare's init and command shared its memory, so their
    // cmdline is the host's.
    const leftovers = () =>
      fs.readdirSync('/proc').filter((n) => {
        try {
          return /^\d+$/.test(n) && fs.readFileSync(`/proc/${n}/cmdline`, 'utf8').includes(script);
        } catch {
          return false;
        }
      });
    expect(leftovers()).toEqual([]);
    expect(ourTmpDirs(pid)).toEqual([]);
    // (find exits non-zero on the directories this uid cannot read: its output is what counts.)
    const groups = execFileSync('sh', ['-c', `find /sys/fs/cgroup -maxdepth 8 -name 'psb-${pid}-*' 2>/dev/null; true`], { encoding: 'utf8' }).trim();
    expect(groups).toBe('');
  });
});
