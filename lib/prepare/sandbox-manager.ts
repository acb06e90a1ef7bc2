/**
 * A small sandbox manager: Codex's `select_sandbox` + `SandboxManager::select_initial`.
 * The exec-server path always uses the `require` preference, so a request that carries a sandbox
 * context is always sandboxed where the platform has a sandbox, even for a `disabled` profile.
 */
import type { SandboxType } from '../permissions/sandbox-type';
import type { PermissionProfile } from '../permissions/profile';

export type WindowsSandboxSelection = 'disabled' | 'restricted-token' | 'elevated' | 'mxc';
export type SandboxPreference = 'auto' | 'require' | 'forbid';

/** `get_platform_sandbox(windows_enabled)`. */
export function platformSandbox(platform: NodeJS.Platform, windowsEnabled: boolean): SandboxType {
  if (platform === 'darwin') return 'macosSeatbelt';
  if (platform === 'linux') return 'linuxSeccomp';
  if (platform === 'win32') return windowsEnabled ? 'windowsRestrictedToken' : 'none';
  return 'none';
}

/** `should_require_platform_sandbox` for the `auto` preference. */
export function shouldRequirePlatformSandbox(profile: PermissionProfile, hasManagedNetworkRequirements: boolean): boolean {
  if (hasManagedNetworkRequirements) return true;
  if (profile.type === 'disabled' || profile.type === 'external') return false;
  if (profile.network === 'restricted') return true;
  if (profile.file_system.type === 'unrestricted') return false;
  // Restricted file system with the network enabled: sandbox unless it grants full-disk write.
  const entries = profile.file_system.entries;
  const rootWrite = entries.some((e) => e.path.type === 'special' && e.path.value.kind === 'root' && e.access === 'write');
  return !(rootWrite && entries.every((e) => e.access === 'write'));
}

export interface SelectSandboxInput {
  platform: NodeJS.Platform;
  profile: PermissionProfile;
  windowsSandboxLevel: WindowsSandboxSelection;
  enforceManagedNetwork: boolean;
  preference?: SandboxPreference;
  /** Whether this executor can enforce a type (default: yes for the platform's own type). */
  supported?: ((type: SandboxType) => boolean) | undefined;
}

export interface SandboxSelection {
  sandboxType: SandboxType;
  /** The Windows level for restricted-token sandboxes. */
  windowsLevel?: 'restricted-token' | 'elevated';
}

export function selectSandbox(input: SelectSandboxInput): SandboxSelection {
  const pref = input.preference ?? 'require';
  if (input.windowsSandboxLevel === 'mxc') return { sandboxType: 'windowsMxc' };
  const windowsLevel =
    input.windowsSandboxLevel === 'restricted-token' || input.windowsSandboxLevel === 'elevated' ? input.windowsSandboxLevel : undefined;
  const should =
    pref === 'require' ? true : pref === 'forbid' ? false : shouldRequirePlatformSandbox(input.profile, input.enforceManagedNetwork);
  if (!should) return { sandboxType: 'none' };
  const type = platformSandbox(input.platform, windowsLevel !== undefined);
  if (type === 'none') return { sandboxType: 'none' };
  if (input.supported !== undefined && !input.supported(type)) return { sandboxType: 'none' };
  return type === 'windowsRestrictedToken' && windowsLevel !== undefined ? { sandboxType: type, windowsLevel } : { sandboxType: type };
}
