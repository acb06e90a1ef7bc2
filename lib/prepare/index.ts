/**
 * prepareExecRequest: the TypeScript counterpart of the seed's `prepare_exec_request` (Codex
 * exec-server). It takes a Codex-shaped `ExecParams` and returns a PreparedExecRequest that
 * `spawnPrepared()` (lib/index.ts) runs. Steps, in the seed's order:
 *   1. MXC gate; 2. Windows native launches strip the managed proxy env; 3. managed network
 *   (runtime.startManagedNetwork, or our own ManagedProxy by default); 4. no sandbox context →
 *   plain launch;
 *   5. URIs → native paths and project-root materialisation; 6. managed CA bundle as a readable
 *   root; 7. sandbox selection (fail closed); 8. argv checks; 9. rules through the one resolver.
 * We enforce in-process, so there is no helper re-exec: `arg0` is passed through and `command` is
 * the caller's argv.
 *
 * Managed network with our own proxy (the default): the PreparedExecRequest carries
 * `rules.network = { kind: 'proxy', proxy: <policy> }` and `managedProxy`, and spawnPrepared()
 * attaches the sandboxed command to that proxy (on Linux through a listener created inside its
 * net namespace, so the proxy port is only known at spawn: the backend writes the proxy variables
 * then). A plain launch (no sandbox context) gets a host loopback listener right away, as the seed
 * does, and its env points there. The proxy closes with its last process; a prepared request that
 * is never spawned holds no listener (see discardPrepared for the plain-launch case).
 *
 * Errors: a SandboxError (code EREQUEST_INVALID / EREQUEST_INTERNAL) whose message is the seed's
 * text and whose `detail.rpc` is the JSON-RPC error object; see ./rpc.ts.
 */
import * as path from 'node:path';
import { SandboxError } from '../errors';
import { isProxyEnvKey, ManagedProxy, startManagedNetworkForExec, type Attachment, type ManagedNetworkHooks, type ProxyPolicyConfig } from '../network';
import type { ResolvedRules, UnixSocketRule } from '../rules';
import {
  applyEnvPolicy,
  parseEnvPolicy,
  type ExecEnvPolicy,
  type GitProtection,
  type SandboxType,
} from '../permissions';
import {
  materializeProjectRoots,
  parsePermissionProfile,
  ProfileError,
  profileToResolverInput,
  withAdditionalReadableRoots,
  type PermissionProfile,
} from '../permissions/profile';
import { resolveEntries, type ProtectPreset } from '../permissions/resolve';
import { fileUriToPath, FileUriError, flavorOf } from '../permissions/uri';
import { CUSTOM_CA_ENV_KEYS, isManagedCaBundlePath, stripManagedProxyEnv } from './proxy-env';
import { internalError, invalidParams } from './rpc';
import { selectSandbox, shouldRequirePlatformSandbox, type WindowsSandboxSelection } from './sandbox-manager';

export * from './rpc';
export { CUSTOM_CA_ENV_KEYS, MANAGED_PROXY_ENV_KEYS, isManagedCaBundlePath, stripManagedProxyEnv } from './proxy-env';
export { selectSandbox, platformSandbox, type WindowsSandboxSelection, type SandboxPreference } from './sandbox-manager';

/** Codex `ManagedNetworkSandboxContext` (camelCase on the wire). */
export interface ManagedNetworkSandboxContext {
  loopbackPorts?: number[];
  allowLocalBinding?: boolean;
  allowUnixSockets?: string[];
  dangerouslyAllowAllUnixSockets?: boolean;
  [extra: string]: unknown;
}

/** Codex `FileSystemSandboxContext` (the `sandbox` object of ExecParams). */
export interface FileSystemSandboxContext {
  /** PermissionProfile JSON whose paths are file:// URIs (absolute native paths are accepted too). */
  permissions: unknown;
  cwd?: string | null;
  workspaceRoots?: string[];
  userHomeDir?: string | null;
  temporaryDirectories?: unknown;
  windowsSandboxLevel?: WindowsSandboxSelection;
  windowsSandboxProxySettingsMode?: 'reconcile' | 'preserve' | null;
  windowsSandboxPrivateDesktop?: boolean;
  useLegacyLandlock?: boolean;
}

