/**
 * The process/* methods of one session: process/start (through prepareExecRequest +
 * spawnPrepared, so the sandbox is enforced by the addon and `sandboxType` says which),
 * process/read (long-poll), process/write, process/signal, process/terminate, and the
 * process/output, process/exited and process/closed notifications.
 *
 * A table belongs to a session, not to a connection: when the connection goes, the processes keep
 * running for the session's detached lifetime (sessions.ts) and a client that resumes the session
 * finds them, as with the reference. Memory is bounded per process: at most
 * RETAIN_BYTES/RETAIN_CHUNKS of output are kept for process/read (the oldest go first, as in the
 * reference), and when the transport cannot keep up, the processes' output streams are paused
 * (backpressure reaches the child through its pipe) instead of queueing notifications without end.
 */
import * as os from 'node:os';
import type { SandboxedProcess } from '../child';
import { SandboxError } from '../errors';
import { isLikelySandboxDenied } from '../permissions';
import { discardPrepared, prepareRequest, type DecidedExecRequest, type ExecParams } from '../prepare';
import { INTERNAL_ERROR, toJsonRpcError } from '../prepare/rpc';
import {
  decodeBase64,
  decodeStruct,
  decodeVariant,
  foreignHostMessage,
  INVALID_REQUEST,
  invalidParams,
  RpcError,
} from './decode';
import { limitOf, tooManyServerProcesses } from './limits';
import { checkPreparedFloor, defaultSandboxFor } from './sandbox-floor';
import { Deferred, type ConnectionSink, type ExecServerOptions, type SpawnPreparedFn } from './types';

export const RETAIN_BYTES = 1024 * 1024;
export const RETAIN_CHUNKS = 50_000;
const EXITED_RETENTION_MS = 30_000;
const WRITE_ID_MEMORY = 4096;
const MAX_WAIT_MS = 300_000;
/** Long-polls waiting at once per session (the reference caps calls in flight at 1024). */
const MAX_WAITING_READS = 1024;
/** Output kept for the sandboxDenied heuristic (the tail; keywords are short). */
const DENIAL_TAIL = 64 * 1024;
/**
 * A long-poll woken by the exit waits this long for the close that normally follows at once, so
 * that it answers with both, as the reference does (its exit and close arrive together).
 */
const EXIT_CLOSE_GRACE_MS = 100;
/** How long process/exited waits for the output after the exit (see watch()). */
const EXITED_OUTPUT_WAIT_MS = 2_000;

interface Chunk {
  seq: number;
  stream: 'stdout' | 'stderr' | 'pty';
  chunk: Buffer;
}

interface Proc {
  id: string;
  state: 'starting' | 'running' | 'exited';
  child?: SandboxedProcess;
  sandboxType: string;
  stdinOpen: boolean;
  /** Started with tty or pipeStdin. */
  pipedStdin: boolean;
  seq: number;
  chunks: Chunk[];
  retained: number;
  exitCode: number | null;
  exited: boolean;
  closed: boolean;
  sandboxDenied: boolean;
  failure: string | null;
  writeIds: Set<string>;
  writeOrder: string[];
  waiters: Set<(ev: 'output' | 'exited' | 'closed') => void>;
  tail: string;
  expireTimer?: NodeJS.Timeout;
  /** Readable streams paused for backpressure. */
  streams: NodeJS.ReadableStream[];
}

const SIGNALS: Record<string, number> = os.constants.signals as unknown as Record<string, number>;

/** Who the table talks to while a connection is attached. */
export interface TableAttachment {
  sink: ConnectionSink;
  /** Throws the "client must call initialize" errors of the attached connection. */
  gate(kind: string): void;
}

export class ProcessTable {
  private readonly procs = new Map<string, Proc>();
  private attachment: TableAttachment | null = null;
  private congested = false;
  private shut = false;
  private waitingReads = 0;
  private readonly retainBytes: number;
  private readonly retainChunks: number;
  private readonly spawnFn: SpawnPreparedFn;

