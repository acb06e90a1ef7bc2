// Prepared-ahead sandboxes ("spares", Landlock mode): the whole of a sandbox's setup, made before
// the spawn that uses it, so that the spawn itself costs what an unsandboxed one does.
//
//   PrepareSpare   (any thread that lives as long as the process: init's PDEATHSIG follows the
//                  thread that cloned it) clones init and the command exactly as SpawnLinux does;
//                  the command joins its cgroup, drops every capability, sets no_new_privs,
//                  applies Landlock and seccomp, and parks (ParkInChild) with no stdio and no cwd.
//   GoSpare        (the spawn) checks that every path a Landlock rule was made from still names
//                  the same inode, puts argv, envp, the file and the cwd in place, and sends the
//                  stdio fds; the command places them, enters the cwd and calls execve.
//   DiscardSpare   closes the go socket: the command sees EOF and exits; init tears down.
//
// The plan a spare was made from must be the plan of the spawn that uses it; the caller compares
// them (lib/platform/linux-spare.ts). Everything a rule names by path is re-checked here.
#include <sys/stat.h>
#include <sys/wait.h>

#include <memory>
#include <string>

#include "spawn_internal.h"

namespace psb {

struct LinuxSpare {
  LinuxSpawnPlan plan;
  spawn_internal::ChildArgs args;
  std::vector<char*> argv, envp;
  std::vector<int> keep;
  std::vector<uint64_t> identities;
  spawn_internal::Stack init_stack, cmd_stack;
  pid_t pid = -1;
  int pidfd = -1;
  int err_r = -1;     // errno pipe: the parked note, then EOF at execve or a failure
  int status_r = -1;  // init's report of the command's status
  int ctrl = -1;      // our end of the go socket
  int seccomp_listener_fd = -1;