/** Codex `ExecParams` (camelCase JSON), the `process/start` params. */
export interface ExecParams {
  processId: string;
  argv: string[];
  /** file:// URI. */
  cwd: string;
  env?: Record<string, string>;
  envPolicy?: Partial<ExecEnvPolicy> | null;
  arg0?: string | null;
  tty?: boolean;
  pipeStdin?: boolean;
  sandbox?: FileSystemSandboxContext | null;
  enforceManagedNetwork?: boolean;
  managedNetwork?: ManagedNetworkSandboxContext | null;
  /** RemoteNetworkProxyLaunchConfig: opaque here, interpreted by runtime.startManagedNetwork. */
  networkProxy?: unknown;
  metadata?: unknown;
  shellSnapshot?: unknown;
}

export interface StartManagedNetworkRequest {
  networkProxy: unknown;
  managedNetwork: ManagedNetworkSandboxContext | null;
  routing: 'dedicatedListeners' | 'sharedIngress';
  env: Record<string, string>;
  processId: string;
}

export interface StartedManagedNetwork {
  /** The child env, rewritten to point at the proxy. */
  env: Record<string, string>;
  managedNetwork: ManagedNetworkSandboxContext;
  /** Whatever the proxy needs to be stopped later (kept on the prepared request). */
  handle?: unknown;
  restrictingSid?: string;
  /**
   * A ManagedProxy of this package that the sandboxed command must be routed to, with its policy:
   * the rules then get `network: { kind: 'proxy' }` and spawnPrepared attaches the command to it.
   * Without it the sandbox keeps the network closed (fail closed).
   */
  managedProxy?: { instance: ManagedProxy; policy: ProxyPolicyConfig };
}

export interface PrepareRuntime {
  /** Host platform whose rules apply (default process.platform). */
  platform?: NodeJS.Platform;
  /** The server's own env, the base for `envPolicy` (default process.env). */
  baseEnv?: Record<string, string | undefined>;
  /** Native MXC availability (default: never available). */
  mxcAvailable?: () => boolean;
  /**
   * Starts an executor-local managed proxy. Throw SandboxError EPROXY_CONFIG for a bad config
   * (→ -32602 "invalid network proxy config: …") or EPROXY_START (→ -32603). Absent: our own
   * ManagedProxy (lib/network/codex.ts) with the `network` hooks below. null: no proxy facility,
   * and a request with `networkProxy` fails with -32603.
   */
  startManagedNetwork?: ((req: StartManagedNetworkRequest) => Promise<StartedManagedNetwork>) | null;
  /** Audit sink, decider and resolver for the default proxy (the seed's decider and audit observer). */
  network?: ManagedNetworkHooks;
  /** Whether this executor can enforce a sandbox type (default: the platform's own type). */
  sandboxSupported?: (type: SandboxType) => boolean;
  isManagedCaBundlePath?: (p: string) => boolean;
  /** `.git` protection inside writable roots (default 'hooks-and-config'). */
  git?: GitProtection;
  /** Extra read-only carve-outs (absolute native paths) added to the protected metadata. */
  protect?: string[];
  /** Opt-in protection presets for every writable root (e.g. ['startup-files']). */
  protectPresets?: ProtectPreset[];
  /** `:tmpdir` target (default baseEnv.TMPDIR). */
  tmpdir?: string;
  /**
   * Accept what the platform can only partly enforce and list it as a gap instead of refusing:
   * on Linux, a `managedNetwork.allowUnixSockets` list (any visible socket becomes connectable).
   */
  degraded?: boolean;
}

export interface PreparedExecRequest {
  processId: string;
  /** argv; [0] is the program. */
  command: string[];
  /** Native absolute path. */
  cwd: string;
  env: Record<string, string>;
  arg0?: string;
  sandboxType: SandboxType;
  /** null only for sandboxType 'none'. */
  rules: ResolvedRules | null;
  tty: boolean;
  pipeStdin: boolean;
  /** The managed network context (prepared by the proxy, or passed through from the request). */
  managedNetwork?: unknown;
  /**
   * The proxy this command must be attached to (spawnPrepared passes it as `proxy.instance` with
   * this processId). `attachment` is set for a plain launch, which reaches a host listener.
   */
  managedProxy?: { instance: ManagedProxy; processId: string; attachment?: Attachment };
  windows?: { level: string; proxySettingsMode?: string; workspaceRoots: string[] };
}

/**
 * What prepare decided about the request's sandbox, beside the prepared request: a server that
 * bounds sandboxes (the exec-server's floor) judges it with the resolved rules, so nothing after
 * prepare parses the profile or picks a sandbox again.
 */
