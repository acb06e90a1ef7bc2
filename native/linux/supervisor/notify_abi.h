// The seccomp user-notification ABI and the small steps every supervisor answer takes (see
// supervisor.cc and the files of its classes). Host side only: never used between fork and
// exec. The structs are spelled out because this directory's seccomp.h shadows <linux/seccomp.h>.
// Tests: none directly; every supervisor test (test/linux/supervisor-thread.test.ts,
// test/linux/supervisor-confined.test.ts, test/linux/connect-supervisor.test.ts, ...).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../proc_fields.h"
#include "../syscall_numbers.h"

namespace psb {
namespace notify {

struct SeccompData {
  int32_t nr;
  uint32_t arch;
  uint64_t instruction_pointer;
  uint64_t args[6];
};
struct SeccompNotif {
  uint64_t id;
  uint32_t pid;
  uint32_t flags;
  SeccompData data;
};
struct SeccompNotifResp {
  uint64_t id;
  int64_t val;
  int32_t error;
  uint32_t flags;
};
struct SeccompNotifAddfd {
  uint64_t id;
  uint32_t flags;
  uint32_t srcfd;
  uint32_t newfd;
  uint32_t newfd_flags;
};
static_assert(sizeof(SeccompNotif) == 80, "struct seccomp_notif layout");
static_assert(sizeof(SeccompNotifResp) == 24, "struct seccomp_notif_resp layout");
static_assert(sizeof(SeccompNotifAddfd) == 24, "struct seccomp_notif_addfd layout");
constexpr unsigned long kNotifRecv = _IOWR('!', 0, SeccompNotif);
constexpr unsigned long kNotifSend = _IOWR('!', 1, SeccompNotifResp);
constexpr unsigned long kNotifIdValid = _IOW('!', 2, uint64_t);
constexpr unsigned long kNotifAddfd = _IOW('!', 3, SeccompNotifAddfd);
constexpr unsigned long kNotifSetFlags = _IOW('!', 4, uint64_t);  // SECCOMP_IOCTL_NOTIF_SET_FLAGS (6.6)
constexpr unsigned long kNotifFdSyncWakeUp = 1;                    // SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
constexpr uint32_t kUserNotifFlagContinue = 1;
constexpr uint32_t kAddfdFlagSetfd = 1;
constexpr unsigned kPidfdThread = O_EXCL;  // PIDFD_THREAD (6.9): a pidfd for a thread id

// The low word of a syscall argument: what the kernel acts on for an int or unsigned int.
inline int ArgInt(const SeccompNotif& n, int i) { return static_cast<int>(static_cast<uint32_t>(n.data.args[i])); }

// Answers a notification: error 0 is success, else a negative errno. A failure (ENOENT: the task
// was killed or its call interrupted) needs nothing more: nobody waits.
inline void Respond(int listener, uint64_t id, int error, uint32_t flags = 0) {
  SeccompNotifResp r;
  memset(&r, 0, sizeof r);
  r.id = id;
  r.error = error;
  r.flags = flags;
  ioctl(listener, kNotifSend, &r);
}

// Answers with a syscall's return value: >= 0 is the value, < 0 a negative errno.
inline void RespondResult(int listener, uint64_t id, long result) {
  SeccompNotifResp r;
  memset(&r, 0, sizeof r);
  r.id = id;
  if (result < 0) r.error = static_cast<int32_t>(result);
  else r.val = result;
  ioctl(listener, kNotifSend, &r);
}

inline void Continue(int listener, uint64_t id) { Respond(listener, id, 0, kUserNotifFlagContinue); }

inline bool IdValid(int listener, uint64_t id) { return ioctl(listener, kNotifIdValid, &id) == 0; }

// The thread group of task `tid` (before PIDFD_THREAD, a pidfd names a whole process; its fd
// table is the one the thread uses). 0 when unknown.
inline uint32_t ThreadGroup(uint32_t tid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%u/status", tid);
  if (!procfs::ReadSmall(path, buf, sizeof buf)) return 0;
  return static_cast<uint32_t>(procfs::KeyNumber(buf, "Tgid", 10, 0));
}

// The pidfds a supervisor's thread opened for its command's threads, kept for the next calls:
// opening one makes a pidfs file (about 2 us), a dup of a kept one costs a tenth of that. Only
// PIDFD_THREAD pidfds are kept (a thread's, never a whole process's: keyed by thread id, a
// process pidfd would outlive the thread and name another process once the id is reused). A
// kept pidfd names the task holding its id, whatever it was when opened: once that task has
// exited, the pidfd polls readable (the id is only reused after that), and it is opened afresh.
// Per thread: each supervisor has a thread of its own; closed when the thread ends.
// A small ring of fds kept per task id by a supervisor's thread (pidfds below; status files in
// notify_args.cc): the oldest is closed when a new one needs its slot; all close with the thread.
struct TidFdRing {
  static constexpr int kSize = 16;
  struct Entry {
    uint32_t tid = 0;
    int fd = -1;
  } e[kSize];
  int next = 0;
  TidFdRing() = default;
  TidFdRing(const TidFdRing&) = delete;
  TidFdRing& operator=(const TidFdRing&) = delete;
  ~TidFdRing() {
    for (Entry& x : e) {
      if (x.fd >= 0) close(x.fd);
    }
  }
  // The entry kept for tid, or nullptr.
  Entry* Find(uint32_t tid) {
    for (Entry& x : e) {
      if (x.fd >= 0 && x.tid == tid) return &x;
    }
    return nullptr;
  }
  // Closes every entry (a task whose thread-local storage outlives it: supervisor.cc).
  void Clear() {
    for (Entry& x : e) {
      if (x.fd >= 0) close(x.fd);
      x.fd = -1;
    }
  }
  // Closes an entry whose task is gone (its id names another task now, or none).
  static void Drop(Entry* x) {
    close(x->fd);
    x->fd = -1;
  }
  // Keeps fd (owned from now on) for tid.
  void Put(uint32_t tid, int fd) {
    Entry& x = e[next];
    next = (next + 1) % kSize;
    if (x.fd >= 0) close(x.fd);
    x = {tid, fd};
  }
};

struct PidfdCache {
  TidFdRing ring;
  // A new fd (the caller closes it) naming the live task `tid`, or -1.
  int Get(uint32_t tid) {
    TidFdRing::Entry* x = ring.Find(tid);
    if (x == nullptr) return -1;
    struct pollfd p = {x->fd, POLLIN, 0};
    if (poll(&p, 1, 0) == 0) return fcntl(x->fd, F_DUPFD_CLOEXEC, 0);
    TidFdRing::Drop(x);  // that task has exited
    return -1;
  }
  void Put(uint32_t tid, int fd) {
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy >= 0) ring.Put(tid, copy);
  }
};
inline thread_local PidfdCache pidfd_cache;

// A pidfd for the notifying task, checked afterwards to still name the task that made call `id`
// (no pid reuse in between). -1 when none can be had or the call is gone.
inline int PidfdFor(int listener, const SeccompNotif& n) {
  int pidfd = pidfd_cache.Get(n.pid);
  if (pidfd < 0) {
    pidfd = static_cast<int>(syscall(__NR_pidfd_open, n.pid, kPidfdThread));
    if (pidfd >= 0) pidfd_cache.Put(n.pid, pidfd);
  }
  if (pidfd < 0) pidfd = static_cast<int>(syscall(__NR_pidfd_open, ThreadGroup(n.pid), 0));  // pre-6.9
  if (pidfd >= 0 && !IdValid(listener, n.id)) {
    close(pidfd);
    return -1;
  }
  return pidfd;
}

}  // namespace notify
}  // namespace psb
