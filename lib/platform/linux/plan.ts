/**
 * Linux planning: ResolvedRules -> the addon's plan (mount steps, Landlock rules, seccomp mode,
 * namespaces) plus the enforcement report. Pure except for lstat/existence checks, so it is unit
 * tested without spawning. lib/platform/linux/index.ts runs the plan. The mechanisms each have a
 * module: mode.ts (mode choice, refusals), landlock-rules.ts (rules, deny-read carving, the TMPDIR
 * shield), mounts.ts (isolated mode's mounts), limits.ts; this file puts them together.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { EnforcementReport } from '../../backend';
import { SandboxError } from '../../errors';
import type { LinuxNativePlan, LinuxProbe } from '../../native';
import type { ResolvedRules } from '../../rules';
import { isWithin } from '../../paths';
import { lstatOrNull } from '../../permissions/canonical';
import { planCaches } from './caches';
import { carveDenied, DENY_CARVE_MAX_RULES, type DenyCarve, type LandlockRule, DEVICE_READS, DEVICE_RULES, landlockRules, platformReads, realpathOrNull, tmpShield } from './landlock-rules';
import { DEFAULT_MAX_PROCESSES, DEFAULT_MSGQUEUE_BYTES, DEFAULT_SIGPENDING, tmpfsSizes } from './limits';
import { isolatedProcGap, LANDLOCK_FACT_GAPS, LANDLOCK_INHERENT_GAPS, landlockRefusal, noAccess, noSupervision, requireSeccomp } from './mode';
import { MountKind, planMounts } from './mounts';
import { looksLikePlaceholder } from './placeholders';
import type { LinuxPlan, LinuxPlanInput } from './plan-types';

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

/** What the steps of planLinux share: the request, the native plan being built, and what each step decided. */
interface PlanState {
  input: LinuxPlanInput;
  rules: ResolvedRules;
  probe: LinuxProbe;
  mode: 'isolated' | 'landlock';
  abi: number;
  net: ResolvedRules['network']['kind'];
  caches: ReturnType<typeof planCaches>;
  /** Gaps so far; the first optedGaps are the caller's own opt-ins from resolution. */
  gaps: string[];
  optedGaps: number;
  native: Omit<LinuxNativePlan, 'stdio'>;
  seccomp: NonNullable<LinuxNativePlan['seccomp']>;
  unix?: 'all' | string[];
  unixPartial: boolean;
  /** Landlock mode's supervisors (seccomp user notification): which classes are on. */
  supervised: boolean;
  metadataSupervised: boolean;
  listSupervised: boolean;
  signalSupervised: boolean;
  pathsSupervised: boolean;
  procPrivate: boolean;
  listDenied: boolean;
  /** Stat-family calls on names inside deny-read directories go to the supervisor (supervise_stats.cc). */
  statDenied: boolean;
  grants: LandlockRule[];
  carve?: DenyCarve;
  carveGap?: string;
  shieldDir?: { dir: string; own: string };
  tmpGap?: string;
  ghosts: string[];
  /** The report's notes (advice that is neither a guarantee nor a gap). */
  notes: string[];
  namespaces: string[];
  protectPartial: boolean;
  denyPartial: boolean;
}

export function planLinux(original: LinuxPlanInput): LinuxPlan {
  const s = startPlan(original);
  planUnixSockets(s);
  planSupervisorSwitches(s);
  planLandlock(s);
  planMetadataSupervisor(s);
  planPathSupervisor(s);
  planProcPrivacy(s);
  planLimits(s);
  if (s.mode === 'isolated') planIsolatedMode(s);
  else planLandlockMode(s);
  const enforcement = planReport(s);
  return { mode: s.mode, native: s.native, enforcement, ghosts: s.ghosts };
}

/** The request's checks that need no mechanism yet, and the native plan's skeleton. */
function startPlan(original: LinuxPlanInput): PlanState {
  // The user's tool caches (filesystem.caches, linux/caches.ts): overlays or env ('host-writable'
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
  return {
    input, rules, probe, mode, abi, net, caches, gaps, optedGaps, native, seccomp,
    unixPartial: false, supervised: false, metadataSupervised: false, listSupervised: false, signalSupervised: false,
    pathsSupervised: false, procPrivate: false, listDenied: false, statDenied: false, grants: [], ghosts: [], notes: [], namespaces: [],
    protectPartial: false, denyPartial: false,
  };
}