export interface SandboxDecision {
  /** Whether the request carried a sandbox context (false: a plain launch). */
  requested: boolean;
  /**
   * Whether its permissions, as sent, ask for any confinement (`should_require_platform_sandbox`
   * for the `auto` preference): false for disabled, external, or an unrestricted file system with
   * the network on. Always false for a plain launch.
   */
  confines: boolean;
}

/** A prepared request and the decision behind it (prepareRequest). */
export interface DecidedExecRequest {
  prepared: PreparedExecRequest;
  decision: SandboxDecision;
}

function checkParams(params: unknown): asserts params is ExecParams {
  const bad = (msg: string): never => {
    throw invalidParams(`invalid params: ${msg}`);
  };
  if (typeof params !== 'object' || params === null || Array.isArray(params)) bad('expected an object');
  const p = params as Record<string, unknown>;
  if (typeof p.processId !== 'string') bad('processId must be a string');
  if (!Array.isArray(p.argv) || !p.argv.every((a) => typeof a === 'string')) bad('argv must be an array of strings');
  if ((p.argv as string[]).some((a) => a.includes('\0'))) bad('argv must not contain NUL bytes');
  if (typeof p.cwd !== 'string') bad('cwd must be a file URI string');
  if (p.env !== undefined && p.env !== null) {
    if (typeof p.env !== 'object' || Array.isArray(p.env)) bad('env must be an object of strings');
    for (const [k, v] of Object.entries(p.env as object)) {
      if (typeof v !== 'string') bad(`env.${k} must be a string`);
      if (k === '' || k.includes('=') || k.includes('\0') || (v as string).includes('\0')) bad(`env.${k} is not a valid variable`);
    }
  }
  for (const k of ['tty', 'pipeStdin', 'enforceManagedNetwork'] as const) {
    if (p[k] !== undefined && typeof p[k] !== 'boolean') bad(`${k} must be a boolean`);
  }
  if (p.arg0 !== undefined && p.arg0 !== null && (typeof p.arg0 !== 'string' || p.arg0.includes('\0'))) {
    bad('arg0 must be a string without NUL bytes');
  }
  if (p.sandbox !== undefined && p.sandbox !== null) {
    const s = p.sandbox as Record<string, unknown>;
    if (typeof s !== 'object' || Array.isArray(s)) bad('sandbox must be an object');
    if (s.permissions === undefined) bad('sandbox.permissions is required');
    if (s.workspaceRoots !== undefined && (!Array.isArray(s.workspaceRoots) || !s.workspaceRoots.every((r) => typeof r === 'string'))) {
      bad('sandbox.workspaceRoots must be an array of file URIs');
    }
    if (s.cwd !== undefined && s.cwd !== null && typeof s.cwd !== 'string') bad('sandbox.cwd must be a file URI string');
    const level = s.windowsSandboxLevel;
    if (level !== undefined && level !== null && !['disabled', 'restricted-token', 'elevated', 'mxc'].includes(level as string)) {
      bad(`sandbox.windowsSandboxLevel must be "disabled", "restricted-token", "elevated" or "mxc", got ${JSON.stringify(level)}`);
    }
    const mode = s.windowsSandboxProxySettingsMode;
    if (mode !== undefined && mode !== null && mode !== 'reconcile' && mode !== 'preserve') {
      bad(`sandbox.windowsSandboxProxySettingsMode must be "reconcile" or "preserve", got ${JSON.stringify(mode)}`);
    }
    for (const k of ['windowsSandboxPrivateDesktop', 'useLegacyLandlock']) {
      if (s[k] !== undefined && typeof s[k] !== 'boolean') bad(`sandbox.${k} must be a boolean`);
    }
  }
}

function isAttachment(v: unknown): v is Attachment {
  return typeof v === 'object' && v !== null && typeof (v as Attachment).detach === 'function' && typeof (v as Attachment).port === 'number';
}

function proxyRule(policy: ProxyPolicyConfig): ProxyPolicyConfig {
  return {
    allow: [...policy.allow],
    ...(policy.deny !== undefined ? { deny: [...policy.deny] } : {}),
    ...(policy.allowLocal !== undefined ? { allowLocal: policy.allowLocal } : {}),
    ...(policy.mode !== undefined ? { mode: policy.mode } : {}),
  };
}

