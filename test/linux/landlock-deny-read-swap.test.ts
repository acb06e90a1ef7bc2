/**
 * Landlock mode's deny-read carve grants each entry beside a denied path by inode (linux/plan.ts
 * carveDenied). An entry swapped for a symlink to the denied path between planning and the moment
 * the command's rules are made must not carry the grant onto the denied path: those rules are
 * opened without following links (landlock.h kPathExact) and one that became a link gets no rule.
 * Deterministic here: planLinux is wrapped so that the swap happens right after the plan is made.
 * Isolated mode masks the denied path itself, so the swap changes nothing there: run as a control.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import { MODES, modePolicy } from '../helpers/capabilities';
import { makeScene, probeOps, type Scene } from '../helpers/sandbox';

/** [entry, link target]: the entry becomes a symlink to the target after the next plan. */
const state = vi.hoisted(() => ({ swap: null as [string, string] | null }));

vi.mock('../../lib/platform/linux/plan', async (importOriginal) => {
  const { planLinuxThen } = await import('../helpers/plan-hook');
  const nodeFs = await import('node:fs');
  return planLinuxThen(await importOriginal<typeof import('../../lib/platform/linux/plan')>(), () => {
    if (state.swap !== null) {
      const [entry, target] = state.swap;
      nodeFs.rmSync(entry, { recursive: true, force: true });
      nodeFs.symlinkSync(target, entry);
      state.swap = null;
    }
  });
});

for (const mode of MODES) {
  describe.skipIf(mode.skip)(`an entry beside a denied path swapped for a link to it after planning (${mode.name} mode)`, () => {
    let scene: Scene;
    beforeEach(() => {
      scene = makeScene('deny-swap');
      fs.writeFileSync(path.join(scene.out, 'dir', 'inner.txt'), 'DENIED-CONTENT');
      fs.mkdirSync(path.join(scene.out, 'beside'));
      fs.writeFileSync(path.join(scene.out, 'beside', 'inner.txt'), 'beside');
    });
    afterEach(() => {
      state.swap = null;
      scene.cleanup();
    });
    const policy = () => modePolicy(mode.name, { filesystem: { write: [scene.ws], denyRead: [`${scene.out}/dir`] } });

    it('control: not swapped, the entry beside it reads', async () => {
      expect(await probeOps([['read', `${scene.out}/beside/inner.txt`], ['read', `${scene.out}/dir/inner.txt`]], { cwd: scene.ws, policy: policy() })).toEqual([
        'ok:beside',
        'EACCES',
      ]);
    });

    it('swapped: the denied contents stay unreadable by either name', async () => {
      state.swap = [`${scene.out}/beside`, `${scene.out}/dir`];
      const r = await probeOps(
        [
          ['read', `${scene.out}/beside/inner.txt`],
          ['read', `${scene.out}/dir/inner.txt`],
          ['readdir', `${scene.out}/dir`],
        ],
        { cwd: scene.ws, policy: policy() },
      );
      expect(fs.lstatSync(`${scene.out}/beside`).isSymbolicLink()).toBe(true); // the swap happened
      for (const x of r) expect(x.startsWith('ok'), JSON.stringify(r)).toBe(false);
    });
  });
}
