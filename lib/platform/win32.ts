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
import type { AclOp, Win32Native } from '../native';
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
  ExitInfo,
  ProbeReport,
} from '../backend';
import { CapabilityStore, defaultStateDir, randomCapabilitySid } from './win32-caps';
import { Journal, type AclUndo, type RunJournal } from './win32-journal';
import { deferredStdio } from '../deferred-stdio';
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
function nativeStdio(
  req: BackendSpawnRequest,
  isConsole: (fd: number) => boolean,
): { stdio: Array<'pipe' | 'ignore' | number>; forward: boolean[] } {
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
): { outputsDone: Promise<void>; detach: () => void } {
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

function wrapStreams(fds: Array<number | null>): Array<Readable | Writable | null> {
  return fds.map((fd, i) => {
    if (fd === null) return null;
    return i === 0
      ? new net.Socket({ fd, readable: false, writable: true })
      : new net.Socket({ fd, readable: true, writable: false });
  });
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

  interface PlannedEdit {
    op: AclOp;
    path: string;
    sid: string;
    /** Counted in mechanisms.aclChanges (the per-run temporary grants are not). */
    counted: boolean;
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
    const sidOf = (root: string) => rootSids[plan.writeRoots.indexOf(root)]!;
    const sids = [...rootSids];
    const madePlaceholders: string[] = [];
    const edits: PlannedEdit[] = [];
    const entries: Parameters<RunJournal['addAll']>[0] = [];
    try {
      // Persistent by design: one allow ACE per writable root and capability SID, reused by
      // every later run (the tree walk that propagates it happens once per root). Not journalled.
      plan.writeRoots.forEach((root, i) => edits.push({ op: 'grant-write', path: root, sid: rootSids[i]!, counted: true }));
      // Placeholders (their ACEs follow), for names that must not be creatable.
      for (const ph of plan.placeholders) {
        run.add({ kind: 'placeholder', path: ph.path, type: ph.type });
        try {
          if (ph.type === 'dir') fs.mkdirSync(ph.path);
          else fs.writeFileSync(ph.path, '', { flag: 'wx' });
          madePlaceholders.push(ph.path);
        } catch (err) {
          // EEXIST: created meanwhile (by another run's placeholder or by the user): it is
          // protected below like any existing path.
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        }
      }
      // An existing path that is another live run's placeholder: rely on it too (journalled), so
      // that run's exit leaves it in place; if it vanished meanwhile, hold the name ourselves.
      for (const p of plan.protectedPaths) {
        if (!journal.isLivePlaceholder(p.path, run.file)) continue;
        const type = placeholderType(p.path);
        run.add({ kind: 'placeholder', path: p.path, type });
        try {
          if (type === 'dir') fs.mkdirSync(p.path);
          else fs.writeFileSync(p.path, '', { flag: 'wx' });
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        }
      }
      const deny = (op: 'deny-write' | 'deny-delete' | 'deny-delete-child', p: string, sid: string) => {
        entries.push({ kind: 'deny', path: p, sid });
        edits.push({ op, path: p, sid, counted: true });
      };
      for (const p of [...plan.protectedPaths, ...plan.placeholders]) {
        for (const root of p.roots) {
          // deny-write also denies FILE_DELETE_CHILD on the parent: journal that path too.
          entries.push({ kind: 'deny', path: path.win32.dirname(p.path), sid: sidOf(root) });
          deny('deny-write', p.path, sidOf(root));
        }
      }
      for (const d of plan.denyDelete) for (const root of d.roots) deny('deny-delete', d.path, sidOf(root));
      for (const d of plan.denyDeleteChild) for (const root of d.roots) deny('deny-delete-child', d.path, sidOf(root));
      // One SID for this run's temporary grants; revoked when the run ends.
      let runSid: string | null = null;
      const temporaryGrant = (p: string) => {
        if (runSid === null) {
          runSid = randomCapabilitySid();
          sids.push(runSid);
        }
        entries.push({ kind: 'grant', path: p, sid: runSid });
        edits.push({ op: 'grant-write', path: p, sid: runSid, counted: false });
      };
      for (const p of plan.temporaryRoots) temporaryGrant(p);
      if (plan.privateTmp) {
        const dir = path.join(stateDir, 'tmp', crypto.randomBytes(8).toString('hex'));
        run.add({ kind: 'dir', path: dir });
        fs.mkdirSync(dir, { recursive: true });
        temporaryGrant(dir);
        for (const name of ['TEMP', 'TMP']) {
          const idx = env.findIndex(([k]) => k.toUpperCase() === name);
          if (idx >= 0) env.splice(idx, 1);
          env.push([name, dir]);
        }
      }
      // Write-ahead: every ACL change of the run is on disk before the first one is made, so a
      // host that dies during the batch leaves a journal the next start undoes (undoing an edit
      // that was never made is a no-op).
      run.addAll(entries);
    } catch (err) {
      // Only file-system entries can have been made (no ACL edit has run yet): undone here.
      run.finish(undoWith(n));
      throw err;
    }
    if (sids.length === 0) sids.push(caps.readonlySid());
    return { sids, edits, placeholders: madePlaceholders };
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

  function spawn(req: BackendSpawnRequest): BackendProcess {
    validateRequest(req);
    const { stdio, forward } = nativeStdio(req, isConsole);
    const n = requireNative();
    // Batch files run through cmd.exe, whose parsing differs from the MSVC rules buildCommandLine
    // quotes for: build the cmd.exe command line ourselves or refuse (BatBadBut).
    let file = req.file;
    let commandLine: string;
    if (isBatchFile(req.file)) {
      const bat = buildBatchCommandLine(req.file, req.argv, process.env.SystemRoot || process.env.SYSTEMROOT || 'C:\\Windows');
      file = bat.application;
      commandLine = bat.commandLine;
    } else {
      commandLine = buildCommandLine(req.argv);
    }
    // Bad paths are refused now, before any ACL work (a deferred start must not turn them into
    // an 'error' event).
    n.winSpawnCheck(file, req.cwd);

    let report: EnforcementReport;
    let env: Array<[string, string]>;
    let run: RunJournal | null = null;
    let edits: PlannedEdit[] = [];
    let sandboxOptions: { sandboxed: boolean; capabilitySids?: string[]; privateDesktop?: boolean; job: object };
    if (req.rules === null) {
      report = unsandboxedReport();
      env = mergeEnvCaseInsensitive(req.env, {});
      sandboxOptions = { sandboxed: false, job: { uiRestrictions: false } };
    } else {
      // Once per backend, before planning looks at the disk: undo what host processes that died
      // mid-run left behind (so their placeholders do not pass for the user's own files).
      if (!recovered) {
        recovered = true;
        journal.recover(undoWith(n));
      }
      const plan = planWindowsSandbox(req.rules, {
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
      if (wine() === null) {
        const ok = deleteChildSelfTest(n);
        plan.report.mechanisms = { ...plan.report.mechanisms, deleteChildSelfTest: ok ? 'passed' : 'failed' };
        if (!ok) {
          if (!req.rules.degraded) {
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
      } else {
        plan.report.mechanisms = { ...plan.report.mechanisms, deleteChildSelfTest: 'skipped (wine)' };
      }
      env = mergeEnvCaseInsensitive(req.env, plan.envOverrides);
      run = journal.begin();
      const prepared = prepareApply(n, plan, env, run);
      edits = prepared.edits;
      report = plan.report;
      report.mechanisms = {
        ...report.mechanisms,
        capabilitySids: prepared.sids.length,
        // Filled in when the ACL batch has run (before 'spawn'): the edits that changed a DACL.
        aclChanges: null,
        aclEdits: edits.length,
        placeholders: prepared.placeholders,
        journal: run.file,
        // What stays on disk after the run, by design: the capability SID's allow ACE on each
        // writable root (reused by the next run), recorded in capabilities.json.
        persistentGrants: plan.writeRoots,
      };
      sandboxOptions = { sandboxed: true, capabilitySids: prepared.sids, privateDesktop: true, job: plan.job };
    }
    const journalRun = run;
    if (forward.some(Boolean)) {
      report.mechanisms.consoleForwardedThroughPipes = forward.map((f, i) => (f ? i : -1)).filter((i) => i >= 0);
    }

    let resolveExit!: (info: ExitInfo) => void;
    let rejectExit!: (err: unknown) => void;
    const exited = new Promise<ExitInfo>((resolve, reject) => {
      resolveExit = resolve;
      rejectExit = reject;
    });
    exited.catch(() => {}); // rejected only for a deferred start that failed; the handle reports it
    let killedWith: NodeJS.Signals | null = null;
    let done = false;
    let starting = false;
    let cancelBatch: (() => void) | null = null;
    let handle: unknown;
    let pid: number | undefined;
    let forwarding: ReturnType<typeof forwardStdio> | null = null;
    // Everything the run changed, undone (ACLs off the JS thread) before the exit is reported.
    const cleanup = (): Promise<void> => (journalRun !== null ? finishRun(n, journalRun) : Promise.resolve());

    /** winSpawn and the stream wiring; throws (sync) when the process cannot be created. */
    const launch = (): Array<Readable | Writable | null> => {
      const child = n.winSpawn({ file, commandLine, env, cwd: req.cwd, stdio, ...sandboxOptions }, (code: number) => {
        done = true;
        // Closing the job (kill-on-close) ends whatever the command left running.
        n.winRelease(handle);
        const info: ExitInfo = killedWith !== null ? { code: null, signal: killedWith } : { code, signal: null };
        const outputs = forwarding === null ? Promise.resolve() : (forwarding.detach(), forwarding.outputsDone);
        void Promise.all([cleanup(), outputs]).then(() => resolveExit(info));
      });
      handle = child.handle;
      pid = child.pid;
      Object.assign(report.mechanisms, {
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
        forwarding = forwardStdio(streams, forward, hostStdio());
        forward.forEach((f, i) => {
          if (f) streams[i] = null; // the caller asked for 'inherit': no stream of its own
        });
      }
      return streams;
    };

    const kill = (signal: NodeJS.Signals | number): boolean => {
      if (done) return false;
      if (signal === 0) return true; // existence check, as process.kill(pid, 0)
      if (killedWith === null) killedWith = typeof signal === 'string' ? signal : 'SIGKILL';
      if (starting) {
        // Not started yet: cancel (the batch stops before its next edit; nothing is launched).
        cancelBatch?.();
        return true;
      }
      return n.winKill(handle, 1);
    };

    if (req.rules === null) {
      // Unsandboxed: no ACL work, started before spawn() returns (as child_process does).
      let streams: Array<Readable | Writable | null>;
      try {
        streams = launch();
      } catch (err) {
        void cleanup();
        throw err;
      }
      return { pid, stdio: streams, exited, enforcement: report, kill };
    }

    // Sandboxed: the ACL edits run off the JS thread, then the command starts (deferred start).
    starting = true;
    const io = deferredStdio(stdio.map((s, i) => s === 'pipe' && !forward[i]));
    const abandon = async (info: ExitInfo | null, err?: unknown): Promise<null> => {
      done = true;
      starting = false;
      io.abandon();
      await cleanup();
      if (info) {
        resolveExit(info);
        return null;
      }
      rejectExit(err);
      throw err;
    };
    const started = serialize(async () => {
      if (killedWith !== null) return null;
      const batch = n.winAclBatch(edits.map(({ op, path: p, sid }) => ({ op, path: p, sid })));
      cancelBatch = batch.cancel;
      return batch.promise;
    }).then(
      (outcome): Promise<number | null> | number | null => {
        cancelBatch = null;
        if (killedWith !== null) return abandon({ code: null, signal: killedWith });
        const results = outcome!.results;
        const failedAt = results.findIndex((r) => r !== null && 'error' in r);
        if (failedAt >= 0) {
          return abandon(null, aclFailure(edits[failedAt]!, (results[failedAt] as { error: Error }).error));
        }
        report.mechanisms.aclChanges = results.filter((r, i) => r !== null && 'changed' in r && r.changed && edits[i]!.counted).length;
        let streams: Array<Readable | Writable | null>;
        try {
          streams = launch();
        } catch (err) {
          return abandon(null, err);
        }
        starting = false;
        io.attach(streams);
        return pid!;
      },
      (err: unknown) => abandon(null, err),
    );
    started.catch(() => {}); // the handle reports a failed start ('error', `exited` rejects)

    return {
      get pid() {
        return pid;
      },
      started,
      stdio: io.streams,
      exited,
      enforcement: report,
      kill,
    };
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