/** `native_path`: a URI to a native absolute path, with the seed's labelled error. */
export function nativePath(uri: string, label: string, platform: NodeJS.Platform = process.platform): string {
  try {
    return fileUriToPath(uri, flavorOf(platform));
  } catch (err) {
    if (err instanceof FileUriError) {
      throw invalidParams(`${label} URI \`${uri}\` is not valid on this exec-server host: ${err.message}`, { label, uri });
    }
    throw err;
  }
}

async function prepareManagedNetwork(
  params: ExecParams,
  networkProxy: unknown,
  env: Record<string, string>,
  runtime: PrepareRuntime,
): Promise<{
  env: Record<string, string>;
  managedNetwork: ManagedNetworkSandboxContext | null;
  handle?: unknown;
  managedProxy?: StartedManagedNetwork['managedProxy'];
}> {
  const passThrough = params.managedNetwork ?? null;
  if (networkProxy === undefined || networkProxy === null) return { env, managedNetwork: passThrough };
  const routing = params.sandbox?.windowsSandboxLevel === 'mxc' ? 'dedicatedListeners' : 'sharedIngress';
  const start =
    runtime.startManagedNetwork === undefined
      ? (req: StartManagedNetworkRequest) => startDefaultManagedNetwork(req, params.sandbox === undefined || params.sandbox === null, runtime.network)
      : runtime.startManagedNetwork;
  if (start === null) {
    throw internalError('failed to build executor network proxy: a managed network proxy is not available on this executor');
  }
  let started: StartedManagedNetwork;
  try {
    started = await start({ networkProxy, managedNetwork: passThrough, routing, env, processId: params.processId });
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    // lib/network/codex.ts already words its errors the seed's way; a hook may give the bare reason.
    const prefixed = (prefix: string) => (msg.startsWith(prefix) ? msg : prefix + msg);
    if (err instanceof SandboxError && err.code === 'EPROXY_CONFIG') throw invalidParams(prefixed('invalid network proxy config: '));
    if (err instanceof SandboxError && err.code === 'EPROXY_START') throw internalError(prefixed('failed to start executor network proxy: '));
    if (err instanceof SandboxError && (err.code === 'EREQUEST_INVALID' || err.code === 'EREQUEST_INTERNAL')) throw err;
    throw internalError(`failed to build executor network proxy: ${msg}`);
  }
  return { env: started.env, managedNetwork: started.managedNetwork, handle: started.handle, managedProxy: started.managedProxy };
}

const CODEX_PROXY_ACTIVE = 'CODEX_NETWORK_PROXY_ACTIVE';
const CODEX_ALLOW_LOCAL_BINDING = 'CODEX_NETWORK_ALLOW_LOCAL_BINDING';
const CODEX_ATTRIBUTION = 'CODEX_NETWORK_PROXY_ATTRIBUTION';

/**
 * The default startManagedNetwork: our ManagedProxy configured from the launch config. A plain
 * launch is attached to a host loopback listener now (its env gets that port, as in the seed). A
 * sandboxed command is attached at spawn; until then its env loses every foreign proxy variable
 * and the backend adds ours for the listener it creates.
 */
async function startDefaultManagedNetwork(
  req: StartManagedNetworkRequest,
  plainLaunch: boolean,
  hooks: ManagedNetworkHooks | undefined,
): Promise<StartedManagedNetwork> {
  const managed = await startManagedNetworkForExec(req.networkProxy, hooks ?? {});
  if (managed === null) throw new SandboxError('EPROXY_CONFIG', 'expected an object');
  const managedNetwork = { ...(req.managedNetwork ?? {}), ...managed.managedNetwork };
  const policy = managed.options.policy;
  if (plainLaunch) {
    let attachment: Attachment;
    try {
      attachment = await managed.attach(req.processId);
    } catch (err) {
      await managed.proxy.close();
      throw err;
    }
    return {
      env: managed.env(req.env, attachment.port),
      managedNetwork: { ...managedNetwork, loopbackPorts: [...managed.managedNetwork.loopbackPorts] },
      handle: attachment,
      managedProxy: { instance: managed.proxy, policy },
    };
  }
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.env)) if (!isProxyEnvKey(k) && k !== CODEX_ATTRIBUTION) env[k] = v;
  env[CODEX_PROXY_ACTIVE] = '1';
  env[CODEX_ALLOW_LOCAL_BINDING] = managed.managedNetwork.allowLocalBinding ? '1' : '0';
  return { env, managedNetwork, managedProxy: { instance: managed.proxy, policy } };
}

