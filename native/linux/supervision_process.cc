// Landlock mode's supervision in a process of its own (the default; PSB_SUPERVISION=thread keeps it in
// the host, supervisor.cc; lib/platform/linux/supervision-process.ts starts it and says when).
//
// Why a process, and why this one: the supervision carries out calls for the command with the
// authority of whatever runs it. As tasks of the host (supervisor.cc) it already has an fd table,
// cwd and umask of its own and is confined by Landlock to the policy's envelope, but a crash of
// it is the host's crash, it shares the host's memory, and it cannot be killed alone. A process
// cannot be made from the host cheaply: fork() copies the host's page tables (a 50 MB process:
// about 2.4 ms on this project's 2-vCPU test VM) and write-protects every page, so the host then
// takes a copy-on-write fault on each page it writes while the child lives (about 30 ms of the
// host's CPU for 50 MB there). So the host starts ONE supervision process, once, from a fresh
// image: its own executable (process.execPath) running this addon (about 50 ms and 42 MB, once
// per host), and asks it for each Landlock-mode spawn. There, exactly as in the host before, a
// thread confines itself to the policy's envelope, spawns init and the command (so the command's
// Landlock domain nests inside it: Landlock's ptrace rule; and the supervision is the command's
// ancestor, which Yama's ptrace_scope=1 requires for pidfd_getfd and /proc/<pid>/mem) and serves
// it. Every sandbox's supervision is then a task of that process: what one sandbox's holds still
// counts against its own fd table (supervisor.cc, Confinement), and none of it is the host's.
//
// The channel: a SOCK_SEQPACKET socketpair (message boundaries kept, fds passed with SCM_RIGHTS).
//   host -> process: kSpawn: the plan, read and checked by the host (ParsePlan) and sent as bytes
//     (plan_wire.h; stdio and cgroup.procs fds by index into the message's fds) with the fds;
//     bytes past the message size travel in a sealed memfd, the last fd; the host's umask and
//     the test hook's path-check skips ride along. kPrepare: a
//     sandbox prepared ahead (spare_binding.cc), kept there under the id the host chose (so
//     that its go can be sent right behind it, before its reply); kGo: its go (argv,
//     envp, cwd, stdio as for kSpawn); kDiscard: an id dropped unused. kAdmit: a proxy peer to
//     look up (supervise_connect.h). kCloseJournal: a `changes: 'record'` journal (by its
//     directory) to close once its sandbox has ended (changes_journal.h CloseByDir).
//   process -> host: kReady once (its pid); per kSpawn and kGo a reply: init's pid, the Landlock
//     ABI, and init's pidfd and the read end of init's status pipe; or the failure (a Status).
// The host keeps watching the sandbox as before (exit_watch.cc: init's status pipe first, then the
// pidfd); kill() signals init through its pidfd. init's parent is the supervision process, which
// reaps it. The process reads requests on its main thread and serves them there in turn, but for
// preparations, which a thread of its own serves (Preparer: a spawn or a proxy peer's admission
// is not served behind one); each reply carries its request's number. The host sends requests
// under one mutex and does not hold it while it awaits a reply (a waiting thread reads the next
// reply and hands it to its owner: AwaitReply).
//
// Failure, closed: if the supervision process dies (killed, crashed), its tasks die with it: the
// listeners close (a waiting supervised call fails ENOSYS), and each init gets its parent-death
// signal, kills its sandbox's tree and reports the command killed by SIGKILL through its status
// pipe (spawn_init.cc) before exiting; the host's watch reaps nothing (init is not its child).
// The next spawn starts a new supervision process. If the host dies, the process reads EOF and
// exits, and the same happens to every sandbox.
// Tests: test/linux/supervision-process.test.ts, test/linux/supervisor-sqlite.test.ts.
#include "supervision_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../js_error.h"
#include "exit_watch.h"
#include "plan_args.h"
#include "plan_parse.h"
#include "plan_wire.h"
#include "proc_fields.h"
#include "spawn_linux.h"
#include "supervisor/changes_journal.h"
#include "supervisor/supervise_connect.h"
#include "supervisor/supervise_paths.h"
#include "supervisor/supervision_envelope.h"
#include "supervisor/supervisor.h"