/** network.unixSockets: what seccomp can hold of it (creating unix sockets or not). */
function planUnixSockets(s: PlanState): void {
  // network.unixSockets. What this kernel can enforce: creating unix sockets or not (seccomp).
  // Which socket a connect() reaches cannot be checked: seccomp cannot read the path, a read-only
  // mount does not stop connect() on a socket inode (NET-10), and Landlock (ABI 7 here) has no
  // unix-connect right. So 'all' is enforced exactly; a list is refused unless degraded, and then
  // every pathname socket the command can see is connectable.
  const { rules, seccomp, gaps, abi, mode } = s;
  const unix = rules.network.kind === 'full' ? undefined : rules.network.unixSockets;
  s.unix = unix;
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
      s.unixPartial = true;
    }
    if (mode === 'landlock' && abi < 6) {
      gaps.push(`abstract unix sockets of the host are connectable (Landlock ABI ${abi} has no abstract-socket scope)`);
      s.unixPartial = true;
    }
  }
}

/** Which of Landlock mode's supervisors the kernel allows: connect, metadata, listings, signals. */
function planSupervisorSwitches(s: PlanState): void {
  // Landlock mode with the proxy. Landlock's TCP rules are per port, so a rule for the proxy's
  // port would open that port on every IPv4 address. Where the kernel allows it, the connect
  // supervisor takes over instead: Landlock allows no TCP connect at all, seccomp stops connect()
  // in a user notification, and the host hands the command a connection to 127.0.0.1:<port>
  // that it made itself (native/linux/supervisor/supervise_connect.cc). Without it, the port rule and the
  // gap stay (Landlock mode is degraded-only anyway).
  const { mode, net, probe, seccomp, input, abi } = s;
  s.supervised = mode === 'landlock' && net === 'proxy' && probe.connectSupervisor === 0;
  if (s.supervised) seccomp.connectSupervisor = input.proxyPort!;
  // Landlock mode: Landlock has no right for chmod, chown, utime or xattr changes. The same
  // supervisor carries those out itself, on the object it resolved, inside the writable roots
  // and outside the protected paths only (native/linux/supervisor/supervise_metadata.cc); without it they
  // are a listed gap.
  s.metadataSupervised = mode === 'landlock' && probe.connectSupervisor === 0;
  // Listings are carried out on the command's own open directory (its position included): a dup
  // of it (pidfd_getfd), or where a container's profile refuses that, a reopen through
  // /proc/<pid>/fd at its position that then takes its place (supervise_metadata.cc).
  s.listSupervised = s.metadataSupervised;
  // Landlock mode below ABI 6 (no LANDLOCK_SCOPE_SIGNAL): signals go to the same supervisor,
  // which lets them reach the sandbox's own processes only (native/linux/supervisor/supervise_signals.cc).
  s.signalSupervised = mode === 'landlock' && abi < 6 && probe.connectSupervisor === 0;
  if (s.signalSupervised) seccomp.signalSupervisor = true;
}