/**
 * Releases what prepareExecRequest started for a request that will not be spawned (its proxy and,
 * for a plain launch, the host listener). Idempotent; a spawned request needs no call.
 */
export async function discardPrepared(prepared: PreparedExecRequest): Promise<void> {
  const mp = prepared.managedProxy;
  if (!mp) return;
  await mp.attachment?.detach().catch(() => {});
  await mp.instance.close().catch(() => {});
}

export async function prepareExecRequest(params: ExecParams, runtime: PrepareRuntime = {}): Promise<PreparedExecRequest> {
  return (await prepareRequest(params, runtime)).prepared;
}

/** prepareExecRequest, returning the sandbox decision too (SandboxDecision). */
export async function prepareRequest(params: ExecParams, runtime: PrepareRuntime = {}): Promise<DecidedExecRequest> {
  checkParams(params);
  let started: ManagedProxy | undefined;
  try {
    return await prepareChecked(params, runtime, (proxy) => (started = proxy));
  } catch (err) {
    // Nothing outlives a failed preparation: the proxy (and a plain launch's listener) goes too.
    await started?.close().catch(() => {});
    throw err;
  }
}

/** What the steps of prepareChecked share: the request, the child's env, and the managed network. */
interface PrepareState {
  params: ExecParams;
  runtime: PrepareRuntime;
  platform: NodeJS.Platform;
  arg0?: string;
  env: Record<string, string>;
  net: Awaited<ReturnType<typeof prepareManagedNetwork>>;
}

async function prepareChecked(
  params: ExecParams,
  runtime: PrepareRuntime,
  onProxy: (proxy: ManagedProxy) => void,
): Promise<DecidedExecRequest> {
  const platform = runtime.platform ?? process.platform;
  const sandbox = params.sandbox ?? null;
  const arg0 = params.arg0 ?? undefined;
  checkMxc(sandbox, arg0, runtime);
  const env = childEnv(params, runtime, platform);
  const s = await startNetwork(params, runtime, platform, env, onProxy);
  if (arg0 !== undefined) s.arg0 = arg0;
  if (sandbox === null) return preparePlain(s);
  const { permissions, decision, policyCwd, workspaceRoots } = materializePermissions(s, sandbox);
  const selection = selectEnforceable(s, sandbox, permissions);
  // 8. argv.
  if (params.argv.length === 0) throw invalidParams('argv must not be empty');
  const cwd = nativePath(params.cwd, 'cwd', platform);
  const rules = resolveRules(s, sandbox, selection, permissions, policyCwd);
  const prepared = preparedRequest(s, cwd, selection.sandboxType, rules);
  if (selection.sandboxType === 'windowsRestrictedToken') {
    if (selection.windowsLevel === undefined) throw invalidParams('restricted token sandbox requires a sandbox level');
    prepared.windows = {
      level: selection.windowsLevel,
      proxySettingsMode: sandbox.windowsSandboxProxySettingsMode ?? 'reconcile',
      workspaceRoots,
    };
  }
  return { prepared, decision };
}

/** 1. MXC gate: refuses an MXC launch this executor cannot make (it fires off Windows too: MXC is never available there). */
function checkMxc(sandbox: FileSystemSandboxContext | null, arg0: string | undefined, runtime: PrepareRuntime): void {
  if (sandbox === null || sandbox.windowsSandboxLevel !== 'mxc') return;
  if (arg0 !== undefined || sandbox.windowsSandboxPrivateDesktop === true) {
    throw invalidParams('MXC custom argv0 and private-desktop launches are not supported');
  }
  if (!(runtime.mxcAvailable?.() ?? false)) throw invalidParams('native MXC is unavailable on this executor');
}

/** The child env: envPolicy builds it from the server's env, then `env` overlays it. */
function childEnv(params: ExecParams, runtime: PrepareRuntime, platform: NodeJS.Platform): Record<string, string> {
  const env: Record<string, string> = { ...(params.env ?? {}) };
  if (params.envPolicy === undefined || params.envPolicy === null) return env;
  let policy: ExecEnvPolicy;
  try {
    policy = parseEnvPolicy(params.envPolicy);
  } catch (err) {
    throw invalidParams(`invalid params: ${(err as Error).message}`);
  }
  return { ...applyEnvPolicy(runtime.baseEnv ?? process.env, policy, platform), ...env };
}