namespace psb {
namespace {

enum : uint32_t { kReady = 1, kSpawn, kAdmit, kCloseJournal, kPrepare, kGo, kDiscard };
// Fixed fields ahead of each message's bytes. Requests with a plan or a go (kSpawn, kPrepare,
// kGo): a = the path-check skips (a test hook, nonzero only where the host's gate let a test set
// it), b = 1 when the bytes are in the last fd (a memfd), c = the host's umask (the command's, as when the host
// spawns it), d = the spare's id (kPrepare, kGo, kDiscard); seq: the host's number for the
// request, which its reply carries. Replies: a = 0 (ok) or the ErrorCode, b =
// init's pid or the errno, c = the Landlock ABI, d = the spare's id (kPrepare; 0 for a kGo whose
// spare could not be used); the bytes: "" or the message, NUL, the syscall.
struct Header {
  uint32_t type;
  int32_t a, b, c, d;
  uint32_t seq = 0;  // the request's number, given back with its reply (replies may come out of order)
};
constexpr size_t kMaxFds = 64;
constexpr size_t kMaxMessage = 192 * 1024;  // under the socket's default send buffer

int SendMessage(int sock, const Header& h, const std::string& bytes, const std::vector<int>& fds) {
  if (fds.size() > kMaxFds || sizeof h + bytes.size() > kMaxMessage) return -EMSGSIZE;
  struct iovec iov[2] = {{const_cast<Header*>(&h), sizeof h}, {const_cast<char*>(bytes.data()), bytes.size()}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = bytes.empty() ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = sendmsg(sock, &m, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n < 0 ? -errno : 0;
}

// 1: a message; 0: EOF (the other side is gone); -errno. Received fds are CLOEXEC and owned by
// the caller. timeout_ms < 0: wait for ever.
int ReceiveMessage(int sock, Header* h, std::string* bytes, std::vector<int>* fds, int timeout_ms = -1) {
  if (timeout_ms >= 0) {
    struct pollfd p = {sock, POLLIN, 0};
    int r;
    do {
      r = poll(&p, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return -ETIMEDOUT;
    if (r < 0) return -errno;
  }
  // (One buffer per thread, made once: 192 KB zeroed per message cost more than the message.)
  static thread_local std::vector<char> buf(kMaxMessage);
  struct iovec iov = {buf.data(), buf.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const int* in = reinterpret_cast<const int*>(CMSG_DATA(c));
    for (size_t i = 0; i < k; ++i) fds->push_back(in[i]);
  }
  if (n == 0) return 0;
  if (static_cast<size_t>(n) < sizeof *h || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    for (int fd : *fds) close(fd);
    fds->clear();
    return -EPROTO;
  }
  memcpy(h, buf.data(), sizeof *h);
  bytes->assign(buf.data() + sizeof *h, static_cast<size_t>(n) - sizeof *h);
  return 1;
}

// Bytes too many for one message: written to a sealed memfd, sent as an fd. -errno on failure.
int BytesInMemfd(const std::string& data) {
  int fd = static_cast<int>(syscall(SYS_memfd_create, "psb-plan", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) return -errno;
  for (size_t off = 0; off < data.size();) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      close(fd);
      return -e;
    }
    off += static_cast<size_t>(n);
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  return fd;
}

bool BytesFromFd(int fd, std::string* data) {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 0 || st.st_size > (64 << 20)) return false;
  data->resize(static_cast<size_t>(st.st_size));
  for (size_t off = 0; off < data->size();) {
    ssize_t n = pread(fd, &(*data)[off], data->size() - off, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
}

// ---- the host's side ----

std::mutex g_mu;
std::condition_variable g_cv;
int g_sock = -1;
pid_t g_pid = 0;

// Requests sent whose replies have not been read, each with its number (replies come in any
// order: preparations are served on a thread of their own there). The channel is not held while
// a reply is awaited, so a request can be sent while an earlier one is being served there: a
// spare's go right behind that spare's preparation. Whichever waiting thread finds no one reading
// reads the next reply and hands it to its owner.
}  // namespace
struct SupervisionReply {
  uint32_t type = 0;
  uint32_t seq = 0;
  int sock = -1;  // the channel it was sent on
  bool done = false;
  int r = 0;
  Header reply{};
  std::string bytes;
  std::vector<int> fds;
};
namespace {
std::deque<std::shared_ptr<SupervisionReply>> g_owed;
bool g_reading = false;
uint32_t g_seq = 0;

bool AliveLocked() {
  if (g_sock < 0) return false;
  struct pollfd p = {g_sock, 0, 0};
  if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)) != 0) {
    // Gone. A thread reading it closes it once its read fails; else it is closed now.
    if (g_owed.empty() && !g_reading) close(g_sock);
    g_sock = -1;
    g_pid = 0;
  }
  return g_sock >= 0;
}

// Sends a request; its reply is then awaited with AwaitReply. Null with *err = -errno when it
// could not be sent (-EPIPE: the process is gone; -EMSGSIZE: nothing was sent, the channel is as
// it was).
std::shared_ptr<SupervisionReply> SendRequest(const Header& req, const std::string& bytes, const std::vector<int>& fds, int* err) {
  std::lock_guard<std::mutex> lock(g_mu);
  *err = -EPIPE;
  if (!AliveLocked()) return nullptr;
  Header numbered = req;
  numbered.seq = ++g_seq;
  int r = SendMessage(g_sock, numbered, bytes, fds);
  if (r < 0) {
    *err = r;
    // A send that failed otherwise leaves the channel in no known state: it is given up.
    if (r != -EMSGSIZE && g_owed.empty() && !g_reading) close(g_sock);
    if (r != -EMSGSIZE) g_sock = -1, g_pid = 0;
    return nullptr;
  }
  auto owed = std::make_shared<SupervisionReply>();
  owed->type = req.type;
  owed->seq = numbered.seq;
  owed->sock = g_sock;
  g_owed.push_back(owed);
  return owed;
}

// The reply to a request sent. The process gone (or a reply out of order): every request owed on
// that channel fails with -EPIPE (or the read's -errno), the channel is closed and forgotten (the
// next spawn starts another process).
int AwaitReply(const std::shared_ptr<SupervisionReply>& me, Header* reply, std::string* rbytes, std::vector<int>* rfds) {
  std::unique_lock<std::mutex> lock(g_mu);
  while (!me->done) {
    if (g_reading) {
      g_cv.wait(lock);
      continue;
    }
    const int sock = g_owed.front()->sock;
    g_reading = true;
    lock.unlock();
    Header h{};
    std::string b;
    std::vector<int> f;
    const int r = ReceiveMessage(sock, &h, &b, &f);
    lock.lock();
    g_reading = false;
    auto owner = g_owed.end();
    for (auto it = g_owed.begin(); r == 1 && it != g_owed.end(); ++it) {
      if ((*it)->sock == sock && (*it)->seq == h.seq && (*it)->type == h.type) owner = it;
    }
    if (owner != g_owed.end()) {
      std::shared_ptr<SupervisionReply> o = *owner;
      g_owed.erase(owner);
      o->reply = h, o->bytes = std::move(b), o->fds = std::move(f), o->done = true;
    } else {
      CloseAll(f);
      for (auto it = g_owed.begin(); it != g_owed.end();) {
        if ((*it)->sock != sock) {
          ++it;
          continue;
        }
        (*it)->r = r < 0 ? r : -EPIPE, (*it)->done = true;
        it = g_owed.erase(it);
      }
      if (g_sock == sock) g_sock = -1, g_pid = 0;
      close(sock);
    }
    g_cv.notify_all();
  }
  if (me->r < 0) return me->r;
  *reply = me->reply, *rbytes = std::move(me->bytes), *rfds = std::move(me->fds);
  return 0;
}

int RoundTrip(const Header& req, const std::string& bytes, const std::vector<int>& fds, Header* reply, std::string* rbytes,
              std::vector<int>* rfds) {
  int err;
  std::shared_ptr<SupervisionReply> owed = SendRequest(req, bytes, fds, &err);
  return owed ? AwaitReply(owed, reply, rbytes, rfds) : err;
}

// ---- the supervision process's side ----

// init is this process's child: reaped here (its status reaches the host through its own status
// pipe, whose read end the host holds), then its stack is given back. One thread reaps them all,
// each init's pidfd in its epoll set: a thread per sandbox cost its start (tens of µs) on the
// path of the request read after the reply (the next spare's preparation).
// (Without the thread or the set, out of resources: an init stays a zombie until this process ends.)
class Reaper {
 public:
  // Started with the process (a thread count that does not change later).
  void Warm() {
    std::lock_guard<std::mutex> lock(mu_);
    if (ep_ < 0) Start();
  }
  void Add(LinuxSpawnResult res) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ep_ < 0 && !Start()) return;
    live_[res.pidfd] = res;
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.fd = res.pidfd;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, res.pidfd, &ev) != 0) live_.erase(res.pidfd);
  }

