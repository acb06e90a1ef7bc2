/**
 * Linux planning: ResolvedRules -> the addon's plan (mount steps, Landlock rules, seccomp mode,
 * namespaces) plus the enforcement report. Pure except for lstat/existence checks, so it is unit
 * tested without spawning. lib/platform/linux.ts runs the plan.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { EnforcementReport } from '../backend';
import { SandboxError } from '../errors';
import type { LinuxMountOp, LinuxNativePlan, LinuxProbe } from '../native';
import { isWithin } from '../paths';
import { lstatOrNull } from '../permissions/canonical';
import { cachedWalk } from '../permissions/walk-cache';
import type { RecordPlan } from '../changes/record';
import type { ResolvedRules } from '../rules';
import { apparmorConfinedHint, apparmorConfinement, apparmorHint, apparmorRestrictsUserns } from './linux-apparmor';
import { planCaches } from './linux-caches';
import { gitExcludeViews } from './linux-git-view';

/** Mirrors native/linux/spawn_linux.h MountOpKind (append only). */
export const MountKind = {
  TmpClone: 0,
  Tmpfs: 1,
  Mkdir: 2,
  Mkfile: 3,
  MoveSlot: 4,
  ReadOnlyAll: 5,
  BindRw: 6,
  BindRo: 7,
  Pin: 8,
  GhostDir: 9,
  GhostFile: 10,
  MaskDir: 11,
  MaskFile: 12,
  Proc: 13,
  Dev: 14,
  SetReadOnly: 15,
  ClearReadOnly: 16,
  Sys: 17,
  Overlay: 18,
  ViewFile: 19,
  StageOverlay: 20,
} as const;

/** MountOp.arg of a Pin or BindRo step whose path may have vanished since planning (planMounts). */
export const VANISH_OK = 1;

/** Default cap on processes+threads per sandbox in isolated mode (counted per user namespace). */
export const DEFAULT_MAX_PROCESSES = 4096;
/** Default total size of isolated mode's private tmpfs mounts: /tmp 3/4, /dev/shm 1/4. */
export const DEFAULT_TMP_BYTES = 1 << 30;
/** Per-uid kernel quotas the command gets (RLIMIT_SIGPENDING also bounds POSIX timers). */
export const DEFAULT_SIGPENDING = 1024;
export const DEFAULT_MSGQUEUE_BYTES = 256 << 10;

/** tmpfs options for isolated mode's private /tmp and /dev/shm (sizes in bytes, inodes bounded too). */
export function tmpfsSizes(tmpBytes = DEFAULT_TMP_BYTES): { tmp: string; shm: string } {
  const opts = (bytes: number) => `size=${bytes},nr_inodes=${Math.max(1024, Math.floor(bytes / 4096))}`;
  const shm = Math.max(4096, Math.floor(tmpBytes / 4 / 4096) * 4096);
  return { tmp: opts(Math.max(4096, tmpBytes - shm)), shm: opts(shm) };
}

/**
 * What stays readable when reads are restricted to listed roots (Landlock read rules), besides
 * those roots and the executable itself. Documented in the README ("Restricted reads") and listed
 * in every report as mechanisms.platformReads (the ones that exist on this host):
 * - programs and libraries: /bin, /sbin, /usr, /lib*;
 * - /dev (isolated mode: its own minimal /dev; Landlock mode: the harmless device files only),
 *   /proc, /sys;
 * - from /etc only what the dynamic linker, name resolution, TLS, locale, time zone and the
 *   common tools' system config need: not all of /etc (no shadow, no machine-id, no service
 *   configs).
 * The cwd is not added: chdir needs no read right, and a cwd outside the listed roots stays
 * unreadable (it used to be granted, with everything below it).
 */
const PLATFORM_READ_DEFAULTS = ['/bin', '/sbin', '/usr', '/lib', '/lib32', '/lib64', '/libx32', '/dev', '/proc', '/sys'];
export const PLATFORM_ETC_READS = [
  '/etc/ld.so.cache',
  '/etc/ld.so.conf',
  '/etc/ld.so.conf.d',
  '/etc/ld.so.preload',
  '/etc/nsswitch.conf',
  '/etc/passwd',
  '/etc/group',
  '/etc/hosts',
  '/etc/host.conf',
  '/etc/hostname',
  '/etc/resolv.conf',
  '/etc/gai.conf',
  '/etc/services',
  '/etc/protocols',
  '/etc/networks',
  '/etc/localtime',
  '/etc/timezone',
  '/etc/locale.alias',
  '/etc/locale.conf',
  '/etc/default/locale',
  '/etc/ssl',
  '/etc/ca-certificates',
  '/etc/ca-certificates.conf',
  '/etc/pki',
  '/etc/crypto-policies',
  '/etc/alternatives',
  '/etc/mime.types',
  '/etc/magic',
  '/etc/magic.mime',
  '/etc/os-release',
  '/etc/lsb-release',
  '/etc/debian_version',
  '/etc/terminfo',
  '/etc/inputrc',
  '/etc/environment',
  '/etc/shells',
  '/etc/profile',
  '/etc/profile.d',
  '/etc/bash.bashrc',
  '/etc/gitconfig',
  '/etc/npmrc',
  '/etc/pip.conf',
  '/etc/python3',
  '/etc/mtab',
];
/** Device files a sandboxed tool may open for writing. */
const DEVICE_RULES = ['/dev/null', '/dev/zero', '/dev/full', '/dev/tty'];
/**
 * Isolated mode's /dev/pts is a devpts instance of its own, holding only the sandbox's terminals.
 * Landlock mode's would be the host's, with every terminal of the user in it (another session's
 * /dev/pts/N could be read and written): it gets none of it, only the terminals on its stdio, by
 * inode (landlock.h stdio_terminals). /dev/tty reaches the controlling terminal only, and after
 * setsid that is the pty option's terminal or none.
 */
const ISOLATED_DEVICE_RULES = ['/dev/ptmx', '/dev/pts'];

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
  /** The sandbox's cgroup (lib/platform/linux-cgroup.ts), when one was made for this run. */
  cgroup?: { kind: 'v1' | 'v2'; pidsMax: number; memoryBytes?: number };
  /**
   * Landlock mode without a cgroup, unprivileged: the tasks the uid runs now (linux-quotas.ts
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
}

export interface LinuxPlan {
  mode: 'isolated' | 'landlock';
  native: Omit<LinuxNativePlan, 'stdio'>;
  enforcement: EnforcementReport;
  /** Protected paths that did not exist: init creates them as placeholders; remove after exit. */
  ghosts: string[];
}

/**
 * Protected names that are directories (a missing one is held by an empty read-only directory):
 * git's and the agents' metadata directories and the 'startup-files' editor and agent folders.
 */
const DIR_PLACEHOLDER_NAMES = new Set(['.git', 'hooks', 'modules', '.codex', '.agents', '.aws', '.claude', '.vscode', '.idea', 'commands', 'agents']);

/**
 * A missing protected path is held by an empty placeholder of the right kind: the directory names
 * above are directories, every other name (`config`, `.mcp.json`, start-up files, a `protect` or
 * srt `denyWrite` entry) a file. A write to a name held by a directory fails with EISDIR ("Is a
 * directory"), which does not read as a refusal; on a read-only file it is EROFS.
 */
export function placeholderIsFile(p: string): boolean {
  return !DIR_PLACEHOLDER_NAMES.has(path.basename(p));
}

function realpathOrNull(p: string): string | null {
  try {
    return fs.realpathSync.native(p);
  } catch {
    return null;
  }
}


/** Gaps Landlock mode always has (DESIGN.md: refused unless degraded). */
export const LANDLOCK_INHERENT_GAPS = [
  'chmod, chown, utime and xattr changes on files outside the writable roots are not blocked (Landlock has no metadata rights)',
];

/**
 * Why isolated mode cannot run on this kernel although user namespaces work, or undefined. Its
 * mount tree needs mount_setattr (5.12): on an older kernel (Debian 11's 5.10) a spawn would fail
 * half-way through its mount setup.
 */
