/**
 * ResolvedRules: the single internal form every request compiles to (the public `policy` option,
 * the CLI flags, and Codex PermissionProfile JSON all go through lib/permissions). Platform planners
 * (lib/platform/*) consume only this. All paths are absolute and canonical (symlinks resolved).
 */
import type { CachesMode, ProxyPolicy, SandboxMode, TmpMode, ResourceLimits } from './policy-types';

export type NetworkRule =
  | { kind: 'none'; unixSockets?: UnixSocketRule; unixSocketsRefused?: string[] }
  | { kind: 'full' }
  | { kind: 'proxy'; proxy: Required<Pick<ProxyPolicy, 'allow'>> & ProxyPolicy; unixSockets?: UnixSocketRule; unixSocketsRefused?: string[] };
// unixSocketsRefused: socket paths a Codex managed network listed (allowUnixSockets) that stay
// unreachable, as in Codex on Linux, where a managed network keeps AF_UNIX refused whatever the
// list says; the report names them. Never a grant.

/**
 * Opt-in protection presets. 'startup-files': files and directories that shells, editors, git
 * and agent tools read and act on later (sandbox-runtime's mandatory deny list): a command that
 * rewrites them runs code outside the sandbox the next time a shell, editor or agent starts there.
 */
export type ProtectPreset = 'startup-files';

/** Unix sockets the command may connect to by path: a list of socket paths, or 'all'. */
export type UnixSocketRule = string[] | 'all';

export interface ResolvedRules {
  /** true: the whole filesystem is readable (minus denyRead). */
  readAll: boolean;
  /** When readAll is false: the only readable roots (platform defaults are added by the planner). */
  readRoots: string[];
  /** Writable roots, canonical, existing directories or files. */
  writeRoots: string[];
  /**
   * Read-only carve-outs inside writable roots (.git/hooks, .git/config, .codex, .agents, user
   * `protect` entries, resolved gitdirs). May not exist yet: then they must not be creatable.
   */
  readOnly: string[];
  /**
   * The readOnly entries protected only because they existed at planning (nested repositories'
   * metadata, start-up files below a root, unreadable directories, metadata in shared scratch
   * roots). One that vanishes before the mounts leaves nothing to protect, and a fresh plan would
   * not hold its name either, so the mount step skips it (linux/plan.ts). Absent when empty.
   */
  presentOnly?: string[];
  /** Unreadable paths, canonical. Existing paths only (globs are expanded before this point). */
  denyRead: string[];
  tmp: TmpMode;
  /** The user's tool caches (absent: 'private'; lib/platform/linux/caches.ts). */
  caches?: CachesMode;
  network: NetworkRule;
  mode: SandboxMode;
  degraded: boolean;
  /** Linux Landlock mode: other processes' /proc entries and /proc/net hidden (policy.procPrivacy). */
  procPrivacy?: boolean;
  limits: ResourceLimits;
  /** Gaps the caller opted into at resolution time (e.g. git: 'allow-init'); every report lists them. */
  gaps?: string[];
  /**
   * Opt-in protection presets that were asked for (filesystem.protectPresets). Their paths are
   * already in readOnly; a planner that can match names at any depth (macOS) also uses this.
   */
  protectPresets?: ProtectPreset[];
}
