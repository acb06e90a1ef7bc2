// Landlock mode's process cap for root without a pids cgroup (issue Q item 4).
//
// Why here: RLIMIT_NPROC never binds uid 0 (the kernel exempts the root user outright, whatever
// its capabilities), and a pids cgroup cannot always be made (a default container: the cgroup
// file system is read-only and CAP_SYS_ADMIN is not held; user namespaces are refused, so the
// sandbox runs in Landlock mode). Every new task of the sandbox is made by clone, fork or vfork
// (clone3 fails ENOSYS in the filter and libc falls back to clone), and the filter sends those
// to this supervisor once clone's namespace checks passed (seccomp_table.h): a refused clone is
// never counted. So a count kept here sees every task the sandbox starts.
//
// Counting. Keeping it cheap: ProcRules::estimate is the last exact count plus every clone
// approved since; exits are not seen, so it only ever overstates. Under the cap a clone costs
// one round trip and an increment. When the estimate reaches the cap, the sandbox's tasks are
// counted exactly (CountSandboxTasks) and the estimate starts again from that count; only a
// count at the cap refuses. A sandbox that keeps its live tasks near the cap pays a count per
// clone; one that starts and reaps processes pays one per (cap - live) clones.
//
// The exact count: init's descendants (the members; supervise_signals.cc says why membership is
// "descendant of init" and never changes; init itself is not counted, as it is not in the pids
// cgroup where there is one), threads and zombies included (both hold a pid,
// as pids.max and RLIMIT_NPROC count them). Every process in /proc is listed with its parent
// and thread count (/proc/<pid>/stat), and membership follows the parent links up to init. Why
// not walk init's /proc/<pid>/task/<tid>/children lists: while the walk runs, a process whose
// parent exits moves to init's list (already read), and a fork bomb's parents exit all the time;
// the /proc listing sees every process that lives through it whatever the tree does meanwhile.
// No member can appear during the count: members start only through this supervisor, which is
// busy counting. A parent reaped between two reads had re-parented its children first (at its
// exit), so the child's parent link is read again.
//
// Overshoot. Continuing a clone after counting is not a time-of-check hole for a cap: the
// count only decides whether there is room. The one race is clones approved before a count that
// the kernel has not carried out yet: their tasks are not in /proc. The supervisor approves far
// faster than the kernel copies a process, so a branching bomb has several such clones at any
// time (seen: 10 over a cap of 40 on 2 CPUs, before they were counted). So the count adds them:
// every caller approved since the last count that is, just before the listing, runnable or in
// an uninterruptible wait ('R' or 'D' in /proc/<tid>/stat) may still be in its clone and counts
// as one more task (and is checked again at the next count). A caller is runnable from the
// moment its approval is sent (the answer wakes it) until its clone is done, and an approved
// clone still running at the listing was so at the state read before it. What this misses: a
// copy that sleeps interruptibly inside the kernel (none is known). What it overcounts, only
// near the cap: approved callers whose clone is done but which are busy on a CPU (their
// children are then counted twice), a few tasks' worth of EAGAIN early.
//
// NOT USABLE AS IS (why it was taken out again): a fork that waits in a user notification is
// interrupted by any signal that arrives before the supervisor has received it (SECCOMP_FILTER_
// FLAG_WAIT_KILLABLE_RECV only covers the time after), and the kernel then fails it with
// ERESTARTSYS, i.e. EINTR for a handler without SA_RESTART, where a plain fork restarts
// (ERESTARTNOINTR). dash (Debian's /bin/sh) has such a SIGCHLD handler: `x=$(echo a | cat)` in a
// loop failed with "Cannot fork" in 20 runs of 20 (the echo child's exit lands while the next
// fork waits), SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP or not.
#include "supervise_procs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace psb {
namespace {

using notify::Continue;
using notify::Respond;
using notify::SeccompNotif;

constexpr int kMaxRestarts = 64;  // parent links read again in one count (re-parenting)

struct Task {
  pid_t ppid;
  uint32_t threads;
  int8_t member;  // -1: not decided yet
};

// Parent and thread count of process `pid` (/proc/<pid>/stat: fields 4 and 20, counted after
// the comm's last ')'). False when it is gone.
bool ReadStat(pid_t pid, pid_t* ppid, uint32_t* threads) {
  char path[48], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) return false;
  ssize_t got = read(f, buf, sizeof buf - 1);
  close(f);
  if (got <= 0) return false;
  buf[got] = 0;
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  // Fields from 3 (state) on, separated by single spaces.
  int field = 2;
  long ppid_v = -1, threads_v = -1;
  for (const char* q = p + 1; *q != 0 && field < 20; ++q) {
    if (*q != ' ') continue;
    ++field;
    if (field == 4) ppid_v = strtol(q + 1, nullptr, 10);
    if (field == 20) threads_v = strtol(q + 1, nullptr, 10);
  }
  if (ppid_v < 0 || threads_v < 0) return false;
  *ppid = static_cast<pid_t>(ppid_v);
  // A zombie leader whose process has no live thread left still holds its pid.
  *threads = threads_v > 0 ? static_cast<uint32_t>(threads_v) : 1;
  return true;
}

