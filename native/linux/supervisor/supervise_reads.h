// Landlock mode's /proc privacy (the `procPrivacy` option): a command in Landlock mode shares the
// host's /proc, and Landlock's ptrace rule hides only what needs ptrace access (environ, mem,
// maps, fds). With the option the command's filter (SeccompConfig::notify_reads) also stops
// every read-only open and openat, and the supervisor carries each one out itself: opens of
// another process's /proc/<pid> entries fail with ENOENT and of the network tables
// (/proc/net, /proc/<pid>/net) with EACCES; everything else is opened as the command's own
// Landlock rules allow (with the network full the filter also refuses netlink's socket
// diagnostics, seccomp_table.h kPrivacyDeny). See supervise_reads.cc for the rules and why.
//
// Threading: HandleRead runs on the sandbox's supervisor thread and lowers that thread's
// effective capabilities while it acts. Opens of files that are not procfs go through a second
// thread of the host, the read opener, which is confined by a Landlock ruleset built from the
// same rules as the command's (StartReadOpener); the supervisor's task starts it as it starts,
// before it answers any call, and it shares that task's fd table. A FIFO opened for
// reading is handed to a short-lived thread that waits for its writer and answers the call.
// Tests: see supervise_reads.cc.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <memory>

#include "answer_later.h"
#include "../landlock.h"
#include "notify_abi.h"
#include "supervise_signals.h"
#include "supervise_stats.h"

namespace psb {

class ReadOpener;

struct ReadRules {
  bool enabled = false;
  // Membership (init and init_pidfd, set when the sandbox has started; `enabled` unused).
  SignalRules members;
  // The device of the host's /proc (the procfs the command's "/proc" names).
  dev_t proc_dev = 0;
  // The Landlock-confined thread that opens what is not procfs, and the rules it is confined by:
  // the supervisor starts it (StartReadOpener) from its own task, so that it shares that
  // task's fd table, never the host's (supervisor.cc, Confinement).
  std::shared_ptr<ReadOpener> opener;
  std::shared_ptr<const LandlockPlan> opener_plan;
  // The sandbox's share of FIFO waiters (answer_later.h), the path class's too; null: none.
  std::shared_ptr<later::Share> fifo_waiters;
  // With deny-read paths under readable roots (the stat class's rules, supervise_stats.h): an
  // open of a name inside a denied directory answers ENOENT, as for a missing one, before the
  // name is looked up (the opener's Landlock rules would say EACCES, and a directory opens).
  StatRules names;
};

// Started by the sandbox's supervisor thread (whose fd table it shares): a thread of the host
// that set no_new_privs, dropped its capabilities and restricted itself with a Landlock ruleset
// built from `plan` (a copy; stdio terminals aside). 0 or -errno (then the option cannot be held: the spawn is refused).
int StartReadOpener(const LandlockPlan& plan, std::shared_ptr<ReadOpener>* out) noexcept;

// Whether notification n is a read-only open or openat (what the filter sends for notify_reads).
bool IsReadCall(const notify::SeccompNotif& n) noexcept;

// Answers notification n (IsReadCall).
void HandleRead(int listener, const notify::SeccompNotif& n, const ReadRules& rules) noexcept;

// Whether a directory (its stat) is the root of the host's /proc, whose listing names every pid.
bool IsProcRootDir(const ReadRules& rules, const struct stat& st) noexcept;

// A listing of /proc's root (getdents64 records, len bytes at buf) for the command making call
// n: drops the numbered entries of processes that are not the sandbox's own, in place. Returns
// the length left (0 when none is left: the caller reads on).
long FilterProcListing(int listener, const notify::SeccompNotif& n, const ReadRules& rules, char* buf, long len) noexcept;

}  // namespace psb
