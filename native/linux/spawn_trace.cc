// The traced process cap: the cap on a sandbox's tasks where nothing else binds (either mode).
//
// Why. A pids cgroup caps a sandbox's tasks; unprivileged, RLIMIT_NPROC over the uid's count does.
// As root neither may exist: RLIMIT_NPROC never binds uid 0 (the kernel exempts the root user,
// whatever its capabilities; isolated mode's uid 0 is the host's), and a default container's
// cgroup file system is read-only. So init counts: it traces the whole tree (ptrace), the filter
// stops every task creation (clone, fork, vfork; clone3 is ENOSYS, CLONE_UNTRACED is refused) in
// SECCOMP_RET_TRACE, and init fails those past the cap with EAGAIN, as pids.max does.
//
// Why a tracer and not the seccomp supervisor. A call waiting in a user notification is withdrawn
// by any signal that lands before the supervisor takes it, and fails EINTR where the handler lacks
// SA_RESTART (a plain fork is restarted whatever the handler says); dash then says "Cannot fork".
// A call held in a ptrace stop is not withdrawn (bench/fork-stop-signals.c).
//
// How it counts. tasks: the tree's live tasks, threads included (pids.max and RLIMIT_NPROC count
// them too). +1 at each creation event (PTRACE_EVENT_FORK/VFORK/CLONE, reported in the creator
// before its call returns; with auto-attach every new task is a tracee from its first
// instruction); -1 at each death init is told of (a tracer hears of every tracee's death, child or
// not, threads too with __WALL), and at an exec that made another thread the leader (its old tid
// vanishes unreported). But a process that has exited holds its pid until its parent reaps it,
// and pids.max and RLIMIT_NPROC count it until then (else a command that never reaps could take
// every pid of the host: pid_max is 32768 on small machines). A parent other than init reaps
// without telling init, so init notes each exited process's pid and start time (field 22 of
// /proc/<pid>/stat, read before init's own wait lets the parent reap it, so the pid cannot have
// been reused) and counts it as a zombie until /proc/<pid> is gone or shows another start time
// (reaped; one whose parent died first is re-parented to init and reaped there, and is not
// counted out twice). A creation is judged at its seccomp stop:
// refused when tasks + zombies + inflight reach the cap (the zombies are re-checked first), where
// inflight counts creations let through whose event (success) or failed return (a syscall-exit
// stop) init has not seen yet, so concurrent creations cannot overshoot together.
//
// Why pid and start time, not an open fd per zombie. An fd per zombie tied the count to init's
// RLIMIT_NOFILE (inherited from the host): where the hard limit is below the cap (ulimit -n 1024,
// systemd's LimitNOFILE=1024, docker --ulimit nofile=1024) every zombie past it was counted out
// while its pid stayed taken, and raising the soft limit to the hard one cannot help there (nor
// pidfds or /proc/<pid> directory fds: fds too). pid and start time keep no fd: one is open only
// while a stat line is read. A start time names one process for good; a pid reused within the
// same clock tick (10 ms) reads as the old zombie still there, which only counts one too many
// until that process is gone as well. A stat line that cannot be read for anything but "no such
// pid" (EMFILE, ENFILE, ENOMEM) keeps the task counted: at its exit, for the rest of the run; at a
// re-check, until a later one says it is gone. The count errs high, never low.
//
// Why the command is not a vfork child here. init seizes it before it runs anything of its own
// (it waits on a futex word), which init could not do asleep in vfork; init then waits for its
// exec stop instead. Until execve it shares memory with init and the host, as before. The one
// thing only a vfork child may do then is write its oom_score_adj (the kernel copies a new value to
// every process sharing the mm, the host included): init writes it at the exec stop instead.
//
// What the tracer changes for the command. Its tasks show init as TracerPid, and nothing else can
// trace them (ptrace is refused in the sandbox anyway). Every signal to a member passes through
// init (a signal-delivery stop, re-injected unchanged); job-control stops stay stops
// (PTRACE_LISTEN). PTRACE_O_EXITKILL: if init dies, every tracee is killed.
//
// Limits. A task killed by SIGKILL between its seccomp stop and the event leaves inflight one too
// high for the rest of the run (the cap binds a task earlier); so does a zombie beyond the
// kTraceZombies init can follow at once (only with a cap above that), and one whose stat line
// could not be read (above). Without procfs (ENOENT) zombies are not counted. Every creation and
// signal costs a round trip through init (a few microseconds).
//
// Child-side functions make raw syscalls only (init shares the host's memory); the probe at the
// end runs on the host.
// Tests: test/linux/process-cap-no-cgroup.test.ts, test/linux/threats-rob.test.ts,
// test/linux/kernel-matrix.test.ts (the cap where nothing else binds).
#include <elf.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>

