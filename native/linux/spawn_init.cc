// init of both sandbox modes: sweeps its fds, sets up the namespaces (isolated), starts the command,
// forwards signals, and reports the command's status once nothing of the sandbox is left.
// Tests: test/linux/threats-rob.test.ts (teardown), test/linux/exit-delivery.test.ts,
// test/linux/signals.test.ts (forwarding), test/linux/pty.test.ts, and every sandboxed spawn.
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "spawn_internal.h"

namespace psb {
namespace spawn_internal {
namespace {

void SetUpNamespacesInChild(ChildArgs* a);
[[noreturn]] void LaunchAndWaitInChild(ChildArgs* a);

// Isolated, prepared ahead: clones the command as a vfork child, as init does otherwise, but with
// init as its parent (CLONE_PARENT: init reaps it, and its parent-death signal follows init) and
// its pid written into a->spare_cmd_pid at once (CLONE_PARENT_SETTID). A vfork child matters: a
// process sharing the host's memory that writes oom_score_adj changes it for every process
// sharing that memory (the host included) unless it is a vfork child. Exits once the command has
// exec'd (or failed). Runs on a part of init's stack mapping, which outlives it.
int HelperInChild(void* argp) {
  ChildArgs* a = static_cast<ChildArgs*>(argp);
  long c = clone(CommandInChild, a->cmd_stack_top, CLONE_VM | CLONE_VFORK | CLONE_PARENT | CLONE_PARENT_SETTID | SIGCHLD, a,
                 &a->spare_cmd_pid);
  if (c < 0) FailInChild(a, kStageCommandClone, 0, -EAGAIN);
  ExitInChild(0);
}

// Isolated, prepared ahead (spawn_spare.cc), after the command was cloned: waits for the go and
// its stdio fds, makes the deferred steps (the placeholders on the host), and passes the go on
// to the command. The command has its own copies of every fd by then; init keeps none of them.
// EOF instead of a go: the spare was discarded; init's exit ends the namespace, command included.
void ParkInitInChild(ChildArgs* a) {
  char byte = 0;
  int fds[kSpareMaxStdio];
  int count = 0;
  if (RecvFdsInChild(a->spare_init_ctrl, &byte, fds, kSpareMaxStdio, &count) != 1 || byte != 'G') ExitInChild(125);
  const LinuxSpawnPlan& p = *a->plan;
  for (size_t i = 0; i < p.mounts.size(); ++i) {
    if (!a->deferred[i]) continue;
    long r = RunMountOpInChild(a, i);
    if (r < 0) FailInChild(a, kStageMount, static_cast<int32_t>(i), r);
  }
  long r = SendFdsInChild(a->spare_relay, 'G', fds, count);
  if (r != 1) FailInChild(a, kStageStdio, 5, r < 0 ? r : -EIO);
  for (int i = 0; i < count; ++i) Sys(__NR_close, fds[i]);
}

// isolated init, pty: a terminal of the sandbox's own devpts instance (mounted by the /dev
// step), so the command's ttyname() names a node that exists inside. The master goes to the
// parent over the fd channel; the slave (from TIOCGPTPEER, no path lookup) is kept for the
// command's fds 0-2.
long OpenPtyInChild(ChildArgs* a) {
  const LinuxSpawnPlan& p = *a->plan;
  long m = Sys(__NR_openat, AT_FDCWD, "/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC, 0);
  if (m < 0) return m;
  int unlock = 0;
  struct winsize ws = {p.pty_rows, p.pty_cols, 0, 0};
  long r = Sys(__NR_ioctl, m, TIOCSPTLCK, &unlock);
  if (r == 0) r = Sys(__NR_ioctl, m, TIOCSWINSZ, &ws);
  long s = r < 0 ? r : Sys(__NR_ioctl, m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (s >= 0) {
    r = SendFdInChild(a->fd_channel, static_cast<int>(m), 'P');
    if (r < 0) Sys(__NR_close, s);
  }
  Sys(__NR_close, m);
  if (s < 0) return s;
  if (r < 0) return r;
  // Above the stdio range: the command's dup3 onto fds 0-2 must never be a no-op dup3(fd, fd)
  // (prepared ahead: above every fd its go can bring).
  const int floor = a->spare_ctrl >= 0 ? kSpareMaxStdio : (a->nstdio > 3 ? a->nstdio : 3);
  long hi = Sys(__NR_fcntl, s, F_DUPFD_CLOEXEC, floor);
  Sys(__NR_close, s);
  if (hi < 0) return hi;
  a->pty_slave = static_cast<int>(hi);
  return 0;
}

// isolated init: identity maps, the mount tree, the namespace's network pieces.
void SetUpNamespacesInChild(ChildArgs* a) {
  const LinuxSpawnPlan& p = *a->plan;
  long r = WriteFileInChild("/proc/self/setgroups", "deny");
  if (r < 0 && r != -ENOENT) FailInChild(a, kStageUidMap, 0, r);
  r = WriteFileInChild("/proc/self/uid_map", a->uid_map);
  if (r < 0) FailInChild(a, kStageUidMap, 1, r);
  r = WriteFileInChild("/proc/self/gid_map", a->gid_map);
  if (r < 0) FailInChild(a, kStageUidMap, 2, r);

  r = Sys(__NR_mount, 0, "/", 0, MS_REC | MS_PRIVATE, 0);
  if (r < 0) FailInChild(a, kStageMount, -1, r);
  r = PrepareMasksInChild(a);
  if (r < 0) FailInChild(a, kStageMaskFs, 0, r);
  for (size_t i = 0; i < p.mounts.size(); ++i) {
    if (a->deferred != nullptr && a->deferred[i]) continue;  // at the go (ParkInitInChild)
    if (a->check_ids != nullptr && a->check_ids[i]) {
      struct stat st;
      uint64_t* id = a->mount_ids + 2 * i;
      id[0] = id[1] = 0;
      if (Sys(__NR_newfstatat, AT_FDCWD, a->mount_paths[i], &st, 0) == 0) {
        id[0] = st.st_dev;
        id[1] = st.st_ino;
      }
    }
    r = RunMountOpInChild(a, i);
    if (r < 0) FailInChild(a, kStageMount, static_cast<int32_t>(i), r);
  }
  for (size_t s = 0; s < kMaxSlots; ++s) {
    if (a->slots[s] >= 0) Sys(__NR_close, a->slots[s]);
  }
  for (int m = 0; m < a->nmasks; ++m) {
    if (a->mask_fds[m] >= 0) Sys(__NR_close, a->mask_fds[m]);
  }
  // lo is needed only by the proxy's listener: with no network at all, socket() is refused by
  // seccomp anyway, and bringing lo up is a large share of a namespace's setup cost.
  // A proxy template (spawn_netns.cc) comes with lo up, and init could not change it there.
  if (p.new_net && p.proxy_port != 0 && !a->tmpl_loopback) {
    r = LoopbackUpInChild();
    if (r < 0) FailInChild(a, kStageLoopback, 0, r);
  }
  // Before the listener: that step closes the channel.
  if (p.pty_cols != 0) {
    r = OpenPtyInChild(a);
    if (r < 0) FailInChild(a, kStageStdio, 4, r);
  }
  if (p.proxy_port != 0) {
    r = CreateProxyListenerInChild(a, p.proxy_port);
    if (r < 0) FailInChild(a, kStageProxyListener, 0, r);
  }
  if (a->notes != 0) {
    ChildReport note = {kNote, 0, a->notes};
    Sys(__NR_write, a->err_fd, &note, sizeof note);
  }
}

// Landlock-mode teardown without a pid namespace: kill the command's group and every child we
// have (as subreaper, that is every orphan of the tree), reap, and repeat until none is left.
void KillTreeInChild(pid_t cmd) {
  char path[64];
  char buf[4096];
  long self = Sys(__NR_getpid);
  // "/proc/<pid>/task/<pid>/children": built by hand, no snprintf after clone.
  char* e = AppendDecimalInChild(AppendInChild(path, "/proc/"), static_cast<uint64_t>(self));
  e = AppendDecimalInChild(AppendInChild(e, "/task/"), static_cast<uint64_t>(self));
  *AppendInChild(e, "/children") = 0;
  // Never block on a child we may not have killed (one re-parented to us between reading the
  // list and waiting): poll with WNOHANG, re-reading and re-killing until none is left.
  for (int round = 0;; ++round) {
    Sys(__NR_kill, -cmd, SIGKILL);
    long fd = Sys(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      long got = Sys(__NR_read, fd, buf, sizeof buf - 1);
      Sys(__NR_close, fd);
      long pid = 0;
      for (long i = 0; i < got; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
        } else {
          if (pid > 0) Sys(__NR_kill, pid, SIGKILL);
          pid = 0;
        }
      }
      if (pid > 0) Sys(__NR_kill, pid, SIGKILL);
    }
    long reaped;
    while ((reaped = Sys(__NR_wait4, -1, 0, __WALL | WNOHANG, 0)) > 0) {
    }
    if (reaped == -ECHILD) return;
    // Without /proc/<pid>/task/<pid>/children (CONFIG_PROC_CHILDREN) we cannot find escapees:
    // give up after a while rather than hang the report.
    if (fd < 0 && round > 1000) return;
    struct timespec pause = {0, 1000000};  // 1 ms
    Sys(__NR_nanosleep, &pause, 0);
  }
}

// Both modes: start the command, forward signals, and report its status once nothing of the
// sandbox is left.
[[noreturn]] void LaunchAndWaitInChild(ChildArgs* a) {
  const LinuxSpawnPlan& p = *a->plan;
  const bool isolated = p.mode == LinuxMode::kIsolated;

  // From the moment err_fd closes, the parent may free everything `a` points to: copy what the
  // wait loop needs onto init's own stack first.
  const int status_fd = a->status_fd;
  const bool group = p.setsid;
  TraceCount trace;  // 48 KiB of init's 256 KiB stack, touched only when traced
  trace.cap = static_cast<int32_t>(p.trace_process_cap);
  trace.tasks = 1;
  trace.inflight = 0;
  trace.zombies = 0;
  // Never with a helper-made command (prepared ahead, isolated): PrepareSpare refuses that plan.
  const bool traced = trace.cap > 0 && a->spare_init_ctrl < 0;
  pid_t cmd;
  if (a->spare_init_ctrl >= 0) {
    // Isolated and prepared ahead: init must stay free to take the go, so a helper makes the
    // command and sleeps in vfork for it (see HelperInChild).
    if (clone(HelperInChild, a->helper_stack_top, CLONE_VM | SIGCHLD, a) < 0) FailInChild(a, kStageCommandClone, 1, -EAGAIN);
    ParkInitInChild(a);
    cmd = __atomic_load_n(&a->spare_cmd_pid, __ATOMIC_SEQ_CST);  // written at its clone, long before the go
  } else if (traced) {
    // The traced process cap (spawn_trace.cc): not a vfork child, so that init can seize it
    // before it runs anything of its own; init waits for its exec instead.
    a->trace_go = 0;
    cmd = clone(CommandInChild, a->cmd_stack_top, CLONE_VM | SIGCHLD, a);
  } else {
    cmd = clone(CommandInChild, a->cmd_stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
  }
  if (cmd <= 0) FailInChild(a, kStageCommandClone, 0, -EAGAIN);
  int early_status = 0;
  bool exited_early = false;
  if (traced) {
    long r = StartTracedCommandInChild(a, cmd, &trace, &early_status);
    if (r < 0) {
      Sys(__NR_kill, cmd, SIGKILL);
      FailInChild(a, kStageTrace, 1, r);
    }
    exited_early = r == 1;  // it failed before its execve (and said why on err_fd)
  }
  // The command has its own copies now. init keeps only the status pipe, so the command's stdio
  // reaches EOF exactly when the sandbox's last holder of it is gone.
  for (int i = 0; i < a->nstdio; ++i) Sys(__NR_close, a->stdio_fds[i]);
  if (a->pty_slave >= 0) Sys(__NR_close, a->pty_slave);
  for (int fd : p.cgroup_fds) Sys(__NR_close, fd);
  // Landlock mode: the channel carried only the command's seccomp listener (sent before its
  // execve, which has happened now that vfork returned); isolated mode, the listener last.
  if ((!isolated || p.seccomp_listener) && a->fd_channel >= 0) Sys(__NR_close, a->fd_channel);
  for (int fd : {a->spare_ctrl, a->spare_init_ctrl, a->spare_relay}) {
    if (fd >= 0) Sys(__NR_close, fd);
  }
  Sys(__NR_close, a->err_fd);  // the parent sees EOF once the command has exec'd (or failed)
  a = nullptr;

  uint64_t set = 0;
  const int kWatched[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH,
                          kParentDiedSignal, kKillTreeSignal};
  for (int sig : kWatched) set |= 1ULL << (sig - 1);
  // Kill and reap everything left (daemons included) before reporting, so that when the parent
  // hears "exited" no process of the sandbox is alive. In isolated mode kill(-1) reaches exactly
  // the namespace; the namespaces' own teardown then happens after the report.
  auto teardown = [&]() {
    if (isolated) {
      Sys(__NR_kill, -1, SIGKILL);
      while (Sys(__NR_wait4, -1, 0, __WALL, 0) != -ECHILD) {
      }
    } else {
      KillTreeInChild(cmd);
    }
  };
  auto finish = [&](int st) {
    teardown();
    int32_t status = st;
    Sys(__NR_write, status_fd, &status, sizeof status);
    ExitInChild(0);
  };
  if (exited_early) finish(early_status);
  for (;;) {
    siginfo_t si;
    long sig = Sys(__NR_rt_sigtimedwait, &set, &si, 0, 8);
    if (sig == SIGCHLD) {
      for (;;) {
        int st = 0;
        long pid = traced ? WaitTracedInChild(&trace, &st) : Sys(__NR_wait4, -1, &st, WNOHANG | __WALL, 0);
        if (pid <= 0) break;
        // Only tracees stop here (no WUNTRACED): the traced process cap's round trips.
        if (WIFSTOPPED(st)) {
          if (traced) OnTraceStopInChild(&trace, static_cast<pid_t>(pid), st);
          continue;
        }
        if (pid == cmd) finish(st);
      }
    } else if (sig == kParentDiedSignal || sig == kKillTreeSignal) {
      // Killing the sandbox: the command is killed with the rest, and reported as such.
      teardown();
      int32_t status = SIGKILL;  // a wait status for "killed by SIGKILL"
      Sys(__NR_write, status_fd, &status, sizeof status);
      ExitInChild(0);
    } else if (sig > 0) {
      Sys(__NR_kill, group ? -cmd : cmd, sig);
    }
  }
}

}  // namespace

// init of both sandbox modes. It shares the parent's address space (CLONE_VM) on its own stack and
// TLS block; once the command has exec'd it touches nothing but those (see LaunchAndWaitInChild).
int InitInChild(void* argp) {
  ChildArgs* a = static_cast<ChildArgs*>(argp);
  const LinuxSpawnPlan& p = *a->plan;
  const bool isolated = p.mode == LinuxMode::kIsolated;
  ResetSignalsInChild();  // the signal mask stays fully blocked; signals are taken synchronously
  // Our own name instead of the host thread's (ps, /proc/1/comm and status show it). comm is per
  // task, so this is safe; cmdline is the shared mm's and is masked instead (kProcMasks). Never
  // PR_SET_MM or PR_SET_DUMPABLE here: they change the mm, i.e. the host.
  Sys(__NR_prctl, PR_SET_NAME, "psb-init", 0, 0, 0);
  // Isolated: our death ends the pid namespace, so SIGKILL is all it takes. Landlock: we must
  // outlive the parent long enough to kill the tree, so its death arrives as a signal we wait for.
  long r = Sys(__NR_prctl, PR_SET_PDEATHSIG, isolated ? SIGKILL : kParentDiedSignal, 0, 0, 0);
  if (r < 0) FailInChild(a, kStagePdeath, 0, r);
  if (!isolated) {
    // Orphans anywhere below us (setsid daemons included) are re-parented to us, so teardown can
    // find and kill every one of them without a pid namespace.
    r = Sys(__NR_prctl, PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    if (r < 0) FailInChild(a, kStagePdeath, 1, r);
    if (Sys(__NR_getppid) != a->parent_pid) ExitInChild(125);  // the parent is already gone
  }
  // Drop every inherited fd except the ones we need: init lives as long as the command, and a
  // stray copy of a host pipe or socket would keep it open.
  int next = 0;
  for (int i = 0; i < a->nkeep; ++i) {
    if (a->keep_fds[i] > next) Sys(__NR_close_range, next, a->keep_fds[i] - 1, 0);
    next = a->keep_fds[i] + 1;
  }
  Sys(__NR_close_range, next, ~0U, 0);

  if (isolated) SetUpNamespacesInChild(a);
  LaunchAndWaitInChild(a);
}
}  // namespace spawn_internal
}  // namespace psb
