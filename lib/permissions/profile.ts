/**
 * Codex `PermissionProfile` JSON (snake_case, tagged with `type`): parsing, the exact wire form,
 * the `read_only` / `workspace_write` presets, project-root materialisation, extra readable roots,
 * and the compilation into the one resolver's entry list (resolve.ts).
 */
import * as path from 'node:path';
import type { NetworkRule } from '../rules';
import { isWithin } from '../paths';
import { lstatOrNull, realpathOrNull } from './canonical';
import { expandGlob, type GlobLimits } from './glob';
import { protectedMetadataFor, type Access, type GitProtection, type ProtectPreset, type ResolverEntry, type ResolverInput } from './resolve';
import { fileUriToPath, FileUriError, looksLikeUri, pathToFileUri, type PathFlavor } from './uri';

export type FileSystemAccessMode = 'read' | 'write' | 'deny';
export type MissingPathBehavior = 'skip' | 'error';

export type FileSystemSpecialPath =
  | { kind: 'root'; subpath?: string }
  | { kind: 'minimal' }
  | { kind: 'project_roots'; subpath?: string }
  | { kind: 'current_working_directory'; subpath?: string }
  | { kind: 'tmpdir'; subpath?: string }
  | { kind: 'slash_tmp'; subpath?: string }
  /** A token from a newer config: kept so the profile still loads, ignored when resolving. */
  | { kind: 'unknown'; path: string; subpath?: string };

export type FileSystemPath =
  | { type: 'path'; path: string }
  | { type: 'glob_pattern'; pattern: string }
  | { type: 'special'; value: FileSystemSpecialPath };

export interface FileSystemSandboxEntry {
  path: FileSystemPath;
  access: FileSystemAccessMode;
  missing_path_behavior?: MissingPathBehavior;
}

export type ManagedFileSystemPermissions =
  | { type: 'restricted'; entries: FileSystemSandboxEntry[]; glob_scan_max_depth?: number }
  | { type: 'unrestricted' };

export type NetworkPermission = 'restricted' | 'enabled';

export type PermissionProfile =
  | { type: 'managed'; file_system: ManagedFileSystemPermissions; network: NetworkPermission }
  | { type: 'disabled' }
  | { type: 'external'; network: NetworkPermission };

/** A profile that does not decode. `uri` errors become "invalid sandbox permission path URI: …". */
export class ProfileError extends Error {
  constructor(
    message: string,
    readonly kind: 'shape' | 'uri',
  ) {
    super(message);
    this.name = 'ProfileError';
  }
}

const SPECIAL_KINDS = ['root', 'minimal', 'project_roots', 'current_working_directory', 'tmpdir', 'slash_tmp'] as const;

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function shape(field: string, msg: string): never {
  throw new ProfileError(`${field} ${msg}`, 'shape');
}

export interface ParseProfileOptions {
  /** Path rules for `path` entries (default: this host). */
  flavor?: PathFlavor;
}

function parseSubpath(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || v.includes('\0')) shape(field, 'must be a string without NUL bytes');
  if (path.posix.isAbsolute(v) || path.win32.isAbsolute(v)) shape(field, `must be a relative path, got ${JSON.stringify(v)}`);
  if (v.split(/[\\/]/).includes('..')) shape(field, `must not contain '..', got ${JSON.stringify(v)}`);
  return v;
}

function parseNativePath(v: unknown, field: string, flavor: PathFlavor): string {
  if (typeof v !== 'string') shape(field, 'must be a string');
  if (v.includes('\0')) shape(field, 'must not contain a NUL byte');
  if (looksLikeUri(v)) {
    try {
      return fileUriToPath(v, flavor);
    } catch (err) {
      if (err instanceof FileUriError) throw new ProfileError(`${field}: \`${v}\`: ${err.message}`, 'uri');
      throw err;
    }
  }
  const p = flavor === 'win32' ? path.win32 : path.posix;
  if (!p.isAbsolute(v) || (flavor === 'win32' && !/^([A-Za-z]:\\|\\\\)/.test(p.normalize(v)))) {
    throw new ProfileError(`${field}: \`${v}\` is not an absolute path or file URI`, 'uri');
  }
  return p.normalize(v);
}

