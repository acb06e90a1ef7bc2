/**
 * Permission model: the ergonomic policy and Codex PermissionProfile JSON both compile, through
 * one resolver (resolve.ts), into ResolvedRules (lib/rules.ts).
 */
import type { SandboxPolicy } from '../policy-types';
import type { ResolvedRules } from '../rules';
import { compilePolicy } from './policy';
import { resolveEntries } from './resolve';

export { isLikelySandboxDenied } from './denial';
export {
  isSecretEnvName,
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
  return resolveEntries(compilePolicy(policy, cwd));
}