 private:
  bool Start() {
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return false;
    try {
      std::thread([this, ep] { Run(ep); }).detach();
    } catch (const std::system_error&) {
      close(ep);
      return false;
    }
    ep_ = ep;
    return true;
  }
  void Run(int ep) {
    for (;;) {
      struct epoll_event evs[16];
      const int n = epoll_wait(ep, evs, 16, -1);
      for (int i = 0; i < n; ++i) {
        LinuxSpawnResult res;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = live_.find(evs[i].data.fd);
          if (it == live_.end()) continue;
          res = it->second;
          live_.erase(it);
          epoll_ctl(ep, EPOLL_CTL_DEL, res.pidfd, nullptr);
        }
        siginfo_t si;
        while (waitid(static_cast<idtype_t>(P_PIDFD), res.pidfd, &si, WEXITED) < 0 && errno == EINTR) {
        }
        close(res.pidfd);
        ReleaseInitStack(&res);
      }
    }
  }
  std::mutex mu_;
  int ep_ = -1;
  std::map<int, LinuxSpawnResult> live_;  // by pidfd
};
Reaper* g_reaper = new Reaper();  // (never destroyed: its thread runs until the process ends)

void Reap(LinuxSpawnResult res) { g_reaper->Add(res); }

Header Failed(uint32_t type, const Status& s, std::string* out) {
  *out = s.message + '\0' + s.syscall;
  return Header{type, static_cast<int32_t>(s.code), s.sys_error, 0, 0};
}

