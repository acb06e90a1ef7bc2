// Network namespaces of isolated mode: the process-wide empty one that sandboxes without a proxy
// share (the template, joined by stage0), bringing lo up, and the proxy's listener inside a
// sandbox's own namespace. Landlock mode's loopback listener too.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include <mutex>
#include <string>

#include "spawn_internal.h"

namespace psb {
namespace spawn_internal {
namespace {

struct TemplateArgs {
  int sock;
  int parent_sock;  // our copy of the parent's end: closed first, or EOF could never come
  char uid_map[48];
  char gid_map[48];
};

// The template: a process in a new user+network namespace that maps its own uid/gid, says so, and
// waits for the parent to open its namespaces before exiting. CLONE_VM, raw syscalls only.
int NestedUsernsProbeInChild(void*) { ExitInChild(0); }
// Only the template's child uses it, once, while the parent waits for the template's answer.
alignas(16) char g_nested_probe_stack[16 * 1024];

int TemplateInChild(void* argp) {
  TemplateArgs* t = static_cast<TemplateArgs*>(argp);
  Sys(__NR_close, t->parent_sock);
  long r = WriteFileInChild("/proc/self/setgroups", "deny");
  if (r == 0 || r == -ENOENT) r = WriteFileInChild("/proc/self/uid_map", t->uid_map);
  if (r == 0) r = WriteFileInChild("/proc/self/gid_map", t->gid_map);
  // Every sandbox's user namespace is nested in this one. Where only CAP_SYS_ADMIN in the initial
  // user namespace may create user namespaces (Debian's kernel.unprivileged_userns_clone=0), root
  // can make the template but no sandbox could nest in it: refuse the template, and sandboxes
  // make their own network namespace as without one.
  if (r == 0) {
    long p = clone(NestedUsernsProbeInChild, g_nested_probe_stack + sizeof g_nested_probe_stack,
                   CLONE_VM | CLONE_VFORK | CLONE_NEWUSER | SIGCHLD, nullptr);
    if (p < 0) r = -EPERM;
    else Sys(__NR_wait4, p, 0, __WALL, 0);
  }
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

struct NetTemplate {
  std::mutex mu;
  bool tried = false;
  int user_fd = -1;
  int net_fd = -1;
  int sys_fd = -1;  // detached read-only sysfs of the template network namespace, or -1
};
NetTemplate g_net_template;

}  // namespace

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
  Sys(__NR_close, a->fd_channel);
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
  std::lock_guard<std::mutex> lock(g_net_template.mu);
  if (!g_net_template.tried) {
    g_net_template.tried = true;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
      TemplateArgs t;
      t.sock = sv[1];
      t.parent_sock = sv[0];
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
          ssize_t got = RecvFd(sv[0], &ok, &g_net_template.sys_fd, 0);
          if (got == 1 && ok == 'Y') {
            std::string base = "/proc/" + std::to_string(pid) + "/ns/";
            int u = open((base + "user").c_str(), O_RDONLY | O_CLOEXEC);
            int n = open((base + "net").c_str(), O_RDONLY | O_CLOEXEC);
            if (u >= 0 && n >= 0) {
              g_net_template.user_fd = u;
              g_net_template.net_fd = n;
            } else {
              if (u >= 0) close(u);
              if (n >= 0) close(n);
            }
          }
          close(sv[0]);
          sv[0] = -1;
          int st;
          while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {
          }
        }
      }
      if (sv[0] >= 0) close(sv[0]);
      close(sv[1]);
    }
  }
  *user_fd = g_net_template.user_fd;
  *net_fd = g_net_template.net_fd;
  *sys_fd = g_net_template.sys_fd;
  return *user_fd >= 0;
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
