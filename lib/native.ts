/**
 * The only module that loads the addon. node-gyp-build picks build/Release in development and
 * prebuilds/<platform>-<arch>/ in an installed package. A load failure becomes
 * SandboxError('EADDON_LOAD') naming the platform tag, the original error and the fix.
 */
import * as path from 'node:path';
import { ERROR_CODES, SandboxError } from './errors';

export type LinuxMountOp = { kind: number; path: string; data?: string; arg?: number };
export type LinuxStdio = number | 'in' | 'out';

export interface LinuxNativePlan {
  mode: 'plain' | 'isolated' | 'landlock';
  file: string;
  argv: string[];
  envp: string[];
  cwd: string;
  stdio: LinuxStdio[];
  setsid?: boolean;
  /** fd 0 is a pty slave: make it the controlling terminal (needs setsid). */
  ctty?: boolean;
  /** Isolated mode: init opens a pty of this size in the sandbox's devpts (needs ctty). */
  ptyCols?: number;
  ptyRows?: number;
  newNet?: boolean;
  mounts?: LinuxMountOp[];
  tmpSlots?: number;
  landlock?: {
    net: 'none' | 'proxy' | 'full';
    scopeSignals?: boolean;
    /**
     * exact: opened without following links; gone or swapped for a link: no rule (landlock.h).
     * volatile: a prepared sandbox does not check that the path still names the inode its rule
     * was made for (the entries of the host's temp dir, linux/plan.ts tmpShield).
     */
    rules: Array<{ path: string; access: 'read' | 'write' | 'device' | 'list'; exact?: boolean; volatile?: boolean }>;
    connectPorts?: number[];
    /** Landlock mode: device rights for the terminals on fds 0-2, by inode (landlock.h). */
    stdioTerminals?: boolean;
    /**
     * Landlock mode: the policy's outer envelope (its grants before deny-read carving: readable
     * and writable roots whole, devices, TMPDIR). The supervision's thread confines itself to it
     * (plus /proc and the terminals on stdio) before it spawns the command
     * (native/linux/supervisor/supervision_envelope.cc).
     */
    envelope?: Array<{ path: string; access: 'read' | 'write' | 'device' | 'list'; exact?: boolean }>;
  };
  /** unixSockets: allow socket(AF_UNIX, SOCK_STREAM|SOCK_SEQPACKET) whatever `net` says. */
  /**
   * connectSupervisor (Landlock mode, net 'proxy'): the proxy's port. connect() calls stop in a
   * seccomp user notification, answered by the host (native/linux/supervisor/supervise_connect.cc).
   */
  /**
   * metadataSupervisor (Landlock mode): chmod/chown/utime/xattr calls stop in a seccomp user
   * notification and the host carries them out inside `writable` and outside `protect` only
   * (native/linux/supervisor/supervise_metadata.cc). Canonical absolute paths.
   */
  seccomp?: {
    net: 'none' | 'proxy' | 'full';
    unixSockets?: boolean;
    connectSupervisor?: number;
    /** Landlock mode below ABI 6: signal calls go to the host's signal supervisor (members only). */
    signalSupervisor?: boolean;
    /** Landlock mode, procPrivacy: read-only opens go to the read supervisor (supervise_reads.cc). */
    readSupervisor?: boolean;
    /**
     * Isolated mode: the placeholders (absolute paths) whose names listings of the directories
     * holding them leave out; getdents goes to a supervisor (supervise_metadata.cc, HideRules).
     */
    hideNames?: string[];
    /** inotify: the run's share of the uid's inotify counters, counted as they are created. */
    metadataSupervisor?: {
      writable: string[];
      protect: string[];
      /** Restricted reads: inotify_add_watch is emulated for these paths only (minus denyRead). */
      readable?: string[];
      denyRead?: string[];
      /** Deny-read under readable roots: getdents of a denied directory is refused (Landlock mode). */
      listDirs?: boolean;
      /**
       * With listDirs: stat, access, readlink and xattr reads on a path go to the stat class,
       * which answers as for a missing name inside a denied directory (supervise_stats.cc).
       */
      statNames?: boolean;
      inotify?: { instances: number; watches: number };
    };
    /**
     * pathSupervisor (Landlock mode, with metadataSupervisor): read-only carve-outs inside the
     * writable roots. Write-opens, creates, renames, removals, links and truncates stop in a
     * seccomp user notification and the host carries them out unless they touch a carve-out
     * (native/linux/supervisor/supervise_paths.cc). Canonical absolute paths.
     */
    pathSupervisor?: {
      carveOuts: string[];
      /** Carve-outs protected only while they exist (a missing one is not held). */
      presentOnly: string[];
      /** Device files the command's Landlock rules let it open for writing. */
      devices: string[];
      /**
       * changes: 'record': every call on a name under `roots` is journaled in `dir` before it is
       * carried out (native/linux/supervisor/changes_journal.h; format: lib/changes/journal.ts).
       */
      changes?: { dir: string; roots: string[]; maxBytes?: number; exclude?: string[] };
    };
  };
  proxyPort?: number;
  rlimitNproc?: number;
  /** Landlock mode as root without a pids cgroup: init traces the tree and caps its tasks here. */
  traceProcessCap?: number;
  rlimitAs?: number;
  rlimitNofile?: number;
  rlimitSigpending?: number;
  rlimitMsgqueue?: number;
  /** Isolated: /proc/sys/user/max_inotify_{instances,watches} of the sandbox's user namespace. */
  inotifyInstances?: number;
  inotifyWatches?: number;
  /** Isolated: tmpfs options of the private /dev/shm. */
  shmData?: string;
  /** Open cgroup.procs/tasks fds the command joins before execve (the caller closes them). */
  cgroupFds?: number[];
}