// A sandbox prepared ahead, kept here until its go or its discard.
struct Spare {
  LinuxSpare* spare = nullptr;
  SupervisionThread* on = nullptr;
  SupervisorConfig supervisor;
  int landlock_abi = 0;
};
// Preparations run on a thread of their own (the preparer), so that a spawn, a go or a proxy
// peer's admission is not served behind one (≈1-2 ms); a go or a discard of a spare still being
// prepared waits for it. Replies are sent from both threads, one whole message at a time.
std::mutex g_spares_mu;
std::condition_variable g_spares_cv;
std::map<int32_t, Spare> g_spares;  // under g_spares_mu
std::set<int32_t> g_preparing;      // under g_spares_mu: ids sent to the preparer, not yet done
std::mutex g_send_mu;
int g_serve_sock = -1;

int SendReply(const Header& request, Header reply, const std::string& out, const std::vector<int>& out_fds) {
  reply.seq = request.seq;
  std::lock_guard<std::mutex> lock(g_send_mu);
  return SendMessage(g_serve_sock, reply, out, out_fds);
}

// The spare `id` once its preparation (if any) has ended: taken out of the map (null: none).
bool TakeSpare(int32_t id, Spare* out) {
  std::unique_lock<std::mutex> lock(g_spares_mu);
  g_spares_cv.wait(lock, [id] { return g_preparing.count(id) == 0; });
  auto it = g_spares.find(id);
  if (it == g_spares.end()) return false;
  *out = std::move(it->second);
  g_spares.erase(it);
  return true;
}
// Inits of sandboxes just handed to the host: given to the reaper once the reply is sent. The
// main thread's only.
std::vector<LinuxSpawnResult> g_reap_after_reply;

void Discard(Spare* sp) {
  if (sp->spare != nullptr) DiscardSpare(sp->spare);
  if (sp->on != nullptr) EndSupervisionThread(sp->on);
  sp->spare = nullptr, sp->on = nullptr;
}

// The sandbox runs: its supervision is served here (as WatchStarted does in the host: members
// are init's descendants), init is reaped here, and the host gets init's pidfd and status pipe.
Header Started(Napi::Env env, uint32_t type, LinuxSpawnResult res, SupervisorConfig&& supervisor, SupervisionThread* on, int abi,
               std::string* out, std::vector<int>* out_fds) {
  if (res.seccomp_listener_fd >= 0) {
    SetSandboxInit(&supervisor, res.pid, res.pidfd);
    if (StartSupervisor(env, res.seccomp_listener_fd, std::move(supervisor), on, res.pidfd, InitSignalFor(res.mode, SIGKILL)) < 0) {
      SignalTree(res, SIGKILL);
    }
    on = nullptr;
    res.seccomp_listener_fd = -1;
  }
  if (on != nullptr) EndSupervisionThread(on);
  int host_pidfd = fcntl(res.pidfd, F_DUPFD_CLOEXEC, 0);
  if (host_pidfd < 0 || res.status_fd < 0) {
    // The sandbox runs already; the host could not watch it: stop it.
    SignalTree(res, SIGKILL);
    if (host_pidfd >= 0) close(host_pidfd);
    if (res.status_fd >= 0) close(res.status_fd);
    g_reap_after_reply.push_back(res);
    return Failed(type, Status::Sys(ErrorCode::kESPAWN, "the supervision process could not hand the sandbox to the host", "fcntl", errno), out);
  }
  *out_fds = {host_pidfd, res.status_fd};
  res.status_fd = -1;
  g_reap_after_reply.push_back(res);
  return Header{type, 0, res.pid, abi, 0};
}

// Serves one request with a plan or a go: its bytes (from the memfd when they came in one), the
// host's test hook and umask set while `then` runs with them.
template <typename Then>
Header WithBytes(const Header& h, std::string bytes, const std::vector<int>& fds, Then then) {
  if (h.b == 1 && (fds.empty() || !BytesFromFd(fds.back(), &bytes))) bytes.clear();
  // The test hook, as the host has it: nonzero only where the host's own gate let a test set it
  // (native.testSkipPathChecks refuses unless PSB_TEST_HOOKS=1); only the host writes here.
  SetPathCheckSkips(static_cast<unsigned>(h.a));
  // The command's umask is the host's (requests are handled one at a time, on this thread).
  const mode_t saved_umask = umask(static_cast<mode_t>(h.c) & 0777);
  Header r = then(bytes);
  umask(saved_umask);
  return r;
}

Header Unreadable(uint32_t type, std::string* out) {
  return Failed(type, Status::Error(ErrorCode::kEINVALID_ARGUMENT, "the supervision process could not read the request"), out);
}

// A plan as sent (plan_wire.h), with what the supervisor makes from the files made here.
Header ReadPlan(uint32_t type, const std::string& bytes, const std::vector<int>& fds, LinuxSpawnPlan* plan, SupervisorConfig* supervisor,
                std::string* out, bool* ok) {
  *ok = false;
  if (!DecodePlan(bytes, fds, plan, supervisor)) return Unreadable(type, out);
  if (plan->mode != LinuxMode::kLandlock) return Failed(type, Status::Error(ErrorCode::kEINVALID_ARGUMENT, "the supervision process spawns Landlock mode only"), out);
  Status s = MaterializeSupervisor(*plan, supervisor);
  if (!s.ok()) return Failed(type, s, out);
  *ok = true;
  return Header{type, 0, 0, 0, 0};
}