function parseSpecial(v: unknown, field: string): FileSystemSpecialPath {
  if (!isObj(v)) shape(field, 'must be an object with a `kind`');
  const kind = v.kind;
  if (typeof kind !== 'string') shape(`${field}.kind`, 'must be a string');
  const subpath = parseSubpath(v.subpath, `${field}.subpath`);
  const withSub = <T extends object>(o: T): T => (subpath === undefined ? o : { ...o, subpath });
  if (kind === 'minimal') {
    if (subpath !== undefined) shape(`${field}.subpath`, 'is not allowed for `minimal`');
    return { kind };
  }
  if (kind === 'unknown') {
    if (typeof v.path !== 'string') shape(`${field}.path`, 'must be a string');
    return withSub({ kind: 'unknown' as const, path: v.path });
  }
  if ((SPECIAL_KINDS as readonly string[]).includes(kind)) {
    return withSub({ kind } as FileSystemSpecialPath);
  }
  // A token this version does not know yet: keep it loadable, as Codex does.
  return withSub({ kind: 'unknown' as const, path: `:${kind}` });
}

function parseAccess(v: unknown, field: string): FileSystemAccessMode {
  if (v === 'read' || v === 'write' || v === 'deny') return v;
  if (v === 'none') return 'deny';
  return shape(field, `must be one of "read", "write", "deny" (or "none"), got ${JSON.stringify(v)}`);
}

function parseEntry(v: unknown, field: string, flavor: PathFlavor): FileSystemSandboxEntry {
  if (!isObj(v)) shape(field, 'must be an object');
  const access = parseAccess(v.access, `${field}.access`);
  const p = v.path;
  if (!isObj(p)) shape(`${field}.path`, 'must be an object with a `type`');
  let fsPath: FileSystemPath;
  if (p.type === 'path') {
    fsPath = { type: 'path', path: parseNativePath(p.path, `${field}.path.path`, flavor) };
  } else if (p.type === 'glob_pattern') {
    if (typeof p.pattern !== 'string' || p.pattern === '' || p.pattern.includes('\0')) {
      shape(`${field}.path.pattern`, 'must be a non-empty string without NUL bytes');
    }
    if (access !== 'deny') shape(`${field}.access`, `must be "deny" for a glob_pattern entry, got "${access}"`);
    fsPath = { type: 'glob_pattern', pattern: p.pattern };
  } else if (p.type === 'special') {
    fsPath = { type: 'special', value: parseSpecial(p.value, `${field}.path.value`) };
  } else {
    return shape(`${field}.path.type`, `must be "path", "glob_pattern" or "special", got ${JSON.stringify(p.type)}`);
  }
  const entry: FileSystemSandboxEntry = { path: fsPath, access };
  const mpb = v.missing_path_behavior;
  if (mpb !== undefined && mpb !== null) {
    if (mpb !== 'skip' && mpb !== 'error') shape(`${field}.missing_path_behavior`, `must be "skip" or "error", got ${JSON.stringify(mpb)}`);
    entry.missing_path_behavior = mpb;
  }
  return entry;
}

function parseNetwork(v: unknown, field: string): NetworkPermission {
  if (v === undefined || v === null) return 'restricted';
  if (v === 'restricted' || v === 'enabled') return v;
  return shape(field, `must be "restricted" or "enabled", got ${JSON.stringify(v)}`);
}

