/** The handle createExecServer returns, shared by index.ts and the transports (one way: no transport imports index.ts). */
import type { ExecConnection } from './connection';

export interface ExecServer {
  /** ws only: where it listens. */
  readonly address?: { host: string; port: number };
  /** Open connections (stdio: one). */
  connections(): ExecConnection[];
  /** Resolves when the stdio input ends (and its processes are gone), or after close(). */
  readonly done: Promise<void>;
  close(): Promise<void>;
}