Header SpawnHere(Napi::Env env, const std::string& bytes, const std::vector<int>& fds, std::string* out, std::vector<int>* out_fds) {
  LinuxSpawnPlan plan;
  SupervisorConfig supervisor;
  bool ok;
  Header read = ReadPlan(kSpawn, bytes, fds, &plan, &supervisor, out, &ok);
  if (!ok) return read;
  if (supervisor.paths.enabled && plan.landlock && plan.landlock_plan.stdio_terminals) RecordStdioTerminals(&supervisor.paths, plan.stdio);
  LinuxSpawnResult res;
  SupervisionThread* on = nullptr;
  Status s = SpawnLinuxWhereSupervised(plan, &res, &on);
  if (!s.ok()) return Failed(kSpawn, s, out);
  return Started(env, kSpawn, res, std::move(supervisor), on, plan.landlock ? plan.landlock_plan.abi : 0, out, out_fds);
}

// As PrepareWorker does in the host (spare_binding.cc), on this thread.
Header PrepareHere(int32_t id, const std::string& bytes, const std::vector<int>& fds, std::string* out) {
  {
    std::lock_guard<std::mutex> lock(g_spares_mu);
    if (id <= 0 || g_spares.count(id) != 0) return Unreadable(kPrepare, out);
  }
  Spare sp;
  LinuxSpawnPlan plan;
  bool ok;
  Header read = ReadPlan(kPrepare, bytes, fds, &plan, &sp.supervisor, out, &ok);
  if (!ok) return read;
  sp.landlock_abi = plan.landlock ? plan.landlock_plan.abi : 0;
  Status s = SpawnWhereSupervised(
      plan,
      [&](int* pidfd) {
        Status st = PrepareSpare(std::move(plan), &sp.spare);
        if (sp.spare != nullptr) *pidfd = SparePidfd(sp.spare);
        return st;
      },
      &sp.on);
  if (!s.ok()) {
    Discard(&sp);
    return Failed(kPrepare, s, out);
  }
  std::lock_guard<std::mutex> lock(g_spares_mu);
  g_spares.emplace(id, std::move(sp));
  return Header{kPrepare, 0, 0, 0, id};
}

// As SpawnSpareJs does in the host. d = 0 in the reply: the spare could not be used (it is gone).
Header GoHere(Napi::Env env, int32_t id, int host_umask, const std::string& bytes, const std::vector<int>& fds, std::string* out,
             std::vector<int>* out_fds) {
  SpareGo go;
  Spare sp;
  const bool decoded = DecodeGo(bytes, fds, &go);
  const bool found = TakeSpare(id, &sp);
  if (!decoded) {
    if (found) Discard(&sp);
    return Unreadable(kGo, out);
  }
  if (!found) return Header{kGo, 0, 0, 0, 0};
  go.umask = static_cast<unsigned>(host_umask) & 0777;
  sp.supervisor.paths.rebuild_at_serve = true;
  LinuxSpawnResult res;
  bool used = false;
  Status s = GoSpare(sp.spare, go, &res, &used);  // the spare is gone (reaped) unless used
  sp.spare = nullptr;
  if (!s.ok() || !used) {
    Discard(&sp);
    return s.ok() ? Header{kGo, 0, 0, 0, 0} : Failed(kGo, s, out);
  }
  Header h = Started(env, kGo, res, std::move(sp.supervisor), sp.on, sp.landlock_abi, out, out_fds);
  h.d = id;
  return h;
}

// The preparer: one thread, started at the first preparation, serving them in order and sending
// each reply itself. (Without it, out of resources, a preparation is served on the main thread.)
class Preparer {
 public:
  struct Job {
    Header h;
    std::string bytes;
    std::vector<int> fds;
  };
  // Started with the process (a thread count that does not change later), else at the first job.
  bool Warm() {
    std::lock_guard<std::mutex> lock(mu_);
    return StartLocked();
  }
  // False when the thread cannot run: the caller serves the job itself.
  bool Push(Job&& job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!StartLocked()) return false;
    jobs_.push_back(std::move(job));
    cv_.notify_one();
    return true;
  }
  static void Serve(Job& job) {
    std::string out;
    std::string bytes = std::move(job.bytes);
    if (job.h.b == 1 && (job.fds.empty() || !BytesFromFd(job.fds.back(), &bytes))) bytes.clear();
    Header reply = PrepareHere(job.h.d, bytes, job.fds, &out);
    CloseAll(job.fds);
    {
      std::lock_guard<std::mutex> lock(g_spares_mu);
      g_preparing.erase(job.h.d);
    }
    g_spares_cv.notify_all();
    SendReply(job.h, reply, out, {});
  }

 private:
  bool StartLocked() {
    if (started_) return true;
    try {
      std::thread([this] { Run(); }).detach();
    } catch (const std::system_error&) {
      return false;
    }
    started_ = true;
    return true;
  }
  void Run() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Serve(job);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool started_ = false;
};
Preparer* g_preparer = new Preparer();  // (never destroyed: its thread runs until the process ends)

}  // namespace