/** Decode a PermissionProfile from JSON (paths may be absolute native paths or file:// URIs). */
export function parsePermissionProfile(v: unknown, options: ParseProfileOptions = {}, field = 'permissions'): PermissionProfile {
  const flavor = options.flavor ?? (process.platform === 'win32' ? 'win32' : 'posix');
  if (!isObj(v)) shape(field, 'must be an object with a `type`');
  if (v.type === 'disabled') return { type: 'disabled' };
  if (v.type === 'external') return { type: 'external', network: parseNetwork(v.network, `${field}.network`) };
  if (v.type !== 'managed') shape(`${field}.type`, `must be "managed", "disabled" or "external", got ${JSON.stringify(v.type)}`);
  const fsv = v.file_system;
  if (!isObj(fsv)) shape(`${field}.file_system`, 'must be an object with a `type`');
  let file_system: ManagedFileSystemPermissions;
  if (fsv.type === 'unrestricted') {
    file_system = { type: 'unrestricted' };
  } else if (fsv.type === 'restricted') {
    const raw = fsv.entries ?? [];
    if (!Array.isArray(raw)) shape(`${field}.file_system.entries`, 'must be an array');
    const entries = raw.map((e, i) => parseEntry(e, `${field}.file_system.entries[${i}]`, flavor));
    file_system = { type: 'restricted', entries };
    const depth = fsv.glob_scan_max_depth;
    if (depth !== undefined && depth !== null) {
      if (typeof depth !== 'number' || !Number.isSafeInteger(depth) || depth < 1) {
        shape(`${field}.file_system.glob_scan_max_depth`, `must be a positive integer, got ${JSON.stringify(depth)}`);
      }
      file_system.glob_scan_max_depth = depth;
    }
  } else {
    return shape(`${field}.file_system.type`, `must be "restricted" or "unrestricted", got ${JSON.stringify(fsv.type)}`);
  }
  return { type: 'managed', file_system, network: parseNetwork(v.network, `${field}.network`) };
}

export interface SerializeProfileOptions {
  /** Write `path` entries as file:// URIs (the exec-server transport form). */
  uriPaths?: boolean;
  flavor?: PathFlavor;
}

/** The JSON Codex writes for a profile (field order and snake_case as serde emits them). */
export function permissionProfileToJson(profile: PermissionProfile, options: SerializeProfileOptions = {}): unknown {
  const flavor = options.flavor ?? (process.platform === 'win32' ? 'win32' : 'posix');
  if (profile.type === 'disabled') return { type: 'disabled' };
  if (profile.type === 'external') return { type: 'external', network: profile.network };
  const fsJson: Record<string, unknown> = { type: profile.file_system.type };
  if (profile.file_system.type === 'restricted') {
    fsJson.entries = profile.file_system.entries.map((e) => {
      let p: Record<string, unknown>;
      if (e.path.type === 'path') {
        p = { type: 'path', path: options.uriPaths ? pathToFileUri(e.path.path, flavor) : e.path.path };
      } else if (e.path.type === 'glob_pattern') {
        p = { type: 'glob_pattern', pattern: e.path.pattern };
      } else {
        p = { type: 'special', value: { ...e.path.value } };
      }
      const out: Record<string, unknown> = { path: p, access: e.access };
      if (e.missing_path_behavior !== undefined) out.missing_path_behavior = e.missing_path_behavior;
      return out;
    });
    if (profile.file_system.glob_scan_max_depth !== undefined) fsJson.glob_scan_max_depth = profile.file_system.glob_scan_max_depth;
  }
  return { type: 'managed', file_system: fsJson, network: profile.network };
}

const special = (value: FileSystemSpecialPath): FileSystemPath => ({ type: 'special', value });

/** Codex `PermissionProfile::read_only()`: `:root` readable, network restricted. */
export function readOnlyProfile(): PermissionProfile {
  return {
    type: 'managed',
    file_system: { type: 'restricted', entries: [{ path: special({ kind: 'root' }), access: 'read' }] },
    network: 'restricted',
  };
}

export interface WorkspaceWriteOptions {
  writableRoots?: string[];
  excludeTmpdirEnvVar?: boolean;
  excludeSlashTmp?: boolean;
  network?: NetworkPermission;
  /** How `.git` is carved out: Codex protects it `whole` (the default here too, for fidelity). */
  git?: GitProtection;
}

