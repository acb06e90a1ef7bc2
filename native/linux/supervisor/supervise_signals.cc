// Landlock mode's signal rules where Landlock cannot scope signals (ABI < 6; PROC-06).
//
// What it holds: a sandboxed command signals members of its own sandbox only, by every route:
// kill (a pid, 0, -1, -pgid), tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo,
// pidfd_send_signal, and the owner of SIGIO/SIGURG (fcntl F_SETOWN, F_SETOWN_EX). A signal to
// anything else fails with EPERM, the errno Landlock's scope gives on ABI 6+ (which the command
// gets instead of this supervisor there: binding_linux.cc sets LANDLOCK_SCOPE_SIGNAL).
//
// Membership. Landlock mode has no pid namespace. The sandbox's init is a child subreaper
// (spawn_init.cc), so every process the command ever starts stays a descendant of init: an
// orphan is re-parented to its nearest subreaper ancestor, which is init or a member. And no
// process outside becomes one: a parent link only ever points at the process that forked it or
// at a subreaper ancestor of that one. So "X is a member" is "X is a strict descendant of init",
// and it never changes for X's lifetime; init itself is not a member (Landlock's scope does not
// let the command signal it either). Why not the sandbox's cgroup: there is none on many hosts
// (an unprivileged host outside a delegated unit, a default container), and the subreaper is in
// every Landlock-mode sandbox; a cgroup would not be cheaper to ask either (one /proc read).
// Why not process groups or sessions: a member may setsid() into a group of its own.
//
// Judging without pid reuse races (Member below). The target is pinned first with pidfd_open,
// and every fact read from /proc/<pid> counts only if that pid's pidfd still holds the pid
// afterwards (Holds: pidfd_send_signal(pidfd, 0) does not say ESRCH, i.e. the process is not
// reaped, so no other process can have the number). Walking up, each parent is pinned and the
// child's parent link read again: when it still names that pid and both still hold their pids,
// the pinned process WAS the child's parent at that instant. Membership does not change along a
// parent link (see above), so the chain ends in init (pinned by the supervisor since the start)
// or outside (pid 1, the host), and the verdict is about the pinned target. The signal then goes
// through the target's pidfd, never through its number.
//
// Performing it. An allowed signal is sent here (pidfd_send_signal), with this thread's effective
// capabilities cleared, so that the kernel's own permission check (same uid, or a capability the
// command does not have) is made for the command's credentials (the host's uid and gids, no
// capabilities). The receiver's siginfo names the host process as sender (si_pid), not the
// member that sent it: the kernel lets only a process signalling itself choose si_code >= 0.
// Calls that signal the caller's own process are continued (the kernel runs them) when their
// target is in registers and cannot be reused while the caller waits (raise(), abort(),
// pthread_kill to its own threads, kill(getpid())). A group signal that includes the caller
// (kill(0), kill(-own pgid)) signals every other member here, answers, and then signals the
// caller through its pidfd: signalled while it waits in the call, the caller would be woken
// with ERESTARTSYS and make the call again, for ever.
//
// Group signals (kill(0), kill(-pgid), kill(-1), pidfd_send_signal with
// PIDFD_SIGNAL_PROCESS_GROUP) go to the members in that group: candidates come from init's
// /proc/<pid>/task/<tid>/children lists (every pid in /proc without CONFIG_PROC_CHILDREN), and
// each is judged by Member like a single target, so a candidate list that is out of date costs
// nothing but the lookups. Answers follow the kernel's: 0 when any was signalled, ESRCH when no
// member is in the group, else the last error.
//
// Left as the kernel's: a signal to another member's THREAD (tgkill, rt_tgsigqueueinfo,
// a thread pidfd) goes to that thread through a thread pidfd where the kernel has them (6.9+);
// before that to the member's process (any thread), since a thread id alone cannot be pinned.
// F_SETOWN/F_SETOWN_EX may name the caller itself (its thread, process or process group) or
// nobody; another member is refused (EPERM) rather than judged, as the owner is resolved again
// by the kernel later.
// Tests: test/linux/signals.test.ts, test/linux/threats-proc.test.ts.
#include "supervise_signals.h"

