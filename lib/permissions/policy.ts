/**
 * Strict validation of the ergonomic SandboxPolicy (lib/policy-types.ts) and its compilation into
 * the resolver's entry list. Every error names the offending field.
 */
import * as path from 'node:path';
import { SandboxError } from '../errors';
import type { NetworkRule, UnixSocketRule } from '../rules';
import type { CachesMode, SandboxPolicy } from '../policy-types';
import { patternProblem } from '../network/matcher';
import { GIT_PROTECTIONS, PROTECT_PRESETS, type ResolverEntry, type ResolverInput } from './resolve';

export const CACHES_MODES = ['private', 'host-readonly', 'host-writable'] as const;

function fail(field: string, message: string, extra: Record<string, unknown> = {}): never {
  throw new SandboxError('EINVALID_POLICY', `${field} ${message}`, { detail: { field, ...extra } });
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'string') return JSON.stringify(v);
  return typeof v;
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

function checkObject(v: unknown, field: string, allowed: readonly string[]): Record<string, unknown> {
  if (!isPlainObject(v)) fail(field, `must be an object, got ${describe(v)}`);
  for (const key of Object.keys(v)) {
    if (!allowed.includes(key)) {
      fail(`${field}.${key}`, `is not a known field (expected one of: ${allowed.join(', ')})`);
    }
  }
  return v;
}

function checkEnum<T extends string>(v: unknown, field: string, values: readonly T[]): T {
  if (typeof v !== 'string' || !values.includes(v as T)) {
    fail(field, `must be one of ${values.map((x) => `'${x}'`).join(', ')}, got ${describe(v)}`);
  }
  return v as T;
}

function checkBool(v: unknown, field: string): boolean {
  if (typeof v !== 'boolean') fail(field, `must be a boolean, got ${describe(v)}`);
  return v;
}

function checkString(v: unknown, field: string): string {
  if (typeof v !== 'string') fail(field, `must be a string, got ${describe(v)}`);
  if (v.includes('\0')) fail(field, 'must not contain a NUL byte');
  return v;
}

/** An absolute native path: a string, no NUL, absolute. Returned normalised. */
export function checkAbsolutePath(v: unknown, field: string): string {
  const s = checkString(v, field);
  if (s === '') fail(field, 'must not be empty');
  if (!path.isAbsolute(s)) fail(field, `must be an absolute path, got ${JSON.stringify(s)}`, { path: s });
  return path.normalize(s);
}

function checkPathList(v: unknown, field: string): string[] {
  if (!Array.isArray(v)) fail(field, `must be an array of absolute paths, got ${describe(v)}`);
  return v.map((item, i) => checkAbsolutePath(item, `${field}[${i}]`));
}

function checkStringList(v: unknown, field: string): string[] {
  if (!Array.isArray(v)) fail(field, `must be an array of strings, got ${describe(v)}`);
  return v.map((item, i) => {
    const s = checkString(item, `${field}[${i}]`);
    if (s.trim() === '') fail(`${field}[${i}]`, 'must not be empty');
    return s;
  });
}

function checkPositiveInt(v: unknown, field: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    fail(field, `must be a positive integer, got ${typeof v === 'number' ? String(v) : describe(v)}`);
  }
  return v;
}

/** Validate the `network` field of the ergonomic policy into a NetworkRule. */
export function compileNetwork(v: unknown, field = 'policy.network'): NetworkRule {
  if (v === undefined || v === 'none') return { kind: 'none' };
  if (v === 'full') return { kind: 'full' };
  if (typeof v === 'string') fail(field, `must be 'none', 'full' or { proxy?: {...}, unixSockets?: [...] }, got ${describe(v)}`);
  const o = checkObject(v, field, ['proxy', 'unixSockets']);
  let unixSockets: UnixSocketRule | undefined;
  if (o.unixSockets !== undefined) {
    unixSockets = o.unixSockets === 'all' ? 'all' : checkPathList(o.unixSockets, `${field}.unixSockets`);
  }
  const withUnix = <T extends NetworkRule>(r: T): T => (unixSockets === undefined ? r : { ...r, unixSockets });
  if (o.proxy === undefined) {
    if (unixSockets === undefined) fail(`${field}.proxy`, 'is required (or unixSockets)');
    return withUnix({ kind: 'none' });
  }
  const p = checkObject(o.proxy, `${field}.proxy`, ['allow', 'deny', 'allowLocal', 'mode']);
  if (p.allow === undefined) fail(`${field}.proxy.allow`, 'is required');
  const proxy: Extract<NetworkRule, { kind: 'proxy' }>['proxy'] = {
    allow: checkStringList(p.allow, `${field}.proxy.allow`),
  };
  if (p.deny !== undefined) proxy.deny = checkStringList(p.deny, `${field}.proxy.deny`);
  // Checked here, not first by the proxy: a bad pattern is a policy error naming its field.
  for (const list of ['allow', 'deny'] as const) {
    (proxy[list] ?? []).forEach((pattern, i) => {
      const why = patternProblem(pattern, list);
      if (why !== null) fail(`${field}.proxy.${list}[${i}] ${JSON.stringify(pattern)}`, `is not a domain pattern: ${why}`, { field: `${field}.proxy.${list}[${i}]`, value: pattern });
    });
  }
  if (p.allowLocal !== undefined) proxy.allowLocal = checkBool(p.allowLocal, `${field}.proxy.allowLocal`);
  if (p.mode !== undefined) proxy.mode = checkEnum(p.mode, `${field}.proxy.mode`, ['full', 'limited'] as const);
  return withUnix({ kind: 'proxy', proxy });
}

