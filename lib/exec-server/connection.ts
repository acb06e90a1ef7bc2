/**
 * One exec-server connection, independent of the transport: it takes JSON-RPC messages (text,
 * one message each) and produces messages through `send`. Wire shapes, error codes and texts are
 * the reference's (`codex exec-server` 0.171.0, Codex dialect: no "jsonrpc" field); see
 * test/exec-server/fixtures for recorded sessions.
 *
 * This file is the protocol core (parsing, ordering, the initialize handshake, environment/*);
 * each method family has its own file:
 *   process/*                   process-sessions.ts (owned by a session: sessions.ts)
 *   fs/* one-shot calls         fs-methods.ts (+ fs-ops.ts, the operations themselves)
 *   fs/open, readBlock, ...     fs-handles.ts
 *   fs/watchMissing             fs-watch.ts
 *   http/request                http-request.ts
 *   environmentConfig/read, capabilityRoots/discoverV1, capabilities/discoverV2
 *                               environment-config.ts
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SandboxError } from '../errors';
import { pathToFileUri } from '../permissions/uri';
import { toJsonRpcError } from '../prepare/rpc';
import { decodeStruct, INVALID_REQUEST, METHOD_NOT_FOUND, RpcError } from './decode';
import { capabilitiesDiscoverV2 } from './capability-discovery';
import { capabilityRootsDiscoverV1, environmentConfigRead } from './environment-config';
import { FileHandles } from './fs-handles';
import { fsCall, FS_ONE_SHOT_METHODS } from './fs-methods';
import { MissingWatches } from './fs-watch';
import { HttpRequests } from './http-request';
import { sandboxRequired } from './sandbox-floor';
import { ProcessTable } from './process-sessions';
import { SessionRegistry, type Session } from './sessions';
import { Deferred, type ConnectionSink, type ExecServerOptions, type MethodContext, type SpawnPreparedFn } from './types';

export { RETAIN_BYTES, RETAIN_CHUNKS } from './process-sessions';
export type { ConnectionSink, ExecServerOptions, MethodContext } from './types';

function packageVersion(): string {
  try {
    // lib/exec-server or dist/exec-server -> the package root.
    return (JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return '0.0.0';
  }
}

export class ExecConnection {
  private queue: Promise<void> = Promise.resolve();
  private initialized: 'no' | 'initialize' | 'ready' = 'no';
  private closedConn = false;
  private session: Session | null = null;
  private readonly ownsRegistry: boolean;
  private readonly registry: SessionRegistry;
  private readonly ctx: MethodContext;
  private readonly handles: FileHandles;
  private readonly watches: MissingWatches;
  private readonly http: HttpRequests;
  private noSessionTable?: ProcessTable;

  constructor(
    private readonly sink: ConnectionSink,
    options: ExecServerOptions = {},
    registry?: SessionRegistry,
  ) {
    if (typeof options.spawnPrepared !== 'function') {
      throw new SandboxError('EINVALID_ARGUMENT', 'the exec-server needs options.spawnPrepared (createExecServer from the package root passes it)');
    }
    const opts = options as ExecServerOptions & { spawnPrepared: SpawnPreparedFn };
    this.ownsRegistry = registry === undefined;
    this.registry = registry ?? new SessionRegistry(opts);
    this.ctx = {
      options: opts,
      gate: (kind) => this.gate(kind),
      notify: (method, params) => this.emit({ method, params }),
      onDrain: (cb) => this.sink.onDrain(cb),
      closed: () => this.closedConn,
      reserveProcess: () => this.registry.reserveHelper(),
    };
    this.handles = new FileHandles(this.ctx);
    this.watches = new MissingWatches(this.ctx);
    this.http = new HttpRequests(this.ctx);
  }

  /** A parse failure of one incoming line/frame (the transport could not even get JSON). */
  parseError(detail: string): void {
    this.reply(-1, undefined, new RpcError(INVALID_REQUEST, `failed to parse JSON-RPC message from exec-server ${this.ctx.options.transportName ?? 'stdio'}: ${detail}`));
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
      // after a start finds the process started). Only a long-poll's wait (and an http/request's
      // transfer) runs beside the queue.
      if (hasId) {
        const id = m.id as string | number;
        const answer = (result: unknown, err?: unknown) => {
          const e = this.reply(id, result, err);
          this.ctx.options.observe?.({ method, ...(e ? { error: e } : {}) });
        };
        this.queue = this.queue.then(() =>
          this.dispatch(method, m.params).then(
            (result) => {
              if (result instanceof Deferred) result.promise.then((r) => answer(r), (e) => answer(undefined, e));
              else answer(result);
            },
            (err) => answer(undefined, err),
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

  /**
   * The transport closed: file handles, watches and http transfers end now; the session is
   * detached (its processes wait for a resume, sessions.ts), or ended when this connection was
   * made without a server's registry.
   */
  async close(): Promise<void> {
    if (this.closedConn) return;
    this.closedConn = true;
    this.watches.close();
    this.http.close();
    await this.handles.close();
    if (this.session) {
      if (this.ownsRegistry) await this.registry.end(this.session);
      else this.registry.detach(this.session);
    }
  }

  /** The OS pids of this connection's session's running processes (tests, diagnostics). */
  pids(): number[] {
    return this.session?.processes.pids() ?? [];
  }

  // ---- plumbing ----

  /** Sends the answer; returns the error sent, if any. */
  private reply(id: string | number, result: unknown, err?: unknown): { code: number; message: string } | undefined {
    if (err === undefined) {
      this.emit({ id, result });
      return undefined;
    }
    let e: { code: number; message: string; data?: unknown };
    if (err instanceof RpcError) e = err.data === undefined ? { code: err.code, message: err.message } : { code: err.code, message: err.message, data: err.data };
    else e = toJsonRpcError(err);
    this.emit({ error: e, id });
    return e;
  }

  private emit(message: object): boolean {
    if (this.closedConn) return true;
    return this.sink.send(message);
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
      case 'initialize':
        return this.initialize(params);
      case 'environment/info':
        this.gate('environment info');
        return this.environmentInfo();
      case 'environment/status':
        this.gate('environment status');
        return { status: 'ready' };
      // The process methods decode their params before the state check, as the reference does;
      // before initialize there is no session yet, so a fresh table answers with the gate.
      case 'process/start':
        return (this.session?.processes ?? this.noSession()).start(params);
      case 'process/read':
        return (this.session?.processes ?? this.noSession()).read(params);
      case 'process/write':
        return (this.session?.processes ?? this.noSession()).write(params);
      case 'process/signal':
        return (this.session?.processes ?? this.noSession()).signal(params);
      case 'process/terminate':
        return (this.session?.processes ?? this.noSession()).terminate(params);
      case 'fs/open':
        return this.handles.open(params);
      case 'fs/readBlock':
        return this.handles.readBlock(params);
      case 'fs/writeBlock':
        return this.handles.writeBlock(params);
      case 'fs/close':
        return this.handles.closeHandle(params);
      case 'fs/watchMissing':
        return this.watches.watchMissing(params);
      case 'http/request':
        return this.http.request(params);
      case 'environmentConfig/read':
        return environmentConfigRead(this.ctx, params);
      case 'capabilityRoots/discoverV1':
        return capabilityRootsDiscoverV1(this.ctx, params);
      case 'capabilities/discoverV2':
        return capabilitiesDiscoverV2(this.ctx, params);
      default:
        if (FS_ONE_SHOT_METHODS.has(method)) return fsCall(this.ctx, method, params);
        throw new RpcError(METHOD_NOT_FOUND, `exec-server stub does not implement \`${method}\` yet`);
    }
  }

  /** Before initialize there is no session: a table that only decodes, then refuses. */
  private noSession(): ProcessTable {
    return (this.noSessionTable ??= new ProcessTable(this.ctx.options));
  }

  private initialize(params: unknown): unknown {
    const p = decodeStruct(params, 'InitializeParams', [
      { name: 'clientName', kind: 'string', required: true },
      { name: 'resumeSessionId', kind: 'string' },
    ]);
    if (this.initialized !== 'no') throw new RpcError(INVALID_REQUEST, 'initialize may only be sent once per connection');
    const resume = (p.resumeSessionId as string | null | undefined) ?? undefined;
    this.session = this.registry.attach(resume, {
      sink: { send: (m) => this.emit(m), onDrain: (cb) => this.sink.onDrain(cb) },
      gate: (kind) => this.gate(kind),
    });
    this.initialized = 'initialize';
    return { sessionId: this.session.id, environmentInfo: this.environmentInfo() };
  }

  private environmentInfo(): Record<string, unknown> {
    const floor = sandboxRequired(this.ctx.options);
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
      executorVersion: this.ctx.options.executorVersion ?? packageVersion(),
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
        // Under the sandbox floor these two are refused (they take no sandbox): not claimed.
        fsWatchMissing: !floor,
        capabilityDiscoveryV2: true,
        environmentConfigRead: !floor,
        httpHeaderEnvVars: false,
        sandboxedFileStreaming: true,
        fileWriteStreaming: true,
        shellSnapshotV2: false,
        windowsMxc: false,
      },
    };
  }
}