#include "notify_args.h"
#include "../proc_fields.h"
#include "task_access.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace psb {
namespace {

using notify::ArgInt;
using notify::Continue;
using notify::IdValid;
using notify::Respond;
using notify::SeccompNotif;
// Fd: closed on every return path. EffectiveCapsCleared: this thread's effective capabilities
// cleared while a signal is sent, as in supervise_metadata.cc, so that the kernel's signal
// permission check is the command's.
using nargs::EffectiveCapsCleared;
using nargs::Fd;

constexpr int kMaxDepth = 4096;           // parent links walked at most (a deeper chain: refused)
constexpr int kMaxRestarts = 16;          // walks restarted because an ancestor died meanwhile
constexpr size_t kMaxCandidates = 65536;  // processes looked at for one group signal
constexpr int kSigMax = 64;               // _NSIG
constexpr unsigned kPidfdSignalProcessGroup = 1u << 2;  // PIDFD_SIGNAL_PROCESS_GROUP (6.9)
constexpr int kFSetOwn = 8, kFSetOwnEx = 15, kFGetOwnEx = 16;
constexpr int kOwnerTid = 0, kOwnerPid = 1, kOwnerPgrp = 2;

struct OwnerEx {  // struct f_owner_ex
  int type;
  pid_t pid;
};

long PidfdOpen(pid_t pid, unsigned flags) { return syscall(__NR_pidfd_open, pid, flags); }
long PidfdSend(int pidfd, int sig, siginfo_t* info, unsigned flags) {
  long r = syscall(__NR_pidfd_send_signal, pidfd, sig, info, flags);
  return r < 0 ? -errno : r;
}

// Whether the process of `pidfd` still holds its pid (not reaped; a zombie still does). EPERM
// says it is there but not ours to signal.
bool Holds(int pidfd) { return syscall(__NR_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0 || errno == EPERM; }

// A signal sent here, for the command (see the top of the file). -errno or 0.
long SendAs(int pidfd, int sig, siginfo_t* info, unsigned flags) {
  EffectiveCapsCleared lowered;
  if (!lowered.ok()) return -EPERM;
  return PidfdSend(pidfd, sig, info, flags);
}

// Parent and process group of task `pid`, from /proc/<pid>/stat; false when the task is gone.
bool ReadStat(pid_t pid, pid_t* ppid, pid_t* pgid) {
  procfs::StatFields st;
  if (procfs::ReadStat(pid, &st) < 3) return false;
  *ppid = static_cast<pid_t>(st.ppid);
  *pgid = static_cast<pid_t>(st.pgrp);
  return true;
}

// The thread group of task `tid` (0 when unknown).
pid_t Tgid(pid_t tid) { return static_cast<pid_t>(notify::ThreadGroup(static_cast<uint32_t>(tid))); }

// 1: the process pinned by `pin` (thread-group leader `pid`) is a member (a strict descendant of
// init); 0: it is not (or it could not be decided: refused); -ESRCH: it is gone.
int Member(pid_t pid, int pin, const SignalRules& r) {
  if (pid <= 1 || pid == r.init) return 0;
  const pid_t host = getpid();
  int restarts = 0;
  pid_t cur = pid;
  Fd owned;  // the pin of `cur` when it is an ancestor (the target's is the caller's)
  int curfd = pin;
  for (int depth = 0; depth < kMaxDepth;) {
    pid_t ppid = 0, pgid = 0, ppid2 = 0;
    if (!ReadStat(cur, &ppid, &pgid) || !Holds(curfd)) {
      if (cur == pid) return -ESRCH;
      // An ancestor was reaped meanwhile: its children were re-parented. Start again.
      if (++restarts > kMaxRestarts) return 0;
      cur = pid, curfd = pin, depth = 0;
      owned.Reset(-1);
      continue;
    }
    // Read while cur held its pid; init's pid is init's while init's pidfd holds it.
    if (ppid == r.init) return Holds(r.init_pidfd) ? 1 : 0;
    if (ppid <= 1 || ppid == host) return 0;
    Fd parent(static_cast<int>(PidfdOpen(ppid, 0)));
    const bool same = parent.fd >= 0 && ReadStat(cur, &ppid2, &pgid) && ppid2 == ppid && Holds(curfd) && Holds(parent.fd);
    if (!same) {
      if (++restarts > kMaxRestarts) return 0;
      continue;  // cur was re-parented (or the parent went) in between: read cur again
    }
    // The pinned process was cur's parent at the second read: its membership is cur's.
    cur = ppid;
    owned.Reset(parent.fd);
    parent.fd = -1;
    curfd = owned.fd;
    ++depth;
  }
  return 0;
}

// The caller's thread group, read while it waits in its call (checked with ID_VALID after the
// read: it cannot have been reused). 0 when the call is gone.
pid_t CallerTgid(int listener, const SeccompNotif& n) {
  pid_t tgid = Tgid(static_cast<pid_t>(n.pid));
  if (tgid <= 0 || !IdValid(listener, n.id)) return 0;
  return tgid;
}

// A process pidfd of the caller's process, opened while it waits (0 on success into *fd).
int CallerProcessPidfd(int listener, const SeccompNotif& n, pid_t tgid, Fd* fd) {
  fd->Reset(static_cast<int>(PidfdOpen(tgid, 0)));
  if (fd->fd < 0 || !IdValid(listener, n.id)) return -ESRCH;
  return 0;
}

// Reads the caller's siginfo argument (128 bytes). -EFAULT when it cannot be read.
int ReadSiginfo(const SeccompNotif& n, int arg, siginfo_t* info) {
  memset(info, 0, sizeof *info);
  const long got = task::ReadTaskMemory(n.pid, n.data.args[arg], info, sizeof *info);
  return got == static_cast<long>(sizeof *info) ? 0 : -EFAULT;
}

// Pids worth judging for a group signal: init's descendants by the children lists, or every
// process in /proc where those lists do not exist.
std::vector<pid_t> Candidates(pid_t init) {
  std::vector<pid_t> out;
  std::vector<pid_t> queue = {init};
  bool lists = true;
  for (size_t i = 0; i < queue.size() && queue.size() < kMaxCandidates; ++i) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", queue[i]);
    DIR* d = opendir(path);
    if (d == nullptr) {
      if (i == 0) lists = false;
      continue;
    }
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      char file[320];
      snprintf(file, sizeof file, "/proc/%d/task/%s/children", queue[i], e->d_name);
      int f = open(file, O_RDONLY | O_CLOEXEC);
      if (f < 0) {
        if (i == 0 && errno == ENOENT) lists = false;
        continue;
      }
      char buf[8192];
      ssize_t got;
      long v = 0;
      bool in = false;
      while ((got = read(f, buf, sizeof buf)) > 0) {
        for (ssize_t k = 0; k < got; ++k) {
          if (buf[k] >= '0' && buf[k] <= '9') {
            v = v * 10 + (buf[k] - '0');
            in = true;
          } else if (in) {
            queue.push_back(static_cast<pid_t>(v));
            out.push_back(static_cast<pid_t>(v));
            v = 0;
            in = false;
          }
        }
      }
      if (in) queue.push_back(static_cast<pid_t>(v)), out.push_back(static_cast<pid_t>(v));
      close(f);
    }
    closedir(d);
    if (!lists) break;
  }
  if (lists) return out;
  out.clear();
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    out.push_back(static_cast<pid_t>(atoi(e->d_name)));
    if (out.size() >= kMaxCandidates) break;
  }
  closedir(d);
  return out;
}