  ~LinuxSpare() {
    for (int fd : {ctrl, seccomp_listener_fd, err_r}) {
      if (fd >= 0) close(fd);
    }
    if (pidfd >= 0) {
      // The command sees EOF on its go socket and exits; init reports and exits. Reaped here so
      // nothing runs on the stacks when they go back to the pool.
      siginfo_t si;
      while (waitid(static_cast<idtype_t>(P_PIDFD), pidfd, &si, WEXITED) < 0 && errno == EINTR) {
      }
      close(pidfd);
    }
    if (status_r >= 0) close(status_r);
  }
};

using namespace spawn_internal;

namespace {

// A new CLOEXEC copy of fd at or above kSpareMaxStdio (the parked command's stdio arrives below
// it); the original is closed. -1 with errno on failure.
int Lift(int fd) {
  int hi = fcntl(fd, F_DUPFD_CLOEXEC, kSpareMaxStdio);
  int e = errno;
  close(fd);
  errno = e;
  return hi;
}

}  // namespace

Status PrepareSpare(LinuxSpawnPlan&& plan, LinuxSpare** out) noexcept {
  *out = nullptr;
  if (plan.mode != LinuxMode::kLandlock || plan.ctty || plan.pty_cols != 0 || plan.proxy_port != 0 ||
      !plan.landlock || !plan.seccomp) {
    return Status::Error(ErrorCode::kEINVALID_ARGUMENT, "internal: only a Landlock-mode plan without a terminal can be prepared ahead");
  }
  std::unique_ptr<LinuxSpare> s(new LinuxSpare());
  s->plan = std::move(plan);
  LinuxSpawnPlan& p = s->plan;
  FdList owned;
  int errp[2], statp[2], ctrl[2], chan[2] = {-1, -1};
  if (pipe2(errp, O_CLOEXEC) < 0) return Status::Sys(ErrorCode::kESPAWN, "pipe2(2) failed", "pipe2", errno);
  s->err_r = errp[0];
  int err_w = owned.Add(Lift(errp[1]));
  if (pipe2(statp, O_CLOEXEC) < 0) return Status::Sys(ErrorCode::kESPAWN, "pipe2(2) failed", "pipe2", errno);
  s->status_r = statp[0];
  int status_w = owned.Add(Lift(statp[1]));
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctrl) < 0) {
    return Status::Sys(ErrorCode::kESPAWN, "socketpair(2) failed", "socketpair", errno);
  }
  s->ctrl = ctrl[0];
  int ctrl_w = owned.Add(Lift(ctrl[1]));
  int chan_r = -1;
  if (p.seccomp_listener) {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, chan) < 0) {
      return Status::Sys(ErrorCode::kESPAWN, "socketpair(2) failed", "socketpair", errno);
    }
    chan_r = owned.Add(chan[0]);
    chan[1] = owned.Add(Lift(chan[1]));
  }
  if (err_w < 0 || status_w < 0 || ctrl_w < 0 || (p.seccomp_listener && chan[1] < 0)) {
    return Status::Sys(ErrorCode::kESPAWN, "fcntl(2) F_DUPFD failed", "fcntl", errno);
  }

  p.landlock_plan.Finalize();
  s->identities.assign(2 * p.landlock_plan.c_paths.size(), 0);
  p.landlock_plan.identities = s->identities.data();
  s->argv.assign(1, nullptr);
  s->envp.assign(1, nullptr);
  ChildArgs& a = s->args;
  memset(&a, 0, sizeof a);
  a.tmpl_user_fd = a.tmpl_net_fd = a.tmpl_sys_fd = -1;
  a.plan = &p;
  a.argv = s->argv.data();
  a.envp = s->envp.data();
  a.nstdio = 0;  // init has none to close; the command's come with the go
  a.err_fd = err_w;
  a.status_fd = status_w;
  a.fd_channel = chan[1];
  a.pty_slave = -1;
  a.parent_pid = getpid();
  a.fprog.len = static_cast<unsigned short>(p.seccomp_filter.size());
  a.fprog.filter = p.seccomp_filter.data();
  for (size_t i = 0; i < kMaxSlots; ++i) a.slots[i] = -1;
  a.shm_data = p.shm_data.c_str();
  a.spare_ctrl = ctrl_w;
  s->keep = {err_w, status_w, ctrl_w};
  if (chan[1] >= 0) s->keep.push_back(chan[1]);
  for (int fd : p.cgroup_fds) s->keep.push_back(fd);
  std::sort(s->keep.begin(), s->keep.end());
  s->keep.erase(std::unique(s->keep.begin(), s->keep.end()), s->keep.end());
  a.keep_fds = s->keep.data();
  a.nkeep = static_cast<int>(s->keep.size());
  if (!s->init_stack.Allocate(kInitStackSize) || !s->cmd_stack.Allocate(128 * 1024)) {
    return Status::Sys(ErrorCode::kESPAWN, "mmap(2) of a child stack failed", "mmap", errno);
  }
  a.cmd_stack_top = s->cmd_stack.top();

  int flags = CLONE_PIDFD | CLONE_VM | SIGCHLD;
  void* tls = PrepareInitTls(s->init_stack.base);
  if (tls != nullptr) flags |= CLONE_SETTLS;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  pid_t pid = clone(InitInChild, s->init_stack.top(), flags, &a, &pidfd, tls, nullptr);
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    return Status::Sys(ErrorCode::kESPAWN, std::string("clone(2) failed: ") + strerrorname_np(clone_errno), "clone", clone_errno);
  }
  s->pid = pid;
  s->pidfd = pidfd;
  // From here the destructor reaps: every exit below leaves no process behind.
  for (int fd : {err_w, status_w, ctrl_w, chan[1]}) {
    if (fd < 0) continue;
    owned.Release(fd);
    close(fd);
  }

  ChildReport rep;
  for (;;) {
    ssize_t n = read(s->err_r, &rep, sizeof rep);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof rep)) {
      KillAndReap(s->pidfd);
      return Status::Error(ErrorCode::kESPAWN, "a sandbox prepared ahead ended before it was ready");
    }
    if (rep.stage == kNote && rep.index == kNoteParked) break;
    if (rep.stage == kNote) continue;
    Status failure = ReportToStatus(p, rep);
    KillAndReap(s->pidfd);
    return failure;
  }
  if (p.seccomp_listener) {
    char byte;
    if (RecvFd(chan_r, &byte, &s->seccomp_listener_fd, MSG_DONTWAIT) != 1 || s->seccomp_listener_fd < 0) {
      KillAndReap(s->pidfd);
      return Status::Error(ErrorCode::kESECCOMP_INSTALL, "the sandboxed command did not hand over its seccomp listener");
    }
  }
  *out = s.release();
  return Status::Ok();
}

