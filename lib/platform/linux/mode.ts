/**
 * Which Linux mode runs a request (chooseLinuxMode), why isolated mode is out of reach, and
 * Landlock mode's refusals: the gaps it always has, those that are facts of the mode, and the
 * error that names what a policy asks for and the mode cannot hold (landlockRefusal).
 */
import { SandboxError } from '../../errors';
import type { LinuxProbe } from '../../native';
import type { ResolvedRules } from '../../rules';
import { apparmorConfinedHint, apparmorConfinement, apparmorHint, apparmorRestrictsUserns } from './apparmor';

/** Gaps Landlock mode always has (DESIGN.md: refused unless degraded). */
export const LANDLOCK_INHERENT_GAPS = [
  'chmod, chown, utime and xattr changes on files outside the writable roots are not blocked (Landlock has no metadata rights)',
];

/**
 * Why Landlock mode's supervisors are off where the kernel has them: they read the command's
 * memory and take its fds, with process_vm_readv and pidfd_getfd or, where a container's seccomp
 * profile refuses those (Docker's default without CAP_SYS_PTRACE), /proc/<pid>/mem and
 * /proc/<pid>/fd (native/linux/supervisor/task_access.h). Empty unless neither way works.
 */
export function noAccess(probe: LinuxProbe): string {
  if (probe.supervisorAccess !== 'none') return '';
  return (
    ' (the supervisor cannot read the command: process_vm_readv and pidfd_getfd are refused, as a container runtime\'s ' +
    'default seccomp profile does without CAP_SYS_PTRACE, and /proc/<pid>/mem is not readable either; grant CAP_SYS_PTRACE ' +
    'or a seccomp profile allowing those calls)'
  );
}

export function noSupervision(probe: LinuxProbe): string {
  return `this kernel has no seccomp supervision: errno ${-(probe.connectSupervisor ?? -38)}${noAccess(probe)}`;
}

/**
 * Why isolated mode cannot run on this kernel although user namespaces work, or undefined. Its
 * mount tree needs mount_setattr (5.12): on an older kernel (Debian 11's 5.10) a spawn would fail
 * half-way through its mount setup.
 */
export function isolatedKernelGap(probe: LinuxProbe): string | undefined {
  if (probe.mountApi === undefined || probe.mountApi === 0) return undefined;
  return (
    `isolated mode needs Linux 5.12 or later (its mount tree is built with mount_setattr), and this kernel ` +
    `(${probe.kernel ?? 'unknown'}) lacks it (errno ${-probe.mountApi})`
  );
}

/**
 * Why isolated mode would have no /proc here, or undefined. The kernel mounts a fresh procfs only
 * where the one already visible is not partly covered; a container runtime's masked paths over
 * /proc (rootless Podman) cover it, and the mount is refused (the probe tries it). Isolated mode
 * without /proc is refused, never run: auto mode picks Landlock mode instead.
 */
export function isolatedProcGap(probe: LinuxProbe): string | undefined {
  if (probe.userns !== 0 || probe.procfs === undefined || probe.procfs === 0) return undefined;
  return (
    `procfs cannot be mounted in a nested pid namespace here (errno ${-probe.procfs}: masked paths over /proc, ` +
    `as in rootless containers); isolated mode would have no /proc`
  );
}

export function chooseLinuxMode(rules: ResolvedRules, probe: LinuxProbe): 'isolated' | 'landlock' {
  const kernelGap = probe.userns === 0 ? isolatedKernelGap(probe) : undefined;
  const procGap = kernelGap ? undefined : isolatedProcGap(probe);
  if (kernelGap && (rules.mode === 'isolated' || (rules.mode !== 'landlock' && probe.landlockAbi < 1))) {
    // Too old for isolated mode, and (unless asked for by name) for Landlock (5.13) as well: nothing
    // here can sandbox, so no way out but a newer kernel is worth naming.
    throw new SandboxError(
      'ENOT_ENFORCED',
      `${kernelGap}; ` +
        (rules.mode === 'isolated' ? '' : `Landlock mode needs Linux 5.13 (this kernel has no Landlock), so nothing can sandbox here; `) +
        `upgrade the kernel (on Debian 11: the bullseye-backports kernel)`,
      { errno: -(probe.mountApi ?? 0) },
    );
  }
  if (rules.mode === 'isolated') {
    if (probe.userns !== 0) {
      throw new SandboxError(
        'EUSERNS_UNAVAILABLE',
        apparmorRestrictsUserns()
          ? `isolated mode needs unprivileged user namespaces: ${apparmorHint()}; or use mode 'landlock'`
          : `isolated mode needs unprivileged user namespaces, which this host refuses (errno ${-probe.userns})${apparmorConfined()}; ` +
              `enable them (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0, or AppArmor's ` +
              `kernel.apparmor_restrict_unprivileged_userns=0) or use mode 'landlock'`,
        { errno: -probe.userns },
      );
    }
    if (procGap) {
      throw new SandboxError(
        'ENOT_ENFORCED',
        `isolated mode cannot run here: ${procGap}; use mode 'landlock' (or 'auto', which picks it here), ` +
          `or run the container without masked paths over /proc (Podman: --security-opt unmask=ALL)`,
        { errno: -probe.procfs!, detail: { procfs: probe.procfs } },
      );
    }
    return 'isolated';
  }
  if (rules.mode === 'landlock') return 'landlock';
  if (probe.userns === 0 && !kernelGap && !procGap) return 'isolated';
  if (probe.landlockAbi < 1) {
    if (procGap) {
      throw new SandboxError(
        'ENOT_ENFORCED',
        `${procGap}, and the fallback, Landlock mode, needs Landlock (Linux 5.13+ with ` +
          `CONFIG_SECURITY_LANDLOCK and landlock in the lsm= list); nothing can sandbox here`,
        { errno: -probe.procfs!, detail: { procfs: probe.procfs } },
      );
    }
    throw new SandboxError(
      'EUSERNS_UNAVAILABLE',
      `${usernsWhy(probe)}, and the fallback, Landlock mode, needs Landlock (Linux 5.13+ with ` +
        `CONFIG_SECURITY_LANDLOCK and landlock in the lsm= list); enable user namespaces`,
      { errno: -probe.userns },
    );
  }
  // Auto mode falls back to Landlock mode. Whether that needs `degraded` is decided once the run
  // is planned: only a guarantee this policy asks for that Landlock mode cannot hold here needs it
  // (landlockRefusal below).
  return 'landlock';
}