/** Landlock's rules: the grants, deny-read paths and other runs' TMPDIRs carved out of them, the proxy's port. */
function planLandlock(s: PlanState): void {
  // What Landlock grants before deny-read paths are carved out (the watch check reads it).
  const { abi, input, mode, rules, native, net } = s;
  const grants = abi >= 1 ? landlockRules(input, mode) : [];
  s.grants = grants;
  // Landlock mode: deny-read paths inside the granted roots are carved out of them (carveDenied);
  // isolated mode masks them with mounts instead (planMounts).
  // Other Landlock-mode runs' TMPDIRs (tmpShield): one more denied path, carved the same way.
  const shield = abi >= 1 ? tmpShield(input, grants) : null;
  s.shieldDir = shield && 'dir' in shield ? shield : undefined;
  s.tmpGap = shield && 'gap' in shield ? shield.gap : undefined;
  const { shieldDir } = s;
  if (abi >= 1 && mode === 'landlock' && (rules.denyRead.length > 0 || shieldDir)) {
    const nested = new Set([...rules.readRoots, ...rules.writeRoots, ...(shieldDir ? [shieldDir.own] : [])]);
    let c = carveDenied(grants, shieldDir ? [...rules.denyRead, shieldDir.dir] : rules.denyRead, nested);
    if (c.rules.length > DENY_CARVE_MAX_RULES && shieldDir) {
      s.tmpGap = `carving ${shieldDir.dir} out takes ${c.rules.length} Landlock rules, one per entry beside it, more than ${DENY_CARVE_MAX_RULES}`;
      s.shieldDir = undefined;
      c = carveDenied(grants, rules.denyRead, nested);
    }
    if (c.rules.length <= DENY_CARVE_MAX_RULES) s.carve = rules.denyRead.length > 0 || s.shieldDir ? c : undefined;
    else {
      s.carveGap =
        `deny-read under readable roots is not enforced: ${rules.denyRead.join(', ')} (carving them out takes ` +
        `${c.rules.length} Landlock rules, one per entry beside them, more than ${DENY_CARVE_MAX_RULES})`;
    }
  }
  if (abi >= 1) {
    native.landlock = {
      net,
      rules: s.carve?.rules ?? grants,
      // The supervision acts within the grants whole: it lists and stats deny-read paths, and
      // judges carve-outs inside writable roots itself.
      ...(mode === 'landlock' ? { stdioTerminals: true, envelope: envelopeOf(grants, input) } : {}),
    };
    // The temp dir's entries, carved for the shield alone (no deny-read path of the policy's
    // there): a prepared sandbox may hold an older set of them (linux/spare.ts planKey).
    const tmpHome = s.shieldDir && s.carve ? path.dirname(s.shieldDir.dir) : undefined;
    if (tmpHome && !rules.denyRead.some((d) => isWithin(d, tmpHome))) {
      for (const r of native.landlock.rules) if (r.exact && r.access === 'read' && path.dirname(r.path) === tmpHome) r.volatile = true;
    }
    if (net === 'proxy' && !s.supervised) native.landlock.connectPorts = [input.proxyPort!];
  }
}

/**
 * Landlock mode: the outer envelope its supervision is confined to (lib/native.ts
 * landlock.envelope): the grants before carving, and the `changes: 'record'` journal directory,
 * which the supervision writes and the command is denied. A writable root swapped for a link
 * since planning gets no rule in it (exact) rather than failing there: the command's own rule
 * then fails the spawn as it always did (ELOOP, EMOUNT_SETUP), and nothing moves either way.
 */
function envelopeOf(grants: LandlockRule[], input: LinuxPlanInput): NonNullable<LinuxNativePlan['landlock']>['envelope'] {
  const writes = [...grants.filter((r) => r.access === 'write').map((r) => r.path), ...(input.changes ? [input.changes.dir] : [])];
  return [...grants.filter((r) => r.access !== 'write').map(({ path: p, access }) => ({ path: p, access })), ...writes.map((p) => ({ path: p, access: 'write' as const, exact: true }))];
}

/** Landlock mode's metadata supervisor: where it carries out chmod and friends, and what it treats as readable. */
function planMetadataSupervisor(s: PlanState): void {
  // What the supervisor treats as deny-read: the policy's, and the other runs' TMPDIRs. Listings
  // go through it (one round trip per getdents64, docs/performance.md) only for a policy's
  // deny-read path; the TMPDIRs' names alone do not cost every run that (a listed gap).
  const { rules, input, seccomp, grants, carve } = s;
  const denied = s.shieldDir ? [...rules.denyRead, s.shieldDir.dir] : rules.denyRead;
  const listDenied = (s.listDenied = s.listSupervised && rules.denyRead.length > 0);
  // Guessed names go through the supervisor (a round trip on every stat-family call) only for
  // the policy's own deny-read paths: a `changes: 'record'` journal, added to denyRead to be
  // carved and unlisted, holds nothing of the host's (copies of what the command could read).
  const statNames = (s.statDenied = listDenied && rules.denyRead.some((d) => d !== input.changes?.dir));
  if (s.metadataSupervised) {
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
              ...(listDenied ? { listDirs: true, ...(statNames ? { statNames: true } : {}) } : {}),
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
            ...(carve && listDenied ? { listDirs: true, ...(statNames ? { statNames: true } : {}) } : {}),
          }),
    };
  }
}