/** Codex `workspace_write`: root read, project roots / tmp writable, metadata carved out read-only. */
export function workspaceWriteProfile(options: WorkspaceWriteOptions = {}): PermissionProfile {
  const git = options.git ?? 'whole';
  const entries: FileSystemSandboxEntry[] = [
    { path: special({ kind: 'root' }), access: 'read' },
    { path: special({ kind: 'project_roots' }), access: 'write' },
  ];
  if (!options.excludeSlashTmp) entries.push({ path: special({ kind: 'slash_tmp' }), access: 'write' });
  if (!options.excludeTmpdirEnvVar) entries.push({ path: special({ kind: 'tmpdir' }), access: 'write' });
  for (const root of options.writableRoots ?? []) entries.push({ path: { type: 'path', path: root }, access: 'write' });
  const gitSubpaths = git === 'whole' ? ['.git'] : ['.git/hooks', '.git/config'];
  for (const sub of [...gitSubpaths, '.agents', '.codex']) {
    const already = entries.some(
      (e) => e.path.type === 'special' && e.path.value.kind === 'project_roots' && 'subpath' in e.path.value && e.path.value.subpath === sub,
    );
    if (!already) {
      entries.push({ path: special({ kind: 'project_roots', subpath: sub }), access: 'read', missing_path_behavior: 'skip' });
    }
  }
  for (const root of options.writableRoots ?? []) {
    for (const p of defaultReadOnlySubpathsForWritableRoot(root, git)) {
      if (!entries.some((e) => e.path.type === 'path' && e.path.path === p)) entries.push({ path: { type: 'path', path: p }, access: 'read' });
    }
  }
  return { type: 'managed', file_system: { type: 'restricted', entries }, network: options.network ?? 'restricted' };
}

/** The existing metadata paths of an explicit writable root (Codex's default_read_only_subpaths). */
export function defaultReadOnlySubpathsForWritableRoot(root: string, git: GitProtection = 'whole'): string[] {
  const out: string[] = [];
  const dotGit = path.join(root, '.git');
  if (lstatOrNull(dotGit) !== null) {
    for (const p of protectedMetadataFor(root, git)) {
      if (isWithin(p, path.join(root, '.git')) || !isWithin(p, root)) out.push(p);
    }
  }
  const agents = lstatOrNull(path.join(root, '.agents'));
  if (agents?.isDirectory()) out.push(path.join(root, '.agents'));
  if (lstatOrNull(path.join(root, '.codex')) !== null) out.push(path.join(root, '.codex'));
  return out;
}

const PROJECT_ROOT_TOKENS = [':project_roots', ':workspace_roots', ':current_working_directory', ':cwd'];

/**
 * Codex `materialize_project_roots_with_workspace_roots`: every project-roots entry becomes one
 * path entry per workspace root (keeping access and missing-path behaviour); globs starting with a
 * project-roots token expand per root. An empty root list falls back to the policy cwd.
 */
export function materializeProjectRoots(profile: PermissionProfile, workspaceRoots: string[], policyCwd: string): PermissionProfile {
  if (profile.type !== 'managed' || profile.file_system.type !== 'restricted') return profile;
  const roots = workspaceRoots.length > 0 ? workspaceRoots : [policyCwd];
  const entries: FileSystemSandboxEntry[] = [];
  for (const e of profile.file_system.entries) {
    const keep = e.missing_path_behavior !== undefined ? { missing_path_behavior: e.missing_path_behavior } : {};
    if (e.path.type === 'special' && (e.path.value.kind === 'project_roots' || e.path.value.kind === 'current_working_directory')) {
      const sub = e.path.value.subpath;
      for (const r of roots) entries.push({ path: { type: 'path', path: sub ? joinSub(r, sub) : r }, access: e.access, ...keep });
      continue;
    }
    if (e.path.type === 'glob_pattern') {
      const pat = e.path.pattern;
      const token = PROJECT_ROOT_TOKENS.find((t) => pat === t || pat.startsWith(t + '/'));
      if (token !== undefined) {
        const tail = pat.slice(token.length + 1);
        for (const r of roots) {
          entries.push({ path: { type: 'glob_pattern', pattern: tail ? joinSub(r, tail) : r }, access: e.access, ...keep });
        }
        continue;
      }
    }
    entries.push(e);
  }
  const fsOut: ManagedFileSystemPermissions = { type: 'restricted', entries };
  if (profile.file_system.glob_scan_max_depth !== undefined) fsOut.glob_scan_max_depth = profile.file_system.glob_scan_max_depth;
  return { ...profile, file_system: fsOut };
}

