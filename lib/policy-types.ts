/**
 * The public, ergonomic policy shape accepted by spawn()/run() and produced by the CLI flags.
 * lib/permissions compiles it (and Codex PermissionProfile JSON) into ResolvedRules (lib/rules.ts).
 */
export type TmpMode = 'private' | 'host' | 'none';
export type SandboxMode = 'auto' | 'isolated' | 'landlock';
/**
 * The user's package-manager and build caches (~/.npm, ~/.cache, ~/.cargo, ~/go, pnpm's store,
 * yarn's global folder). 'private' (default): the command gets a private writable cache that
 * starts from the host's (isolated mode: an overlay whose lower layer is the host's directory) or
 * empty (Landlock mode: environment variables point the tools into the run's TMPDIR), and nothing
 * it writes reaches the host's. 'host-readonly': the host's, read-only (installs that write the
 * cache fail). 'host-writable': the host's, writable (a command can poison what the host later
 * installs or builds from it).
 */
export type CachesMode = 'private' | 'host-readonly' | 'host-writable';

export interface ProxyPolicy {
  /** Domain patterns: `example.com`, `*.example.com` (subdomains), `**.example.com` (apex+subdomains). */
  allow: string[];
  deny?: string[];
  /** Let allowed names resolve to loopback/private addresses (local services). */
  allowLocal?: boolean;
  /**
   * `limited`: only GET, HEAD, OPTIONS; no CONNECT (with TLS interception on the proxy, CONNECT is
   * opened and each request inside it is checked), no WebSocket.
   */
  mode?: 'full' | 'limited';
}

export interface FilesystemPolicy {
  /** 'all' (default) or the only readable roots. */
  read?: 'all' | string[];
  /** Writable roots. Default: none. */
  write?: string[];
  /** Unreadable paths (files or directories). */
  denyRead?: string[];
  /** Extra read-only carve-outs inside writable roots (added to the defaults). */
  protect?: string[];
  /**
   * Named sets of protected names, searched in every writable root. 'startup-files': shell,
   * editor, git and agent start-up files (.bashrc, .bash_profile, .zshrc, .zprofile, .profile,
   * .gitconfig, .gitmodules, .mcp.json, .ripgreprc, .vscode/, .idea/, .claude/commands,
   * .claude/agents): at the root of each writable root even when missing, and existing ones up to
   * 3 levels below (within 512 directories; the report says when the search was cut short).
   */
  protectPresets?: Array<'startup-files'>;
  /**
   * How `.git` inside a writable root is protected. Default 'hooks-and-config': hooks, config and
   * what config points at are read-only. 'whole': all of `.git`. With either, a missing `.git`
   * cannot be created (no `git init`). 'allow-init': like the default for an existing `.git`, and
   * a missing one may be created (the report lists this gap).
   */
  git?: 'hooks-and-config' | 'whole' | 'allow-init';
  tmp?: TmpMode;
  /** The user's tool caches (see CachesMode). Default 'private'. Linux only so far. */
  caches?: CachesMode;
}

export interface ResourceLimits {
  /** Max processes+threads of the sandbox's uid (RLIMIT_NPROC in isolated mode). */
  maxProcesses?: number;
  /** Address-space limit in bytes per process (RLIMIT_AS). */
  memoryBytes?: number;
  /** Max open files per process (RLIMIT_NOFILE). */
  openFiles?: number;
  /**
   * Linux isolated mode: total size of the private tmpfs mounts (default 1 GiB): /tmp gets three
   * quarters, /dev/shm one quarter. Their pages are RAM; memoryBytes covers them only where a
   * memory cgroup enforces it (see the report's mechanisms.memoryCap).
   */
  tmpBytes?: number;
}

export interface SandboxPolicy {
  filesystem?: FilesystemPolicy;
  /**
   * 'none' (default), 'full', or an object: `proxy` routes TCP through the managed proxy (absent:
   * no network), `unixSockets` lists the unix socket paths the command may connect to ('all':
   * any). On Linux a list cannot be enforced as such (nothing in this kernel filters connect() by
   * path): it is refused unless degraded, and then any visible pathname socket is connectable.
   */
  network?: 'none' | 'full' | { proxy?: ProxyPolicy; unixSockets?: string[] | 'all' };
  mode?: SandboxMode;
  /** Accept a weaker enforcement and list every gap in the report instead of refusing. */
  degraded?: boolean;
  /**
   * Linux Landlock mode: hide other processes' /proc entries and the host's network tables
   * (/proc/net) from the command. Every read-only open then goes through the seccomp supervisor,
   * which costs a round trip per open (docs/security.md, docs/performance.md). Isolated mode's
   * /proc is private already: accepted there, it changes nothing. Refused where the supervisor
   * cannot run. Default false.
   */
  procPrivacy?: boolean;
  limits?: ResourceLimits;
}
