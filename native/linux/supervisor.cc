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
// Lifetime: the thread ends when the listener reports POLLHUP (no task of the sandbox, setsid'd
// or not, holds the filter any more) or when the env that started it is torn down (an env
// cleanup hook, one per env, wakes every supervisor of that env through its eventfd). It then
// closes the listener: a notified call still waiting, and every later one, fails with ENOSYS:
// closed, never open. It frees itself (detached: an env teardown never waits for a call the
// command made slow). It holds nothing on the host's loop, so it never keeps it alive: the
// sandbox's exit watch decides how long the loop lives.
#include "supervisor.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
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

namespace psb {
namespace {

using notify::Continue;
using notify::Respond;
using notify::SeccompNotif;

struct Supervisor {
  int listener = -1;
  int stop = -1;  // eventfd: the env is torn down
  napi_env env = nullptr;
  SupervisorConfig config;
  ConnectClass* connect = nullptr;  // with a proxy port
};

// The supervisors alive, for the env cleanup hook; a thread leaves it before freeing itself.
std::mutex live_mu;
std::vector<Supervisor*> live;
std::set<napi_env> hooked;  // envs with the cleanup hook added

void OnEnvTeardown(void* arg) {
  napi_env env = static_cast<napi_env>(arg);
  std::lock_guard<std::mutex> g(live_mu);
  for (Supervisor* s : live) {
    if (s->env == env) eventfd_write(s->stop, 1);
  }
  hooked.erase(env);
}

// The classes of calls (one file each, see the top of the file).
enum class CallClass { kContinue, kConnect, kMetadata, kPaths, kReads, kSignals, kStats };

CallClass ClassOf(const Supervisor& s, const SeccompNotif& n) {
  const int nr = n.data.nr;
  if (nr == __NR_connect && s.connect != nullptr) return CallClass::kConnect;
  if (s.config.metadata.enabled && IsMetadataCall(nr, s.config.metadata)) return CallClass::kMetadata;
  // Before the path class: it claims every open, the read-only ones are this class's.
  if (s.config.reads.enabled && IsReadCall(n)) return CallClass::kReads;
  if (s.config.paths.enabled && IsPathCall(nr)) return CallClass::kPaths;
  if (s.config.signals.enabled && IsSignalCall(n)) return CallClass::kSignals;
  if (s.config.stats.enabled && IsStatCall(nr)) return CallClass::kStats;
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
  if (cls == CallClass::kConnect || cls == CallClass::kSignals || cls == CallClass::kReads) nargs::RaiseThreadCaps();
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
  {
    std::lock_guard<std::mutex> g(live_mu);
    live.erase(std::remove(live.begin(), live.end(), s), live.end());
  }
  close(s->stop);
  delete s;
}

void* Main(void* arg) {
  Supervisor* s = static_cast<Supervisor*>(arg);
  pthread_setname_np(pthread_self(), "psb-supervisor");
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
  return nullptr;
}

}  // namespace

int StartSupervisor(napi_env env, int listener_fd, SupervisorConfig config) noexcept {
  Supervisor* s = new (std::nothrow) Supervisor();
  if (s == nullptr) {
    close(listener_fd);
    return -ENOMEM;
  }
  s->listener = listener_fd;
  s->env = env;
  // Both wake-ups of a call on the CPU of the task that makes them (see the top of the file).
  // The flag only moves where a woken task runs; a kernel without it (before 6.6) says EINVAL
  // and the call costs what it did.
  ioctl(listener_fd, notify::kNotifSetFlags, notify::kNotifFdSyncWakeUp);
  s->config = std::move(config);
  // One share of FIFO waiters for the sandbox, both classes' (answer_later.h): a new one per
  // supervisor, so what one sandbox parks never counts against another.
  s->config.paths.fifo_waiters = s->config.reads.fifo_waiters = later::NewShare();
  s->stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->config.proxy_port != 0) s->connect = NewConnectClass(s->config.proxy_port);
  if (s->stop < 0 || (s->config.proxy_port != 0 && s->connect == nullptr)) {
    const int e = s->stop < 0 ? errno : ENOMEM;
    if (s->connect != nullptr) EndConnectClass(s->connect);
    if (s->stop >= 0) close(s->stop);
    close(listener_fd);
    delete s;
    return -e;
  }
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
  std::lock_guard<std::mutex> g(live_mu);
  if (hooked.count(env) == 0) {
    if (napi_add_env_cleanup_hook(env, OnEnvTeardown, env) == napi_ok) hooked.insert(env);
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 512 * 1024);  // the largest frame holds a 4 kB page and PATH_MAX
  // No signal is ever delivered to this thread: Node's handlers run on its own threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, &attr, Main, s);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    if (s->connect != nullptr) EndConnectClass(s->connect);
    close(s->stop);
    close(listener_fd);
    delete s;
    return -rc;
  }
  live.push_back(s);  // under live_mu, before the thread can leave it
  return 0;
}

}  // namespace psb
