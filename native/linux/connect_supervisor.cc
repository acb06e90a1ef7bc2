// Landlock mode's syscall supervisor: the loop, lifetime and connect() handling live here; the
// same listener carries the metadata calls (metadata_supervisor.cc) and the inotify counts, and
// Handle() below dispatches. connect() is supervised for a sandbox whose network is the proxy.
//
// The gap it closes: Landlock's TCP rules are per port, not per address, so a rule that lets the
// command reach the proxy on 127.0.0.1:P would let it reach port P of every IPv4 address. With
// the supervisor the command's Landlock domain allows NO TCP connect at all, and the command's
// seccomp filter stops every connect() that could name an AF_INET address (addrlen >= 16; see
// seccomp.cc 3b) in SECCOMP_RET_USER_NOTIF. This code, on the host, answers each one:
//   - 127.0.0.1:P on an unconnected AF_INET/SOCK_STREAM/TCP socket: the supervisor makes its OWN
//     socket, connects it to 127.0.0.1:P (a constant, never the address it read), puts it at the
//     command's fd number (SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SETFD, like dup2)
//     and answers 0 (or EINPROGRESS for a non-blocking socket whose connect is still under way);
//   - a second connect() on such a socket: EALREADY while it connects, EISCONN once connected
//     (the kernel's own answers, which Landlock would otherwise turn into EACCES);
//   - anything else (another address or port, AF_UNSPEC, a unix socket, an unreadable address):
//     SECCOMP_USER_NOTIF_FLAG_CONTINUE, i.e. the kernel runs the call as if never stopped.
// Why that is TOCTOU-safe: the command's memory and fd table can change after the supervisor has
// looked (another thread may rewrite the sockaddr or dup2 another socket onto the fd), so no
// decision here trusts them. A continued call is checked by Landlock, which refuses every TCP
// connect (EACCES), whatever address the kernel reads then; the only TCP connections the command
// ever holds are the ones made here, to the constant proxy address. What the supervisor read only
// picks between "make a proxy connection" and "let the kernel refuse or do it".
//
// Who may use the proxy: its listener is on the HOST's 127.0.0.1, where any local process (any
// uid) can connect to it, and it would serve them as this sandbox, credential rules included.
// So each socket made here is registered (by its sockfs inode) before it connects, and the
// proxy serves an accepted connection only when the peer socket it comes from is a registered
// one (AdmitProxyPeer: the kernel's socket table, looked up by the exact 4-tuple, names that
// socket's inode). An inode is never shared by two sockets alive at once, and another process
// cannot make its socket have ours, so nothing but a connection made here gets served. An entry
// is used once: taken by the accept it admits, dropped when the connect fails, and dropped with
// the supervisor.
//
// Threading and lifetime: everything runs on the JS thread's loop, through uv_poll on the
// listener (one ioctl per notification, no blocking call: a RECV happens only after poll() said a
// notification is queued, and the connect to the proxy is non-blocking), except the metadata
// calls, which the loop queues for the sandbox's metadata worker thread (MetaWorker below). A blocking socket whose
// connect is still under way is parked on its own uv_poll until it completes, the command waiting
// in connect() meanwhile, as it would for a real connect. The handles are unref'd: the sandbox's
// exit watch decides how long the loop lives. The supervisor ends when the listener reports
// POLLHUP (no task of the sandbox, setsid'd or not, holds the filter any more) or when the env is
// torn down (an async cleanup hook, as in relay.cc); once its listener is closed, a notified
// connect (or chmod, or inotify call) fails with ENOSYS: closed, never open.
#include "connect_supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <utility>

#include "metadata_supervisor.h"
#include "notify_abi.h"

