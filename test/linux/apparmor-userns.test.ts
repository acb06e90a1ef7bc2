/**
 * The kernel matrix's `apparmor-userns` row (scripts/kernel-matrix/in-guest.sh): Ubuntu's AppArmor
 * restriction on user namespaces, emulated in a Debian 12 guest, whose kernel (6.1) has no
 * user-namespace mediation. The guest confines the suites' Node (/usr/local/bin/node) with a
 * profile that allows everything but capabilities, so a user namespace can be made but nothing
 * needing a capability works in it; PSB_MATRIX_APPARMOR says which phase runs:
 *
 *   restricted  that profile: auto mode must pick Landlock mode, and an isolated-mode refusal must
 *               name the profile (the sysctl Ubuntu has does not exist here);
 *   profile     the emulation unloaded and `process-sandbox apparmor-profile`'s output loaded in
 *               its place: isolated mode.
 *
 * Each phase checks from outside: the label the kernel gives this process, a user namespace with
 * a mount namespace made by util-linux's unshare, and a write outside the workspace.
 * Elsewhere the file skips, saying so.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';

import { probe, run, SandboxError } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';
import { BASE_ENV, makeScene, type Scene } from '../helpers/sandbox';

const PHASE = process.env.PSB_MATRIX_APPARMOR;
const EMULATION = 'psb-emulated-userns-restriction';
if (PHASE === undefined) console.warn('SKIPPING test/linux/apparmor-userns.test.ts: it runs only in the kernel matrix row apparmor-userns (npm run test:kernels -- apparmor-userns)');

const scenes: Scene[] = [];
afterAll(() => {
  for (const s of scenes) s.cleanup();
});

/** This process's AppArmor label, as the kernel gives it. */
const label = (): string => fs.readFileSync('/proc/self/attr/apparmor/current', 'utf8').replace(/\0/g, '').trim();

describe.runIf(PHASE !== undefined)(`apparmor-userns (${PHASE}, uid ${process.getuid?.()})`, () => {
  it('the suites run under the phase\'s profile (attached to the Node binary by its path)', () => {
    if (PHASE === 'restricted') expect(label()).toBe(`${EMULATION} (enforce)`);
    else expect(label()).toMatch(/^process-sandbox-usr\.local\.bin\.node \(unconfined\)$/);
  });

  it('from outside: a user namespace alone can be made in both; one with a mount namespace only under the generated profile', () => {
    const bare = spawnSync('unshare', ['--user', 'true'], { encoding: 'utf8' });
    expect(bare.status, bare.stderr).toBe(0);
    const mnt = spawnSync('unshare', ['--user', '--map-root-user', '--mount', 'true'], { encoding: 'utf8' });
    if (PHASE === 'restricted') {
      expect(mnt.status).not.toBe(0);
      expect(mnt.stderr).toMatch(/Operation not permitted/);
    } else {
      expect(mnt.status, mnt.stderr).toBe(0);
    }
  });

  it('auto mode picks Landlock mode under the restriction and isolated mode with the profile; a write outside the workspace fails, one inside lands', async () => {
    const scene = makeScene('aa-userns');
    scenes.push(scene);
    const expected = PHASE === 'restricted' ? 'landlock' : 'isolated';
    expect(probe().defaultMode).toBe(expected);
    const script = `echo in > ${scene.ws}/in; echo out > ${scene.out}/written; exit 0`;
    const policy: SandboxPolicy = { filesystem: { write: [scene.ws] } };
    // Without degraded, Landlock mode may still be refused for what it cannot enforce (the
    // refusal names `degraded`); with it, the fallback runs. Isolated mode needs neither.
    const r = await run('/bin/sh', ['-c', script], { env: BASE_ENV, policy: { ...policy, degraded: expected === 'landlock' } });
    expect(r.enforcement).toMatchObject({ sandboxed: true, mode: expected });
    expect(fs.readFileSync(`${scene.ws}/in`, 'utf8')).toBe('in\n');
    expect(fs.existsSync(`${scene.out}/written`)).toBe(false);
    if (expected === 'isolated') expect(r.enforcement.gaps).toEqual([]);
  });

  it.runIf(PHASE === 'restricted')('isolated mode asked for by name is refused, naming the AppArmor profile that confines this Node and the command that prints the fix; nothing runs', async () => {
    const scene = makeScene('aa-userns-refused');
    scenes.push(scene);
    const err = await run('/bin/sh', ['-c', `echo in > ${scene.ws}/in`], { env: BASE_ENV, policy: { mode: 'isolated', filesystem: { write: [scene.ws] } } }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe('EUSERNS_UNAVAILABLE');
    expect((err as Error).message).toMatch(new RegExp(`AppArmor profile ${EMULATION} \\(enforce\\).*process-sandbox apparmor-profile`));
    expect(fs.existsSync(`${scene.ws}/in`)).toBe(false);
  });
});
