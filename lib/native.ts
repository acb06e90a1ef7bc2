/**
 * The only module that loads the addon. node-gyp-build picks build/Release in development and
 * prebuilds/<platform>-<arch>/ in an installed package. Load errors reach the caller unchanged
 * (they name the platform tuple or the dlopen failure).
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
    rules: Array<{ path: string; access: 'read' | 'write' | 'device' | 'list' }>;
    connectPorts?: number[];
  };
  /** unixSockets: allow socket(AF_UNIX, SOCK_STREAM|SOCK_SEQPACKET) whatever `net` says. */
  seccomp?: { net: 'none' | 'proxy' | 'full'; unixSockets?: boolean };
  proxyPort?: number;
  rlimitNproc?: number;
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
}

export interface LinuxProbe {
  landlockAbi: number;
  /** 0 when seccomp filters can be installed, else -errno. */
  seccomp: number;
  /** 0 when user+mount+pid+net namespaces work, else -errno. */
  userns: number;
  euid: number;
  kernel?: string;
  machine?: string;
}

export interface NativeBinding {
  platform: string;
  errorCodes: string[];
  setErrorClass(cls: typeof SandboxError): void;
  // Linux
  spawn?(plan: LinuxNativePlan, onExit: (code: number | null, signal: number | null) => void): LinuxSpawnResult;
  kill?(handle: object, signal: number): number;
  probe?(): LinuxProbe | Record<string, unknown>;
  listenLoopback?(): { fd: number; port: number };
  lockPlaceholder?(path: string): number;
  releasePlaceholder?(fd: number, path: string, remove: boolean): boolean;
  /** A pseudo-terminal pair (both close-on-exec) with the given window size. */
  openPty?(cols: number, rows: number): { master: number; slave: number; name: string };
  resizePty?(fd: number, cols: number, rows: number): void;
  /** A new fd for the slave of a pty master (TIOCGPTPEER). */
  ptyPeer?(master: number): number;
  // Windows and macOS functions are typed by their backends (lib/platform/win32.ts, darwin.ts).
  [key: string]: unknown;
}

let cached: NativeBinding | undefined;

export function loadNative(): NativeBinding {
  if (cached) return cached;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const load = require('node-gyp-build') as (dir: string) => NativeBinding;
  const binding = load(path.join(__dirname, '..'));
  binding.setErrorClass(SandboxError);
  cached = binding;
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