// A group signal among members: those in process group `pgid`, or (pgid 0) every member but the
// caller's process (kill(-1)). The caller's own process, when it is in the group, is signalled
// after the answer (see the top of the file).
void SignalGroup(int listener, const SeccompNotif& n, pid_t caller, pid_t pgid, int sig, const SignalRules& r) {
  Fd self;
  if (CallerProcessPidfd(listener, n, caller, &self) < 0) return;
  long result = -ESRCH;
  bool any = false, self_too = false;
  for (pid_t c : Candidates(r.init)) {
    if (c == caller) {
      // The caller is a member; whether it is in the group is read while it waits.
      pid_t pp = 0, pg = 0;
      if (pgid != 0 && ReadStat(c, &pp, &pg) && pg == pgid) self_too = true;
      continue;
    }
    Fd pin(static_cast<int>(PidfdOpen(c, 0)));
    if (pin.fd < 0 || Member(c, pin.fd, r) != 1) continue;
    pid_t pp = 0, pg = 0;
    if (pgid != 0 && !(ReadStat(c, &pp, &pg) && Holds(pin.fd) && pg == pgid)) continue;
    long e = SendAs(pin.fd, sig, nullptr, 0);
    if (e == 0) any = true;
    else if (result == -ESRCH || e != -EPERM) result = e;
  }
  if (self_too) any = true;
  Respond(listener, n.id, any ? 0 : static_cast<int>(result));
  if (self_too) SendAs(self.fd, sig, nullptr, 0);
}

