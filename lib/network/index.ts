/**
 * Managed network: the domain-filtering HTTP/SOCKS5 proxy sandboxed commands reach the network
 * through, with audit events and a host decider. Node standard library, plus node-forge for the
 * interception CA's X.509 encoding (lib/network/mitm.ts).
 */
export {
  ManagedProxy,
  type AttachOptions,
  type Attachment,
  type AuditEvent,
  type AuditProtocol,
  type AuditSource,
  type BlockHeader,
  type Decider,
  type DeciderRequest,
  type LookupFn,
  type ManagedProxyOptions,
  type ProxyPolicyConfig,
  type CredentialRule,
  type InterceptionOptions,
} from './proxy';
export type { SpawnNetworkOptions } from './spawn-options';
export { InterceptionCa, CUSTOM_CA_ENV_KEYS, sharedCaBaseDir } from './mitm';
export { DomainMatcher, normalizeHost, isIpLiteral, patternError, type DomainVerdict } from './matcher';
export {
  classifyAddress,
  isNonPublicAddress,
  canonicalIp,
  parseIPv4,
  parseIPv6,
  type AddressClass,
} from './addresses';
export {
  buildProxyEnv,
  isProxyEnvKey,
  nodeFetchNote,
  nodeFetchPreloadPath,
  HTTP_PROXY_URL_KEYS,
  SOCKS_PROXY_URL_KEYS,
  NO_PROXY_KEYS,
  NO_PROXY_LOCAL_VALUE,
  type ProxyEnvOptions,
} from './env';
export {
  startManagedNetworkForExec,
  translateNetworkProxyConfig,
  type ManagedNetworkForExec,
  type ManagedNetworkHooks,
  type ManagedNetworkSandboxContext,
  type RemoteNetworkProxyConfig,
  type RemoteNetworkProxyLaunchConfig,
} from './codex';