  constructor(
    private readonly options: ExecServerOptions & { spawnPrepared: SpawnPreparedFn },
    /** Processes starting or running in the whole server (every session's, and its sandboxed fs helpers). */
    private readonly serverLive?: () => number,
  ) {
    this.retainBytes = options.retainBytes ?? RETAIN_BYTES;
    this.retainChunks = options.retainChunks ?? RETAIN_CHUNKS;
    this.spawnFn = options.spawnPrepared;
  }

  /** A connection takes the table over (null: detached; output is still retained for a resume). */
  attach(a: TableAttachment | null): void {
    this.attachment = a;
    if (a === null && this.congested) {
      // Nobody will drain a gone connection: let the processes run on into the retention buffer.
      this.congested = false;
      for (const p of this.procs.values()) for (const s of p.streams) s.resume();
    }
  }

  private gate(kind: string): void {
    if (!this.attachment) throw new RpcError(INVALID_REQUEST, `client must call initialize before using ${kind} methods`);
    this.attachment.gate(kind);
  }

  /** Kills every process (the session ended). */
  async shutdown(): Promise<void> {
    this.shut = true;
    const waits: Array<Promise<unknown>> = [];
    for (const p of this.procs.values()) {
      if (p.expireTimer) clearTimeout(p.expireTimer);
      for (const w of p.waiters) w('closed');
      if (p.child && p.state !== 'exited') {
        p.child.kill('SIGKILL');
        waits.push(p.child.exited.catch(() => {}));
      }
    }
    await Promise.all(waits);
  }

  /** Processes starting or running (what the caps count). */
  live(): number {
    let n = 0;
    for (const p of this.procs.values()) if (p.state !== 'exited') n++;
    return n;
  }

  /** The OS pids of the processes still running (for tests and diagnostics). */
  pids(): number[] {
    // spawnPrepared throws when it cannot start a command, so a running child always has a pid.
    return [...this.procs.values()].filter((p) => p.state === 'running' && p.child?.pid !== undefined).map((p) => p.child!.pid!);
  }

  private emit(message: object): void {
    const a = this.attachment;
    if (!a || this.shut) return;
    const ok = a.sink.send(message);
    if (!ok && !this.congested) {
      // The client is slower than the processes: stop reading their output until it drains. The
      // children block on full pipes; nothing queues here without bound.
      this.congested = true;
      for (const p of this.procs.values()) for (const s of p.streams) s.pause();
      a.sink.onDrain(() => {
        if (this.attachment !== a) return;
        this.congested = false;
        for (const p of this.procs.values()) for (const s of p.streams) s.resume();
      });
    }
  }

  private decodeExecParams(params: unknown): ExecParams {
    const p = decodeStruct(params, 'WireExecParams', [
      { name: 'processId', kind: 'string', required: true },
      { name: 'metadata', kind: 'object' },
      { name: 'argv', kind: 'seq<string>', required: true },
      { name: 'cwd', kind: 'uri', required: true },
      { name: 'envPolicy', kind: 'object' },
      { name: 'shellSnapshot', kind: 'object' },
      { name: 'env', kind: 'map<string>', required: true },
      { name: 'tty', kind: 'bool', required: true },
      { name: 'pipeStdin', kind: 'bool', required: true },
      { name: 'arg0', kind: 'string' },
      { name: 'sandbox', kind: 'sandbox' },
      { name: 'enforceManagedNetwork', kind: 'bool' },
      { name: 'managedNetwork', kind: 'object' },
      { name: 'networkProxy', kind: 'object' },
    ]);
    return p as unknown as ExecParams;
  }

