// Landlock mode's syscall supervisor: the loop that takes the seccomp user notifications of one
// sandbox's filter off its listener, hands each to the class of calls it belongs to (Dispatch:
// connect, metadata, ...; a call no class claims continues: the filter only stops what was
// asked), and its lifetime. The classes copy the call's arguments, pin what they act on and
// answer (notify_abi.h has the shared steps); each class's rules are in its own file.
//
// Threading: each sandbox's supervisor is a thread of its own that blocks in poll() on the
// listener and answers every call inline. The command waits in each supervised call until it is
// answered, so what a call costs is the round trip command -> supervisor -> command plus the
// class's own work. That round trip used to go through the host's loop (uv_poll woke the JS
// thread, which queued the call for a worker thread): one more wake-up per call, and a wait for
// the JS thread whenever it was busy. Measured per fchmod (a 2-CPU VM): host CPU 13-14 us -> 8-9
// us, of which the metadata class's own steps are about 7; on a quiet machine 15-20 us -> about
// 10 us of wall time. On a heavily oversubscribed machine every wake-up waits for a turn on a CPU
// and the wall time per call swings (20-60 us either way). SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
// (6.6) wakes the supervisor on the command's CPU and the command on the supervisor's, so the
// pair ping-pongs on one CPU: on this 2-vCPU VM a wake-up of the other, idle vCPU costs 10-35 us
// (an interrupt to a halted virtual CPU), one on the same CPU about 1 (a bare notify round trip,
// 20,000 calls, load ≈2: 2.2 us with the flag every time; 2.4-35 us without, by where the
// scheduler put the two). An earlier try at load 11-15, where every wake-up waits for a turn on
// a CPU anyway, saw no gain and left it out; measured again at low and middle load it is the
// largest single cut (docs/performance.md).
// A call the command makes slow (a chmod that waits for the inode lock its own 1 GiB write
// holds, a walk through 40 symlinks of 4 kB each) stalls only this sandbox's calls, never the
// host's loop. The thread never touches napi; the connect class shares only its registry of
// proxy peers with the proxy's thread (under a mutex). No signal is delivered to it. Whatever a
// class does to the thread stays on the thread that handles the call, this one: the paths and
// metadata classes clear its effective capabilities and leave them cleared for the next such
// call (capset twice per call cost ≈1.2 us on a root host); Dispatch gives them back before any
// other class, and so does the connect class's poll step.
//
// Confinement: the supervision acts for the command with the host process's authority, and a
// thread shares its process's per-process state; the part of it the classes' work can damage is
// the fd table and the file-system context. POSIX record locks (fcntl F_SETLK, SQLite's) belong
// to the fd table, and closing ANY fd of a file drops every lock its table holds on it: a class
// that opened or copied a file for the command and closed it would drop the host's own locks (a
// host inside an SQLite write transaction would then see another writer commit). So the thread
// StartSupervisor starts does not serve itself: it clones a sibling task, a thread of the host
// (CLONE_VM, CLONE_THREAD) without CLONE_FILES and CLONE_FS, which gets a copy of the host's fd
// table and cwd/umask of its own at birth, and waits for it. The sibling closes every fd of its
// copy but the ones made for it (HandedFds: the listener, the init pidfds, the held terminals,
// the connect class's sending end; and the stop eventfd, which the host keeps too): it keeps no
// copy of the host's pipes or files (an EOF the host waits for would never come), and the thread
// that cloned it closes the host's copies of the handed fds as soon as the clone returns (the
// sibling has its own copies from then on). Nobody waits for the sibling's setup: the spawn
// returns at once, and the command's notified calls wait on the listener until it serves (a
// setup that fails tears the sandbox down: Serve). Until the sibling has emptied its copy, a
// pipe the host closes gives its EOF a moment later, and a flock the host drops by a close stays
// held (placeholder_ops.cc unlocks first). Every thread the sibling starts (the read opener, the
// FIFO waiters) shares its table, and what one sandbox's supervision holds counts against that
// table only (RLIMIT_NOFILE applies to each table), never the host's or another sandbox's.
// Closing a copy in its own table drops no lock of the host's: the kernel's lock owner is the
// table (test/linux/supervisor-confined.test.ts). Nothing the host makes later reaches it: what
// it needs is made before it starts; the connect class's registry copies go the other way, into
// the host's table (supervise_connect.cc). Its own fds are /proc/thread-self/fd/N (/proc/self
// is the host's table). When it ends, the waiting thread, still in the host's table, closes the
// host's copies of what they shared (ForgetWake).
//   Why a clone and not unshare(CLONE_FILES | CLONE_FS) on the thread itself: a container
// runtime's default seccomp profile refuses unshare without CAP_SYS_ADMIN (Docker's, Kubernetes'
// RuntimeDefault, Podman's), and they all allow a clone without namespace flags; and only a task
// left in the host's table can close the host's copies at once when the supervision ends. The
// sibling runs on the thread-local storage of the thread that cloned it, which waits and so
// never uses it meanwhile (SiblingMain has the rules that follow from that). Only where the
// clone fails (out of memory) does the thread serve on the host's table itself, as before.
//   Why a confined task and not a process of its own: it gives the separate fd table, locks,
// cwd and umask and a per-sandbox fd budget for a clone and a few closes per spawn, with the
// notify round trip unchanged. It does not give what a process would: a crash of it is still the
// host's crash, memory is shared, and it holds the host's credentials. A setuid() of the host's
// does not reach it (glibc changes the credentials of the threads it knows, and knows it as the
// waiting thread).
//
// The envelope: the classes narrow what they do by the policy's rules; the kernel narrows it to
// the policy's outer envelope (supervision_envelope.h: its roots before deny-read carving, its
// devices, the terminals on stdio, /proc), so a judging bug or a check disabled by mistake is
// still refused there. The thread that serves (SupervisionMain) is started before the spawn: it
// sets no_new_privs and restricts itself with that Landlock ruleset (per task, no TSYNC: the
// host's other threads are untouched), then runs the spawn for the JS thread, which waits. It
// must be the one that spawns: Landlock lets a task reach another (pidfd_getfd, /proc/<pid>/mem
// and fd/N, ADDFD's target) only when the other's domain is its own or nested in it, and the
// command's domain nests in the envelope only because init and the command are made by this
// thread and restrict themselves further. Sharing the host's fd table, it leaves every fd the
// spawn makes (pidfd, status pipe, listener, terminal master) in the host's table as before.
// Then it serves as Main does: the sibling and every thread it starts (the read opener, the FIFO
// waiters) inherit the envelope. init's parent-death signal follows it, so it ends only once init
// has (OutliveInit). A sandbox prepared ahead is prepared on such a thread too (spare_binding.cc),
// which then lives from the preparation to the end of the run or the discard.
//
// Lifetime: the thread ends when the listener reports POLLHUP (no task of the sandbox, setsid'd
// or not, holds the filter any more) or when the env that started it is torn down (an env
// cleanup hook, one per env, wakes every supervisor of that env through its eventfd). It then
// closes the listener: a notified call still waiting, and every later one, fails with ENOSYS:
// closed, never open. It frees itself (detached: an env teardown never waits for a call the
// command made slow); the thread that cloned it closes the host's copies then (ForgetWake). It holds nothing on the host's loop, so it never keeps it alive: the
// sandbox's exit watch decides how long the loop lives.
// Tests: test/linux/supervisor-thread.test.ts, test/linux/supervisor-confined.test.ts,
// test/linux/supervisor-budget.test.ts, test/linux/landlock-holes.test.ts and
// test/linux/host-safety.test.ts (inotify share).
#include "supervisor.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <linux/futex.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <new>
#include <set>
#include <utility>
#include <vector>

