/**
 * The Linux backend: runs a LinuxPlan (lib/platform/linux-plan.ts) through the addon and wraps the
 * result as a BackendProcess. Exit is reported by the addon from the process's pidfd.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tty from 'node:tty';
import type { Readable, Writable } from 'node:stream';
import type { Backend, BackendProcess, BackendSpawnRequest, EnforcementReport, ExitInfo, ProbeReport } from '../backend';
import { unsandboxedReport } from '../backend';
import { overlayChanges } from '../changes/overlay';
import { dropLayer, prepareIsolatedChanges, type StageLayer } from '../changes/overlay-layer';
import { SandboxError } from '../errors';
import type { LinuxNative, LinuxNativePlan, LinuxProbe, LinuxStdio } from '../native';
import { ManagedProxy } from '../network';
import { lstatOrNull } from '../permissions/canonical';
import { createSandboxCgroup, ownPidNamespace, PIDNS_TAG, type SandboxCgroup } from './linux-cgroup';
import { prepareRecord, type RecordRun } from '../changes/record';
import { chooseLinuxMode, DEFAULT_MAX_PROCESSES, isolatedProcGap, DEFAULT_TMP_BYTES, planLinux, setProxyPort, TMP_PARENT_PREFIX } from './linux-plan';
import { type QuotaShare, takeQuotaShare, uidTaskCount } from './linux-quotas';
import { planKey, scheduleSpare, type Spare, type SpareResources, SpareSlot } from './linux-spare';

const PLAIN_REPORT = unsandboxedReport('linux', {
  treeTeardown: 'partial',
  gaps: ['policy: null: the command runs without a sandbox'],
});

export function signalNumber(signal: NodeJS.Signals | number): number {
  if (typeof signal === 'number') return signal;
  const n = (os.constants.signals as Record<string, number>)[signal];
  if (n === undefined) throw new SandboxError('EINVALID_ARGUMENT', `unknown signal: ${signal}`);
  return n;
}

export function signalName(n: number): NodeJS.Signals | null {
  for (const [name, value] of Object.entries(os.constants.signals)) if (value === n) return name as NodeJS.Signals;
  return null;
}

/**
 * Removes a per-run temp dir and returns what it could not remove (null: all gone). Never throws:
 * it runs in the exit path, and the tree is the command's own, which may hold directories with
 * mode 000, files it cannot unlink, symlinks to host files and paths past PATH_MAX. The common
 * case (left empty) is a single rmdir. An fd held across the rmdir and closed on the thread pool
 * takes the freeing of the inode (~70 us on ext4) off the JS thread; the directory is gone when
 * the exit is delivered, as before. Anything else goes through native.removeTree, which works by
 * directory fds, never follows a symlink (it never changes a symlink's target's mode) and gives
 * the uid's own unreadable directories 0700 first; a second pass retries what the first left.
 */
function removeTmpDir(native: LinuxNative, dir: string): string | null {
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  } catch {
    // not there, or not a directory, or unreadable: rmdir/removeTree below decide
  }
  let left: string | null = null;
  try {
    fs.rmdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') left = removeTree(native, dir);
  }
  if (fd !== undefined) native.closeOnPool(fd);
  return left;
}

type Removal = { left: number; error: string; path: string };
const leftText = (dir: string, r: Removal): string | null =>
  r.left === 0 ? null : `${dir}: ${r.left} entr${r.left === 1 ? 'y' : 'ies'} could not be removed (first: ${r.path || '.'}: ${r.error})`;

function removeTree(native: LinuxNative, dir: string): string | null {
  try {
    let r = native.removeTree(path.dirname(dir), path.basename(dir));
    if (r.left > 0) r = native.removeTree(path.dirname(dir), path.basename(dir));
    return leftText(dir, r);
  } catch (e) {
    return `${dir}: ${String((e as Error)?.message ?? e)}`;
  }
}

/**
 * removeTmpDir for the exit path: a tree the command filled (thousands of files take most of a
 * second) is removed on the thread pool; the exit is still delivered only once it is gone.
 */