export interface LinuxSpawnResult {
  pid: number;
  handle: object;
  fds: Array<number | null>;
  landlockAbi: number;
  /** Isolated mode with proxyPort: the listener created inside the namespace. */
  listenerFd?: number;
  /** Isolated mode with ptyCols: the master of the terminal made inside the namespace. */
  ptyFd?: number;
  /** Isolated mode without a proxy: init joined the process-wide empty network namespace. */
  sharedNetns?: boolean;
  /**
   * Landlock mode with a supervisor: whether it acts from inside the policy's outer envelope
   * (Landlock, native/linux/supervisor/supervision_envelope.h) or with the host's authority.
   */
  supervisionConfined?: boolean;
  /** Landlock mode in the supervision process (the default; not PSB_SUPERVISION=thread): its pid. */
  supervisionProcess?: number;
}

export interface LinuxProbe {
  landlockAbi: number;
  /** 0 when seccomp filters can be installed, else -errno. */
  seccomp: number;
  /**
   * 0 when Landlock mode's connect supervisor can run (seccomp user notification with a new
   * listener, pidfd_getfd, SECCOMP_IOCTL_NOTIF_ADDFD), else -errno. Absent from older addons.
   */
  connectSupervisor?: number;
  /**
   * How Landlock mode's supervisors read the command's memory and take its fds: 'pidfd'
   * (process_vm_readv, pidfd_getfd), 'procfs' (/proc/<pid>/mem, /proc/<pid>/fd: a container's
   * seccomp profile refuses the first two), 'none' (connectSupervisor is then -EPERM). Absent
   * from older addons.
   */
  supervisorAccess?: 'pidfd' | 'procfs' | 'none';
  /** 0 when user+mount+pid+net namespaces work, else -errno. */
  userns: number;
  /**
   * 0 when a fresh procfs (isolated mode's /proc) can be mounted in those namespaces, else -errno
   * (-EPERM under masked paths over /proc: rootless containers). Absent from older addons.
   */
  procfs?: number;
  /** 0 when the kernel has mount_setattr (Linux 5.12), which isolated mode's mount tree needs, else -errno. Absent from older addons. */
  mountApi?: number;
  /**
   * 0 when init can trace the command (Landlock mode's process cap as root without a cgroup), else
   * -errno (a container's seccomp profile, Yama's ptrace_scope, a host that is not dumpable).
   * Absent from older addons.
   */
  processTracing?: number;
  euid: number;
  kernel?: string;
  machine?: string;
}