// native.serveSupervision(fd): the supervision process's main loop (its JS thread stays here).
// Returns when the host is gone (EOF).
Napi::Value ServeSupervisionJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.serveSupervision(fd)");
  const int sock = info[0].As<Napi::Number>().Int32Value();
  fcntl(sock, F_SETFD, FD_CLOEXEC);
  // No core file of this process: its memory holds what the supervision saw for every sandbox
  // and the host's environment (and its cwd is /). The commands get core 0 from their plans.
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  if (SendMessage(sock, Header{kReady, getpid(), 0, 0, 0}, "", {}) < 0) return env.Undefined();
  g_serve_sock = sock;
  g_reaper->Warm();
  g_preparer->Warm();
  for (;;) {
    Header h;
    std::string bytes;
    std::vector<int> fds;
    int r = ReceiveMessage(sock, &h, &bytes, &fds);
    if (r <= 0) {
      CloseAll(fds);
      if (r == 0 || r == -EBADF || r == -ENOTSOCK) break;
      continue;
    }
    std::string out;
    std::vector<int> out_fds;
    Header reply{h.type, 0, 0, 0, 0};
    if (h.type == kSpawn) {
      reply = WithBytes(h, std::move(bytes), fds, [&](const std::string& b) { return SpawnHere(env, b, fds, &out, &out_fds); });
    } else if (h.type == kPrepare) {
      // On the preparer, which replies (a go or discard of it waits for it: TakeSpare).
      {
        std::lock_guard<std::mutex> lock(g_spares_mu);
        g_preparing.insert(h.d);
      }
      Preparer::Job job{h, std::move(bytes), std::move(fds)};
      if (!g_preparer->Push(std::move(job))) Preparer::Serve(job);
      continue;
    } else if (h.type == kGo) {
      reply = WithBytes(h, std::move(bytes), fds, [&](const std::string& b) { return GoHere(env, h.d, h.c, b, fds, &out, &out_fds); });
    } else if (h.type == kDiscard) {
      Spare sp;
      if (TakeSpare(h.d, &sp)) Discard(&sp);
    } else if (h.type == kCloseJournal) {
      reply.a = changes::CloseByDir(bytes);
    } else if (h.type == kAdmit) {
      reply.a = AdmitProxyPeer(static_cast<uint16_t>(h.a), static_cast<uint16_t>(h.b), h.c != 0) ? 1 : 0;
    }
    CloseAll(fds);  // the command has its copies (or none was spawned)
    r = SendReply(h, reply, out, out_fds);
    CloseAll(out_fds);
    for (const LinuxSpawnResult& res : g_reap_after_reply) Reap(res);
    g_reap_after_reply.clear();
    if (r < 0) break;
  }
  return env.Undefined();
}

// native.supervisionSocketpair() -> [hostFd, processFd] (both CLOEXEC; the process's end is
// placed at its fd 3 by the spawn that starts it).
Napi::Value SupervisionSocketpairJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    ThrowSandboxError(env, Status::Sys(ErrorCode::kESPAWN, "socketpair(2) for the supervision process failed", "socketpair", errno));
  }
  Napi::Array a = Napi::Array::New(env, 2);
  a.Set(0u, Napi::Number::New(env, sv[0]));
  a.Set(1u, Napi::Number::New(env, sv[1]));
  return a;
}

// native.supervisionAttach(hostFd, timeoutMs) -> the process's pid: waits for it to say it is
// ready; from then on Landlock-mode spawns may go to it. Throws (and closes hostFd) if it does not.
Napi::Value SupervisionAttachJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsNumber() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.supervisionAttach(fd, timeoutMs)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  Header h;
  std::string bytes;
  std::vector<int> fds;
  int r = ReceiveMessage(fd, &h, &bytes, &fds, info[1].As<Napi::Number>().Int32Value());
  CloseAll(fds);
  if (r != 1 || h.type != kReady || h.a <= 0) {
    close(fd);
    ThrowSandboxError(env, Status::Sys(ErrorCode::kESPAWN,
                                       r == -ETIMEDOUT ? "the supervision process did not start in time"
                                                       : "the supervision process ended before it was ready",
                                       "recvmsg", r < 0 ? -r : 0));
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sock >= 0 && g_owed.empty() && !g_reading) close(g_sock);
  g_sock = fd;
  g_pid = h.a;
  return Napi::Number::New(env, g_pid);
}

// native.supervisionProcess() -> its pid, or 0 when none is running (or it has died).
Napi::Value SupervisionProcessJs(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(g_mu);
  return Napi::Number::New(info.Env(), AliveLocked() ? g_pid : 0);
}