function joinSub(root: string, sub: string): string {
  const p = /^[A-Za-z]:\\|^\\\\/.test(root) ? path.win32 : path.posix;
  return p.join(root, ...sub.split(/[\\/]/).filter((s) => s !== '' && s !== '.'));
}

/** Codex `has_full_disk_read_access`: unrestricted, or `:root` readable with no deny entry. */
export function hasFullDiskReadAccess(profile: PermissionProfile): boolean {
  if (profile.type !== 'managed' || profile.file_system.type === 'unrestricted') return true;
  const entries = profile.file_system.entries;
  const rootReadable = entries.some((e) => e.path.type === 'special' && e.path.value.kind === 'root' && !('subpath' in e.path.value && e.path.value.subpath) && e.access !== 'deny');
  return rootReadable && !entries.some((e) => e.access === 'deny');
}

function explicitAccess(entries: FileSystemSandboxEntry[], p: string): Access | null {
  let best: { len: number; access: Access } | null = null;
  const rank: Record<Access, number> = { read: 0, write: 1, deny: 2 };
  for (const e of entries) {
    let ep: string | null = null;
    if (e.path.type === 'path') ep = e.path.path;
    else if (e.path.type === 'special' && e.path.value.kind === 'root' && !e.path.value.subpath) ep = path.parse(p).root;
    if (ep === null || !isWithin(p, ep)) continue;
    if (best === null || ep.length > best.len || (ep.length === best.len && rank[e.access] > rank[best.access])) {
      best = { len: ep.length, access: e.access };
    }
  }
  return best?.access ?? null;
}

/**
 * Codex `with_additional_readable_roots`: a no-op under full-disk read; otherwise a `read` entry
 * is appended for each root that is not readable yet.
 */
export function withAdditionalReadableRoots(profile: PermissionProfile, roots: string[]): PermissionProfile {
  if (hasFullDiskReadAccess(profile) || profile.type !== 'managed' || profile.file_system.type !== 'restricted') return profile;
  const entries = [...profile.file_system.entries];
  for (const r of roots) {
    const a = explicitAccess(entries, r);
    if (a === 'read' || a === 'write') continue;
    entries.push({ path: { type: 'path', path: r }, access: 'read' });
  }
  return { ...profile, file_system: { ...profile.file_system, entries } };
}

export interface ProfileResolveContext {
  /** The policy cwd (relative glob patterns resolve against it). */
  cwd: string;
  /** `:tmpdir` target; default process.env.TMPDIR. Missing → the entry is skipped. */
  tmpdir?: string;
  git?: GitProtection;
  protect?: string[];
  /** Opt-in protection presets (resolve.ts PROTECT_PRESETS). */
  protectPresets?: ProtectPreset[];
  glob?: GlobLimits;
  mode?: ResolverInput['mode'];
  degraded?: boolean;
  /** Overrides the network rule derived from the profile (e.g. managed proxy routing). */
  network?: NetworkRule;
  /** Special tokens this version ignored (`unknown` kinds); filled in by the call. */
  ignored?: string[];
}

