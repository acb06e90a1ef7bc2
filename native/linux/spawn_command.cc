// The command's own setup, after clone(CLONE_VM|CLONE_VFORK) from the parent (plain) or from init
// (both sandbox modes; without CLONE_VFORK under the traced process cap, spawn_trace.cc), up to
// execve: cgroups, session, stdio, fds, limits, capabilities, cwd, Landlock, seccomp.
// Tests: test/linux/process-cap-no-cgroup.test.ts, test/linux/threats-rob.test.ts,
// test/linux/kernel-matrix.test.ts (cap and limits), test/linux/host-safety.test.ts (rlimits),
// test/contract/*, and every sandboxed spawn.
#include <linux/futex.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "seccomp.h"
#include "spawn_internal.h"

namespace psb {
namespace spawn_internal {
namespace {

// Marks every fd from `from` up close-on-exec (the errno pipe among them must stay open until the
// execve). close_range(CLOSE_RANGE_CLOEXEC) does it in one call from Linux 5.11; before that
// (Debian 11's 5.10 answers EINVAL, and even a policy: null run failed) each fd listed in
// /proc/self/fd gets FD_CLOEXEC. Raw syscalls and a stack buffer only: this child may share the
// parent's memory. Without /proc the original EINVAL stands and the spawn fails closed.
long CloexecFromInChild(int from) {
  long r = Sys(__NR_close_range, from, ~0U, CLOSE_RANGE_CLOEXEC);
  if (r != -EINVAL) return r;
  long dir = Sys(__NR_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (dir < 0) return r;
  alignas(8) char buf[1024];
  for (;;) {
    long n = Sys(__NR_getdents64, dir, buf, sizeof buf);
    if (n <= 0) {
      Sys(__NR_close, dir);
      return n;
    }
    // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
    for (long off = 0; off < n;) {
      uint16_t reclen;
      __builtin_memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      off += reclen;
      if (reclen == 0) break;
      long fd = 0;
      bool digits = *name != 0;
      for (const char* c = name; *c; ++c) {
        if (*c < '0' || *c > '9') digits = false;
        else fd = fd * 10 + (*c - '0');
      }
      if (!digits || fd < from || fd == dir) continue;
      long e = Sys(__NR_fcntl, fd, F_SETFD, FD_CLOEXEC);
      if (e < 0) {
        Sys(__NR_close, dir);
        return e;
      }
    }
  }
}

constexpr int kSecbitsLockAll = 0x3f | (1 << 6) | (1 << 7);  // NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (+locks), NO_CAP_AMBIENT_RAISE (+lock)

struct CapHeader {
  uint32_t version;
  int pid;
};
struct CapData {
  uint32_t effective, permitted, inheritable;
};

long DropCapsInChild() {
  // The bounding set first (needs CAP_SETPCAP), then the securebits lock, then the sets.
  for (int cap = 0; cap < 64; ++cap) {
    long r = Sys(__NR_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0);
    if (r == -EINVAL) break;  // past the kernel's last capability
    if (r == -EPERM) break;   // no CAP_SETPCAP: an unprivileged Landlock-mode launch
    if (r < 0) return r;
  }
  long r = Sys(__NR_prctl, PR_SET_SECUREBITS, kSecbitsLockAll, 0, 0, 0);
  if (r < 0 && r != -EPERM) return r;
  r = Sys(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (r < 0 && r != -EINVAL) return r;
  CapHeader hdr = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
  CapData data[2] = {{0, 0, 0}, {0, 0, 0}};
  return Sys(__NR_capset, &hdr, data);
}

// pty (spawn's `pty` option): fd 0 is the slave the parent opened; make it this new session's
// controlling terminal so job control, ^C and SIGWINCH reach the command. Index 3 under the
// stdio stage tells it apart from the dup3 of fds 0-2.
void SetControllingTerminalInChild(const ChildArgs* a) {
  long r = Sys(__NR_ioctl, 0, TIOCSCTTY, 0);
  if (r < 0) FailInChild(a, kStageStdio, 3, r);
}

// Prepared ahead (spawn_spare.cc): every restriction of the policy is in force already (caps,
// no_new_privs, Landlock, seccomp). Says so on the errno pipe and waits for the go, which brings
// the stdio fds; the parent has put argv, envp, the file and the cwd in place before sending it.
// What is left are the steps no policy governs: stdio, the fd sweep, the umask and the cwd (chdir
// is not a Landlock right; a cwd it cannot enter fails here as it would have before). With a
// terminal made inside the sandbox, fds 0-2 are its slave, which init opened before this process
// was made (the go brings no fds then), and it becomes the controlling terminal of the session
// made before the park. Its OOM preference is raised only now (`oom_fd`, see
// CommandInChild).
// A sandbox made inside one of ours (a nested Landlock-mode run) cannot write /proc/self: the
// outer Landlock domain refuses it (EACCES). The outer sandbox made its command the OOM killer's
// first choice already, and that value is inherited: nothing is lost when it reads 1000 here.
bool OomScoreAlreadyMaxInChild() {
  long fd = Sys(__NR_openat, AT_FDCWD, "/proc/self/oom_score_adj", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char b[8];
  long n = Sys(__NR_read, fd, b, sizeof b);
  Sys(__NR_close, fd);
  return n >= 4 && b[0] == '1' && b[1] == '0' && b[2] == '0' && b[3] == '0' && (n == 4 || b[4] == '\n');
}

void ParkInChild(ChildArgs* a, int oom_fd) {
  ChildReport parked = {kNote, kNoteParked, 0};
  if (Sys(__NR_write, a->err_fd, &parked, sizeof parked) != static_cast<long>(sizeof parked)) ExitInChild(125);
  char byte = 0;
  int got[kSpareMaxStdio];
  int count = 0;
  // EOF: discarded unused, or the host is gone. Nothing was asked of it, so nothing is reported.
  if (RecvFdsInChild(a->spare_ctrl, &byte, got, kSpareMaxStdio, &count) != 1 || byte != 'G') ExitInChild(125);
  // A received fd can sit at the number another one goes to: all move up first, then down.
  int hi[kSpareMaxStdio];
  for (int i = 0; i < count; ++i) {
    long r = Sys(__NR_fcntl, got[i], F_DUPFD_CLOEXEC, kSpareMaxStdio);
    if (r < 0) FailInChild(a, kStageStdio, i, r);
    hi[i] = static_cast<int>(r);
  }
  for (int i = 0; i < count; ++i) Sys(__NR_close, got[i]);
  const int n = a->pty_slave >= 0 && count < 3 ? 3 : count;
  for (int i = 0; i < n; ++i) {
    long r = Sys(__NR_dup3, a->pty_slave >= 0 && i < 3 ? a->pty_slave : hi[i], i, 0);
    if (r < 0) FailInChild(a, kStageStdio, i, r);
  }
  if (a->plan->ctty) SetControllingTerminalInChild(a);
  long r = CloexecFromInChild(n);
  if (r < 0) FailInChild(a, kStageCloseFds, 0, r);
  if (oom_fd >= 0) {
    r = Sys(__NR_write, oom_fd, "1000", 4);
    Sys(__NR_close, oom_fd);
    if (r < 0) FailInChild(a, kStageOomScore, 0, r);
  }
  Sys(__NR_umask, a->spare_umask);
  r = Sys(__NR_chdir, a->plan->cwd.c_str());
  if (r < 0) FailInChild(a, kStageChdir, 0, r);
}

}  // namespace

// The command: runs after clone(CLONE_VM|CLONE_VFORK), from the parent (plain) or from init (both
// sandbox modes). Its parent sleeps until execve succeeds or this function exits.
int CommandInChild(void* argp) {
  ChildArgs* a = static_cast<ChildArgs*>(argp);
  const LinuxSpawnPlan& p = *a->plan;
  // Every disposition back to SIG_DFL (the host's handlers must never run here, and SIG_IGN would
  // survive execve). Under init that is done already: init reset all of them and installs none,
  // and a clone copies its parent's table, so a second pass would be 62 syscalls that change nothing.
  if (p.mode == LinuxMode::kPlain) ResetSignalsInChild();
  long r;
  // The traced process cap (spawn_trace.cc): init seizes us first, so that nothing of ours runs
  // untraced; and we are no vfork child then, so init writes our oom_score_adj (below).
  const bool traced = p.mode != LinuxMode::kPlain && p.trace_process_cap != 0;
  if (traced) {
    uint32_t go;
    while ((go = __atomic_load_n(&a->trace_go, __ATOMIC_ACQUIRE)) == 0) {
      Sys(__NR_futex, &a->trace_go, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
    }
    if (go != 1) FailInChild(a, kStageTrace, 0, a->trace_err);
  }
  // Join the sandbox's cgroups first, so that everything the command does is counted there.
  // Writing "0" moves the writer only: we are still a vfork child sharing the host's memory, and
  // a memory cgroup charges an mm to its owner (the host), so init and the host stay outside.
  for (int fd : p.cgroup_fds) {
    r = Sys(__NR_write, fd, "0", 1);
    if (r < 0) FailInChild(a, kStageCgroup, fd, r);
  }
  const bool spare = a->spare_ctrl >= 0;
  long oom_fd = -1;
  if (p.mode != LinuxMode::kPlain && !traced) {
    // The OOM killer takes the command, never init or the host (init shares the host's mm; a
    // victim's mm dies with every process sharing it). The kernel copies a new oom_score_adj to
    // every process sharing the writer's mm, except when the writer is a vfork child, as we are
    // until execve: only this process (and what it forks later) changes. No procfs (ENOENT) only
    // loses the preference.
    // Prepared ahead: not before the go. Parked, this process still shares the host's memory, so
    // as the OOM killer's first choice it would make the host the first victim of a memory
    // shortage for as long as it waits. The file is opened now (Landlock refuses it later) and
    // written at the go (ParkInChild), above every fd the go places.
    if (spare) {
      oom_fd = Sys(__NR_openat, AT_FDCWD, "/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
      if (oom_fd >= 0) {
        long hi = Sys(__NR_fcntl, oom_fd, F_DUPFD_CLOEXEC, kSpareMaxStdio);
        Sys(__NR_close, oom_fd);
        oom_fd = hi;
      }
      if (oom_fd < 0 && oom_fd != -ENOENT && !(oom_fd == -EACCES && OomScoreAlreadyMaxInChild())) {
        FailInChild(a, kStageOomScore, 0, oom_fd);
      }
    } else {
      r = WriteFileInChild("/proc/self/oom_score_adj", "1000");
      if (r < 0 && r != -ENOENT && !(r == -EACCES && OomScoreAlreadyMaxInChild())) FailInChild(a, kStageOomScore, 0, r);
    }
  }
  if (p.setsid) {
    r = Sys(__NR_setsid);
  } else {
    r = Sys(__NR_setpgid, 0, 0);
  }
  if (r < 0) FailInChild(a, kStageSetsid, 0, r);
  r = Sys(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (r < 0) FailInChild(a, kStagePdeath, 0, r);
  // The parent may have died before PDEATHSIG was armed. (Under init the parent is in another
  // pid namespace layer; init's own exit kills us anyway.)
  if (p.mode == LinuxMode::kPlain && Sys(__NR_getppid) != a->parent_pid) ExitInChild(125);
  // A prepared-ahead command gets its stdio and enters its cwd when it is used (ParkInChild).
  if (!spare) {
    for (int i = 0; i < a->nstdio; ++i) {
      r = Sys(__NR_dup3, a->pty_slave >= 0 && i < 3 ? a->pty_slave : a->stdio_fds[i], i, 0);
      if (r < 0) FailInChild(a, kStageStdio, i, r);
    }
    if (p.ctty) SetControllingTerminalInChild(a);
    // Every other fd closes at execve; the errno pipe stays open until then.
    r = CloexecFromInChild(a->nstdio);
    if (r < 0) FailInChild(a, kStageCloseFds, 0, r);
  }
  const struct {
    int resource;
    uint64_t value;
  } limits[] = {{RLIMIT_NPROC, p.rlimit_nproc},         {RLIMIT_AS, p.rlimit_as},
                {RLIMIT_NOFILE, p.rlimit_nofile},       {RLIMIT_SIGPENDING, p.rlimit_sigpending},
                {RLIMIT_MSGQUEUE, p.rlimit_msgqueue}};
  if (p.mode != LinuxMode::kPlain) {
    // No core dumps: a seccomp kill must not leave a file (PROC-21).
    struct rlimit64 zero = {0, 0};
    r = Sys(__NR_prlimit64, 0, RLIMIT_CORE, &zero, 0);
    if (r < 0) FailInChild(a, kStageRlimit, RLIMIT_CORE, r);
  }
  for (const auto& l : limits) {
    if (l.value == 0) continue;
    struct rlimit64 rl = {l.value, l.value};
    // Never above a hard limit already in force (a sandbox nested in one of ours, or a host run
    // under a lower limit): raising it needs a capability (EPERM), and the tighter bound holds.
    struct rlimit64 now;
    if (Sys(__NR_prlimit64, 0, l.resource, 0, &now) == 0 && now.rlim_max < rl.rlim_max) rl = {now.rlim_max, now.rlim_max};
    r = Sys(__NR_prlimit64, 0, l.resource, &rl, 0);
    if (r < 0) FailInChild(a, kStageRlimit, l.resource, r);
  }
  if (p.drop_caps) {
    r = DropCapsInChild();
    if (r < 0) FailInChild(a, kStageCaps, 0, r);
  }
  // After the capability drop: the cwd must be enterable by the sandboxed identity itself (a
  // capability could otherwise walk into a deny-read mask).
  if (!spare) {
    r = Sys(__NR_chdir, p.cwd.c_str());
    if (r < 0) FailInChild(a, kStageChdir, 0, r);
  }
  if (p.landlock || p.seccomp) {
    r = Sys(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (r < 0) FailInChild(a, kStageNoNewPrivs, 0, r);
  }
  if (p.landlock) {
    r = ApplyLandlockInChild(p.landlock_plan);
    if (r < 0) FailInChild(a, kStageLandlock, 0, r);
  }
  if (p.seccomp) {
    r = InstallSeccompInChild(&a->fprog, p.seccomp_listener);
    if (r < 0) FailInChild(a, kStageSeccomp, 0, r);
    if (p.seccomp_listener) {
      // The listener goes to the parent and never stays here: whoever holds it answers this
      // filter's connects. sendmsg without MSG_FASTOPEN passes the filter just installed.
      long listener = r;
      r = SendFdInChild(a->fd_channel, static_cast<int>(listener), 'N');
      Sys(__NR_close, listener);
      if (r < 0) FailInChild(a, kStageSeccomp, 1, r);
    }
  }
  if (spare) ParkInChild(a, static_cast<int>(oom_fd));
  uint64_t empty = 0;
  Sys(__NR_rt_sigprocmask, SIG_SETMASK, &empty, 0, 8);
  r = Sys(__NR_execve, p.file.c_str(), a->argv, a->envp);
  FailInChild(a, kStageExec, 0, r);
}
}  // namespace spawn_internal
}  // namespace psb