// Whether process `pid` is init or one of its descendants, by the parent links in `all`
// (decisions are kept in `all`). `restarts` is shared by the whole count.
bool Member(pid_t pid, pid_t init, pid_t host, std::unordered_map<pid_t, Task>& all, int* restarts) {
  std::vector<pid_t> path;
  pid_t cur = pid;
  int verdict = 0;
  for (;;) {
    if (cur == init) {
      verdict = 1;
      break;
    }
    if (cur <= 1 || cur == host) break;
    auto it = all.find(cur);
    if (it == all.end()) {
      // The parent read last is gone: it exited after its child's line was read, and its
      // children were re-parented at its exit. Read the child's parent again.
      if (path.empty() || ++*restarts > kMaxRestarts) break;
      const pid_t child = path.back();
      path.pop_back();
      Task& c = all[child];
      pid_t ppid = 0;
      uint32_t threads = 0;
      if (!ReadStat(child, &ppid, &threads) || ppid == c.ppid) break;
      c.ppid = ppid;
      cur = child;
      continue;
    }
    if (it->second.member >= 0) {
      verdict = it->second.member;
      break;
    }
    path.push_back(cur);
    if (path.size() > all.size()) break;  // a loop (cannot happen): not a member
    cur = it->second.ppid;
  }
  for (pid_t p : path) all[p].member = static_cast<int8_t>(verdict);
  return verdict == 1;
}

// Whether task `tid` may still be in a clone approved earlier: runnable or in an uninterruptible
// wait (/proc/<tid>/stat's state). A task that is gone is not.
bool MayBeCopying(pid_t tid) {
  char path[48], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", tid);
  int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) return false;
  ssize_t got = read(f, buf, sizeof buf - 1);
  close(f);
  if (got <= 0) return false;
  buf[got] = 0;
  const char* p = strrchr(buf, ')');
  return p != nullptr && p[1] == ' ' && (p[2] == 'R' || p[2] == 'D');
}

// Whether the process of `pidfd` still holds its pid (not reaped). Only ESRCH says it is gone.
bool Holds(int pidfd) { return syscall(__NR_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0 || errno != ESRCH; }

}  // namespace

long CountSandboxTasks(pid_t init, int init_pidfd) noexcept {
  std::unordered_map<pid_t, Task> all;
  all.reserve(1024);
  DIR* d = opendir("/proc");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    Task t{0, 1, -1};
    if (ReadStat(pid, &t.ppid, &t.threads)) all.emplace(pid, t);
  }
  closedir(d);
  // init's number is init's while its pidfd holds it (read after the listing: every line read
  // above named init then).
  if (!Holds(init_pidfd) || all.find(init) == all.end()) return -1;
  const pid_t host = getpid();
  int restarts = 0;
  long total = 0;
  std::vector<pid_t> pids;
  pids.reserve(all.size());
  for (const auto& kv : all) pids.push_back(kv.first);
  for (pid_t pid : pids) {
    // init itself is not counted: as in the pids cgroup, which the command joins and init does not.
    if (pid != init && Member(pid, init, host, all, &restarts)) total += all[pid].threads;
  }
  return total;
}

bool IsProcCall(int nr) noexcept {
#ifdef __NR_fork
  if (nr == __NR_fork || nr == __NR_vfork) return true;
#endif
  return nr == __NR_clone;
}

void HandleProcs(int listener, const SeccompNotif& n, ProcRules& r) noexcept {
  // Nothing to count by: closed (the sandbox is not started, or is going).
  if (r.init <= 0 || r.init_pidfd < 0) return Respond(listener, n.id, -EAGAIN);
  if (r.estimate >= r.cap) {
    // The approved callers that may still be in their clone, read before the listing (see the
    // top of the file); the caller waiting here is not.
    std::sort(r.approved.begin(), r.approved.end());
    r.approved.erase(std::unique(r.approved.begin(), r.approved.end()), r.approved.end());
    size_t keep = 0;
    for (pid_t tid : r.approved) {
      if (tid != static_cast<pid_t>(n.pid) && MayBeCopying(tid)) r.approved[keep++] = tid;
    }
    r.approved.resize(keep);
    const long live = CountSandboxTasks(r.init, r.init_pidfd);
    // init gone: the sandbox is being torn down; nothing more starts.
    if (live < 0) return Respond(listener, n.id, -EAGAIN);
    r.estimate = static_cast<uint32_t>(live + static_cast<long>(keep));
    // At the cap: what fork(2) answers at RLIMIT_NPROC and at pids.max.
    if (r.estimate >= r.cap) return Respond(listener, n.id, -EAGAIN);
  }
  ++r.estimate;
  r.approved.push_back(static_cast<pid_t>(n.pid));
  Continue(listener, n.id);
}

}  // namespace psb
