/**
 * The exec-server's WebSocket upgrade checks on who the request says it is for and from:
 *
 * - Origin: a browser always sends one, so any request carrying `Origin`, or the legacy
 *   `Sec-WebSocket-Origin` of hybi-07/08 handshakes (which the `ws` library still accepts), is
 *   refused unless that origin is allowed (--ws-allow-origin). Both headers are treated alike.
 * - Host, on a loopback listener: DNS rebinding lets a web page reach 127.0.0.1 under its own
 *   name (Host: attacker.example), so only a Host that is a loopback IP literal or `localhost`
 *   (IPv6 in brackets), with no port or the listening port, is accepted, plus the names given to
 *   --ws-allow-host. A non-loopback listener takes any Host (clients name it as they please; it
 *   always needs authentication there).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { SandboxError } from '../errors';
import { isLoopbackHost } from './ws-auth';

/** One header's values (a repeated header arrives joined or as an array). */
function values(h: string | string[] | undefined): string[] {
  return h === undefined ? [] : Array.isArray(h) ? h : [h];
}

/** Whether every Origin and Sec-WebSocket-Origin the request carries is allowed (none: yes). */
export function originsAllowed(headers: IncomingHttpHeaders, allowed: ReadonlySet<string>): boolean {
  return [...values(headers.origin), ...values(headers['sec-websocket-origin'])].every((o) => allowed.has(o));
}

/** `name` or `name:port`, `[v6]` or `[v6]:port` -> the lowercased name (no brackets) and port; null if malformed. */
function splitHost(h: string): { name: string; port?: string } | null {
  const t = h.trim().toLowerCase();
  const m = /^\[([0-9a-f:.]+)\](?::(\d{1,5}))?$/.exec(t) ?? /^([^:[\]\s/@]+)(?::(\d{1,5}))?$/.exec(t);
  if (!m) return null;
  return m[2] === undefined ? { name: m[1]! } : { name: m[1]!, port: m[2] };
}

/** The --ws-allow-host names, normalised; a malformed one (or one with a port) is refused at start. */
export function parseAllowHosts(hosts: readonly string[]): Set<string> {
  const out = new Set<string>();
  for (const h of hosts) {
    const s = splitHost(h);
    if (s === null || s.port !== undefined || s.name === '') {
      throw new SandboxError('EINVALID_ARGUMENT', `--ws-allow-host takes a host name or IP address without a port (IPv6 in brackets or bare), got ${JSON.stringify(h)}`);
    }
    out.add(s.name);
  }
  return out;
}

/**
 * Whether the request's Host is acceptable for a listener on `listenHost`:`port`. On a loopback
 * listener exactly one Host header is required, naming a loopback IP or localhost or an allowed
 * name, with no port or `port`.
 */
export function hostAllowed(headers: IncomingHttpHeaders, listenHost: string, port: number, allowed: ReadonlySet<string>): boolean {
  if (!isLoopbackHost(listenHost)) return true;
  const h = headers.host;
  if (typeof h !== 'string' || h === '') return false;
  const s = splitHost(h);
  if (s === null) return false;
  if (s.port !== undefined && Number(s.port) !== port) return false;
  return s.name === 'localhost' || isLoopbackHost(s.name) || allowed.has(s.name);
}
