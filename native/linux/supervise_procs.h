// Landlock mode's process cap where nothing else binds: root (RLIMIT_NPROC never binds uid 0)
// without a pids cgroup (a default container: the cgroup file system is read-only). The
// command's filter (SeccompConfig::notify_procs) stops clone (after its namespace checks), fork
// and vfork in user notifications, and the supervisor answers them here: EAGAIN once the sandbox
// has `cap` tasks, threads included, as pids.max and RLIMIT_NPROC answer. See supervise_procs.cc
// for how it counts and by how much concurrent forks can overshoot.
//
// Threading: HandleProcs runs on the sandbox's supervisor thread, the only one that touches the
// rules' counter.
#pragma once

#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "notify_abi.h"

namespace psb {

struct ProcRules {
  bool enabled = false;
  uint32_t cap = 0;  // the sandbox's tasks at most (init's descendants, as its pids cgroup holds)
  // The sandbox's init (a child subreaper, the host's child): members are its descendants. Set
  // when the sandbox has started, with a pidfd of it (owned) that pins the number.
  pid_t init = 0;
  int init_pidfd = -1;
  // An upper estimate of the sandbox's tasks: the last exact count plus every clone approved
  // since (exits are not seen). Starts at 1 (the command; its own clones all wait for this
  // supervisor).
  uint32_t estimate = 1;
  // The callers (thread ids) of the clones approved since the last count: at the next count,
  // those still in the kernel's copy are added to it (supervise_procs.cc, "Overshoot").
  std::vector<pid_t> approved;

  ProcRules() = default;
  ProcRules(const ProcRules&) = delete;
  ProcRules& operator=(const ProcRules&) = delete;
  ProcRules(ProcRules&& o) noexcept
      : enabled(o.enabled), cap(o.cap), init(o.init), init_pidfd(o.init_pidfd), estimate(o.estimate), approved(std::move(o.approved)) {
    o.init_pidfd = -1;
  }
  ProcRules& operator=(ProcRules&& o) noexcept {
    if (this != &o) {
      if (init_pidfd >= 0) close(init_pidfd);
      enabled = o.enabled, cap = o.cap, init = o.init, init_pidfd = o.init_pidfd, estimate = o.estimate;
      approved = std::move(o.approved);
      o.init_pidfd = -1;
    }
    return *this;
  }
  ~ProcRules() {
    if (init_pidfd >= 0) close(init_pidfd);
  }
};

// Whether HandleProcs answers syscall `nr` (clone, fork, vfork).
bool IsProcCall(int nr) noexcept;

// Answers notification n (IsProcCall): CONTINUE under the cap, EAGAIN at it.
void HandleProcs(int listener, const notify::SeccompNotif& n, ProcRules& rules) noexcept;

// The sandbox's tasks now (init's descendants, threads and zombies included), or -1 when init
// is gone.
long CountSandboxTasks(pid_t init, int init_pidfd) noexcept;

}  // namespace psb
