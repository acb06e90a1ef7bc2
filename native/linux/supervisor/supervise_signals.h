// Landlock mode's signal rules (PROC-06) where Landlock has no signal scope (ABI < 6): the
// command's filter (SeccompConfig::notify_signals) stops kill, tkill, tgkill, rt_sigqueueinfo,
// rt_tgsigqueueinfo, pidfd_send_signal and fcntl F_SETOWN/F_SETOWN_EX in user notifications, and
// the supervisor answers them here: a signal reaches members of the sandbox only. See
// supervise_signals.cc for membership, pinning and why it is race-free.
//
// Threading: HandleSignal runs on the sandbox's supervisor thread. It lowers that thread's
// effective capabilities while it signals and restores them before it returns.
// Tests: see supervise_signals.cc.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include "notify_abi.h"

namespace psb {

struct SignalRules {
  bool enabled = false;
  // The sandbox's init (Landlock mode: a child subreaper, the host's child): members are its
  // strict descendants. Set when the sandbox has started.
  pid_t init = 0;
  // A pidfd of init (owned: a copy of the spawn's), set with `init`: while it holds init's pid,
  // no other process has that number.
  int init_pidfd = -1;

  SignalRules() = default;
  SignalRules(const SignalRules&) = delete;
  SignalRules& operator=(const SignalRules&) = delete;
  SignalRules(SignalRules&& o) noexcept : enabled(o.enabled), init(o.init), init_pidfd(o.init_pidfd) { o.init_pidfd = -1; }
  SignalRules& operator=(SignalRules&& o) noexcept {
    if (this != &o) {
      if (init_pidfd >= 0) close(init_pidfd);
      enabled = o.enabled, init = o.init, init_pidfd = o.init_pidfd;
      o.init_pidfd = -1;
    }
    return *this;
  }
  ~SignalRules() {
    if (init_pidfd >= 0) close(init_pidfd);
  }
};

// Whether process `tgid` (a thread-group leader) is a member of the sandbox (a strict descendant
// of r.init; r.init and r.init_pidfd must be set, `enabled` need not be): 1 yes, 0 no (or not
// decidable: refuse), -ESRCH gone. Pinned and judged as for a signal (see the .cc).
int ProcessIsMember(pid_t tgid, const SignalRules& r) noexcept;

// Whether HandleSignal answers notification n.
bool IsSignalCall(const notify::SeccompNotif& n) noexcept;

// Answers notification n (a signal call, IsSignalCall): performs it on members only, else EPERM.
void HandleSignal(int listener, const notify::SeccompNotif& n, const SignalRules& rules) noexcept;

}  // namespace psb
