/**
 * ManagedProxy: a loopback HTTP + SOCKS5 proxy that enforces a domain policy for sandboxed
 * processes, reports every decision, and can defer allowlist misses to the host.
 *
 * Usage:
 *   const proxy = await ManagedProxy.start({ policy: { allow: ['**.npmjs.org'] }, onAudit });
 *   const { port, detach } = await proxy.attach('proc-1');           // proxy-owned 127.0.0.1:0
 *   const { port } = await proxy.attach('proc-2', { fd: listenerFd }); // listener made elsewhere
 *   spawn(cmd, { env: ManagedProxy.proxyEnv(process.env, port) });
 *   await detach();                                                  // closes with the last one
 *
 * One listener per attached process: every connection accepted on a listener is attributed to
 * that listener's processId, so one proxy serves many concurrent sandboxes. HTTP and SOCKS5 share
 * a listener; the first byte tells them apart (0x05 is a SOCKS5 greeting, anything else is HTTP).
 *
 * A destination is resolved once; the proxy dials exactly the address it checked, so a second DNS
 * answer cannot redirect an approved name to a local address.
 *
 * Everything here runs on the Node event loop; no method is safe to call after close() resolves
 * except close() itself.
 *
 * This file is the public surface. The mechanisms, each in its own file (imports point down this
 * list only): listener.ts (listeners and admission), connect.ts (CONNECT), http-request.ts (plain
 * HTTP and WebSocket upgrades), socks5.ts, intercept.ts (TLS interception), decision.ts (the
 * policy decision), dial.ts (upstream connections, the upstream proxy), relay.ts (moving tunnel
 * bytes), limits.ts (socket budget, caps), audit.ts, context.ts (shared state and types),
 * options.ts (the public types).
 */
import * as tls from 'tls';

import { AuditLog, RECENT_BLOCKED } from './audit';
import type { Listener, ProxyContext } from './context';
import { compilePolicy, defaultLookup, fullPolicy } from './decision';
import { parseUpstreamProxy } from './dial';
import { buildProxyEnv, type ProxyEnvOptions } from './env';
import { attach, closeListener } from './listener';
import { DEFAULT_LIMITS } from './limits';
import { badHostShape, DomainMatcher, isIpLiteral, normalizeHost } from './matcher';
import type { InterceptionCa } from './mitm';
import type { AttachOptions, Attachment, AuditEvent, InterceptionOptions, ManagedProxyOptions, ProxyPolicyConfig } from './options';

export type {
  AttachOptions,
  Attachment,
  AuditEvent,
  AuditProtocol,
  AuditSource,
  BlockHeader,
  CredentialRule,
  Decider,
  DeciderRequest,
  InterceptionOptions,
  LookupFn,
  ManagedProxyOptions,
  ProxyLimits,
  ProxyPolicyConfig,
} from './options';

export class ManagedProxy {
  /** The state every mechanism (listener.ts, decision.ts, the request paths) works on. */
  private readonly ctx: ProxyContext;
  private closePromise: Promise<void> | null = null;

  private constructor(options: ManagedProxyOptions, matcher: DomainMatcher) {
    const self = this;
    this.ctx = {
      options,
      rules: { matcher, policy: fullPolicy(options.policy) },
      listeners: new Set<Listener>(),
      pending: new Set(),
      lookup: options.lookup ?? defaultLookup,
      deciderTimeoutMs: options.deciderTimeoutMs ?? 30_000,
      handshakeTimeoutMs: options.handshakeTimeoutMs ?? 30_000,
      connectTimeoutMs: options.connectTimeoutMs ?? 30_000,
      limits: { ...DEFAULT_LIMITS, ...(options.limits ?? {}) },
      handshakes: new WeakMap(),
      upstreamProxy: options.upstreamProxy !== undefined ? parseUpstreamProxy(options.upstreamProxy) : null,
      mitmTargets: new WeakMap<tls.TLSSocket, never>(),
      audit: new AuditLog(options.onAudit),
      get closed() {
        return self.closePromise !== null;
      },
    };
  }