// A signal for one process (kill, rt_sigqueueinfo), `pid` > 0, not the caller's own.
void SignalOne(int listener, const SeccompNotif& n, pid_t pid, int sig, siginfo_t* info, const SignalRules& r) {
  Fd pin(static_cast<int>(PidfdOpen(pid, 0)));
  if (pin.fd < 0 && errno == EINVAL) {
    // Not a thread-group leader: the kernel signals the thread's process.
    pid_t tgid = Tgid(pid);
    if (tgid > 0) pin.Reset(static_cast<int>(PidfdOpen(tgid, 0)));
    if (pin.fd >= 0 && Tgid(pid) != tgid) pin.Reset(-1);
    pid = tgid;
  }
  if (pin.fd < 0) return Respond(listener, n.id, -ESRCH);
  int m = Member(pid, pin.fd, r);
  if (m < 0) return Respond(listener, n.id, m);
  if (m == 0) return Respond(listener, n.id, -EPERM);
  Respond(listener, n.id, static_cast<int>(SendAs(pin.fd, sig, info, 0)));
}

// A signal for one thread `tid` of process `tgid` (tgkill, tkill, rt_tgsigqueueinfo), another
// process than the caller's.
void SignalThread(int listener, const SeccompNotif& n, pid_t tgid, pid_t tid, int sig, siginfo_t* info, const SignalRules& r) {
  Fd pin(static_cast<int>(PidfdOpen(tgid, 0)));
  if (pin.fd < 0) return Respond(listener, n.id, -ESRCH);
  int m = Member(tgid, pin.fd, r);
  if (m < 0) return Respond(listener, n.id, m);
  if (m == 0) return Respond(listener, n.id, -EPERM);
  // The thread, pinned (6.9+) and checked to be one of tgid's while both hold their ids.
  Fd thread(static_cast<int>(PidfdOpen(tid, notify::kPidfdThread)));
  if (thread.fd >= 0) {
    if (Tgid(tid) != tgid || !Holds(thread.fd) || !Holds(pin.fd)) return Respond(listener, n.id, -ESRCH);
    return Respond(listener, n.id, static_cast<int>(SendAs(thread.fd, sig, info, 0)));
  }
  if (errno == ESRCH) return Respond(listener, n.id, -ESRCH);
  // Before thread pidfds: to the process (see the top of the file), when tid is one of its threads.
  if (Tgid(tid) != tgid || !Holds(pin.fd)) return Respond(listener, n.id, -ESRCH);
  Respond(listener, n.id, static_cast<int>(SendAs(pin.fd, sig, info, 0)));
}

