/**
 * Rootless Podman, emulated on this host: the runtime mounts over parts of the container's /proc
 * (masked paths), and the kernel then refuses a fresh procfs in a nested user+pid namespace (a
 * procfs may only be mounted where one is already fully visible). Isolated mode used to swallow
 * that refusal and mount an empty tmpfs on /proc: commands ran without /proc/self, silently.
 *
 * The emulation: util-linux's unshare makes a user (mapped root), mount and pid namespace with its
 * own /proc, and a tmpfs goes over /proc/fs (Podman keeps /proc/fs read-only and masks /proc/acpi,
 * /proc/kcore, ...); the suite's Node runs there and drives the built library (dist). Checked:
 *   - probe() sees it (isolatedMode false, why named) and auto mode picks Landlock mode, whose
 *     /proc/self works;
 *   - isolated mode asked for by name is refused (ENOT_ENFORCED), nothing runs;
 *   - a mask that appears after the probe fails the spawn (EMOUNT_SETUP naming /proc), nothing runs.
 * Controls: the same namespaces without the mask run isolated mode with a working /proc/self, and
 * so does this host outside the emulation. Runs as root and as a user; skips loudly where unshare
 * cannot make the namespaces.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { probe, run } from '../../lib/index';
import { caps } from '../helpers/capabilities';
import { BASE_ENV, DIST_INDEX, makeScene, NODE, type Scene } from '../helpers/sandbox';

const MASK = 'mount -t tmpfs -o ro,size=4k psb-mask /proc/fs';
// Prints /proc/self's target and whether /proc/self/status can be read; touches <ws>/ran.
const PROBE_CMD = (ws: string) => `touch ${ws}/ran; echo "self=$(readlink /proc/self)"; test -r /proc/self/status && echo status=ok`;

// Run inside the emulation. `late`: probe first without the mask, run isolated mode (control),
// then mask and run isolated mode again (the probe's answer is cached: the spawn must catch it).
const SCRIPT = `
const { execSync } = require('child_process');
const fs = require('fs');
const lib = require(${JSON.stringify(DIST_INDEX)});
const [phase, ws] = process.argv.slice(2);
const env = ${JSON.stringify(BASE_ENV)};
const cmd = (tag) => ${JSON.stringify(PROBE_CMD('WS'))}.replace(/WS/g, ws + '/' + tag);
const attempt = async (tag, policy) => {
  fs.mkdirSync(ws + '/' + tag);
  try {
    const r = await lib.run('/bin/sh', ['-c', cmd(tag)], { policy: { filesystem: { write: [ws] }, ...policy }, env });
    return { ran: true, stdout: r.stdout, code: r.code, mode: r.enforcement.mode, mechanisms: r.enforcement.mechanisms, gaps: r.enforcement.gaps };
  } catch (e) {
    return { code: e.code, message: e.message };
  }
};
(async () => {
  const r = {};
  if (phase === 'late') {
    r.probe = lib.probe();
    r.before = await attempt('before', { mode: 'isolated' });
    execSync(${JSON.stringify(MASK)});
    r.after = await attempt('after', { mode: 'isolated' });
  } else {
    execSync(${JSON.stringify(MASK)});
    r.probe = lib.probe();
    r.isolated = await attempt('isolated', { mode: 'isolated' });
    r.auto = await attempt('auto', {});
    r.autoTag = 'auto';
    // Mapped root with no pids cgroup of its own (a user's emulation): Landlock mode cannot cap
    // processes, a gap that needs degraded (as root in Docker). Then with it.
    if (r.auto.code === 'ENOT_ENFORCED' && /pids cgroup/.test(r.auto.message)) {
      r.autoRefused = r.auto.message;
      r.auto = await attempt('auto-degraded', { degraded: true });
      r.autoTag = 'auto-degraded';
    }
  }
  console.log(JSON.stringify(r));
})();
`;

const scenes: Scene[] = [];
afterAll(() => scenes.forEach((s) => s.cleanup()));

// Can this host build the emulation at all (user namespaces for unshare, a /proc/fs to cover)?
const UNSHARE = ['--user', '--map-root-user', '--mount', '--pid', '--fork', '--mount-proc'];
const canEmulate = (() => {
  if (!caps.linux || !fs.existsSync('/proc/fs')) return 'no /proc/fs on this host';
  const r = spawnSync('unshare', [...UNSHARE, 'sh', '-c', MASK], { encoding: 'utf8' });
  return r.status === 0 ? null : `unshare ${UNSHARE.join(' ')} + ${MASK} failed here (${(r.stderr || r.error?.message || '').trim()})`;
})();
if (canEmulate !== null) console.warn(`SKIPPING the emulation in test/linux/proc-masked.test.ts: ${canEmulate}`);

function emulated(phase: 'masked' | 'late', tag: string): { scene: Scene; r: Record<string, any> } {
  const scene = makeScene(tag);
  scenes.push(scene);
  const script = path.join(scene.root, 'proc-masked.js');
  fs.writeFileSync(script, SCRIPT);
  const r = spawnSync('unshare', [...UNSHARE, NODE, script, phase, scene.ws], { encoding: 'utf8', timeout: 120_000 });
  expect(r.status, r.stderr).toBe(0);
  return { scene, r: JSON.parse(r.stdout.trim().split('\n').pop()!) };
}

describe.runIf(canEmulate === null)('masked paths over /proc (rootless Podman, emulated)', () => {
  it('probe() names why isolated mode is out of reach; isolated mode by name is refused and nothing runs; auto mode runs Landlock mode with a working /proc/self', () => {
    const { scene, r } = emulated('masked', 'proc-masked');
    // Before: auto mode picked isolated mode and ran with an empty /proc ("self=").
    expect(r.auto.message).toBeUndefined();
    expect(r.auto.stdout).toMatch(/^self=[1-9][0-9]*\nstatus=ok\n$/);
    expect(r.auto).toMatchObject({ ran: true, code: 0, mode: 'landlock' });
    expect(fs.existsSync(`${scene.ws}/${r.autoTag}/ran`)).toBe(true);
    if (r.autoRefused !== undefined) {
      // Only the process cap needed degraded, and the refusal names why isolated mode was out of reach.
      console.warn(`[proc-masked] auto mode needed degraded here (no pids cgroup for mapped root): ${r.autoRefused}`);
      expect(r.autoRefused).toMatch(/^procfs cannot be mounted in a nested pid namespace here .*Landlock mode cannot hold what this policy asks for: running as root without a usable pids cgroup[^;]*; pass degraded: true/);
      expect(fs.existsSync(`${scene.ws}/auto/ran`)).toBe(false);
      expect(r.auto.gaps.join('\n')).toMatch(/pids cgroup/);
    }

    expect(r.isolated.ran).toBeUndefined();
    expect(r.isolated.code).toBe('ENOT_ENFORCED');
    expect(r.isolated.message).toMatch(/^isolated mode cannot run here: procfs cannot be mounted .* use mode 'landlock'/);
    expect(fs.existsSync(`${scene.ws}/isolated/ran`)).toBe(false);

    expect(r.probe.defaultMode).toBe('landlock');
    expect(r.probe.features).toMatchObject({ userNamespaces: true, procfs: false, isolatedMode: false, landlockMode: true });
    expect(r.probe.features.isolatedModeUnavailable).toMatch(/^procfs cannot be mounted in a nested pid namespace here \(errno 1: masked paths over \/proc.*isolated mode would have no \/proc$/);
    expect(r.auto.mechanisms.isolatedModeUnavailable).toBe(r.probe.features.isolatedModeUnavailable);
  });

  it('a mask that appears after the probe fails the spawn (EMOUNT_SETUP naming /proc), never an empty /proc; control: before it, isolated mode has /proc/self', () => {
    const { scene, r } = emulated('late', 'proc-masked-late');
    expect(r.before.message).toBeUndefined();
    expect(r.before).toMatchObject({ ran: true, code: 0, mode: 'isolated' });
    expect(r.before.stdout).toMatch(/^self=[1-9][0-9]*\nstatus=ok\n$/);

    // Before: it ran, with an empty /proc.
    expect(r.after.stdout).toBeUndefined();
    expect(r.after.ran).toBeUndefined();
    expect(r.after.code).toBe('EMOUNT_SETUP');
    expect(r.after.message).toMatch(/^mount step 'proc' on \/proc failed: EPERM \(the kernel refuses a fresh procfs here/);
    expect(fs.existsSync(`${scene.ws}/after/ran`)).toBe(false);
    expect(r.probe.features).toMatchObject({ procfs: true, isolatedMode: true });
  });
});

if (caps.linux && !caps.userns) console.warn('SKIPPING the host control in test/linux/proc-masked.test.ts: isolated mode is unavailable here');
describe.runIf(caps.linux && caps.userns)('control: this host, no emulation', () => {
  it('isolated mode mounts a fresh /proc: /proc/self works', async () => {
    const scene = makeScene('proc-masked-host');
    scenes.push(scene);
    const r = await run('/bin/sh', ['-c', PROBE_CMD(scene.ws)], { env: BASE_ENV, policy: { mode: 'isolated', filesystem: { write: [scene.ws] } } });
    expect(r.enforcement.mode).toBe('isolated');
    expect(r.stdout).toMatch(/^self=[1-9][0-9]*\nstatus=ok\n$/);
    expect(fs.existsSync(`${scene.ws}/ran`)).toBe(true);
    expect((probe().features as Record<string, unknown>).procfs).toBe(true);
  });
});
