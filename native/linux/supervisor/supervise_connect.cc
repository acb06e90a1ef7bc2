// The supervisor's connect class: connect() is supervised for a sandbox whose network is the
// proxy (SeccompConfig::notify_connect). The supervisor's loop (supervisor.cc) hands each
// connect() notification to HandleConnect, on the supervisor's thread.
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
// Threading: everything here runs on the sandbox's supervisor thread, without a blocking call
// (the connect to the proxy is non-blocking). A blocking socket whose connect is still under way
// (on loopback only while the proxy's backlog is full) is parked: the supervisor's poll() watches
// it (ConnectPollFds) and answers the command, which waits in connect() meanwhile, as it would
// for a real connect, once it completes (ConnectPollDone). The registry of peers is shared with
// the proxy's thread (AdmitProxyPeer) under a mutex. The supervisor's fd table is not the host's
// (supervisor.cc, Confinement), and the proxy must close a registered socket's copy the moment it
// admits it (the command may have closed its own: the proxy then sees the end at once): so the
// copy is sent into the host's table (SCM_RIGHTS over the class's socket pair, whose receiving
// end only the host holds) and received there by the proxy's thread when it needs it.
// Tests: test/linux/connect-supervisor.test.ts, test/linux/proxy-peers.test.ts (AdmitProxyPeer),
// test/linux/threats-net.test.ts, test/network/enforced.test.ts.
#include "supervise_connect.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
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
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "notify_abi.h"
#include "../proc_fields.h"
#include "task_access.h"