void HandleKill(int listener, const SeccompNotif& n, const SignalRules& r) {
  const int pid = ArgInt(n, 0), sig = ArgInt(n, 1);
  if (sig < 0 || sig > kSigMax) return Respond(listener, n.id, -EINVAL);
  // The caller's own process (its main thread's id): nothing to judge.
  if (pid == static_cast<int>(n.pid)) return Continue(listener, n.id);
  const pid_t caller = CallerTgid(listener, n);
  if (caller == 0) return;
  if (pid == caller) return Continue(listener, n.id);
  if (pid == INT_MIN) return Respond(listener, n.id, -ESRCH);
  if (pid > 0) {
    if (Tgid(pid) == caller) {
      // Another thread's id of the caller's own process: the whole process gets it, the caller
      // too, which must not be signalled while it waits (see the top of the file).
      Fd self;
      if (CallerProcessPidfd(listener, n, caller, &self) < 0) return;
      Respond(listener, n.id, 0);
      SendAs(self.fd, sig, nullptr, 0);
      return;
    }
    return SignalOne(listener, n, pid, sig, nullptr, r);
  }
  if (pid == -1) return SignalGroup(listener, n, caller, 0, sig, r);
  pid_t pgid = -pid;
  if (pid == 0) {
    pid_t pp = 0;
    if (!ReadStat(caller, &pp, &pgid) || !IdValid(listener, n.id)) return;
  }
  SignalGroup(listener, n, caller, pgid, sig, r);
}

void HandleThreadKill(int listener, const SeccompNotif& n, bool tg, bool with_info, const SignalRules& r) {
  // tkill(tid, sig); tgkill(tgid, tid, sig); rt_tgsigqueueinfo(tgid, tid, sig, info).
  const int tid = ArgInt(n, tg ? 1 : 0), sig = ArgInt(n, tg ? 2 : 1);
  int tgid = tg ? ArgInt(n, 0) : 0;
  if (tid <= 0 || (tg && tgid <= 0) || sig < 0 || sig > kSigMax) return Respond(listener, n.id, -EINVAL);
  // raise(), abort(), pthread_kill(pthread_self()): the caller's own thread.
  if (tid == static_cast<int>(n.pid)) return Continue(listener, n.id);
  const pid_t caller = CallerTgid(listener, n);
  if (caller == 0) return;
  // With tgid the caller's, the kernel's own check (tid must be a thread of tgid) decides, and
  // that tgid cannot be reused while the caller waits.
  if (tg && tgid == caller) return Continue(listener, n.id);
  if (!tg) tgid = Tgid(tid);
  if (tgid <= 0) return Respond(listener, n.id, -ESRCH);
  if (tgid == caller) {
    // tkill to another thread of the caller's process: sent here as tgkill with the caller's
    // tgid, which holds its number while the caller waits (a bare tid could be reused).
    long e = syscall(__NR_tgkill, caller, tid, sig);
    return Respond(listener, n.id, e < 0 ? -errno : 0);
  }
  siginfo_t info;
  if (with_info) {
    if (int e = ReadSiginfo(n, 3, &info)) return Respond(listener, n.id, e);
    info.si_signo = sig;
  }
  SignalThread(listener, n, tgid, tid, sig, with_info ? &info : nullptr, r);
}

void HandleSigqueue(int listener, const SeccompNotif& n, const SignalRules& r) {
  // rt_sigqueueinfo(tgid, sig, info)
  const int pid = ArgInt(n, 0), sig = ArgInt(n, 1);
  if (pid == static_cast<int>(n.pid)) return Continue(listener, n.id);
  const pid_t caller = CallerTgid(listener, n);
  if (caller == 0) return;
  if (pid == caller) return Continue(listener, n.id);
  if (pid <= 0 || sig < 0 || sig > kSigMax) return Respond(listener, n.id, pid <= 0 ? -ESRCH : -EINVAL);
  siginfo_t info;
  if (int e = ReadSiginfo(n, 2, &info)) return Respond(listener, n.id, e);
  info.si_signo = sig;
  if (Tgid(pid) == caller) return Respond(listener, n.id, -EPERM);  // another thread id of its own: refused
  SignalOne(listener, n, pid, sig, &info, r);
}