function removeTmpDirAfterRun(native: LinuxNative, dir: string): Promise<string | null> {
  if (!native.removeTreeAsync) return Promise.resolve(removeTmpDir(native, dir));
  // The common case as in removeTmpDir: one rmdir, the inode freed on the pool.
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  } catch {
    // not there, or unreadable: rmdir/removeTreeAsync below decide
  }
  let gone = false;
  try {
    fs.rmdirSync(dir);
    gone = true;
  } catch (e) {
    gone = (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
  if (fd !== undefined) native.closeOnPool(fd);
  if (gone) return Promise.resolve(null);
  return new Promise((resolve) => {
    try {
      native.removeTreeAsync(path.dirname(dir), path.basename(dir), (r) => resolve(leftText(dir, r)));
    } catch (e) {
      resolve(`${dir}: ${String((e as Error)?.message ?? e)}`);
    }
  });
}

/** Reports what cleanup left behind without throwing: a process warning (an 'error'-free event). */
function warnLeft(what: string): void {
  try {
    process.emitWarning(`process-sandbox could not remove ${what}`, { code: 'PSB_CLEANUP' });
  } catch {
    // a throwing 'warning' listener is not ours to crash on
  }
}

/**
 * Placeholders for missing protected or deny-read paths live on the host while runs use them.
 * Concurrent runs in one workspace (in this process or another) share them: a later run sees the
 * placeholder as an existing path and binds it, and removing it would detach that bind. So every
 * run holds a shared lock on each placeholder-looking path it relies on, and a placeholder is
 * removed only by a run that can take it exclusively. A placeholder left by a host that died is
 * picked up and removed the same way by the next run that uses it.
 */
interface HeldPlaceholder {
  path: string;
  fd: number;
}

/**
 * Ours look like this: an empty 0555 directory, or an empty 0444 file. `shape` skips the listing
 * of a directory: enough where the next step is our own lock or rmdir (which takes only an empty
 * directory), and it is what runs on every spawn's path (a missing path costs one lstat, no throw).
 */
function looksLikePlaceholder(p: string, shape = false): boolean {
  try {
    const st = fs.lstatSync(p, { throwIfNoEntry: false });
    if (st === undefined) return false;
    const mode = st.mode & 0o7777;
    if (st.isDirectory()) return mode === 0o555 && (shape || fs.readdirSync(p).length === 0);
    return st.isFile() && mode === 0o444 && st.size === 0;
  } catch {
    return false;
  }
}

const EWOULDBLOCK = os.constants.errno.EWOULDBLOCK;

/** The proxy port a Landlock-mode plan names (its connect supervisor's, or Landlock's port rule). */
function proxyPortOf(plan: Omit<LinuxNativePlan, 'stdio'>): number | undefined {
  return plan.seccomp?.connectSupervisor || plan.landlock?.connectPorts?.[0] || undefined;
}

/**
 * The proxy's port for a sandbox. Isolated mode: any port, since the namespace is empty and no
 * other sandbox shares it. Landlock mode: a host listener on 127.0.0.1, which the proxy serves.
 */
function proxyPortFor(native: LinuxNative, mode: 'isolated' | 'landlock'): { port: number; hostListenerFd?: number } {
  if (mode === 'isolated') return { port: 20000 + crypto.randomInt(40000) };
  const l = native.listenLoopback();
  return { port: l.port, hostListenerFd: l.fd };
}

/** A run's cgroup, capped as its rules ask. */
function cgroupFor(rules: NonNullable<BackendSpawnRequest['rules']>): SandboxCgroup | null {
  return createSandboxCgroup({ pidsMax: rules.limits.maxProcesses ?? DEFAULT_MAX_PROCESSES, memoryBytes: rules.limits.memoryBytes });
}

/** Landlock mode without a pids cgroup, unprivileged: the uid's task count RLIMIT_NPROC adds the cap to. */
function uidTasksFor(mode: 'isolated' | 'landlock', g: SandboxCgroup | null, probe: LinuxProbe): number | undefined {
  return mode === 'landlock' && !g && probe.euid !== 0 ? uidTaskCount(process.getuid!()) : undefined;
}

/** What the planner is told of a run's cgroup. */
function cgroupInfo(g: SandboxCgroup | null) {
  return g ? { kind: g.kind, pidsMax: g.pidsMax, memoryBytes: g.memoryBytes } : undefined;
}

/** A host fd on stdio that is a terminal (Landlock mode grants it by inode at setup: no spare). */
const isTerminal = (s: LinuxStdio): boolean => typeof s === 'number' && s >= 0 && tty.isatty(s);

/**
 * The addon never waits on a lock (a sandboxed command can hold one on a placeholder it sees).
 * Placeholders init just made for this run: one already locked by someone else (the command itself
 * could race for it) cannot be relied on, since its holder's run could remove it mid-run and the
 * command could then create the path for real. The caller stops the command (fail closed).
 */
function lockPlaceholders(native: LinuxNative, paths: string[]): HeldPlaceholder[] {
  const held: HeldPlaceholder[] = [];
  for (const p of paths) {
    if (!looksLikePlaceholder(p, true)) continue;
    const fd = native.lockPlaceholder(p);
    if (fd >= 0) {
      held.push({ path: p, fd });
    } else if (fd === -EWOULDBLOCK) {
      releasePlaceholders(native, held);
      throw placeholderBusy(p);
    }
  }
  return held;
}

function placeholderBusy(p: string): SandboxError {
  return new SandboxError(
    'ESPAWN',
    `the placeholder ${p} is locked by another process (a running sandboxed command can hold it) and could ` +
      `not be replaced; it cannot be relied on to keep the protected path from being created, so nothing was started`,
    // spawn() reports it as a start failure ('error' event, rejected `exited`), never a throw: a
    // command must not be able to make the host's other spawns throw.
    { detail: { path: p, startFailure: true } },
  );
}

/**
 * Existing placeholders (another run's, or a dead host's) that this run will rely on, held with a
 * shared lock before the plan is made. A lookalike whose lock stays exclusively held (past the
 * addon's short retries, which ride out a host's release) is relied on by no run: a run relying on
 * it holds a shared lock, which excludes an exclusive one. Only a command that sees it holds it so
 * (an attack on the host's other spawns), so it is removed like any unused placeholder; the plan
 * then finds the path missing and this run's own init makes a fresh placeholder, locked after the
 * spawn. Removal without the lock is safe (native.removeLookalike): it takes only what still looks
 * like a placeholder, and looks it up without following a link on the way (the command holding
 * the lock can swap a directory it may write on the way for a link to anywhere: removing by path
 * would then delete the file of that name there, outside the sandbox).
 */
function claimPlaceholders(native: LinuxNative, paths: string[]): HeldPlaceholder[] {
  const held: HeldPlaceholder[] = [];
  try {
    for (const p of paths) {
      if (!looksLikePlaceholder(p)) continue;
      let fd = native.lockPlaceholder(p);
      if (fd === -EWOULDBLOCK) {
        native.removeLookalike(p); // gone already, no longer a lookalike, or a link on the way: the next look decides
        if (!looksLikePlaceholder(p)) continue; // gone: the plan makes a fresh one
        fd = native.lockPlaceholder(p); // a new lookalike appeared at once (a racing command)
        if (fd === -EWOULDBLOCK) throw placeholderBusy(p);
      }
      if (fd >= 0) held.push({ path: p, fd });
    }
  } catch (e) {
    releasePlaceholders(native, held);
    throw e;
  }
  return held;
}

function releasePlaceholders(native: LinuxNative, held: HeldPlaceholder[]): void {
  for (const h of held) native.releasePlaceholder(h.fd, h.path, looksLikePlaceholder(h.path, true));
}

const TMP_PREFIX = 'process-sandbox-tmp-';
let staleTmpSwept = false;

/**
 * The directory all of this uid's Landlock-mode TMPDIRs are made in (0700, the uid's own). The
 * planner denies reads of it but for the run's own TMPDIR (linux-plan.ts tmpShield), so that
 * another Landlock-mode sandbox of the same uid cannot read this one's temp files and private
 * caches, nor those of a run that starts later. null when it cannot be trusted (another uid
 * made the name first, a link, a group- or world-open mode): the TMPDIR is then made in the
 * host's temp dir as before, and the report lists the gap.
 */
function tmpParent(): string | null {
  const uid = process.getuid?.() ?? 0;
  const dir = path.join(os.tmpdir(), `${TMP_PARENT_PREFIX}${uid}`);
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') return null;
  }
  const st = lstatOrNull(dir);
  return st !== null && st.isDirectory() && st.uid === uid && (st.mode & 0o077) === 0 ? dir : null;
}

