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
 * Wildcards never match IP literals: an IP destination needs its own exact entry.
 * Deny wins over allow. With no allow entries every host is refused.
 */
import { domainToASCII } from 'url';

import { canonicalIp } from './addresses';

export type DomainVerdict = 'denied' | 'allowed' | 'notAllowed';

interface CompiledPattern {
  source: string;
  ip: string | null;
  regex: RegExp | null;
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

function escapeLabel(label: string): string {
  return label.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^.]*').replace(/\?/g, '[^.]');
}

/** Validates one pattern; returns an error text or null. */
export function patternError(pattern: string, list: 'allow' | 'deny'): string | null {
  if (typeof pattern !== 'string') return `${list} entry must be a string`;
  const p = pattern.trim();
  if (p === '') return `${list} entry is empty`;
  if (p === '*' || p === '**' || p === '*.' || p === '**.') {
    return list === 'deny'
      ? 'unsupported global wildcard domain pattern "*"; use exact hosts or scoped wildcards like *.example.com or **.example.com'
      : null;
  }
  if (/[\s/\\@#]/.test(p) || p.includes('\0')) return `invalid domain pattern ${JSON.stringify(pattern)}`;
  return null;
}

function compilePattern(pattern: string): CompiledPattern {
  const p = pattern.trim();
  if (p === '*' || p === '**' || p === '*.' || p === '**.') return { source: pattern, ip: null, regex: /^.+$/ };
  const ip = canonicalIp(p);
  if (ip) return { source: pattern, ip, regex: null };
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
  return { source: pattern, ip: null, regex: new RegExp(`^${prefix}${labels}$`) };
}

function matches(compiled: CompiledPattern[], host: string, hostIsIp: boolean): string | null {
  for (const c of compiled) {
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

  /** Evaluate a host (any form normalizeHost accepts). */
  evaluate(rawHost: string): { verdict: DomainVerdict; pattern: string | null; host: string } {
    const host = normalizeHost(rawHost);
    if (host === '') return { verdict: 'notAllowed', pattern: null, host };
    const ip = isIpLiteral(host);
    const denied = matches(this.deny, host, ip);
    if (denied !== null) return { verdict: 'denied', pattern: denied, host };
    const allowed = matches(this.allow, host, ip);
    if (allowed !== null) return { verdict: 'allowed', pattern: allowed, host };
    return { verdict: 'notAllowed', pattern: null, host };
  }

  /** True when `host` is an IP literal with its own exact allow entry. */
  isExplicitlyAllowedIp(rawHost: string): boolean {
    const host = normalizeHost(rawHost);
    return isIpLiteral(host) && this.allow.some((c) => c.ip === host);
  }
}
