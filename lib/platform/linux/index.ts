/**
 * The Linux backend's façade: picks the mode, prepares a run (its resources in a LinuxRun, run.ts;
 * its plan from plan.ts), starts it through the addon (from a sandbox prepared ahead, spare.ts,
 * where one fits) and wraps the result as a BackendProcess. Exit is reported by the addon from the
 * process's pidfd; the run's resources are released then. The wing's other files: mode.ts,
 * landlock-rules.ts, mounts.ts, limits.ts (planning), cgroup.ts, quotas.ts, caches.ts, tmpdir.ts,
 * placeholders.ts, resources.ts, pty.ts, git-view.ts, apparmor.ts.
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as tty from 'node:tty';
import type { Readable, Writable } from 'node:stream';
import type { Backend, BackendProcess, BackendSpawnRequest, EnforcementReport, ExitInfo, ProbeReport } from '../../backend';
import { unsandboxedReport } from '../../backend';
import { overlayChanges } from '../../changes/overlay';
import { prepareIsolatedChanges } from '../../changes/overlay-layer';
import { prepareRecord } from '../../changes/record';
import { SandboxError } from '../../errors';
import type { LinuxNative, LinuxNativePlan, LinuxProbe, LinuxStdio } from '../../native';
import { ManagedProxy } from '../../network';
import { DEFAULT_TMP_BYTES } from './limits';
import { chooseLinuxMode, isolatedProcGap } from './mode';
import { claimPlaceholders, lockPlaceholders } from './placeholders';
import { planLinux, setProxyPort } from './plan';
import { type OpenedPty, openPty, ptyStream } from './pty';
import { type QuotaShare, takeQuotaShare } from './quotas';
import { cgroupFor, cgroupInfo, proxyPortFor, proxyPortOf, uidTasksFor } from './resources';
import { LinuxRun } from './run';
import { planKey, replacePath, scheduleSpare, type SpareResources, SpareSlot } from './spare';
import { ensureSupervisionProcess, supervisionInHost, supervisionProcessWanted } from './supervision-process';
import { makeTmpDir, removeTmpDir, tmpParent, warnLeft, watchTmpDir, withTmpCheck } from './tmpdir';

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

/** A host fd on stdio that is a terminal (Landlock mode grants it by inode at setup: no spare). */
const isTerminal = (s: LinuxStdio): boolean => typeof s === 'number' && s >= 0 && tty.isatty(s);

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

/** What the supervision (the host's task that carries out supervised calls) may reach. */
export const SUPERVISION_CONFINED =
  "confined by Landlock to the policy's outer envelope (readable and writable roots before deny-read carving, TMPDIR, allowed devices, the terminals on stdio, /proc)";
export const SUPERVISION_UNCONFINED = "the host process's authority (not confined)";
/** Landlock mode's supervision in a process of its own, the default (linux/supervision-process.ts). */
export const supervisionInProcess = (pid: number): string => `${SUPERVISION_CONFINED}, in a process of its own (pid ${pid}, started from the host's executable)`;
/** ... or in the host process, and why. */
export const supervisionInHostProcess = (why: string): string => `${SUPERVISION_CONFINED}, as threads of the host process (${why})`;
/** Isolated mode's only supervised class: listings of the directories holding placeholders. */
export const SUPERVISION_LISTINGS =
  "listings of the directories holding placeholders only, with the host process's authority (not confined by Landlock)";

/**
 * Facts only known after the spawn: the Landlock ABI applied, whether the net namespace is
 * shared, what the supervision may reach, and whether the sandbox was prepared ahead
 * (linux/spare.ts).
 */