/** What every build of the addon exports, whatever the system. */
interface NativeCommon {
  errorCodes: string[];
  setErrorClass(cls: typeof SandboxError): void;
}

/**
 * The Linux addon (native/linux/binding_linux.cc and the files it registers). Every member is
 * required: the Linux build exports all of them unconditionally. loadLinuxNative() checks
 * `platform` once and returns this type. The few callers that still test for a member before use
 * (openPty, prepareSpare, measureTree, the relay, srt attach) keep doing so, so that an addon built
 * from older sources degrades as it always did.
 */
export interface LinuxNative extends NativeCommon, NativeRelay {
  platform: 'linux';
  spawn(plan: LinuxNativePlan, onExit: (code: number | null, signal: number | null) => void): LinuxSpawnResult;
  /**
   * Landlock mode's spawn made and supervised by the supervision process
   * (lib/platform/linux/supervision-process.ts, native/linux/supervision_process.cc).
   */
  spawnInSupervisionProcess(plan: LinuxNativePlan, onExit: (code: number | null, signal: number | null) => void): LinuxSpawnResult;
  /** The supervision process's main loop; returns when the host is gone. */
  serveSupervision(fd: number): void;
  /** [hostFd, processFd]: the channel to a supervision process about to start. */
  supervisionSocketpair(): [number, number];
  /** Waits for the supervision process on hostFd to be ready; its pid. */
  supervisionAttach(hostFd: number, timeoutMs: number): number;
  /** The running supervision process's pid, 0 when none. */
  supervisionProcess(): number;
  /** Sandboxes prepared ahead, both modes (lib/platform/linux/spare.ts). */
  prepareSpare(plan: Omit<LinuxNativePlan, 'stdio'>, done: (err: Error | null) => void, inSupervisionProcess?: boolean): object;
  /** ptyCols/ptyRows: the size of a spare's own terminal (isolated mode), set before the go. */
  spawnSpare(
    spare: object,
    req: { file: string; argv: string[]; envp: string[]; cwd: string; stdio: LinuxStdio[]; ptyCols?: number; ptyRows?: number },
    onExit: (code: number | null, signal: number | null) => void,
  ): LinuxSpawnResult | null;
  discardSpare(spare: object): void;
  discardSpareAsync(spare: object, done: () => void): void;
  kill(handle: object, signal: number): number;
  /** Whether the exit watch of `handle` keeps the event loop alive. */
  setRef(handle: object, on: boolean): void;
  probe(): LinuxProbe;
  listenLoopback(): { fd: number; port: number };
  /** Accepts and closes every connection queued on a listener: how many, or -errno. */
  dropQueuedConnections(fd: number): number;
  /**
   * Landlock mode: whether the connection the host listener on 127.0.0.1:proxyPort accepted from
   * 127.0.0.1:peerPort is the sandbox's own (supervised: a socket the connect supervisor made for
   * this port, used up by the call; otherwise: a socket of this process's uid).
   */
  admitProxyPeer(proxyPort: number, peerPort: number, supervised: boolean): boolean;
  lockPlaceholder(path: string): number;
  releasePlaceholder(fd: number, path: string, remove: boolean): boolean;
  /** Removes an empty 0555 directory or empty 0444 file at `path`, never through a link on the way; 0 or -errno. */
  removeLookalike(path: string): number;
  /** Whether systemd marked the cgroup directory delegated (trusted.delegate or user.delegate xattr). */
  cgroupDelegated(dir: string): boolean;
  /** Reads (no value: the value, or -errno) or sets (0 or -errno) an xattr, never following a final symlink. */
  xattr?(path: string, name: string, value?: string): string | number;
  /** Tasks /proc shows for real uid `uid` (mine) and for every uid (visible). */
  uidTaskCount(uid: number): { mine: number; visible: number } | undefined;
  /** Closes an fd on the libuv thread pool (the freeing of an unlinked inode stays off the JS thread). */
  closeOnPool(fd: number): void;
  /**
   * After a `changes: 'record'` sandbox ended: waits for a journaled call in progress, then every
   * later call fails (EIO). 1 closed, 0 no journal for dir, -1 a record could not be written.
   */
  closeChangesJournal?(dir: string): number;
  /** mkfifo(2): 0 or -errno (revert puts back a FIFO a recorded command removed). */
  mkfifo?(path: string, mode: number): number;
  /**
   * Removes `name` in `parent` and everything below it without following a symlink, fixing the
   * modes of the uid's own directories first (native/linux/tree_walk.h). Never throws for the tree.
   */
  removeTree(parent: string, name: string): { left: number; errno: number; error: string; path: string };
  /** removeTree on the thread pool, with a second pass when the first left something. */
  removeTreeAsync(parent: string, name: string, done: (r: { left: number; errno: number; error: string; path: string }) => void): void;
  /** Measures a tree on the thread pool; stops once past either limit (native/linux/tree_walk.h). */
  measureTree(path: string, maxInodes: number, maxBytes: number, done: (u: { bytes: number; inodes: number; unlisted: number; cutShort: boolean }) => void): void;
  /** Directory watches for the planner's caches (native/linux/dir_watch.h). */
  dirWatchOpen(): { fd: number; mountFd: number };
  dirWatchAdd(fd: number, dir: string): number;
  dirWatchRemove(fd: number, wd: number): void;
  /** [wd, name, wd, name, ...] of the events since the last poll ('' = the directory itself), or null: consider everything changed. */
  dirWatchPoll(fd: number, mountFd: number): Array<number | string> | null;
  /** Test hook: every seccomp program checked against the rule table (native/linux/seccomp_check.cc). */
  seccompSelfCheck(): { mismatches: number; cases: number; configs: number; first: string };
  /** Test hook: a POSIX record lock (fcntl F_SETLK, whole file) taken (true) or released on fd by this process; 0 or -errno. */
  testPosixLock(fd: number, lock: boolean): number;
  /**
   * Test hook (throws unless PSB_TEST_HOOKS=1): the path supervisor's write checks to skip in this
   * process, 1: the held-terminal check, 2: the writable-root check; 0: none
   * (native/linux/supervisor/supervise_paths.h).
   */
  testSkipPathChecks(skips: number): void;
  /**
   * A check of the supervision process's plan codec (native/linux/plan_wire.h): the plan read,
   * sent as bytes and read back; same: the second encoding equals the first; refused: how many
   * of its truncations were refused (all of them: `bytes`).
   */
  testPlanWire(plan: LinuxNativePlan): { bytes: number; fds: number; same: boolean; refused: number };
  /** A pseudo-terminal pair (both close-on-exec) with the given window size. */
  openPty(cols: number, rows: number): { master: number; slave: number; name: string };
  resizePty(fd: number, cols: number, rows: number): void;
  /** A new fd for the slave of a pty master (TIOCGPTPEER). */
  ptyPeer(master: number): number;
  /** srt wrap-attach (lib/srt/attach.ts, native/linux/stdio_adopt.cc): a pidfd for `pid` and copies of its fds `fds`. */
  adoptChildStdio(pid: number, fds: number[]): { pidfd: number; fds: number[] };
  /** The exit of the child behind `pidfd` (peeked, not reaped), or null while it runs. */
  pidfdExit(pidfd: number): { code: number | null; signal: number | null } | null;
  /** mkfifo 0600 (Node has none); EEXIST is an error. */
  makeFifo(path: string): void;
}


