/** What a run takes from the host besides its plan: the proxy's port, its cgroup, the uid's task count. */
import * as crypto from 'node:crypto';
import type { BackendSpawnRequest } from '../../backend';
import type { LinuxNative, LinuxNativePlan, LinuxProbe } from '../../native';
import { createSandboxCgroup, type SandboxCgroup } from './cgroup';
import { DEFAULT_MAX_PROCESSES } from './limits';
import { uidTaskCount } from './quotas';

/** The proxy port a Landlock-mode plan names (its connect supervisor's, or Landlock's port rule). */
export function proxyPortOf(plan: Omit<LinuxNativePlan, 'stdio'>): number | undefined {
  return plan.seccomp?.connectSupervisor || plan.landlock?.connectPorts?.[0] || undefined;
}

/**
 * The proxy's port for a sandbox. Isolated mode: any port, since the namespace is empty and no
 * other sandbox shares it. Landlock mode: a host listener on 127.0.0.1, which the proxy serves.
 */
export function proxyPortFor(native: LinuxNative, mode: 'isolated' | 'landlock'): { port: number; hostListenerFd?: number } {
  if (mode === 'isolated') return { port: 20000 + crypto.randomInt(40000) };
  const l = native.listenLoopback();
  return { port: l.port, hostListenerFd: l.fd };
}

/** A run's cgroup, capped as its rules ask. */
export function cgroupFor(rules: NonNullable<BackendSpawnRequest['rules']>): SandboxCgroup | null {
  return createSandboxCgroup({ pidsMax: rules.limits.maxProcesses ?? DEFAULT_MAX_PROCESSES, memoryBytes: rules.limits.memoryBytes });
}

/** Landlock mode without a pids cgroup, unprivileged: the uid's task count RLIMIT_NPROC adds the cap to. */
export function uidTasksFor(mode: 'isolated' | 'landlock', g: SandboxCgroup | null, probe: LinuxProbe): number | undefined {
  return mode === 'landlock' && !g && probe.euid !== 0 ? uidTaskCount(process.getuid!()) : undefined;
}

/** What the planner is told of a run's cgroup. */
export function cgroupInfo(g: SandboxCgroup | null) {
  return g ? { kind: g.kind, pidsMax: g.pidsMax, memoryBytes: g.memoryBytes } : undefined;
}
