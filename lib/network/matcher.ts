/**
 * Domain policy matching.
 *
 * Pattern forms (case-insensitive, a trailing dot is ignored):
 *   example.com       the exact host
 *   *.example.com     any subdomain, not the apex
 *   **.example.com    the apex and any subdomain
 *   *                 every host name (allow list only; a deny `*` is rejected)
 *   region*.x.com     `*` and `?` inside a label match within that label only
 *   10.1.2.3, [::1]   an exact IP literal
 *   any of these:443  that port only (`*.example.com:8443`, `[::1]:8080`); without a port, any port.
 *                     An IPv6 literal takes a port in brackets only (`::1:443` is an address).
 * Wildcards never match IP literals: an IP destination needs its own exact entry.
 * Deny wins over allow. With no allow entries every host is refused.
 *
 * Refused patterns: a wildcard over a public suffix (`*.com`, `**.co.uk`), a wildcard inside the
 * registrable name (`*example.com` would match `evilexample.com`), `*.`, empty labels, names over
 * 253 characters or labels over 63, numeric names that are not an IPv4 address, a port outside
 * 1-65535, and URLs or address ranges (`http://x`, `127.0.0.0/8`), each with a reason of its own.
 */
import { domainToASCII } from 'url';

import { canonicalIp, looksNumericHost } from './addresses';

export type DomainVerdict = 'denied' | 'allowed' | 'notAllowed';

interface CompiledPattern {
  source: string;
  ip: string | null;
  regex: RegExp | null;
  /** The one port the pattern covers (`example.com:443`), or null for any port. */
  port: number | null;
}

/** Lowercase, strip brackets, a `:port` suffix and trailing dots; canonicalise IP literals. */
export function normalizeHost(input: string): string {
  let host = input.trim();
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    if (end > 0) host = host.slice(1, end);
  } else if ((host.match(/:/g) ?? []).length === 1) {
    host = host.slice(0, host.indexOf(':'));
  }
  host = host.toLowerCase().replace(/\.+$/, '');
  return canonicalIp(host) ?? toAscii(host);
}

/** Internationalised names compare in their punycode form, as clients put them on the wire. */
function toAscii(name: string): string {
  // eslint-disable-next-line no-control-regex
  if (/^[\x00-\x7f]*$/.test(name)) return name;
  return domainToASCII(name) || name;
}

export function isIpLiteral(host: string): boolean {
  return canonicalIp(host) !== null;
}

/** Longest host name (RFC 1035); longer targets are refused before any lookup. */
export const MAX_HOST_LENGTH = 253;

/**
 * Two-label public suffixes under which a wildcard would cover unrelated registrants. Not the
 * whole public suffix list (no dependency): the common country-code second levels. One-label
 * suffixes (`*.com`, `*.io`) are refused by the label count alone.
 */
const MULTI_LABEL_PUBLIC_SUFFIXES = new Set(
  [
    'co.uk org.uk ac.uk gov.uk me.uk net.uk ltd.uk plc.uk',
    'com.au net.au org.au edu.au gov.au id.au',
    'co.nz org.nz net.nz govt.nz ac.nz',
    'co.jp ne.jp or.jp ac.jp go.jp',
    'co.kr or.kr ne.kr',
    'com.br net.br org.br gov.br',
    'com.cn net.cn org.cn gov.cn edu.cn',
    'co.in net.in org.in gov.in ac.in firm.in',
    'co.za org.za gov.za',
    'com.mx org.mx gob.mx',
    'com.ar com.tr com.tw com.hk com.sg com.my com.ph com.pk com.ng com.eg com.sa com.ua',
    'co.id co.il co.th co.ke',
  ]
    .join(' ')
    .split(' '),
);

/** Non-public names a scoped wildcard may cover (`*.localhost`, `**.internal`). */
const PRIVATE_SUFFIXES = new Set(['localhost', 'local', 'internal', 'test', 'example', 'invalid', 'lan', 'home.arpa', 'corp', 'intranet']);

/** True when a host name is too long or has an empty or over-long label. */
export function badHostShape(host: string): boolean {
  if (host.length > MAX_HOST_LENGTH) return true;
  return host.split('.').some((l) => l === '' || l.length > 63);
}

function escapeLabel(label: string): string {
  return label.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^.]*').replace(/\?/g, '[^.]');
}

/** Splits a `:port` suffix off a pattern: `host:443`, `[::1]:443`; a bare IPv6 literal has none. */
function splitPort(p: string): { host: string; port: string | null } {
  if (p.startsWith('[')) {
    const end = p.indexOf(']');
    if (end > 0 && p[end + 1] === ':') return { host: p.slice(0, end + 1), port: p.slice(end + 2) };
    return { host: p, port: null };
  }
  const colon = p.indexOf(':');
  if (colon >= 0 && colon === p.lastIndexOf(':')) return { host: p.slice(0, colon), port: p.slice(colon + 1) };
  return { host: p, port: null };
}

/** A port as a pattern spells it: 1-65535, decimal, no sign or leading zero. */
function parsePort(text: string): number | null {
  if (!/^[1-9][0-9]{0,4}$/.test(text)) return null;
  const n = Number(text);
  return n <= 65535 ? n : null;
}

/**
 * Why a pattern is refused, as a phrase (`a URL: give the host alone ...`), or null when it is
 * valid. patternError() wraps it into the proxy's message; spawn()'s policy check names the field.
 */