/** Why isolated mode is out of reach on this host (user namespaces, AppArmor's restriction). */
function usernsWhy(probe: LinuxProbe): string {
  // Under Ubuntu's AppArmor restriction the namespace itself can be made and only its mounts fail
  // (the probe's EPERM): "unavailable (errno 1)" would send the user to the wrong sysctl.
  // Read only on the way to a refusal (the sysctl is a file): never on a spawn that goes ahead.
  return apparmorRestrictsUserns()
    ? apparmorHint()
    : `unprivileged user namespaces are unavailable here (errno ${-probe.userns})${apparmorConfined()}`;
}

/**
 * A Node confined by an AppArmor profile (a snap, an operator's profile) gets the profile named:
 * there the profile, not a sysctl, is what to change. Empty when unconfined or without AppArmor.
 */
function apparmorConfined(): string {
  const label = apparmorConfinement();
  return label === null ? '' : `; ${apparmorConfinedHint(label)}`;
}

/**
 * Landlock mode's gaps that are facts of the mode, not a guarantee the policy asked for: they are
 * reported and never need `degraded`. Every other gap does (an unknown one too: fail closed).
 */
export const LANDLOCK_FACT_GAPS: RegExp[] = [
  /^\/tmp itself stays read-only; the private temp dir is TMPDIR only$/, // the writes land in TMPDIR instead
  /^POSIX shared memory and semaphores \(\/dev\/shm\) are unavailable/, // refused, not shared
  /^the capability bounding set cannot be emptied without privileges/, // no_new_privs holds: none can be gained
  /^Landlock ABI \d+ has no TCP rules; seccomp alone blocks sockets$/, // blocked all the same
  // No policy field asks for it, and nothing cheap enough can enforce it (docs/security.md): the
  // command lines and status of host processes are readable; their environment, memory, maps
  // and fds are not (Landlock's ptrace rule). Reported, with processIsolation 'partial'.
  /^host processes stay visible in \/proc \(command lines, not memory or environment\)$/,
  // No policy field asks for privacy from the user's other sandboxes; the TMPDIR is private from
  // everything else. Reported (and mechanisms.tmp says so when it is readable), never refused:
  // before the per-user shield directory it was readable with nothing said.
  /^the TMPDIR \(and the private caches in it\) is readable by other Landlock-mode sandboxes of this user: /,
  /^the names in other Landlock-mode sandboxes' TMPDIRs of this user \(/,
];

/**
 * The refusal of a Landlock-mode run whose policy asks for what this host cannot hold (`blocking`,
 * exactly those gaps), unless `degraded` accepts them. Auto mode names why isolated mode is out
 * of reach too, with the code the user's fix depends on.
 */
export function landlockRefusal(rules: ResolvedRules, probe: LinuxProbe, blocking: string[]): SandboxError {
  const what = `Landlock mode cannot hold what this policy asks for: ${blocking.join('; ')}`;
  if (rules.mode === 'landlock') {
    return new SandboxError(
      'EUNSUPPORTED_POLICY',
      `${what}. Pass degraded: true (CLI --degraded) to run with these gaps listed in the report, or use isolated mode`,
      { detail: { gaps: blocking } },
    );
  }
  const kernelGap = probe.userns === 0 ? isolatedKernelGap(probe) : undefined;
  const procGap = kernelGap ? undefined : isolatedProcGap(probe);
  if (procGap) {
    return new SandboxError(
      'ENOT_ENFORCED',
      `${procGap}, and ${what}; pass degraded: true (CLI --degraded) to accept Landlock mode with these gaps, ` +
        `or run the container without masked paths over /proc (Podman: --security-opt unmask=ALL)`,
      { errno: -probe.procfs!, detail: { gaps: blocking, procfs: probe.procfs } },
    );
  }
  return new SandboxError(
    kernelGap ? 'ENOT_ENFORCED' : 'EUSERNS_UNAVAILABLE',
    `${kernelGap ?? usernsWhy(probe)}, and ${what}; pass degraded: true (CLI --degraded) to accept Landlock mode ` +
      `with these gaps, or ${kernelGap ? 'upgrade the kernel' : 'enable user namespaces'}`,
    { errno: kernelGap ? -(probe.mountApi ?? 0) : -probe.userns, detail: { gaps: blocking } },
  );
}

export function requireSeccomp(probe: LinuxProbe): void {
  if (probe.seccomp !== 0) {
    throw new SandboxError(
      'ESECCOMP_UNSUPPORTED',
      `seccomp filters are unavailable (errno ${-probe.seccomp}); the kernel needs CONFIG_SECCOMP_FILTER`,
      { errno: -probe.seccomp },
    );
  }
}