#include "answer_later.h"
#include "notify_abi.h"
#include "notify_args.h"
#include "supervise_connect.h"
#include "supervisor_profile.h"
#include "../syscall_numbers.h"

namespace psb {
namespace {

using notify::Continue;
using notify::Respond;
using notify::SeccompNotif;

// Host side: the eventfd that wakes one supervisor when its env is torn down, and the host's
// copies of what it shares with the serving task. Kept apart from the Supervisor: the serving
// task (the sibling, with a table of its own) cannot close the host's copies, so when it ends it
// marks this entry ended and the thread that cloned it, in the host's table, closes them.
struct Wake {
  napi_env env = nullptr;
  int fd = -1;    // the host's copy; -1 once closed
  int keep_rx = -1;  // the connect class's receiving end (ConnectReceiveEnd), the host's only, or -1
  bool ended = false;
};

struct Supervisor {
  int listener = -1;
  int stop = -1;  // eventfd: the env is torn down (the same number in the host's table and ours)
  bool own_table = false;
  Wake* wake = nullptr;
  // A copy of init's pidfd and the signal that tears the sandbox down (spawn_linux.h
  // InitSignalFor): sent when the setup fails, so the command does not run on with its
  // supervised calls failing (ENOSYS, closed). -1: none (they fail closed all the same).
  int kill_pidfd = -1;
  int kill_signal = 0;
  bool fail_setup_for_test = false;  // PathCheckSkips() & kFailServingSetup, read at the start
  napi_env env = nullptr;
  SupervisorConfig config;
  ConnectClass* connect = nullptr;  // with a proxy port
};

// The supervisors' wake-ups, for the env cleanup hook.
std::mutex live_mu;
std::vector<Wake*> live;
std::set<napi_env> hooked;  // envs with the cleanup hook added

// Closes the host's copies (on a thread of the host's table) and forgets the entry.
void ForgetWake(Wake* w) {
  ClosePeerLeftovers();
  if (w->fd >= 0) close(w->fd);
  if (w->keep_rx >= 0) close(w->keep_rx);
  {
    std::lock_guard<std::mutex> g(live_mu);
    live.erase(std::remove(live.begin(), live.end(), w), live.end());
  }
  delete w;
}

void OnEnvTeardown(void* arg) {
  napi_env env = static_cast<napi_env>(arg);
  std::lock_guard<std::mutex> g(live_mu);
  for (Wake* w : live) {
    if (w->env == env && !w->ended) eventfd_write(w->fd, 1);
  }
  hooked.erase(env);
}

// The classes of calls (one file each, see the top of the file).
enum class CallClass { kContinue, kConnect, kMetadata, kPaths, kReads, kSignals, kStats, kHide };

CallClass ClassOf(const Supervisor& s, const SeccompNotif& n) {
  const int nr = n.data.nr;
  if (nr == __NR_connect && s.connect != nullptr) return CallClass::kConnect;
  if (s.config.metadata.enabled && IsMetadataCall(nr, s.config.metadata)) return CallClass::kMetadata;
  // Before the path class: it claims every open, the read-only ones are this class's.
  if (s.config.reads.enabled && IsReadCall(n)) return CallClass::kReads;
  if (s.config.paths.enabled && IsPathCall(nr)) return CallClass::kPaths;
  if (s.config.signals.enabled && IsSignalCall(n)) return CallClass::kSignals;
  if (s.config.stats.enabled && IsStatCall(nr)) return CallClass::kStats;
  if (IsHiddenListCall(nr, s.config.hide)) return CallClass::kHide;
  return CallClass::kContinue;
}

// inotify: the count, taken before any class sees the call (a call then refused was counted all
// the same: the safe direction). True when the call was answered (over the sandbox's share).
// Continuing inotify_init* is safe: nothing but the count is decided on.
bool OverInotifyShare(Supervisor* s, const SeccompNotif& n) {
  SupervisorConfig& c = s->config;
  if (!c.inotify) return false;
  uint32_t* left = nullptr;
  int over = 0;
#ifdef __NR_inotify_init
  if (n.data.nr == __NR_inotify_init) left = &c.inotify_instances, over = -EMFILE;
#endif
  if (n.data.nr == __NR_inotify_init1) left = &c.inotify_instances, over = -EMFILE;
  if (n.data.nr == __NR_inotify_add_watch) left = &c.inotify_watches, over = -ENOSPC;
  if (left == nullptr) return false;
  if (*left == 0) {
    Respond(s->listener, n.id, over);  // the kernel's answers at the uid's limits
    return true;
  }
  --*left;
  return false;
}

// The one dispatch point: each class answers the calls it claims.
void Dispatch(Supervisor* s, const SeccompNotif& n) {
  if (OverInotifyShare(s, n)) return;
  const CallClass cls = ClassOf(*s, n);
  // The paths and metadata classes leave this thread's effective capabilities cleared between
  // their calls (nargs::LowerThreadCaps); the classes that may use them get them back first.
  // The reads class clears and restores them itself around each call, from the full set.
  if (cls == CallClass::kConnect || cls == CallClass::kSignals || cls == CallClass::kReads || cls == CallClass::kHide) nargs::RaiseThreadCaps();
  switch (cls) {
    case CallClass::kConnect:
      HandleConnect(s->connect, s->listener, n);
      PSB_PROF_MARK(kOther);
      return;
    case CallClass::kMetadata:
      HandleMetadata(s->listener, n, s->config.metadata, &s->config.reads);
      PSB_PROF_MARK(kMetadata);
      return;
    case CallClass::kPaths:
      // This thread is the sandbox's own: the class may give it a file-system context of its own.
      HandlePaths(s->listener, n, s->config.paths, true);
      return;
    case CallClass::kReads:
      return HandleRead(s->listener, n, s->config.reads);
    case CallClass::kSignals:
      HandleSignal(s->listener, n, s->config.signals);
      PSB_PROF_MARK(kOther);
      return;
    case CallClass::kStats:
      return HandleStat(s->listener, n, s->config.stats);
    case CallClass::kHide:
      HandleHidden(s->listener, n, s->config.hide);
      PSB_PROF_MARK(kOther);
      return;
    case CallClass::kContinue:
      Continue(s->listener, n.id);
      PSB_PROF_MARK(kOther);
      return;
  }
}

// Blocking connects still under way that poll() watches besides the listener.
constexpr size_t kMaxWatched = 64;

void End(Supervisor* s) {
  if (s->connect != nullptr) EndConnectClass(s->connect);
  // Closing the listener fails every notification still queued, and every later one, with ENOSYS.
  close(s->listener);
  Wake* wake = s->wake;
  {
    std::lock_guard<std::mutex> g(live_mu);
    wake->ended = true;  // not woken any more: its eventfd may go
  }
  close(s->stop);
  if (s->kill_pidfd >= 0) close(s->kill_pidfd);
  const bool own = s->own_table;
  delete s;  // the rules' fds (pidfds, terminals) are closed in this task's table
  // Sharing the host's table (no sibling), the host's copies are ours: closed here.
  if (!own) ForgetWake(wake);
}

// The fds the host made for the supervision before the thread started but its eventfd (stop),
// which both keep: the thread keeps its copies and the host closes its own.
std::vector<int> HandedFds(const Supervisor& s) {
  std::vector<int> fds = {s.listener};
  if (s.kill_pidfd >= 0) fds.push_back(s.kill_pidfd);
  if (s.connect != nullptr) fds.push_back(ConnectSendEnd(s.connect));
  if (s.config.signals.init_pidfd >= 0) fds.push_back(s.config.signals.init_pidfd);
  if (s.config.reads.members.init_pidfd >= 0) fds.push_back(s.config.reads.members.init_pidfd);
  for (const PathRules::Terminal& t : s.config.paths.terminals) {
    if (t.held && *t.held >= 0) fds.push_back(*t.held);
  }
  return fds;
}

// Closes every fd of this thread's table but `keep`: close_range(2) over the gaps, or where it is
// missing or refused (before 5.9; a seccomp profile), each fd /proc lists. 0 or -errno.
int CloseAllBut(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned lo = 0;
  bool ranged = true;
  for (size_t i = 0; i <= keep.size() && ranged; ++i) {
    const unsigned hi = i < keep.size() ? static_cast<unsigned>(keep[i]) : ~0U;
    if (hi > lo && syscall(__NR_close_range, lo, i < keep.size() ? hi - 1 : hi, 0) != 0) ranged = false;
    if (i < keep.size()) lo = hi + 1;
  }
  if (ranged) return 0;
  DIR* d = opendir("/proc/thread-self/fd");
  if (d == nullptr) return -errno;
  std::vector<int> open_fds;
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = atoi(e->d_name);
    if (fd != dirfd(d) && !std::binary_search(keep.begin(), keep.end(), fd)) open_fds.push_back(fd);
  }
  closedir(d);
  for (int fd : open_fds) close(fd);
  return 0;
}

// On a task with a table of its own (own_table, see the top of the file): it keeps only what the
// host made for it. Then the read opener, which shares the table. 0 or -errno.
int Confine(Supervisor* s) {
  if (s->own_table) {
    std::vector<int> keep = HandedFds(*s);
    keep.push_back(s->stop);
    // The changes journal's fds: like stop, both tables keep them; the host closes its own when
    // the run has ended (changes::CloseByDir), this task's go with its table.
    for (const changes::Journal* j : {s->config.paths.journal.get(), s->config.metadata.journal.get()}) {
      if (j != nullptr) for (int fd : j->Fds()) keep.push_back(fd);
    }
    const int r = CloseAllBut(keep);
    if (r < 0) return r;
  }
  if (s->config.reads.opener_plan) {
    const int r = StartReadOpener(*s->config.reads.opener_plan, &s->config.reads.opener);
    if (r < 0) return r;
  }
  return 0;
}

// Sets up, answers calls until the end, frees s. Nobody waits for the setup (StartSupervisor
// has returned): the command's notified calls queue on the listener until the loop below reads
// them. A failed setup tears the sandbox down and ends as a supervision that dies does: the
// listener closes, and every notified call fails with ENOSYS.
void Serve(Supervisor* s) {
  if (s->fail_setup_for_test || Confine(s) < 0) {
    if (s->kill_pidfd >= 0) syscall(__NR_pidfd_send_signal, s->kill_pidfd, s->kill_signal, nullptr, 0);
    End(s);
    return;
  }
  if (s->config.paths.rebuild_at_serve) {
    RebuildPathRules(&s->config.paths);
    s->config.paths.rebuild_at_serve = false;
  }
  struct pollfd fds[2 + kMaxWatched];
  PSB_PROF_START();
  for (;;) {
    fds[0] = {s->stop, POLLIN, 0};
    fds[1] = {s->listener, POLLIN, 0};
    const size_t waiting = s->connect != nullptr ? ConnectPollFds(s->connect, fds + 2, kMaxWatched) : 0;
    if (poll(fds, 2 + waiting, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) break;  // the env is torn down
    if (waiting > 0) {
      nargs::RaiseThreadCaps();
      ConnectPollDone(s->connect, s->listener, fds + 2, waiting);
    }
    if ((fds[1].revents & POLLIN) == 0) {
      // POLLHUP: no task uses the filter any more; the sandbox is gone.
      if (fds[1].revents & (POLLHUP | POLLERR | POLLNVAL)) break;
      continue;
    }
    // RECV blocks when nothing is queued, and poll() said one is (a notification withdrawn in
    // between, by a signal, still lets RECV return, with ENOENT).
    SeccompNotif n;
    memset(&n, 0, sizeof n);  // the kernel insists on a zeroed buffer
    if (ioctl(s->listener, notify::kNotifRecv, &n) < 0) {
      if (errno == ENOENT || errno == EINTR) continue;
      break;
    }
    PSB_PROF_MARK(kWait);
    PSB_PROF_CALL();
    Dispatch(s, n);
  }
  End(s);
}

// The sibling task (see the top of the file): a thread of the host cloned without CLONE_FILES
// and CLONE_FS, so with a copy of the host's table and context of its own, where unshare is
// refused. It runs on the stack given to it and on the thread-local storage of the thread that
// cloned it, which waits (Sibling) and so never uses it meanwhile; the fds this task keeps in
// thread-local storage are closed before it ends, or that thread's exit would close those
// numbers in the host's table. glibc knows it as that thread: nothing here asks glibc for the
// caller's thread id (no robust, PI or error-checking mutex; its name is set by prctl).
int SiblingMain(void* arg) {
  Supervisor* s = static_cast<Supervisor*>(arg);
  s->own_table = true;
  umask(0);  // its own context (the path class's, supervise_paths.cc: OwnFsContext)
  Serve(s);
  nargs::CloseThreadFds();
  return 0;
}

// Clones the sibling task, closes the host's copies of the fds made for it (`handed`: the
// sibling has its own copies from the clone on), and waits until it has ended (the kernel
// clears `tid` then and wakes the futex: CLONE_CHILD_CLEARTID). False when it could not be
// cloned (nothing was closed).
bool Sibling(Supervisor* s, const std::vector<int>& handed) {
  constexpr size_t kStack = 512 * 1024, kGuard = 4096;
  char* stack = static_cast<char*>(mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0));
  if (stack == MAP_FAILED) return false;
  mprotect(stack, kGuard, PROT_NONE);
  pid_t tid = 0;
  const int flags = CLONE_VM | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
  if (clone(SiblingMain, stack + kStack, flags, s, &tid, nullptr, &tid) < 0) {
    munmap(stack, kStack);
    return false;
  }
  for (int fd : handed) close(fd);
  pthread_setname_np(pthread_self(), "psb-sup-waiter");
  for (pid_t v; (v = __atomic_load_n(&tid, __ATOMIC_ACQUIRE)) != 0;) {
    syscall(SYS_futex, &tid, FUTEX_WAIT, v, nullptr, nullptr, 0);
  }
  munmap(stack, kStack);
  return true;
}

void* Main(void* arg) {
  Supervisor* s = static_cast<Supervisor*>(arg);
  pthread_setname_np(pthread_self(), "psb-supervisor");
  // Read now: the sibling frees s.
  Wake* wake = s->wake;
  const std::vector<int> handed = HandedFds(*s);
  if (!Sibling(s, handed)) {
    Serve(s);  // no sibling (out of memory): this thread serves on the host's table
  } else {
    ForgetWake(wake);  // the sibling has ended: the host's copies are this thread's to close
  }
  return nullptr;
}

}  // namespace

