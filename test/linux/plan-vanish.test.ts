/**
 * A directory the planner saw can vanish before init mounts (a spawn once failed with
 * "mount step 'pin' ... ENOENT" when another test's scratch tree under a writable /tmp was removed
 * in between). Deterministic here: planLinux is wrapped so that a chosen directory is removed
 * right after the plan is made, before the addon runs it.
 *
 *   - a nested repository (protected only because it existed) that vanishes: the spawn succeeds
 *     and what still exists stays protected (checked from outside);
 *   - a name held even when missing (the workspace's own .git/hooks) whose directory vanishes:
 *     init fails on it, and the spawn is planned once more, which holds the name with a
 *     placeholder; nothing unprotected is ever creatable there.
 */
import fs from 'node:fs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import { run } from '../../lib/index';
import { MountKind, VANISH_OK } from '../../lib/platform/linux/mounts';
import { MODES, modePolicy } from '../helpers/capabilities';
import { git } from '../helpers/git';
import { BASE_ENV, makeScene, NODE, PROBE, type Scene } from '../helpers/sandbox';

/** Removed after the next plan is made (then cleared). */
const state = vi.hoisted(() => ({ vanish: null as string | null, plans: 0, mounts: [] as Array<{ kind: number; path: string; arg?: number }> }));

vi.mock('../../lib/platform/linux/plan', async (importOriginal) => {
  const { planLinuxThen } = await import('../helpers/plan-hook');
  const nodeFs = await import('node:fs');
  return planLinuxThen(await importOriginal<typeof import('../../lib/platform/linux/plan')>(), (plan) => {
    state.plans++;
    state.mounts = plan.native.mounts ?? [];
    if (state.vanish !== null) {
      nodeFs.rmSync(state.vanish, { recursive: true, force: true });
      state.vanish = null;
    }
  });
});

const isolated = MODES.find((m) => m.name === 'isolated')!;

describe.skipIf(isolated.skip)('a directory that vanishes between planning and the mounts (isolated mode)', () => {
  let scene: Scene;
  beforeEach(() => {
    scene = makeScene('vanish');
  });
  afterEach(() => {
    state.vanish = null;
    scene.cleanup();
  });

  it('a vanished nested repository is skipped; the spawn succeeds and what remains stays protected', async () => {
    git(scene.ws, 'init', '-q');
    fs.mkdirSync(`${scene.ws}/scratch/proj`, { recursive: true });
    git(`${scene.ws}/scratch/proj`, 'init', '-q');
    fs.mkdirSync(`${scene.ws}/keep`);
    git(`${scene.ws}/keep`, 'init', '-q');
    fs.writeFileSync(`${scene.ws}/keep/.git/hooks/pre-commit`, 'original');
    const policy = modePolicy('isolated', { filesystem: { write: [scene.ws] } });
    state.vanish = `${scene.ws}/scratch`;
    const r = await run(
      NODE,
      [PROBE, JSON.stringify([['write', `${scene.ws}/keep/.git/hooks/pre-commit`, 'pwned'], ['write', `${scene.ws}/free.txt`, 'ok'], ['mkdir', `${scene.ws}/scratch`]])],
      { cwd: scene.ws, env: BASE_ENV, policy },
    );
    // The plan really had steps on the vanished tree (a pin and the repository's hooks)...
    expect(state.mounts).toEqual(expect.arrayContaining([{ kind: MountKind.Pin, path: `${scene.ws}/scratch/proj/.git`, arg: VANISH_OK }]));
    expect(state.mounts).toEqual(expect.arrayContaining([{ kind: MountKind.BindRo, path: `${scene.ws}/scratch/proj/.git/hooks`, arg: VANISH_OK }]));
    // ...and the spawn went through: the probe ran, the workspace is writable, the other
    // repository's hook is unchanged (from outside), scratch was gone (mkdir worked), and the
    // report is unchanged.
    expect(r.stdout, r.stderr).toMatch(/PROBE \["(EROFS|EACCES|EPERM)","ok","ok"\]/);
    expect(fs.readFileSync(`${scene.ws}/keep/.git/hooks/pre-commit`, 'utf8')).toBe('original');
    expect(fs.readFileSync(`${scene.ws}/free.txt`, 'utf8')).toBe('ok');
    expect(r.enforcement.guarantees.protectedPaths).toBe('enforced');
    // Control: without the removal the same run protects scratch/proj too.
    fs.rmSync(`${scene.ws}/scratch`, { recursive: true, force: true });
    fs.mkdirSync(`${scene.ws}/scratch/proj`, { recursive: true });
    git(`${scene.ws}/scratch/proj`, 'init', '-q');
    const c = await run(NODE, [PROBE, JSON.stringify([['write', `${scene.ws}/scratch/proj/.git/hooks/pre-commit`, 'pwned']])], { cwd: scene.ws, env: BASE_ENV, policy });
    expect(c.stdout).toMatch(/PROBE \["(EROFS|EACCES|EPERM)"\]/);
    expect(fs.existsSync(`${scene.ws}/scratch/proj/.git/hooks/pre-commit`)).toBe(false);
  });

  it('a vanished directory under a name held even when missing is planned again: the name stays held', async () => {
    git(scene.ws, 'init', '-q');
    const policy = modePolicy('isolated', { filesystem: { write: [scene.ws] } });
    state.vanish = `${scene.ws}/.git`;
    state.plans = 0;
    const r = await run(NODE, [PROBE, JSON.stringify([['mkdir', `${scene.ws}/.git`], ['mkdir', `${scene.ws}/.git/hooks`], ['write', `${scene.ws}/free.txt`, 'ok']])], {
      cwd: scene.ws,
      env: BASE_ENV,
      policy,
    });
    // The first plan bound the existing .git/hooks (a held name, not marked VANISH_OK); init
    // failed on it, and the second plan held the vanished .git with a placeholder.
    expect(state.plans).toBe(2);
    expect(state.mounts).toEqual(expect.arrayContaining([{ kind: MountKind.GhostDir, path: `${scene.ws}/.git` }]));
    expect(r.stdout, r.stderr).toMatch(/PROBE \["(EEXIST|EROFS|EACCES|EPERM)","(EROFS|EACCES|EPERM)","ok"\]/);
    // From outside: no repository was created, the placeholder is gone, the run's own write landed.
    expect(fs.existsSync(`${scene.ws}/.git`)).toBe(false);
    expect(fs.readFileSync(`${scene.ws}/free.txt`, 'utf8')).toBe('ok');
  });
});
