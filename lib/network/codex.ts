/**
 * Codex compatibility: turn an `ExecParams.networkProxy` (Codex's RemoteNetworkProxyLaunchConfig,
 * camelCase JSON) into a running ManagedProxy, the way the seed's `prepare_managed_network` does.
 *
 *   const managed = await startManagedNetworkForExec(params.networkProxy, { onAudit, decider });
 *   if (managed) {
 *     const { port } = await managed.attach(params.processId);      // or { fd } from the sandbox
 *     env = managed.env(env, port);
 *     params.managedNetwork = managed.managedNetwork;               // loopbackPorts now [port]
 *   }
 *
 * Errors mirror the seed: a config that cannot be used is `invalid network proxy config: …`
 * (SandboxError EPROXY_CONFIG, JSON-RPC -32602); a proxy that cannot start is
 * `failed to start executor network proxy: …` (EPROXY_START, -32603).
 */
import { SandboxError } from '../errors';
import { buildProxyEnv } from './env';
import { patternError } from './matcher';
import { ManagedProxy, type Attachment, type AuditEvent, type Decider, type LookupFn, type ManagedProxyOptions } from './proxy';

export type CodexNetworkMode = 'limited' | 'full';

export interface RemoteNetworkProxyConfig {
  enabled: boolean;
  enableSocks5?: boolean;
  enableSocks5Udp?: boolean;
  allowUpstreamProxy?: boolean;
  dangerouslyAllowAllUnixSockets?: boolean;
  mode?: CodexNetworkMode;
  /** pattern → permission; `none` entries are ignored. */
  domains?: Record<string, 'allow' | 'deny' | 'none'> | null;
  /** socket path → permission. */
  unixSockets?: Record<string, 'allow' | 'deny'> | null;
  allowLocalBinding?: boolean;
}

export interface RemoteNetworkProxyLaunchConfig {
  proxy: RemoteNetworkProxyConfig;
  auditMetadata?: Record<string, unknown>;
  environmentId?: string | null;
  executionId?: string | null;
  /** When set (non-zero), allowlist misses are sent to the decider with this budget. */
  policyDecisionTimeoutMs?: number | null;
}

/** Codex's ManagedNetworkSandboxContext: what the sandbox must let through. */
export interface ManagedNetworkSandboxContext {
  loopbackPorts: number[];
  allowLocalBinding: boolean;
  allowUnixSockets: string[];
  dangerouslyAllowAllUnixSockets: boolean;
}

export interface ManagedNetworkHooks {
  /** Receives every decision (the exec server forwards it as `network/policyDecision`). */
  onAudit?: (event: AuditEvent) => void;
  /**
   * Asked about allowlist misses (the exec server sends `network/policyRequest`). As in Codex it
   * is used only when the launch config sets `policyDecisionTimeoutMs`.
   */
  decider?: Decider;
  lookup?: LookupFn;
}

export interface ManagedNetworkForExec {
  proxy: ManagedProxy;
  /** Child env for a listener on `port`: proxy variables set, foreign ones and the attribution token removed. */
  env(baseEnv: Record<string, string>, port: number): Record<string, string>;
  /** Sandbox facts; `loopbackPorts` gains each port attached through `attach()` below. */
  managedNetwork: ManagedNetworkSandboxContext;
  /** proxy.attach() that also records the port in managedNetwork.loopbackPorts. */
  attach(processId: string, opts?: { fd?: number }): Promise<Attachment>;
  /** The ManagedProxyOptions the config translated to (for reports and tests). */
  options: ManagedProxyOptions;
}

const INVALID_PARAMS = -32602;
const INTERNAL_ERROR = -32603;

function invalid(message: string): SandboxError {
  return new SandboxError('EPROXY_CONFIG', `invalid network proxy config: ${message}`, {
    detail: { rpcCode: INVALID_PARAMS },
  });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function optionalBool(obj: Record<string, unknown>, key: string): boolean | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw invalid(`invalid type for \`${key}\`: expected a boolean`);
  return v;
}

/**
 * Validate a launch config and translate it. Throws SandboxError EPROXY_CONFIG with the seed's
 * `invalid network proxy config: …` prefix.
 */
