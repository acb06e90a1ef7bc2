/**
 * A writable root swapped for a symlink between planning and the mounts (isolated mode). The
 * root was canonical when planned (an exec-server floor judged exactly that path); a command
 * already writing above it can replace the directory with a link to anywhere else. Binding by
 * path would follow the link and open its target read-write; init pins the root without following
 * any link (openat2 RESOLVE_NO_SYMLINKS), so the spawn fails closed and the target stays as it was.
 * Landlock mode opens its write rules the same way when the command starts.
 * Deterministic here: planLinux is wrapped so that the swap happens right after the plan is made.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import { run } from '../../lib/index';
import { MountKind } from '../../lib/platform/linux/mounts';
import { MODES, modePolicy } from '../helpers/capabilities';
import { BASE_ENV, makeScene, NODE, PROBE, type Scene } from '../helpers/sandbox';

/** [directory, link target]: the directory becomes a symlink to the target after the next plan. */
const state = vi.hoisted(() => ({ swap: null as [string, string] | null, mounts: [] as Array<{ kind: number; path: string }> }));

vi.mock('../../lib/platform/linux/plan', async (importOriginal) => {
  const { planLinuxThen } = await import('../helpers/plan-hook');
  const nodeFs = await import('node:fs');
  return planLinuxThen(await importOriginal<typeof import('../../lib/platform/linux/plan')>(), (plan) => {
    state.mounts = plan.native.mounts ?? [];
    if (state.swap !== null) {
      const [dir, target] = state.swap;
      nodeFs.rmSync(dir, { recursive: true, force: true });
      nodeFs.symlinkSync(target, dir);
      state.swap = null;
    }
  });
});

for (const mode of MODES) {
describe.skipIf(mode.skip)(`a writable root swapped for a symlink after planning (${mode.name} mode)`, () => {
  let scene: Scene;
  beforeEach(() => {
    scene = makeScene('swap');
  });
  afterEach(() => {
    state.swap = null;
    scene.cleanup();
  });

  it('control: the same root, not swapped, is writable and the write lands in it', async () => {
    const root = path.join(scene.ws, 'sub');
    fs.mkdirSync(root);
    const r = await run(NODE, [PROBE, JSON.stringify([['write', `${root}/f.txt`, 'ok']])], { cwd: scene.ws, env: BASE_ENV, policy: modePolicy(mode.name, { filesystem: { write: [root] } }) });
    expect(r.stdout, r.stderr).toMatch(/PROBE \["ok"\]/);
    if (mode.name === 'isolated') expect(state.mounts).toEqual(expect.arrayContaining([expect.objectContaining({ kind: MountKind.BindRw, path: root })]));
    expect(fs.readFileSync(`${root}/f.txt`, 'utf8')).toBe('ok');
  });

  it('swapped for a link to a directory outside: the spawn is refused and nothing reaches the target', async () => {
    const root = path.join(scene.ws, 'sub');
    fs.mkdirSync(root);
    const target = path.join(scene.out, 'elsewhere');
    fs.mkdirSync(target);
    fs.writeFileSync(`${target}/existing`, 'original');
    state.swap = [root, target];
    let err: unknown;
    let out = '';
    try {
      const r = await run(NODE, [PROBE, JSON.stringify([['write', `${root}/pwned`, 'x'], ['write', `${target}/existing`, 'x']])], { cwd: scene.ws, env: BASE_ENV, policy: modePolicy(mode.name, { filesystem: { write: [root] } }) });
      out = r.stdout + r.stderr;
    } catch (e) {
      err = e;
    }
    expect(fs.lstatSync(root).isSymbolicLink()).toBe(true); // the swap happened
    expect(err, `the run went ahead: ${out}`).toBeDefined();
    expect((err as { code?: string }).code).toBe('EMOUNT_SETUP');
    expect(String((err as Error).message)).toMatch(/ELOOP|symbolic link/i);
    // From outside: the target holds what it held.
    expect(fs.readdirSync(target)).toEqual(['existing']);
    expect(fs.readFileSync(`${target}/existing`, 'utf8')).toBe('original');
  });
});
}
