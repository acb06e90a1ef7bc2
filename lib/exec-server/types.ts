/** Types shared by the exec-server's connection, sessions and method families. */
import type { SandboxedProcess } from '../child';
import type { ProxyPolicyConfig } from '../network';
import type { PrepareRuntime, PreparedExecRequest } from '../prepare';

export type SpawnPreparedFn = (p: PreparedExecRequest, o?: { stdio?: Array<'pipe' | 'ignore'> }) => SandboxedProcess;

export interface ExecServerOptions {
  /** Passed to prepareExecRequest for every process/start and sandboxed fs or http call. */
  runtime?: PrepareRuntime;
  /**
   * The spawn used for prepared requests: the package's spawnPrepared, passed in by lib/index.ts's
   * createExecServer (so this directory never imports lib/index.ts, which imports it).
   */
  spawnPrepared?: SpawnPreparedFn;
  /** Per-process output retention for process/read (default 1 MiB / 50,000 chunks). */
  retainBytes?: number;
  retainChunks?: number;
  /** Processes starting or running at once in one session (default 1024). */
  maxProcesses?: number;
  /**
   * Processes starting or running at once in the whole server, every session (attached or
   * detached) together (`--max-server-processes`, default 1024): a client cannot pass the
   * per-session cap by opening more sessions.
   */
  maxServerProcesses?: number;
  /** Sessions at once in the server, detached ones included (`--max-sessions`, default 64). */
  maxSessions?: number;
  /** WebSocket connections at once (`--max-connections`, default 64). */
  maxConnections?: number;
  /**
   * WebSocket connections at once from one peer address (`--max-connections-per-peer`, default
   * 16). On a loopback listener every local user is the same peer (127.0.0.1 or ::1).
   */
  maxConnectionsPerPeer?: number;
  /** Open fs/open handles per connection (default 64). */
  maxFileHandles?: number;
  /** How long a session's processes outlive its connection, waiting for a resume (default 30 s, as the reference). */
  detachedSessionTtlMs?: number;
  /**
   * Where http/request may go: the domain policy of the ManagedProxy every such request passes
   * through (lib/network). Default `{ allow: [] }`: every destination is denied.
   */
  httpPolicy?: ProxyPolicyConfig;
  /**
   * The sandbox floor (sandbox-floor.ts): refuse every sandbox whose resolved writable roots (and,
   * with floorRead, readable roots) leave the floor's bounds or that confines nothing, and the
   * methods that read the server's files with no way to carry a sandbox. Default false. Always on
   * for a WebSocket listener without authentication (`dangerouslyAllowUnauthenticated`).
   */
  requireSandbox?: boolean;
  /**
   * The floor's write bound (`--floor-write`): every writable root a request's sandbox resolves to
   * must lie within one of these directories. Default: the server's working directory (a start-up
   * refusal when that is the file system root). Only with the floor.
   */
  floorWrite?: string[];
  /**
   * The floor's read bound (`--floor-read`): when given, a sandbox that reads the whole file system,
   * or a readable root outside these and floorWrite, is refused. Default: reads are not bounded.
   */
  floorRead?: string[];
  /**
   * Under the floor, let a sandbox have the host network or host unix sockets
   * (`--floor-allow-network`). Default false: they reach every service on the host.
   */
  floorAllowNetwork?: boolean;
  /**
   * The sandbox of a request that carries none (`--default-sandbox`): Codex's workspace-write
   * (default) or read-only profile over the request's cwd (the server's for fs/*), or 'none': run
   * it unsandboxed as the server's user, as Codex does (refused together with the floor).
   */
  defaultSandbox?: 'workspace-write' | 'read-only' | 'none';
  /** Called after every request is answered (diagnostics, tests): its method and, if it failed, the error. */
  observe?: (event: { method: string; error?: { code: number; message: string } }) => void;
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

/** A result that completes later, off the request queue (process/read's long-poll, http/request). */
export class Deferred {
  constructor(readonly promise: Promise<unknown>) {}
}

/** What a method family gets from its connection. */
export interface MethodContext {
  readonly options: ExecServerOptions & { spawnPrepared: SpawnPreparedFn };
  /** Throws the "client must call initialize / send initialized" errors. */
  gate(kind: string): void;
  /** Sends a notification (dropped once the connection closed); false: the transport is congested. */
  notify(method: string, params: object): boolean;
  /** Called once when a congested transport can take more. */
  onDrain(cb: () => void): void;
  closed(): boolean;
  /** Takes a server-wide process slot for a sandboxed fs helper (sessions.ts reserveHelper). */
  reserveProcess(): () => void;
}