// The pid a pidfd of ours names (its "Pid:" in fdinfo; -1 when the process is gone), and whether
// it is a thread pidfd. False when fd is not a pidfd.
bool PidfdTarget(int fd, pid_t* pid, bool* thread) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/thread-self/fdinfo/%d", fd);
  if (!procfs::ReadSmall(path, buf, sizeof buf)) return false;
  // A value no line can hold marks a missing key ("Pid:" is -1 for a process that is gone).
  const long p = procfs::KeyNumber(buf, "Pid", 10, LONG_MIN);
  const long f = procfs::KeyNumber(buf, "flags", 8, LONG_MIN);
  if (p == LONG_MIN || f == LONG_MIN) return false;
  *pid = static_cast<pid_t>(p);
  *thread = (static_cast<unsigned long>(f) & notify::kPidfdThread) != 0;
  return true;
}

void HandlePidfdSend(int listener, const SeccompNotif& n, const SignalRules& r) {
  // pidfd_send_signal(pidfd, sig, info, flags): judged on our own copy of the command's pidfd,
  // which is then the one signalled (its fd table may change meanwhile; the copy does not).
  const int sig = ArgInt(n, 1);
  const unsigned flags = static_cast<unsigned>(ArgInt(n, 3));
  Fd caller_fd(notify::PidfdFor(listener, n));
  if (caller_fd.fd < 0) return;
  // The same open file (a pidfd, or the file whose owner is set): only pidfd_getfd gives it;
  // where a container's profile refuses that call (task_access.h) this route is refused.
  Fd copy(task::DupTaskFd(caller_fd.fd, n.pid, ArgInt(n, 0)));
  if (copy.fd == -EPERM) return Respond(listener, n.id, -EPERM);
  if (copy.fd < 0) return Respond(listener, n.id, -EBADF);
  pid_t target = 0;
  bool thread = false;
  if (!PidfdTarget(copy.fd, &target, &thread)) return Respond(listener, n.id, -EBADF);
  if (target <= 0) return Respond(listener, n.id, -ESRCH);
  if (sig < 0 || sig > kSigMax) return Respond(listener, n.id, -EINVAL);
  siginfo_t info;
  const bool with_info = n.data.args[2] != 0;
  if (with_info) {
    if (int e = ReadSiginfo(n, 2, &info)) return Respond(listener, n.id, e);
  }
  const pid_t caller = CallerTgid(listener, n);
  if (caller == 0) return;
  const pid_t tgid = thread ? Tgid(target) : target;
  if (tgid <= 0 || !Holds(copy.fd)) return Respond(listener, n.id, -ESRCH);
  if (flags & kPidfdSignalProcessGroup) {
    pid_t pp = 0, pg = 0;
    if (!ReadStat(target, &pp, &pg) || !Holds(copy.fd)) return Respond(listener, n.id, -ESRCH);
    if (with_info) return Respond(listener, n.id, -EPERM);  // a forged siginfo for a group: not supported
    return SignalGroup(listener, n, caller, pg, sig, r);
  }
  if (tgid == caller) {
    // The caller's own process: signalled after the answer (see the top of the file).
    Respond(listener, n.id, 0);
    SendAs(copy.fd, sig, with_info ? &info : nullptr, flags);
    return;
  }
  Fd pin(static_cast<int>(thread ? PidfdOpen(tgid, 0) : fcntl(copy.fd, F_DUPFD_CLOEXEC, 0)));
  if (pin.fd < 0 || (thread && (Tgid(target) != tgid || !Holds(copy.fd)))) return Respond(listener, n.id, -ESRCH);
  int m = Member(tgid, pin.fd, r);
  if (m < 0) return Respond(listener, n.id, m);
  if (m == 0) return Respond(listener, n.id, -EPERM);
  Respond(listener, n.id, static_cast<int>(SendAs(copy.fd, sig, with_info ? &info : nullptr, flags)));
}

