/**
 * filesystem.caches 'host-writable' takes the cache directories from the host process's own
 * environment (or the defaults under its home), never from the command's: a command environment
 * naming another repository or $HOME as its XDG_CACHE_HOME must not make that writable. A cache
 * that would be /, the home directory, or an ancestor of either or of a writable root is refused
 * before anything runs. Inside the cache roots the carve-outs of any writable root hold (.git
 * hooks and config, .codex ...). Positive controls: the host's own caches stay writable.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { run } from '../../lib/index';
import { SandboxError } from '../../lib/errors';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { withHostCacheEnv } from '../helpers/host-env';
import { BASE_ENV, expectUnchanged, makeScene, sh, snapshot, type Scene } from '../helpers/sandbox';

function gitRepo(dir: string): void {
  fs.mkdirSync(dir, { recursive: true });
  execFileSync('git', ['init', '-q', dir]);
}

describe.runIf(caps.linux).each(MODES)("caches 'host-writable' ($name mode)", ({ name: mode, skip }) => {
  let scene: Scene;
  /** The host process's home: .cache and .npm exist, and a key file the command must not reach. */
  let home: string;
  /** Another repository, which a command-chosen cache variable names. */
  let repo: string;
  beforeEach((ctx) => {
    if (skip) ctx.skip(skip);
    if (!caps.git) ctx.skip('git is not installed');
    scene = makeScene(`caches-rw-${mode}`);
    home = path.join(scene.root, 'home');
    fs.mkdirSync(path.join(home, '.cache'), { recursive: true });
    fs.mkdirSync(path.join(home, '.npm'));
    fs.mkdirSync(path.join(home, '.ssh'));
    fs.writeFileSync(path.join(home, '.ssh', 'authorized_keys'), 'ssh-ed25519 AAAA the-owner\n');
    repo = path.join(scene.root, 'other-repo');
    gitRepo(repo);
  });
  afterEach(() => scene?.cleanup());

  const policy = () => modePolicy(mode, { filesystem: { write: [scene.ws], caches: 'host-writable' } });

  it("a command's XDG_CACHE_HOME naming another repository does not make it writable; the host's caches are", async () => {
    const before = snapshot(repo);
    const hook = path.join(repo, '.git', 'hooks', 'pre-commit');
    const r = await withHostCacheEnv({ HOME: home }, () =>
      sh(
        [
          `printf '#!/bin/sh\\necho planted\\n' > "${hook}" && echo HOOK-WRITTEN`,
          `echo x > "${repo}/planted" && echo REPO-WRITTEN`,
          // The host's own caches (HOME of the host process), written by path.
          `echo ok > "${home}/.cache/own" && echo CACHE-WRITTEN`,
          `echo ok > "${home}/.npm/own" && echo NPM-WRITTEN`,
        ].join('\n'),
        { cwd: scene.ws, env: { ...BASE_ENV, HOME: home, XDG_CACHE_HOME: repo, npm_config_cache: repo }, policy: policy() },
      ),
    );
    expect(r.stdout).not.toContain('HOOK-WRITTEN');
    expect(r.stdout).not.toContain('REPO-WRITTEN');
    expect(fs.existsSync(hook)).toBe(false);
    expectUnchanged(before, snapshot(repo), 'the other repository');
    // Positive control: the host's caches are writable roots, and the report names them.
    expect(r.stdout, r.stderr).toContain('CACHE-WRITTEN');
    expect(r.stdout).toContain('NPM-WRITTEN');
    expect(fs.readFileSync(path.join(home, '.cache', 'own'), 'utf8')).toBe('ok\n');
    const report = r.enforcement.mechanisms.caches as Record<string, string>;
    expect(report['xdg-cache']).toBe(`host ${path.join(home, '.cache')}, writable (protected paths inside it stay read-only)`);
    expect(report.npm).toMatch(/^host .*\.npm, writable/);
  });

  it("the CLI: --env XDG_CACHE_HOME=<another repository> does not make it writable; the CLI's own caches are", (ctx) => {
    const cli = path.resolve(__dirname, '..', '..', 'dist', 'cli.js');
    if (!fs.existsSync(cli)) ctx.skip('dist/cli.js is not built (npm run build:ts)');
    const hook = path.join(repo, '.git', 'hooks', 'pre-commit');
    const before = snapshot(repo);
    const script = [`echo x > "${hook}" && echo HOOK-WRITTEN`, `echo ok > "${home}/.cache/own" && echo CACHE-WRITTEN`, 'true'].join('\n');
    const flags = ['--mode', mode, ...(mode === 'landlock' ? ['--degraded'] : []), '--cwd', scene.ws, '--write', scene.ws, '--caches', 'host-writable'];
    const res = spawnSync(process.execPath, [cli, 'run', ...flags, '--env', `XDG_CACHE_HOME=${repo}`, '--', '/bin/sh', '-c', script], {
      encoding: 'utf8',
      env: { PATH: BASE_ENV.PATH!, HOME: home }, // the CLI's own environment: its caches are under this HOME
      timeout: 60_000,
    });
    expect(res.status, res.stderr).toBe(0);
    expect(res.stdout).not.toContain('HOOK-WRITTEN');
    expect(fs.existsSync(hook)).toBe(false);
    expectUnchanged(before, snapshot(repo), 'the other repository');
    expect(res.stdout).toContain('CACHE-WRITTEN');
    expect(fs.readFileSync(path.join(home, '.cache', 'own'), 'utf8')).toBe('ok\n');
  });

  it("a command's XDG_CACHE_HOME=$HOME does not make the home writable (~/.ssh/authorized_keys unchanged)", async () => {
    const keys = path.join(home, '.ssh', 'authorized_keys');
    const before = snapshot(home);
    const r = await withHostCacheEnv({ HOME: path.join(scene.root, 'host-home-absent') }, () =>
      sh(`echo 'ssh-ed25519 AAAA attacker' >> "${keys}" && echo APPENDED; echo done`, {
        cwd: scene.ws,
        env: { ...BASE_ENV, HOME: home, XDG_CACHE_HOME: home },
        policy: policy(),
      }),
    );
    expect(r.stdout, r.stderr).toContain('done'); // it ran
    expect(r.stdout).not.toContain('APPENDED');
    expect(fs.readFileSync(keys, 'utf8')).toBe('ssh-ed25519 AAAA the-owner\n');
    expectUnchanged(before, snapshot(home), 'the home directory');
  });

  it('carve-outs hold inside a cache root: .git hooks and config of a repository there, and a missing .git', async () => {
    // The host's own XDG_CACHE_HOME happens to be a repository; its metadata is protected as in
    // any writable root. A missing .git in another cache root cannot be created.
    const hook = path.join(repo, '.git', 'hooks', 'pre-commit');
    const config = path.join(repo, '.git', 'config');
    const configBefore = fs.readFileSync(config, 'utf8');
    const r = await withHostCacheEnv({ HOME: home, XDG_CACHE_HOME: repo }, () =>
      sh(
        [
          `printf '#!/bin/sh\\necho planted\\n' > "${hook}" && echo HOOK-WRITTEN`,
          `echo '[core]\n\thooksPath = /tmp' >> "${config}" && echo CONFIG-WRITTEN`,
          `mkdir -p "${home}/.npm/.git/hooks" && echo GIT-CREATED`,
          `mkdir "${home}/.npm/.codex" && echo CODEX-CREATED`,
          `echo ok > "${repo}/cached" && echo CACHE-WRITTEN`,
        ].join('\n'),
        { cwd: scene.ws, env: { ...BASE_ENV, HOME: home }, policy: policy() },
      ),
    );
    for (const m of ['HOOK-WRITTEN', 'CONFIG-WRITTEN', 'GIT-CREATED', 'CODEX-CREATED']) expect(r.stdout, r.stderr).not.toContain(m);
    expect(fs.existsSync(hook)).toBe(false);
    expect(fs.readFileSync(config, 'utf8')).toBe(configBefore);
    expect(fs.existsSync(path.join(home, '.npm', '.git', 'hooks'))).toBe(false);
    // Positive control: the cache root itself is writable.
    expect(r.stdout).toContain('CACHE-WRITTEN');
    expect(fs.readFileSync(path.join(repo, 'cached'), 'utf8')).toBe('ok\n');
    expect(r.enforcement.mechanisms.caches).toMatchObject({ 'xdg-cache': `host ${repo}, writable (protected paths inside it stay read-only)` });
  });

  /** The run must be refused with EUNSUPPORTED_POLICY naming `what`, and the command never started. */
  async function expectRefused(hostVars: Record<string, string>, what: RegExp): Promise<void> {
    const marker = path.join(scene.ws, 'ran');
    let err: unknown;
    try {
      await withHostCacheEnv(hostVars, () => sh(`touch "${marker}"`, { cwd: scene.ws, env: { ...BASE_ENV }, policy: policy() }));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('EUNSUPPORTED_POLICY');
    expect((err as Error).message).toMatch(what);
    expect(fs.existsSync(marker), 'the command ran').toBe(false);
  }

  it("the host's XDG_CACHE_HOME=$HOME, an ancestor of it, / or an ancestor of a writable root is refused before anything runs", async () => {
    await expectRefused({ HOME: home, XDG_CACHE_HOME: home }, new RegExp(`xdg-cache cache ${home} is the home directory`));
    await expectRefused({ HOME: home, CARGO_HOME: scene.root }, new RegExp(`cargo cache ${scene.root} is an ancestor of the home directory`));
    await expectRefused({ HOME: home, XDG_CACHE_HOME: '/' }, /xdg-cache cache \/ is the filesystem root/);
    // An ancestor of the writable root (the workspace), not of the home.
    const outer = path.join(scene.root, 'outer');
    fs.mkdirSync(path.join(outer, 'ws'), { recursive: true });
    const ws = path.join(outer, 'ws');
    let err: unknown;
    try {
      await withHostCacheEnv({ HOME: home, PIP_CACHE_DIR: outer }, () =>
        run('/bin/sh', ['-c', `touch "${ws}/ran"`], { cwd: ws, env: { ...BASE_ENV }, policy: modePolicy(mode, { filesystem: { write: [ws], caches: 'host-writable' } }) }),
      );
    } catch (e) {
      err = e;
    }
    expect((err as SandboxError)?.code).toBe('EUNSUPPORTED_POLICY');
    expect((err as Error).message).toContain(`pip cache ${outer} is an ancestor of the writable root ${ws}`);
    expect(fs.existsSync(path.join(ws, 'ran'))).toBe(false);
  });
});