namespace {

// Sends a request with its bytes (in a memfd past the message size), the host's umask and the
// test hook's skips; its reply. -errno when the process is gone (or the memfd could not be made).
// Sends a request with its bytes (in a memfd past the message size), the host's umask and the
// test hook's skips. Null with *err = -errno when the process is gone (or the memfd could not be
// made).
std::shared_ptr<SupervisionReply> SendWithBytes(uint32_t type, int32_t id, std::string data, std::vector<int> fds, int* err) {
  const int mask = procfs::Umask();
  Header req{type, static_cast<int32_t>(PathCheckSkips()), 0, mask >= 0 ? mask : 022, id};
  int memfd = -1;
  if (data.size() + sizeof req > kMaxMessage) {
    memfd = BytesInMemfd(data);
    if (memfd < 0) {
      *err = memfd;
      return nullptr;
    }
    fds.push_back(memfd);
    data.clear();
    req.b = 1;
  }
  std::shared_ptr<SupervisionReply> owed = SendRequest(req, data, fds, err);
  if (memfd >= 0) close(memfd);  // (the process has its own copy once it is sent)
  return owed;
}

// The same, and its reply.
int Request(uint32_t type, int32_t id, std::string data, std::vector<int> fds, Header* reply, std::string* bytes, std::vector<int>* rfds) {
  int err;
  std::shared_ptr<SupervisionReply> owed = SendWithBytes(type, id, std::move(data), std::move(fds), &err);
  return owed ? AwaitReply(owed, reply, bytes, rfds) : err;
}

Status ReplyStatus(const Header& reply, const std::string& bytes) {
  size_t nul = bytes.find('\0');
  return Status::Sys(static_cast<ErrorCode>(reply.a), bytes.substr(0, nul), nul == std::string::npos ? "" : bytes.substr(nul + 1), reply.b);
}

Status Gone(int r) { return Status::Sys(ErrorCode::kESPAWN, "the supervision process is gone; nothing was spawned", "sendmsg", -r); }

// A started sandbox's reply: watched here as any other (exit_watch.cc), as native.spawn returns it.
Napi::Value Watch(Napi::Env env, const Header& reply, std::vector<int>* rfds, const Napi::Function& on_exit, StdioEnds* ends) {
  if (rfds->size() != 2) {
    CloseAll(*rfds);
    ThrowSandboxError(env, Status::Error(ErrorCode::kESPAWN, "the supervision process answered a spawn without its fds"));
  }
  LinuxSpawnResult res;
  res.mode = LinuxMode::kLandlock;
  res.pid = reply.b;
  res.pidfd = (*rfds)[0];
  res.status_fd = (*rfds)[1];
  Napi::Object result = WatchStarted(env, res, SupervisorConfig{}, on_exit, ends, reply.c, nullptr).As<Napi::Object>();
  result.Set("supervisionConfined", Napi::Boolean::New(env, true));
  std::lock_guard<std::mutex> lock(g_mu);
  result.Set("supervisionProcess", Napi::Number::New(env, g_pid));
  return result;
}

// A spawn (kSpawn: `o` is the plan) or a spare's go (kGo, its id; `o` is the go) made there, read
// and checked here, its stdio made here; the result watched here. A go whose spare is gone (with
// the process, or unusable) is null: the caller starts afresh; a spawn the process cannot take
// throws.
Napi::Value StartThere(Napi::Env env, uint32_t type, int32_t id, const Napi::Object& o, const Napi::Function& on_exit) {
  StdioEnds ends;
  std::string data;
  std::vector<int> fds;
  if (type == kSpawn) {
    LinuxSpawnPlan plan;
    SupervisorConfig supervisor;
    ParsePlan(env, o, &plan, &supervisor, PlanFor::kSupervisionProcess);
    ParseStdio(env, GetArray(o, "stdio"), &plan.stdio, &ends);
    EncodePlan(plan, supervisor, &data, &fds);
  } else {
    EncodeGo(ParseSpareGo(env, o, &ends), &data, &fds);
  }
  Header reply;
  std::string bytes;
  std::vector<int> rfds;
  int r = Request(type, id, std::move(data), std::move(fds), &reply, &bytes, &rfds);
  if (r < 0) {
    if (type == kGo) return env.Null();
    ThrowSandboxError(env, Gone(r));
  }
  if (reply.a != 0 || (type == kGo && reply.d == 0)) {
    CloseAll(rfds);
    if (reply.a != 0) ThrowSandboxError(env, ReplyStatus(reply, bytes));
    return env.Null();
  }
  return Watch(env, reply, &rfds, on_exit, &ends);
}

}  // namespace