/** Landlock mode's private TMPDIR for one run. */
function makeTmpDir(native: LinuxNative): string {
  sweepStaleTmpDirs(native);
  return fs.mkdtempSync(path.join(tmpParent() ?? os.tmpdir(), `${TMP_PREFIX}${process.pid}-${PIDNS_TAG}-`));
}

/**
 * Landlock mode's per-run TMPDIRs are named after the host pid. A host that was killed never
 * removed its own; the first Landlock-mode spawn of each process removes those whose host is gone.
 * It never fails the spawn: what it cannot remove (an entry the uid may not delete) is skipped
 * with a process warning, and the next host process tries again.
 */
function sweepStaleTmpDirs(native: LinuxNative): void {
  if (staleTmpSwept) return;
  staleTmpSwept = true;
  const uid = process.getuid?.();
  // This uid's parent (tmpParent), and the host's temp dir itself (older versions, and runs whose
  // parent could not be trusted).
  const parents = [os.tmpdir(), path.join(os.tmpdir(), `${TMP_PARENT_PREFIX}${uid ?? 0}`)];
  const found: Array<[string, string]> = [];
  for (const parent of parents) {
    try {
      for (const n of fs.readdirSync(parent)) if (n.startsWith(TMP_PREFIX)) found.push([parent, n]);
    } catch {
      // absent or unreadable: nothing of ours to sweep there
    }
  }
  for (const [parent, n] of found) {
    const pid = Number(n.slice(TMP_PREFIX.length).split('-')[0]);
    // Another pid namespace's host cannot be judged by its pid here (linux-cgroup.ts PIDNS_TAG).
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || !ownPidNamespace(n.slice(TMP_PREFIX.length))) continue;
    const dir = path.join(parent, n);
    try {
      if (fs.lstatSync(dir).uid !== uid) continue;
      process.kill(pid, 0);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ESRCH') continue;
      const left = removeTree(native, dir);
      if (left) warnLeft(`a stale TMPDIR of a host that is gone: ${left}`);
    }
  }
}

/** How often Landlock mode checks its TMPDIR against limits.tmpBytes (at least; see watchTmpDir). */
const TMP_CHECK_MS = 250;
/** Entries the TMPDIR may hold: one per 4 KiB of tmpBytes, as isolated mode's tmpfs inodes, at least 1024. */
const tmpEntryLimit = (maxBytes: number): number => Math.max(1024, Math.floor(maxBytes / 4096));

/**
 * Landlock mode's TMPDIR is on the host's disk (isolated mode's is a tmpfs of limits.tmpBytes).
 * Without mounts there is no size-limited store to give it, so the host measures it: a walk on
 * the thread pool (native.measureTree: allocated blocks and entries) every TMP_CHECK_MS, or 10
 * times as long as the last walk took when that is longer (a huge tree costs the host no more
 * than ~10% of one pool thread), and `onOver` stops the run once it is past tmpBytes or past the
 * inode count isolated mode's tmpfs would have (one per 4 KiB, at least 1024). A check, not a
 * bound: between two checks a command can write what the disk takes in that time. Returns stop().
 */
function watchTmpDir(native: LinuxNative, dir: string, maxBytes: number, onOver: (message: string) => void): () => void {
  const maxInodes = tmpEntryLimit(maxBytes);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const schedule = (ms: number) => {
    timer = setTimeout(check, ms);
    timer.unref();
  };
  const check = () => {
    const t0 = performance.now();
    try {
      native.measureTree(dir, maxInodes, maxBytes, (u) => {
        if (stopped) return;
        if (u.bytes > maxBytes || u.inodes > maxInodes) {
          stopped = true;
          const what = u.bytes > maxBytes ? `more than ${maxBytes} bytes (limits.tmpBytes)` : `more than ${maxInodes} entries (one per 4 KiB of limits.tmpBytes)`;
          onOver(`the command's TMPDIR ${dir} held ${what}; the command and everything it started were killed`);
          return;
        }
        schedule(Math.max(TMP_CHECK_MS, 10 * (performance.now() - t0)));
      });
    } catch {
      // not measurable (an addon without measureTree): the report says the check is missing
    }
  };
  schedule(TMP_CHECK_MS);
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
  };
}

