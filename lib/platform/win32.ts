/**
 * The Windows backend: restricted token + capability SIDs + ACL grants + private desktop + job
 * object (native/win/*), behind the Backend contract of lib/backend.ts. Planning is pure and lives
 * in win32-plan.ts; this file does the I/O (capability store, ACL edits, spawn) and wraps the
 * child's pipes as Node streams.
 *
 * A sandboxed spawn is a deferred start (BackendProcess.started): validation, planning,
 * placeholders and the journal run synchronously (so bad input still throws), the ACL edits run
 * as one batch on the libuv thread pool (winAclBatch), then winSpawn starts the command. See
 * docs/windows.md "Deferred start".
 */
import type { Win32Native } from '../native';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import * as tty from 'node:tty';
import { SandboxError } from '../errors';
import type {
  Backend,
  BackendProcess,
  BackendSpawnRequest,
  EnforcementReport,
  ProbeReport,
} from '../backend';
import { CapabilityStore, defaultStateDir } from './win32-caps';
import { EditList, type PlannedEdit } from './win32-edits';
import { Journal, type AclUndo, type RunJournal } from './win32-journal';
import { Win32Run, type Forwarding } from './win32-run';
import { deferredStdio, type DeferredStdio } from '../deferred-stdio';
import {
  buildBatchCommandLine,
  buildCommandLine,
  isBatchFile,
  mergeEnvCaseInsensitive,
  placeholderType,
  planWindowsSandbox,
  unsandboxedReport,
  type WindowsPlan,
} from './win32-plan';

export {
  mapWindowsSandboxLevel,
  planWindowsSandbox,
  quoteWindowsArg,
  buildCommandLine,
  buildBatchCommandLine,
  isBatchFile,
  DEAD_PROXY_ENV,
  type WindowsSandboxLevel,
  type WindowsLevelMapping,
  type WindowsPlan,
} from './win32-plan';
export { CapabilityStore, defaultStateDir } from './win32-caps';
export { Journal } from './win32-journal';

/** The native stdio choices of a request, and which entries forward the host's console. */
interface NativeStdio {
  stdio: Array<'pipe' | 'ignore' | number>;
  forward: boolean[];
}

/** The application winSpawn starts and its command line. */
interface Command {
  file: string;
  commandLine: string;
}

/** What prepareRun hands to the launch: for a sandboxed request, its journal and the planned ACL edits. */
interface PreparedRun {
  report: EnforcementReport;
  env: Array<[string, string]>;
  journal: RunJournal | null;
  edits: PlannedEdit[];
  sandboxOptions: { sandboxed: boolean; capabilitySids?: string[]; privateDesktop?: boolean; job: object };
}

type BatchOutcome = Awaited<ReturnType<Win32Native['winAclBatch']>['promise']>;



export interface Win32BackendOptions {
  /** Where capability SIDs and private temp dirs live. Default %LOCALAPPDATA%\process-sandbox. */
  stateDir?: string;
  /** Whether host fd `fd` is a console. Default tty.isatty (true for console handles). For tests. */
  isConsole?: (fd: number) => boolean;
  /** Where console stdio of a sandboxed child is forwarded. Default process.stdin/stdout/stderr. */
  hostStdio?: () => [Readable, Writable, Writable];
}

function hasNul(s: string): boolean {
  return s.includes('\0');
}

function validateRequest(req: BackendSpawnRequest): void {
  if (req.argv.length === 0) throw new SandboxError('EINVALID_ARGUMENT', 'argv must not be empty');
  const check = (what: string, v: string) => {
    if (hasNul(v)) throw new SandboxError('EINVALID_ARGUMENT', `${what} contains a NUL byte`, { detail: { what } });
  };
  check('file', req.file);
  check('cwd', req.cwd);
  req.argv.forEach((a, i) => check(`argv[${i}]`, a));
  for (const [k, v] of Object.entries(req.env)) {
    check(`env name ${JSON.stringify(k.replace(/\0/g, '\\0'))}`, k);
    check(`env ${k}`, v);
  }
  if (!path.win32.isAbsolute(req.cwd)) {
    throw new SandboxError('EINVALID_ARGUMENT', `cwd must be an absolute path, got ${JSON.stringify(req.cwd)}`);
  }
  for (let i = 3; i < req.stdio.length; i++) {
    if (req.stdio[i] !== 'ignore') {
      throw new SandboxError(
        'EINVALID_ARGUMENT',
        `stdio[${i}]: passing extra file descriptors is not supported on Windows (only stdin, stdout, stderr)`,
      );
    }
  }
}

