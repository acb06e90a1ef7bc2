/**
 * The policy decision for one request or connection: mode, deny list, local-literal check, allow
 * list or the host's decider (with its timeout), then one resolution and a check of every
 * resolved address. Each decision emits exactly one audit event.
 */
import * as dns from 'dns';
import * as net from 'net';

import { classifyAddress, looksNumericHost, type AddressClass } from './addresses';
import {
  LIMITED_METHODS,
  SOCKS_HOST_UNREACHABLE,
  SOCKS_NOT_ALLOWED,
  type DeciderAnswer,
  type Listener,
  type Outcome,
  type PendingDecision,
  type ProxyContext,
  type Refused,
} from './context';
import { badHostShape, DomainMatcher, isIpLiteral, MAX_HOST_LENGTH, normalizeHost } from './matcher';
import type { AuditEvent, AuditProtocol, AuditSource, BlockHeader, DeciderRequest, LookupFn, ProxyPolicyConfig } from './options';

export const defaultLookup: LookupFn = async (host) => {
  const results = await dns.promises.lookup(host, { all: true, verbatim: true });
  return results.map((r) => ({ address: r.address, family: r.family === 6 ? 6 : 4 }));
};

export function isLocalClass(c: AddressClass): boolean {
  return c !== 'public';
}

/** Validates a policy; throws TypeError with a precise message. */
/** Validates a policy; throws TypeError with a precise message. */
export function compilePolicy(policy: ProxyPolicyConfig): DomainMatcher {
  if (policy === null || typeof policy !== 'object') throw new TypeError('Expected policy to be an object');
  if (!Array.isArray(policy.allow)) throw new TypeError('Expected policy.allow to be an array of domain patterns');
  if (policy.deny !== undefined && !Array.isArray(policy.deny)) {
    throw new TypeError('Expected policy.deny to be an array of domain patterns');
  }
  if (policy.mode !== undefined && policy.mode !== 'full' && policy.mode !== 'limited') {
    throw new TypeError(`Expected policy.mode to be "full" or "limited", got ${JSON.stringify(policy.mode)}`);
  }
  if (policy.allowLocal !== undefined && typeof policy.allowLocal !== 'boolean') {
    throw new TypeError('Expected policy.allowLocal to be a boolean');
  }
  return new DomainMatcher(policy.allow, policy.deny ?? []);
}

export function fullPolicy(p: ProxyPolicyConfig): Readonly<Required<ProxyPolicyConfig>> {
  return Object.freeze({
    allow: [...p.allow],
    deny: [...(p.deny ?? [])],
    allowLocal: p.allowLocal === true,
    mode: p.mode ?? 'full',
  });
}

export function consultDecider(ctx: ProxyContext, req: DeciderRequest): Promise<DeciderAnswer> {
  return new Promise((resolve) => {
    let done = false;
    const entry: PendingDecision = {
      timer: setTimeout(() => entry.settle('timeout'), ctx.deciderTimeoutMs),
      settle: (value) => {
        if (done) return;
        done = true;
        clearTimeout(entry.timer);
        ctx.pending.delete(entry);
        resolve(value);
      },
    };
    ctx.pending.add(entry);
    let call: Promise<{ decision: 'allow' | 'deny'; reason?: string }>;
    try {
      call = Promise.resolve(ctx.options.decider!(req));
    } catch (err) {
      call = Promise.reject(err);
    }
    call.then(
      (answer) => {
        const ok = answer && (answer.decision === 'allow' || answer.decision === 'deny');
        entry.settle(
          ok
            ? { decision: answer.decision, reason: typeof answer.reason === 'string' ? answer.reason : undefined }
            : { decision: 'deny', reason: 'decider_invalid_answer' },
        );
      },
      () => entry.settle({ decision: 'deny', reason: 'decider_error' }),
    );
  });
}

/**
 * The whole decision for one request: mode, deny list, local-literal check, allow list or
 * decider, then one resolution and a check of every resolved address. Emits exactly one event.
 */