  async start(params: unknown): Promise<unknown> {
    const p = this.decodeExecParams(params);
    this.gate('exec');
    // A request without a sandbox gets the server's default one (null only for `none`).
    if (p.sandbox === undefined || p.sandbox === null) {
      const foreignCwd = foreignHostMessage(p.cwd, process.platform);
      if (foreignCwd) throw invalidParams(`cwd URI \`${p.cwd}\` is not valid on this exec-server host: ${foreignCwd}`);
      p.sandbox = defaultSandboxFor(this.options, p.cwd);
    }
    if (this.procs.has(p.processId)) throw new RpcError(INVALID_REQUEST, `process ${p.processId} already exists`);
    // Both checks and the insert below happen with no await between them, so concurrent starts
    // on other connections cannot pass the server-wide cap together.
    const max = limitOf(this.options, 'maxProcesses');
    if (this.live() >= max) throw new RpcError(INVALID_REQUEST, `too many processes on this connection (at most ${max} starting or running)`);
    const serverMax = limitOf(this.options, 'maxServerProcesses');
    if ((this.serverLive ?? (() => this.live()))() >= serverMax) throw tooManyServerProcesses(serverMax);
    const foreign = foreignHostMessage(p.cwd, process.platform);
    if (foreign) throw invalidParams(`cwd URI \`${p.cwd}\` is not valid on this exec-server host: ${foreign}`);
    const proc: Proc = {
      id: p.processId,
      state: 'starting',
      sandboxType: 'none',
      stdinOpen: p.tty === true || p.pipeStdin === true,
      pipedStdin: p.tty === true || p.pipeStdin === true,
      seq: 0,
      chunks: [],
      retained: 0,
      exitCode: null,
      exited: false,
      closed: false,
      sandboxDenied: false,
      failure: null,
      writeIds: new Set(),
      writeOrder: [],
      waiters: new Set(),
      tail: '',
      streams: [],
    };
    this.procs.set(p.processId, proc);
    // The sandbox is decided once, in prepare; the floor judges what prepare returned.
    let decided: DecidedExecRequest;
    try {
      decided = await prepareRequest(p, this.options.runtime ?? {});
    } catch (e) {
      this.procs.delete(p.processId);
      throw e;
    }
    const { prepared } = decided;
    try {
      checkPreparedFloor(this.options, 'process/start', decided);
    } catch (e) {
      this.procs.delete(p.processId);
      await discardPrepared(prepared);
      throw e;
    }
    if (this.shut) {
      await discardPrepared(prepared);
      throw new RpcError(INVALID_REQUEST, 'connection closed');
    }
    let child: SandboxedProcess;
    try {
      child = this.spawnFn(prepared);
    } catch (e) {
      this.procs.delete(p.processId);
      await discardPrepared(prepared);
      throw spawnError(e);
    }
    proc.child = child;
    proc.state = 'running';
    proc.sandboxType = prepared.sandboxType;
    this.watch(proc, child, prepared.tty);
    return { processId: p.processId, sandboxType: prepared.sandboxType };
  }

  private watch(proc: Proc, child: SandboxedProcess, tty: boolean): void {
    const onData = (stream: Chunk['stream']) => (b: Buffer) => this.pushEvent(proc, { kind: 'output', stream, chunk: b });
    if (tty) {
      child.stdout?.on('data', onData('pty'));
      if (child.stdout) proc.streams.push(child.stdout);
    } else {
      child.stdout?.on('data', onData('stdout'));
      child.stderr?.on('data', onData('stderr'));
      for (const s of [child.stdout, child.stderr]) if (s) proc.streams.push(s);
    }
    if (this.congested) for (const s of proc.streams) s.pause();
    child.stdin?.on('error', () => {});
    // process/exited carries sandboxDenied, which is judged from the output (the denial text on
    // stderr). At 'exit' that output may still sit unread in the pipes, so exited is sent once the
    // output is complete ('close'), or after EXITED_OUTPUT_WAIT_MS when something the command left
    // behind holds its pipes open; a denial read after that still shows in process/read.
    let exitSignal: NodeJS.Signals | null = null;
    let exitSent = false;
    let exitTimer: NodeJS.Timeout | undefined;
    const judge = () => {
      proc.sandboxDenied = isLikelySandboxDenied(proc.sandboxType as never, proc.exitCode!, exitSignal, proc.tail);
    };
    const sendExited = () => {
      if (exitSent) return;
      exitSent = true;
      clearTimeout(exitTimer);
      judge();
      this.pushEvent(proc, { kind: 'exited' });
    };
    child.once('exit', (code: number | null, signal: NodeJS.Signals | null) => {
      proc.state = 'exited';
      proc.stdinOpen = false;
      proc.exitCode = code ?? (signal ? 128 + (SIGNALS[signal] ?? 0) : -1);
      exitSignal = signal;
      exitTimer = setTimeout(sendExited, EXITED_OUTPUT_WAIT_MS);
      exitTimer.unref();
    });
    child.once('close', () => {
      if (exitSent) judge();
      else if (proc.state === 'exited') sendExited();
      this.pushEvent(proc, { kind: 'closed' });
      proc.expireTimer = setTimeout(() => this.procs.delete(proc.id), EXITED_RETENTION_MS);
      proc.expireTimer.unref();
    });
  }