/** The Windows addon (native/win/binding_win.cc): the members are typed by the backend (Win32Native). */
export interface Win32Binding extends NativeCommon, Win32Native {
  platform: 'win32';
}

/** The macOS addon loads only so probe() can report it (Seatbelt needs no native code). */
export interface DarwinBinding extends NativeCommon {
  platform: 'darwin';
}

/** The addon as loaded: `platform` says which system's surface it has. */
export type NativeBinding = LinuxNative | Win32Binding | DarwinBinding;

// The surfaces of the other halves are declared here, not in their users, so that this file
// imports nothing of theirs (test/network/imports.test.ts: no import circle).

export type AclOp = 'grant-write' | 'deny-write' | 'deny-delete' | 'deny-delete-child' | 'remove-denies' | 'revoke';

/** The Windows half of the addon (native/win/binding_win.cc). */
export interface Win32Native {
  winWineVersion(): string | null;
  winSidNormalize(sid: string): string;
  winSidLookup(sid: string): { domain: string; name: string; use: number };
  winSidFromName(name: string): string;
  winTokenSids(): { user: string; logon: string; world: string };
  winTokenProbe(capabilitySids: string[]): { created: boolean; restricted: boolean };
  winDesktopProbe(): {
    name: string;
    startupName: string;
    openWhileHeld: boolean;
    openAfterClose: boolean;
    errorAfterClose: number;
  };
  winAclEdit(
    op: AclOp,
    path: string,
    sid: string,
  ): boolean;
  /**
   * The same edits, in order, on a libuv thread-pool thread (the JS thread keeps turning during a
   * propagation walk). A failure stops the batch unless continueOnError; cancel() stops it before
   * the next edit. results[i]: { changed }, { error } (a SandboxError EACL_EDIT naming the API,
   * the Win32 error and the path) or null (not attempted).
   */
  winAclBatch(
    edits: Array<{ op: AclOp; path: string; sid: string }>,
    options?: { continueOnError?: boolean },
  ): {
    promise: Promise<{ results: Array<{ changed: boolean } | { error: Error } | null>; cancelled: boolean }>;
    cancel(): void;
  };
  winAclSddl(path: string): string;
  winSpawn(
    options: {
      file: string;
      commandLine: string;
      env: Array<[string, string]>;
      cwd: string;
      stdio: Array<'pipe' | 'ignore' | number>;
      sandboxed: boolean;
      capabilitySids?: string[];
      privateDesktop?: boolean;
      job?: { uiRestrictions?: boolean; activeProcessLimit?: number; processMemoryLimit?: number };
    },
    onExit: (code: number) => void,
  ): {
    pid: number;
    handle: unknown;
    fds: Array<number | null>;
    desktop: string | null;
    jobViaAttribute: boolean;
    tokenRestricted: boolean;
    adminGroupsDisabled: number;
    integrityLowered: boolean;
  };
  /** The path checks winSpawn starts with (ENOT_FOUND, ENOT_EXECUTABLE, EINVALID_ARGUMENT for cwd). */
  winSpawnCheck(file: string, cwd: string): void;
  winDeleteChildProbe(dir: string, file: string, capabilitySid: string): { deleted: boolean; exitCode: number };
  winKill(handle: unknown, exitCode: number): boolean;
  winCloseJob(handle: unknown): void;
  winRelease(handle: unknown): void;
}