export function translateNetworkProxyConfig(
  networkProxy: unknown,
  hooks: ManagedNetworkHooks = {},
): { options: ManagedProxyOptions; managedNetwork: ManagedNetworkSandboxContext } {
  if (!isPlainObject(networkProxy)) throw invalid('expected an object');
  const proxy = networkProxy.proxy;
  if (proxy === undefined) throw invalid('missing field `proxy`');
  if (!isPlainObject(proxy)) throw invalid('invalid type for `proxy`: expected an object');
  if (proxy.enabled === undefined) throw invalid('missing field `enabled`');
  if (typeof proxy.enabled !== 'boolean') throw invalid('invalid type for `enabled`: expected a boolean');
  if (!proxy.enabled) throw invalid('executor-local network proxy launch requires an enabled proxy');

  const mode = proxy.mode ?? 'full';
  if (mode !== 'full' && mode !== 'limited') {
    throw invalid(`unknown variant \`${String(mode)}\`, expected \`limited\` or \`full\``);
  }
  const enableSocks5 = optionalBool(proxy, 'enableSocks5') ?? true;
  optionalBool(proxy, 'enableSocks5Udp');
  optionalBool(proxy, 'allowUpstreamProxy');
  const allowLocalBinding = optionalBool(proxy, 'allowLocalBinding') ?? false;
  const allowAllUnix = optionalBool(proxy, 'dangerouslyAllowAllUnixSockets') ?? false;

  const allow: string[] = [];
  const deny: string[] = [];
  if (proxy.domains !== undefined && proxy.domains !== null) {
    if (!isPlainObject(proxy.domains)) throw invalid('invalid type for `domains`: expected a map of pattern to permission');
    for (const [pattern, permission] of Object.entries(proxy.domains)) {
      if (permission !== 'allow' && permission !== 'deny' && permission !== 'none') {
        throw invalid(`unknown variant \`${String(permission)}\` for domain ${JSON.stringify(pattern)}, expected one of \`none\`, \`allow\`, \`deny\``);
      }
      if (permission === 'none') continue;
      const err = patternError(pattern, permission);
      if (err) throw invalid(err);
      (permission === 'allow' ? allow : deny).push(pattern);
    }
  }
  // Duplicate patterns cannot occur in a JSON map, so "deny wins" only matters across patterns,
  // which the matcher handles.

  const allowUnixSockets: string[] = [];
  if (proxy.unixSockets !== undefined && proxy.unixSockets !== null) {
    if (!isPlainObject(proxy.unixSockets)) throw invalid('invalid type for `unixSockets`: expected a map of path to permission');
    let index = 0;
    for (const [path, permission] of Object.entries(proxy.unixSockets)) {
      if (permission !== 'allow' && permission !== 'deny') {
        throw invalid(`unknown variant \`${String(permission)}\` for unix socket ${JSON.stringify(path)}, expected \`allow\` or \`deny\``);
      }
      if (permission === 'allow') {
        if (!path.startsWith('/') || path.includes('\0')) {
          throw invalid(
            `invalid network.allow_unix_sockets[${index}]: expected a NUL-free absolute path for ${process.platform}, got ${JSON.stringify(path)}`,
          );
        }
        allowUnixSockets.push(path);
        index++;
      }
    }
  }

  const timeout = networkProxy.policyDecisionTimeoutMs;
  if (timeout !== undefined && timeout !== null) {
    if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 0) {
      throw invalid('invalid type for `policyDecisionTimeoutMs`: expected a non-negative integer');
    }
    if (timeout === 0) throw invalid('`policyDecisionTimeoutMs` must be non-zero');
  }

  const options: ManagedProxyOptions = {
    policy: { allow, deny, allowLocal: allowLocalBinding, mode },
    enableSocks5,
    ...(hooks.onAudit ? { onAudit: hooks.onAudit } : {}),
    ...(hooks.lookup ? { lookup: hooks.lookup } : {}),
    ...(hooks.decider && typeof timeout === 'number' ? { decider: hooks.decider, deciderTimeoutMs: timeout } : {}),
  };
  try {
    ManagedProxy.compilePolicy(options.policy);
  } catch (err) {
    throw invalid((err as Error).message);
  }
  return {
    options,
    managedNetwork: {
      loopbackPorts: [],
      allowLocalBinding,
      allowUnixSockets,
      dangerouslyAllowAllUnixSockets: allowAllUnix,
    },
  };
}

/** Variables Codex tools look for besides the standard proxy set. */
const CODEX_PROXY_ACTIVE = 'CODEX_NETWORK_PROXY_ACTIVE';
const CODEX_ALLOW_LOCAL_BINDING = 'CODEX_NETWORK_ALLOW_LOCAL_BINDING';
const CODEX_ATTRIBUTION = 'CODEX_NETWORK_PROXY_ATTRIBUTION';

/**
 * Start the proxy for one exec request. Returns null when `networkProxy` is absent (the request's
 * own `managedNetwork`, if any, then passes through unchanged).
 */
export async function startManagedNetworkForExec(
  networkProxy: unknown,
  hooks: ManagedNetworkHooks = {},
): Promise<ManagedNetworkForExec | null> {
  if (networkProxy === undefined || networkProxy === null) return null;
  const { options, managedNetwork } = translateNetworkProxyConfig(networkProxy, hooks);
  let proxy: ManagedProxy;
  try {
    proxy = await ManagedProxy.start(options);
  } catch (err) {
    throw new SandboxError('EPROXY_START', `failed to start executor network proxy: ${(err as Error).message}`, {
      detail: { rpcCode: INTERNAL_ERROR },
    });
  }
  return {
    proxy,
    options,
    managedNetwork,
    env(baseEnv, port) {
      const env = buildProxyEnv(baseEnv, port, {
        allowLocalBinding: managedNetwork.allowLocalBinding,
        socks: options.enableSocks5 !== false,
      });
      delete env[CODEX_ATTRIBUTION];
      env[CODEX_PROXY_ACTIVE] = '1';
      env[CODEX_ALLOW_LOCAL_BINDING] = managedNetwork.allowLocalBinding ? '1' : '0';
      return env;
    },
    async attach(processId, opts) {
      let attachment: Attachment;
      try {
        attachment = await proxy.attach(processId, opts);
      } catch (err) {
        if (err instanceof TypeError) throw err;
        throw new SandboxError('EPROXY_START', `failed to start executor network proxy: ${(err as Error).message}`, {
          detail: { rpcCode: INTERNAL_ERROR },
        });
      }
      if (!managedNetwork.loopbackPorts.includes(attachment.port)) managedNetwork.loopbackPorts.push(attachment.port);
      return attachment;
    },
  };
}
