/**
 * Moving an allowed tunnel's bytes. On Linux with the addon loaded, the addon relays between the
 * two sockets in C++ (recv/send through a buffer per direction, on the libuv loop: see
 * native/linux/relay.cc); everywhere else, and when asked, stream piping in JS (proxy.ts).
 */
import type * as net from 'net';

import { tryLoadNative } from '../native';

export interface NativeRelay {
  /**
   * Takes over duplicates of both fds; the caller must destroy its own sockets right away, in the
   * same tick. `onDone` runs exactly once, never from inside relay() itself (and not at all when
   * the Node environment is torn down).
   */
  relay(
    fdA: number,
    fdB: number,
    prefixAtoB: Buffer | null,
    prefixBtoA: Buffer | null,
    idleMs: number,
    onDone: (err: string | null, aToB: number, bToA: number) => void,
  ): object;
  /** Tears the tunnel down (onDone runs with "closed" if it was still open). */
  relayClose(handle: object): boolean;
}

let cached: NativeRelay | null | undefined;

/** The addon's relay, or null where it is unavailable (not Linux, addon missing or older). */
export function nativeRelay(): NativeRelay | null {
  if (cached !== undefined) return cached;
  cached = null;
  if (process.platform !== 'linux') return cached;
  const { binding } = tryLoadNative();
  const b = binding as unknown as Partial<NativeRelay> | undefined;
  if (b && typeof b.relay === 'function' && typeof b.relayClose === 'function') cached = b as NativeRelay;
  return cached;
}

/** The OS fd behind a connected net.Socket (libuv TCP handle), or -1. */
export function socketFd(socket: net.Socket): number {
  const handle = (socket as unknown as { _handle?: { fd?: number } })._handle;
  return typeof handle?.fd === 'number' && handle.fd >= 0 ? handle.fd : -1;
}

/**
 * Everything already read into the socket's JS buffer (it must reach the other side before the
 * native relay takes over). The socket must be paused.
 */
export function drainBuffered(socket: net.Socket): Buffer | null {
  const chunks: Buffer[] = [];
  for (let c = socket.read() as Buffer | null; c !== null; c = socket.read() as Buffer | null) chunks.push(c);
  return chunks.length === 0 ? null : Buffer.concat(chunks);
}