/** 2-3. Whether a managed network proxy starts for this request, and the env it leaves the child. */
async function startNetwork(
  params: ExecParams,
  runtime: PrepareRuntime,
  platform: NodeJS.Platform,
  env: Record<string, string>,
  onProxy: (proxy: ManagedProxy) => void,
): Promise<PrepareState> {
  // 2. Windows native launches: the shared proxy ingress routes by the sandbox token's SID, which
  // a native launch lacks, so leave it direct.
  let networkProxy: unknown = params.networkProxy ?? null;
  if (platform === 'win32' && (params.sandbox ?? null) === null) {
    if (networkProxy !== null) env = stripManagedProxyEnv(env, runtime.isManagedCaBundlePath);
    networkProxy = null;
  }
  // 3. Managed network.
  const net = await prepareManagedNetwork(params, networkProxy, env, runtime);
  if (net.managedProxy) onProxy(net.managedProxy.instance);
  return { params, runtime, platform, env: net.env, net };
}

/** The prepared request, the same shape for a plain launch and a sandboxed one. */
function preparedRequest(s: PrepareState, cwd: string, sandboxType: SandboxType, rules: ResolvedRules | null): PreparedExecRequest {
  const { params, net } = s;
  return {
    processId: params.processId,
    command: [...params.argv],
    cwd,
    env: s.env,
    ...(s.arg0 !== undefined ? { arg0: s.arg0 } : {}),
    sandboxType,
    rules,
    tty: params.tty ?? false,
    pipeStdin: params.pipeStdin ?? false,
    ...(net.managedNetwork !== null ? { managedNetwork: net.managedNetwork as unknown } : {}),
    ...(net.managedProxy
      ? {
          managedProxy: {
            instance: net.managedProxy.instance,
            processId: params.processId,
            ...(isAttachment(net.handle) ? { attachment: net.handle } : {}),
          },
        }
      : {}),
  };
}

/** 4. No sandbox context: a plain launch. */
function preparePlain(s: PrepareState): DecidedExecRequest {
  if (s.params.argv.length === 0) throw invalidParams('argv must not be empty');
  const plain = preparedRequest(s, nativePath(s.params.cwd, 'cwd', s.platform), 'none', null);
  return { prepared: plain, decision: { requested: false, confines: false } };
}

/** 5-6. The permissions against this host's paths, and whether they ask for confinement at all. */
function materializePermissions(
  s: PrepareState,
  sandbox: FileSystemSandboxContext,
): { permissions: PermissionProfile; decision: SandboxDecision; policyCwd: string; workspaceRoots: string[] } {
  const { params, platform } = s;
  let permissions: PermissionProfile;
  try {
    permissions = parsePermissionProfile(sandbox.permissions, { flavor: flavorOf(platform) }, 'permissions');
  } catch (err) {
    if (err instanceof ProfileError && err.kind === 'uri') throw invalidParams(`invalid sandbox permission path URI: ${err.message}`);
    if (err instanceof ProfileError) throw invalidParams(`invalid params: sandbox.${err.message}`);
    throw err;
  }
  // Judged on the profile as sent: the project roots and the CA bundle added below are grants of
  // this server, not the client's ask.
  const decision: SandboxDecision = { requested: true, confines: shouldRequirePlatformSandbox(permissions, params.enforceManagedNetwork ?? false) };
  const policyCwd = nativePath(sandbox.cwd ?? params.cwd, 'sandbox cwd', platform);
  const workspaceRoots = (sandbox.workspaceRoots ?? []).map((r) => nativePath(r, 'sandbox workspace root', platform));
  permissions = materializeProjectRoots(permissions, workspaceRoots, policyCwd);
  // 6. The managed MITM CA bundle must stay readable.
  const isManagedCa = s.runtime.isManagedCaBundlePath ?? isManagedCaBundlePath;
  if (s.net.managedNetwork !== null) {
    const bundle = CUSTOM_CA_ENV_KEYS.map((k) => s.env[k]).find((v): v is string => v !== undefined && isManagedCa(v));
    if (bundle !== undefined) permissions = withAdditionalReadableRoots(permissions, [bundle]);
  }
  return { permissions, decision, policyCwd, workspaceRoots };
}