/** What the report says of Landlock mode's TMPDIR size check. */
function withTmpCheck(report: EnforcementReport, maxBytes: number, checked: boolean): EnforcementReport {
  if (!checked) {
    return { ...report, gaps: [...report.gaps, `the private TMPDIR is on the host's disk and its size is not checked (limits.tmpBytes ${maxBytes} does not apply)`] };
  }
  return {
    ...report,
    mechanisms: {
      ...report.mechanisms,
      tmpDirCheck: `TMPDIR measured by the host at least every ${TMP_CHECK_MS} ms; the run is killed past ${maxBytes} bytes or ${tmpEntryLimit(maxBytes)} entries`,
    },
    gaps: [
      ...report.gaps,
      `limits.tmpBytes is checked, not enforced by the filesystem: the private TMPDIR is on the host's disk and is measured ` +
        `at least every ${TMP_CHECK_MS} ms, so a burst can pass ${maxBytes} bytes by what it writes between two checks; ` +
        `files unlinked while open and directories the host's uid cannot read are not counted (the writable roots are not bounded at all)`,
    ],
  };
}

/**
 * Puts a run's quota share into its native plan (copies: a plan may be reused) and the report.
 * Isolated mode: the user namespace's inotify limits and the command's rlimits. Landlock mode:
 * the supervisor's inotify counts, where there is a supervisor.
 */
function applyQuotaShare(plan: Omit<LinuxNativePlan, 'stdio'>, enforcement: EnforcementReport, q: QuotaShare | null) {
  const sup = plan.seccomp?.metadataSupervisor;
  if (!q || (plan.mode === 'landlock' && !sup)) {
    const gap = q ? null : "inotify instances and watches are not capped: this host's per-uid inotify limits could not be read";
    return { plan, enforcement: gap ? { ...enforcement, gaps: [...enforcement.gaps, gap] } : enforcement };
  }
  const inotify = { instances: q.inotifyInstances, watches: q.inotifyWatches };
  const next: Omit<LinuxNativePlan, 'stdio'> =
    plan.mode === 'isolated'
      ? {
          ...plan,
          inotifyInstances: inotify.instances,
          inotifyWatches: inotify.watches,
          ...(q.sigpending !== undefined ? { rlimitSigpending: q.sigpending } : {}),
          ...(q.msgqueueBytes !== undefined ? { rlimitMsgqueue: q.msgqueueBytes } : {}),
        }
      : { ...plan, seccomp: { ...plan.seccomp!, metadataSupervisor: { ...sup!, inotify } } };
  const how = plan.mode === 'isolated' ? 'live, in the sandbox user namespace' : 'created, counted by the supervisor';
  const mechanisms = {
    ...enforcement.mechanisms,
    inotify: `${inotify.instances} instances, ${inotify.watches} watches (${how}; this run's share of the uid's limits)`,
  };
  return { plan: next, enforcement: { ...enforcement, mechanisms } };
}

/**
 * Facts only known after the spawn: the Landlock ABI applied, whether the net namespace is
 * shared, and whether the sandbox was prepared ahead (linux-spare.ts).
 */
function withNativeFacts(report: EnforcementReport, res: { landlockAbi: number; sharedNetns?: boolean }, preparedAhead: boolean): EnforcementReport {
  if (!report.sandboxed) return report;
  const mechanisms = { ...report.mechanisms };
  if (preparedAhead) mechanisms.preparedAhead = true;
  if (res.landlockAbi) mechanisms.landlockAbi = res.landlockAbi;
  if (res.sharedNetns) {
    mechanisms.namespaces = (mechanisms.namespaces as string[]).map((n) => (n === 'net' ? 'net (shared, empty)' : n));
  }
  return { ...report, mechanisms };
}

