/**
 * What a refused operation comes back with inside the sandbox (the errno names the probe fixtures
 * report), and the check that every result of a batch is one of them.
 */
import { expect } from 'vitest';

/** A write refused by a read-only mount, Landlock or a supervisor. */
export const DENIED: readonly string[] = ['EROFS', 'EACCES', 'EPERM', 'EXDEV', 'EBUSY'];

/** A connection (or socket) the network policy refuses. */
export const NET_DENIED: readonly string[] = ['EPERM', 'EACCES', 'ECONNREFUSED', 'ENETUNREACH', 'EHOSTUNREACH', 'EADDRNOTAVAIL', 'ENOENT', 'EAFNOSUPPORT'];

/** Every result is one of `codes`; a failure names `what` and the op (ops[i], else its index). */
export function expectDenied(results: string[], what: string, codes: readonly string[] = DENIED, ops?: unknown[][]): void {
  results.forEach((r, i) => expect(codes, `${what}: ${ops ? JSON.stringify(ops[i]) : `[${i}]`} got ${r}`).toContain(r));
}