  /** Validates the policy and returns a proxy with no listeners yet (attach() creates them). */
  static async start(options: ManagedProxyOptions): Promise<ManagedProxy> {
    return ManagedProxy.create(options);
  }

  /** Synchronous form of start() (it opens nothing until attach()); spawn() uses it. */
  static create(options: ManagedProxyOptions): ManagedProxy {
    const matcher = ManagedProxy.compilePolicy(options.policy);
    for (const [name, value] of [
      ['deciderTimeoutMs', options.deciderTimeoutMs],
      ['handshakeTimeoutMs', options.handshakeTimeoutMs],
      ['connectTimeoutMs', options.connectTimeoutMs],
      ['limits.connectionsPerProcess', options.limits?.connectionsPerProcess],
      ['limits.pendingHandshakesPerProcess', options.limits?.pendingHandshakesPerProcess],
      ['limits.tunnelIdleTimeoutMs', options.limits?.tunnelIdleTimeoutMs],
    ] as const) {
      if (value !== undefined && (!Number.isFinite(value) || value <= 0)) {
        throw new TypeError(`Expected ${name} to be a positive number, got ${String(value)}`);
      }
    }
    if (options.limits !== undefined) {
      if (options.limits === null || typeof options.limits !== 'object') throw new TypeError('Expected limits to be an object');
      for (const k of Object.keys(options.limits)) {
        if (!(k in DEFAULT_LIMITS)) throw new TypeError(`Unknown field limits.${k}`);
      }
    }
    if (options.upstreamProxy !== undefined) {
      if (typeof options.upstreamProxy !== 'string') throw new TypeError('Expected upstreamProxy to be a string');
      parseUpstreamProxy(options.upstreamProxy);
    }
    if (options.upstreamTarget !== undefined && options.upstreamTarget !== 'name' && options.upstreamTarget !== 'address') {
      throw new TypeError(`Expected upstreamTarget to be "name" or "address", got ${JSON.stringify(options.upstreamTarget)}`);
    }
    if (options.interception !== undefined) ManagedProxy.checkInterception(options.interception);
    if (options.relay !== undefined && options.relay !== 'auto' && options.relay !== 'js') {
      throw new TypeError(`Expected relay to be "auto" or "js", got ${JSON.stringify(options.relay)}`);
    }
    if (options.decider !== undefined && typeof options.decider !== 'function') {
      throw new TypeError('Expected decider to be a function');
    }
    return new ManagedProxy(options, matcher);
  }

  /** The policy in force now (a copy). */
  get policy(): Required<ProxyPolicyConfig> {
    const p = this.ctx.rules.policy;
    return { allow: [...p.allow], deny: [...p.deny], allowLocal: p.allowLocal, mode: p.mode };
  }

  /**
   * Replaces the policy of a live proxy, for every attached sandbox at once. Fields left out keep
   * their current value (`update({ allow: [...] })` changes the allow list only). The new policy is
   * validated first: a bad one throws TypeError and the old one stays in force. It applies to
   * every decision that starts afterwards (requests on kept-alive client connections included);
   * tunnels already established are not re-checked and keep running.
   */
  update(changes: Partial<ProxyPolicyConfig>): void {
    if (changes === null || typeof changes !== 'object') throw new TypeError('Expected update() to get a policy object');
    for (const k of Object.keys(changes)) {
      if (!['allow', 'deny', 'allowLocal', 'mode'].includes(k)) throw new TypeError(`Unknown policy field ${k}`);
    }
    const next: ProxyPolicyConfig = { ...this.ctx.rules.policy, ...changes };
    const matcher = ManagedProxy.compilePolicy(next);
    this.ctx.rules = { matcher, policy: fullPolicy(next) };
  }

  /**
   * The most recent refused requests and connections (newest last, at most 256), as the audit
   * events that reported them: policy refusals and cap/budget refusals alike.
   */
  recentBlocked(limit = RECENT_BLOCKED): AuditEvent[] {
    if (!Number.isInteger(limit) || limit < 0) throw new TypeError(`Expected limit to be a non-negative integer, got ${String(limit)}`);
    return this.ctx.audit.recent(limit);
  }