export async function decide(
  ctx: ProxyContext,
  listener: Listener,
  client: string | null,
  protocol: AuditProtocol,
  rawHost: string,
  port: number,
  method: string | null,
): Promise<Outcome> {
  const { matcher, policy } = ctx.rules;
  const host = normalizeHost(rawHost);
  const literal = isIpLiteral(host);
  const base = {
    processId: listener.processId,
    scope: literal ? ('non_domain' as const) : ('domain' as const),
    protocol,
    // A refused 10 kB name is reported, not echoed whole.
    host: host.length > MAX_HOST_LENGTH ? `${host.slice(0, MAX_HOST_LENGTH)}…` : host,
    port,
    method,
    client,
  };
  // One literal, not spreads: this runs for every plain-HTTP request (it showed in profiles).
  const record = (decision: 'allow' | 'deny', source: AuditSource, reason: string, override?: boolean) => {
    const event: AuditEvent = {
      processId: base.processId,
      scope: base.scope,
      protocol,
      host: base.host,
      port,
      method,
      client,
      timestamp: new Date().toISOString(),
      decision,
      source,
      reason,
    };
    if (override !== undefined) event.policyOverride = override;
    ctx.audit.emit(event);
  };
  const refuse = (source: AuditSource, reason: string, header: BlockHeader, socks = SOCKS_NOT_ALLOWED): Refused => {
    record('deny', source, reason);
    return { allowed: false, status: 403, header, socksReply: socks, reason };
  };

  if (host === '' || !(port > 0 && port <= 65535)) return refuse('policy', 'invalid_target', 'blocked-by-policy');
  // A name is looked up only when it is a well-formed host name: never an over-long one, and
  // never a numeric one that is not an IPv4 address in any inet_aton spelling.
  if (!literal && (badHostShape(host) || looksNumericHost(host) || !/^[a-z0-9_.-]+$/.test(host))) {
    return refuse('policy', 'invalid_target', 'blocked-by-policy');
  }
  if (policy.mode === 'limited') {
    // With interception, a CONNECT is opened and each request inside it is checked.
    const intercepted = ctx.options.interception !== undefined && protocol === 'httpsConnect' && method === 'CONNECT';
    const ok = intercepted || (protocol === 'http' && method !== null && LIMITED_METHODS.has(method));
    if (!ok) return refuse('mode', 'method_not_allowed', 'blocked-by-method-policy');
  }
  const verdict = matcher.evaluate(host, port);
  if (verdict.verdict === 'denied') return refuse('denylist', 'denied', 'blocked-by-denylist');

  const explicitIp = literal && matcher.isExplicitlyAllowedIp(host, port);
  if (literal && !explicitIp) {
    const cls = classifyAddress(host);
    if (isLocalClass(cls) && (!policy.allowLocal || cls === 'metadata')) {
      return refuse('policy', 'not_allowed_local', 'blocked-by-policy');
    }
  }

  let source: AuditSource = 'allowlist';
  let reason = 'allowed';
  let override: boolean | undefined;
  if (verdict.verdict !== 'allowed') {
    if (!ctx.options.decider) return refuse('allowlist', 'not_allowed', 'blocked-by-allowlist');
    const answer = await consultDecider(ctx, {
      processId: listener.processId,
      protocol,
      host,
      port,
      ...(method !== null ? { method } : {}),
    });
    if (answer === 'timeout') return refuse('decider', 'decider_timeout', 'blocked-by-policy');
    if (answer === 'closed') return refuse('policy', 'proxy_closed', 'blocked-by-policy');
    if (answer.decision === 'deny') return refuse('decider', answer.reason ?? 'policy_denied', 'blocked-by-policy');
    source = 'decider';
    reason = answer.reason ?? 'policy_allowed';
    override = true;
  }
  if (ctx.closed || listener.closing) return refuse('policy', 'proxy_closed', 'blocked-by-policy');

  let addresses: Array<{ address: string; family: 4 | 6 }>;
  if (literal) {
    addresses = [{ address: host, family: net.isIPv6(host) ? 6 : 4 }];
  } else {
    try {
      addresses = (await ctx.lookup(host, port)).filter((a) => net.isIP(a.address) !== 0);
    } catch {
      addresses = [];
    }
    if (addresses.length === 0) {
      record('deny', 'policy', 'dns_resolution_failed');
      return { allowed: false, status: 502, header: null, socksReply: SOCKS_HOST_UNREACHABLE, reason: 'dns_resolution_failed' };
    }
    // Every answer must pass: a name with one public and one private answer is refused, so the
    // choice of address can never land on a local service.
    for (const a of addresses) {
      const cls = classifyAddress(a.address);
      if (isLocalClass(cls) && (!policy.allowLocal || cls === 'metadata')) {
        return refuse('policy', 'not_allowed_local', 'blocked-by-policy');
      }
    }
  }
  // Never dial one of our own listeners: that would hand the request to another sandbox's
  // listener and blur attribution.
  // (Ports cached at attach: a getsockname per listener per request showed in strace.)
  let ownPort = false;
  for (const l of ctx.listeners) if (l.port === port) ownPort = true;
  if (ownPort) {
    for (const a of addresses) {
      const cls = classifyAddress(a.address);
      if (cls === 'loopback' || cls === 'unspecified') return refuse('policy', 'proxy_loop', 'blocked-by-policy');
    }
  }
  record('allow', source, reason, override);
  const chosen = addresses[0];
  return { allowed: true, address: chosen.address, family: net.isIPv6(chosen.address) ? 6 : 4, host };
}