/** Landlock mode's path supervisor: the carve-outs inside writable roots (and truncation before ABI 3). */
function planPathSupervisor(s: PlanState): void {
  // Landlock mode: read-only carve-outs inside writable roots. Landlock cannot express them (a
  // right on a directory covers everything below it); the same supervisor carries out every
  // write-open, create, rename, removal, link and truncate itself, on a pinned parent directory,
  // unless it touches a carve-out (native/linux/supervisor/supervise_paths.cc). Without it they are a gap.
  // The supervisor is not confined by the command's Landlock domain: a deny-read path inside a
  // writable root is one more carve-out to it (never created, opened for writing, which could
  // also read it, renamed, linked or removed), or it would undo the deny-read carving below.
  const { rules, abi, mode, seccomp, input } = s;
  const deniedInWritable = rules.denyRead.filter((d) => rules.writeRoots.some((w) => isWithin(d, w)));
  // Before Landlock ABI 3 truncation is not a Landlock right: the same supervisor then carries
  // out truncate(2) and O_TRUNC opens too (only inside the writable roots), carve-outs or not.
  // changes: 'record' needs every such call to go through it, carve-outs or not.
  s.pathsSupervised = s.metadataSupervised && mode === 'landlock' && (rules.readOnly.length > 0 || abi < 3 || input.changes !== undefined);
  if (input.changes) checkRecordable(s.probe, s.pathsSupervised, s.carveGap);
  if (s.pathsSupervised) {
    seccomp.pathSupervisor = {
      carveOuts: [...new Set([...rules.readOnly, ...deniedInWritable])],
      presentOnly: [...(rules.presentOnly ?? [])],
      devices: DEVICE_RULES,
      // The run's private TMPDIR goes with the run: never recorded, even inside a writable root.
      ...(input.changes ? { changes: { ...input.changes, ...(input.landlockTmpDir ? { exclude: [realpathOrNull(input.landlockTmpDir) ?? input.landlockTmpDir] } : {}) } } : {}),
    };
  }
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

/** Landlock mode's procPrivacy: every read-only open through the reads supervisor, or a refusal. */
function planProcPrivacy(s: PlanState): void {
  // Landlock mode, procPrivacy: other processes' /proc entries and the host's network tables
  // hidden. Every read-only open goes to the same supervisor, which resolves the path itself and
  // opens procfs objects of the sandbox's own processes only, and everything else through a
  // thread confined by the command's Landlock rules (native/linux/supervisor/supervise_reads.cc). Isolated
  // mode's /proc is the sandbox's own already. Without the supervisor it is refused, never a gap.
  const { mode, rules, probe, seccomp } = s;
  s.procPrivate = mode === 'landlock' && rules.procPrivacy === true;
  if (s.procPrivate) {
    if (!s.metadataSupervised) {
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
}

/** The rlimits every sandbox gets. */
function planLimits(s: PlanState): void {
  const { native } = s;
  const limits = s.rules.limits;
  if (limits.memoryBytes) native.rlimitAs = limits.memoryBytes;
  if (limits.openFiles) native.rlimitNofile = limits.openFiles;
  native.rlimitSigpending = DEFAULT_SIGPENDING;
  native.rlimitMsgqueue = DEFAULT_MSGQUEUE_BYTES;
}

/** Isolated mode: the mounts (and the caches' overlays), the network namespace, the process cap. */
function planIsolatedMode(s: PlanState): void {
  const { input, native, caches, net, rules, probe, gaps } = s;
  const limits = rules.limits;
  const cg = input.cgroup;
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
  s.ghosts = m.ghosts;
  planHiddenPlaceholders(s, [...m.ghosts, ...(input.placeholders ?? []), ...ancestorPlaceholders(rules)]);
  gaps.push(...m.protectGaps, ...m.denyGaps);
  s.protectPartial = m.protectGaps.length > 0 || (rules.gaps ?? []).length > 0;
  s.denyPartial = m.denyGaps.length > 0;
  s.namespaces = ['user', 'mnt', 'pid', 'ipc', 'uts', ...(net !== 'full' ? ['net'] : [])];
}

/**
 * Isolated mode's placeholders (empty read-only files and directories holding missing protected
 * names) are left out of listings inside, so that tar, npm pack or find do not take them for the
 * command's files: getdents goes to a seccomp supervisor, which filters the listings of the
 * directories that hold them and lets every other one continue (supervise_metadata.cc,
 * HideRules). Cosmetic, not a guarantee: without the supervisor they are listed, and a note says so.
 */
function planHiddenPlaceholders(s: PlanState, placeholders: string[]): void {
  if (placeholders.length === 0) return;
  if (s.probe.connectSupervisor === 0) {
    s.seccomp.hideNames = [...new Set(placeholders)].sort();
    return;
  }
  s.notes.push(
    `the placeholders that hold missing protected names are listed inside the sandbox (${placeholders.join(', ')}): leaving them ` +
      `out of listings needs seccomp user notification with ADDFD (Linux 5.9+) and a way to read the command's memory ` +
      `(errno ${-(s.probe.connectSupervisor ?? -38)}${noAccess(s.probe)}); git inside still passes them by`,
  );
}

/**
 * Other runs' placeholders on the way to a protected path, which this plan takes for existing
 * directories: a concurrent run holds a missing `.claude` for `.claude/commands` with an empty
 * 0555 directory, which is no protected path itself (so not claimed: input.placeholders).
 */
function ancestorPlaceholders(rules: ResolvedRules): string[] {
  const dirs = new Set<string>();
  for (const p of rules.readOnly) {
    const root = rules.writeRoots.filter((w) => isWithin(p, w)).sort((a, b) => b.length - a.length)[0];
    if (!root) continue;
    for (let dir = path.dirname(p); dir !== root && isWithin(dir, root); dir = path.dirname(dir)) dirs.add(dir);
  }
  return [...dirs].filter((d) => looksLikePlaceholder(d));
}

/** Landlock mode: the process cap without a cgroup, and the gaps of this mode on this host. */
function planLandlockMode(s: PlanState): void {
  const { input, native, net, rules, probe, gaps, abi } = s;
  const limits = rules.limits;
  const cg = input.cgroup;
  // With a pids cgroup the cap is the cgroup's. Without one, unprivileged, RLIMIT_NPROC is the
  // cap: the kernel counts every task of the uid (the host's own threads included) against
  // it, so the limit is the uid's count at spawn plus the cap (linux/quotas.ts uidTaskCount).
  // As root it does not bind at all (reported below).
  if (!cg && probe.euid !== 0) {
    if (input.uidTasks !== undefined) native.rlimitNproc = input.uidTasks + (limits.maxProcesses ?? DEFAULT_MAX_PROCESSES);
    else if (limits.maxProcesses) native.rlimitNproc = limits.maxProcesses;
  }
  // As root RLIMIT_NPROC never binds: init traces the tree and counts its tasks instead
  // (native/linux/spawn_trace.cc), where it can trace the command at all; so too for a user
  // whose tasks /proc cannot count (hidepid) and who set no limit.
  if (!cg && !native.rlimitNproc && probe.processTracing === 0) native.traceProcessCap = limits.maxProcesses ?? DEFAULT_MAX_PROCESSES;
  s.protectPartial = (rules.gaps ?? []).length > 0;
  if (!s.metadataSupervised) {
    gaps.push(...LANDLOCK_INHERENT_GAPS.map((g) => `${g}; ${noSupervision(probe)}`));
  }
  if (rules.readOnly.length > 0 && !s.pathsSupervised) {
    gaps.push(
      `read-only carve-outs inside writable roots are not enforced: ${rules.readOnly.join(', ')}; this kernel has no seccomp ` +
        `supervision: errno ${-(probe.connectSupervisor ?? -38)}${noAccess(probe)}`,
    );
  }
  // Deny-read under the granted roots: carved out of the Landlock rules (carveDenied). The list
  // right kept on the directories above a denied one reaches it; only the supervisor refuses
  // listing it.
  if (s.carveGap) {
    gaps.push(s.carveGap);
    s.denyPartial = true;
  } else if (s.carve && !s.listSupervised) {
    const dirs = rules.denyRead.filter((d) => lstatOrNull(d)?.isDirectory() && s.carve!.chainDirs.some((c) => isWithin(d, c)));
    if (dirs.length > 0) {
      gaps.push(
        `the names inside deny-read directories can be listed (not read): ${dirs.join(', ')} (Landlock's list right on the ` +
          `directories above them reaches them; ` +
          `${noSupervision(probe)})`,
      );
      s.denyPartial = true;
    }
  }
  if (rules.tmp === 'private') gaps.push('/tmp itself stays read-only; the private temp dir is TMPDIR only');
  if (s.tmpGap) {
    gaps.push(`the TMPDIR (and the private caches in it) is readable by other Landlock-mode sandboxes of this user: ${s.tmpGap}`);
  } else if (s.shieldDir && !s.listDenied) {
    gaps.push(
      `the names in other Landlock-mode sandboxes' TMPDIRs of this user (${s.shieldDir.dir}) can be listed, not read (listings ` +
        `are supervised only with a deny-read path in the policy${s.listSupervised ? '' : ', and not on this host'})`,
    );
  }
  if (net === 'proxy' && !s.supervised) {
    gaps.push(
      `TCP connects to other hosts on the proxy's port ${input.proxyPort} are not blocked: any IPv4 address on that port ` +
        `(other loopback addresses, the LAN, the internet) is reachable directly, outside the proxy's policy and audit ` +
        `(Landlock rules are per port; IPv6 sockets are refused, so ::1 and IPv6 hosts are not; this kernel has no ` +
        `seccomp connect supervision: errno ${-(probe.connectSupervisor ?? -38)}${noAccess(probe)})`,
    );
  }
  // With the supervisor the proxy serves only the connections it made for the command (an
  // outside one is closed unanswered); without it, only connections from sockets of the host's uid.
  if (net === 'proxy' && !s.supervised) {
    gaps.push(
      `the proxy listens on the host's 127.0.0.1:${input.proxyPort} and, without connect supervision, tells the sandbox's ` +
        `connections apart only by uid: other processes of this uid can use it too (and are attributed to this sandbox)`,
    );
  }
  if (!s.procPrivate) gaps.push('host processes stay visible in /proc (command lines, not memory or environment)');
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
  if (abi < 3 && !s.pathsSupervised) gaps.push(`files outside the writable roots can be truncated (Landlock ABI ${abi} has no truncate right)`);
  if (abi < 4 && net !== 'full') gaps.push(`Landlock ABI ${abi} has no TCP rules; seccomp alone blocks sockets`);
  if (abi < 6 && !s.signalSupervised) {
    gaps.push(`Landlock ABI ${abi} has no signal scoping and this kernel has no seccomp supervision: processes outside the sandbox can be signalled`);
  }
  // (Abstract unix sockets: reachable only where unix sockets are allowed, the gap above; with
  // the network full they are the host's in isolated mode too, as its network namespace is.)
  if (probe.euid !== 0) gaps.push('the capability bounding set cannot be emptied without privileges (no_new_privs still blocks gaining capabilities)');
}

/** The gaps every mode shares, Landlock mode's refusal, and the enforcement report. */
function planReport(s: PlanState): EnforcementReport {
  const { input, rules, probe, gaps, mode } = s;
  const isolated = mode === 'isolated';
  if (!isolated && !landlockTeardownHolds(input.cgroup)) {
    gaps.push('setsid daemons may survive teardown: this kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN) and no cgroup v2 group could be made');
  }
  const caps = capsOf(s);
  // Restricted reads rest on Landlock, which does not check inotify_add_watch: a watch on a
  // directory outside the readable roots reports every name made in it. Landlock mode's
  // supervisor checks watches like reads; elsewhere that is a gap.
  const watchGap = !rules.readAll && !s.metadataSupervised;
  if (watchGap) {
    gaps.push('restricted reads do not cover inotify: a watch on a directory outside the readable roots reports the names made in it (Landlock does not check inotify_add_watch)');
  }
  // Per-uid kernel quotas: pending signals and POSIX timers (RLIMIT_SIGPENDING) and mqueue bytes
  // (RLIMIT_MSGQUEUE) are capped in both modes; inotify in the user namespace (isolated) or by
  // the supervisor (Landlock). Each run's share is taken at spawn (linux/quotas.ts).
  if (!isolated && !s.metadataSupervised) {
    gaps.push("inotify instances and watches are not capped: they count against the host uid's limits (no user namespace to lower them in, no seccomp supervisor)");
  }
  // Landlock mode: the gaps that name a guarantee this policy asks for (not the caller's own
  // opt-ins from resolution, not the mode's facts) need `degraded`; with none, none is needed.
  const degradedBy = isolated ? [] : gaps.slice(s.optedGaps).filter((g) => !LANDLOCK_FACT_GAPS.some((re) => re.test(g)));
  if (degradedBy.length > 0 && !rules.degraded) throw landlockRefusal(rules, probe, degradedBy);
  return {
    platform: 'linux',
    sandboxed: true,
    mode,
    mechanisms: mechanismsOf(s, caps),
    guarantees: guaranteesOf(s, watchGap),
    gaps,
    ...(isolated ? {} : { degradedBy }),
    ...(s.notes.length > 0 ? { notes: s.notes } : {}),
    // What binds (mechanisms.processCap/memoryCap say how): RLIMIT_NPROC does not bind uid 0.
    limits: {
      maxProcesses: caps.maxProcesses,
      memoryBytes: input.cgroup?.memoryBytes ?? s.native.rlimitAs ?? null,
      openFiles: s.native.rlimitNofile ?? null,
    },
  };
}

interface Caps {
  processCap: string;
  memoryCap: string;
  maxProcesses: number | null;
}

/** Which mechanism caps processes and memory, and the gaps where none binds. */
function capsOf(s: PlanState): Caps {
  const { input, native, rules, probe, gaps, mode } = s;
  const isolated = mode === 'isolated';
  const limits = rules.limits;
  const cg = input.cgroup;
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
  const maxProcesses = cg ? cg.pidsMax : traced ? traced : nproc && probe.euid !== 0 ? (counted ? nproc - input.uidTasks! : nproc) : null;
  return { processCap, memoryCap, maxProcesses };
}

/** The report's mechanisms: what enforces each part of the policy in this run. */
function mechanismsOf(s: PlanState, caps: Caps): EnforcementReport['mechanisms'] {
  const { input, net, rules, probe, abi, mode, seccomp, caches, unix, carve, supervised, metadataSupervised, pathsSupervised, signalSupervised, procPrivate, tmpGap, namespaces } = s;
  const { processCap, memoryCap } = caps;
  const limits = rules.limits;
  const refusedUnix = rules.network.kind === 'full' ? undefined : rules.network.unixSocketsRefused;
  const isolated = mode === 'isolated';
  return {
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
    // The names inside them: listings refused, and a stat, access, readlink or xattr read of a
    // name inside (with procPrivacy a read-only open too) answers as for a missing one
    // (native/linux/supervisor/supervise_stats.cc).
    ...(carve && s.statDenied
      ? { denyReadNames: `unlisted; stat, access, readlink, xattrs${procPrivate ? ' and read-only opens' : ''} answer as missing (seccomp-user-notif)` }
      : {}),
    ...(mode === 'landlock' ? { signals: abi >= 6 ? 'landlock-scope' : signalSupervised ? 'seccomp-user-notif' : 'none' } : {}),
    // Isolated mode: the placeholders' names left out of listings inside (planHiddenPlaceholders).
    ...(seccomp.hideNames ? { placeholderListing: 'unlisted (seccomp-user-notif)' } : {}),
    processCap,
    memoryCap,
    ...(isolated ? { tmpfs: tmpfsSizes(limits.tmpBytes) } : {}),
    oomScoreAdj: 1000,
    ...(seccomp.unixSockets ? { unixSockets: unix === 'all' ? 'all' : `any visible (asked: ${(unix as string[]).join(', ')})` } : {}),
    ...(!seccomp.unixSockets && refusedUnix?.length
      ? { unixSockets: `refused (asked: ${refusedUnix.join(', ')}; a managed network keeps AF_UNIX sockets refused, as Codex on Linux)` }
      : {}),
  };
}

/** The report's guarantees, each 'enforced', 'partial', 'not-enforced' or 'not-requested'. */
function guaranteesOf(s: PlanState, watchGap: boolean): EnforcementReport['guarantees'] {
  const { input, net, rules, abi, mode, supervised, metadataSupervised, pathsSupervised, unixPartial, protectPartial, denyPartial } = s;
  const isolated = mode === 'isolated';
  return {
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
    treeTeardown: isolated || landlockTeardownHolds(input.cgroup) ? 'enforced' : 'partial',
  };
}
