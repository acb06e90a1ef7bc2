/** What the Linux planner takes (LinuxPlanInput) and gives (LinuxPlan); plan.ts planLinux. */
import type { EnforcementReport } from '../../backend';
import type { LinuxNativePlan, LinuxProbe } from '../../native';
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
}

export interface LinuxPlan {
  mode: 'isolated' | 'landlock';
  native: Omit<LinuxNativePlan, 'stdio'>;
  enforcement: EnforcementReport;
  /** Protected paths that did not exist: init creates them as placeholders; remove after exit. */
  ghosts: string[];
}