namespace psb {
namespace {

using notify::ArgInt;
using notify::Continue;
using notify::IdValid;
using notify::kAddfdFlagSetfd;
using notify::kNotifAddfd;
using notify::kNotifRecv;
using notify::Respond;
using notify::SeccompNotif;
using notify::SeccompNotifAddfd;

// TCP states (include/net/tcp_states.h).
constexpr uint8_t kTcpSynSent = 2;
constexpr uint8_t kTcpClose = 7;

// Bounded work per wakeup keeps a command that connects in a loop from starving the host's loop.
constexpr int kMaxPerWakeup = 64;
// Blocking connects still under way each hold a host fd (on loopback only while the proxy's
// backlog is full): a sandbox gets at most this many at once; more fail with EAGAIN (the
// kernel's "no local port free now"). Non-blocking ones hold none: the socket is handed over at
// once.
constexpr size_t kMaxPending = 64;

struct Supervisor;

// The proxy connections made here and not yet accepted: sockfs inode -> (proxy port, owner, a
// host fd of the socket). Process-wide (the proxy may run on any thread). The host's fd keeps
// the socket (and so its inode) alive until the proxy has accepted the connection, even when the
// command closed it at once (a port check, a request sent without waiting for the answer): its
// accept then still finds the registered socket and takes the entry, closing that fd. An entry is
// left only by a connection that never reaches the accept (the connect failed, or the listener's
// queue stayed full), until its supervisor ends; each sandbox may hold only so many (host fds,
// beyond kMaxPending's): past that its connects fail with EAGAIN, and only its own.
struct PeerEntry {
  uint16_t port;
  const Supervisor* owner;
  int fd;
};
std::mutex peers_mu;
std::map<uint64_t, PeerEntry> peers;
std::map<const Supervisor*, size_t> peers_per_owner;
// Connections normally wait one loop iteration for their accept, made by at most two batches of
// kMaxPerWakeup notifications (the one before the accept and the one after): room for four.
constexpr size_t kMaxPeersPerSandbox = 256;

void ErasePeerLocked(std::map<uint64_t, PeerEntry>::iterator it) {
  auto c = peers_per_owner.find(it->second.owner);
  if (c != peers_per_owner.end() && --c->second == 0) peers_per_owner.erase(c);
  close(it->second.fd);
  peers.erase(it);
}

// Registers socket `sock` (inode `ino`) for `port`; false when it cannot be.
bool RegisterPeer(int sock, uint64_t ino, uint16_t port, const Supervisor* owner) {
  std::lock_guard<std::mutex> g(peers_mu);
  if (ino == 0 || peers.count(ino) != 0) return false;
  size_t& n = peers_per_owner[owner];
  if (n >= kMaxPeersPerSandbox) return false;
  int fd = fcntl(sock, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return false;
  ++n;
  peers[ino] = PeerEntry{port, owner, fd};
  return true;
}

void ForgetPeer(uint64_t ino) {
  std::lock_guard<std::mutex> g(peers_mu);
  auto it = peers.find(ino);
  if (it != peers.end()) ErasePeerLocked(it);
}

void ForgetPeersOf(const Supervisor* owner) {
  std::lock_guard<std::mutex> g(peers_mu);
  for (auto it = peers.begin(); it != peers.end();) {
    auto next = std::next(it);
    if (it->second.owner == owner) ErasePeerLocked(it);
    it = next;
  }
  peers_per_owner.erase(owner);
}

// The sockfs inode of a socket fd (0 if unknown).
uint64_t SocketInode(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// The sandbox's metadata worker: a thread of its own that carries out the metadata calls
// (metadata_supervisor.cc), so that a call the command makes slow stalls only that sandbox's
// metadata calls and never the host's loop. The command picks the cost of each one: a path through
// 40 symlinks of 4 kB each costs milliseconds of path walk, and a chmod of a file it is writing
// 1 GiB at a time waits for the inode lock each write holds (seconds per call, every call).
// The loop thread takes each notification off the listener (and counts inotify) as before and
// queues the metadata ones here. The worker owns a dup of the listener and its own copy of the
// rules, so it never touches the Supervisor: Shutdown only sets `stop`, and the worker frees
// itself; a call still queued then fails with ENOSYS once the last listener fd is closed.
struct MetaWorker {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  std::deque<SeccompNotif> queue;
  bool stop = false;
  int listener = -1;
  MetadataRules rules;
};
// Each of the command's threads waits in at most one call, so this bounds only a command with
// thousands of threads in metadata calls at once; beyond it a call fails with EAGAIN.
constexpr size_t kMaxMetaQueued = 4096;

void* MetaWorkerMain(void* arg) {
  MetaWorker* w = static_cast<MetaWorker*>(arg);
  for (;;) {
    pthread_mutex_lock(&w->mu);
    while (!w->stop && w->queue.empty()) pthread_cond_wait(&w->cv, &w->mu);
    if (w->stop) {
      pthread_mutex_unlock(&w->mu);
      break;
    }
    SeccompNotif n = w->queue.front();
    w->queue.pop_front();
    pthread_mutex_unlock(&w->mu);
    if (!HandleMetadata(w->listener, n, w->rules)) Continue(w->listener, n.id);
  }
  close(w->listener);
  delete w;
  return nullptr;
}

// Starts a worker for listener (dup'ed); nullptr when none can be had.
MetaWorker* StartMetaWorker(int listener, const MetadataRules& rules) {
  MetaWorker* w = new (std::nothrow) MetaWorker();
  if (w == nullptr) return nullptr;
  w->listener = fcntl(listener, F_DUPFD_CLOEXEC, 0);
  if (w->listener < 0) {
    delete w;
    return nullptr;
  }
  w->rules = rules;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 512 * 1024);  // the largest frame holds a 4 kB page and PATH_MAX
  // No signal is ever delivered to this thread: Node's handlers run on its own threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, &attr, MetaWorkerMain, w);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    close(w->listener);
    delete w;
    return nullptr;
  }
  return w;
}

void StopMetaWorker(MetaWorker* w) {
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

// Queues n for the worker; false when it cannot take it (the caller answers).
bool QueueMeta(MetaWorker* w, const SeccompNotif& n) {
  pthread_mutex_lock(&w->mu);
  bool ok = w->queue.size() < kMaxMetaQueued;
  if (ok) {
    w->queue.push_back(n);
    pthread_cond_signal(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return ok;
}

// A blocking socket's connect to the proxy, still under way; the command waits in connect().
struct Pending {
  Supervisor* sup = nullptr;
  uv_poll_t poll;
  int sock = -1;
  uint64_t id = 0;
  int child_fd = -1;
  uint64_t ino = 0;  // registered (see the top of the file) until the connect is answered
  bool cloexec = false;
  bool closing = false;
};

struct Supervisor {
  uv_poll_t poll;
  int fd = -1;
  uint16_t port = 0;
  SupervisorConfig config;
  bool closing = false;
  int open_handles = 0;
  std::list<Pending*> pending;
  napi_async_cleanup_hook_handle cleanup = nullptr;
  MetaWorker* worker = nullptr;  // started at the first metadata call
  bool worker_failed = false;
};

void MaybeFree(Supervisor* s) {
  if (s->open_handles > 0) return;
  if (s->cleanup != nullptr) napi_remove_async_cleanup_hook(s->cleanup);
  s->cleanup = nullptr;
  delete s;
}

void OnPendingClosed(uv_handle_t* h) {
  Pending* p = static_cast<Pending*>(h->data);
  Supervisor* s = p->sup;
  if (p->sock >= 0) close(p->sock);  // libuv no longer watches it
  s->pending.remove(p);
  delete p;
  --s->open_handles;
  MaybeFree(s);
}

void ClosePending(Pending* p) {
  if (p->closing) return;
  p->closing = true;
  uv_poll_stop(&p->poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&p->poll), OnPendingClosed);
}

void OnListenerClosed(uv_handle_t* h) {
  Supervisor* s = static_cast<Supervisor*>(h->data);
  // Closing the listener fails every notification still queued, and every later one, with ENOSYS.
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  --s->open_handles;
  MaybeFree(s);
}

void Shutdown(Supervisor* s) {
  if (s->closing) return;
  s->closing = true;
  if (s->worker != nullptr) StopMetaWorker(s->worker);
  s->worker = nullptr;
  ForgetPeersOf(s);  // a connection made here and not accepted yet is served no more
  uv_poll_stop(&s->poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&s->poll), OnListenerClosed);
  for (Pending* p : std::list<Pending*>(s->pending)) ClosePending(p);
}

void TeardownHook(napi_async_cleanup_hook_handle, void* arg) { Shutdown(static_cast<Supervisor*>(arg)); }

// Whether the command's fd `fd` is close-on-exec (from /proc/<tid>/fdinfo; false if unknown).
bool ChildFdCloexec(uint32_t tid, int fd) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/fdinfo/%d", tid, fd);
  int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) return false;
  char buf[256];
  ssize_t n = read(f, buf, sizeof buf - 1);
  close(f);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* flags = strstr(buf, "flags:");
  if (flags == nullptr) return false;
  unsigned long v = strtoul(flags + 6, nullptr, 8);
  return (v & O_CLOEXEC) != 0;
}

// Options a client commonly sets before connect(); the replacement socket carries them over.
// (Others, e.g. buffer sizes or a bind() to a local address, are not copied.)
void CopyOptions(int from, int to) {
  const struct {
    int level, name;
  } kOpts[] = {{IPPROTO_TCP, TCP_NODELAY}, {SOL_SOCKET, SO_KEEPALIVE}, {IPPROTO_TCP, TCP_KEEPIDLE},
               {IPPROTO_TCP, TCP_KEEPINTVL}, {IPPROTO_TCP, TCP_KEEPCNT}};
  for (const auto& o : kOpts) {
    int v = 0;
    socklen_t len = sizeof v;
    if (getsockopt(from, o.level, o.name, &v, &len) == 0) setsockopt(to, o.level, o.name, &v, sizeof v);
  }
}

// Puts `sock` at the command's fd number and answers `error` (0 or -EINPROGRESS).
void Inject(int listener, uint64_t id, int sock, int child_fd, bool cloexec, int error) {
  SeccompNotifAddfd a;
  memset(&a, 0, sizeof a);
  a.id = id;
  a.flags = kAddfdFlagSetfd;
  a.srcfd = static_cast<uint32_t>(sock);
  a.newfd = static_cast<uint32_t>(child_fd);
  a.newfd_flags = cloexec ? O_CLOEXEC : 0;
  if (ioctl(listener, kNotifAddfd, &a) < 0) {
    // ENOENT: the call is gone. Anything else: the command gets the error, never a socket.
    if (errno != ENOENT) Respond(listener, id, -errno);
    return;
  }
  Respond(listener, id, error);
}

void OnPendingWritable(uv_poll_t* h, int status, int) {
  Pending* p = static_cast<Pending*>(h->data);
  Supervisor* s = p->sup;
  if (p->closing || s->closing) return;
  int err = 0;
  socklen_t len = sizeof err;
  if (status < 0) err = ECONNREFUSED;
  else if (getsockopt(p->sock, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
  if (err == 0) {
    // The command's socket is a blocking one: so is the description it gets.
    int fl = fcntl(p->sock, F_GETFL);
    if (fl >= 0) fcntl(p->sock, F_SETFL, fl & ~O_NONBLOCK);
    Inject(s->fd, p->id, p->sock, p->child_fd, p->cloexec, 0);
  } else {
    ForgetPeer(p->ino);
    Respond(s->fd, p->id, -err);
  }
  ClosePending(p);
}

// One connect() notification. See the top of the file for the rules.
void HandleConnect(Supervisor* s, const SeccompNotif& n) {
  const int listener = s->fd;
  // The kernel's connect takes an int fd and an int addrlen: the low words are what it acts on.
  const int child_fd = ArgInt(n, 0);
  const int addrlen = ArgInt(n, 2);
  if (addrlen < static_cast<int>(sizeof(sockaddr_in)) || addrlen > static_cast<int>(sizeof(sockaddr_storage))) {
    return Continue(listener, n.id);
  }
  // A pidfd checked to name the task that made the call. Without one nothing can be handed
  // over; the kernel (and Landlock) decide.
  int pidfd = notify::PidfdFor(listener, n);
  if (pidfd < 0) return Continue(listener, n.id);
  sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  struct iovec local = {&sa, sizeof sa};
  struct iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(n.data.args[1])), sizeof sa};
  ssize_t got = process_vm_readv(static_cast<pid_t>(n.pid), &local, 1, &remote, 1, 0);
  // Read from the right task only if the call is still pending afterwards (no pid reuse).
  if (!IdValid(listener, n.id)) {
    close(pidfd);
    return;
  }
  const bool to_proxy = got == static_cast<ssize_t>(sizeof sa) && sa.sin_family == AF_INET &&
                        sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && sa.sin_port == htons(s->port);
  if (!to_proxy) {
    close(pidfd);
    return Continue(listener, n.id);
  }
  int copy = static_cast<int>(syscall(__NR_pidfd_getfd, pidfd, child_fd, 0));
  close(pidfd);
  if (copy < 0) return Continue(listener, n.id);  // EBADF and friends come from the kernel
  int domain = 0, type = 0, proto = 0;
  socklen_t len = sizeof(int);
  bool tcp = getsockopt(copy, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_INET;
  len = sizeof(int);
  tcp = tcp && getsockopt(copy, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
  len = sizeof(int);
  tcp = tcp && getsockopt(copy, SOL_SOCKET, SO_PROTOCOL, &proto, &len) == 0 && proto == IPPROTO_TCP;
  if (!tcp) {
    close(copy);
    return Continue(listener, n.id);
  }
  tcp_info ti;
  memset(&ti, 0, sizeof ti);
  len = sizeof ti;
  if (getsockopt(copy, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0) ti.tcpi_state = kTcpClose;
  if (ti.tcpi_state != kTcpClose) {
    close(copy);
    return Respond(listener, n.id, ti.tcpi_state == kTcpSynSent ? -EALREADY : -EISCONN);
  }
  const int fl = fcntl(copy, F_GETFL);
  const bool nonblocking = fl >= 0 && (fl & O_NONBLOCK) != 0;
  int sock = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (sock < 0) {
    int e = errno;
    close(copy);
    return Respond(listener, n.id, -e);
  }
  CopyOptions(copy, sock);
  close(copy);
  // Registered strictly before the connect: the proxy cannot accept it earlier.
  const uint64_t ino = SocketInode(sock);
  if (!RegisterPeer(sock, ino, s->port, s)) {
    close(sock);
    return Respond(listener, n.id, -EAGAIN);
  }
  const bool cloexec = ChildFdCloexec(n.pid, child_fd);
  sockaddr_in proxy;
  memset(&proxy, 0, sizeof proxy);
  proxy.sin_family = AF_INET;
  proxy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  proxy.sin_port = htons(s->port);
  int r = connect(sock, reinterpret_cast<sockaddr*>(&proxy), sizeof proxy);
  int err = r == 0 ? 0 : errno;
  if (err != 0 && err != EINPROGRESS) {
    ForgetPeer(ino);
    close(sock);
    return Respond(listener, n.id, -err);
  }
  if (nonblocking || err == 0) {
    if (!nonblocking) fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) & ~O_NONBLOCK);
    // A non-blocking caller gets EINPROGRESS and waits for writability, as with any connect.
    Inject(listener, n.id, sock, child_fd, cloexec, err == 0 ? 0 : -EINPROGRESS);
    close(sock);
    return;
  }
  if (s->pending.size() >= kMaxPending) {
    ForgetPeer(ino);
    close(sock);
    return Respond(listener, n.id, -EAGAIN);
  }
  Pending* p = new Pending();
  p->sup = s;
  p->sock = sock;
  p->id = n.id;
  p->child_fd = child_fd;
  p->ino = ino;
  p->cloexec = cloexec;
  uv_loop_t* loop = s->poll.loop;
  if (uv_poll_init(loop, &p->poll, sock) != 0) {
    ForgetPeer(ino);
    close(sock);
    delete p;
    return Respond(listener, n.id, -ENOMEM);
  }
  p->poll.data = p;
  s->pending.push_back(p);
  ++s->open_handles;
  uv_unref(reinterpret_cast<uv_handle_t*>(&p->poll));
  uv_poll_start(&p->poll, UV_WRITABLE, OnPendingWritable);
}

// One notification: connect() (with a proxy port) or a metadata change (with writable roots).
// A call this supervisor was not configured for continues: the filter only stops what was asked.
void Handle(Supervisor* s, const SeccompNotif& n) {
  SupervisorConfig& c = s->config;
  if (n.data.nr == __NR_connect && s->port != 0) return HandleConnect(s, n);
  if (c.signals.enabled && IsSignalCall(n)) return HandleSignal(s->fd, n, c.signals);
  // inotify: first the count (a call then refused was counted all the same: the safe direction).
  // Continuing inotify_init* is safe: nothing but the count is decided on.
  uint32_t* left = nullptr;
  int over = 0;
#ifdef __NR_inotify_init
  if (n.data.nr == __NR_inotify_init) left = &c.inotify_instances, over = -EMFILE;
#endif
  if (n.data.nr == __NR_inotify_init1) left = &c.inotify_instances, over = -EMFILE;
  if (n.data.nr == __NR_inotify_add_watch) left = &c.inotify_watches, over = -ENOSPC;
  if (left != nullptr && c.inotify) {
    if (*left == 0) return Respond(s->fd, n.id, over);  // the kernel's answers at the uid's limits
    --*left;
  }
  if (c.metadata.enabled && IsMetadataCall(n.data.nr, c.metadata)) {
    if (s->worker == nullptr && !s->worker_failed) {
      s->worker = StartMetaWorker(s->fd, c.metadata);
      s->worker_failed = s->worker == nullptr;
    }
    if (s->worker != nullptr) {
      if (!QueueMeta(s->worker, n)) Respond(s->fd, n.id, -EAGAIN);
      return;
    }
    // No thread to be had: answered here, on the loop, as closed as on the worker.
    HandleMetadata(s->fd, n, c.metadata);
    return;
  }
  Continue(s->fd, n.id);
}

void OnListener(uv_poll_t* h, int status, int) {
  Supervisor* s = static_cast<Supervisor*>(h->data);
  if (s->closing) return;
  for (int i = 0; i < kMaxPerWakeup; ++i) {
    // RECV blocks when nothing is queued: ask poll() first (notifications withdrawn in between,
    // by a signal, still let RECV return, with ENOENT).
    struct pollfd pfd = {s->fd, POLLIN, 0};
    if (status < 0 || poll(&pfd, 1, 0) < 0) return Shutdown(s);
    if ((pfd.revents & POLLIN) == 0) {
      // POLLHUP: no task uses the filter any more; the sandbox is gone.
      if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)) Shutdown(s);
      return;
    }
    SeccompNotif n;
    memset(&n, 0, sizeof n);  // the kernel insists on a zeroed buffer
    if (ioctl(s->fd, kNotifRecv, &n) < 0) {
      if (errno == ENOENT || errno == EINTR) continue;
      return Shutdown(s);
    }
    Handle(s, n);
  }
}

