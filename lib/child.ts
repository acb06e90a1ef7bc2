/**
 * SandboxedProcess: the process handle, shaped like Node's ChildProcess where it can be. A backend
 * (lib/platform/*) has already started the process; this class adds events, stream plumbing and the
 * exit bookkeeping (durationMs, close after stdio drained, sandboxDenied).
 *
 * A command that could not be started (not found, not executable) gets a handle too, as
 * child_process gives one: `pid` is undefined, piped streams are empty and already ended, 'error'
 * is emitted on the next tick, then 'close', and `exited` rejects with the same SandboxError.
 *
 * Deferred start (BackendProcess.started; Windows sandboxed runs, whose ACL edits run off the JS
 * thread first): `pid` is undefined until 'spawn', which fires once the command runs; stdin writes
 * before that are queued and delivered. kill() before the start cancels it: nothing runs, then
 * 'exit' and 'close' with (null, signal) and `exited` resolves so, as for a killed child. A start
 * that fails (an ACL edit denied, say) is reported like a command that could not be started:
 * 'error', then 'close', and `exited` rejects with the SandboxError.
 */
import { EventEmitter } from 'node:events';
import { Readable, Writable } from 'node:stream';
import type { BackendProcess, EnforcementReport, ExitInfo, StdioSpec } from './backend';
import { SandboxError } from './errors';
import { ChangesHandle } from './changes';

export interface ExitResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  durationMs: number;
  /** See ExitInfo.limitExceeded (lib/backend.ts). */
  limitExceeded?: ExitInfo['limitExceeded'];
  /** See ExitInfo.cleanupLeft (lib/backend.ts). */
  cleanupLeft?: string[];
}

/** The events of a SandboxedProcess and their arguments. */
export interface SandboxedProcessEvents {
  /**
   * The command is running: the next tick after spawn() returned, or (Windows, sandboxed) once the
   * ACL edits are done and the command started.
   */
  spawn: [];
  /** The command exited; its stdio may still hold data. */
  exit: [code: number | null, signal: NodeJS.Signals | null];
  /** The command exited and every piped stream has closed. */
  close: [code: number | null, signal: NodeJS.Signals | null];
  /** The command could not be started (ENOT_FOUND, ENOT_EXECUTABLE; Windows: EACL_EDIT, ESPAWN, ...). */
  error: [err: SandboxError];
}

type Listener<K extends keyof SandboxedProcessEvents> = (...args: SandboxedProcessEvents[K]) => void;

// Typed overloads over EventEmitter's untyped ones (declaration merging keeps the class an
// ordinary EventEmitter at runtime).
export interface SandboxedProcess {
  on<K extends keyof SandboxedProcessEvents>(event: K, listener: Listener<K>): this;
  once<K extends keyof SandboxedProcessEvents>(event: K, listener: Listener<K>): this;
  addListener<K extends keyof SandboxedProcessEvents>(event: K, listener: Listener<K>): this;
  prependListener<K extends keyof SandboxedProcessEvents>(event: K, listener: Listener<K>): this;
  prependOnceListener<K extends keyof SandboxedProcessEvents>(event: K, listener: Listener<K>): this;
  off<K extends keyof SandboxedProcessEvents>(event: K, listener: Listener<K>): this;
  removeListener<K extends keyof SandboxedProcessEvents>(event: K, listener: Listener<K>): this;
  emit<K extends keyof SandboxedProcessEvents>(event: K, ...args: SandboxedProcessEvents[K]): boolean;
}

export class SandboxedProcess extends EventEmitter {
  private pidValue: number | undefined;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  readonly stdio: Array<Readable | Writable | null>;
  readonly enforcement: EnforcementReport;
  /** With options.changes: the run's changes (lib/changes); null otherwise. */
  readonly changes: ChangesHandle | null;
  /**
   * Resolves when the command exits (before its stdio streams have necessarily closed); rejects
   * with the SandboxError when it could not be started.
   */
  readonly exited: Promise<ExitResult>;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  killed = false;

