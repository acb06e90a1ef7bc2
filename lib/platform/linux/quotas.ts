/**
 * Per-uid kernel counters shared out among the sandboxes this host process runs at once.
 *
 * The kernel counts inotify instances and watches, pending signals and POSIX message queue bytes
 * per uid, and a sandbox's processes have the host's uid. A user namespace does not give a
 * sandbox counters of its own: they are hierarchical (a charge in the sandbox's namespace is a
 * charge on the host uid too), so N sandboxes that each may take a quarter of the host's limit
 * take all of it when N = 4, and the host's own fs.watch fails with EMFILE. Landlock mode has no
 * namespace at all.
 *
 * So each counter has a budget of half the host's limit (the other half stays the host's), and
 * each sandbox gets a quarter of what is left of it when it starts, returned when it exits:
 * however many run at once, together they never hold more than the budget (save the rlimits'
 * floors, below). Budgets are per host process; two host processes of one uid each have one.
 *
 * Where the share is enforced: isolated mode writes the inotify shares into the sandbox's user
 * namespace (the kernel counts live instances there) and sets RLIMIT_SIGPENDING and
 * RLIMIT_MSGQUEUE (checked against the namespace's own count). Landlock mode: the supervisor
 * counts the inotify instances and watches the sandbox creates (supervise_metadata.h); pending
 * signals need no share there (every task's count is the uid-wide one, held to the sandbox's
 * RLIMIT_SIGPENDING), and message queues are refused by seccomp.
 */
import fs from 'node:fs';

import { loadLinuxNative } from '../../native';

import { DEFAULT_MSGQUEUE_BYTES, DEFAULT_SIGPENDING } from './limits';

class Budget {
  private left: number;
  constructor(total: number) {
    this.left = total;
  }
  /** A quarter of what is left, at least `floor` and at most `cap`. */
  take(floor: number, cap = Infinity): number {
    const n = Math.max(floor, Math.min(cap, Math.floor(this.left / 4)));
    this.left -= n;
    return n;
  }
  give(n: number): void {
    this.left += n;
  }
}

interface Budgets {
  inotifyInstances: Budget;
  inotifyWatches: Budget;
  sigpending: Budget | null;
  msgqueue: Budget | null;
}

let budgets: Budgets | null | undefined;

function readNumber(file: string): number | null {
  try {
    const n = Number(fs.readFileSync(file, 'utf8').trim());
    return Number.isSafeInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

/** The soft limit named `name` in /proc/self/limits; null when unlimited or unreadable. */
function hostRlimit(name: string): number | null {
  try {
    const line = fs.readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith(name));
    const n = Number(line?.slice(name.length).trim().split(/\s+/)[0]);
    return Number.isSafeInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

function hostBudgets(): Budgets | null {
  if (budgets !== undefined) return budgets;
  const instances = readNumber('/proc/sys/user/max_inotify_instances');
  const watches = readNumber('/proc/sys/user/max_inotify_watches');
  const sig = hostRlimit('Max pending signals');
  const mq = hostRlimit('Max msgqueue size');
  budgets =
    instances && watches
      ? {
          inotifyInstances: new Budget(instances >> 1),
          inotifyWatches: new Budget(watches >> 1),
          sigpending: sig ? new Budget(sig >> 1) : null,
          msgqueue: mq ? new Budget(mq >> 1) : null,
        }
      : null;
  return budgets;
}

export interface QuotaShare {
  inotifyInstances: number;
  inotifyWatches: number;
  /** Isolated mode: RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE for the command. */
  sigpending?: number;
  msgqueueBytes?: number;
  /** Returns the share to the budget (idempotent). */
  release(): void;
}

/**
 * Takes this sandbox's share; null when the host's inotify limits cannot be read (the plan then
 * lists inotify as not capped). When many run at once a late one may get no inotify at all
 * (EMFILE inside, the kernel's answer at the limit); the rlimits keep floors (one signal, 4 KiB
 * of queue bytes: an rlimit of 0 is not set at all), each at most that over the budget.
 */
export function takeQuotaShare(mode: 'isolated' | 'landlock'): QuotaShare | null {
  const b = hostBudgets();
  if (!b) return null;
  const inotifyInstances = b.inotifyInstances.take(0);
  const inotifyWatches = b.inotifyWatches.take(0);
  const sigpending = mode === 'isolated' ? b.sigpending?.take(1, DEFAULT_SIGPENDING) : undefined;
  const msgqueueBytes = mode === 'isolated' ? b.msgqueue?.take(4096, DEFAULT_MSGQUEUE_BYTES) : undefined;
  let released = false;
  return {
    inotifyInstances,
    inotifyWatches,
    ...(sigpending !== undefined ? { sigpending } : {}),
    ...(msgqueueBytes !== undefined ? { msgqueueBytes } : {}),
    release() {
      if (released) return;
      released = true;
      b.inotifyInstances.give(inotifyInstances);
      b.inotifyWatches.give(inotifyWatches);
      if (sigpending !== undefined) b.sigpending?.give(sigpending);
      if (msgqueueBytes !== undefined) b.msgqueue?.give(msgqueueBytes);
    },
  };
}

/**
 * Landlock mode without a pids cgroup, unprivileged (item: a process cap by default):
 * RLIMIT_NPROC is the only cap, and the kernel checks it at each fork against every task
 * (process or thread) of the real uid, host-wide, not the sandbox's. So the sandbox's limit is
 * the uid's count now plus the cap: the sandbox may add `cap` tasks to what the uid runs. What
 * the uid starts elsewhere during the run is counted too (the cap shrinks by it), and one
 * sandbox at its cap also stops the forks of the uid's other such sandboxes (never the host's:
 * its own limit is unchanged).
 *
 * Counted from /proc (native uidTaskCount: the owner and thread count of each /proc/<pid>/task;
 * a setuid or non-dumpable process of the uid is missed, which only tightens the cap). Where /proc shows fewer
 * tasks than the kernel runs (a pid namespace: a container), the hidden ones may be this uid's:
 * they are counted as if they were (the kernel's total is /proc/loadavg's fourth field), so the
 * limit is never below what the uid already runs, only looser. Undefined when /proc cannot be read.
 */
export function uidTaskCount(uid: number): number | undefined {
  const c = loadLinuxNative().uidTaskCount?.(uid);
  if (c === undefined) return undefined;
  let total = 0;
  try {
    total = Number(fs.readFileSync('/proc/loadavg', 'latin1').split(' ')[3]?.split('/')[1] ?? 0);
  } catch {
    /* no loadavg: what /proc shows */
  }
  // "Hidden" is only what /proc does not show at all (kernel threads are visible as processes).
  return c.mine + Math.max(0, total - c.visible);
}