  private pushEvent(proc: Proc, ev: { kind: 'output'; stream: Chunk['stream']; chunk: Buffer } | { kind: 'exited' } | { kind: 'closed' }): void {
    const seq = ++proc.seq;
    if (ev.kind === 'output') {
      proc.chunks.push({ seq, stream: ev.stream, chunk: ev.chunk });
      proc.retained += ev.chunk.length;
      // Bounded retention: the oldest output goes first (a reader that fell behind skips it).
      while (proc.chunks.length > 1 && (proc.retained > this.retainBytes || proc.chunks.length > this.retainChunks)) {
        proc.retained -= proc.chunks.shift()!.chunk.length;
      }
      proc.tail = (proc.tail + ev.chunk.toString('utf8')).slice(-DENIAL_TAIL);
      this.emit({ method: 'process/output', params: { processId: proc.id, seq, stream: ev.stream, chunk: ev.chunk.toString('base64') } });
    } else if (ev.kind === 'exited') {
      proc.exited = true;
      this.emit({ method: 'process/exited', params: { processId: proc.id, seq, exitCode: proc.exitCode, sandboxDenied: proc.sandboxDenied } });
    } else {
      proc.closed = true;
      this.emit({ method: 'process/closed', params: { processId: proc.id, seq } });
    }
    const waiters = [...proc.waiters];
    proc.waiters.clear();
    for (const w of waiters) w(ev.kind);
  }

  private lookup(id: string): Proc {
    const p = this.procs.get(id);
    if (!p) throw new RpcError(INVALID_REQUEST, `unknown process id ${id}`);
    return p;
  }