  /** true when the command runs on a pseudo-terminal (spawn's `pty` option). */
  readonly isPty: boolean;

  private readonly proc: BackendProcess | null;
  private hasExited = false;

  /**
   * undefined when the command could not be started, and until 'spawn' for a deferred start
   * (Windows sandboxed runs: the ACL edits come first).
   */
  get pid(): number | undefined {
    return this.pidValue;
  }

  /** @internal A handle for a command that could not be started (see the class comment). */
  static failed(error: SandboxError, stdio: readonly StdioSpec[], enforcement: EnforcementReport): SandboxedProcess {
    return new SandboxedProcess(null, { error, stdio, enforcement });
  }

  constructor(proc: BackendProcess);
  /** @internal */
  constructor(proc: null, failure: { error: SandboxError; stdio: readonly StdioSpec[]; enforcement: EnforcementReport });
  constructor(proc: BackendProcess | null, failure?: { error: SandboxError; stdio: readonly StdioSpec[]; enforcement: EnforcementReport }) {
    super();
    const started = performance.now();
    this.proc = proc;
    if (proc === null) {
      const f = failure!;
      this.pidValue = undefined;
      // Empty, already-ended streams where a pipe was asked for, so stream code needs no special case.
      this.stdio = f.stdio.map((s, i) => {
        if (s !== 'pipe') return null;
        if (i === 0) return new Writable({ write: (_c, _e, cb) => cb() });
        const r = new Readable({ read() {} });
        r.push(null);
        return r;
      });
      this.stdin = (this.stdio[0] as Writable | null) ?? null;
      this.stdout = (this.stdio[1] as Readable | null) ?? null;
      this.stderr = (this.stdio[2] as Readable | null) ?? null;
      this.enforcement = f.enforcement;
      this.changes = null;
      this.isPty = false;
      this.hasExited = true;
      // `exited` rejects in the same tick that emits 'error', never before: its handlers run as
      // microtasks after that tick. A promise rejected here would reach them first wherever the
      // caller itself runs in a microtask (an ES module's top level, any code after an await).
      this.exited = new Promise<ExitResult>((_resolve, reject) => {
        process.nextTick(() => {
          reject(f.error);
          this.stdin?.destroy();
          this.emit('error', f.error);
          this.emit('close', null, null);
        });
      });
      // Whoever awaits `exited` sees the rejection; nobody awaiting it must not crash the host.
      this.exited.catch(() => {});
      return;
    }
    this.pidValue = proc.pid;
    this.stdio = proc.stdio;
    this.stdin = (proc.stdio[0] as Writable | null) ?? null;
    this.stdout = (proc.stdio[1] as Readable | null) ?? null;
    this.stderr = (proc.stdio[2] as Readable | null) ?? null;
    this.enforcement = proc.enforcement;
    this.changes = proc.changes ? new ChangesHandle(proc.changes) : null;
    this.isPty = proc.pty !== undefined;
    // A child that exits without reading stdin must not crash the host with EPIPE.
    this.stdin?.on('error', () => {});

    const streamsClosed = proc.stdio
      .filter((s): s is Readable | Writable => s !== null && s !== this.stdin)
      .map((s) => new Promise<void>((resolve) => (s.destroyed ? resolve() : s.once('close', () => resolve()))));

    // A failed deferred start rejects proc.exited with proc.started: `exited` waits until the
    // start has settled and, if it failed, for the tick that emits 'error' (below) before it
    // rejects, as for a command that could not be started.
    let errorEmitted: Promise<void> | null = null;
    const afterError = async (e: unknown): Promise<never> => {
      await proc.started?.catch(() => undefined);
      await errorEmitted;
      throw e;
    };
    this.exited = proc.exited.then((info) => {
      const result: ExitResult = { ...info, durationMs: performance.now() - started };
      this.hasExited = true;
      this.exitCode = info.code;
      this.signalCode = info.signal;
      this.emit('exit', info.code, info.signal);
      void Promise.all(streamsClosed).then(() => {
        this.stdin?.destroy();
        this.emit('close', info.code, info.signal);
      });
      return result;
    }, afterError);
    if (proc.started === undefined) {
      process.nextTick(() => this.emit('spawn'));
      return;
    }
    // Deferred start: 'spawn' when the command runs; a cancelled start (kill) ends through
    // `exited` above; a failed one is reported as a command that could not be started.
    this.exited.catch(() => {});
    proc.started.then(
      (pid) => {
        if (pid === null) return;
        this.pidValue = pid;
        this.emit('spawn');
      },
      (err: unknown) => {
        this.hasExited = true;
        const error = err instanceof SandboxError ? err : new SandboxError('ESPAWN', `the command could not be started: ${String((err as Error)?.message ?? err)}`, { cause: err });
        // Emitted outside the promise chain: with no 'error' listener it is an uncaught exception,
        // as for child_process.
        errorEmitted = new Promise<void>((resolve) => {
          process.nextTick(() => {
            resolve();
            this.stdin?.destroy();
            this.emit('error', error);
            void Promise.all(streamsClosed).then(() => this.emit('close', null, null));
          });
        });
      },
    );
  }

