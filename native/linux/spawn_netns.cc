// Network namespaces of isolated mode: the process-wide empty one that sandboxes without a proxy
// share (the template, joined by stage0), the single-use ones made ahead for sandboxes with a
// proxy (the pool), bringing lo up, and the proxy's listener inside a sandbox's own namespace.
// Landlock mode's loopback listener too.
// Tests: test/linux/threats-net.test.ts, test/linux/fast-path.test.ts (shared empty namespace),
// test/linux/prepare-network-e2e.test.ts, test/linux/proxy-peers.test.ts,
// test/network/enforced.test.ts.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "spawn_internal.h"

namespace psb {
namespace spawn_internal {
namespace {

struct TemplateArgs {
  int sock;
  bool loopback;    // bring lo up (a proxy sandbox's namespace: its listener lives on lo)
  char uid_map[48];
  char gid_map[48];
  // The nested-namespace probe's stack: templates are made on several threads at once (the pool).
  alignas(16) char probe_stack[16 * 1024];
};

// The template: a process in a new user+network namespace that maps its own uid/gid, says so, and
// waits for the parent to open its namespaces before exiting. CLONE_VM, raw syscalls only.
int NestedUsernsProbeInChild(void*) { ExitInChild(0); }

int TemplateInChild(void* argp) {
  TemplateArgs* t = static_cast<TemplateArgs*>(argp);
  // We start with a copy of the host's whole fd table, and may live until the parent lets go:
  // keep only our socket. A copy of the host's stdout would hold a reader's EOF back, and a copy
  // of another template's socket (the pool makes them on several threads at once) would keep
  // that template waiting for EOF while it holds ours: both would live for ever. The parent's
  // end of our own socket goes too, or EOF could never come.
  if (t->sock > 0) Sys(__NR_close_range, 0, t->sock - 1, 0);
  Sys(__NR_close_range, t->sock + 1, ~0U, 0);
  long r = WriteFileInChild("/proc/self/setgroups", "deny");
  if (r == 0 || r == -ENOENT) r = WriteFileInChild("/proc/self/uid_map", t->uid_map);
  if (r == 0) r = WriteFileInChild("/proc/self/gid_map", t->gid_map);
  // Every sandbox's user namespace is nested in this one. Where only CAP_SYS_ADMIN in the initial
  // user namespace may create user namespaces (Debian's kernel.unprivileged_userns_clone=0), root
  // can make the template but no sandbox could nest in it: refuse the template, and sandboxes
  // make their own network namespace as without one.
  if (r == 0) {
    long p = clone(NestedUsernsProbeInChild, t->probe_stack + sizeof t->probe_stack,
                   CLONE_VM | CLONE_VFORK | CLONE_NEWUSER | SIGCHLD, nullptr);
    if (p < 0) r = -EPERM;
    else Sys(__NR_wait4, p, 0, __WALL, 0);
  }
  // Only the namespace's owner may: a sandbox's init holds capabilities over its nested user
  // namespace, not over this network namespace.
  if (r == 0 && t->loopback) r = LoopbackUpInChild();
  // A read-only sysfs of the template's network namespace, as a detached mount: each sandbox
  // clones it onto /sys (only a holder of CAP_SYS_ADMIN over this network namespace may mount
  // one, and a sandbox's init holds it only over its own nested user namespace).
  long mfd = -1;
  if (r == 0) {
    long fsfd = Sys(__NR_fsopen, "sysfs", 1 /* FSOPEN_CLOEXEC */);
    if (fsfd >= 0) {
      if (Sys(__NR_fsconfig, fsfd, 6 /* FSCONFIG_CMD_CREATE */, 0, 0, 0) == 0) {
        mfd = Sys(__NR_fsmount, fsfd, 1 /* FSMOUNT_CLOEXEC */, 0x1 | 0x2 | 0x4 | 0x8 /* RDONLY NOSUID NODEV NOEXEC */);
      }
      Sys(__NR_close, fsfd);
    }
  }
  char ok = r == 0 ? 'Y' : 'N';
  SendFdInChild(t->sock, static_cast<int>(mfd), ok);
  Sys(__NR_read, t->sock, &ok, 1);  // returns at EOF: the parent is done with us
  ExitInChild(0);
}

// The process-wide template of sandboxes without a proxy: made on first use, kept.
struct SharedTemplate {
  std::mutex mu;
  bool tried = false;
  NetTemplate fds;
};
// Never destroyed (as the pool below): static destructors run at exit while other threads may
// still use them.
SharedTemplate& g_shared_template = *new SharedTemplate;

// Sandboxes with a proxy each need a network namespace of their own (their listener is the only
// thing on its lo). Making one is most of such a spawn's cost (~0.7-1 ms: the namespace, lo, the
// sysfs), so a few are made ahead, on threads of their own, and each is used exactly once: a
// spawn takes one and the pool makes the next. Nothing is shared between two sandboxes: a
// template is just a namespace made a moment earlier.
constexpr size_t kProxyPoolSize = 2;
struct ProxyPool {
  std::mutex mu;
  std::vector<NetTemplate> ready;
  size_t filling = 0;
  bool failed = false;  // this host cannot make templates: spawns make their own namespaces
};
// Never destroyed: a refill thread may still be running while the process exits, and static
// destructors would free what it is about to use.
ProxyPool& g_proxy_pool = *new ProxyPool;

void FillProxyPool() {
  NetTemplate t;
  bool ok = MakeNetTemplate(true, &t);
  std::lock_guard<std::mutex> lock(g_proxy_pool.mu);
  --g_proxy_pool.filling;
  if (ok) g_proxy_pool.ready.push_back(t);
  else g_proxy_pool.failed = true;
}

}  // namespace

// Makes a template: a process in a new user+network namespace (lo up when `loopback`) whose
// namespaces we open and keep (it exits once we have them). False when this host cannot.
bool MakeNetTemplate(bool loopback, NetTemplate* out) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return false;
  TemplateArgs t;
  t.sock = sv[1];
  t.loopback = loopback;
  snprintf(t.uid_map, sizeof t.uid_map, "%u %u 1\n", geteuid(), geteuid());
  snprintf(t.gid_map, sizeof t.gid_map, "%u %u 1\n", getegid(), getegid());
  Stack stack;
  if (stack.Allocate(64 * 1024)) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(TemplateInChild, stack.top(), CLONE_VM | CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS | SIGCHLD, &t);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid > 0) {
      char ok = 0;
      int sys_fd = -1;
      ssize_t got = RecvFd(sv[0], &ok, &sys_fd, 0);
      if (got == 1 && ok == 'Y') {
        std::string base = "/proc/" + std::to_string(pid) + "/ns/";
        int u = open((base + "user").c_str(), O_RDONLY | O_CLOEXEC);
        int n = open((base + "net").c_str(), O_RDONLY | O_CLOEXEC);
        if (u >= 0 && n >= 0) {
          out->user_fd = u;
          out->net_fd = n;
          out->sys_fd = sys_fd;
          sys_fd = -1;
        } else {
          if (u >= 0) close(u);
          if (n >= 0) close(n);
        }
      }
      if (sys_fd >= 0) close(sys_fd);
      close(sv[0]);
      sv[0] = -1;
      int st;
      while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {
      }
    }
  }
  if (sv[0] >= 0) close(sv[0]);
  close(sv[1]);
  return out->user_fd >= 0;
}