/**
 * The native stdio choices. A sandboxed child never gets a console handle of ours ('inherit' or an
 * fd that is the user's terminal): with the console input handle it could WriteConsoleInput
 * keystrokes that the user's shell runs after we exit, and it could read or rewrite the screen.
 * Those entries become pipes that the backend forwards to and from the host's own streams
 * (`forward[i]`). Files and pipes are passed through as they are.
 */
function nativeStdio(req: BackendSpawnRequest, isConsole: (fd: number) => boolean): NativeStdio {
  const out: Array<'pipe' | 'ignore' | number> = [];
  const forward = [false, false, false];
  for (let i = 0; i < 3; i++) {
    const s = req.stdio[i] ?? 'ignore';
    let fd: number;
    if (s === 'pipe' || s === 'ignore') {
      out.push(s);
      continue;
    } else if (s === 'inherit') fd = i;
    else if (typeof s === 'number' && Number.isInteger(s) && s >= 0) fd = s;
    else throw new SandboxError('EINVALID_ARGUMENT', `stdio[${i}] must be 'pipe', 'inherit', 'ignore' or an fd number`);
    if (req.rules !== null && isConsole(fd)) {
      out.push('pipe');
      forward[i] = true;
    } else {
      out.push(fd);
    }
  }
  return { stdio: out, forward };
}

function defaultIsConsole(fd: number): boolean {
  try {
    return tty.isatty(fd);
  } catch {
    return false;
  }
}

/**
 * Wire forwarded stdio: host stdin -> child stdin, child stdout/stderr -> host stdout/stderr.
 * Returns a promise for the outputs having ended (so the exit is reported after the last byte is
 * written) and a function that detaches stdin when the child is gone.
 */
function forwardStdio(
  streams: Array<Readable | Writable | null>,
  forward: boolean[],
  host: [Readable, Writable, Writable],
): Forwarding {
  const waits: Array<Promise<void>> = [];
  let detach = () => {};
  const input = forward[0] ? (streams[0] as Writable | null) : null;
  if (input) {
    const src = host[0];
    input.on('error', () => {}); // the child may exit before reading everything (EPIPE)
    src.pipe(input);
    detach = () => {
      src.unpipe(input);
      input.destroy();
      // Reading the console keeps the host's event loop alive; stop unless someone else listens.
      if (src.listenerCount('data') === 0 && typeof src.pause === 'function') src.pause();
    };
  }
  for (const i of [1, 2]) {
    const out = forward[i] ? (streams[i] as Readable | null) : null;
    if (!out) continue;
    waits.push(
      new Promise<void>((resolve) => {
        out.once('close', () => resolve());
        out.on('error', () => resolve());
      }),
    );
    out.pipe(host[i] as Writable, { end: false });
  }
  return { outputsDone: Promise.all(waits).then(() => undefined), detach };
}

/**
 * The application and command line of a request. Batch files run through cmd.exe, whose parsing
 * differs from the MSVC rules buildCommandLine quotes for: build the cmd.exe command line
 * ourselves or refuse (BatBadBut).
 */
function commandFor(req: BackendSpawnRequest): Command {
  if (isBatchFile(req.file)) {
    const bat = buildBatchCommandLine(req.file, req.argv, process.env.SystemRoot || process.env.SYSTEMROOT || 'C:\\Windows');
    return { file: bat.application, commandLine: bat.commandLine };
  }
  return { file: req.file, commandLine: buildCommandLine(req.argv) };
}

function wrapStreams(fds: Array<number | null>): Array<Readable | Writable | null> {
  return fds.map((fd, i) => {
    if (fd === null) return null;
    return i === 0
      ? new net.Socket({ fd, readable: false, writable: true })
      : new net.Socket({ fd, readable: true, writable: false });
  });
}

/** The SandboxError of a failed edit: stable code, the edit, the path and the Win32 error. */
function aclFailure(edit: PlannedEdit, err: Error): SandboxError {
  const e = err as Partial<SandboxError>;
  return new SandboxError(
    'EACL_EDIT',
    `could not apply the sandbox's ACLs (${edit.op} on ${edit.path}): ${err.message}; the command was not started ` +
      'and every change made for it was undone',
    {
      ...(e.syscall !== undefined ? { syscall: e.syscall } : {}),
      ...(e.winError !== undefined ? { winError: e.winError } : {}),
      detail: { op: edit.op, path: edit.path },
      cause: err,
    },
  );
}