#include <memory>
#include <new>

#include "spawn_internal.h"

namespace psb {
namespace spawn_internal {
namespace {

constexpr long kTraceOptions = PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE |
                               PTRACE_O_TRACEEXEC | PTRACE_O_TRACESECCOMP | PTRACE_O_EXITKILL;

// Makes the creation `tid` is stopped in fail with `err` (negative) without running it: the
// syscall number becomes -1 (skipped), the return value err.
long FailCallInChild(pid_t tid, long err) {
  struct user_regs_struct regs;
  struct iovec io = {&regs, sizeof regs};
  long r = Sys(__NR_ptrace, PTRACE_GETREGSET, tid, NT_PRSTATUS, &io);
  if (r < 0) return r;
#if defined(__x86_64__)
  regs.orig_rax = static_cast<unsigned long long>(-1LL);
  regs.rax = static_cast<unsigned long long>(err);
  return Sys(__NR_ptrace, PTRACE_SETREGSET, tid, NT_PRSTATUS, &io);
#elif defined(__aarch64__)
  regs.regs[0] = static_cast<unsigned long long>(err);
  r = Sys(__NR_ptrace, PTRACE_SETREGSET, tid, NT_PRSTATUS, &io);
  if (r < 0) return r;
  int nr = -1;
  struct iovec nio = {&nr, sizeof nr};
  return Sys(__NR_ptrace, PTRACE_SETREGSET, tid, NT_ARM_SYSTEM_CALL, &nio);
#else
#error "the traced process cap knows x86_64 and aarch64 registers only"
#endif
}

// The creation `tid` returned from failed (a syscall-exit stop with a negative result)?
bool FailedReturnInChild(pid_t tid) {
  struct __ptrace_syscall_info info;
  long r = Sys(__NR_ptrace, PTRACE_GET_SYSCALL_INFO, tid, sizeof info, &info);
  return r > 0 && info.op == PTRACE_SYSCALL_INFO_EXIT && info.exit.is_error != 0;
}

// "/proc/<pid>/<leaf>", by hand (no snprintf after clone).
void ProcPathInChild(pid_t pid, const char* leaf, char* out) {
  char* e = AppendDecimalInChild(AppendInChild(out, "/proc/"), static_cast<uint64_t>(pid));
  *AppendInChild(AppendInChild(e, "/"), leaf) = 0;
}

// The start time of task `pid` (field 22 of /proc/<pid>/stat, clock ticks since boot), or
// -errno: -ENOENT or -ESRCH when no task has that pid now, anything else when it could not be read
// (-EMFILE, -ENFILE, -ENOMEM; -EIO for a line it could not parse).
int64_t StartTimeInChild(pid_t pid) {
  char path[64];
  ProcPathInChild(pid, "stat", path);
  long fd = Sys(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  // The line up to field 22 is at most ~450 bytes: pid, comm (16 bytes at most), 19 numbers.
  char buf[512];
  long n = Sys(__NR_read, fd, buf, sizeof buf);
  Sys(__NR_close, fd);
  if (n < 0) return n;
  // comm (field 2) may hold spaces and ')': fields are counted from the last ')'.
  long i = n;
  while (i > 0 && buf[i - 1] != ')') --i;
  if (i == 0) return -EIO;
  for (int spaces = 0; i < n && spaces < 20; ++i) spaces += buf[i] == ' ';
  int64_t t = 0;
  long digits = 0;
  for (; i < n && buf[i] >= '0' && buf[i] <= '9' && digits < 19; ++i, ++digits) t = t * 10 + (buf[i] - '0');
  return digits > 0 && i < n && buf[i] == ' ' ? t : -EIO;
}

// Whether zombie entry i is still that process: -ENOENT/-ESRCH (reaped) or another start time
// (reaped, its pid reused) say no; a read that failed otherwise says yes (it stays counted).
bool ZombieStillThereInChild(const TraceCount* c, int i) {
  int64_t t = StartTimeInChild(c->zombie_pids[i]);
  if (t == -ENOENT || t == -ESRCH) return false;
  return t < 0 || t == c->zombie_starts[i];
}

void ForgetZombieInChild(TraceCount* c, int i) {
  --c->zombies;
  c->zombie_starts[i] = c->zombie_starts[c->zombies];
  c->zombie_pids[i] = c->zombie_pids[c->zombies];
}

// Forgets the zombies their parents have reaped since.
void SweepZombiesInChild(TraceCount* c) {
  for (int i = 0; i < c->zombies;) {
    if (ZombieStillThereInChild(c, i)) {
      ++i;
      continue;
    }
    ForgetZombieInChild(c, i);
  }
}

void ReleaseCommandInChild(ChildArgs* a, uint32_t go) {
  __atomic_store_n(&a->trace_go, go, __ATOMIC_RELEASE);
  Sys(__NR_futex, &a->trace_go, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
}

}  // namespace

long StartTracedCommandInChild(ChildArgs* a, pid_t cmd, TraceCount* c, int* status) {
  long r = Sys(__NR_ptrace, PTRACE_SEIZE, cmd, 0, kTraceOptions);
  if (r < 0) {
    // The command reports it (kStageTrace) and exits; its exit is ours to report as usual.
    a->trace_err = static_cast<int32_t>(r);
    ReleaseCommandInChild(a, 2);
  } else {
    ReleaseCommandInChild(a, 1);
  }
  for (;;) {
    int st = 0;
    r = Sys(__NR_wait4, cmd, &st, __WALL, 0);
    if (r == -EINTR) continue;
    if (r < 0) return r;
    if (!WIFSTOPPED(st)) {
      *status = st;
      return 1;
    }
    if ((st >> 16) == PTRACE_EVENT_EXEC) {
      // The new program has not run an instruction yet: make it the OOM killer's first choice
      // now (see the top). No procfs (ENOENT) only loses the preference.
      char path[64];
      ProcPathInChild(cmd, "oom_score_adj", path);
      r = WriteFileInChild(path, "1000");
      if (r < 0 && r != -ENOENT) {
        Sys(__NR_kill, cmd, SIGKILL);
        FailInChild(a, kStageOomScore, 1, r);
      }
      OnTraceStopInChild(c, cmd, st);
      return 0;
    }
    OnTraceStopInChild(c, cmd, st);
  }
}

void OnTraceStopInChild(TraceCount* c, pid_t tid, int st) {
  const int sig = (st >> 8) & 0xff;
  const int event = (st >> 16) & 0xff;
  long req = PTRACE_CONT;
  long data = 0;
  switch (event) {
    case PTRACE_EVENT_SECCOMP:  // only creations stop here (kTraceForks)
      if (c->zombies > 0 && c->tasks + c->zombies + c->inflight >= c->cap) SweepZombiesInChild(c);
      if (c->tasks + c->zombies + c->inflight >= c->cap) {
        long r = FailCallInChild(tid, -EAGAIN);
        // Never let a creation past the cap run: a task whose registers cannot be set dies.
        if (r < 0 && r != -ESRCH) Sys(__NR_kill, tid, SIGKILL);
      } else {
        ++c->inflight;
        req = PTRACE_SYSCALL;  // its return stops too, unless the event comes first (below)
      }
      break;
    case PTRACE_EVENT_FORK:
    case PTRACE_EVENT_VFORK:
    case PTRACE_EVENT_CLONE:
      // It happened; PTRACE_CONT drops the syscall-exit stop asked for above.
      if (c->inflight > 0) --c->inflight;
      ++c->tasks;
      break;
    case PTRACE_EVENT_EXEC: {
      unsigned long old = 0;
      if (Sys(__NR_ptrace, PTRACE_GETEVENTMSG, tid, 0, &old) == 0 && static_cast<pid_t>(old) != tid) --c->tasks;
      break;
    }
    case PTRACE_EVENT_STOP:
      // A group stop (job control) stays one until SIGCONT; anything else (a new task's first stop,
      // the end of a group stop) goes on.
      if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) req = PTRACE_LISTEN;
      break;
    case 0:
      if (sig == (SIGTRAP | 0x80)) {
        // A creation let through returns without its event: it failed.
        if (FailedReturnInChild(tid) && c->inflight > 0) --c->inflight;
      } else {
        data = sig;  // a signal on its way: delivered unchanged
      }
      break;
    default:
      break;
  }
  Sys(__NR_ptrace, req, tid, 0, data);
}

long WaitTracedInChild(TraceCount* c, int* status) {
  // Look first (WNOWAIT): for an exit, read its start time while its pid still names it (once our
  // wait has taken the report, its parent may reap it and the pid may be reused).
  siginfo_t si;
  memset(&si, 0, sizeof si);
  long r = Sys(__NR_waitid, P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT | __WALL, 0);
  if (r < 0 || si.si_pid <= 0) return r < 0 ? r : 0;
  const pid_t pid = si.si_pid;
  const bool exited = si.si_code == CLD_EXITED || si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED;
  const int64_t start = exited ? StartTimeInChild(pid) : -ENOENT;
  // A zombie counted out already whose parent died without reaping it: re-parented to init (the
  // subreaper) and reaped here, no longer traced. Counting it out again would let every such
  // orphan free a place it never held. (An entry for this pid with another start time was
  // another process, reaped since: the pid was reused.)
  int known = -1;
  for (int i = 0; i < c->zombies && start >= 0; ++i) {
    if (c->zombie_pids[i] != pid) continue;
    if (c->zombie_starts[i] == start) {
      known = i;
    } else {
      ForgetZombieInChild(c, i);
    }
    break;
  }
  r = Sys(__NR_wait4, pid, status, WNOHANG | __WALL, 0);
  if (r <= 0 || WIFSTOPPED(*status)) return r;
  if (known >= 0) {
    ForgetZombieInChild(c, known);
    return r;
  }
  --c->tasks;
  // Reaped by that wait (init's own child), released at exit (a thread; a parent that ignores
  // SIGCHLD) or gone before we looked: nothing holds a pid. Else a zombie until its parent reaps
  // it. Without procfs (ENOENT) zombies are not counted (see the top).
  if (!exited || start == -ENOENT || start == -ESRCH) return r;
  if (start >= 0) {
    if (c->zombies == kTraceZombies) SweepZombiesInChild(c);
    if (c->zombies < kTraceZombies) {
      c->zombie_starts[c->zombies] = start;
      c->zombie_pids[c->zombies++] = pid;
      if (!ZombieStillThereInChild(c, c->zombies - 1)) ForgetZombieInChild(c, c->zombies - 1);
      return r;
    }
  }
  ++c->tasks;  // cannot follow it (no room, or its stat line unread): counted for the rest of the run
  return r;
}

}  // namespace spawn_internal

namespace {

int ProbeTraceeInChild(void* arg) {
  uint32_t* go = static_cast<uint32_t*>(arg);
  while (__atomic_load_n(go, __ATOMIC_ACQUIRE) == 0) Sys(__NR_futex, go, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
  spawn_internal::ExitInChild(0);
}

}  // namespace

int ProcessTracingSupported() noexcept {
  constexpr size_t kStack = 16 * 1024;
  std::unique_ptr<char[]> stack(new (std::nothrow) char[kStack]);
  if (!stack) return -ENOMEM;
  char* top = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(stack.get() + kStack) & ~uintptr_t{15});
  uint32_t go = 0;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = clone(ProbeTraceeInChild, top, CLONE_VM | SIGCHLD, &go);
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return -e;
  long r = Sys(__NR_ptrace, PTRACE_SEIZE, pid, 0, PTRACE_O_EXITKILL);
  __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
  Sys(__NR_futex, &go, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
  int st = 0;
  while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {
  }
  return r < 0 ? static_cast<int>(r) : 0;
}

}  // namespace psb