  /** The interception CA the sandboxed clients must trust, or null without interception. */
  get interceptionCa(): InterceptionCa | null {
    return this.ctx.options.interception?.ca ?? null;
  }

  /** Whether interception carries credential rules (secrets the proxy injects for a host). */
  get hasCredentialRules(): boolean {
    return (this.ctx.options.interception?.credentials ?? []).length > 0;
  }

  /** Validates `interception` (TypeError with a precise message); spawn() checks its option with it. */
  static checkInterception(i: InterceptionOptions): void {
    if (i === null || typeof i !== 'object') throw new TypeError('Expected interception to be an object');
    const ca = i.ca as Partial<InterceptionCa> | undefined;
    if (!ca || typeof ca.leafFor !== 'function') throw new TypeError('Expected interception.ca to be an InterceptionCa');
    if (i.originCa !== undefined && typeof i.originCa !== 'string') throw new TypeError('Expected interception.originCa to be a PEM string');
    if (i.credentials !== undefined && !Array.isArray(i.credentials)) throw new TypeError('Expected interception.credentials to be an array');
    for (const [n, c] of (i.credentials ?? []).entries()) {
      for (const k of ['host', 'header', 'placeholder', 'value'] as const) {
        if (typeof c?.[k] !== 'string' || c[k] === '') throw new TypeError(`Expected interception.credentials[${n}].${k} to be a non-empty string`);
      }
      if (normalizeHost(c.host) !== c.host || isIpLiteral(c.host) || badHostShape(c.host)) {
        throw new TypeError(`interception.credentials[${n}].host must be a normalised host name, got ${JSON.stringify(c.host)}`);
      }
      if (!/^[a-z0-9-]+$/i.test(c.header) || /[\r\n]/.test(c.value)) throw new TypeError(`interception.credentials[${n}] has a bad header name or value`);
      if (c.placeholder.length < 8) throw new TypeError(`interception.credentials[${n}].placeholder is too short to be unique`);
    }
  }

  /** Validates a policy; throws TypeError with a precise message. */
  static compilePolicy(policy: ProxyPolicyConfig): DomainMatcher {
    return compilePolicy(policy);
  }

  /** Environment for a child that should use the listener on `port`. See lib/network/env.ts. */
  static proxyEnv(
    baseEnv: Record<string, string>,
    port: number,
    options?: ProxyEnvOptions,
  ): Record<string, string> {
    return buildProxyEnv(baseEnv, port, options);
  }

  get closed(): boolean {
    return this.closePromise !== null;
  }

  /** processIds with a live listener. */
  get attachedProcessIds(): string[] {
    return [...this.ctx.listeners].filter((l) => !l.closing).map((l) => l.processId);
  }

  /**
   * Accept connections for `processId`. With `fd`, the proxy takes ownership of that TCP socket
   * (bound, or already listening) and closes it on detach; without, it listens on 127.0.0.1:0.
   * With `admit`, only the connections it returns true for are served (AttachOptions).
   */
  attach(processId: string, opts: AttachOptions = {}): Promise<Attachment> {
    return attach(this.ctx, processId, opts, (listener) => this.detach(listener));
  }

  /** Stops every listener, drops every connection and pending decision. Idempotent. */
  close(): Promise<void> {
    if (!this.closePromise) {
      for (const p of this.ctx.pending) {
        p.settle('closed');
      }
      this.ctx.pending.clear();
      this.closePromise = Promise.all([...this.ctx.listeners].map((l) => closeListener(this.ctx, l))).then(() => undefined);
    }
    return this.closePromise;
  }

  private async detach(listener: Listener): Promise<void> {
    await closeListener(this.ctx, listener);
    if (this.ctx.options.closeWithLastProcess !== false && this.ctx.listeners.size === 0) await this.close();
  }
}
