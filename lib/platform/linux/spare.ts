/**
 * Sandboxes prepared ahead ("spares", native/linux/spawn_spare.cc), in both Linux modes. After the
 * second spawn in a row of one shape (mode, resolved rules, cwd), the next sandbox of that shape
 * is made once that spawn's exit has been delivered: its TMPDIR (Landlock mode), cgroup and quota
 * share, then init (isolated: with its mount tree, all but the placeholders, which wait for the
 * go) and a command that has joined the cgroup, dropped its capabilities and applied Landlock and
 * seccomp, parked before execve. The spawn that takes it plans afresh as always, and uses it only if
 *   - the fresh plan, made with the spare's own TMPDIR, cgroup and quota, is the spare's plan
 *     (everything but argv, envp, the file and the cwd, which the spawn supplies), and
 *   - every path a Landlock rule, bind or mask was made from still names the same inode
 *     (checked natively).
 * Otherwise the spare is discarded and the spawn starts from nothing, as without a spare. With
 * the network proxy, the spare is made for a port of its own (isolated mode: its listener inside
 * the namespace, handed over at launch; Landlock mode: a host listener it holds), and the spawn
 * that takes it plans with that port. A spawn with a terminal made inside an isolated sandbox
 * (`pty`) is served by a spare made with one, whose size is set to the spawn's before the go.
 * Spawns with a host pty (Landlock mode), and in Landlock mode with a terminal on stdio, are never
 * served by a spare.
 *
 * One spare per thread; discarded when unused for 30 s, and at exit.
 */
import type { LinuxNative, LinuxNativePlan } from '../../native';
import type { SandboxCgroup } from './cgroup';
import type { QuotaShare } from './quotas';

/** What a spare holds besides its processes, released with it (or by the run that used it). */
export interface SpareResources {
  tmpDir?: string;
  cgroup: SandboxCgroup | null;
  quota: QuotaShare | null;
  /** With the network proxy: the port the sandbox was made for (its env and rules name it). */
  proxyPort?: number;
  /** Landlock mode with the proxy: the host listener on that port, which the proxy serves. */
  hostListenerFd?: number;
}

export interface Spare {
  key: string;
  /** planKey() of the plan it was made from. */
  planKey: string;
  handle: object;
  resources: SpareResources;
}

let idleMs = 30_000;
/** After k preparations failed in a row, the next 2^k - 1 chances are let go (k at most 6). */
const MAX_BACKOFF = 6;

/**
 * The plan as far as a spare fixes it: everything but what its go supplies (its terminal's size
 * too; whether it has one stays, as `ctty`).
 */
export function planKey(plan: Omit<LinuxNativePlan, 'stdio'>): string {
  const go = { file: undefined, argv: undefined, envp: undefined, cwd: undefined, cgroupFds: undefined, ptyCols: undefined, ptyRows: undefined };
  // Landlock mode without a cgroup: RLIMIT_NPROC is the uid's task count plus the cap, a count
  // that moves between any two spawns; the spare keeps the one taken when it was made (the cap
  // itself is in the rules, which the spare's key holds).
  if (plan.mode === 'landlock') Object.assign(go, { rlimitNproc: undefined });
  // The rules on the entries of the host's temp dir (tmpShield's carving): files others make and
  // remove there all the time would discard nearly every spare. A spare's older set is no wider
  // than a fresh one: an entry made since has no rule in it (unreadable, as for an entry made
  // during a run), and an entry gone since cannot have become another run's TMPDIR (those are
  // made by mkdtemp in the denied directory, never moved there). The addon skips their identity
  // check likewise (spawn_spare.cc).
  const ll = plan.landlock;
  const landlock = ll?.rules.some((r) => r.volatile) ? { ...ll, rules: ll.rules.filter((r) => !r.volatile) } : ll;
  return JSON.stringify({ ...plan, ...go, landlock });
}

const stats = { prepared: 0, ready: 0, used: 0, discarded: 0 };
const slots = new Set<SpareSlot>();
/** Preparations begun whose end has not been reported yet. */
let pending = 0;
/** Bumped by clearSpares: a preparation scheduled before it is dropped. */
let generation = 0;

/** Runs `prepare` soon (after the current callbacks), unless clearSpares runs first. */
export function scheduleSpare(prepare: () => void): void {
  const gen = generation;
  setImmediate(() => {
    if (gen === generation) prepare();
  });
}