// The TCP socket at 127.0.0.1:src_port connected to 127.0.0.1:dst_port, looked up in the kernel's
// socket table by that exact 4-tuple (NETLINK_SOCK_DIAG, no dump: one hash lookup, answered
// within the send, unprivileged). False when there is none (or no answer).
bool LoopbackSocket(uint16_t src_port, uint16_t dst_port, uint64_t* ino, uint32_t* uid) {
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return false;
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg;
  memset(&msg, 0, sizeof msg);
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = AF_INET;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  msg.req.id.idiag_sport = htons(src_port);
  msg.req.id.idiag_dport = htons(dst_port);
  msg.req.id.idiag_src[0] = htonl(INADDR_LOOPBACK);
  msg.req.id.idiag_dst[0] = htonl(INADDR_LOOPBACK);
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel;
  memset(&kernel, 0, sizeof kernel);
  kernel.nl_family = AF_NETLINK;
  alignas(nlmsghdr) char buf[4096];
  bool found = false;
  if (sendto(nl, &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) == sizeof msg) {
    // The kernel answers inside sendto(): the reply is queued already, never waited for.
    ssize_t n = recv(nl, buf, sizeof buf, MSG_DONTWAIT);
    const nlmsghdr* h = reinterpret_cast<const nlmsghdr*>(buf);
    if (n > 0 && NLMSG_OK(h, static_cast<uint32_t>(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
        h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      const inet_diag_msg* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      // The lookup falls back to a listener on src_port: only the exact connection counts.
      found = m->id.idiag_sport == htons(src_port) && m->id.idiag_dport == htons(dst_port) &&
              m->id.idiag_src[0] == htonl(INADDR_LOOPBACK) && m->id.idiag_dst[0] == htonl(INADDR_LOOPBACK);
      *ino = m->idiag_inode;
      *uid = m->idiag_uid;
    }
  }
  close(nl);
  return found;
}

}  // namespace

bool AdmitProxyPeer(uint16_t proxy_port, uint16_t peer_port, bool supervised) noexcept {
  uint64_t ino = 0;
  uint32_t uid = 0;
  if (!LoopbackSocket(peer_port, proxy_port, &ino, &uid) || ino == 0) return false;
  if (!supervised) return uid == geteuid();
  std::lock_guard<std::mutex> g(peers_mu);
  auto it = peers.find(ino);
  if (it == peers.end() || it->second.port != proxy_port) return false;
  ErasePeerLocked(it);
  return true;
}

int StartSupervisor(napi_env env, uv_loop_t* loop, int listener_fd, SupervisorConfig config) noexcept {
  Supervisor* s = new (std::nothrow) Supervisor();
  if (s == nullptr) {
    close(listener_fd);
    return -ENOMEM;
  }
  s->fd = listener_fd;
  s->port = config.proxy_port;
  s->config = std::move(config);
  // Before any uv handle exists (see relay.cc): a terminating env waits for our handles to close.
  if (napi_add_async_cleanup_hook(env, TeardownHook, s, &s->cleanup) != napi_ok) {
    close(listener_fd);
    delete s;
    return -ENOMEM;
  }
  int rc = uv_poll_init(loop, &s->poll, listener_fd);
  if (rc != 0) {
    close(listener_fd);
    s->fd = -1;
    MaybeFree(s);
    return rc;
  }
  s->poll.data = s;
  ++s->open_handles;
  uv_unref(reinterpret_cast<uv_handle_t*>(&s->poll));
  uv_poll_start(&s->poll, UV_READABLE | UV_DISCONNECT, OnListener);
  return 0;
}

}  // namespace psb