export interface NativeRelay {
  /**
   * Takes over duplicates of both fds; the caller must destroy its own sockets right away, in the
   * same tick. `onDone` runs exactly once, never from inside relay() itself (and not at all when
   * the Node environment is torn down).
   */
  relay(
    fdA: number,
    fdB: number,
    prefixAtoB: Buffer | null,
    prefixBtoA: Buffer | null,
    idleMs: number,
    onDone: (err: string | null, aToB: number, bToA: number) => void,
    held?: boolean,
  ): object;
  /**
   * For a relay made `held`: moves exactly `length` bytes from A to B, one way, shutting neither
   * socket down; onDone(null, length, 0) once all of it is sent (EOF from A before that is an
   * error). False when the relay already ended (onDone ran or will run).
   */
  relayStart(handle: object, length: number): boolean;
  /** Tears the tunnel down (onDone runs with "closed" if it was still open). */
  relayClose(handle: object): boolean;
}

let cached: NativeBinding | undefined;
let loadFailure: SandboxError | undefined;

/** The platforms `npm pack` ships a prebuilt addon for (scripts/prepack.sh builds exactly these). */
export const PREBUILT_TAGS: readonly string[] = ['linux-x64-glibc', 'linux-arm64-glibc', 'win32-x64'];

/** The prebuild tag this process needs, as prebuilds/ names it: linux-x64-glibc, win32-x64, ... */
export function platformTag(): string {
  const base = `${process.platform}-${process.arch}`;
  if (process.platform !== 'linux') return base;
  // Same rule as node-gyp-build: LIBC overrides, Alpine means musl.
  let libc = process.env.LIBC;
  if (!libc) {
    let alpine = false;
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      alpine = require('node:fs').existsSync('/etc/alpine-release');
    } catch {
      alpine = false;
    }
    libc = alpine ? 'musl' : 'glibc';
  }
  return `${base}-${libc}`;
}

