/** What the Linux planner takes (LinuxPlanInput) and gives (LinuxPlan); plan.ts planLinux. */
import type { EnforcementReport } from '../../backend';
import type { LinuxNativePlan, LinuxProbe } from '../../native';
import type { RecordPlan } from '../../changes/record';
import type { LinuxMountOp } from '../../native';
import type { ResolvedRules } from '../../rules';

export interface LinuxPlanInput {
  rules: ResolvedRules;
  /** The mode chooseLinuxMode picked (the backend picks it once, before preparing the run). */
  mode: 'isolated' | 'landlock';
  file: string;
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  probe: LinuxProbe;
  /** Landlock mode with private tmp: the per-run TMPDIR (created by the caller). */
  landlockTmpDir?: string;
  /** Network proxy: the port the command must reach it on (inside its namespace in isolated mode). */
  proxyPort?: number;
  /** The sandbox's cgroup (lib/platform/linux/cgroup.ts), when one was made for this run. */
  cgroup?: { kind: 'v1' | 'v2'; pidsMax: number; memoryBytes?: number };
  /**
   * Landlock mode without a cgroup, unprivileged: the tasks the uid runs now (linux/quotas.ts
   * uidTaskCount). RLIMIT_NPROC is set to this plus the cap, since the kernel counts the uid's.
   */
  uidTasks?: number;
  /**
   * Isolated mode with changes: 'stage' (lib/changes/overlay.ts): the overlays over the writable
   * roots and the mask over their layer dir. They go first, while every mount is still writable
   * (overlayfs keeps a private clone of the upper dir's mount), so that every later step (the
   * /tmp exposures, the read-only remount, the roots' writable binds, the carve-outs, pins,
   * placeholders and masks inside the roots) acts on the overlay, as it would on the root.
   */
  stageMounts?: LinuxMountOp[];
  /** Landlock mode, changes: 'record': the journal the path supervisor writes (lib/changes/record.ts). */
  changes?: RecordPlan;
  /**
   * Isolated mode: placeholders of other runs (or of a host that died) this run binds as existing
   * paths (linux/placeholders.ts claimPlaceholders). Left out of listings like its own.
   */
  placeholders?: string[];
}

export interface LinuxPlan {
  mode: 'isolated' | 'landlock';
  native: Omit<LinuxNativePlan, 'stdio'>;
  enforcement: EnforcementReport;
  /** Protected paths that did not exist: init creates them as placeholders; remove after exit. */
  ghosts: string[];
}