// The supervision thread (supervisor.h, StartSupervisionThread): confined first, then it runs the
// jobs the JS thread hands it one at a time (the spawn), then serves (Main) or ends. It frees
// itself; the JS thread never touches it after handing it `serve` or `end`.
struct SupervisionThread {
  std::mutex mu;
  std::condition_variable cv;
  const LandlockPlan* envelope = nullptr;  // until the thread has confined itself
  int err = 0;  // -errno: it could not, and has ended
  void (*job)(void*) = nullptr;
  void* job_arg = nullptr;
  Supervisor* serve = nullptr;
  bool end = false;
  int init_pidfd = -1;  // the spawned init's (a copy of its own): outlived (OutliveInit)
};

namespace {

// init's parent-death signal follows the thread that spawned it, this one (spawn_init.cc: init
// then kills the tree and reports it killed). The supervision ends when the listener reports no
// task holds the filter, which the kernel says as the command's last task exits, before init
// has heard of that exit: this thread waits for init to end too, or init would take the
// thread's exit for the host's death and report a command that exited by itself as killed.
// (The host's death still ends the thread, and so signals init.)
void OutliveInit(int pidfd) {
  if (pidfd < 0) return;
  struct pollfd p = {pidfd, POLLIN, 0};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
  close(pidfd);
}

void* SupervisionMain(void* arg) {
  SupervisionThread* t = static_cast<SupervisionThread*>(arg);
  pthread_setname_np(pthread_self(), "psb-supervisor");
  // Both are per task without TSYNC: the host's other threads stay as they were.
  int err = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : -errno;
  if (err == 0) err = ApplyLandlockInChild(*t->envelope);
  std::unique_lock<std::mutex> g(t->mu);
  t->envelope = nullptr;  // the JS thread's, which may go once a job returns
  if (err < 0) {
    t->err = err;  // RunOnSupervisionThread frees t
    t->cv.notify_all();
    return nullptr;
  }
  for (;;) {
    t->cv.wait(g, [t] { return t->job != nullptr || t->serve != nullptr || t->end; });
    if (t->job == nullptr) break;
    g.unlock();
    t->job(t->job_arg);
    // Until it serves (Main names it again): for a sandbox prepared ahead this thread waits here
    // for the spawn that takes it, or for its discard, as long as the spare is kept.
    pthread_setname_np(pthread_self(), "psb-sup-parked");
    g.lock();
    t->job = nullptr;
    t->cv.notify_all();
  }
  Supervisor* s = t->serve;
  const int init_pidfd = t->init_pidfd;
  g.unlock();
  delete t;
  if (s != nullptr) Main(s);
  OutliveInit(init_pidfd);
  return nullptr;
}

// Undoes StartSupervisor's steps when the thread could not be started: on the JS thread, in
// the host's table. `on`: the supervision thread, not yet handed the supervision, ends too.
int Abandon(Supervisor* s, int err, SupervisionThread* on = nullptr) {
  if (on != nullptr) EndSupervisionThread(on);
  {
    std::lock_guard<std::mutex> g(live_mu);
    live.erase(std::remove(live.begin(), live.end(), s->wake), live.end());
  }
  delete s->wake;
  if (s->connect != nullptr) {
    close(ConnectReceiveEnd(s->connect));
    EndConnectClass(s->connect);
  }
  close(s->stop);
  close(s->listener);
  if (s->kill_pidfd >= 0) close(s->kill_pidfd);
  delete s;
  return err;
}

// The supervision's largest frame holds a 4 kB page and PATH_MAX; the spawn's parent side (run on
// a supervision thread, SupervisionMain) needs less.
int StartThread(void* (*fn)(void*), void* arg) { return later::StartSignalFreeThread(fn, arg, 512 * 1024); }

}  // namespace

