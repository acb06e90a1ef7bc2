/** Codex's SandboxType, as it appears on the wire (`ExecResponse.sandboxType`). */
export type SandboxType = 'none' | 'linuxSeccomp' | 'macosSeatbelt' | 'windowsRestrictedToken' | 'windowsMxc';

export const SANDBOX_TYPES: readonly SandboxType[] = [
  'none',
  'linuxSeccomp',
  'macosSeatbelt',
  'windowsRestrictedToken',
  'windowsMxc',
];