function withNativeFacts(
  report: EnforcementReport,
  res: { landlockAbi: number; sharedNetns?: boolean; supervisionConfined?: boolean; supervisionProcess?: number },
  preparedAhead: boolean,
): EnforcementReport {
  if (!report.sandboxed) return report;
  const mechanisms = { ...report.mechanisms };
  if (preparedAhead) mechanisms.preparedAhead = true;
  // Landlock mode: what the supervision (the host's thread that carries out supervised calls for
  // the command) may reach, as the addon made it (a sandbox prepared ahead included).
  if (res.supervisionConfined !== undefined) {
    const listingsOnly = !res.supervisionConfined && mechanisms.placeholderListing !== undefined;
    mechanisms.supervision = res.supervisionProcess
      ? supervisionInProcess(res.supervisionProcess)
      : res.supervisionConfined
        ? supervisionInHostProcess(supervisionInHost() ?? 'a sandbox prepared before the setting changed')
        : listingsOnly
          ? SUPERVISION_LISTINGS
          : SUPERVISION_UNCONFINED;
  }
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
          // How the supervisors reach the command (native/linux/supervisor/task_access.h).
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
   * A spare for the next spawn of this shape (linux/spare.ts), made as the spawn itself would be
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
    inProcess: boolean,
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
        plan = base.tmpDir && made.tmpDir ? replacePath(base.plan, base.tmpDir, made.tmpDir) : structuredClone(base.plan);
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
      // In the supervision process, as the spawn that takes it will be; started if none runs.
      if (inProcess) ensureSupervisionProcess(native);
      spares.fill(key, plan, made, inProcess);
    } catch {
      releaseResources(made); // the spawn itself succeeded; the next one simply starts from nothing
    }
  }

  /**
   * One spawn: the run's resources and plan (prepareRun), the command started from a spare or
   * afresh (launch), then what the host attaches to it (the placeholders init made, the proxy)
   * and the BackendProcess. `noSpare`: a spare taken for this spawn could not be used; `replanned`:
   * planned once more after a protected path vanished before init's mounts.
   */
  function spawnOn(
    req: BackendSpawnRequest,
    pty: OpenedPty | undefined,
    nsPty: { cols: number; rows: number } | undefined,
    noSpare = false,
    replanned = false,
  ): BackendProcess {
    const stdio = stdioFor(req, pty, nsPty);
    const run = new LinuxRun(native);
    const prepared = req.rules === null ? plainPlan(req) : prepareRun(run, req, req.rules, stdio, pty, nsPty, noSpare);
    let plan = prepared.plan;
    // A pty slave becomes the controlling terminal of the command's new session.
    if (pty) plan = { ...plan, setsid: true, ctty: true };
    if (nsPty) {
      if (plan.mode !== 'isolated') throw new SandboxError('ESPAWN', 'internal: an in-namespace pty needs isolated mode');
      plan = { ...plan, setsid: true, ctty: true, ptyCols: nsPty.cols, ptyRows: nsPty.rows };
    }
    let resolveExit!: (e: ExitInfo) => void;
    const exited = new Promise<ExitInfo>((resolve) => (resolveExit = resolve));
    const onExit = (code: number | null, sig: number | null) => {
      // Cleanup never throws (the command's leftovers must not crash the host); what it could
      // not undo is in the exit info and a process warning.
      void run
        .release()
        .catch((e: unknown) => void run.cleanupLeft.push(`cleanup: ${String((e as Error)?.message ?? e)}`))
        .then(() => {
          for (const l of run.cleanupLeft) warnLeft(l);
          resolveExit({
            code,
            signal: sig ? signalName(sig) : null,
            ...(run.limitExceeded ? { limitExceeded: run.limitExceeded } : {}),
            ...(run.cleanupLeft.length > 0 ? { cleanupLeft: run.cleanupLeft } : {}),
          });
          prepared.afterExit?.();
        });
    };
    let res: NativeSpawnResult | null;
    try {
      res = launch(run, plan, stdio, nsPty, onExit);
    } catch (e) {
      run.dropChanges();
      if (pty) fs.closeSync(pty.master);
      if (run.hostListenerFd !== undefined) fs.closeSync(run.hostListenerFd);
      try {
        run.held.push(...lockPlaceholders(native, prepared.ghosts)); // whatever init made before it failed
      } catch {
        // held by someone else: left for the next run to remove
      }
      void run.release().catch(() => {});
      // A protected path (or a directory on its way) vanished between the plan and init's
      // mounts, and it was one whose name is held even when missing (linux/mounts.ts VANISH_OK):
      // the command never ran. Planned once more from the tree as it is now, the name is held
      // by a placeholder. Once only: a second failure is reported as it is.
      if (!replanned && !pty && e instanceof SandboxError && e.code === 'EMOUNT_SETUP' && e.errno === os.constants.errno.ENOENT) {
        return spawnOn(req, pty, nsPty, true, true);
      }
      throw e;
    }
    // The spare could not be used: everything it held is gone; start again from nothing.
    if (res === null) return spawnOn(req, pty, nsPty, true);
    run.cgroup?.closeFds(); // the command has joined (or failed and was reaped)
    prepared.prepareNext?.();
    // The placeholders init just made for this run. Should one already be locked by someone
    // else (the command itself could race for it), the run cannot rely on it: stop the command.
    try {
      run.held.push(...lockPlaceholders(native, prepared.ghosts));
    } catch {
      native.kill(res.handle, 9);
    }
    attachProxy(run, req, plan, res);
    const out = processOf(run, res, exited, prepared.enforcement, pty, nsPty);
    if (req.changes) withChanges(run, out, req.changes.mode, prepared.ghosts);
    return out;
  }

  /** The stdio entries the addon takes: 'in'/'out' for pipes, fd numbers, -1 for /dev/null. */
  function stdioFor(req: BackendSpawnRequest, pty: OpenedPty | undefined, nsPty: { cols: number; rows: number } | undefined): LinuxStdio[] {
    if (pty) return [pty.slave, pty.slave, pty.slave];
    if (nsPty) return [-1, -1, -1]; // placeholders: init puts the in-namespace slave there
    return req.stdio.map((s, i) => (s === 'pipe' ? (i === 0 ? 'in' : 'out') : s === 'inherit' ? i : s === 'ignore' ? -1 : s));
  }

  /** `policy: null`: the command as given, no sandbox. */
  function plainPlan(req: BackendSpawnRequest): PreparedRun {
    const plan: Omit<LinuxNativePlan, 'stdio'> = {
      mode: 'plain',
      file: req.file,
      argv: req.argv,
      envp: Object.entries(req.env).map(([k, v]) => `${k}=${v}`),
      cwd: req.cwd,
    };
    return { plan, enforcement: PLAIN_REPORT, ghosts: [] };
  }

  /**
   * A sandboxed run's resources (a spare's where one fits), its environment and its plan. On any
   * failure everything taken is given back before the error is thrown.
   */
  function prepareRun(
    run: LinuxRun,
    req: BackendSpawnRequest,
    asked: NonNullable<BackendSpawnRequest['rules']>,
    stdio: LinuxStdio[],
    pty: OpenedPty | undefined,
    nsPty: { cols: number; rows: number } | undefined,
    noSpare: boolean,
  ): PreparedRun {
    const probe = linuxProbe();
    const mode = chooseLinuxMode(asked, probe);
    // changes: the journal directory is made now and denied to the command (lib/changes/record.ts);
    // isolated mode stages instead (lib/changes/overlay-layer.ts, below).
    const inProcess = mode === 'landlock' && supervisionProcessWanted();
    if (req.changes && mode === 'landlock') run.record = prepareRecord(req.changes, mode, asked, native, tmpParent);
    const rules = run.record?.rules ?? asked;
    const out: PreparedRun = { plan: { mode, file: req.file, argv: req.argv, envp: [], cwd: req.cwd }, enforcement: PLAIN_REPORT, ghosts: [] };
    // A spawn can be served by a spare made ahead unless it has a host pty (Landlock mode),
    // and in Landlock mode a terminal on stdio (its rule is made from the fd). A terminal made
    // inside an isolated sandbox is made with the spare, and is part of its shape.
    let basePlan: Omit<LinuxNativePlan, 'stdio'> | undefined;
    // (Not with `changes`: each run records or stages on its own.)
    if (!pty && !req.changes && typeof native.prepareSpare === 'function' && (mode === 'isolated' || !stdio.some(isTerminal))) {
      // (Landlock mode: prepared where it will be supervised, the host or the supervision process.)
      const key = `${req.cwd}\0${nsPty ? 'pty' : ''}\0${inProcess ? 'process' : ''}\0${JSON.stringify(rules)}`;
      const spare = noSpare ? undefined : spares.take(key);
      // Its resources are this run's from here: released with the run, or on any failure.
      if (spare) run.adopt(spare);
      out.prepareNext = () => {
        // A plan that binds placeholders another run holds (claimed above) is no plan for a
        // later sandbox: they go when that run ends. The next spawn plans without them.
        if (run.held.length > 0 || !spares.wants(key) || basePlan === undefined) return;
        // Isolated with the traced process cap: the spare's helper-made command cannot be
        // seized by init before it runs (native PrepareSpare refuses it too).
        if (mode === 'isolated' && basePlan.traceProcessCap) return;
        const base = { plan: basePlan, tmpDir: run.tmpDir, cgroup: JSON.stringify(cgroupInfo(run.cgroup)) };
        // Once this run's exit has been delivered: the JS side of the preparation then runs
        // between runs (in the pause before the next one, or during the next command when
        // they follow back to back), never inside this one's time.
        out.afterExit = () => scheduleSpare(() => prepareSpare(key, req, rules, mode, probe, base, nsPty, inProcess));
      };
    }
    try {
      const env = runEnv(run, req, rules, mode);
      if (req.changes && mode === 'isolated') {
        run.staged = prepareIsolatedChanges(native, req.changes, rules.tmp === 'host' ? [...rules.writeRoots, '/tmp'] : rules.writeRoots);
      }
      const p = planLinux({
        rules, mode, file: req.file, argv: req.argv, env, cwd: req.cwd, probe, landlockTmpDir: run.tmpDir,
        proxyPort: run.proxyPort, cgroup: cgroupInfo(run.cgroup), uidTasks: uidTasksFor(mode, run.cgroup, probe),
        stageMounts: run.staged?.layer.mounts, changes: run.record?.plan, placeholders: run.held.map((h) => h.path),
      });
      // Without the connect supervisor the host listener admits by uid only: any process of
      // this uid could have a credential rule's secret injected into its own requests.
      if (run.proxy?.hasCredentialRules && mode === 'landlock' && !p.native.seccomp?.connectSupervisor) {
        throw new SandboxError(
          'ENETWORK_NOT_ENFORCEABLE',
          'credential rules (interception.credentials) in Landlock mode need the connect supervisor, which this kernel lacks ' +
            `(errno ${-(probe.connectSupervisor ?? -38)}): other processes of this uid could use the proxy and get the secrets. ` +
            'Use isolated mode (user namespaces), or leave the credential rules out.',
        );
      }
      let plan = p.native;
      if (out.prepareNext) basePlan = { ...p.native };
      if (run.cgroup) plan.cgroupFds = run.cgroup.procsFds;
      // This run's share of the uid's inotify, signal and mqueue counters (linux/quotas.ts).
      if (!run.spare) run.quota = takeQuotaShare(mode);
      let enforcement: EnforcementReport;
      ({ plan, enforcement } = applyQuotaShare(plan, p.enforcement, run.quota));
      if (run.tmpDir) enforcement = withTmpCheck(enforcement, run.tmpLimit, native.measureTree !== undefined);
      // (out itself: prepareNext sets its afterExit once the command has started.)
      Object.assign(out, { plan, enforcement, ghosts: p.ghosts });
      return out;
    } catch (e) {
      if (run.spare) {
        native.discardSpare(run.spare.handle);
        spares.stats.discarded++;
      }
      run.abandon();
      throw e;
    }
  }

  /**
   * The command's environment, and the resources it names: the TMPDIR (Landlock mode), the proxy
   * and its port; then the placeholders the plan will bind and the cgroup.
   */
  function runEnv(run: LinuxRun, req: BackendSpawnRequest, rules: NonNullable<BackendSpawnRequest['rules']>, mode: 'isolated' | 'landlock'): Record<string, string> {
    const env = { ...req.env };
    if (rules.tmp === 'private') {
      if (mode === 'isolated') {
        // /tmp itself is private. The env stays exactly as given unless its TMPDIR points
        // somewhere the command could not use (a path outside /tmp and the writable roots).
        const t = env.TMPDIR;
        const usable = (p: string) => p === '/tmp' || p.startsWith('/tmp/') || rules.writeRoots.some((w) => p === w || p.startsWith(w + '/'));
        if (t !== undefined && !usable(t)) env.TMPDIR = '/tmp';
      } else {
        run.tmpDir = run.spare?.resources.tmpDir ?? makeTmpDir(native);
        env.TMPDIR = run.tmpDir;
        run.tmpLimit = rules.limits.tmpBytes ?? DEFAULT_TMP_BYTES;
      }
    }
    let planEnv = env;
    if (rules.network.kind === 'proxy') {
      run.proxy = proxyFor(run, req, rules.network.proxy);
      // The port the spare was made for (in Landlock mode, hostListenerFd is its listener).
      if (run.spare?.resources.proxyPort !== undefined) run.proxyPort = run.spare.resources.proxyPort;
      else ({ port: run.proxyPort, hostListenerFd: run.hostListenerFd } = proxyPortFor(native, mode));
      planEnv = ManagedProxy.proxyEnv(env, run.proxyPort!);
    }
    // Existing placeholders are held before the plan, which then binds them as existing paths.
    run.held = claimPlaceholders(native, [...rules.readOnly, ...rules.denyRead]);
    if (!run.spare) run.cgroup = cgroupFor(rules);
    return planEnv;
  }

  /** The caller's proxy (options.proxy.instance), or one made for this run. */
  function proxyFor(run: LinuxRun, req: BackendSpawnRequest, policy: Parameters<typeof ManagedProxy.create>[0]['policy']): ManagedProxy {
    const hooks = req.network ?? {};
    if (hooks.instance) {
      if (hooks.instance.closed) throw new SandboxError('EPROXY_START', 'the managed proxy given in options.proxy.instance is closed');
      return hooks.instance;
    }
    run.ownsProxy = true;
    return ManagedProxy.create({
      policy,
      onAudit: hooks.onAudit,
      decider: hooks.decider,
      deciderTimeoutMs: hooks.deciderTimeoutMs,
      lookup: hooks.lookup,
      // spawn() resolved the CA (InterceptionCa.shared() by default) and wired it in.
      ...(hooks.interception?.ca ? { interception: { ...hooks.interception, ca: hooks.interception.ca } } : {}),
    });
  }

  /**
   * Starts the command: from the run's spare when its plan is this fresh plan (and, natively,
   * every path its rules name is still the same inode), else afresh. null: the spare could not be
   * used, and everything it held is gone (the caller starts again from nothing).
   */
  function launch(
    run: LinuxRun,
    plan: Omit<LinuxNativePlan, 'stdio'>,
    stdio: LinuxStdio[],
    nsPty: { cols: number; rows: number } | undefined,
    onExit: (code: number | null, sig: number | null) => void,
  ): NativeSpawnResult | null {
    const spare = run.spare;
    if (!spare) {
      if (plan.mode === 'landlock' && supervisionProcessWanted()) {
        ensureSupervisionProcess(native);
        return native.spawnInSupervisionProcess({ ...plan, stdio }, onExit);
      }
      return native.spawn({ ...plan, stdio }, onExit);
    }
    const { file, argv, envp, cwd } = plan;
    // Landlock mode with the proxy: the spare's listener on 127.0.0.1 waited where anything
    // local could connect to it. What queued before the command can connect is dropped, not
    // served as this run's (a listener that cannot be drained is not used).
    const drained = run.hostListenerFd === undefined || native.dropQueuedConnections(run.hostListenerFd) >= 0;
    const sameShape = drained && spare.planKey === planKey(plan);
    if (!sameShape) native.discardSpare(spare.handle);
    // With its own terminal, fds 0-2 are its slave: the go brings none, only the size.
    const go = nsPty ? { stdio: [], ptyCols: nsPty.cols, ptyRows: nsPty.rows } : { stdio };
    const got = sameShape ? native.spawnSpare(spare.handle, { file, argv, envp, cwd, ...go }, onExit) : null;
    if (got === null) {
      spares.stats.discarded++;
      run.abandon();
      return null;
    }
    spares.stats.used++;
    return got;
  }

  /** The run's proxy serves the command's connections from here (its listener, its admission). */
  function attachProxy(run: LinuxRun, req: BackendSpawnRequest, plan: Omit<LinuxNativePlan, 'stdio'>, res: NativeSpawnResult): void {
    const proxy = run.proxy;
    if (!proxy) return;
    const fd = res.listenerFd ?? run.hostListenerFd;
    const processId = req.network?.processId ?? String(res.pid);
    // Landlock mode: the listener is on the host's 127.0.0.1, open to every local process.
    // Only the sandbox's own connections are served (native/linux/supervisor/supervise_connect.cc).
    const hostPort = res.listenerFd === undefined && run.hostListenerFd !== undefined ? proxyPortOf(plan) : undefined;
    const admit =
      hostPort !== undefined
        ? (s: net.Socket) => s.remoteAddress === '127.0.0.1' && native.admitProxyPeer(hostPort, s.remotePort ?? 0, !!plan.seccomp?.connectSupervisor)
        : undefined;
    run.attachment = proxy.attach(processId, { fd, admit }).catch(() => {
      // Without its proxy the command has no network at all; stop it rather than leave it hanging.
      if (fd !== undefined) fs.closeSync(fd);
      native.kill(res.handle, 9);
      return null;
    });
  }

  /** What the caller gets: streams (or the terminal), kill, ref, the report; the TMPDIR's size watched. */
  function processOf(
    run: LinuxRun,
    res: NativeSpawnResult,
    exited: Promise<ExitInfo>,
    enforcement: EnforcementReport,
    pty: OpenedPty | undefined,
    nsPty: { cols: number; rows: number } | undefined,
  ): BackendProcess {
    const streams: Array<Readable | Writable | null> = res.fds.map((fd, i) => {
      if (fd === null) return null;
      return i === 0 ? new net.Socket({ fd, readable: false, writable: true }) : new net.Socket({ fd, readable: true, writable: false });
    });
    const handle = res.handle;
    const out: BackendProcess = {
      pid: res.pid,
      stdio: streams,
      kill: (signal) => {
        const n = signalNumber(signal);
        const ok = native.kill(handle, n) === 0;
        // v2: cgroup.kill reaches every process of the group at once, wherever it went.
        if (ok && n === 9 && run.cgroup?.kind === 'v2') run.cgroup.killAll();
        return ok;
      },
      exited,
      setRef: (on) => void native.setRef?.(handle, on),
      enforcement: withNativeFacts(enforcement, res, run.spare !== undefined),
    };
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
    if (run.tmpDir && typeof native.measureTree === 'function') {
      run.stopTmpWatch = watchTmpDir(native, run.tmpDir, run.tmpLimit, (message) => {
        run.limitExceeded = { limit: 'tmpBytes', message };
        out.kill('SIGKILL');
      });
    }
    return out;
  }
}

/** The run's ChangesBackend on the process, and `changes` in its report. */
function withChanges(run: LinuxRun, out: BackendProcess, mode: 'record' | 'stage', ghosts: string[]): void {
  const native = run.native;
  if (run.staged) {
    // The placeholders init made inside the overlays are the sandbox's, not the command's changes.
    out.changes = overlayChanges(mode, native, run.staged.layer, new Set(ghosts), out.exited, run.staged.journalDir);
  } else if (run.record) {
    out.changes = run.record.backend(out.exited);
  } else {
    return;
  }
  out.enforcement = { ...out.enforcement, changes: mode };
}

/** A run ready to start: its plan and report, the placeholders init will make, and the spare's hooks. */
interface PreparedRun {
  plan: Omit<LinuxNativePlan, 'stdio'>;
  enforcement: EnforcementReport;
  ghosts: string[];
  /** After the command started: whether to prepare a spare for the next spawn of this shape. */
  prepareNext?: () => void;
  /** After its exit has been delivered: the spare's preparation, scheduled. */
  afterExit?: () => void;
}

type NativeSpawnResult = ReturnType<LinuxNative['spawn']>;