  async read(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'ReadParams', [
      { name: 'processId', kind: 'string', required: true },
      { name: 'afterSeq', kind: 'u64' },
      { name: 'maxBytes', kind: 'u64' },
      { name: 'waitMs', kind: 'u64' },
    ]);
    this.gate('exec');
    const proc = this.lookup(p.processId as string);
    const afterSeq = (p.afterSeq as number | undefined | null) ?? 0;
    const maxBytes = (p.maxBytes as number | undefined | null) ?? undefined;
    const waitMs = Math.min((p.waitMs as number | undefined | null) ?? 0, MAX_WAIT_MS);
    const pending = () => proc.chunks.some((c) => c.seq > afterSeq);
    if (!pending() && !proc.closed && waitMs > 0 && proc.seq <= afterSeq && this.waitingReads < MAX_WAITING_READS) {
      // Long-poll: any new event (output, exit, close) or the deadline ends the wait. An exit
      // without its close waits a moment more for the close (EXIT_CLOSE_GRACE_MS), as the
      // reference answers with both.
      this.waitingReads++;
      const waited = new Promise<void>((resolve) => {
        const deadline = Date.now() + waitMs;
        let t = setTimeout(() => finish(), waitMs);
        const finish = () => {
          this.waitingReads--;
          clearTimeout(t);
          proc.waiters.delete(wake);
          resolve();
        };
        const wake = (ev: 'output' | 'exited' | 'closed') => {
          if (ev !== 'exited' || proc.closed) return finish();
          clearTimeout(t);
          t = setTimeout(() => finish(), Math.max(0, Math.min(EXIT_CLOSE_GRACE_MS, deadline - Date.now())));
          proc.waiters.add(wake);
        };
        proc.waiters.add(wake);
      });
      return new Deferred(waited.then(() => this.readResult(proc, afterSeq, maxBytes)));
    }
    return this.readResult(proc, afterSeq, maxBytes);
  }

  private readResult(proc: Proc, afterSeq: number, maxBytes: number | undefined): unknown {
    const chunks: Array<{ seq: number; stream: string; chunk: string }> = [];
    let bytes = 0;
    let truncated = false;
    for (const c of proc.chunks) {
      if (c.seq <= afterSeq) continue;
      if (maxBytes !== undefined && chunks.length > 0 && bytes + c.chunk.length > maxBytes) {
        truncated = true;
        break;
      }
      chunks.push({ seq: c.seq, stream: c.stream, chunk: c.chunk.toString('base64') });
      bytes += c.chunk.length;
    }
    const nextSeq = truncated ? chunks[chunks.length - 1]!.seq + 1 : proc.seq + 1;
    return {
      chunks,
      nextSeq,
      exited: proc.exited,
      exitCode: proc.exited ? proc.exitCode : null,
      closed: proc.closed,
      failure: proc.failure,
      sandboxDenied: proc.sandboxDenied,
    };
  }

  async write(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'WriteParams', [
      { name: 'processId', kind: 'string', required: true },
      { name: 'chunk', kind: 'string', required: true },
      { name: 'writeId', kind: 'string', required: true },
    ]);
    const data = decodeBase64(p.chunk as string);
    this.gate('exec');
    const writeId = p.writeId as string;
    if (writeId === '') throw invalidParams('writeId must not be empty');
    const proc = this.procs.get(p.processId as string);
    if (!proc) return { status: 'unknownProcess' };
    if (proc.state === 'starting') return { status: 'starting' };
    // A retried write (same writeId) is acknowledged, not written twice.
    if (proc.writeIds.has(writeId)) return { status: 'accepted' };
    if (!proc.pipedStdin || !proc.child) return { status: 'stdinClosed' };
    // As the reference does: a process whose stdin was piped acknowledges a write after it
    // exited (the bytes go nowhere).
    if (!proc.stdinOpen) return { status: 'accepted' };
    const child = proc.child;
    try {
      if (child.isPty) child.write(data);
      else if (child.stdin && !child.stdin.destroyed) child.stdin.write(data);
      else return { status: 'stdinClosed' };
    } catch (e) {
      throw new RpcError(INTERNAL_ERROR, `failed to write to process stdin: ${(e as Error).message}`);
    }
    proc.writeIds.add(writeId);
    proc.writeOrder.push(writeId);
    if (proc.writeOrder.length > WRITE_ID_MEMORY) proc.writeIds.delete(proc.writeOrder.shift()!);
    return { status: 'accepted' };
  }

  async signal(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'SignalParams', [
      { name: 'processId', kind: 'string', required: true },
      { name: 'signal', kind: 'string', required: true },
    ]);
    decodeVariant(p.signal, ['interrupt']);
    this.gate('exec');
    const proc = this.procs.get(p.processId as string);
    if (proc?.child && proc.state === 'running') {
      if (proc.child.isPty) proc.child.write('\x03');
      proc.child.kill('SIGINT');
    }
    return {};
  }

  async terminate(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'TerminateParams', [{ name: 'processId', kind: 'string', required: true }]);
    this.gate('exec');
    const proc = this.procs.get(p.processId as string);
    if (!proc?.child || proc.state !== 'running') return { running: false };
    proc.child.kill('SIGKILL');
    return { running: true };
  }
}

/** Spawn failures as the reference reports them (-32603; "not found" carries data.kind). */
function spawnError(e: unknown): RpcError {
  if (e instanceof SandboxError) {
    if (e.code === 'ENOT_FOUND' || (e.code === 'EINVALID_ARGUMENT' && /cwd (does not exist|is not a directory)/.test(e.message))) {
      return new RpcError(INTERNAL_ERROR, 'No such file or directory (os error 2)', { kind: 'spawnNotFound' });
    }
    if (e.code === 'ENOT_EXECUTABLE') return new RpcError(INTERNAL_ERROR, 'Permission denied (os error 13)');
  }
  const r = toJsonRpcError(e);
  return new RpcError(r.code, r.message);
}
