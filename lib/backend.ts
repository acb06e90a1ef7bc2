/**
 * The contract between the process handle (lib/child.ts) and each platform backend
 * (lib/platform/linux/index.ts, win32.ts, darwin.ts). A backend turns a BackendSpawnRequest into a live
 * process and reports, synchronously, what it enforced. It throws SandboxError before anything
 * runs when it cannot enforce the rules (fail closed).
 */
import type { Readable, Writable } from 'node:stream';
import type { SpawnNetworkOptions } from './network';
import type { ResolvedRules } from './rules';
import type { ChangesBackend, ChangesMode, ChangesOptions } from './changes/types';

/** Per-fd stdio choice: a pipe to JS, the parent's own fd, /dev/null, or a given fd number. */
export type StdioSpec = 'pipe' | 'inherit' | 'ignore' | number;

export interface BackendSpawnRequest {
  /** Absolute path of the executable (PATH lookup already done with the child's PATH). */
  file: string;
  /** argv including argv[0] (= arg0 when the caller gave one). */
  argv: string[];
  /** Exactly the child's environment. */
  env: Record<string, string>;
  /** Absolute, existing directory. */
  cwd: string;
  /** stdio[0..2], then extra fds to pass through unchanged at the same numbers. */
  stdio: StdioSpec[];
  /** null: run plainly (explicit `policy: null`). */
  rules: ResolvedRules | null;
  /** Managed-network hooks, used when rules.network is a proxy. */
  network?: SpawnNetworkOptions;
  /** The caller chose an argv[0] other than the command (a wrapper like sandbox-exec cannot pass one). */
  arg0Customized?: boolean;
  /** Run on a pseudo-terminal of this size (stdio is then ignored: fds 0-2 are the terminal). */
  pty?: { cols: number; rows: number };
  /** Record or stage what the command changes in its writable roots (lib/changes); validated. */
  changes?: ChangesOptions;
}

export type Guarantee = 'enforced' | 'not-enforced' | 'partial' | 'not-requested';

export interface EnforcementReport {
  platform: NodeJS.Platform;
  /** false only for an explicit unsandboxed run. */
  sandboxed: boolean;
  /** Which backend mode actually ran. */
  mode: 'none' | 'isolated' | 'landlock' | 'seatbelt' | 'restricted-token';
  /** Mechanism facts, e.g. { landlockAbi: 7, seccomp: 'filter', namespaces: ['user','mnt',...] }. */
  mechanisms: Record<string, unknown>;
  /** What holds for this run. */
  guarantees: {
    /** 'all': reads were not restricted at all (no read roots, no deny-read paths). */
    filesystemRead: Guarantee | 'all';
    filesystemWrite: Guarantee;
    protectedPaths: Guarantee;
    denyRead: Guarantee;
    network: Guarantee;
    processIsolation: Guarantee;
    treeTeardown: Guarantee;
  };
  /** Every known gap (only non-empty in degraded mode or for not-enforced aspects). */
  gaps: string[];
  /**
   * Linux Landlock mode: the gaps that needed `degraded` (a guarantee the policy asks for that
   * this run does not hold). Empty: every requested guarantee held, and neither `mode: 'auto'` nor
   * `mode: 'landlock'` needed `degraded`; the other gaps are facts, not failures (e.g. /dev/shm).
   */
  degradedBy?: string[];
  /**
   * Per-process resource limits applied to this run (null: none set). Filled in by spawn() from
   * the policy when the backend does not report them itself; `gaps` says where one is not enforced.
   */
  limits?: { maxProcesses: number | null; memoryBytes: number | null; openFiles: number | null };
  /**
   * Advice for this run that is neither a guarantee nor a gap: what a command may trip over that
   * the sandbox is right to refuse (e.g. a proxied run's note on Node's fetch). Absent: none.
   */
  notes?: string[];
  /** The `changes` option in force for this run (lib/changes). Absent: none. */
  changes?: ChangesMode;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /**
   * The backend stopped the tree because the run passed a limit it checks from outside (Linux
   * Landlock mode: limits.tmpBytes on the per-run TMPDIR); `message` says what was measured.
   */
  limitExceeded?: { limit: 'tmpBytes'; message: string };
  /**
   * What the host could not remove after the run (e.g. an entry the uid cannot delete left in the
   * per-run TMPDIR). Cleanup never throws; the same text is emitted as a process warning
   * (code PSB_CLEANUP).
   */
  cleanupLeft?: string[];
}

export interface BackendProcess {
  /** undefined until `started` resolves for a deferred start; set from the start otherwise. */
  pid: number | undefined;
  /**
   * Deferred start (Windows, sandboxed: the ACL edits run off the JS thread first). Absent: the
   * command was started before spawn() returned (Linux, macOS). Resolves with the pid once the
   * command runs; resolves null when kill() cancelled the start (nothing ran; `exited` resolves
   * with the signal); rejects with a SandboxError when it could not start (`exited` rejects with
   * the same error). Either way, what the backend changed for the run is undone first. spawn()
   * still throws synchronously for bad input and unenforceable policies.
   */
  started?: Promise<number | null>;
  /**
   * Streams for the fds that were 'pipe' (index = fd), null otherwise. For a deferred start they
   * exist at once: stdin writes are queued until the start, outputs flow after it.
   */
  stdio: Array<Readable | Writable | null>;
  /** Signals the whole sandboxed tree (process group / namespace init / job); cancels a deferred start. */
  kill(signal: NodeJS.Signals | number): boolean;
  /** Resolves once, when the command has exited (its status, not init's). */
  exited: Promise<ExitInfo>;
  enforcement: EnforcementReport;
  /** With `pty`: the master side (one duplex stream of terminal output/input) and its resize. */
  pty?: { stream: Readable & Writable; resize(cols: number, rows: number): void };
  /** Whether the exit watch keeps the host's event loop alive (SandboxedProcess.ref/unref). */
  setRef?(on: boolean): void;
  /** With `changes`: the journal or layer of this run (lib/changes/types.ts). */
  changes?: ChangesBackend;
}

export interface ProbeReport {
  platform: NodeJS.Platform;
  arch: string;
  addonLoaded: boolean;
  addonError?: string;
  /** The mode `auto` would choose, or null when nothing can be enforced. */
  defaultMode: EnforcementReport['mode'] | null;
  /** Backend-specific facts (landlock ABI, userns, seccomp, ...). */
  features: Record<string, unknown>;
}

export interface Backend {
  readonly name: string;
  spawn(req: BackendSpawnRequest): BackendProcess;
  probe(): ProbeReport;
}

/** The report of an explicit unsandboxed run (`policy: null`): nothing was requested or enforced. */
export function unsandboxedReport(
  platform: NodeJS.Platform,
  extra: { mechanisms?: Record<string, unknown>; treeTeardown?: Guarantee; gaps?: string[] } = {},
): EnforcementReport {
  return {
    platform,
    sandboxed: false,
    mode: 'none',
    mechanisms: extra.mechanisms ?? {},
    guarantees: {
      filesystemRead: 'not-requested',
      filesystemWrite: 'not-requested',
      protectedPaths: 'not-requested',
      denyRead: 'not-requested',
      network: 'not-requested',
      processIsolation: 'not-requested',
      treeTeardown: extra.treeTeardown ?? 'not-requested',
    },
    gaps: extra.gaps ?? [],
  };
}
