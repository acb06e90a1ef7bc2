/**
 * The suites' mount leak check (test/helpers/mounts.ts): it must catch a mount at the paths a
 * sandbox was given or where the sandbox mounts, and ignore mounts other jobs make elsewhere on a
 * shared host. Checked on made-up mountinfo text, then on the real table (root: it mounts).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

import { expectNoMountLeak, hostMounts, mountsOfOurs } from '../helpers/mounts';

const SCENE = '/var/tmp/psb-fs-isolated-Ab12Cd';
const BASE = [
  '22 27 0:21 / /proc rw,relatime shared:12 - proc proc rw',
  '24 27 0:6 / /dev rw,relatime shared:2 - devtmpfs devtmpfs rw,mode=755',
  '27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw',
  '30 27 0:30 / /var/tmp/psb-walk-Zz99Yy/ws/a/mnt rw,relatime shared:40 - tmpfs tmpfs rw',
].join('\n');
const leakFails = (after: string) => () => expectNoMountLeak(hostMounts(BASE), [SCENE], hostMounts(`${BASE}\n${after}`));

describe('mount leak check', () => {
  it('ignores mounts and unmounts elsewhere on the host', () => {
    const after = hostMounts(`${BASE.split('\n').slice(0, 3).join('\n')}\n41 27 0:50 / /mnt/other\\040job rw - tmpfs tmpfs rw`);
    expect(() => expectNoMountLeak(hostMounts(BASE), [SCENE], after)).not.toThrow();
    expect(mountsOfOurs(after, [SCENE])).toEqual(mountsOfOurs(hostMounts(BASE), [SCENE]));
  });

  it('catches a mount on or under the given paths', () => {
    expect(leakFails(`41 27 0:50 / ${SCENE}/ws rw - tmpfs tmpfs rw`)).toThrow(/sandbox's paths/);
    expect(leakFails(`41 27 0:50 / ${SCENE} rw - tmpfs tmpfs rw`)).toThrow();
  });

  it('catches a bind of a given path mounted elsewhere (its root names the scene)', () => {
    expect(leakFails(`41 27 8:1 ${SCENE}/out /mnt/x rw - ext4 /dev/sda1 rw`)).toThrow();
    // The same directory seen from a file system mounted at /var/tmp.
    expect(leakFails(`41 27 8:2 /psb-fs-isolated-Ab12Cd/out /mnt/x rw - ext4 /dev/sda2 rw`)).toThrow();
  });

  it('catches a mount where the sandbox mounts (/, /tmp, /proc, /sys, /dev...)', () => {
    for (const p of ['/', '/tmp', '/proc', '/sys', '/dev/shm']) expect(leakFails(`41 27 0:50 / ${p} rw - tmpfs tmpfs rw`), p).toThrow();
  });

  it('catches a changed mount of ours (e.g. "/" made read-only)', () => {
    const after = hostMounts(BASE.replace('/ / rw,relatime', '/ / ro,relatime'));
    expect(() => expectNoMountLeak(hostMounts(BASE), [SCENE], after)).toThrow();
  });

  const root = process.platform === 'linux' && process.getuid?.() === 0;
  // eslint-disable-next-line no-console
  if (!root) console.warn('[mount-leak] SKIPPING the live mount checks: they mount a tmpfs, which needs root on Linux');
  it.runIf(root)('on the real table: a tmpfs over a scene path is caught, one elsewhere is not', () => {
    const base = fs.mkdtempSync('/var/tmp/psb-mountcheck-');
    const scene = path.join(base, 'scene');
    const elsewhere = path.join(base, 'elsewhere');
    fs.mkdirSync(path.join(scene, 'ws'), { recursive: true });
    fs.mkdirSync(elsewhere);
    const before = hostMounts();
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16k', 'psb-check', elsewhere]);
      expect(() => expectNoMountLeak(before, [scene])).not.toThrow();
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16k', 'psb-check', path.join(scene, 'ws')]);
      expect(() => expectNoMountLeak(before, [scene])).toThrow(/sandbox's paths/);
    } finally {
      for (const p of [path.join(scene, 'ws'), elsewhere]) execFileSync('sh', ['-c', `umount ${p} 2>/dev/null || true`]);
      fs.rmSync(base, { recursive: true, force: true });
    }
    expect(() => expectNoMountLeak(before, [scene])).not.toThrow();
  });
});