namespace psb {
namespace {

using notify::ArgInt;
using notify::Continue;
using notify::IdValid;
using notify::kAddfdFlagSetfd;
using notify::kNotifAddfd;
using notify::Respond;
using notify::SeccompNotif;
using notify::SeccompNotifAddfd;

// TCP states (include/net/tcp_states.h).
constexpr uint8_t kTcpSynSent = 2;
constexpr uint8_t kTcpClose = 7;

// Blocking connects still under way each hold a host fd (on loopback only while the proxy's
// backlog is full): a sandbox gets at most this many at once; more fail with EAGAIN (the
// kernel's "no local port free now"). Non-blocking ones hold none: the socket is handed over at
// once.
constexpr size_t kMaxPending = 64;


// The proxy connections made here and not yet accepted: sockfs inode -> (proxy port, owner, a
// host fd of the socket, -1 while it is still on its way: sent, not received yet; see the top of
// the file). Process-wide (the proxy may run on any thread). The host's fd keeps
// the socket (and so its inode) alive until the proxy has accepted the connection, even when the
// command closed it at once (a port check, a request sent without waiting for the answer): its
// accept then still finds the registered socket and takes the entry, closing that fd. An entry is
// left only by a connection that never reaches the accept (the connect failed, or the listener's
// queue stayed full), until its supervisor ends; each sandbox may hold only so many (host fds,
// beyond kMaxPending's): past that its connects fail with EAGAIN, and only its own.
struct PeerEntry {
  uint16_t port;
  const ConnectClass* owner;
  int fd;
};
std::mutex peers_mu;
std::map<uint64_t, PeerEntry> peers;
std::map<const ConnectClass*, size_t> peers_per_owner;
// Host fds of entries a supervisor dropped (it cannot close them: they are in the host's table),
// closed by the next host thread that takes peers_mu (AdmitProxyPeer, ClosePeerLeftovers).
std::vector<int> leftovers;
// The proxy accepts on the host's loop while the supervisor connects on its own thread: a command
// connecting in a burst gets this far ahead of the accepts, then EAGAIN until they catch up.
constexpr size_t kMaxPeersPerSandbox = 256;

// on_host: on a thread of the host's table (the proxy's), which closes the host fd; else (the
// supervisor's) it is left for one.
void ErasePeerLocked(std::map<uint64_t, PeerEntry>::iterator it, bool on_host) {
  auto c = peers_per_owner.find(it->second.owner);
  if (c != peers_per_owner.end() && --c->second == 0) peers_per_owner.erase(c);
  if (it->second.fd >= 0) {
    if (on_host) {
      close(it->second.fd);
    } else {
      leftovers.push_back(it->second.fd);
    }
  }
  // Still on its way (-1): whoever receives it finds no entry and closes it.
  peers.erase(it);
}

void ClosePeerLeftoversLocked() {
  for (int fd : leftovers) close(fd);
  leftovers.clear();
}

// The class's socket pair: [0] the supervisor's sending end, [1] the host's receiving end.
int KeepEnd(const ConnectClass* c, int i);

// One message between the supervisor and the host: a socket's inode, with room for its fd.
struct FdMessage {
  uint64_t ino = 0;
  char control[CMSG_SPACE(sizeof(int))] = {};
  struct iovec iov = {&ino, sizeof ino};
  struct msghdr m = {};
  FdMessage() {
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

// Sends the registry's copy of `sock` (inode `ino`) to the host (see the top of the file).
bool SendToHost(int tx, int sock, uint64_t ino) {
  FdMessage msg;
  msg.ino = ino;
  struct msghdr& m = msg.m;
  struct cmsghdr* h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &sock, sizeof(int));
  return sendmsg(tx, &m, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof msg.ino);
}

// On the host: receives what `owner`'s supervisor sent so far, each into its entry (or closed:
// its entry is gone).
void ReceiveOnHostLocked(const ConnectClass* owner) {
  for (;;) {
    FdMessage msg;
    struct msghdr& m = msg.m;
    const uint64_t& ino = msg.ino;
    if (recvmsg(KeepEnd(owner, 1), &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) <= 0) return;
    struct cmsghdr* h = CMSG_FIRSTHDR(&m);
    if (h == nullptr || h->cmsg_type != SCM_RIGHTS) continue;
    int fd = -1;
    memcpy(&fd, CMSG_DATA(h), sizeof fd);
    auto it = peers.find(ino);
    if (it != peers.end() && it->second.owner == owner && it->second.fd < 0) {
      it->second.fd = fd;
    } else {
      close(fd);
    }
  }
}

// Registers socket `sock` (inode `ino`) for `port`; false when it cannot be.
bool RegisterPeer(int sock, uint64_t ino, uint16_t port, const ConnectClass* owner) {
  std::lock_guard<std::mutex> g(peers_mu);
  if (ino == 0 || peers.count(ino) != 0) return false;
  size_t& n = peers_per_owner[owner];
  if (n >= kMaxPeersPerSandbox) return false;
  if (!SendToHost(KeepEnd(owner, 0), sock, ino)) return false;
  ++n;
  peers[ino] = PeerEntry{port, owner, -1};
  return true;
}

void ForgetPeer(uint64_t ino) {
  std::lock_guard<std::mutex> g(peers_mu);
  auto it = peers.find(ino);
  if (it != peers.end()) ErasePeerLocked(it, false);
}

void ForgetPeersOf(const ConnectClass* owner) {
  std::lock_guard<std::mutex> g(peers_mu);
  for (auto it = peers.begin(); it != peers.end();) {
    auto next = std::next(it);
    if (it->second.owner == owner) ErasePeerLocked(it, false);
    it = next;
  }
  peers_per_owner.erase(owner);
}

// The sockfs inode of a socket fd (0 if unknown).
uint64_t SocketInode(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// A blocking socket's connect to the proxy, still under way; the command waits in connect().
struct Pending {
  int sock = -1;
  uint64_t id = 0;
  int child_fd = -1;
  uint64_t ino = 0;  // registered (see the top of the file) until the connect is answered
  bool cloexec = false;
};

}  // namespace

struct ConnectClass {
  uint16_t port = 0;
  std::vector<Pending> pending;  // at most kMaxPending
  int keep[2] = {-1, -1};        // KeepEnd
};

namespace {

int KeepEnd(const ConnectClass* c, int i) { return c->keep[i]; }

// The fd's flags (/proc/<tid>/fdinfo/<fd>), or -1.
long ChildFdFlags(uint32_t tid, int fd) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%u/fdinfo/%d", tid, fd);
  if (!procfs::ReadSmall(path, buf, sizeof buf)) return -1;
  return procfs::KeyNumber(buf, "flags", 8, -1);
}

// Whether the command's fd `fd` is close-on-exec (from /proc/<tid>/fdinfo; false if unknown).
bool ChildFdCloexec(uint32_t tid, int fd) {
  const long v = ChildFdFlags(tid, fd);
  return v >= 0 && (v & O_CLOEXEC) != 0;
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

// What the connect class needs of the command's socket before replacing it. Only picks between
// "make a proxy connection", "the kernel's EALREADY/EISCONN" and "continue" (see the top of the
// file): a wrong reading never reaches anything but the proxy.
struct SocketFacts {
  bool tcp = false;         // AF_INET, SOCK_STREAM, IPPROTO_TCP
  uint8_t state = kTcpClose;
  bool nonblocking = false;
  int copy = -1;  // a dup of the socket (pidfd way): its options are carried over
};

// The pidfd way: a dup of the socket itself (pidfd_getfd), asked directly.
bool SocketFactsFromDup(int pidfd, uint32_t tid, int child_fd, SocketFacts* f) {
  const int copy = task::DupTaskFd(pidfd, tid, child_fd);
  if (copy < 0) return false;  // EBADF and friends come from the kernel
  f->copy = copy;
  int domain = 0, type = 0, proto = 0;
  socklen_t len = sizeof(int);
  bool tcp = getsockopt(copy, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_INET;
  len = sizeof(int);
  tcp = tcp && getsockopt(copy, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
  len = sizeof(int);
  tcp = tcp && getsockopt(copy, SOL_SOCKET, SO_PROTOCOL, &proto, &len) == 0 && proto == IPPROTO_TCP;
  f->tcp = tcp;
  if (!tcp) return true;
  tcp_info ti;
  memset(&ti, 0, sizeof ti);
  len = sizeof ti;
  f->state = getsockopt(copy, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 ? ti.tcpi_state : kTcpClose;
  const int fl = fcntl(copy, F_GETFL);
  f->nonblocking = fl >= 0 && (fl & O_NONBLOCK) != 0;
  return true;
}

// The TCP state of the IPv4 socket with sockfs inode `ino` in task tid's network namespace: the
// kernel lists every TCP socket that is connecting, connected, closing or listening in
// /proc/<tid>/net/tcp; one it does not list is unconnected (TCP_CLOSE). -1 when unreadable.
int TcpStateOf(uint32_t tid, uint64_t ino) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/net/tcp", tid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return -1;
  char line[512];
  int state = kTcpClose;
  bool header = true;
  while (fgets(line, sizeof line, f) != nullptr) {
    if (header) {  // "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
      header = false;
      continue;
    }
    unsigned st = 0;
    unsigned long long node = 0;
    if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %llu", &st, &node) != 2) continue;
    if (node == ino) {
      state = static_cast<int>(st);
      break;
    }
  }
  fclose(f);
  return state;
}

// The procfs way (no pidfd_getfd: task_access.h): a socket cannot be reopened through
// /proc/<tid>/fd, so it is asked about from outside: its protocol by the name sockfs gives it at
// creation ("system.sockprotoname": "TCP" is tcp_prot, an AF_INET SOCK_STREAM IPPROTO_TCP
// socket; "TCPv6", "MPTCP", "UDP" ... are not), its state by its inode in the namespace's TCP
// table, O_NONBLOCK from fdinfo. Options set before connect() (TCP_NODELAY, keep-alive) cannot be
// read: the proxy connection does not carry them.
bool SocketFactsFromProc(uint32_t tid, int child_fd, SocketFacts* f) {
  if (child_fd < 0) return false;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/fd/%d", tid, child_fd);
  struct stat st;
  if (stat(path, &st) != 0) return false;
  if (!S_ISSOCK(st.st_mode)) return true;  // not a socket: continued
  char name[16] = {};
  const ssize_t n = getxattr(path, "system.sockprotoname", name, sizeof name - 1);
  f->tcp = n > 0 && strcmp(name, "TCP") == 0;
  if (!f->tcp) return true;
  const int state = TcpStateOf(tid, static_cast<uint64_t>(st.st_ino));
  const long fl = ChildFdFlags(tid, child_fd);
  if (state < 0 || fl < 0) return false;
  f->state = static_cast<uint8_t>(state);
  f->nonblocking = (fl & O_NONBLOCK) != 0;
  return true;
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

// A waiting connect whose socket poll() reported: answers the command.
void FinishPending(int listener, const Pending& p, short revents) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(p.sock, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
  if (err == 0 && (revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) err = ECONNREFUSED;
  if (err == 0) {
    // The command's socket is a blocking one: so is the description it gets.
    int fl = fcntl(p.sock, F_GETFL);
    if (fl >= 0) fcntl(p.sock, F_SETFL, fl & ~O_NONBLOCK);
    Inject(listener, p.id, p.sock, p.child_fd, p.cloexec, 0);
  } else {
    ForgetPeer(p.ino);
    Respond(listener, p.id, -err);
  }
  close(p.sock);
}

// One connect() notification. See the top of the file for the rules.
void Connect(ConnectClass* c, int listener, const SeccompNotif& n) {
  // The kernel's connect takes an int fd and an int addrlen: the low words are what it acts on.
  const int child_fd = ArgInt(n, 0);
  const int addrlen = ArgInt(n, 2);
  if (addrlen < static_cast<int>(sizeof(sockaddr_in)) || addrlen > static_cast<int>(sizeof(sockaddr_storage))) {
    return Continue(listener, n.id);
  }
  // A pidfd checked to name the task that made the call (for pidfd_getfd; the procfs way needs
  // none: task_access.h). Without one nothing can be handed over; the kernel (and Landlock) decide.
  const bool procfs = task::Way() == task::Access::kProcfs;
  int pidfd = procfs ? -1 : notify::PidfdFor(listener, n);
  if (!procfs && pidfd < 0) return Continue(listener, n.id);
  sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  const long got = task::ReadTaskMemory(n.pid, n.data.args[1], &sa, sizeof sa);
  // Read from the right task only if the call is still pending afterwards (no pid reuse).
  if (!IdValid(listener, n.id)) {
    if (pidfd >= 0) close(pidfd);
    return;
  }
  const bool to_proxy = got == static_cast<long>(sizeof sa) && sa.sin_family == AF_INET &&
                        sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && sa.sin_port == htons(c->port);
  if (!to_proxy) {
    if (pidfd >= 0) close(pidfd);
    return Continue(listener, n.id);
  }
  SocketFacts f;
  const bool known = procfs ? SocketFactsFromProc(n.pid, child_fd, &f) : SocketFactsFromDup(pidfd, n.pid, child_fd, &f);
  if (pidfd >= 0) close(pidfd);
  // What procfs said came from the task still waiting in the call (its id was not reused).
  if (procfs && !IdValid(listener, n.id)) return;
  // Not a TCP socket of ours to replace (or unknown): the kernel decides (Landlock refuses TCP).
  if (!known || !f.tcp) {
    if (f.copy >= 0) close(f.copy);
    return Continue(listener, n.id);
  }
  if (f.state != kTcpClose) {
    if (f.copy >= 0) close(f.copy);
    return Respond(listener, n.id, f.state == kTcpSynSent ? -EALREADY : -EISCONN);
  }
  const bool nonblocking = f.nonblocking;
  int copy = f.copy;
  int sock = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (sock < 0) {
    int e = errno;
    if (copy >= 0) close(copy);
    return Respond(listener, n.id, -e);
  }
  if (copy >= 0) {
    CopyOptions(copy, sock);
    close(copy);
  }
  // Registered strictly before the connect: the proxy cannot accept it earlier.
  const uint64_t ino = SocketInode(sock);
  if (!RegisterPeer(sock, ino, c->port, c)) {
    close(sock);
    return Respond(listener, n.id, -EAGAIN);
  }
  const bool cloexec = ChildFdCloexec(n.pid, child_fd);
  sockaddr_in proxy;
  memset(&proxy, 0, sizeof proxy);
  proxy.sin_family = AF_INET;
  proxy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  proxy.sin_port = htons(c->port);
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
  if (c->pending.size() >= kMaxPending) {
    ForgetPeer(ino);
    close(sock);
    return Respond(listener, n.id, -EAGAIN);
  }
  Pending p;
  p.sock = sock;
  p.id = n.id;
  p.child_fd = child_fd;
  p.ino = ino;
  p.cloexec = cloexec;
  c->pending.push_back(p);
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
  ClosePeerLeftoversLocked();
  auto it = peers.find(ino);
  if (it == peers.end() || it->second.port != proxy_port) return false;
  // Its copy was sent before the connect was made: it is here, or waiting in the pair.
  ReceiveOnHostLocked(it->second.owner);
  ErasePeerLocked(it, true);
  return true;
}

ConnectClass* NewConnectClass(uint16_t proxy_port) noexcept {
  ConnectClass* c = new (std::nothrow) ConnectClass();
  if (c == nullptr) return nullptr;
  c->port = proxy_port;
  c->pending.reserve(kMaxPending);
  // Datagrams: one registration each. A connected pair has no queue-length cap, only the send
  // buffer's (asked for 1 MiB, the system's maximum applies): past it a connect fails with
  // EAGAIN, like past kMaxPeersPerSandbox.
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, c->keep) != 0) {
    delete c;
    return nullptr;
  }
  const int buf = 1 << 20;
  setsockopt(c->keep[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  return c;
}

void HandleConnect(ConnectClass* c, int listener, const SeccompNotif& n) noexcept { Connect(c, listener, n); }

size_t ConnectPollFds(const ConnectClass* c, struct pollfd* out, size_t max) noexcept {
  size_t k = 0;
  for (const Pending& p : c->pending) {
    if (k == max) break;
    out[k++] = {p.sock, POLLOUT, 0};
  }
  return k;
}

void ConnectPollDone(ConnectClass* c, int listener, const struct pollfd* fds, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) {
    if (fds[i].revents == 0) continue;
    for (auto it = c->pending.begin(); it != c->pending.end(); ++it) {
      if (it->sock != fds[i].fd) continue;
      FinishPending(listener, *it, fds[i].revents);
      c->pending.erase(it);
      break;
    }
  }
}

int ConnectSendEnd(const ConnectClass* c) noexcept { return c->keep[0]; }

int ConnectReceiveEnd(const ConnectClass* c) noexcept { return c->keep[1]; }

void ClosePeerLeftovers() noexcept {
  std::lock_guard<std::mutex> g(peers_mu);
  ClosePeerLeftoversLocked();
}

void EndConnectClass(ConnectClass* c) noexcept {
  ForgetPeersOf(c);  // a connection made here and not accepted yet is served no more
  for (const Pending& p : c->pending) close(p.sock);
  close(c->keep[0]);  // the host's end (keep[1]) is closed by the host (supervisor.cc)
  delete c;
}

}  // namespace psb