/**
 * Validate an ergonomic policy and produce the resolver input. `cwd` is not used to absolutise
 * anything: relative paths in a policy are an error.
 */
export function compilePolicy(policy: SandboxPolicy | undefined, _cwd: string): ResolverInput & { caches?: CachesMode } {
  const p = policy === undefined ? {} : checkObject(policy, 'policy', ['filesystem', 'network', 'mode', 'degraded', 'procPrivacy', 'limits']);
  const fsField = 'policy.filesystem';
  const f =
    p.filesystem === undefined
      ? {}
      : checkObject(p.filesystem, fsField, ['read', 'write', 'denyRead', 'protect', 'protectPresets', 'git', 'tmp', 'caches']);

  const entries: ResolverEntry[] = [];
  let root: ResolverInput['root'] = 'read';
  if (f.read !== undefined && f.read !== 'all') {
    if (typeof f.read === 'string') fail(`${fsField}.read`, `must be 'all' or an array of absolute paths, got ${describe(f.read)}`);
    root = null;
    checkPathList(f.read, `${fsField}.read`).forEach((p2, i) =>
      entries.push({ path: p2, access: 'read', missing: 'default', source: `${fsField}.read[${i}]` }),
    );
  }
  if (f.write !== undefined) {
    checkPathList(f.write, `${fsField}.write`).forEach((p2, i) =>
      entries.push({ path: p2, access: 'write', missing: 'default', source: `${fsField}.write[${i}]` }),
    );
  }
  if (f.denyRead !== undefined) {
    checkPathList(f.denyRead, `${fsField}.denyRead`).forEach((p2, i) =>
      entries.push({ path: p2, access: 'deny', missing: 'default', source: `${fsField}.denyRead[${i}]` }),
    );
  }
  const protect = f.protect === undefined ? [] : checkPathList(f.protect, `${fsField}.protect`);
  const git = f.git === undefined ? 'hooks-and-config' : checkEnum(f.git, `${fsField}.git`, GIT_PROTECTIONS);
  let protectPresets: ResolverInput['protectPresets'];
  if (f.protectPresets !== undefined) {
    if (!Array.isArray(f.protectPresets)) fail(`${fsField}.protectPresets`, `must be an array of preset names, got ${describe(f.protectPresets)}`);
    protectPresets = f.protectPresets.map((x, i) => checkEnum(x, `${fsField}.protectPresets[${i}]`, PROTECT_PRESETS));
  }
  const tmp = f.tmp === undefined ? 'private' : checkEnum(f.tmp, `${fsField}.tmp`, ['private', 'host', 'none'] as const);

  const caches = f.caches === undefined ? undefined : checkEnum(f.caches, `${fsField}.caches`, CACHES_MODES);

  const network = compileNetwork(p.network);
  const mode = p.mode === undefined ? 'auto' : checkEnum(p.mode, 'policy.mode', ['auto', 'isolated', 'landlock'] as const);
  const degraded = p.degraded === undefined ? false : checkBool(p.degraded, 'policy.degraded');
  const procPrivacy = p.procPrivacy === undefined ? false : checkBool(p.procPrivacy, 'policy.procPrivacy');
  const limits: ResolverInput['limits'] = {};
  if (p.limits !== undefined) {
    const l = checkObject(p.limits, 'policy.limits', ['maxProcesses', 'memoryBytes', 'openFiles', 'tmpBytes']);
    if (l.maxProcesses !== undefined) limits.maxProcesses = checkPositiveInt(l.maxProcesses, 'policy.limits.maxProcesses');
    if (l.memoryBytes !== undefined) limits.memoryBytes = checkPositiveInt(l.memoryBytes, 'policy.limits.memoryBytes');
    if (l.openFiles !== undefined) limits.openFiles = checkPositiveInt(l.openFiles, 'policy.limits.openFiles');
    if (l.tmpBytes !== undefined) limits.tmpBytes = checkPositiveInt(l.tmpBytes, 'policy.limits.tmpBytes');
  }
  return {
    root, entries, protect, git, tmp, network, mode, degraded, limits,
    ...(procPrivacy ? { procPrivacy } : {}),
    ...(protectPresets ? { protectPresets } : {}),
    ...(caches ? { caches } : {}),
  };
}
