/**
 * Permission model: the ergonomic policy and Codex PermissionProfile JSON both compile, through
 * one resolver (resolve.ts), into ResolvedRules (lib/rules.ts).
 */
import type { SandboxPolicy } from '../policy-types';
import type { ResolvedRules } from '../rules';
import { hostWritableCaches } from '../platform/linux/caches';
import { realpathOrNull } from './canonical';
import { compilePolicy } from './policy';
import { resolveEntries } from './resolve';

export { isLikelySandboxDenied } from './denial';
export {
  isSecretEnvName,
  isSecretEnvEntry,
  hasCredentialUrl,
  withoutSecretEnv,
  applyEnvPolicy,
  parseEnvPolicy,
  SECRET_ENV_PATTERNS,
  CODEX_DEFAULT_ENV_EXCLUDES,
  type ExecEnvPolicy,
} from './env';
export { resolveEntries, protectedMetadataFor } from './resolve';
export type { Access, ResolverEntry, ResolverInput, GitProtection, MissingBehavior } from './resolve';
export { compilePolicy, compileNetwork } from './policy';
export type { SandboxType } from './sandbox-type';
export { SANDBOX_TYPES } from './sandbox-type';

/**
 * Validate the public `policy` option strictly and resolve it into ResolvedRules.
 * Throws SandboxError('EINVALID_POLICY') naming the field, or ('ESYMLINK_ROOT').
 */
export function resolvePolicy(policy: SandboxPolicy | undefined, cwd: string): ResolvedRules {
  const input = compilePolicy(policy, cwd);
  // 'host-writable' caches (Linux): the host's cache directories become writable roots here, so
  // that they get the carve-outs of any root. Taken from the host process's environment only.
  if (input.caches === 'host-writable' && process.platform === 'linux') {
    const writeRoots = input.entries.filter((e) => e.access === 'write').map((e) => realpathOrNull(e.path) ?? e.path);
    for (const { site, real } of hostWritableCaches(writeRoots)) {
      input.entries.push({ path: real, access: 'write', missing: 'skip', source: `policy.filesystem.caches (${site.name}: ${site.path})` });
    }
  }
  const rules = resolveEntries(input);
  // The planners read filesystem.caches for the rest (overlays, env, the report).
  return input.caches ? { ...rules, caches: input.caches } : rules;
}

export {
  parsePermissionProfile,
  permissionProfileToJson,
  readOnlyProfile,
  workspaceWriteProfile,
  defaultReadOnlySubpathsForWritableRoot,
  materializeProjectRoots,
  hasFullDiskReadAccess,
  withAdditionalReadableRoots,
  profileToResolverInput,
  ProfileError,
  type PermissionProfile,
  type FileSystemAccessMode,
  type FileSystemPath,
  type FileSystemSpecialPath,
  type FileSystemSandboxEntry,
  type ManagedFileSystemPermissions,
  type NetworkPermission,
  type MissingPathBehavior,
  type ParseProfileOptions,
  type SerializeProfileOptions,
  type WorkspaceWriteOptions,
  type ProfileResolveContext,
} from './profile';
export { expandGlob, DEFAULT_GLOB_MAX_DEPTH, DEFAULT_GLOB_MAX_MATCHES, type GlobLimits } from './glob';
export { parseFileUri, fileUriToPath, pathToFileUri, FileUriError, type ParsedFileUri, type PathFlavor } from './uri';

import { profileToResolverInput as toInput, type PermissionProfile as Profile, type ProfileResolveContext as Ctx } from './profile';

/** Resolve a (materialised) PermissionProfile into ResolvedRules through the same resolver. */
export function resolveProfile(profile: Profile, ctx: Ctx): ResolvedRules {
  return resolveEntries(toInput(profile, ctx));
}