/** Test and bench hooks: this thread's counters; how long an unused spare is kept; drop all now. */
export function spareStats(): { prepared: number; ready: number; used: number; discarded: number } {
  return { ...stats };
}
export function setSpareIdleMs(ms: number): void {
  idleMs = ms;
}
/** Whether no preparation is under way (a held spare is ready, or none is held). */
export function sparesSettled(): boolean {
  return pending === 0;
}
export function clearSpares(): void {
  generation++;
  for (const s of slots) s.clear('sync');
}

export class SpareSlot {
  private spare: Spare | undefined;
  private lastKey: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private failures = 0;
  private skip = 0;
  private exitHook = false;
  /** Counters for tests and the bench: spares begun, ready while held, used, discarded unused. */
  readonly stats = stats;

  constructor(
    private readonly native: LinuxNative,
    private readonly release: (r: SpareResources, atExit: boolean) => void,
  ) {
    slots.add(this);
  }

  /** The spare for this shape, now the caller's (it must use it or discard it). */
  take(key: string): Spare | undefined {
    const s = this.spare;
    if (s === undefined || s.key !== key) return undefined;
    this.spare = undefined;
    clearTimeout(this.timer);
    return s;
  }

  /**
   * Called after every spawn a spare could have served: true when one should be prepared for
   * this shape now (its second spawn in a row, and none is held for it).
   */
  wants(key: string): boolean {
    const again = this.lastKey === key;
    this.lastKey = key;
    if (!again || this.spare?.key === key) return false;
    if (this.skip > 0) {
      this.skip--;
      return false;
    }
    return true;
  }

  /** Whether a spare of this shape is held (made, or being made). */
  holds(key: string): boolean {
    return this.spare?.key === key;
  }

  /** Starts preparing a spare from this plan (its resources are the spare's from now on). */
  fill(key: string, plan: Omit<LinuxNativePlan, 'stdio'>, resources: SpareResources, inSupervisionProcess = false): void {
    this.clear();
    let spare: Spare | undefined;
    pending++;
    const handle = this.native.prepareSpare(plan, (err) => {
      pending--;
      if (!err) {
        this.failures = 0;
        if (spare !== undefined && this.spare === spare) stats.ready++; // still held: ready for a spawn
        return;
      }
      this.failures = Math.min(this.failures + 1, MAX_BACKOFF);
      this.skip = 2 ** this.failures - 1;
      // Not taken yet: its resources go now. (A spawn that took it found it unusable and falls
      // back; it releases them itself.)
      if (spare !== undefined && this.spare === spare) {
        this.spare = undefined;
        clearTimeout(this.timer);
        this.release(resources, false);
      }
    }, inSupervisionProcess);
    spare = { key, planKey: planKey(plan), handle, resources };
    this.spare = spare;
    this.stats.prepared++;
    this.timer = setTimeout(() => this.clear('async'), idleMs).unref();
    if (!this.exitHook) {
      this.exitHook = true;
      process.once('exit', () => this.clear('exit'));
    }
  }

  /**
   * Ends a spare unused and releases what it held: at once ('sync', 'exit'), or with its
   * processes reaped on a thread of libuv's pool and its resources released after ('async').
   */
  discard(s: Spare, how: 'sync' | 'async' | 'exit' = 'sync'): void {
    this.stats.discarded++;
    if (how === 'async' && this.native.discardSpareAsync) {
      this.native.discardSpareAsync(s.handle, () => this.release(s.resources, false));
      return;
    }
    this.native.discardSpare(s.handle);
    this.release(s.resources, how === 'exit');
  }

  /** Discards the spare held, if any (by default without the JS thread waiting for it). */
  clear(how: 'sync' | 'async' | 'exit' = 'async'): void {
    const s = this.spare;
    this.spare = undefined;
    clearTimeout(this.timer);
    if (s) this.discard(s, how);
  }
}

/**
 * A copy of `plan` in which every string that is exactly `from` is `to`: a spare's plan made from
 * the run's, with the spare's own TMPDIR in place of the run's (the fields that name it: Landlock's
 * rule, the supervisors' writable and readable roots). The environment is not among them: the
 * spawn that takes the spare passes its own (spawnSpare's request).
 */
export function replacePath<T>(plan: T, from: string, to: string): T {
  const copy = (v: unknown): unknown => {
    if (v === from) return to;
    if (Array.isArray(v)) return v.map(copy);
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, copy(x)]));
    return v;
  };
  return copy(plan) as T;
}

