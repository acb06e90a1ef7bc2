/**
 * Mount leak checks for the Linux suites: did a sandboxed run leave a mount on the host?
 *
 *   const before = hostMounts();
 *   ...runs with paths under scene.root...
 *   expectNoMountLeak(before, [scene.root]);
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';

// A sandboxed run mounts only inside mount namespaces of its own. Were one of those mounts to
// reach the host (a propagation mistake), it would show where the sandbox mounts: over "/", its
// private /tmp, /proc, /sys, /dev (and /dev/pts, /dev/shm), or over the paths the run was given
// (writable roots, denied paths, protected paths: all under the test's scene). The host's table
// as a whole is not ours to judge: on a shared machine other jobs mount and unmount elsewhere
// (other test files mount under scenes of their own, a CI job mounts a tmpfs under /mnt) while a
// test runs, and comparing the whole table failed tests for that.

/** Where the isolated mode mounts, inside its own namespace, whatever the policy. */
const SANDBOX_MOUNT_POINTS = new Set(['/', '/tmp', '/proc', '/sys', '/dev', '/dev/pts', '/dev/shm']);

/** The host's own mount table, without the per-line mount ids that never repeat. */
export function hostMounts(mountinfo = fs.readFileSync('/proc/self/mountinfo', 'utf8')): string[] {
  return mountinfo
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' ').slice(3).join(' '))
    .sort();
}

/** mountinfo escapes space, tab, newline and backslash as octal (\040). */
const unescapeMount = (s: string) => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));

const within = (p: string, dir: string) => p === dir || p.startsWith(dir.endsWith('/') ? dir : `${dir}/`);

/**
 * The lines of `mounts` (from hostMounts) that a sandboxed run given `ours` could have caused:
 * a mount on one of SANDBOX_MOUNT_POINTS, on or under one of `ours`, or one whose source
 * directory (the bind's root within its file system) names one of `ours` by its last component.
 * `ours` should be directories with unique names (a scene's root), so that the last check
 * cannot match another test's directory.
 */
export function mountsOfOurs(mounts: string[], ours: string[]): string[] {
  return mounts.filter((line) => {
    const [root = '', point = ''] = line.split(' ').map(unescapeMount);
    if (SANDBOX_MOUNT_POINTS.has(point)) return true;
    return ours.some((p) => within(point, p) || root.split('/').includes(path.basename(p)));
  });
}

/**
 * No mount the sandbox could have made or changed differs from `before` (a hostMounts() taken
 * before the runs). Mounts and unmounts elsewhere on the host are someone else's.
 */
export function expectNoMountLeak(before: string[], ours: string[], after = hostMounts()): void {
  expect(mountsOfOurs(after, ours), `the host's mounts at the sandbox's paths (${ours.join(', ')}) changed`).toEqual(mountsOfOurs(before, ours));
}