SupervisionThread* StartSupervisionThread(const LandlockPlan& envelope, int* err) noexcept {
  SupervisionThread* t = new (std::nothrow) SupervisionThread();
  if (t == nullptr) {
    *err = -ENOMEM;
    return nullptr;
  }
  t->envelope = &envelope;
  const int rc = StartThread(SupervisionMain, t);
  if (rc != 0) {
    delete t;
    *err = -rc;
    return nullptr;
  }
  return t;  // confining itself meanwhile: the first job waits for it (one wake-up less)
}

int RunOnSupervisionThread(SupervisionThread* t, void (*fn)(void*), void* arg) noexcept {
  std::unique_lock<std::mutex> g(t->mu);
  t->job = fn;
  t->job_arg = arg;
  t->cv.notify_all();
  t->cv.wait(g, [t] { return t->job == nullptr || t->err < 0; });
  const int err = t->err;
  if (err < 0) {
    g.unlock();
    delete t;  // the thread has returned, or returns without touching it again
  }
  return err;
}

void SupervisionThreadSpawned(SupervisionThread* t, int init_pidfd) noexcept {
  std::lock_guard<std::mutex> g(t->mu);
  t->init_pidfd = fcntl(init_pidfd, F_DUPFD_CLOEXEC, 0);
}

