/**
 * One exec-server connection, independent of the transport: it takes JSON-RPC messages (text,
 * one message each) and produces messages through `send`. Wire shapes, error codes and texts are
 * the reference's (`codex exec-server` 0.171.0, Codex dialect: no "jsonrpc" field); see
 * test/exec-server/fixtures for recorded sessions.
 *
 * Every process/start goes through prepareExecRequest + spawnPrepared (the sandbox is enforced by
 * the addon, and `sandboxType` says which). Memory is bounded per process: at most
 * RETAIN_BYTES/RETAIN_CHUNKS of output are kept for process/read (the oldest go first, as in the
 * reference), and when the transport cannot keep up, the processes' output streams are paused
 * (backpressure reaches the child through its pipe) instead of queueing notifications without end.
 * Closing the connection kills every process it started.
 */
import { randomUUID } from 'node:crypto';
import * as os from 'node:os';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { SandboxedProcess } from '../child';
import { SandboxError } from '../errors';
import { isLikelySandboxDenied } from '../permissions';
import { fileUriToPath, pathToFileUri } from '../permissions/uri';
import { discardPrepared, prepareExecRequest, type ExecParams, type FileSystemSandboxContext, type PrepareRuntime, type PreparedExecRequest } from '../prepare';
import { INTERNAL_ERROR, toJsonRpcError } from '../prepare/rpc';
import {
  checkPathUri,
  decodeBase64,
  decodeStruct,
  decodeVariant,
  foreignHostMessage,
  INVALID_REQUEST,
  invalidParams,
  METHOD_NOT_FOUND,
  RpcError,
} from './decode';
import { runFs, type FsOp } from './fs-ops';

export const RETAIN_BYTES = 1024 * 1024;
export const RETAIN_CHUNKS = 50_000;
const EXITED_RETENTION_MS = 30_000;
const WRITE_ID_MEMORY = 4096;
const MAX_WAIT_MS = 300_000;
/** Long-polls waiting at once per connection (the reference caps calls in flight at 1024). */
const MAX_WAITING_READS = 1024;
/** Output kept for the sandboxDenied heuristic (the tail; keywords are short). */
const DENIAL_TAIL = 64 * 1024;

export interface ExecServerOptions {
  /** Passed to prepareExecRequest for every process/start and sandboxed fs call. */
  runtime?: PrepareRuntime;
  /**
   * The spawn used for prepared requests: the package's spawnPrepared, passed in by lib/index.ts's
   * createExecServer (so this directory never imports lib/index.ts, which imports it).
   */
  spawnPrepared?: (p: PreparedExecRequest, o?: { stdio?: Array<'pipe' | 'ignore'> }) => SandboxedProcess;
  /** Per-process output retention for process/read (default 1 MiB / 50,000 chunks). */
  retainBytes?: number;
  retainChunks?: number;
  /** Processes starting or running at once on one connection (default 1024). */
  maxProcesses?: number;
  /** Transport name used in parse-error texts ("stdio", "websocket"). */
  transportName?: string;
  /** Executor version reported in environment/info (default: this package's version). */
  executorVersion?: string;
}

/** What a transport gives the connection: send one message; false means "buffer is full". */
export interface ConnectionSink {
  send(message: object): boolean;
  /** Called once when the transport can take more after send returned false. */
  onDrain(cb: () => void): void;
}

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
  waiters: Set<() => void>;
  tail: string;
  expireTimer?: NodeJS.Timeout;
  /** Readable streams paused for backpressure. */
  streams: NodeJS.ReadableStream[];
}

const SIGNALS: Record<string, number> = os.constants.signals as unknown as Record<string, number>;