  /**
   * node-pty's shape, for `pty` processes: terminal output (the one stream: the command's stdout
   * and stderr interleaved as the terminal shows them). Returns a disposable.
   */
  onData(listener: (data: string) => void): { dispose(): void } {
    const stream = this.ptyOrThrow().stream;
    const fn = (b: Buffer) => listener(b.toString('utf8'));
    stream.on('data', fn);
    return { dispose: () => void stream.off('data', fn) };
  }

  /** Writes to the terminal (what a user would type). pty processes only. */
  write(data: string | Buffer): void {
    const stream = this.ptyOrThrow().stream;
    if (!stream.destroyed) stream.write(data);
  }

  /** Changes the terminal size (TIOCSWINSZ; the command gets SIGWINCH). pty processes only. */
  resize(cols: number, rows: number): void {
    const pty = this.ptyOrThrow();
    for (const [n, v] of [['cols', cols], ['rows', rows]] as const) {
      if (!Number.isInteger(v) || v < 1 || v > 65535) throw new SandboxError('EINVALID_ARGUMENT', `${n} must be an integer from 1 to 65535`);
    }
    if (this.hasExited) return;
    pty.resize(cols, rows);
  }

  private ptyOrThrow(): NonNullable<BackendProcess['pty']> {
    if (!this.proc?.pty) throw new SandboxError('EINVALID_ARGUMENT', 'this process has no pseudo-terminal (spawn it with the pty option)');
    return this.proc.pty;
  }

  /**
   * Lets the host's event loop exit while the command still runs, as ChildProcess.unref() does:
   * the exit watch and the piped streams stop holding the loop open; events still arrive while
   * the loop runs for other reasons. Unlike a detached child_process, the sandbox never outlives
   * the host: when the host process exits, the command and everything it started are killed.
   * Linux only for now; on other platforms the exit watch keeps holding the loop (the streams
   * are still unref'd). A managed proxy serving the command keeps the loop alive while it runs.
   */
  unref(): this {
    this.setRef(false);
    return this;
  }

  /** Undoes unref(). */
  ref(): this {
    this.setRef(true);
    return this;
  }

  private setRef(on: boolean): void {
    if (this.proc === null) return;
    this.proc.setRef?.(on);
    const streams: unknown[] = [...this.stdio, this.proc.pty?.stream];
    for (const s of streams) {
      const r = s as { ref?: () => unknown; unref?: () => unknown } | null | undefined;
      if (typeof r?.ref === 'function' && typeof r.unref === 'function') {
        if (on) r.ref();
        else r.unref();
      }
    }
  }

  /** Sends a signal to the whole sandboxed tree. Returns false if it has already exited. */
  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    if (this.hasExited || this.proc === null) return false;
    const ok = this.proc.kill(signal);
    if (ok) this.killed = true;
    return ok;
  }
}