export function createLinuxBackend(native: LinuxNative): Backend {
  let probed: LinuxProbe | undefined;
  const linuxProbe = (): LinuxProbe => (probed ??= native.probe());
  const releaseResources = (r: SpareResources, atExit = false) => {
    r.cgroup?.closeFds();
    r.cgroup?.remove(!atExit);
    r.quota?.release();
    const left = r.tmpDir ? removeTmpDir(native, r.tmpDir) : null;
    if (left) warnLeft(left);
    if (r.hostListenerFd !== undefined) fs.closeSync(r.hostListenerFd);
  };
  const spares = new SpareSlot(native, releaseResources);

  return {
    name: 'linux',
    probe(): ProbeReport {
      const p = linuxProbe();
      let defaultMode: ProbeReport['defaultMode'] = null;
      try {
        defaultMode = chooseLinuxMode(
          { mode: 'auto', degraded: true } as Parameters<typeof chooseLinuxMode>[0],
          p,
        );
      } catch {
        defaultMode = null;
      }
      if (p.seccomp !== 0) defaultMode = null;
      const procGap = (p.mountApi ?? 0) === 0 ? isolatedProcGap(p) : undefined;
      return {
        platform: 'linux',
        arch: process.arch,
        addonLoaded: true,
        defaultMode,
        features: {
          kernel: p.kernel,
          landlockAbi: p.landlockAbi,
          seccomp: p.seccomp === 0,
          userNamespaces: p.userns === 0,
          userNamespacesErrno: p.userns === 0 ? undefined : -p.userns,
          euid: p.euid,
          isolatedMode: p.userns === 0 && p.seccomp === 0 && (p.mountApi ?? 0) === 0 && !procGap,
          // A fresh procfs mounts in the namespaces (false under masked paths over /proc: rootless
          // containers); why isolated mode is out of reach then. Unknown (undefined) where no user
          // namespace can be made: the probe never gets as far as the mount.
          procfs: p.userns !== 0 || p.procfs === undefined ? undefined : p.procfs === 0,
          ...(procGap ? { isolatedModeUnavailable: procGap } : {}),
          // isolated mode's setup calls (Linux 5.12); false on older kernels (isolatedKernelGap).
          mountApi: (p.mountApi ?? 0) === 0,
          landlockMode: p.landlockAbi >= 1 && p.seccomp === 0,
          // Landlock mode with the proxy closes the proxy-port gap through it (README).
          connectSupervisor: p.connectSupervisor === 0,
          // The same seccomp supervision carries Landlock mode's metadata calls and inotify counts.
          metadataSupervisor: p.landlockAbi >= 1 && p.seccomp === 0 && p.connectSupervisor === 0,
          // How the supervisors reach the command (native/linux/task_access.h).
          supervisorAccess: p.supervisorAccess,
          // init can trace the command: Landlock mode's process cap as root without a cgroup.
          processTracing: p.processTracing === 0,
        },
      };
    },

    spawn(req: BackendSpawnRequest): BackendProcess {
      // Isolated mode makes the terminal inside the sandbox's own devpts (init opens it), so the
      // command's ttyname() names a node that exists there; elsewhere the addon opens it here.
      const nsPty = req.pty !== undefined && req.rules !== null && isolatedFor(req.rules) ? req.pty : undefined;
      const pty = req.pty && !nsPty ? openPty(native, req.pty) : undefined;
      let proc: BackendProcess;
      try {
        proc = spawnOn(req, pty, nsPty);
      } catch (e) {
        if (pty) fs.closeSync(pty.slave);
        throw e;
      }
      // The parent holds its slave copy until the command has exited, then lets go: the master
      // reads EIO (the end) only after everything the command wrote is in the terminal's buffer.
      // Closing it at once let the command's last output race its hangup.
      if (pty) void proc.exited.finally(() => fs.closeSync(pty.slave));
      return proc;
    },
  };

  function isolatedFor(rules: NonNullable<BackendSpawnRequest['rules']>): boolean {
    try {
      return chooseLinuxMode(rules, linuxProbe()) === 'isolated';
    } catch {
      return false; // spawnOn throws the same refusal
    }
  }

  /**
   * A spare for the next spawn of this shape (linux-spare.ts), made as the spawn itself would be
   * but with no stdio, from what this one was given. Runs after the spawn, while its command runs.
   * Its plan is this spawn's plan (before the quota share) with the spare's own TMPDIR in place of
   * this one's, when the cgroup is alike; planned afresh otherwise. Either way the spawn that
   * takes it compares it with a plan of its own.
   */
  function prepareSpare(
    key: string,
    req: BackendSpawnRequest,
    rules: NonNullable<BackendSpawnRequest['rules']>,
    mode: 'isolated' | 'landlock',
    probe: LinuxProbe,
    base: { plan: Omit<LinuxNativePlan, 'stdio'>; tmpDir: string | undefined; cgroup: string },
    nsPty: { cols: number; rows: number } | undefined,
  ): void {
    // Concurrent spawns of one shape each ask for one: the first makes it.
    if (spares.holds(key)) return;
    const made: SpareResources = { cgroup: null, quota: null };
    try {
      let env = { ...req.env };
      if (mode === 'landlock' && rules.tmp === 'private') env.TMPDIR = made.tmpDir = makeTmpDir(native);
      if (rules.network.kind === 'proxy') {
        // A port of its own (the spawn that takes it plans with this one).
        ({ port: made.proxyPort, hostListenerFd: made.hostListenerFd } = proxyPortFor(native, mode));
        env = ManagedProxy.proxyEnv(env, made.proxyPort);
      }
      made.cgroup = cgroupFor(rules);
      const cgroup = cgroupInfo(made.cgroup);
      let plan: Omit<LinuxNativePlan, 'stdio'>;
      if (JSON.stringify(cgroup) === base.cgroup && (base.tmpDir === undefined) === (made.tmpDir === undefined)) {
        const json = JSON.stringify(base.plan);
        plan = JSON.parse(base.tmpDir && made.tmpDir ? json.split(JSON.stringify(base.tmpDir)).join(JSON.stringify(made.tmpDir)) : json);
        if (made.proxyPort !== undefined) setProxyPort(plan, made.proxyPort);
      } else {
        plan = planLinux({ rules, mode, file: req.file, argv: req.argv, env, cwd: req.cwd, probe, landlockTmpDir: made.tmpDir, proxyPort: made.proxyPort, cgroup, uidTasks: uidTasksFor(mode, made.cgroup, probe) }).native;
      }
      if (made.cgroup) plan.cgroupFds = made.cgroup.procsFds;
      made.quota = takeQuotaShare(mode);
      plan = applyQuotaShare(plan, PLAIN_REPORT, made.quota).plan;
      // Its own terminal, added as spawnOn adds it, last (planKey compares the JSON text; the
      // spawn that takes it sets the size).
      if (nsPty) plan = { ...plan, setsid: true, ctty: true, ptyCols: nsPty.cols, ptyRows: nsPty.rows };
      spares.fill(key, plan, made);
    } catch {
      releaseResources(made); // the spawn itself succeeded; the next one simply starts from nothing
    }
  }

  function spawnOn(
    req: BackendSpawnRequest,
    pty: OpenedPty | undefined,
    nsPty: { cols: number; rows: number } | undefined,
    noSpare = false,
    replanned = false,
  ): BackendProcess {
    {
      const stdio: LinuxStdio[] = pty
        ? [pty.slave, pty.slave, pty.slave]
        : nsPty
          ? [-1, -1, -1] // placeholders: init puts the in-namespace slave there
          : req.stdio.map((s, i) => (s === 'pipe' ? (i === 0 ? 'in' : 'out') : s === 'inherit' ? i : s === 'ignore' ? -1 : s));
      let plan: Omit<LinuxNativePlan, 'stdio'>;
      let proxy: ManagedProxy | undefined;
      let ownsProxy = false;
      let hostListenerFd: number | undefined;
      let enforcement = PLAIN_REPORT;
      let ghosts: string[] = [];
      let held: HeldPlaceholder[] = [];
      let tmpDir: string | undefined;
      let tmpLimit = DEFAULT_TMP_BYTES;
      let stopTmpWatch: (() => void) | undefined;
      let limitExceeded: ExitInfo['limitExceeded'];
      const cleanupLeft: string[] = [];
      let cgroup: SandboxCgroup | null = null;
      let quota: QuotaShare | null = null;
      let spare: Spare | undefined;
      let prepareNext: (() => void) | undefined;
      let prepareAfterExit: (() => void) | undefined;
      let basePlan: Omit<LinuxNativePlan, 'stdio'> | undefined;
      // Isolated mode with `changes`: the overlays' layer (lib/changes/overlay-layer.ts).
      let staged: { layer: StageLayer; journalDir?: string } | undefined;
      let record: RecordRun | undefined;
      if (req.rules === null) {
        plan = {
          mode: 'plain',
          file: req.file,
          argv: req.argv,
          envp: Object.entries(req.env).map(([k, v]) => `${k}=${v}`),
          cwd: req.cwd,
        };
      } else {
        const probe = linuxProbe();
        const mode = chooseLinuxMode(req.rules, probe);
        // changes: the journal directory is made now and denied to the command (lib/changes/record.ts);
        // isolated mode stages instead (lib/changes/overlay-layer.ts, below).
        if (req.changes && mode === 'landlock') record = prepareRecord(req.changes, mode, req.rules, native, tmpParent);
        const rules = record?.rules ?? req.rules;
        // A spawn can be served by a spare made ahead unless it has a host pty (Landlock mode),
        // and in Landlock mode a terminal on stdio (its rule is made from the fd). A terminal made
        // inside an isolated sandbox is made with the spare, and is part of its shape.
        // (Not with `changes`: each run stages into a layer of its own.)
        if (!pty && !req.changes && typeof native.prepareSpare === 'function' && (mode === 'isolated' || !stdio.some(isTerminal))) {
          const key = `${req.cwd}\0${nsPty ? 'pty' : ''}\0${JSON.stringify(rules)}`;
          if (!noSpare) spare = spares.take(key);
          // Its resources are this run's from here: released with the run, or on any failure.
          if (spare) ({ cgroup, quota, hostListenerFd } = spare.resources);
          prepareNext = () => {
            // A plan that binds placeholders another run holds (claimed above) is no plan for a
            // later sandbox: they go when that run ends. The next spawn plans without them.
            if (held.length > 0 || !spares.wants(key) || basePlan === undefined) return;
            // Isolated with the traced process cap: the spare's helper-made command cannot be
            // seized by init before it runs (native PrepareSpare refuses it too).
            if (mode === 'isolated' && basePlan.traceProcessCap) return;
            const base = { plan: basePlan, tmpDir, cgroup: JSON.stringify(cgroupInfo(cgroup)) };
            // Once this run's exit has been delivered: the JS side of the preparation then runs
            // between runs (in the pause before the next one, or during the next command when
            // they follow back to back), never inside this one's time.
            prepareAfterExit = () => scheduleSpare(() => prepareSpare(key, req, rules, mode, probe, base, nsPty));
          };
        }
        const env = { ...req.env };
        if (rules.tmp === 'private') {
          if (mode === 'isolated') {
            // /tmp itself is private. The env stays exactly as given unless its TMPDIR points
            // somewhere the command could not use (a path outside /tmp and the writable roots).
            const t = env.TMPDIR;
            const usable = (p: string) => p === '/tmp' || p.startsWith('/tmp/') || rules.writeRoots.some((w) => p === w || p.startsWith(w + '/'));
            if (t !== undefined && !usable(t)) env.TMPDIR = '/tmp';
          } else {
            tmpDir = spare?.resources.tmpDir ?? makeTmpDir(native);
            env.TMPDIR = tmpDir;
            tmpLimit = rules.limits.tmpBytes ?? DEFAULT_TMP_BYTES;
          }
        }
        let proxyPort: number | undefined;
        let planEnv = env;
        try {
          if (rules.network.kind === 'proxy') {
            const hooks = req.network ?? {};
            if (hooks.instance) {
              if (hooks.instance.closed) {
                throw new SandboxError('EPROXY_START', 'the managed proxy given in options.proxy.instance is closed');
              }
              proxy = hooks.instance;
            } else {
              proxy = ManagedProxy.create({
                policy: rules.network.proxy,
                onAudit: hooks.onAudit,
                decider: hooks.decider,
                deciderTimeoutMs: hooks.deciderTimeoutMs,
                lookup: hooks.lookup,
                // spawn() resolved the CA (InterceptionCa.shared() by default) and wired it in.
                ...(hooks.interception?.ca ? { interception: { ...hooks.interception, ca: hooks.interception.ca } } : {}),
              });
              ownsProxy = true;
            }
            // The port the spare was made for (in Landlock mode, hostListenerFd is its listener).
            if (spare?.resources.proxyPort !== undefined) proxyPort = spare.resources.proxyPort;
            else ({ port: proxyPort, hostListenerFd } = proxyPortFor(native, mode));
            planEnv = ManagedProxy.proxyEnv(env, proxyPort);
          }
          // Existing placeholders are held before the plan, which then binds them as existing paths.
          held = claimPlaceholders(native, [...rules.readOnly, ...rules.denyRead]);
          if (!spare) cgroup = cgroupFor(rules);
          const cgInfo = cgroupInfo(cgroup);
          const uidTasks = uidTasksFor(mode, cgroup, probe);
          if (req.changes && mode === 'isolated') {
            staged = prepareIsolatedChanges(native, req.changes, rules.tmp === 'host' ? [...rules.writeRoots, '/tmp'] : rules.writeRoots);
          }
          const stageMounts = staged?.layer.mounts;
          const p = planLinux({ rules, mode, file: req.file, argv: req.argv, env: planEnv, cwd: req.cwd, probe, landlockTmpDir: tmpDir, proxyPort, cgroup: cgInfo, uidTasks, stageMounts, changes: record?.plan });
          // Without the connect supervisor the host listener admits by uid only: any process of
          // this uid could have a credential rule's secret injected into its own requests.
          if (proxy?.hasCredentialRules && mode === 'landlock' && !p.native.seccomp?.connectSupervisor) {
            throw new SandboxError(
              'ENETWORK_NOT_ENFORCEABLE',
              'credential rules (interception.credentials) in Landlock mode need the connect supervisor, which this kernel lacks ' +
                `(errno ${-(probe.connectSupervisor ?? -38)}): other processes of this uid could use the proxy and get the secrets. ` +
                'Use isolated mode (user namespaces), or leave the credential rules out.',
            );
          }
          plan = p.native;
          if (prepareNext) basePlan = { ...p.native };
          if (cgroup) plan.cgroupFds = cgroup.procsFds;
          enforcement = p.enforcement;
          // This run's share of the uid's inotify, signal and mqueue counters (linux-quotas.ts).
          if (!spare) quota = takeQuotaShare(mode);
          ({ plan, enforcement } = applyQuotaShare(plan, enforcement, quota));
          if (tmpDir) enforcement = withTmpCheck(enforcement, tmpLimit, native.measureTree !== undefined);
          ghosts = p.ghosts;
        } catch (e) {
          record?.abort();
          if (spare) {
            native.discardSpare(spare.handle);
            spares.stats.discarded++;
          }
          releasePlaceholders(native, held);
          if (tmpDir) removeTmpDir(native, tmpDir);
          cgroup?.remove();
          quota?.release();
          if (hostListenerFd !== undefined) fs.closeSync(hostListenerFd);
          if (ownsProxy) void proxy?.close();
          if (staged) dropLayer(native, staged.layer, staged.journalDir);
          throw e;
        }
      }
      let resolveExit!: (e: ExitInfo) => void;
      const exited = new Promise<ExitInfo>((resolve) => (resolveExit = resolve));
      let attachment: Promise<{ detach(): Promise<void> } | null> = Promise.resolve(null);
      const cleanup = async () => {
        // Every process of the sandbox is dead by now (init reported after its teardown); remove()
        // still kills anything found in the group before removing it.
        cgroup?.remove();
        quota?.release();
        releasePlaceholders(native, held);
        held = [];
        if (tmpDir) {
          stopTmpWatch?.();
          const left = await removeTmpDirAfterRun(native, tmpDir);
          if (left) cleanupLeft.push(left);
        }
        if (proxy) {
          // The proxy closes with its last process: no listener, fd or timer outlives the run.
          await (await attachment)?.detach().catch(() => {});
          if (ownsProxy) await proxy.close().catch(() => {});
        }
      };
      // A pty slave becomes the controlling terminal of the command's new session.
      if (pty) plan = { ...plan, setsid: true, ctty: true };
      if (nsPty) {
        if (plan.mode !== 'isolated') throw new SandboxError('ESPAWN', 'internal: an in-namespace pty needs isolated mode');
        plan = { ...plan, setsid: true, ctty: true, ptyCols: nsPty.cols, ptyRows: nsPty.rows };
      }
      let res;
      try {
        const onExit = (code: number | null, sig: number | null) => {
          // Cleanup never throws (the command's leftovers must not crash the host); what it
          // could not undo is in the exit info and a process warning.
          void cleanup()
            .catch((e: unknown) => void cleanupLeft.push(`cleanup: ${String((e as Error)?.message ?? e)}`))
            .then(() => {
              for (const l of cleanupLeft) warnLeft(l);
              resolveExit({
                code,
                signal: sig ? signalName(sig) : null,
                ...(limitExceeded ? { limitExceeded } : {}),
                ...(cleanupLeft.length > 0 ? { cleanupLeft } : {}),
              });
              prepareAfterExit?.();
            });
        };
        if (spare) {
          // Used only if this fresh plan is the one it was made from (and, natively, if every
          // path its rules name is still the same inode); otherwise everything it held goes, and
          // the spawn starts again from nothing.
          const { file, argv, envp, cwd } = plan;
          // Landlock mode with the proxy: the spare's listener on 127.0.0.1 waited where anything
          // local could connect to it. What queued before the command can connect is dropped, not
          // served as this run's (a listener that cannot be drained is not used).
          const drained = hostListenerFd === undefined || native.dropQueuedConnections(hostListenerFd) >= 0;
          const sameShape = drained && spare.planKey === planKey(plan);
          if (!sameShape) native.discardSpare(spare.handle);
          // With its own terminal, fds 0-2 are its slave: the go brings none, only the size.
          const go = nsPty ? { stdio: [], ptyCols: nsPty.cols, ptyRows: nsPty.rows } : { stdio };
          const got = sameShape ? native.spawnSpare(spare.handle, { file, argv, envp, cwd, ...go }, onExit) : null;
          if (got === null) {
            spares.stats.discarded++;
            releasePlaceholders(native, held);
            releaseResources({ tmpDir, cgroup, quota, hostListenerFd });
            if (ownsProxy) void proxy?.close();
            return spawnOn(req, pty, nsPty, true);
          }
          spares.stats.used++;
          res = got;
        } else {
          res = native.spawn({ ...plan, stdio }, onExit);
        }
      } catch (e) {
        record?.abort();
        if (pty) fs.closeSync(pty.master);
        if (hostListenerFd !== undefined) fs.closeSync(hostListenerFd);
        try {
          held.push(...lockPlaceholders(native, ghosts)); // whatever init made before it failed
        } catch {
          // held by someone else: left for the next run to remove
        }
        void cleanup().catch(() => {});
        if (staged) dropLayer(native, staged.layer, staged.journalDir);
        // A protected path (or a directory on its way) vanished between the plan and init's
        // mounts, and it was one whose name is held even when missing (linux-plan.ts VANISH_OK):
        // the command never ran. Planned once more from the tree as it is now, the name is held
        // by a placeholder. Once only: a second failure is reported as it is.
        if (!replanned && !pty && e instanceof SandboxError && e.code === 'EMOUNT_SETUP' && e.errno === os.constants.errno.ENOENT) {
          return spawnOn(req, pty, nsPty, true, true);
        }
        throw e;
      }
      cgroup?.closeFds(); // the command has joined (or failed and was reaped)
      prepareNext?.();
      // The placeholders init just made for this run. Should one already be locked by someone
      // else (the command itself could race for it), the run cannot rely on it: stop the command.
      try {
        held.push(...lockPlaceholders(native, ghosts));
      } catch {
        native.kill(res.handle, 9);
      }
      if (proxy) {
        const fd = res.listenerFd ?? hostListenerFd;
        const handle0 = res.handle;
        const processId = req.network?.processId ?? String(res.pid);
        // Landlock mode: the listener is on the host's 127.0.0.1, open to every local process.
        // Only the sandbox's own connections are served (native/linux/supervise_connect.cc).
        const hostPort = res.listenerFd === undefined && hostListenerFd !== undefined ? proxyPortOf(plan) : undefined;
        const admit =
          hostPort !== undefined
            ? (s: net.Socket) => s.remoteAddress === '127.0.0.1' && native.admitProxyPeer(hostPort, s.remotePort ?? 0, !!plan.seccomp?.connectSupervisor)
            : undefined;
        attachment = proxy.attach(processId, { fd, admit }).catch(() => {
          // Without its proxy the command has no network at all; stop it rather than leave it hanging.
          if (fd !== undefined) fs.closeSync(fd);
          native.kill(handle0, 9);
          return null;
        });
      }
      const streams: Array<Readable | Writable | null> = res.fds.map((fd, i) => {
        if (fd === null) return null;
        return i === 0
          ? new net.Socket({ fd, readable: false, writable: true })
          : new net.Socket({ fd, readable: true, writable: false });
      });
      const handle = res.handle;
      const out: BackendProcess = {
        pid: res.pid,
        stdio: streams,
        kill: (signal) => {
          const n = signalNumber(signal);
          const ok = native.kill(handle, n) === 0;
          // v2: cgroup.kill reaches every process of the group at once, wherever it went.
          if (ok && n === 9 && cgroup?.kind === 'v2') cgroup.killAll();
          return ok;
        },
        exited,
        setRef: (on) => void native.setRef?.(handle, on),
        enforcement: withNativeFacts(enforcement, res, spare !== undefined),
        // The placeholders init made inside the overlays are the sandbox's, not the command's changes.
        ...(staged ? { changes: overlayChanges(req.changes!.mode, native, staged.layer, new Set(ghosts), exited, staged.journalDir) } : {}),
      };
      if (staged) out.enforcement = { ...out.enforcement, changes: req.changes!.mode };
      if (record) {
        out.changes = record.backend(exited);
        out.enforcement = { ...out.enforcement, changes: 'record' };
      }
      const master = pty ? pty.master : nsPty ? res.ptyFd : undefined;
      if (nsPty && master === undefined) {
        native.kill(handle, 9);
        throw new SandboxError('ESPAWN', 'the sandbox did not hand over its pseudo-terminal');
      }
      if (nsPty && master !== undefined) {
        // As for a host pty: hold a slave until the command exits, so its last output is read.
        const peer = native.ptyPeer(master);
        void exited.finally(() => fs.closeSync(peer));
      }
      if (master !== undefined) {
        const stream = ptyStream(master);
        out.stdio = [null, stream, null];
        out.pty = { stream, resize: (cols, rows) => native.resizePty(master, cols, rows) };
        out.enforcement = { ...out.enforcement, mechanisms: { ...out.enforcement.mechanisms, pty: true } };
      }
      if (tmpDir && typeof native.measureTree === 'function') {
        stopTmpWatch = watchTmpDir(native, tmpDir, tmpLimit, (message) => {
          limitExceeded = { limit: 'tmpBytes', message };
          out.kill('SIGKILL');
        });
      }
      return out;
    }
  }
}