long LoopbackUpInChild() {
  long s = Sys(__NR_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return s;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  memcpy(ifr.ifr_name, "lo", 3);
  ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
  long r = Sys(__NR_ioctl, s, SIOCSIFFLAGS, &ifr);
  Sys(__NR_close, s);
  return r;
}

// The proxy's listener lives inside the command's network namespace, so 127.0.0.1:<port> there
// reaches the parent's proxy and nothing else. init only creates it and passes it out.
long CreateProxyListenerInChild(ChildArgs* a, uint16_t port) {
  long s = Sys(__NR_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return s;
  int one = 1;
  Sys(__NR_setsockopt, s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  long r = Sys(__NR_bind, s, &addr, sizeof addr);
  if (r == 0) r = Sys(__NR_listen, s, 511);
  if (r == 0) r = SendFdInChild(a->fd_channel, static_cast<int>(s), 'L');
  Sys(__NR_close, s);
  // The command sends its seccomp listener on the same channel later (isolated mode's
  // placeholders, supervise_metadata.cc): init closes it once the command has exec'd.
  if (!a->plan->seccomp_listener) Sys(__NR_close, a->fd_channel);
  return r < 0 ? r : 0;
}

// stage0 (network: none): runs with CLONE_VM|CLONE_VFORK|CLONE_FILES, so the parent sleeps until
// it exits and the pidfd it asks for lands in the parent's fd table. It joins the process-wide
// template user namespace (where it holds every capability, as the namespace's owner) and the
// template's empty network namespace, then clones init as the parent's child (CLONE_PARENT) in a
// fresh user namespace nested in the template. init inherits the empty network namespace: no
// per-sandbox network namespace has to be created and torn down, which is most of the cost of a
// sandbox. Sandboxes can share it safely: no interface is up and seccomp refuses socket().
int Stage0InChild(void* argp) {
  ChildArgs* a = static_cast<ChildArgs*>(argp);
  long r = Sys(__NR_setns, a->tmpl_user_fd, CLONE_NEWUSER);
  if (r < 0) FailInChild(a, kStageJoinNamespace, 0, r);
  r = Sys(__NR_setns, a->tmpl_net_fd, CLONE_NEWNET);
  if (r < 0) FailInChild(a, kStageJoinNamespace, 1, r);
  pid_t pid = clone(InitInChild, a->init_stack_top, a->init_flags, a, &a->init_pidfd, a->init_tls, nullptr);
  // glibc's wrapper reports through errno; reading it is harmless (the parent thread sleeps).
  a->init_pid = pid < 0 ? -errno : pid;
  ExitInChild(0);
}

// Returns true with the template's namespace fds (created on first use, kept for the process's
// lifetime). False when this host cannot make one; callers then create a network namespace per
// sandbox as usual.
bool GetNetTemplate(int* user_fd, int* net_fd, int* sys_fd) {
  std::lock_guard<std::mutex> lock(g_shared_template.mu);
  if (!g_shared_template.tried) {
    g_shared_template.tried = true;
    MakeNetTemplate(false, &g_shared_template.fds);
  }
  *user_fd = g_shared_template.fds.user_fd;
  *net_fd = g_shared_template.fds.net_fd;
  *sys_fd = g_shared_template.fds.sys_fd;
  return *user_fd >= 0;
}

bool TakeProxyTemplate(NetTemplate* out) {
  std::lock_guard<std::mutex> lock(g_proxy_pool.mu);
  bool got = false;
  if (!g_proxy_pool.ready.empty()) {
    *out = g_proxy_pool.ready.back();
    g_proxy_pool.ready.pop_back();
    got = true;
  }
  while (!g_proxy_pool.failed && g_proxy_pool.ready.size() + g_proxy_pool.filling < kProxyPoolSize) {
    ++g_proxy_pool.filling;
    try {
      std::thread(FillProxyPool).detach();
    } catch (...) {
      --g_proxy_pool.filling;  // no thread now: this spawn and the next make their own
      break;
    }
  }
  return got;
}

void ReleaseTemplate(NetTemplate* t) {
  for (int* fd : {&t->user_fd, &t->net_fd, &t->sys_fd}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace spawn_internal

int ListenLoopback(uint16_t* port) noexcept {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || listen(s, 511) < 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    int e = errno;
    close(s);
    return -e;
  }
  *port = ntohs(addr.sin_port);
  return s;
}

}  // namespace psb
