/**
 * What this host can run, probed once per test file (each file is its own forked process).
 *
 *   import { caps, MODES, modePolicy } from '../helpers/capabilities';
 *   describe.runIf(caps.userns)('isolated mode (needs unprivileged user namespaces)', ...);
 *   describe.each(MODES)('$name mode', ({ name }) => { ... modePolicy(name, {...}) ... });
 *
 * MODES always lists both Linux modes; an entry whose feature is missing carries `skip` with the
 * reason, so suites skip loudly (`describe.skipIf(m.skip)`) instead of silently dropping a mode.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

import { probe } from '../../lib/index';
import type { SandboxPolicy } from '../../lib/policy-types';

export type LinuxMode = 'isolated' | 'landlock';

function hasExecutable(p: string): boolean {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function which(cmd: string): string | null {
  try {
    const out = execFileSync('/bin/sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    return out.trim() || null;
  } catch {
    return null;
  }
}

const isLinux = process.platform === 'linux';
const report = isLinux ? probe() : null;
const features = (report?.features ?? {}) as Record<string, unknown>;

export const caps = {
  linux: isLinux,
  root: process.getuid?.() === 0,
  addon: report?.addonLoaded === true,
  /** Isolated mode works here (unprivileged user namespaces + seccomp). */
  userns: features.isolatedMode === true,
  landlockAbi: typeof features.landlockAbi === 'number' ? (features.landlockAbi as number) : 0,
  /** Landlock mode works here (Landlock ABI >= 1 + seccomp). */
  landlock: features.landlockMode === true,
  seccomp: features.seccomp === true,
  /** Landlock mode's connect supervisor (seccomp user notification) works here. */
  connectSupervisor: features.connectSupervisor === true,
  /** Landlock mode's metadata supervisor (the same seccomp user notification) works here. */
  metadataSupervisor: features.metadataSupervisor === true,
  /** How the supervisors reach the command: 'pidfd', 'procfs' (a container's seccomp profile), 'none'. */
  supervisorAccess: features.supervisorAccess as 'pidfd' | 'procfs' | 'none' | undefined,
  /**
   * Landlock mode's supervisor carries out directory listings (deny-read under readable roots):
   * wherever it runs (in the procfs way on a reopen of the command's directory); without it the
   * names inside a denied directory are a listed gap.
   */
  listSupervised: features.connectSupervisor === true,
  /** A system python3 (not a per-user shim that another uid or the sandbox cannot reach). */
  python: hasExecutable('/usr/bin/python3') ? '/usr/bin/python3' : null,
  cc: which('cc'),
  git: which('git'),
  npm: which('npm'),
  userNamespacesErrno: features.userNamespacesErrno,
};

export interface ModeCase {
  name: LinuxMode;
  /** Why this mode cannot run here, or undefined when it can. */
  skip: string | undefined;
}

export const MODES: ModeCase[] = [
  {
    name: 'isolated',
    skip: !isLinux
      ? 'not Linux'
      : caps.userns
        ? undefined
        : typeof features.isolatedModeUnavailable === 'string'
          ? features.isolatedModeUnavailable
          : `isolated mode needs unprivileged user namespaces and seccomp (userns errno ${String(caps.userNamespacesErrno)})`,
  },
  {
    name: 'landlock',
    skip: !isLinux ? 'not Linux' : caps.landlock ? undefined : 'Landlock mode needs Landlock (ABI >= 1) and seccomp',
  },
];

for (const m of MODES) {
  // eslint-disable-next-line no-console
  if (m.skip) console.warn(`[capabilities] SKIPPING ${m.name}-mode tests: ${m.skip}`);
}

/** The policy with the given mode; Landlock mode always needs degraded: true (see DESIGN.md). */
export function modePolicy(mode: LinuxMode, policy: SandboxPolicy = {}): SandboxPolicy {
  return { ...policy, mode, ...(mode === 'landlock' ? { degraded: true } : {}) };
}