export function patternProblem(pattern: unknown, list: 'allow' | 'deny'): string | null {
  if (typeof pattern !== 'string') return 'must be a string';
  const trimmed = pattern.trim();
  if (trimmed === '') return 'is empty';
  // The usual mistakes get a reason of their own: a URL, an address range.
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed)) {
    return 'a URL; give the host alone (e.g. example.com, or example.com:443 for one port), without a scheme or path';
  }
  const slash = trimmed.indexOf('/');
  if (slash > 0 && canonicalIp(trimmed.slice(0, slash)) !== null && /^[0-9]+$/.test(trimmed.slice(slash + 1))) {
    return 'an address range (CIDR), which is not supported; list each address (e.g. 127.0.0.1), or set allowLocal to let allowed names reach local addresses';
  }
  const { host: p, port } = splitPort(trimmed);
  if (port !== null && parsePort(port) === null) return `its port ${JSON.stringify(port)} is not a number from 1 to 65535`;
  if (p === '*' || p === '**') {
    return list === 'deny' ? 'a deny-all "*" is not supported; use exact hosts or scoped wildcards like *.example.com or **.example.com' : null;
  }
  if (canonicalIp(p) !== null) return null;
  if (/[\s/\\@#:[\]]/.test(p) || p.includes('\0')) return 'not a host name (e.g. example.com, *.example.com, 10.1.2.3 or [::1], each with an optional :port)';
  const body = p.toLowerCase().replace(/\.$/, '').replace(/^\*\*?\./, '');
  const scoped = body !== p.toLowerCase().replace(/\.$/, '');
  if (badHostShape(body)) return 'empty or over-long label, or longer than 253 characters';
  if (looksNumericHost(body)) return 'a numeric name that is not an IPv4 address';
  const labels = body.split('.');
  // The registrable part (the last two labels, three under a two-label public suffix) must be
  // spelled out: a wildcard there matches names of unrelated owners.
  const fixed = MULTI_LABEL_PUBLIC_SUFFIXES.has(labels.slice(-2).join('.')) ? 3 : 2;
  if (labels.slice(-fixed).some((l) => /[*?]/.test(l))) {
    return 'a wildcard inside the registrable domain matches unrelated names; spell it out (e.g. *.example.com)';
  }
  if (labels.length < fixed && (scoped || /[*?]/.test(body)) && !PRIVATE_SUFFIXES.has(body)) {
    return 'a wildcard over a public suffix matches every site under it';
  }
  return null;
}

/** Validates one pattern; returns an error text or null. */
export function patternError(pattern: string, list: 'allow' | 'deny'): string | null {
  const why = patternProblem(pattern, list);
  if (why === null) return null;
  if (typeof pattern !== 'string' || pattern.trim() === '') return `${list} entry ${why}`;
  if (why.startsWith('a deny-all')) {
    return 'unsupported global wildcard domain pattern "*"; use exact hosts or scoped wildcards like *.example.com or **.example.com';
  }
  return `invalid domain pattern ${JSON.stringify(pattern)}: ${why}`;
}

function compilePattern(pattern: string): CompiledPattern {
  const { host: p, port: portText } = splitPort(pattern.trim());
  const port = portText === null ? null : parsePort(portText);
  if (p === '*' || p === '**') return { source: pattern, ip: null, regex: /^.+$/, port };
  const ip = canonicalIp(p);
  if (ip) return { source: pattern, ip, regex: null, port };
  let body = p.toLowerCase().replace(/\.+$/, '');
  let prefix = '';
  if (body.startsWith('**.')) {
    body = body.slice(3);
    prefix = '(?:[^.]+\\.)*';
  } else if (body.startsWith('*.')) {
    body = body.slice(2);
    prefix = '(?:[^.]+\\.)+';
  }
  const labels = toAscii(body).split('.').map(escapeLabel).join('\\.');
  return { source: pattern, ip: null, regex: new RegExp(`^${prefix}${labels}$`), port };
}

function matches(compiled: CompiledPattern[], host: string, hostIsIp: boolean, port: number | undefined): string | null {
  for (const c of compiled) {
    // A pattern with a port covers that port only; asked without a port, it covers nothing.
    if (c.port !== null && c.port !== port) continue;
    if (hostIsIp ? c.ip === host : c.regex !== null && c.regex.test(host)) return c.source;
  }
  return null;
}

export class DomainMatcher {
  private readonly allow: CompiledPattern[];
  private readonly deny: CompiledPattern[];

  /** Throws TypeError with a precise message on an invalid pattern. */
  constructor(allow: readonly string[], deny: readonly string[] = []) {
    for (const p of allow) {
      const err = patternError(p, 'allow');
      if (err) throw new TypeError(err);
    }
    for (const p of deny) {
      const err = patternError(p, 'deny');
      if (err) throw new TypeError(err);
    }
    this.allow = allow.map(compilePattern);
    this.deny = deny.map(compilePattern);
  }

  get hasAllowEntries(): boolean {
    return this.allow.length > 0;
  }

  /**
   * Evaluate a host (any form normalizeHost accepts; a `:port` in it is ignored) for a connection
   * to `port`. Patterns with a port match only when `port` is that port.
   */
  evaluate(rawHost: string, port?: number): { verdict: DomainVerdict; pattern: string | null; host: string } {
    const host = normalizeHost(rawHost);
    if (host === '') return { verdict: 'notAllowed', pattern: null, host };
    const ip = isIpLiteral(host);
    const denied = matches(this.deny, host, ip, port);
    if (denied !== null) return { verdict: 'denied', pattern: denied, host };
    const allowed = matches(this.allow, host, ip, port);
    if (allowed !== null) return { verdict: 'allowed', pattern: allowed, host };
    return { verdict: 'notAllowed', pattern: null, host };
  }

  /** True when `host` is an IP literal with its own exact allow entry (for `port`, when it has one). */
  isExplicitlyAllowedIp(rawHost: string, port?: number): boolean {
    const host = normalizeHost(rawHost);
    return isIpLiteral(host) && this.allow.some((c) => c.ip === host && (c.port === null || c.port === port));
  }
}