/**
 * After the ACL batch of a deferred start: abandon the run when it was killed meanwhile or an
 * edit failed, else count the edits that changed a DACL and launch the command.
 */
function afterBatch(
  run: Win32Run,
  prep: PreparedRun,
  io: DeferredStdio,
  outcome: BatchOutcome | null,
  launchRun: () => Array<Readable | Writable | null>,
): Promise<number | null> | number | null {
  run.cancelBatch = null;
  if (run.killedWith !== null) return run.abandon(io, { code: null, signal: run.killedWith });
  const { edits } = prep;
  const results = outcome!.results;
  const failedAt = results.findIndex((r) => r !== null && 'error' in r);
  if (failedAt >= 0) {
    return run.abandon(io, null, aclFailure(edits[failedAt]!, (results[failedAt] as { error: Error }).error));
  }
  prep.report.mechanisms.aclChanges = results.filter((r, i) => r !== null && 'changed' in r && r.changed && edits[i]!.counted).length;
  let streams: Array<Readable | Writable | null>;
  try {
    streams = launchRun();
  } catch (err) {
    return run.abandon(io, null, err);
  }
  run.starting = false;
  io.attach(streams);
  return run.pid!;
}

export function createWin32Backend(native: Win32Native | null | undefined, options: Win32BackendOptions = {}): Backend {
  const stateDir = options.stateDir ?? defaultStateDir();
  const isConsole = options.isConsole ?? defaultIsConsole;
  const hostStdio = options.hostStdio ?? (() => [process.stdin, process.stdout, process.stderr] as [Readable, Writable, Writable]);
  const caps = new CapabilityStore(stateDir);
  const journal = new Journal(stateDir);
  let recovered = false;
  let wineCache: string | null | undefined;
  const wine = (): string | null => {
    if (wineCache === undefined) wineCache = native ? native.winWineVersion() : null;
    return wineCache;
  };

  function requireNative(): Win32Native {
    if (!native || typeof native.winSpawn !== 'function') {
      throw new SandboxError('EPLATFORM_UNSUPPORTED', 'the Windows half of the native addon is not loaded');
    }
    return native;
  }

  /**
   * Codex's legacy-backend self-test, once per backend on real Windows: a sandboxed `del` of a file
   * in a directory that grants our restricting SIDs nothing. If it succeeds, this kernel does not
   * apply a write-restricted token's restricting SIDs to FILE_DELETE_CHILD/DELETE, and the child
   * could delete or rename away any file the user can.
   */
  let deleteChildRestricted: boolean | undefined;
  function deleteChildSelfTest(n: Win32Native): boolean {
    if (deleteChildRestricted !== undefined) return deleteChildRestricted;
    const dir = path.join(stateDir, 'selftest', crypto.randomBytes(8).toString('hex'));
    fs.mkdirSync(dir, { recursive: true });
    try {
      const victim = path.join(dir, 'victim.txt');
      fs.writeFileSync(victim, 'must survive');
      deleteChildRestricted = !n.winDeleteChildProbe(dir, victim, caps.readonlySid()).deleted;
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    return deleteChildRestricted;
  }

  const undoWith = (n: Win32Native) => ({
    removeDenies: (p: string, sid: string) => void n.winAclEdit('remove-denies', p, sid),
    revoke: (p: string, sid: string) => void n.winAclEdit('revoke', p, sid),
  });

  /**
   * Every ACL batch of this backend (a run's edits, a run's undo) runs after the previous one:
   * two runs editing the same DACL at once would each read, modify and write it (one edit lost),
   * and an undo computes which entries other live runs still rely on just before it runs, so a
   * run that starts meanwhile re-applies its denies after the undo, never before it.
   */
  let aclQueue: Promise<unknown> = Promise.resolve();
  function serialize<T>(fn: () => Promise<T>): Promise<T> {
    const next = aclQueue.then(fn, fn);
    aclQueue = next.catch(() => undefined);
    return next;
  }

  const undoBatch = (n: Win32Native) => async (undos: AclUndo[]): Promise<Array<Error | null>> => {
    const { results } = await n.winAclBatch(undos, { continueOnError: true }).promise;
    return results.map((r) => (r === null ? new Error('not attempted') : 'error' in r ? r.error : null));
  };

  /** Undo a run's journal off the JS thread (in the ACL queue); never rejects. */
  function finishRun(n: Win32Native, run: RunJournal): Promise<void> {
    return serialize(() => run.finishAsync(undoBatch(n))).then(
      () => undefined,
      () => undefined,
    );
  }

  /**
   * Holds a name that must not be creatable (a placeholder), journalled before it is made.
   * Returns whether this run made it.
   */
  function holdName(run: RunJournal, p: string, type: 'dir' | 'file'): boolean {
    run.add({ kind: 'placeholder', path: p, type });
    try {
      if (type === 'dir') fs.mkdirSync(p);
      else fs.writeFileSync(p, '', { flag: 'wx' });
      return true;
    } catch (err) {
      // EEXIST: created meanwhile (by another run's placeholder or by the user): it is
      // protected like any existing path.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      return false;
    }
  }

  /** The plan's placeholders (their ACEs follow), for names that must not be creatable; returns those made. */
  function makePlaceholders(plan: WindowsPlan, run: RunJournal): string[] {
    const made: string[] = [];
    for (const ph of plan.placeholders) if (holdName(run, ph.path, ph.type)) made.push(ph.path);
    // An existing path that is another live run's placeholder: rely on it too (journalled), so
    // that run's exit leaves it in place; if it vanished meanwhile, hold the name ourselves.
    for (const p of plan.protectedPaths) {
      if (journal.isLivePlaceholder(p.path, run.file)) holdName(run, p.path, placeholderType(p.path));
    }
    return made;
  }

  /** The run's private temp dir: journalled, made, granted to the run's SID; TEMP and TMP point at it. */
  function makePrivateTmp(run: RunJournal, env: Array<[string, string]>, list: EditList): void {
    const dir = path.join(stateDir, 'tmp', crypto.randomBytes(8).toString('hex'));
    run.add({ kind: 'dir', path: dir });
    fs.mkdirSync(dir, { recursive: true });
    list.temporaryGrant(dir);
    for (const name of ['TEMP', 'TMP']) {
      const idx = env.findIndex(([k]) => k.toUpperCase() === name);
      if (idx >= 0) env.splice(idx, 1);
      env.push([name, dir]);
    }
  }

  /**
   * The synchronous part of applying a plan: placeholders and the private temp dir (single
   * file-system entries, each journalled before it is made), then the ordered ACL edits, all
   * journalled in one write before any of them is made (the batch runs later, off the JS thread).
   * Returns the capability SIDs for the token. On failure everything done so far is undone.
   */
  function prepareApply(
    n: Win32Native,
    plan: WindowsPlan,
    env: Array<[string, string]>,
    run: RunJournal,
  ): { sids: string[]; edits: PlannedEdit[]; placeholders: string[] } {
    const rootSids = caps.sidsForRoots(plan.writeRoots);
    const list = new EditList([...rootSids]);
    let placeholders: string[];
    try {
      list.grantRoots(plan, rootSids);
      placeholders = makePlaceholders(plan, run);
      list.denyAll(plan, rootSids);
      for (const p of plan.temporaryRoots) list.temporaryGrant(p);
      if (plan.privateTmp) makePrivateTmp(run, env, list);
      // Write-ahead: every ACL change of the run is on disk before the first one is made, so a
      // host that dies during the batch leaves a journal the next start undoes (undoing an edit
      // that was never made is a no-op).
      run.addAll(list.entries);
    } catch (err) {
      // Only file-system entries can have been made (no ACL edit has run yet): undone here.
      run.finish(undoWith(n));
      throw err;
    }
    if (list.sids.length === 0) list.sids.push(caps.readonlySid());
    return { sids: list.sids, edits: list.edits, placeholders };
  }

  /**
   * The FILE_DELETE_CHILD self-test on real Windows (skipped under wine), recorded in the plan's
   * report: a failure refuses the run unless the rules are degraded, which run with the gap reported.
   */
  function applyDeleteChildSelfTest(n: Win32Native, plan: WindowsPlan, rules: NonNullable<BackendSpawnRequest['rules']>): void {
    if (wine() !== null) {
      plan.report.mechanisms = { ...plan.report.mechanisms, deleteChildSelfTest: 'skipped (wine)' };
      return;
    }
    const ok = deleteChildSelfTest(n);
    plan.report.mechanisms = { ...plan.report.mechanisms, deleteChildSelfTest: ok ? 'passed' : 'failed' };
    if (ok) return;
    if (!rules.degraded) {
      throw new SandboxError(
        'ENOT_ENFORCED',
        "this Windows build does not apply a write-restricted token's restricting SIDs to FILE_DELETE_CHILD " +
          '(a sandboxed del removed a file it had no rights to): the command could delete or rename any file ' +
          'you can. Refusing, as Codex does; pass degraded: true to run with the gap reported',
        { detail: { selfTest: 'FILE_DELETE_CHILD' } },
      );
    }
    plan.report.guarantees = { ...plan.report.guarantees, filesystemWrite: 'not-enforced', protectedPaths: plan.report.guarantees.protectedPaths === 'not-requested' ? 'not-requested' : 'not-enforced' };
    plan.report.gaps.push('filesystemWrite: the FILE_DELETE_CHILD self-test failed: any file the user can delete or rename, the command can too');
  }

  /** The sandbox plan of a request, from the rules and what is on disk now. */
  function planFor(n: Win32Native, rules: NonNullable<BackendSpawnRequest['rules']>): WindowsPlan {
    const plan = planWindowsSandbox(rules, {
      wine: wine(),
      hostTmp: os.tmpdir(),
      exists: (p) => fs.existsSync(p),
      isLink: (p) => {
        try {
          return fs.lstatSync(p).isSymbolicLink();
        } catch {
          return false;
        }
      },
    });
    applyDeleteChildSelfTest(n, plan, rules);
    return plan;
  }

  /**
   * Everything a run needs before its ACL batch: the report, the environment, and for a
   * sandboxed request the plan applied synchronously (prepareApply) under a new journal.
   */
  function prepareRun(n: Win32Native, req: BackendSpawnRequest): PreparedRun {
    if (req.rules === null) {
      return {
        report: unsandboxedReport(),
        env: mergeEnvCaseInsensitive(req.env, {}),
        journal: null,
        edits: [],
        sandboxOptions: { sandboxed: false, job: { uiRestrictions: false } },
      };
    }
    // Once per backend, before planning looks at the disk: undo what host processes that died
    // mid-run left behind (so their placeholders do not pass for the user's own files).
    if (!recovered) {
      recovered = true;
      journal.recover(undoWith(n));
    }
    const plan = planFor(n, req.rules);
    const env = mergeEnvCaseInsensitive(req.env, plan.envOverrides);
    const run = journal.begin();
    const prepared = prepareApply(n, plan, env, run);
    const report = plan.report;
    report.mechanisms = {
      ...report.mechanisms,
      capabilitySids: prepared.sids.length,
      // Filled in when the ACL batch has run (before 'spawn'): the edits that changed a DACL.
      aclChanges: null,
      aclEdits: prepared.edits.length,
      placeholders: prepared.placeholders,
      journal: run.file,
      // What stays on disk after the run, by design: the capability SID's allow ACE on each
      // writable root (reused by the next run), recorded in capabilities.json.
      persistentGrants: plan.writeRoots,
    };
    const sandboxOptions = { sandboxed: true, capabilitySids: prepared.sids, privateDesktop: true, job: plan.job };
    return { report, env, journal: run, edits: prepared.edits, sandboxOptions };
  }

  /** winSpawn and the stream wiring; throws (sync) when the process cannot be created. */
  function launch(
    run: Win32Run,
    req: BackendSpawnRequest,
    prep: PreparedRun,
    cmd: Command,
    io: NativeStdio,
  ): Array<Readable | Writable | null> {
    const { stdio, forward } = io;
    const options = { ...cmd, env: prep.env, cwd: req.cwd, stdio, ...prep.sandboxOptions };
    const child = run.native.winSpawn(options, (code: number) => run.onExit(code));
    run.handle = child.handle;
    run.pid = child.pid;
    Object.assign(prep.report.mechanisms, {
      ...(child.desktop !== null ? { privateDesktop: child.desktop } : {}),
      jobAssignedVia: child.jobViaAttribute ? 'PROC_THREAD_ATTRIBUTE_JOB_LIST' : 'AssignProcessToJobObject',
      ...(req.rules !== null
        ? {
            tokenRestricted: child.tokenRestricted,
            // An elevated host: admin groups deny-only, integrity capped at Medium (never High).
            adminGroupsDisabled: child.adminGroupsDisabled,
            integrity: child.integrityLowered ? 'medium (lowered from the elevated host)' : "medium (the user's own)",
          }
        : {}),
    });
    const streams = wrapStreams(child.fds);
    if (forward.some(Boolean)) {
      run.forwarding = forwardStdio(streams, forward, hostStdio());
      forward.forEach((f, i) => {
        if (f) streams[i] = null; // the caller asked for 'inherit': no stream of its own
      });
    }
    return streams;
  }

  /** Sandboxed: the ACL edits run off the JS thread, then the command starts (deferred start). */
  function startDeferred(
    run: Win32Run,
    prep: PreparedRun,
    nio: NativeStdio,
    launchRun: () => Array<Readable | Writable | null>,
  ): BackendProcess {
    run.starting = true;
    const io = deferredStdio(nio.stdio.map((s, i) => s === 'pipe' && !nio.forward[i]));
    const started = serialize(async () => {
      if (run.killedWith !== null) return null;
      const batch = run.native.winAclBatch(prep.edits.map(({ op, path: p, sid }) => ({ op, path: p, sid })));
      run.cancelBatch = batch.cancel;
      return batch.promise;
    }).then(
      (outcome) => afterBatch(run, prep, io, outcome, launchRun),
      (err: unknown) => run.abandon(io, null, err),
    );
    started.catch(() => {}); // the handle reports a failed start ('error', `exited` rejects)

    return {
      get pid() {
        return run.pid;
      },
      started,
      stdio: io.streams,
      exited: run.exited,
      enforcement: prep.report,
      kill: (signal) => run.kill(signal),
    };
  }

  function spawn(req: BackendSpawnRequest): BackendProcess {
    validateRequest(req);
    const nio = nativeStdio(req, isConsole);
    const n = requireNative();
    const cmd = commandFor(req);
    // Bad paths are refused now, before any ACL work (a deferred start must not turn them into
    // an 'error' event).
    n.winSpawnCheck(cmd.file, req.cwd);
    const prep = prepareRun(n, req);
    if (nio.forward.some(Boolean)) {
      prep.report.mechanisms.consoleForwardedThroughPipes = nio.forward.map((f, i) => (f ? i : -1)).filter((i) => i >= 0);
    }
    const run = new Win32Run(n, prep.journal, (j) => finishRun(n, j));
    const launchRun = () => launch(run, req, prep, cmd, nio);
    if (req.rules !== null) return startDeferred(run, prep, nio, launchRun);

    // Unsandboxed: no ACL work, started before spawn() returns (as child_process does).
    let streams: Array<Readable | Writable | null>;
    try {
      streams = launchRun();
    } catch (err) {
      void run.release();
      throw err;
    }
    return { pid: run.pid, stdio: streams, exited: run.exited, enforcement: prep.report, kill: (signal) => run.kill(signal) };
  }

  function probe(): ProbeReport {
    const base: ProbeReport = {
      platform: 'win32',
      arch: process.arch,
      addonLoaded: !!native && typeof native.winSpawn === 'function',
      defaultMode: null,
      features: {},
    };
    if (!base.addonLoaded) {
      base.addonError = 'the Windows half of the native addon is not loaded';
      return base;
    }
    const n = requireNative(); // addonLoaded: it returns the binding
    const features: Record<string, unknown> = { wine: wine(), stateDir };
    const attempt = (key: string, fn: () => unknown) => {
      try {
        features[key] = fn();
      } catch (err) {
        features[key] = { error: (err as Error).message, code: (err as { code?: string }).code };
      }
    };
    attempt('tokenSids', () => n.winTokenSids());
    attempt('restrictedToken', () => n.winTokenProbe([]));
    attempt('privateDesktop', () => {
      const d = n.winDesktopProbe();
      return { created: true, closed: !d.openAfterClose };
    });
    attempt('deleteChildRestricted', () => (wine() !== null ? 'not tested under wine' : deleteChildSelfTest(n)));
    features.jobObject = true;
    features.networkEnforcement = false;
    features.denyRead = false;
    features.readRestriction = false;
    const tokenOk = (features.restrictedToken as { created?: boolean } | undefined)?.created === true;
    const desktopOk = (features.privateDesktop as { created?: boolean } | undefined)?.created === true;
    base.features = features;
    base.defaultMode = tokenOk && desktopOk ? 'restricted-token' : null;
    return base;
  }

  return { name: 'win32-restricted-token', spawn, probe };
}