// native.spawnInSupervisionProcess(plan, onExit): native.spawn for Landlock mode, made and
// supervised by the supervision process, which reads and checks the plan (a plan it refuses is
// an EINVALID_ARGUMENT SandboxError); its pipes are made here, and the result is watched here as
// any other.
Napi::Value SpawnInSupervisionProcessJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsObject() || !info[1].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.spawnInSupervisionProcess(plan, onExit)");
  }
  return StartThere(env, kSpawn, 0, info[0].As<Napi::Object>(), info[1].As<Napi::Function>());
}

void SpareToWire(Napi::Env env, const Napi::Object& o, std::string* bytes, std::vector<int>* fds) {
  LinuxSpawnPlan plan;
  SupervisorConfig supervisor;
  ParsePlan(env, o, &plan, &supervisor, PlanFor::kSupervisionProcess);
  EncodePlan(plan, supervisor, bytes, fds);
}

int32_t NextSpareIdInSupervisionProcess() noexcept {
  static std::atomic<int32_t> next{1};
  return next.fetch_add(1);
}

std::shared_ptr<SupervisionReply> SendPrepareToSupervisionProcess(std::string data, std::vector<int> fds, int32_t id, Status* err) noexcept {
  int r = 0;
  std::shared_ptr<SupervisionReply> owed;
  try {
    owed = SendWithBytes(kPrepare, id, std::move(data), std::move(fds), &r);
  } catch (const std::bad_alloc&) {
    r = -ENOMEM;
  }
  if (!owed) *err = Gone(r);
  return owed;
}

Status AwaitPrepareInSupervisionProcess(const std::shared_ptr<SupervisionReply>& owed) noexcept {
  Header reply;
  std::string bytes;
  std::vector<int> rfds;
  int r = AwaitReply(owed, &reply, &bytes, &rfds);
  CloseAll(rfds);
  if (r < 0) return Gone(r);
  return reply.a != 0 ? ReplyStatus(reply, bytes) : Status::Ok();
}

Napi::Value SpawnSpareInSupervisionProcess(Napi::Env env, int32_t id, const Napi::Object& go, const Napi::Function& on_exit) {
  return StartThere(env, kGo, id, go, on_exit);
}

void DiscardSpareInSupervisionProcess(int32_t id) noexcept {
  Header reply;
  std::string bytes;
  std::vector<int> rfds;
  if (RoundTrip(Header{kDiscard, 0, 0, 0, id}, "", {}, &reply, &bytes, &rfds) == 0) CloseAll(rfds);
}

bool AdmitProxyPeerInSupervisionProcess(uint16_t proxy_port, uint16_t peer_port, bool supervised) noexcept {
  Header reply;
  std::string bytes;
  std::vector<int> fds;
  // (None running: RoundTrip says so, -EPIPE.)
  if (RoundTrip(Header{kAdmit, proxy_port, peer_port, supervised ? 1 : 0, 0}, "", {}, &reply, &bytes, &fds) < 0) return false;
  CloseAll(fds);
  return reply.a == 1;
}

int CloseJournalInSupervisionProcess(const std::string& dir) noexcept {
  Header reply;
  std::string bytes;
  std::vector<int> fds;
  if (RoundTrip(Header{kCloseJournal, 0, 0, 0, 0}, dir, {}, &reply, &bytes, &fds) < 0) return 0;
  CloseAll(fds);
  return reply.a;
}

}  // namespace psb

namespace psb {

// native.testPlanWire(plan) -> { bytes, fds, same, refused }: the plan read as for the supervision
// process, sent through plan_wire.h and back: `same` when the second encoding (and its fds)
// equals the first; `refused` how many of its truncations the decoder refused (every one, when
// it reads nothing past what it got). A check of the codec (test/linux/supervision-process.test.ts).
Napi::Value TestPlanWireJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "Usage: native.testPlanWire(plan)");
  LinuxSpawnPlan plan;
  SupervisorConfig supervisor;
  ParsePlan(env, info[0].As<Napi::Object>(), &plan, &supervisor, PlanFor::kSupervisionProcess);
  StdioEnds ends;
  Napi::Value stdio = info[0].As<Napi::Object>().Get("stdio");
  if (stdio.IsArray()) ParseStdio(env, stdio.As<Napi::Array>(), &plan.stdio, &ends);
  std::string a, b;
  std::vector<int> fa, fb;
  EncodePlan(plan, supervisor, &a, &fa);
  LinuxSpawnPlan p2;
  SupervisorConfig s2;
  bool decoded = DecodePlan(a, fa, &p2, &s2);
  if (decoded) EncodePlan(p2, s2, &b, &fb);
  uint32_t refused = 0;
  for (size_t n = 0; n < a.size(); ++n) {
    LinuxSpawnPlan p3;
    SupervisorConfig s3;
    if (!DecodePlan(a.substr(0, n), fa, &p3, &s3)) ++refused;
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(a.size())));
  o.Set("fds", Napi::Number::New(env, static_cast<double>(fa.size())));
  o.Set("same", Napi::Boolean::New(env, decoded && a == b && fa == fb));
  o.Set("refused", Napi::Number::New(env, refused));
  return o;
}

}  // namespace psb