void EndSupervisionThread(SupervisionThread* t) noexcept {
  std::lock_guard<std::mutex> g(t->mu);
  t->end = true;
  t->cv.notify_all();
}

int StartSupervisor(napi_env env, int listener_fd, SupervisorConfig config, SupervisionThread* on, int init_pidfd, int kill_signal) noexcept {
  Supervisor* s = new (std::nothrow) Supervisor();
  Wake* wake = new (std::nothrow) Wake();
  if (s == nullptr || wake == nullptr) {
    delete s;
    delete wake;
    close(listener_fd);
    if (on != nullptr) EndSupervisionThread(on);
    return -ENOMEM;
  }
  s->listener = listener_fd;
  s->env = env;
  s->wake = wake;
  s->fail_setup_for_test = (PathCheckSkips() & kFailServingSetup) != 0;
  if (init_pidfd >= 0) {
    s->kill_pidfd = fcntl(init_pidfd, F_DUPFD_CLOEXEC, 0);
    if (s->kill_pidfd < 0) return Abandon(s, -errno, on);
    s->kill_signal = kill_signal;
  }
  // Both wake-ups of a call on the CPU of the task that makes them (see the top of the file).
  // The flag only moves where a woken task runs; a kernel without it (before 6.6) says EINVAL
  // and the call costs what it did.
  ioctl(listener_fd, notify::kNotifSetFlags, notify::kNotifFdSyncWakeUp);
  s->config = std::move(config);
  // One share of FIFO waiters for the sandbox, both classes' (answer_later.h): a new one per
  // supervisor, so what one sandbox parks never counts against another.
  s->config.paths.fifo_waiters = s->config.reads.fifo_waiters = later::NewShare();
  s->stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stop < 0) return Abandon(s, -errno, on);
  if (s->config.proxy_port != 0) s->connect = NewConnectClass(s->config.proxy_port);
  if (s->config.proxy_port != 0 && s->connect == nullptr) return Abandon(s, -ENOMEM, on);
  wake->env = env;
  wake->fd = s->stop;
  if (s->connect != nullptr) wake->keep_rx = ConnectReceiveEnd(s->connect);
  // The thread is detached and may still be in a call when a Worker's env is torn down, and
  // Node unloads an addon a terminated Worker loaded: the code it runs would be unmapped
  // (SIGSEGV in the host). RTLD_NODELETE keeps this addon mapped for the process's life.
  static std::once_flag pinned;
  std::call_once(pinned, [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&StartSupervisor), &info) != 0 && info.dli_fname != nullptr) {
      dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
  });
  {
    std::lock_guard<std::mutex> g(live_mu);
    if (hooked.count(env) == 0) {
      if (napi_add_env_cleanup_hook(env, OnEnvTeardown, env) == napi_ok) hooked.insert(env);
    }
    live.push_back(wake);
  }
  // From here on s is the thread's: it sets itself up (its table, the read opener) while the
  // spawn returns (the command's notified calls wait on the listener meanwhile), and the thread
  // that clones the serving task closes the host's copies of the fds made for it.
  if (on != nullptr) {
    std::lock_guard<std::mutex> g(on->mu);
    on->serve = s;
    on->cv.notify_all();
  } else {
    const int rc = StartThread(Main, s);
    if (rc != 0) return Abandon(s, -rc);
  }
  return 0;
}

void SetSandboxInit(SupervisorConfig* config, pid_t init, int init_pidfd) noexcept {
  if (config->signals.enabled) {
    config->signals.init = init;
    config->signals.init_pidfd = fcntl(init_pidfd, F_DUPFD_CLOEXEC, 0);
  }
  if (config->reads.enabled) {
    config->reads.members.init = init;
    config->reads.members.init_pidfd = fcntl(init_pidfd, F_DUPFD_CLOEXEC, 0);
  }
}

}  // namespace psb