/**
 * Turns node-gyp-build's "No native build was found for ..." or a dlopen failure into one
 * SandboxError('EADDON_LOAD') that names the tag it looked for and what to do. The original text
 * stays in the message (it names the exact target tuple or the missing symbol) and in `cause`.
 */
export function addonLoadError(cause: unknown, root: string): SandboxError {
  const tag = platformTag();
  const original = cause instanceof Error ? cause.message.trim() : String(cause);
  const missing = /No native build was found/.test(original);
  const prebuilt = PREBUILT_TAGS.includes(tag);
  const fix = missing
    ? prebuilt
      ? 'the prebuilt binary is missing from this install: reinstall process-sandbox (npm ci), or unset PREBUILDS_ONLY / PROCESS_SANDBOX_PREBUILD if they point elsewhere'
      : `no prebuilt binary is shipped for ${tag} (prebuilt: ${PREBUILT_TAGS.join(', ')}): build it from source with \`npm rebuild process-sandbox --build-from-source\` (needs python3, make and a C++17 compiler)`
    : 'the binary exists but cannot be loaded (wrong architecture or libc, or a missing system library): reinstall, or build from source with `npm rebuild process-sandbox --build-from-source`';
  return new SandboxError('EADDON_LOAD', `the process-sandbox native addon for ${tag} could not be loaded: ${original.split('\n')[0]}. Fix: ${fix}`, {
    detail: { platformTag: tag, packageRoot: root, prebuiltTags: [...PREBUILT_TAGS], reason: missing ? 'missing' : 'unloadable', original },
    cause,
  });
}

/**
 * Loads the addon once. Every entry point (spawn, run, spawnPrepared, probe, the CLI) goes
 * through here, so a missing or broken addon is always SandboxError('EADDON_LOAD'), never a raw
 * node-gyp-build or dlopen error.
 */
export function loadNative(): NativeBinding {
  if (cached) return cached;
  if (loadFailure) throw loadFailure;
  const root = path.join(__dirname, '..');
  let binding: NativeBinding;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const load = require('node-gyp-build') as (dir: string) => NativeBinding;
    binding = load(root);
    if (typeof binding?.setErrorClass !== 'function') throw new Error(`the loaded file is not the process-sandbox addon (no setErrorClass export)`);
  } catch (e) {
    loadFailure = addonLoadError(e, root);
    throw loadFailure;
  }
  binding.setErrorClass(SandboxError);
  cached = binding;
  return binding;
}

/** The addon built for another system than the one asked for (a build copied across hosts). */
function wrongPlatform(binding: NativeBinding, want: string): SandboxError {
  return new SandboxError('EPLATFORM_UNSUPPORTED', `the loaded process-sandbox addon is built for ${binding.platform}, not ${want}: reinstall process-sandbox on this host`, {
    detail: { addonPlatform: binding.platform, wanted: want },
  });
}

/** loadNative(), typed as the Linux addon; EPLATFORM_UNSUPPORTED if the addon is another system's. */
export function loadLinuxNative(): LinuxNative {
  const binding = loadNative();
  if (binding.platform !== 'linux') throw wrongPlatform(binding, 'linux');
  return binding;
}

/** loadNative(), typed as the Windows addon; EPLATFORM_UNSUPPORTED if the addon is another system's. */
export function loadWin32Native(): Win32Binding {
  const binding = loadNative();
  if (binding.platform !== 'win32') throw wrongPlatform(binding, 'win32');
  return binding;
}

/** Like loadNative, but returns the load error instead of throwing (for probe()). */
export function tryLoadNative(): { binding?: NativeBinding; error?: Error } {
  try {
    return { binding: loadNative() };
  } catch (error) {
    return { error: error as Error };
  }
}

export { ERROR_CODES };
