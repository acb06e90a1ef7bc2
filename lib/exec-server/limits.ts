/**
 * The exec-server's resource bounds: processes per session and per server, sessions per server,
 * WebSocket connections per server and per peer address. A client of a server run as root (or as
 * anyone) holds that user's processes; the per-session cap alone let one client pass it by
 * opening more sessions, so every bound that a client can multiply is also bounded server-wide.
 */
import { SandboxError } from '../errors';
import { INVALID_REQUEST, RpcError } from './decode';
import type { ExecServerOptions } from './types';

export const DEFAULT_LIMITS = {
  maxProcesses: 1024,
  maxServerProcesses: 1024,
  maxSessions: 64,
  maxConnections: 64,
  maxConnectionsPerPeer: 16,
} as const;

export type LimitName = keyof typeof DEFAULT_LIMITS;

/** The CLI flag of each bound (error texts name it). */
export const LIMIT_FLAGS: Record<LimitName, string> = {
  maxProcesses: '--max-session-processes',
  maxServerProcesses: '--max-server-processes',
  maxSessions: '--max-sessions',
  maxConnections: '--max-connections',
  maxConnectionsPerPeer: '--max-connections-per-peer',
};

/** The refusal past --max-server-processes (process/start and the sandboxed fs helpers alike). */
export function tooManyServerProcesses(max: number): RpcError {
  return new RpcError(INVALID_REQUEST, `too many processes on this server (at most ${max} starting or running)`);
}

/** The bound in force for `name`. */
export function limitOf(o: ExecServerOptions, name: LimitName): number {
  return o[name] ?? DEFAULT_LIMITS[name];
}

/** Refuses (at start) a bound that is not a positive integer. */
export function validateLimits(o: ExecServerOptions): void {
  for (const name of Object.keys(DEFAULT_LIMITS) as LimitName[]) {
    const v = o[name];
    if (v !== undefined && !(Number.isSafeInteger(v) && v > 0)) {
      throw new SandboxError('EINVALID_ARGUMENT', `${name} (${LIMIT_FLAGS[name]}) must be a positive integer, got ${JSON.stringify(v)}`);
    }
  }
}