bool SpareStillValid(const LinuxSpare* s) noexcept {
  const LandlockPlan& ll = s->plan.landlock_plan;
  for (size_t i = 0; i < ll.c_paths.size(); ++i) {
    struct stat st;
    // As the rule's open did: the path followed, symlinks included.
    bool absent = false;
    if (stat(ll.c_paths[i], &st) < 0) {
      if (errno != ENOENT && errno != ENOTDIR && errno != EACCES) return false;
      absent = true;
    }
    uint64_t dev = absent ? 0 : st.st_dev, ino = absent ? 0 : st.st_ino;
    if (s->identities[2 * i] != dev || s->identities[2 * i + 1] != ino) return false;
  }
  return true;
}

Status GoSpare(LinuxSpare* spare, SpareGo& go, LinuxSpawnResult* out, bool* used) noexcept {
  std::unique_ptr<LinuxSpare> s(spare);
  *used = false;
  const int nstdio = static_cast<int>(go.stdio.size());
  if (nstdio > kSpareMaxStdio || !SpareStillValid(s.get())) return Status::Ok();
  LinuxSpawnPlan& p = s->plan;
  p.file = std::move(go.file);
  p.argv = std::move(go.argv);
  p.envp = std::move(go.envp);
  p.cwd = std::move(go.cwd);
  if (p.argv.empty()) return Status::Error(ErrorCode::kEINVALID_ARGUMENT, "internal: argv is empty");
  s->argv.clear();
  for (std::string& a : p.argv) s->argv.push_back(&a[0]);
  s->argv.push_back(nullptr);
  s->envp.clear();
  for (std::string& e : p.envp) s->envp.push_back(&e[0]);
  s->envp.push_back(nullptr);
  s->args.argv = s->argv.data();
  s->args.envp = s->envp.data();
  s->args.spare_umask = go.umask;

  FdList owned;
  int fds[kSpareMaxStdio];
  for (int i = 0; i < nstdio; ++i) {
    fds[i] = go.stdio[i];
    if (fds[i] < 0) {
      fds[i] = owned.Add(open("/dev/null", O_RDWR | O_CLOEXEC));
      if (fds[i] < 0) return Status::Sys(ErrorCode::kESPAWN, "open(2) /dev/null failed", "open", errno);
    }
  }
  *used = true;
  char byte = 'G';
  char ctrl[CMSG_SPACE(sizeof(int) * kSpareMaxStdio)];
  memset(ctrl, 0, sizeof ctrl);
  struct iovec iov = {&byte, 1};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nstdio > 0) {
    msg.msg_control = ctrl;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nstdio);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nstdio);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nstdio);
  }
  ssize_t sent;
  do {
    sent = sendmsg(s->ctrl, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != 1) {
    int e = errno;
    KillAndReap(s->pidfd);
    return Status::Sys(ErrorCode::kESPAWN, "the sandbox prepared ahead did not take its go", "sendmsg", e);
  }
  // As SpawnLinux: EOF once the command has exec'd, or its failure.
  ChildReport rep;
  Status failure;
  for (;;) {
    ssize_t n = read(s->err_r, &rep, sizeof rep);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof rep)) {
      if (rep.stage == kNote) continue;
      failure = ReportToStatus(p, rep);
    }
    break;
  }
  if (!failure.ok()) {
    KillAndReap(s->pidfd);
    return failure;
  }
  fcntl(s->status_r, F_SETFL, O_NONBLOCK);
  out->pid = s->pid;
  out->pidfd = s->pidfd;
  out->status_fd = s->status_r;
  out->mode = p.mode;
  out->seccomp_listener_fd = s->seccomp_listener_fd;
  out->init_stack = s->init_stack.base;
  out->init_stack_size = s->init_stack.size;
  s->init_stack.base = MAP_FAILED;  // init runs on it until it is reaped
  s->pidfd = s->status_r = s->seccomp_listener_fd = -1;
  return Status::Ok();
}

void DiscardSpare(LinuxSpare* s) noexcept { delete s; }

}  // namespace psb