interface OpenedPty {
  master: number;
  slave: number;
}

function openPty(native: LinuxNative, size: { cols: number; rows: number }): OpenedPty {
  if (!native.openPty) throw new SandboxError('EPLATFORM_UNSUPPORTED', 'this build of the addon has no pseudo-terminal support');
  const { master, slave } = native.openPty(size.cols, size.rows);
  return { master, slave };
}

/**
 * The master side as one duplex stream. Linux reports the slave's last close as EIO on the
 * master (after any buffered output has been read): that is the end of the terminal's output,
 * not an error. The stream owns the fd and closes it.
 */
function ptyStream(master: number): tty.ReadStream {
  const stream = new tty.ReadStream(master);
  const destroy = stream.destroy.bind(stream);
  let ended = false;
  stream.destroy = (err?: Error) => {
    if ((err as NodeJS.ErrnoException | undefined)?.code !== 'EIO') return destroy(err);
    // End, do not destroy: destroy() would drop output that was read but not yet emitted. The
    // stream closes itself once it has ended (allowHalfOpen is off).
    (stream as unknown as { _handle?: { readStop?: () => void } })._handle?.readStop?.();
    if (!ended) {
      ended = true;
      stream.push(null);
    }
    return stream;
  };
  stream.on('error', () => {});
  return stream;
}
