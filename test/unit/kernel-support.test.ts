/**
 * Kernels older than what a mode's setup calls need: isolated mode builds its mount tree with
 * mount_setattr (Linux 5.12) and closes the command's fds with CLOSE_RANGE_CLOEXEC (5.11); Landlock
 * is 5.13. On Debian 11's 5.10 user namespaces work, so auto mode used to pick isolated mode and
 * every spawn failed half-way through its mount setup. Mode selection now refuses up front, by
 * name (the kernel matrix's v5.10 row runs the real thing: test/linux/kernel-matrix.test.ts).
 */
import { describe, expect, it } from 'vitest';

import { probe, SandboxError } from '../../lib/index';
import type { LinuxProbe } from '../../lib/native';
import { chooseLinuxMode, landlockRefusal } from '../../lib/platform/linux/mode';
import type { ResolvedRules } from '../../lib/rules';

type Mode = 'auto' | 'isolated' | 'landlock';
const rules = (mode: Mode, degraded: boolean) => ({ mode, degraded }) as unknown as ResolvedRules;
// Debian 11: 5.10 has user namespaces and seccomp, no mount_setattr (ENOSYS), no Landlock.
const v510: LinuxProbe = { landlockAbi: 0, seccomp: 0, userns: 0, mountApi: -38, euid: 1000, kernel: '5.10.0-32-cloud-amd64' };
const v61: LinuxProbe = { landlockAbi: 2, seccomp: 0, userns: 0, mountApi: 0, euid: 1000, kernel: '6.1.0-41-cloud-amd64' };

function refusal(mode: Mode, degraded: boolean, p: LinuxProbe): SandboxError {
  try {
    chooseLinuxMode(rules(mode, degraded), p);
  } catch (e) {
    return e as SandboxError;
  }
  throw new Error(`chooseLinuxMode(${mode}, degraded ${degraded}) did not refuse`);
}

describe('a kernel too old for isolated mode (5.10: no mount_setattr, no Landlock)', () => {
  it('isolated and auto mode are refused by name with ENOT_ENFORCED, naming the kernel and the way out', () => {
    for (const [mode, degraded] of [['isolated', false], ['auto', false], ['auto', true]] as const) {
      const e = refusal(mode, degraded, v510);
      expect(e, `${mode} ${degraded}`).toBeInstanceOf(SandboxError);
      expect(e.code).toBe('ENOT_ENFORCED');
      expect(e.message).toMatch(/isolated mode needs Linux 5\.12/);
      expect(e.message).toContain('5.10.0-32-cloud-amd64');
      expect(e.message).toMatch(/upgrade the kernel/);
      // Not the user-namespace advice: they work here.
      expect(e.message).not.toMatch(/unprivileged_userns_clone/);
    }
    // Auto mode says Landlock cannot stand in either.
    expect(refusal('auto', true, v510).message).toMatch(/Landlock mode needs Linux 5\.13/);
  });

  it('Landlock mode by name is left to the planner (it names Landlock itself)', () => {
    expect(chooseLinuxMode(rules('landlock', true), v510)).toBe('landlock');
  });

  it('a kernel with Landlock but without the mount API (a backport) falls back like a host without user namespaces', () => {
    const p: LinuxProbe = { ...v510, landlockAbi: 1 };
    expect(chooseLinuxMode(rules('auto', true), p)).toBe('landlock');
    // Without degraded too: the planner refuses only for a requested guarantee Landlock mode cannot
    // hold, and then with the kernel's reason and exactly those gaps.
    expect(chooseLinuxMode(rules('auto', false), p)).toBe('landlock');
    const e = landlockRefusal(rules('auto', false), p, ['gap one', 'gap two']);
    expect(e.code).toBe('ENOT_ENFORCED');
    expect(e.message).toMatch(/isolated mode needs Linux 5\.12.*gap one; gap two.*degraded: true.*upgrade the kernel/);
    // By name, Landlock mode's own refusal code; without user namespaces, theirs.
    expect(landlockRefusal(rules('landlock', false), p, ['gap one']).code).toBe('EUNSUPPORTED_POLICY');
    const noUserns = landlockRefusal(rules('auto', false), { ...v61, userns: -1 }, ['gap one']);
    expect(noUserns.code).toBe('EUSERNS_UNAVAILABLE');
    expect(noUserns.message).toMatch(/user namespaces are unavailable here \(errno 1\).*gap one.*enable user namespaces/);
    expect(refusal('isolated', false, p).code).toBe('ENOT_ENFORCED');
  });

  it('control: 6.1, and a probe from an addon without the field, pick isolated mode as before', () => {
    expect(chooseLinuxMode(rules('auto', false), v61)).toBe('isolated');
    expect(chooseLinuxMode(rules('isolated', false), v61)).toBe('isolated');
    const { mountApi: _, ...older } = v61;
    expect(chooseLinuxMode(rules('auto', false), older)).toBe('isolated');
  });

  it.runIf(process.platform === 'linux')('probe() reports the mount API, and isolated mode only with it', () => {
    const f = probe().features as Record<string, unknown>;
    expect(typeof f.mountApi).toBe('boolean');
    if (f.mountApi === false) expect(f.isolatedMode).toBe(false);
  });
});