function packageVersion(): string {
  try {
    // lib/exec-server or dist/exec-server -> the package root.
    return (JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return '0.0.0';
  }
}

/** A result that completes later, off the request queue (process/read's long-poll). */
class Deferred {
  constructor(readonly promise: Promise<unknown>) {}
}

export class ExecConnection {
  private queue: Promise<void> = Promise.resolve();
  private initialized: 'no' | 'initialize' | 'ready' = 'no';
  private readonly procs = new Map<string, Proc>();
  private closedConn = false;
  private congested = false;
  private waitingReads = 0;
  private readonly sessionId = randomUUID();
  private readonly retainBytes: number;
  private readonly retainChunks: number;
  private readonly spawnFn: NonNullable<ExecServerOptions['spawnPrepared']>;

  constructor(
    private readonly sink: ConnectionSink,
    private readonly options: ExecServerOptions = {},
  ) {
    this.retainBytes = options.retainBytes ?? RETAIN_BYTES;
    this.retainChunks = options.retainChunks ?? RETAIN_CHUNKS;
    if (typeof options.spawnPrepared !== 'function') {
      throw new SandboxError('EINVALID_ARGUMENT', 'the exec-server needs options.spawnPrepared (createExecServer from the package root passes it)');
    }
    this.spawnFn = options.spawnPrepared;
  }

  /** A parse failure of one incoming line/frame (the transport could not even get JSON). */
  parseError(detail: string): void {
    this.reply(-1, undefined, new RpcError(INVALID_REQUEST, `failed to parse JSON-RPC message from exec-server ${this.options.transportName ?? 'stdio'}: ${detail}`));
  }

  /** One incoming message as text. */
  handleText(text: string): void {
    if (this.closedConn) return;
    if (text.trim() === '') return;
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch (e) {
      this.parseError((e as Error).message);
      return;
    }
    this.handleMessage(msg);
  }

  handleMessage(msg: unknown): void {
    if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) {
      this.parseError('expected a JSON-RPC object');
      return;
    }
    const m = msg as Record<string, unknown>;
    const hasId = typeof m.id === 'string' || (typeof m.id === 'number' && Number.isInteger(m.id));
    if (typeof m.method === 'string') {
      const method = m.method;
      // Requests run one after another, in arrival order, as in the reference (a write right
      // after a start finds the process started). Only a long-poll's wait runs beside the queue.
      if (hasId) {
        const id = m.id as string | number;
        this.queue = this.queue.then(() =>
          this.dispatch(method, m.params).then(
            (result) => {
              if (result instanceof Deferred) result.promise.then((r) => this.reply(id, r), (e) => this.reply(id, undefined, e));
              else this.reply(id, result);
            },
            (err) => this.reply(id, undefined, err),
          ),
        );
      } else {
        this.queue = this.queue.then(() => this.notification(method));
      }
      return;
    }
    // A response to a server request (we send none) is dropped; anything else matches no shape.
    if (hasId && ('result' in m || 'error' in m)) return;
    this.parseError('missing field `error`');
  }

  /** Kills every process of this connection (closing the transport calls this). */
  async close(): Promise<void> {
    if (this.closedConn) return;
    this.closedConn = true;
    const waits: Array<Promise<unknown>> = [];
    for (const p of this.procs.values()) {
      if (p.expireTimer) clearTimeout(p.expireTimer);
      for (const w of p.waiters) w();
      if (p.child && p.state !== 'exited') {
        p.child.kill('SIGKILL');
        waits.push(p.child.exited.catch(() => {}));
      }
    }
    await Promise.all(waits);
  }

  /** The OS pids of the processes still running (for tests and diagnostics). */
  pids(): number[] {
    // spawnPrepared throws when it cannot start a command, so a running child always has a pid.
    return [...this.procs.values()].filter((p) => p.state === 'running' && p.child?.pid !== undefined).map((p) => p.child!.pid!);
  }

  // ---- plumbing ----

  private reply(id: string | number, result: unknown, err?: unknown): void {
    if (this.closedConn) return;
    if (err === undefined) {
      this.emit({ id, result });
      return;
    }
    let e: { code: number; message: string; data?: unknown };
    if (err instanceof RpcError) e = err.data === undefined ? { code: err.code, message: err.message } : { code: err.code, message: err.message, data: err.data };
    else e = toJsonRpcError(err);
    this.emit({ error: e, id });
  }

  private emit(message: object): void {
    if (this.closedConn) return;
    const ok = this.sink.send(message);
    if (!ok && !this.congested) {
      // The client is slower than the processes: stop reading their output until it drains. The
      // children block on full pipes; nothing queues here without bound.
      this.congested = true;
      for (const p of this.procs.values()) for (const s of p.streams) s.pause();
      this.sink.onDrain(() => {
        this.congested = false;
        for (const p of this.procs.values()) for (const s of p.streams) s.resume();
      });
    }
  }

  private notification(method: string): void {
    if (method === 'initialized' && this.initialized === 'initialize') this.initialized = 'ready';
  }

  private gate(kind: string): void {
    if (this.initialized === 'no') throw new RpcError(INVALID_REQUEST, `client must call initialize before using ${kind} methods`);
    if (this.initialized === 'initialize') throw new RpcError(INVALID_REQUEST, `client must send initialized before using ${kind} methods`);
  }

  private async dispatch(method: string, params: unknown): Promise<unknown> {
    switch (method) {
      case 'initialize': {
        decodeStruct(params, 'InitializeParams', [
          { name: 'clientName', kind: 'string', required: true },
          { name: 'resumeSessionId', kind: 'string' },
        ]);
        if (this.initialized !== 'no') throw new RpcError(INVALID_REQUEST, 'initialize may only be sent once per connection');
        this.initialized = 'initialize';
        return { sessionId: this.sessionId, environmentInfo: this.environmentInfo() };
      }
      case 'environment/info':
        this.gate('environment info');
        return this.environmentInfo();
      case 'environment/status':
        this.gate('environment status');
        return { status: 'ready' };
      case 'process/start':
        return this.start(params);
      case 'process/read':
        return this.read(params);
      case 'process/write':
        return this.write(params);
      case 'process/signal':
        return this.signal(params);
      case 'process/terminate':
        return this.terminate(params);
      case 'fs/readFile':
      case 'fs/writeFile':
      case 'fs/createDirectory':
      case 'fs/getMetadata':
      case 'fs/readDirectory':
      case 'fs/remove':
      case 'fs/copy':
      case 'fs/canonicalize':
        return this.fsCall(method, params);
      default:
        throw new RpcError(METHOD_NOT_FOUND, `exec-server stub does not implement \`${method}\` yet`);
    }
  }

  private environmentInfo(): Record<string, unknown> {
    const shellPath = process.env.SHELL && process.env.SHELL.startsWith('/') ? process.env.SHELL : '/bin/sh';
    const uri = (p: string | undefined) => {
      try {
        return p ? pathToFileUri(p) : null;
      } catch {
        return null;
      }
    };
    return {
      shell: { name: shellPath.split('/').pop(), path: shellPath },
      executorVersion: this.options.executorVersion ?? packageVersion(),
      providerId: 'process-sandbox',
      cwd: uri(process.cwd()),
      userHomeDir: uri(os.homedir()),
      platformOs: process.platform === 'win32' ? 'windows' : process.platform === 'darwin' ? 'macos' : process.platform,
      temporaryDirectories: [],
      tempDir: uri(os.tmpdir()),
      // Only what this executor really implements is claimed.
      capabilities: {
        networkProxyLaunch: true,
        capabilityDiscoverySandbox: false,
        environmentConfigRead: false,
        httpHeaderEnvVars: false,
        sandboxedFileStreaming: false,
        shellSnapshotV2: false,
        windowsMxc: false,
      },
    };
  }

  // ---- processes ----

  private decodeExecParams(params: unknown): ExecParams {
    const p = decodeStruct(params, 'WireExecParams', [
      { name: 'processId', kind: 'string', required: true },
      { name: 'metadata', kind: 'object' },
      { name: 'argv', kind: 'seq<string>', required: true },
      { name: 'cwd', kind: 'string', required: true },
      { name: 'envPolicy', kind: 'object' },
      { name: 'shellSnapshot', kind: 'object' },
      { name: 'env', kind: 'map<string>', required: true },
      { name: 'tty', kind: 'bool', required: true },
      { name: 'pipeStdin', kind: 'bool', required: true },
      { name: 'arg0', kind: 'string' },
      { name: 'sandbox', kind: 'object' },
      { name: 'enforceManagedNetwork', kind: 'bool' },
      { name: 'managedNetwork', kind: 'object' },
      { name: 'networkProxy', kind: 'object' },
    ]);
    checkPathUri(p.cwd);
    if (p.sandbox !== undefined && p.sandbox !== null) this.decodeSandbox(p.sandbox);
    return p as unknown as ExecParams;
  }

  private decodeSandbox(s: unknown): FileSystemSandboxContext {
    const d = decodeStruct(s, 'FileSystemSandboxContext', [
      { name: 'permissions', kind: 'object', required: true },
      { name: 'cwd', kind: 'string' },
      { name: 'workspaceRoots', kind: 'seq<string>' },
      { name: 'userHomeDir', kind: 'string' },
      { name: 'windowsSandboxLevel', kind: 'string', required: true },
      { name: 'windowsSandboxProxySettingsMode', kind: 'string' },
      { name: 'useLegacyLandlock', kind: 'bool' },
    ]);
    decodeVariant(d.windowsSandboxLevel, ['disabled', 'restricted-token', 'elevated', 'mxc']);
    if (typeof d.cwd === 'string') checkPathUri(d.cwd);
    for (const r of (d.workspaceRoots as string[] | undefined) ?? []) checkPathUri(r);
    return d as unknown as FileSystemSandboxContext;
  }

  private async start(params: unknown): Promise<unknown> {
    const p = this.decodeExecParams(params);
    this.gate('exec');
    if (this.procs.has(p.processId)) throw new RpcError(INVALID_REQUEST, `process ${p.processId} already exists`);
    const live = [...this.procs.values()].filter((x) => x.state !== 'exited').length;
    const max = this.options.maxProcesses ?? 1024;
    if (live >= max) throw new RpcError(INVALID_REQUEST, `too many processes on this connection (at most ${max} starting or running)`);
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
    let prepared: PreparedExecRequest;
    try {
      prepared = await prepareExecRequest(p, this.options.runtime ?? {});
    } catch (e) {
      this.procs.delete(p.processId);
      throw e;
    }
    if (this.closedConn) {
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
    this.attach(proc, child, prepared.tty);
    return { processId: p.processId, sandboxType: prepared.sandboxType };
  }

  private attach(proc: Proc, child: SandboxedProcess, tty: boolean): void {
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
    child.once('exit', (code: number | null, signal: NodeJS.Signals | null) => {
      proc.state = 'exited';
      proc.stdinOpen = false;
      proc.exitCode = code ?? (signal ? 128 + (SIGNALS[signal] ?? 0) : -1);
      proc.sandboxDenied = isLikelySandboxDenied(proc.sandboxType as never, proc.exitCode, signal, proc.tail);
      this.pushEvent(proc, { kind: 'exited' });
    });
    child.once('close', () => {
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
    for (const w of waiters) w();
  }

  private lookup(id: string): Proc {
    const p = this.procs.get(id);
    if (!p) throw new RpcError(INVALID_REQUEST, `unknown process id ${id}`);
    return p;
  }

  private async read(params: unknown): Promise<unknown> {
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
      // Long-poll: any new event (output, exit, close) or the deadline ends the wait.
      this.waitingReads++;
      const waited = new Promise<void>((resolve) => {
        const t = setTimeout(done, waitMs);
        const self = this;
        let fired = false;
        function done() {
          if (fired) return;
          fired = true;
          self.waitingReads--;
          clearTimeout(t);
          proc.waiters.delete(done);
          resolve();
        }
        proc.waiters.add(done);
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

  private async write(params: unknown): Promise<unknown> {
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

  private async signal(params: unknown): Promise<unknown> {
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

  private async terminate(params: unknown): Promise<unknown> {
    const p = decodeStruct(params, 'TerminateParams', [{ name: 'processId', kind: 'string', required: true }]);
    this.gate('exec');
    const proc = this.procs.get(p.processId as string);
    if (!proc?.child || proc.state !== 'running') return { running: false };
    proc.child.kill('SIGKILL');
    return { running: true };
  }

  // ---- file system ----

  private async fsCall(method: string, params: unknown): Promise<unknown> {
    const sandboxField = { name: 'sandbox', kind: 'object' as const };
    let op: FsOp;
    let uris: string[];
    let p: Record<string, unknown>;
    const one = (name: string, extra: Parameters<typeof decodeStruct>[2] = []) => {
      p = decodeStruct(params, name, [{ name: 'path', kind: 'string', required: true }, ...extra, sandboxField]);
      uris = [checkPathUri(p.path)];
      return p;
    };
    switch (method) {
      case 'fs/readFile':
        one('FsReadFileParams');
        op = { op: 'readFile', path: '' };
        break;
      case 'fs/writeFile': {
        one('FsWriteFileParams', [{ name: 'dataBase64', kind: 'string', required: true }]);
        let data: Buffer;
        try {
          data = decodeBase64(p!.dataBase64 as string);
        } catch (e) {
          throw new RpcError(INVALID_REQUEST, `fs/writeFile requires valid base64 dataBase64: ${(e as Error).message}`);
        }
        op = { op: 'writeFile', path: '', data: data.toString('base64') };
        break;
      }
      case 'fs/createDirectory':
        one('FsCreateDirectoryParams', [{ name: 'recursive', kind: 'bool' }]);
        op = { op: 'createDirectory', path: '', recursive: (p!.recursive as boolean | null | undefined) ?? true };
        break;
      case 'fs/getMetadata':
        one('FsGetMetadataParams');
        op = { op: 'getMetadata', path: '' };
        break;
      case 'fs/readDirectory':
        one('FsReadDirectoryParams');
        op = { op: 'readDirectory', path: '' };
        break;
      case 'fs/remove':
        one('FsRemoveParams', [
          { name: 'recursive', kind: 'bool' },
          { name: 'force', kind: 'bool' },
        ]);
        op = { op: 'remove', path: '', recursive: (p!.recursive as boolean | null | undefined) ?? true, force: (p!.force as boolean | null | undefined) ?? true };
        break;
      case 'fs/copy':
        p = decodeStruct(params, 'FsCopyParams', [
          { name: 'sourcePath', kind: 'string', required: true },
          { name: 'destinationPath', kind: 'string', required: true },
          { name: 'recursive', kind: 'bool', required: true },
          sandboxField,
        ]);
        uris = [checkPathUri(p.sourcePath), checkPathUri(p.destinationPath)];
        op = { op: 'copy', source: '', destination: '', recursive: p.recursive as boolean };
        break;
      default:
        one('FsCanonicalizeParams');
        op = { op: 'canonicalize', path: '' };
    }
    const sandbox = p!.sandbox !== undefined && p!.sandbox !== null ? this.decodeSandbox(p!.sandbox) : null;
    this.gate('filesystem');
    const paths = uris!.map((u) => {
      const foreign = foreignHostMessage(u, process.platform);
      if (foreign) throw new RpcError(INVALID_REQUEST, foreign);
      try {
        return fileUriToPath(u);
      } catch (e) {
        throw new RpcError(INVALID_REQUEST, (e as Error).message);
      }
    });
    if (op.op === 'copy') {
      op.source = paths[0]!;
      op.destination = paths[1]!;
    } else {
      (op as { path: string }).path = paths[0]!;
    }
    return runFs(op, sandbox, {
      runtime: this.options.runtime ?? {},
      spawnPrepared: this.spawnFn,
      maxOutputBytes: 256 * 1024 * 1024,
    });
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