/** Compile a (materialised) profile into the resolver's entry list. */
export function profileToResolverInput(profile: PermissionProfile, ctx: ProfileResolveContext): ResolverInput {
  const base = {
    protect: ctx.protect ?? [],
    ...(ctx.protectPresets ? { protectPresets: ctx.protectPresets } : {}),
    git: ctx.git ?? 'hooks-and-config',
    mode: ctx.mode ?? 'auto',
    degraded: ctx.degraded ?? false,
    limits: {},
    // Codex orders write and deny on one path by precedence (deny wins) and runs the profile.
    equalWriteDeny: 'deny',
  } as const;
  const networkOf = (n: NetworkPermission): NetworkRule => ctx.network ?? (n === 'enabled' ? { kind: 'full' } : { kind: 'none' });
  if (profile.type === 'disabled') {
    return { ...base, root: 'write', entries: [], tmp: 'host', network: ctx.network ?? { kind: 'full' } };
  }
  if (profile.type === 'external' || profile.file_system.type === 'unrestricted') {
    return { ...base, root: 'write', entries: [], tmp: 'host', network: networkOf(profile.network) };
  }
  const rank: Record<Access, number> = { read: 0, write: 1, deny: 2 };
  let root: Access | null = null;
  const entries: ResolverEntry[] = [];
  const tmpdir = ctx.tmpdir ?? process.env.TMPDIR;
  profile.file_system.entries.forEach((e, i) => {
    const source = `permissions.file_system.entries[${i}]`;
    // Codex skips a missing writable root (one profile can list paths of several hosts); only an
    // explicit `missing_path_behavior: "error"` makes it an error.
    const missing = e.missing_path_behavior === 'skip' || (e.access === 'write' && e.missing_path_behavior !== 'error') ? 'skip' : 'default';
    const push = (p: string, protectMissingMetadata = true): void => {
      entries.push({ path: p, access: e.access, missing, source, protectMissingMetadata });
    };
    if (e.path.type === 'path') return push(e.path.path);
    if (e.path.type === 'glob_pattern') {
      const pattern = path.isAbsolute(e.path.pattern) ? e.path.pattern : path.resolve(ctx.cwd, e.path.pattern);
      const limits: GlobLimits = { ...ctx.glob };
      if (profile.file_system.type === 'restricted' && profile.file_system.glob_scan_max_depth !== undefined) {
        limits.maxDepth = profile.file_system.glob_scan_max_depth;
      }
      for (const m of expandGlob(pattern, limits)) push(m);
      return;
    }
    const v = e.path.value;
    const sub = 'subpath' in v ? v.subpath : undefined;
    const withSub = (b: string): string => (sub ? joinSub(b, sub) : b);
    switch (v.kind) {
      case 'root':
        if (sub) return push(withSub(path.parse(ctx.cwd).root));
        if (root === null || rank[e.access] > rank[root]) root = e.access;
        return;
      case 'minimal':
        // Platform defaults: planners add them whenever reads are restricted.
        return;
      case 'project_roots':
      case 'current_working_directory':
        return push(withSub(ctx.cwd));
      case 'tmpdir':
        if (tmpdir !== undefined && tmpdir !== '' && path.isAbsolute(tmpdir)) push(withSub(tmpdir), false);
        return;
      case 'slash_tmp':
        if (process.platform !== 'win32') push(withSub('/tmp'), false);
        return;
      case 'unknown':
        ctx.ignored?.push(v.path);
        return;
    }
  });
  // /tmp is the host's when the profile makes it writable, read-only otherwise.
  const realTmp = process.platform === 'win32' ? null : realpathOrNull('/tmp');
  const writableContainsTmp = (e: ResolverEntry): boolean => {
    if (e.access !== 'write' || realTmp === null) return false;
    const r = realpathOrNull(e.path);
    return r !== null && isWithin(realTmp, r);
  };
  const tmpWritable = root === 'write' || entries.some(writableContainsTmp);
  return { ...base, root, entries, tmp: tmpWritable ? 'host' : 'none', network: networkOf(profile.network) };
}