/**
 * Why Landlock mode's supervisors are off where the kernel has them: they read the command's
 * memory and take its fds, with process_vm_readv and pidfd_getfd or, where a container's seccomp
 * profile refuses those (Docker's default without CAP_SYS_PTRACE), /proc/<pid>/mem and
 * /proc/<pid>/fd (native/linux/task_access.h). Empty unless neither way works.
 */
function noAccess(probe: LinuxProbe): string {
  if (probe.supervisorAccess !== 'none') return '';
  return (
    ' (the supervisor cannot read the command: process_vm_readv and pidfd_getfd are refused, as a container runtime\'s ' +
    'default seccomp profile does without CAP_SYS_PTRACE, and /proc/<pid>/mem is not readable either; grant CAP_SYS_PTRACE ' +
    'or a seccomp profile allowing those calls)'
  );
}

function noSupervision(probe: LinuxProbe): string {
  return `this kernel has no seccomp supervision: errno ${-(probe.connectSupervisor ?? -38)}${noAccess(probe)}`;
}

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
const LANDLOCK_FACT_GAPS: RegExp[] = [
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

function requireSeccomp(probe: LinuxProbe): void {
  if (probe.seccomp !== 0) {
    throw new SandboxError(
      'ESECCOMP_UNSUPPORTED',
      `seccomp filters are unavailable (errno ${-probe.seccomp}); the kernel needs CONFIG_SECCOMP_FILTER`,
      { errno: -probe.seccomp },
    );
  }
}

/** Device files any tool may read (Landlock mode grants these instead of all of /dev). */
// (/dev/fd and /dev/std* are symlinks into /proc, which is readable; a rule on them would resolve
// to the command's own pipes, which Landlock refuses.)
const DEVICE_READS = ['/dev/random', '/dev/urandom'];

type LandlockRule = { path: string; access: 'read' | 'write' | 'device' | 'list'; exact?: boolean };

/**
 * "Read everything" for Landlock mode. Landlock rules only add, so "/" would include the host's
 * /dev: as root that means raw disks (FS-16). Instead: every top-level entry but /dev, listing
 * anywhere, and the harmless device files by name. (Isolated mode's /dev is our own minimal one.)
 */
function landlockReadAllRules(): LandlockRule[] {
  const out: LandlockRule[] = [{ path: '/', access: 'list' }];
  // The listing is cached between plans while no entry of / is created, removed or renamed.
  const { found: names } = cachedWalk('/', lstatOrNull('/'), () => ({ found: listRoot(), truncated: false, dirs: ['/'] }), undefined, 'root-listing');
  for (const n of names) if (n !== 'dev') out.push({ path: `/${n}`, access: 'read' });
  for (const d of DEVICE_READS) out.push({ path: d, access: 'read' });
  return out;
}

function listRoot(): string[] {
  try {
    return fs.readdirSync('/');
  } catch {
    return [];
  }
}

let platformPresent: string[] | undefined;

/** The platform read set that exists on this host (looked up once per process: plans stay cheap). */
export function platformReads(mode: 'isolated' | 'landlock'): string[] {
  platformPresent ??= [...PLATFORM_READ_DEFAULTS, ...PLATFORM_ETC_READS].filter((p) => lstatOrNull(p) !== null);
  return mode === 'isolated' ? platformPresent : platformPresent.filter((d) => d !== '/dev');
}

function landlockRules(input: LinuxPlanInput, mode: 'isolated' | 'landlock') {
  const { rules } = input;
  const out: LandlockRule[] = [];
  if (rules.readAll) {
    if (mode === 'isolated') out.push({ path: '/', access: 'read' });
    else out.push(...landlockReadAllRules());
  } else {
    const reads = new Set([...platformReads(mode), ...rules.readRoots, input.file]);
    for (const r of reads) out.push({ path: r, access: 'read' });
    if (mode === 'landlock') {
      out.push({ path: '/dev', access: 'list' });
      for (const d of DEVICE_READS) out.push({ path: d, access: 'read' });
    }
  }
  for (const w of rules.writeRoots) out.push({ path: w, access: 'write' });
  for (const d of DEVICE_RULES) out.push({ path: d, access: 'device' });
  if (mode === 'isolated') {
    for (const d of ISOLATED_DEVICE_RULES) out.push({ path: d, access: 'device' });
    out.push({ path: '/dev/shm', access: 'write' });
    if (rules.tmp === 'private') out.push({ path: '/tmp', access: 'write' });
  } else if (input.landlockTmpDir) {
    out.push({ path: input.landlockTmpDir, access: 'write' });
  }
  return out;
}

/**
 * Most rules Landlock mode makes to carve deny-read paths out of the roots around them. Past it
 * the deny-read paths stay a listed gap (refused unless degraded) rather than a spawn that
 * spends milliseconds adding rules.
 */
export const DENY_CARVE_MAX_RULES = 8192;

/** The entries of a directory on the way down to a deny-read path: `d/name`, `l/name`, `f/name`. */
function chainListing(dir: string): string[] | null {
  // Cached between plans while nothing in the directory is created, removed or renamed (a home
  // directory with hundreds of entries is read once, not on every spawn).
  const { found, truncated } = cachedWalk(
    dir,
    lstatOrNull(dir),
    () => {
      try {
        const found = fs
          .readdirSync(dir, { withFileTypes: true })
          .map((e) => `${e.isSymbolicLink() ? 'l' : e.isDirectory() ? 'd' : 'f'}/${e.name}`);
        return { found, truncated: false, dirs: [dir] };
      } catch {
        return { found: [], truncated: true, dirs: [] };
      }
    },
    undefined,
    'deny-carve',
  );
  return truncated ? null : found;
}

export interface DenyCarve {
  rules: LandlockRule[];
  /** Directories on the way from a root down to a deny-read path: listable, their entries fixed. */
  chainDirs: string[];
  /** Chain directories the planner could not list: none of their entries is granted. */
  unlisted: string[];
}

/**
 * Landlock mode's deny-read under readable (or writable) roots. A Landlock right on a directory
 * covers everything below it and rules only add, so "readable except this subtree" is built as
 * its complement: a root with a deny-read path inside it is replaced by
 *  - a list-only rule (read-dir) on each directory on the way from the root down to the denied
 *    path (the chain), so `ls` of them still works;
 *  - the root's own rule on every other entry of those directories (each sibling), by inode.
 * The denied entry gets nothing; the supervisor refuses listings of it (the chain's list right
 * reaches it: metadata_supervisor.cc kListDir). What follows from rules being per inode:
 *  - an entry made in a chain directory during the run (by the host, or a file replaced by
 *    rename) has no rule: it can be listed and stat'ed, not read, until the next run. So a denied
 *    path that is missing, or made again, stays unreadable whoever creates it;
 *  - in a writable root, a chain directory keeps only the list right: its entries are fixed for
 *    the run (no create, remove or rename there: that would need rights that reach the denied
 *    path too, and a new file would be unreadable anyway). Its existing files and directories
 *    keep every right;
 *  - symlinks among the siblings get no rule (what they point to is judged by its own path), and
 *    siblings are opened without following links (landlock.h kPathExact): one swapped for a link
 *    after planning gets no rule rather than moving the grant.
 * Grants that lie inside a denied path are dropped, except the user's own nested roots (most
 * specific wins, as in isolated mode).
 */
export function carveDenied(rules: LandlockRule[], deny: string[], nestedRoots: ReadonlySet<string>): DenyCarve {
  const out: LandlockRule[] = [];
  const chainDirs: string[] = [];
  const unlisted: string[] = [];
  const expand = (dir: string, access: 'read' | 'write', inside: string[]) => {
    chainDirs.push(dir);
    out.push({ path: dir, access: 'list', exact: true });
    const names = chainListing(dir);
    if (names === null) {
      unlisted.push(dir);
      return;
    }
    // The denied paths below each entry, by the entry's name (one lookup per entry: a home
    // directory can have thousands).
    const prefix = dir === '/' ? '/' : `${dir}/`;
    const denied = new Set<string>();
    const below = new Map<string, string[]>();
    for (const d of inside) {
      const rest = d.slice(prefix.length);
      const slash = rest.indexOf('/');
      if (slash < 0) denied.add(rest);
      else below.set(rest.slice(0, slash), [...(below.get(rest.slice(0, slash)) ?? []), d]);
    }
    for (const e of names) {
      const name = e.slice(2);
      if (e[0] === 'l' || denied.has(name)) continue;
      const under = below.get(name);
      if (under === undefined) out.push({ path: prefix + name, access, exact: true });
      else if (e[0] === 'd') expand(prefix + name, access, under);
    }
  };
  for (const r of rules) {
    if (r.access !== 'read' && r.access !== 'write') {
      out.push(r);
      continue;
    }
    // Deny-read paths are canonical; a grant through a link (/lib64, /bin on merged-/usr hosts)
    // is compared, and carved, at its target.
    const real = realpathOrNull(r.path) ?? r.path;
    // Inside a denied path: dropped, unless it is the user's own root nested there, which is
    // then carved like any other (a deny-read path can lie inside it in turn).
    const over = deny.find((d) => isWithin(real, d));
    if (over !== undefined && (real === over || !nestedRoots.has(real))) continue;
    const inside = deny.filter((d) => d !== real && isWithin(d, real));
    if (inside.length === 0 || !lstatOrNull(real)?.isDirectory()) {
      out.push(r);
      continue;
    }
    expand(real, r.access, inside);
  }
  // One rule per path, with the widest access any grant gave it.
  const rank = { list: 0, read: 1, write: 2, device: 3 } as const;
  const byPath = new Map<string, LandlockRule>();
  const merged: LandlockRule[] = [];
  for (const r of out) {
    const prev = byPath.get(r.path);
    if (prev === undefined || r.access === 'device' || prev.access === 'device') {
      const copy = { ...r };
      if (prev === undefined && r.access !== 'device') byPath.set(r.path, copy);
      merged.push(copy);
      continue;
    }
    if (rank[r.access] > rank[prev.access]) {
      prev.access = r.access;
      prev.exact = r.exact;
    }
  }
  return { rules: merged, chainDirs, unlisted };
}

/** Prefix of the directory (one per uid, 0700) Landlock mode's TMPDIRs are made in (linux.ts tmpParent). */
export const TMP_PARENT_PREFIX = 'process-sandbox-u';

/**
 * Landlock mode: every TMPDIR of this uid lives in one directory (linux.ts tmpParent), which the
 * grants (read everything, or a read root over /tmp) would let the command read: other runs'
 * temp files and private caches, and those of runs that start later. That directory is denied
 * like a deny-read path (carveDenied; this run's own TMPDIR, a grant nested in it, stays), and a
 * directory made there later has no rule either. Returns the directory, or why it cannot be
 * denied (a listed gap), or null when nothing the command may read covers it.
 */
function tmpShield(input: LinuxPlanInput, grants: LandlockRule[]): { dir: string; own: string } | { gap: string } | null {
  const tmp = input.landlockTmpDir;
  if (input.mode !== 'landlock' || !tmp) return null;
  const own = realpathOrNull(tmp) ?? tmp;
  const parent = path.dirname(own);
  const exposed = grants.some((r) => (r.access === 'read' || r.access === 'write') && isWithin(parent, realpathOrNull(r.path) ?? r.path));
  if (!exposed) return null;
  if (!path.basename(parent).startsWith(TMP_PARENT_PREFIX)) {
    return { gap: `it was made in ${parent}, not in a directory of this user's own (which could not be made or was not trusted)` };
  }
  const w = input.rules.writeRoots.find((r) => isWithin(parent, r));
  return w === undefined ? { dir: parent, own } : { gap: `their directory ${parent} lies in the writable root ${w}` };
}

/**
 * changes: 'record' in Landlock mode: refused unless the path supervisor carries out every write
 * call (so each is journaled first) and the journal directory is denied to the command.
 */
function checkRecordable(probe: LinuxProbe, pathsSupervised: boolean, carveGap: string | undefined): void {
  if (!pathsSupervised) {
    throw new SandboxError(
      'EUNSUPPORTED_POLICY',
      `changes: 'record' needs Landlock mode's path supervisor (seccomp user notification with ADDFD, Linux 5.9+, and a way ` +
        `to read the command's memory; errno ${-(probe.connectSupervisor ?? -38)}${noAccess(probe)}): use isolated mode`,
      { detail: { changes: 'record' } },
    );
  }
  if (carveGap) throw new SandboxError('EUNSUPPORTED_POLICY', `changes: 'record' cannot keep its journal from the command: ${carveGap}`, { detail: { changes: 'record' } });
}

/** Mount steps for isolated mode, in execution order. */
export interface MountPlan {
  mounts: LinuxMountOp[];
  tmpSlots: number;
  ghosts: string[];
  /** Protected paths only partly protected (degraded). */
  protectGaps: string[];
  /** Deny-read paths only partly enforced. */
  denyGaps: string[];
}

export function planMounts(input: LinuxPlanInput): MountPlan {
  const { rules, cwd } = input;
  const mounts: LinuxMountOp[] = [];
  const ghosts: string[] = [];
  const protectGaps: string[] = [];
  const denyGaps: string[] = [];
  let tmpSlots = 0;
  mounts.push(...(input.stageMounts ?? []));

  if (rules.tmp === 'private') {
    // Paths under /tmp the command must still see after /tmp is covered by a private tmpfs:
    // writable roots (read-write) and the cwd (read-only unless inside a writable root).
    const exposures: string[] = [];
    const candidates = [...rules.writeRoots, cwd, ...(rules.readAll ? [] : rules.readRoots)];
    for (const p of [...new Set(candidates)].sort()) {
      if (p === '/tmp' || !isWithin(p, '/tmp')) continue;
      if (exposures.some((e) => isWithin(p, e))) continue;
      exposures.push(p);
    }
    exposures.forEach((p, slot) => mounts.push({ kind: MountKind.TmpClone, path: p, arg: slot }));
    tmpSlots = exposures.length;
    mounts.push({ kind: MountKind.Tmpfs, path: '/tmp', data: `mode=1777,${tmpfsSizes(rules.limits.tmpBytes).tmp}` });
    exposures.forEach((p, slot) => {
      const parts = path.relative('/tmp', p).split('/');
      for (let i = 1; i < parts.length; i++) {
        mounts.push({ kind: MountKind.Mkdir, path: path.join('/tmp', ...parts.slice(0, i)) });
      }
      const st = lstatOrNull(p);
      mounts.push({ kind: st && !st.isDirectory() ? MountKind.Mkfile : MountKind.Mkdir, path: p });
      mounts.push({ kind: MountKind.MoveSlot, path: p, arg: slot });
    });
  }

  mounts.push({ kind: MountKind.ReadOnlyAll, path: '/' });
  if (rules.tmp === 'private') mounts.push({ kind: MountKind.ClearReadOnly, path: '/tmp' });

  const writeRoots = [...rules.writeRoots].sort((a, b) => a.length - b.length);

  // Writable roots and read-only carve-outs are applied together, outermost first: a writable
  // root nested in a carve-out (ws/.codex/cache, a root under a `protect`ed directory) is bound
  // after the carve-out made its parent read-only, so it stays writable, and the placeholders
  // inside it are created in its writable bind instead of failing with EROFS.
  // Read-only areas applied so far (a symlinked carve-out counts as its target).
  const readOnlyAreas: string[] = [];
  const alreadyReadOnly = (p: string): boolean =>
    readOnlyAreas.some((ro) => isWithin(p, ro) && !writeRoots.some((w) => isWithin(p, w) && w !== ro && isWithin(w, ro)));
  type Step = { path: string; write: boolean };
  const steps: Step[] = [
    ...writeRoots.map((w) => ({ path: w, write: true })),
    ...rules.readOnly.map((p) => ({ path: p, write: false })),
  ].sort((a, b) => a.path.length - b.path.length || Number(b.write) - Number(a.write));

  // Every directory between the writable root and the carve-out is pinned (bound onto itself) so
  // it cannot be renamed away and recreated (FS-06).
  const pinned = new Set<string>();
  const heldAncestors = new Set<string>();
  // A directory can vanish between this plan and the mounts (another run's scratch tree in a
  // shared /tmp, a concurrent `rm -rf`). Steps marked VANISH_OK (arg) then skip it instead of
  // failing the spawn; spawn_mounts.cc skips only when the name is really gone (lstat ENOENT,
  // not a dangling symlink put in its place). Why that is safe:
  //  - a pin holds an existing directory so it cannot be renamed away and replaced; with the
  //    directory gone there is nothing to hold. What lies below it is decided by its own steps:
  //  - a carve-out protected only because it existed (rules.presentOnly: a nested repository's
  //    hooks, an unreadable directory...) that is gone leaves nothing to protect, and a plan made
  //    now would not hold its name either (the command may create any new repository anyway);
  //  - every other carve-out is held even when missing (a placeholder keeps the name). Its step
  //    is not marked: if it or its parent vanished, the bind or the placeholder fails with ENOENT
  //    before the command runs, so a held name never becomes creatable unprotected; the backend
  //    then plans once more (lib/platform/linux.ts), and that plan holds the name as missing.
  const presentOnly = new Set(rules.presentOnly ?? []);
  for (const step of steps) {
    if (step.write) {
      if (lstatOrNull(step.path)) mounts.push({ kind: MountKind.BindRw, path: step.path });
      continue;
    }
    const root = writeRoots.filter((w) => isWithin(step.path, w)).sort((a, b) => b.length - a.length)[0];
    if (!root || step.path === root) continue;
    let p = step.path;
    let st = lstatOrNull(p);
    let ancestor = false;
    if (!st && !lstatOrNull(path.dirname(p))?.isDirectory()) {
      // A protected path whose parent is missing too (`protect: [ws/tools/deploy.sh]`, a
      // core.hooksPath of .husky/_ before .husky exists): the command could create the whole
      // chain. Its first missing directory is held instead (an existing non-directory on the way
      // would have to be removed first, which the pins and binds do not cover: left as is).
      let first: string | null = null;
      let cur = root;
      for (const part of path.relative(root, p).split('/')) {
        cur = path.join(cur, part);
        const s2 = lstatOrNull(cur);
        if (s2 === null) {
          first = cur;
          break;
        }
        if (!s2.isDirectory()) break;
      }
      if (first === null || heldAncestors.has(first)) continue;
      heldAncestors.add(first);
      p = first;
      st = null;
      ancestor = true;
    }
    // Under a read-only area with no writable root in between, a missing path cannot be created
    // (and an existing one is read-only already): nothing to do.
    if (!st && alreadyReadOnly(p)) continue;
    for (let dir = path.dirname(p); dir !== root && isWithin(dir, root); dir = path.dirname(dir)) {
      if (pinned.has(dir)) continue;
      pinned.add(dir);
      mounts.push({ kind: MountKind.Pin, path: dir, arg: VANISH_OK });
    }
    if (st?.isSymbolicLink()) {
      // A mount cannot be placed on a symlink: its target can be made read-only, but the link
      // itself stays an ordinary entry of the writable root, which the command could replace
      // with a real directory holding planted config. Refuse rather than pretend.
      if (!rules.degraded) {
        throw new SandboxError(
          'EUNSUPPORTED_POLICY',
          `the protected path ${p} is a symlink inside the writable root ${root}; the link itself cannot be made ` +
            `read-only. Replace it with the real directory or file, or pass degraded: true to accept the gap`,
          { detail: { path: p } },
        );
      }
      protectGaps.push(`the protected symlink ${p} can be replaced (only its target is read-only)`);
      const target = realpathOrNull(p);
      if (target !== null) {
        mounts.push({ kind: MountKind.BindRo, path: p });
        readOnlyAreas.push(target);
      }
    } else if (st) {
      mounts.push({ kind: MountKind.BindRo, path: p, ...(!ancestor && presentOnly.has(p) ? { arg: VANISH_OK } : {}) });
      readOnlyAreas.push(p);
    } else {
      // A missing protected path becomes an empty read-only placeholder so it cannot be created.
      mounts.push({ kind: !ancestor && placeholderIsFile(p) ? MountKind.GhostFile : MountKind.GhostDir, path: p });
      ghosts.push(p);
      readOnlyAreas.push(p);
    }
    pinned.add(p);
  }

  for (const d of rules.denyRead) {
    const st = lstatOrNull(d);
    if (!st) {
      // Missing at start: inside a writable root it could be created and then read, so an empty
      // placeholder holds the name under an unreadable mask for the run (removed afterwards).
      const inWritable = writeRoots.some((w) => isWithin(d, w) && d !== w);
      if (inWritable && alreadyReadOnly(d)) continue; // uncreatable there: nothing to hold
      if (inWritable && lstatOrNull(path.dirname(d))?.isDirectory()) {
        mounts.push({ kind: MountKind.GhostDir, path: d });
        mounts.push({ kind: MountKind.MaskDir, path: d });
        ghosts.push(d);
      } else if (!inWritable) {
        // The command cannot create it, but the host could, during the run.
        denyGaps.push(`the deny-read path ${d} did not exist at start; if something outside creates it during the run, it is readable`);
      }
      continue;
    }
    const nested = st.isDirectory() ? writeRoots.filter((w) => w !== d && isWithin(w, d)) : [];
    if (nested.length === 0) {
      mounts.push({ kind: st.isDirectory() ? MountKind.MaskDir : MountKind.MaskFile, path: d });
      continue;
    }
    // Most specific wins: writable roots inside a deny-read directory stay usable. Their mounts
    // are cloned, the directory is covered by an empty tmpfs that can be traversed but not listed,
    // and only the paths down to those roots are recreated in it before it turns read-only.
    const slots = nested.map((w) => {
      const slot = tmpSlots++;
      mounts.push({ kind: MountKind.TmpClone, path: w, arg: slot });
      return slot;
    });
    mounts.push({ kind: MountKind.Tmpfs, path: d, data: 'mode=0111,size=64k' });
    nested.forEach((w, i) => {
      const parts = path.relative(d, w).split('/');
      for (let j = 1; j < parts.length; j++) mounts.push({ kind: MountKind.Mkdir, path: path.join(d, ...parts.slice(0, j)) });
      mounts.push({ kind: lstatOrNull(w)?.isDirectory() === false ? MountKind.Mkfile : MountKind.Mkdir, path: w });
      mounts.push({ kind: MountKind.MoveSlot, path: w, arg: slots[i] });
    });
    mounts.push({ kind: MountKind.SetReadOnly, path: d });
  }
  // Git inside must not take the placeholders for the command's files (linux-git-view.ts).
  mounts.push(...gitExcludeViews(ghosts, rules.denyRead, MountKind.ViewFile));
  mounts.push({ kind: MountKind.Proc, path: '/proc' });
  if (rules.network.kind !== 'full') mounts.push({ kind: MountKind.Sys, path: '/sys' });
  // Isolated mode builds its own /dev, which would silently cover a writable root there. The
  // host's /dev/shm (or a directory in it) asked for as a writable root is carried over onto the
  // new /dev/shm, like the /tmp exposures; any other /dev path cannot be, and is refused.
  const devRoots = writeRoots.filter((w) => isWithin(w, '/dev') && lstatOrNull(w));
  const shmSlots: Array<{ path: string; slot: number }> = [];
  for (const w of devRoots) {
    if (!isWithin(w, '/dev/shm')) {
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        `the writable root ${w} is in /dev, which isolated mode replaces with its own minimal /dev; only /dev/shm ` +
          `(or a directory in it) can be shared with the host`,
        { detail: { path: w } },
      );
    }
    if (shmSlots.some((e) => isWithin(w, e.path))) continue;
    const slot = tmpSlots++;
    mounts.push({ kind: MountKind.TmpClone, path: w, arg: slot });
    shmSlots.push({ path: w, slot });
  }
  mounts.push({ kind: MountKind.Dev, path: '/dev' });
  for (const { path: w, slot } of shmSlots) {
    const parts = path.relative('/dev/shm', w).split('/').filter((x) => x !== '');
    for (let i = 1; i < parts.length; i++) mounts.push({ kind: MountKind.Mkdir, path: path.join('/dev/shm', ...parts.slice(0, i)) });
    if (parts.length > 0) {
      mounts.push({ kind: lstatOrNull(w)?.isDirectory() === false ? MountKind.Mkfile : MountKind.Mkdir, path: w });
    }
    mounts.push({ kind: MountKind.MoveSlot, path: w, arg: slot });
  }
  return { mounts, tmpSlots, ghosts, protectGaps, denyGaps };
}