/** 7. Which sandbox enforces the request; fails closed when the intent cannot be enforced here. */
function selectEnforceable(s: PrepareState, sandbox: FileSystemSandboxContext, permissions: PermissionProfile): ReturnType<typeof selectSandbox> {
  const selection = selectSandbox({
    platform: s.platform,
    profile: permissions,
    windowsSandboxLevel: sandbox.windowsSandboxLevel ?? 'disabled',
    enforceManagedNetwork: s.params.enforceManagedNetwork ?? false,
    supported: s.runtime.sandboxSupported,
  });
  if (selection.sandboxType === 'none') throw invalidParams('sandbox intent cannot be enforced on this executor');
  return selection;
}

/**
 * Which Unix sockets the managed network context allows (Codex `allowUnixSockets` /
 * `dangerouslyAllowAllUnixSockets`): carried into the network rule; the planner enforces what it
 * can and refuses the rest unless degraded.
 */
function managedUnixSockets(mn: ManagedNetworkSandboxContext, platform: NodeJS.Platform): { unixSockets?: UnixSocketRule; unixRefused?: string[] } {
  if (mn.dangerouslyAllowAllUnixSockets === true) return { unixSockets: 'all' };
  if (mn.allowUnixSockets === undefined || mn.allowUnixSockets === null) return {};
  if (!Array.isArray(mn.allowUnixSockets) || mn.allowUnixSockets.some((p) => typeof p !== 'string' || p.includes('\0') || !(path.posix.isAbsolute(p) || path.win32.isAbsolute(p)))) {
    throw invalidParams('managedNetwork.allowUnixSockets must be an array of absolute paths');
  }
  // Codex on Linux runs such a request and keeps AF_UNIX refused (its managed-network seccomp
  // mode refuses unix socket(); only dangerouslyAllowAllUnixSockets lifts that): the list is
  // not a grant there, and the report names what was not granted. Elsewhere it is one.
  if (mn.allowUnixSockets.length > 0 && platform === 'linux') return { unixRefused: [...mn.allowUnixSockets] };
  if (mn.allowUnixSockets.length > 0) return { unixSockets: [...mn.allowUnixSockets] };
  return {};
}

/** 9. The rules, through the same resolver as the ergonomic policy. */
function resolveRules(
  s: PrepareState,
  sandbox: FileSystemSandboxContext,
  selection: ReturnType<typeof selectSandbox>,
  permissions: PermissionProfile,
  policyCwd: string,
): ResolvedRules {
  const { runtime, net } = s;
  const enforceManagedNetwork = s.params.enforceManagedNetwork ?? false;
  if (selection.sandboxType === 'windowsRestrictedToken' && enforceManagedNetwork && selection.windowsLevel !== 'elevated') {
    throw invalidParams('failed to prepare process sandbox: managed networking requires the elevated Windows sandbox backend');
  }
  const { unixSockets, unixRefused } = managedUnixSockets((net.managedNetwork ?? {}) as ManagedNetworkSandboxContext, s.platform);
  try {
    let rules = resolveEntries(
      profileToResolverInput(permissions, {
        cwd: policyCwd,
        tmpdir: runtime.tmpdir ?? (runtime.baseEnv ?? process.env).TMPDIR,
        git: runtime.git ?? 'hooks-and-config',
        protect: runtime.protect ?? [],
        ...(runtime.protectPresets ? { protectPresets: runtime.protectPresets } : {}),
        mode: sandbox.useLegacyLandlock === true && !enforceManagedNetwork && !net.managedProxy ? 'landlock' : 'auto',
        degraded: runtime.degraded ?? false,
        // A managed network reaches only our proxy. A context we cannot route (a caller's own
        // proxy, or enforceManagedNetwork without a proxy) keeps the network closed: fail closed.
        ...(net.managedProxy
          ? { network: { kind: 'proxy' as const, proxy: proxyRule(net.managedProxy.policy) } }
          : enforceManagedNetwork || net.managedNetwork !== null
            ? { network: { kind: 'none' as const } }
            : {}),
      }),
    );
    if (unixSockets !== undefined && rules.network.kind !== 'full') rules = { ...rules, network: { ...rules.network, unixSockets } };
    if (unixRefused !== undefined && rules.network.kind !== 'full') rules = { ...rules, network: { ...rules.network, unixSocketsRefused: unixRefused } };
    return rules;
  } catch (err) {
    if (err instanceof SandboxError) {
      throw invalidParams(`failed to prepare process sandbox: ${err.message}`, { cause: err.code });
    }
    throw err;
  }
}