void HandleSetOwner(int listener, const SeccompNotif& n) {
  // fcntl(fd, F_SETOWN, pid or -pgid) / fcntl(fd, F_SETOWN_EX, &f_owner_ex).
  const int cmd = ArgInt(n, 1);
  const pid_t caller = CallerTgid(listener, n);
  if (caller == 0) return;
  pid_t pp = 0, pgid = 0;
  if (!ReadStat(caller, &pp, &pgid) || !IdValid(listener, n.id)) return;
  if (cmd == kFSetOwn) {
    // The argument is in a register: the kernel reads the value judged here. The caller's own
    // process and group hold their numbers while it waits in the call.
    const int who = ArgInt(n, 2);
    if (who == 0 || who == caller || who == static_cast<int>(n.pid) || who == -pgid) return Continue(listener, n.id);
    return Respond(listener, n.id, -EPERM);
  }
  // F_SETOWN_EX: the struct is in the command's memory, which may change after it is read, so
  // the owner is set here, on our copy of the fd (the owner belongs to the open file).
  OwnerEx o;
  if (task::ReadTaskMemory(n.pid, n.data.args[2], &o, sizeof o) != static_cast<long>(sizeof o)) {
    return Respond(listener, n.id, -EFAULT);
  }
  const bool own = o.pid == 0 || (o.type == kOwnerTid && o.pid == static_cast<pid_t>(n.pid)) ||
                   (o.type == kOwnerPid && o.pid == caller) || (o.type == kOwnerPgrp && o.pid == pgid);
  if (!own) return Respond(listener, n.id, o.type < kOwnerTid || o.type > kOwnerPgrp ? -EINVAL : -EPERM);
  Fd caller_fd(notify::PidfdFor(listener, n));
  if (caller_fd.fd < 0) return;
  // The same open file (a pidfd, or the file whose owner is set): only pidfd_getfd gives it;
  // where a container's profile refuses that call (task_access.h) this route is refused.
  Fd copy(task::DupTaskFd(caller_fd.fd, n.pid, ArgInt(n, 0)));
  if (copy.fd == -EPERM) return Respond(listener, n.id, -EPERM);
  if (copy.fd < 0) return Respond(listener, n.id, -EBADF);
  EffectiveCapsCleared lowered;
  if (!lowered.ok()) return Respond(listener, n.id, -EPERM);
  // Set while the caller waits: its thread, process and group hold their numbers.
  int rc = fcntl(copy.fd, F_SETOWN_EX, &o);
  Respond(listener, n.id, rc < 0 ? -errno : 0);
}

}  // namespace

int ProcessIsMember(pid_t tgid, const SignalRules& r) noexcept {
  if (tgid <= 1 || r.init_pidfd < 0) return 0;
  Fd pin(static_cast<int>(PidfdOpen(tgid, 0)));
  if (pin.fd < 0) return errno == ESRCH ? -ESRCH : 0;  // EINVAL: not a thread-group leader
  return Member(tgid, pin.fd, r);
}

bool IsSignalCall(const SeccompNotif& n) noexcept {
  const int nr = n.data.nr;
  if (nr == __NR_fcntl) {
    const int cmd = ArgInt(n, 1);
    return cmd == kFSetOwn || cmd == kFSetOwnEx;
  }
  return nr == __NR_kill || nr == __NR_tkill || nr == __NR_tgkill || nr == __NR_rt_sigqueueinfo ||
         nr == __NR_rt_tgsigqueueinfo || nr == __NR_pidfd_send_signal;
}

void HandleSignal(int listener, const SeccompNotif& n, const SignalRules& r) noexcept {
  static_assert(kFGetOwnEx == kFSetOwnEx + 1, "fcntl numbers");
  const int nr = n.data.nr;
  if (r.init <= 0 || r.init_pidfd < 0) return Respond(listener, n.id, -EPERM);  // nothing to judge by: closed
  if (nr == __NR_kill) return HandleKill(listener, n, r);
  if (nr == __NR_tkill) return HandleThreadKill(listener, n, false, false, r);
  if (nr == __NR_tgkill) return HandleThreadKill(listener, n, true, false, r);
  if (nr == __NR_rt_tgsigqueueinfo) return HandleThreadKill(listener, n, true, true, r);
  if (nr == __NR_rt_sigqueueinfo) return HandleSigqueue(listener, n, r);
  if (nr == __NR_pidfd_send_signal) return HandlePidfdSend(listener, n, r);
  if (nr == __NR_fcntl) return HandleSetOwner(listener, n);
  Respond(listener, n.id, -EPERM);
}

}  // namespace psb