let procChildren: boolean | undefined;
function landlockTeardownHolds(cg: LinuxPlanInput['cgroup']): boolean {
  procChildren ??= fs.existsSync(`/proc/self/task/${process.pid}/children`);
  return procChildren || cg?.kind === 'v2';
}

/**
 * Moves `plan` (a copy the caller owns) to another proxy port: the fields planLinux fills from
 * `proxyPort` (the connect supervisor's port, Landlock's port rule, isolated mode's listener), and
 * only those. For a sandbox prepared ahead, which gets a port of its own: the spawn that takes it
 * plans afresh with that port and compares, so a field missed here costs the spare, never a rule.
 */
export function setProxyPort(plan: Omit<LinuxNativePlan, 'stdio'>, port: number): void {
  if (plan.seccomp?.connectSupervisor) plan.seccomp.connectSupervisor = port;
  if (plan.landlock?.connectPorts) plan.landlock.connectPorts = [port];
  if (plan.proxyPort !== undefined) plan.proxyPort = port;
}

export function planLinux(original: LinuxPlanInput): LinuxPlan {
  // The user's tool caches (filesystem.caches, linux-caches.ts): overlays or env ('host-writable'
  // caches are writable roots already, resolved with their carve-outs: resolvePolicy).
  const caches = planCaches({
    rules: original.rules,
    mode: original.mode,
    env: original.env,
    tmpfsData: tmpfsSizes(original.rules.limits.tmpBytes).tmp,
    landlockTmpDir: original.landlockTmpDir,
  });
  // tmp 'host': the host's /tmp is simply one more writable root.
  const input =
    original.rules.tmp === 'host' && !original.rules.writeRoots.includes('/tmp')
      ? { ...original, rules: { ...original.rules, writeRoots: [...original.rules.writeRoots, '/tmp'] } }
      : original;
  const { rules, probe, mode } = input;
  requireSeccomp(probe);
  // Gaps the caller opted into while resolving (git: 'allow-init').
  const gaps: string[] = [...(rules.gaps ?? [])];
  const optedGaps = gaps.length;
  const abi = probe.landlockAbi;
  const net = rules.network.kind;
  if (net === 'proxy' && !input.proxyPort) {
    throw new SandboxError('EPROXY_START', 'network proxy mode needs a proxy port');
  }
  if (net === 'proxy' && mode === 'landlock' && abi < 4) {
    throw new SandboxError(
      'ELANDLOCK_UNSUPPORTED',
      `a proxy-only network in Landlock mode needs Landlock TCP rules (ABI 4, Linux 6.7+); this kernel has ABI ${abi}`,
    );
  }
  const needsLandlock = mode === 'landlock' || !rules.readAll;
  if (needsLandlock && abi < 1) {
    throw new SandboxError(
      'ELANDLOCK_UNSUPPORTED',
      mode === 'landlock'
        ? 'Landlock mode needs Landlock (Linux 5.13+ with CONFIG_SECURITY_LANDLOCK and landlock in the lsm= list)'
        : 'restricting reads to listed roots needs Landlock (Linux 5.13+, CONFIG_SECURITY_LANDLOCK)',
    );
  }
  const seccomp: NonNullable<LinuxNativePlan['seccomp']> = { net };
  const native: Omit<LinuxNativePlan, 'stdio'> = {
    mode,
    file: input.file,
    argv: input.argv,
    envp: Object.entries({ ...input.env, ...caches.env }).map(([k, v]) => `${k}=${v}`),
    cwd: input.cwd,
    seccomp,
  };
  // network.unixSockets. What this kernel can enforce: creating unix sockets or not (seccomp).
  // Which socket a connect() reaches cannot be checked: seccomp cannot read the path, a read-only
  // mount does not stop connect() on a socket inode (NET-10), and Landlock (ABI 7 here) has no
  // unix-connect right. So 'all' is enforced exactly; a list is refused unless degraded, and then
  // every pathname socket the command can see is connectable.
  const unix = rules.network.kind === 'full' ? undefined : rules.network.unixSockets;
  const refusedUnix = rules.network.kind === 'full' ? undefined : rules.network.unixSocketsRefused;
  let unixPartial = false;
  if (unix !== undefined && (unix === 'all' || unix.length > 0)) {
    seccomp.unixSockets = true;
    if (unix !== 'all') {
      const gap =
        `network.unixSockets is not enforced as an allow list: any pathname unix socket the command can see is ` +
        `connectable, not only ${unix.join(', ')} (seccomp cannot read the path, Landlock ABI ${abi} has no unix-connect right)`;
      if (!rules.degraded) {
        throw new SandboxError('ENETWORK_NOT_ENFORCEABLE', `${gap}; pass degraded: true to run with this gap listed in the report`, {
          detail: { unixSockets: unix },
        });
      }
      gaps.push(gap);
      unixPartial = true;
    }
    if (mode === 'landlock' && abi < 6) {
      gaps.push(`abstract unix sockets of the host are connectable (Landlock ABI ${abi} has no abstract-socket scope)`);
      unixPartial = true;
    }
  }
  // Landlock mode with the proxy. Landlock's TCP rules are per port, so a rule for the proxy's
  // port would open that port on every IPv4 address. Where the kernel allows it, the connect
  // supervisor takes over instead: Landlock allows no TCP connect at all, seccomp stops connect()
  // in a user notification, and the host hands the command a connection to 127.0.0.1:<port>
  // that it made itself (native/linux/supervise_connect.cc). Without it, the port rule and the
  // gap stay (Landlock mode is degraded-only anyway).
  const supervised = mode === 'landlock' && net === 'proxy' && probe.connectSupervisor === 0;
  if (supervised) seccomp.connectSupervisor = input.proxyPort!;
  // Landlock mode: Landlock has no right for chmod, chown, utime or xattr changes. The same
  // supervisor carries those out itself, on the object it resolved, inside the writable roots
  // and outside the protected paths only (native/linux/metadata_supervisor.cc); without it they
  // are a listed gap.
  const metadataSupervised = mode === 'landlock' && probe.connectSupervisor === 0;
  // Listings are carried out on the command's own open directory (its position included): a dup
  // of it (pidfd_getfd), or where a container's profile refuses that, a reopen through
  // /proc/<pid>/fd at its position that then takes its place (metadata_supervisor.cc).
  const listSupervised = metadataSupervised;
  // What Landlock grants before deny-read paths are carved out (the watch check reads it).
  const grants = abi >= 1 ? landlockRules(input, mode) : [];
  // Landlock mode: deny-read paths inside the granted roots are carved out of them (carveDenied);
  // isolated mode masks them with mounts instead (planMounts).
  let carve: DenyCarve | undefined;
  let carveGap: string | undefined;
  // Other Landlock-mode runs' TMPDIRs (tmpShield): one more denied path, carved the same way.
  const shield = abi >= 1 ? tmpShield(input, grants) : null;
  let shieldDir = shield && 'dir' in shield ? shield : undefined;
  let tmpGap = shield && 'gap' in shield ? shield.gap : undefined;
  if (abi >= 1 && mode === 'landlock' && (rules.denyRead.length > 0 || shieldDir)) {
    const nested = new Set([...rules.readRoots, ...rules.writeRoots, ...(shieldDir ? [shieldDir.own] : [])]);
    let c = carveDenied(grants, shieldDir ? [...rules.denyRead, shieldDir.dir] : rules.denyRead, nested);
    if (c.rules.length > DENY_CARVE_MAX_RULES && shieldDir) {
      tmpGap = `carving ${shieldDir.dir} out takes ${c.rules.length} Landlock rules, one per entry beside it, more than ${DENY_CARVE_MAX_RULES}`;
      shieldDir = undefined;
      c = carveDenied(grants, rules.denyRead, nested);
    }
    if (c.rules.length <= DENY_CARVE_MAX_RULES) carve = rules.denyRead.length > 0 || shieldDir ? c : undefined;
    else {
      carveGap =
        `deny-read under readable roots is not enforced: ${rules.denyRead.join(', ')} (carving them out takes ` +
        `${c.rules.length} Landlock rules, one per entry beside them, more than ${DENY_CARVE_MAX_RULES})`;
    }
  }
  // Landlock mode below ABI 6 (no LANDLOCK_SCOPE_SIGNAL): signals go to the same supervisor,
  // which lets them reach the sandbox's own processes only (native/linux/supervise_signals.cc).
  const signalSupervised = mode === 'landlock' && abi < 6 && probe.connectSupervisor === 0;
  if (signalSupervised) seccomp.signalSupervisor = true;
  if (abi >= 1) {
    native.landlock = { net, rules: carve?.rules ?? grants, ...(mode === 'landlock' ? { stdioTerminals: true } : {}) };
    // The temp dir's entries, carved for the shield alone (no deny-read path of the policy's
    // there): a prepared sandbox may hold an older set of them (linux-spare.ts planKey).
    const tmpHome = shieldDir && carve ? path.dirname(shieldDir.dir) : undefined;
    if (tmpHome && !rules.denyRead.some((d) => isWithin(d, tmpHome))) {
      for (const r of native.landlock.rules) if (r.exact && r.access === 'read' && path.dirname(r.path) === tmpHome) r.volatile = true;
    }
    if (net === 'proxy' && !supervised) native.landlock.connectPorts = [input.proxyPort!];
  }
  // What the supervisor treats as deny-read: the policy's, and the other runs' TMPDIRs. Listings
  // go through it (one round trip per getdents64, docs/performance.md) only for a policy's
  // deny-read path; the TMPDIRs' names alone do not cost every run that (a listed gap).
  const denied = shieldDir ? [...rules.denyRead, shieldDir.dir] : rules.denyRead;
  const listDenied = listSupervised && rules.denyRead.length > 0;
  if (metadataSupervised) {
    seccomp.metadataSupervisor = {
      writable: [...rules.writeRoots, ...(input.landlockTmpDir ? [realpathOrNull(input.landlockTmpDir) ?? input.landlockTmpDir] : [])],
      // A carve-out reached through a symlink (.codex -> real, a link on the way to
      // core.hooksPath) by its target too: the supervisor judges the object it resolved.
      protect: [
        ...new Set([
          ...rules.readOnly,
          ...rules.readOnly.map((p) => realpathOrNull(p)).filter((p): p is string => p !== null),
          ...rules.denyRead,
        ]),
      ],
      // Restricted reads: inotify watches follow what Landlock lets the command read or list
      // (Landlock does not check inotify_add_watch; a directory's watch reports new names in it).
      // Deny-read paths carved out of the granted roots: the same check for watches (everything
      // readable but them under readAll), and listings of them are refused (carveDenied).
      ...(rules.readAll
        ? carve
          ? {
              // Everything, and the roots nested in denied paths (most specific wins).
              readable: ['/', ...rules.readRoots, ...rules.writeRoots, ...(input.landlockTmpDir ? [realpathOrNull(input.landlockTmpDir) ?? input.landlockTmpDir] : [])],
              denyRead: denied,
              ...(listDenied ? { listDirs: true } : {}),
            }
          : {}
        : {
            // Not the list-only rules (/dev): a directory's watch also reports every open, read and
            // write of the files in it, by any process (IN_OPEN "null", IN_MODIFY of a host /dev/shm
            // file), which is more than a listing shows. The grants before carving: a directory on
            // the way to a deny-read path is still readable (its entries are, and their names).
            readable: [
              ...new Set(
                grants
                  .filter((r) => r.access !== 'list')
                  .map((r) => realpathOrNull(r.path))
                  .filter((p): p is string => p !== null),
              ),
            ],
            denyRead: denied,
            ...(carve && listDenied ? { listDirs: true } : {}),
          }),
    };
  }
  // Landlock mode: read-only carve-outs inside writable roots. Landlock cannot express them (a
  // right on a directory covers everything below it); the same supervisor carries out every
  // write-open, create, rename, removal, link and truncate itself, on a pinned parent directory,
  // unless it touches a carve-out (native/linux/supervise_paths.cc). Without it they are a gap.
  // The supervisor is not confined by the command's Landlock domain: a deny-read path inside a
  // writable root is one more carve-out to it (never created, opened for writing, which could
  // also read it, renamed, linked or removed), or it would undo the deny-read carving below.
  const deniedInWritable = rules.denyRead.filter((d) => rules.writeRoots.some((w) => isWithin(d, w)));
  // Before Landlock ABI 3 truncation is not a Landlock right: the same supervisor then carries
  // out truncate(2) and O_TRUNC opens too (only inside the writable roots), carve-outs or not.
  // changes: 'record' needs every such call to go through it, carve-outs or not.
  const pathsSupervised = metadataSupervised && mode === 'landlock' && (rules.readOnly.length > 0 || abi < 3 || input.changes !== undefined);
  if (input.changes) checkRecordable(probe, pathsSupervised, carveGap);
  if (pathsSupervised) {
    seccomp.pathSupervisor = {
      carveOuts: [...new Set([...rules.readOnly, ...deniedInWritable])],
      presentOnly: [...(rules.presentOnly ?? [])],
      devices: DEVICE_RULES,
      // The run's private TMPDIR goes with the run: never recorded, even inside a writable root.
      ...(input.changes ? { changes: { ...input.changes, ...(input.landlockTmpDir ? { exclude: [realpathOrNull(input.landlockTmpDir) ?? input.landlockTmpDir] } : {}) } } : {}),
    };
  }
  // Landlock mode, procPrivacy: other processes' /proc entries and the host's network tables
  // hidden. Every read-only open goes to the same supervisor, which resolves the path itself and
  // opens procfs objects of the sandbox's own processes only, and everything else through a
  // thread confined by the command's Landlock rules (native/linux/supervise_reads.cc). Isolated
  // mode's /proc is the sandbox's own already. Without the supervisor it is refused, never a gap.
  const procPrivate = mode === 'landlock' && rules.procPrivacy === true;
  if (procPrivate) {
    if (!metadataSupervised) {
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        `procPrivacy cannot be held in Landlock mode on this host: it needs seccomp user notification with ADDFD (Linux 5.9+) ` +
          `and a way to read the command's memory (errno ${-(probe.connectSupervisor ?? -38)}${noAccess(probe)}). ` +
          `Drop procPrivacy, or use isolated mode (its /proc is private)`,
        { detail: { procPrivacy: true } },
      );
    }
    // The supervisor opens procfs objects itself (Landlock's ptrace rule would refuse the
    // command's own /proc/self/maps to any other domain), relying on /proc being readable.
    const deniedProc = rules.denyRead.filter((d) => isWithin(d, '/proc'));
    if (deniedProc.length > 0) {
      throw new SandboxError(
        'EUNSUPPORTED_POLICY',
        `procPrivacy cannot be combined with deny-read paths under /proc (${deniedProc.join(', ')}): drop one of them`,
        { detail: { procPrivacy: true, denyRead: deniedProc } },
      );
    }
    seccomp.readSupervisor = true;
  }
  const limits = rules.limits;
  if (limits.memoryBytes) native.rlimitAs = limits.memoryBytes;
  if (limits.openFiles) native.rlimitNofile = limits.openFiles;
  native.rlimitSigpending = DEFAULT_SIGPENDING;
  native.rlimitMsgqueue = DEFAULT_MSGQUEUE_BYTES;
  const cg = input.cgroup;
  let ghosts: string[] = [];
  let namespaces: string[] = [];
  let protectPartial = false;
  let denyPartial = false;
  if (mode === 'isolated') {
    const m = planMounts(input);
    native.mounts = m.mounts;
    native.tmpSlots = m.tmpSlots;
    if (caches.mounts.length > 0) {
      // The cache overlays go last before /proc: after the read-only remount of / (they stay
      // writable) and after every bind and mask (overlayBlocker keeps them clear of those).
      const at = native.mounts.findIndex((op) => op.kind === MountKind.Proc);
      const ops = caches.mounts.map((op) => (op.arg === undefined ? op : { ...op, arg: op.arg + m.tmpSlots }));
      native.mounts.splice(at < 0 ? native.mounts.length : at, 0, ...ops);
      native.tmpSlots += caches.slots;
      // Landlock opens its rule paths in the child after the mounts: this is the overlay.
      native.landlock?.rules.push(...caches.landlockWrites.map((p) => ({ path: p, access: 'write' as const })));
    }
    native.newNet = net !== 'full';
    if (net === 'proxy') native.proxyPort = input.proxyPort;
    native.rlimitNproc = limits.maxProcesses ?? DEFAULT_MAX_PROCESSES;
    // As root the sandbox's uid 0 is the host's, which RLIMIT_NPROC never binds: without a pids
    // cgroup init traces the tree and counts (native/linux/spawn_trace.cc), as in Landlock mode.
    if (!cg && probe.euid === 0 && probe.processTracing === 0) native.traceProcessCap = native.rlimitNproc;
    native.shmData = `mode=1777,${tmpfsSizes(limits.tmpBytes).shm}`;
    ghosts = m.ghosts;
    gaps.push(...m.protectGaps, ...m.denyGaps);
    protectPartial = m.protectGaps.length > 0 || (rules.gaps ?? []).length > 0;
    denyPartial = m.denyGaps.length > 0;
    namespaces = ['user', 'mnt', 'pid', 'ipc', 'uts', ...(net !== 'full' ? ['net'] : [])];
  } else {
    // With a pids cgroup the cap is the cgroup's. Without one, unprivileged, RLIMIT_NPROC is the
    // cap: the kernel counts every task of the uid (the host's own threads included) against
    // it, so the limit is the uid's count at spawn plus the cap (linux-quotas.ts uidTaskCount).
    // As root it does not bind at all (reported below).
    if (!cg && probe.euid !== 0) {
      if (input.uidTasks !== undefined) native.rlimitNproc = input.uidTasks + (limits.maxProcesses ?? DEFAULT_MAX_PROCESSES);
      else if (limits.maxProcesses) native.rlimitNproc = limits.maxProcesses;
    }
    // As root RLIMIT_NPROC never binds: init traces the tree and counts its tasks instead
    // (native/linux/spawn_trace.cc), where it can trace the command at all; so too for a user
    // whose tasks /proc cannot count (hidepid) and who set no limit.
    if (!cg && !native.rlimitNproc && probe.processTracing === 0) native.traceProcessCap = limits.maxProcesses ?? DEFAULT_MAX_PROCESSES;
    protectPartial = (rules.gaps ?? []).length > 0;
    if (!metadataSupervised) {
      gaps.push(...LANDLOCK_INHERENT_GAPS.map((g) => `${g}; ${noSupervision(probe)}`));
    }
    if (rules.readOnly.length > 0 && !pathsSupervised) {
      gaps.push(
        `read-only carve-outs inside writable roots are not enforced: ${rules.readOnly.join(', ')}; this kernel has no seccomp ` +
          `supervision: errno ${-(probe.connectSupervisor ?? -38)}${noAccess(probe)}`,
      );
    }
    // Deny-read under the granted roots: carved out of the Landlock rules (carveDenied). The list
    // right kept on the directories above a denied one reaches it; only the supervisor refuses
    // listing it.
    if (carveGap) {
      gaps.push(carveGap);
      denyPartial = true;
    } else if (carve && !listSupervised) {
      const dirs = rules.denyRead.filter((d) => lstatOrNull(d)?.isDirectory() && carve!.chainDirs.some((c) => isWithin(d, c)));
      if (dirs.length > 0) {
        gaps.push(
          `the names inside deny-read directories can be listed (not read): ${dirs.join(', ')} (Landlock's list right on the ` +
            `directories above them reaches them; ` +
            `${noSupervision(probe)})`,
        );
        denyPartial = true;
      }
    }
    if (rules.tmp === 'private') gaps.push('/tmp itself stays read-only; the private temp dir is TMPDIR only');
    if (tmpGap) {
      gaps.push(`the TMPDIR (and the private caches in it) is readable by other Landlock-mode sandboxes of this user: ${tmpGap}`);
    } else if (shieldDir && !listDenied) {
      gaps.push(
        `the names in other Landlock-mode sandboxes' TMPDIRs of this user (${shieldDir.dir}) can be listed, not read (listings ` +
          `are supervised only with a deny-read path in the policy${listSupervised ? '' : ', and not on this host'})`,
      );
    }
    if (net === 'proxy' && !supervised) {
      gaps.push(
        `TCP connects to other hosts on the proxy's port ${input.proxyPort} are not blocked: any IPv4 address on that port ` +
          `(other loopback addresses, the LAN, the internet) is reachable directly, outside the proxy's policy and audit ` +
          `(Landlock rules are per port; IPv6 sockets are refused, so ::1 and IPv6 hosts are not; this kernel has no ` +
          `seccomp connect supervision: errno ${-(probe.connectSupervisor ?? -38)}${noAccess(probe)})`,
      );
    }
    // With the supervisor the proxy serves only the connections it made for the command (an
    // outside one is closed unanswered); without it, only connections from sockets of the host's uid.
    if (net === 'proxy' && !supervised) {
      gaps.push(
        `the proxy listens on the host's 127.0.0.1:${input.proxyPort} and, without connect supervision, tells the sandbox's ` +
          `connections apart only by uid: other processes of this uid can use it too (and are attributed to this sandbox)`,
      );
    }
    if (!procPrivate) gaps.push('host processes stay visible in /proc (command lines, not memory or environment)');
    if (rules.writeRoots.some((w) => isWithin('/proc', w))) {
      // Landlock then allows writing the host's /proc files, e.g. raising the host's (and init's)
      // oom_score_adj so that the OOM killer picks the host.
      gaps.push("a writable root covers /proc: the host's own /proc files (oom_score_adj among them) are writable");
    }
    gaps.push("POSIX shared memory and semaphores (/dev/shm) are unavailable: the host's would be shared");
    if (!native.rlimitNproc && !native.traceProcessCap && !cg && probe.euid !== 0) {
      gaps.push("no process cap: this uid's processes could not be counted in /proc, and RLIMIT_NPROC counts all of them (set limits.maxProcesses)");
    }
    // Before ABI 3 truncation is not a Landlock right: truncate(2) and open(O_RDONLY|O_TRUNC) of any
    // file the uid may write, outside the writable roots too, are not stopped (FS-13).
    if (abi < 3 && !pathsSupervised) gaps.push(`files outside the writable roots can be truncated (Landlock ABI ${abi} has no truncate right)`);
    if (abi < 4 && net !== 'full') gaps.push(`Landlock ABI ${abi} has no TCP rules; seccomp alone blocks sockets`);
    if (abi < 6 && !signalSupervised) {
      gaps.push(`Landlock ABI ${abi} has no signal scoping and this kernel has no seccomp supervision: processes outside the sandbox can be signalled`);
    }
    // (Abstract unix sockets: reachable only where unix sockets are allowed, the gap above; with
    // the network full they are the host's in isolated mode too, as its network namespace is.)
    if (probe.euid !== 0) gaps.push('the capability bounding set cannot be emptied without privileges (no_new_privs still blocks gaining capabilities)');
  }
  const isolated = mode === 'isolated';
  if (!isolated && !landlockTeardownHolds(cg)) {
    gaps.push('setsid daemons may survive teardown: this kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN) and no cgroup v2 group could be made');
  }
  // Which mechanism caps processes. RLIMIT_NPROC never binds uid 0 (the kernel exempts the root
  // user), so as root only a pids cgroup does.
  const nproc = native.rlimitNproc;
  const counted = !isolated && !cg && input.uidTasks !== undefined && nproc !== undefined;
  const traced = native.traceProcessCap;
  const processCap = cg
    ? `cgroup ${cg.kind} pids.max ${cg.pidsMax}`
    : traced
      ? `traced by init: ${traced} tasks, threads included (creations past them fail EAGAIN)`
      : nproc && probe.euid !== 0
      ? `RLIMIT_NPROC ${nproc}${
          isolated
            ? ' (counted in the sandbox user namespace)'
            : counted
              ? ` (the uid's ${input.uidTasks} tasks at spawn + ${nproc - input.uidTasks!}: counts all of the user's processes)`
              : " (counts all of the user's processes)"
        }`
      : 'none';
  if (!cg && probe.euid === 0 && !traced) {
    gaps.push(
      'running as root without a usable pids cgroup: RLIMIT_NPROC does not bind uid 0, so the number of processes is not capped' +
        ` (init cannot trace the command here to count them: errno ${-(probe.processTracing ?? -38)})`,
    );
  }
  const memoryCap = cg?.memoryBytes
    ? `cgroup ${cg.kind} memory ${cg.memoryBytes} bytes for the whole sandbox (tmpfs included), RLIMIT_AS per process`
    : limits.memoryBytes
      ? 'RLIMIT_AS per process only (no memory cgroup: the sandbox as a whole and its tmpfs are not capped)'
      : 'none';
  if (limits.memoryBytes && !cg?.memoryBytes) {
    gaps.push('limits.memoryBytes is per process (RLIMIT_AS); without a memory cgroup the sandbox as a whole (and its tmpfs) is not capped');
  }
  // Restricted reads rest on Landlock, which does not check inotify_add_watch: a watch on a
  // directory outside the readable roots reports every name made in it. Landlock mode's
  // supervisor checks watches like reads; elsewhere that is a gap.
  const watchGap = !rules.readAll && !metadataSupervised;
  if (watchGap) {
    gaps.push('restricted reads do not cover inotify: a watch on a directory outside the readable roots reports the names made in it (Landlock does not check inotify_add_watch)');
  }
  // Per-uid kernel quotas: pending signals and POSIX timers (RLIMIT_SIGPENDING) and mqueue bytes
  // (RLIMIT_MSGQUEUE) are capped in both modes; inotify in the user namespace (isolated) or by
  // the supervisor (Landlock). Each run's share is taken at spawn (linux-quotas.ts).
  if (!isolated && !metadataSupervised) {
    gaps.push("inotify instances and watches are not capped: they count against the host uid's limits (no user namespace to lower them in, no seccomp supervisor)");
  }
  // Landlock mode: the gaps that name a guarantee this policy asks for (not the caller's own
  // opt-ins from resolution, not the mode's facts) need `degraded`; with none, none is needed.
  const degradedBy = isolated ? [] : gaps.slice(optedGaps).filter((g) => !LANDLOCK_FACT_GAPS.some((re) => re.test(g)));
  if (degradedBy.length > 0 && !rules.degraded) throw landlockRefusal(rules, probe, degradedBy);
  const enforcement: EnforcementReport = {
    platform: 'linux',
    sandboxed: true,
    mode,
    mechanisms: {
      namespaces,
      landlockAbi: abi,
      landlock: abi >= 1,
      seccomp: 'filter',
      noNewPrivs: true,
      capabilities: isolated || probe.euid === 0 ? 'all dropped, bounding set empty' : 'none held; bounding set unchanged',
      setsid: true,
      // 'host-private': the host's /proc with other processes' entries and /proc/net hidden.
      proc: isolated ? 'fresh' : procPrivate ? 'host-private' : 'host',
      // Auto mode's choice, where isolated mode was out of reach for /proc alone (rootless containers).
      ...(!isolated && rules.mode === 'auto' && isolatedProcGap(probe) ? { isolatedModeUnavailable: isolatedProcGap(probe) } : {}),
      init: isolated ? 'pid 1 of the sandbox' : 'subreaper',
      // Landlock mode's TMPDIR is private only when other runs of this uid cannot read it (tmpShield).
      tmp: mode === 'landlock' && tmpGap ? 'per-run TMPDIR, readable by other Landlock-mode sandboxes of this user' : rules.tmp,
      caches:
        mode === 'landlock' && tmpGap
          ? Object.fromEntries(Object.entries(caches.report).map(([k, v]) => [k, v.replace('(private, cold', '(in the TMPDIR, which is not private: see gaps; cold')]))
          : caches.report,
      // Restricted reads: what is readable besides the listed roots (README, "Restricted reads").
      ...(rules.readAll
        ? {}
        : {
            platformReads: [
              ...platformReads(mode),
              ...(mode === 'landlock' ? DEVICE_READS : []),
              ...(rules.readRoots.some((r) => isWithin(input.file, r)) ? [] : [input.file]),
            ],
          }),
      network: net === 'proxy' ? `proxy only (127.0.0.1:${input.proxyPort}${isolated ? ' inside the namespace' : ''})` : net,
      ...(supervised ? { connectSupervisor: 'seccomp-user-notif' } : {}),
      ...(metadataSupervised ? { metadataSupervisor: 'seccomp-user-notif' } : {}),
      ...(pathsSupervised ? { pathSupervisor: 'seccomp-user-notif' } : {}),
      // Listing /proc: the sandbox's own pids only (the supervisor carries listings out).
      ...(procPrivate ? { readSupervisor: 'seccomp-user-notif', procListing: 'sandbox pids only' } : {}),
      // Landlock mode's deny-read: how many rules carving took, and the directories whose entries
      // are fixed for the run (README: "deny-read in Landlock mode").
      ...(carve
        ? { denyReadCarve: { rules: carve.rules.length, chainDirs: carve.chainDirs, ...(carve.unlisted.length ? { unlisted: carve.unlisted } : {}) } }
        : {}),
      ...(mode === 'landlock' ? { signals: abi >= 6 ? 'landlock-scope' : signalSupervised ? 'seccomp-user-notif' : 'none' } : {}),
      processCap,
      memoryCap,
      ...(isolated ? { tmpfs: tmpfsSizes(limits.tmpBytes) } : {}),
      oomScoreAdj: 1000,
      ...(seccomp.unixSockets ? { unixSockets: unix === 'all' ? 'all' : `any visible (asked: ${(unix as string[]).join(', ')})` } : {}),
      ...(!seccomp.unixSockets && refusedUnix?.length
        ? { unixSockets: `refused (asked: ${refusedUnix.join(', ')}; a managed network keeps AF_UNIX sockets refused, as Codex on Linux)` }
        : {}),
    },
    guarantees: {
      filesystemRead: rules.readAll ? 'not-requested' : watchGap ? 'partial' : 'enforced',
      // Landlock mode: writes outside the writable roots are Landlock's (truncation from ABI 3),
      // metadata changes the supervisor's; carve-outs inside them are protectedPaths.
      filesystemWrite: isolated || (metadataSupervised && (abi >= 3 || pathsSupervised)) ? 'enforced' : 'partial',
      protectedPaths:
        rules.readOnly.length === 0
          ? 'not-requested'
          : !isolated && !pathsSupervised
            ? 'not-enforced'
            : protectPartial
              ? 'partial'
              : 'enforced',
      denyRead: rules.denyRead.length === 0 ? 'not-requested' : !denyPartial ? 'enforced' : 'partial',
      network: net === 'full' ? 'not-requested' : (net === 'proxy' && !isolated && !supervised) || unixPartial ? 'partial' : 'enforced',
      processIsolation: isolated ? 'enforced' : 'partial',
      // Landlock mode: init is a subreaper, so every orphan of the tree (setsid daemons too) is
      // its child and is killed at exit, on kill(), and when the host process dies. It finds them
      // in /proc/<init>/task/<init>/children (CONFIG_PROC_CHILDREN); without that only a v2
      // cgroup's cgroup.kill reaches a daemon that left the command's process group.
      treeTeardown: isolated || landlockTeardownHolds(cg) ? 'enforced' : 'partial',
    },
    gaps,
    ...(isolated ? {} : { degradedBy }),
    // What binds (mechanisms.processCap/memoryCap say how): RLIMIT_NPROC does not bind uid 0.
    limits: {
      maxProcesses: cg ? cg.pidsMax : traced ? traced : nproc && probe.euid !== 0 ? (counted ? nproc - input.uidTasks! : nproc) : null,
      memoryBytes: cg?.memoryBytes ?? native.rlimitAs ?? null,
      openFiles: native.rlimitNofile ?? null,
    },
  };
  return { mode, native, enforcement, ghosts };
}
