#include "spawn_linux.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <mutex>
#include <string>
#include <utility>

#include "spawn_internal.h"

// Parent side of the Linux spawner: prepares everything the child needs, clones (the stages are
// described in spawn_internal.h), reads the errno pipe, and collects the hand-overs.
// Tests: test/contract/spawn.test.ts, test/contract/spawn-sandboxed.test.ts,
// test/contract/spawn-landlock.test.ts, test/linux/modes.test.ts, test/linux/signals.test.ts (pid
// namespace).
namespace psb {
namespace spawn_internal {

ssize_t RecvFd(int sock, char* byte, int* fd, int flags) {
  int count = 0;
  long n = RecvFdsInChild(sock, byte, fd, 1, &count, flags);
  if (count == 0) *fd = -1;
  if (n < 0) errno = static_cast<int>(-n);
  return n < 0 ? -1 : n;
}

namespace {

// At most this many unused stacks are kept (per size: 64K, 128K, 256K), enough for the bursts of
// concurrent spawns a host makes; JS threads of Workers spawn too, hence the lock.
constexpr size_t kPooledStacks = 8;
// Never destroyed: the pool's refill threads (spawn_netns.cc) take stacks too, and may still be
// running while the process exits and static destructors run.
std::mutex& g_stack_mu = *new std::mutex;
std::vector<std::pair<void*, size_t>>& g_stacks = *new std::vector<std::pair<void*, size_t>>;

}  // namespace

void* TakeStack(size_t size) {
  {
    std::lock_guard<std::mutex> lock(g_stack_mu);
    for (size_t i = g_stacks.size(); i-- > 0;) {
      if (g_stacks[i].second != size) continue;
      void* base = g_stacks[i].first;
      g_stacks.erase(g_stacks.begin() + static_cast<long>(i));
      return base;
    }
  }
  return mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
}

void GiveStack(void* base, size_t size) {
  {
    std::lock_guard<std::mutex> lock(g_stack_mu);
    size_t same = 0;
    for (const auto& s : g_stacks) same += s.second == size;
    if (same < kPooledStacks) {
      g_stacks.emplace_back(base, size);
      return;
    }
  }
  munmap(base, size);
}

namespace {
constexpr size_t kInitStackSize = 256 * 1024;
constexpr size_t kInitTlsOffset = 32 * 1024;  // TLS variables live below the TCB (x86_64)
}  // namespace

// init shares our address space but must not depend on the TLS block of the thread that spawned
// it (a worker thread may exit while the sandbox lives). On x86_64 it gets its own TCB at the
// bottom of its stack mapping: a copy of ours (stack-protector canary included) with the self
// pointers moved. Elsewhere it keeps the caller's thread pointer (aarch64 keeps the canary in a
// global, not in the TCB).
void* PrepareInitTls(void* stack_base) {
#if defined(__x86_64__)
  uintptr_t* fake = reinterpret_cast<uintptr_t*>(static_cast<char*>(stack_base) + kInitTlsOffset);
  uintptr_t* real;
  __asm__("mov %%fs:0, %0" : "=r"(real));
  memcpy(fake, real, 64);
  fake[0] = reinterpret_cast<uintptr_t>(fake);  // tcb
  fake[2] = reinterpret_cast<uintptr_t>(fake);  // self
  return fake;
#else
  (void)stack_base;
  return nullptr;
#endif
}

namespace {

const char* StageName(int32_t stage) {
  switch (stage) {
    case kStagePdeath: return "prctl(PR_SET_PDEATHSIG)";
    case kStageUidMap: return "writing uid_map/gid_map";
    case kStageMount: return "mount";
    case kStageLoopback: return "bringing up lo";
    case kStageCommandClone: return "clone(2) of the command";
    case kStageSetsid: return "setsid(2)";
    case kStageStdio: return "dup3(2) of stdio";
    case kStageCloseFds: return "close_range(2)";
    case kStageChdir: return "chdir(2)";
    case kStageRlimit: return "prlimit(2)";
    case kStageCaps: return "dropping capabilities";
    case kStageNoNewPrivs: return "prctl(PR_SET_NO_NEW_PRIVS)";
    case kStageLandlock: return "landlock_restrict_self(2)";
    case kStageSeccomp: return "seccomp(2)";
    case kStageExec: return "execve(2)";
    case kStageProxyListener: return "creating the proxy listener";
    case kStageJoinNamespace: return "setns(2) into the shared network namespace";
    case kStageOomScore: return "writing /proc/self/oom_score_adj";
    case kStageCgroup: return "joining the sandbox's cgroup";
    case kStageMaskFs: return "preparing init's mask files";
    case kStageQuota: return "lowering the user namespace's inotify limits";
    case kStageTrace: return "tracing the command for the process cap (ptrace)";
    default: return "sandbox setup";
  }
}

const char* MountKindName(MountOpKind k) {
  switch (k) {
    case MountOpKind::kTmpClone: return "clone tree";
    case MountOpKind::kTmpfs: return "tmpfs";
    case MountOpKind::kMkdir: return "mkdir";
    case MountOpKind::kMkfile: return "create";
    case MountOpKind::kMoveSlot: return "move tree";
    case MountOpKind::kReadOnlyAll: return "read-only /";
    case MountOpKind::kBindRw: return "writable bind";
    case MountOpKind::kBindRo: return "read-only bind";
    case MountOpKind::kPin: return "pin";
    case MountOpKind::kGhostDir: return "protect missing dir";
    case MountOpKind::kGhostFile: return "protect missing file";
    case MountOpKind::kMaskDir: return "mask dir";
    case MountOpKind::kMaskFile: return "mask file";
    case MountOpKind::kProc: return "proc";
    case MountOpKind::kDev: return "dev";
    case MountOpKind::kSetReadOnly: return "read-only";
    case MountOpKind::kClearReadOnly: return "writable";
    case MountOpKind::kSys: return "sysfs";
    case MountOpKind::kOverlay: return "cache overlay";
    case MountOpKind::kViewFile: return "file view";
    case MountOpKind::kStageOverlay: return "staging overlay";
  }
  return "mount";
}

}  // namespace

Status ReportToStatus(const LinuxSpawnPlan& plan, const ChildReport& r) {
  int err = r.err;
  std::string errname = strerrorname_np(err) ? strerrorname_np(err) : std::to_string(err);
  if (r.stage == kStageExec) {
    if (err == ENOENT) {
      return Status::Sys(ErrorCode::kENOT_FOUND, "command not found: " + plan.file, "execve", err);
    }
    if (err == EACCES || err == ENOEXEC || err == EPERM || err == EISDIR) {
      return Status::Sys(ErrorCode::kENOT_EXECUTABLE, "not executable: " + plan.file + " (" + errname + ")",
                         "execve", err);
    }
    return Status::Sys(ErrorCode::kESPAWN, "execve(2) failed for " + plan.file + ": " + errname, "execve", err);
  }
  std::string what = StageName(r.stage);
  if (r.stage == kStageStdio && r.index == 3) what = "ioctl(TIOCSCTTY) on the pty slave";
  if (r.stage == kStageStdio && r.index == 4) what = "opening a pty in the sandbox's devpts";
  ErrorCode code = ErrorCode::kESPAWN;
  std::string hint;
  switch (r.stage) {
    case kStageUidMap:
      code = ErrorCode::kENAMESPACE_SETUP;
      hint = "; user namespaces may be restricted (kernel.apparmor_restrict_unprivileged_userns); "
             "use mode 'landlock' with degraded: true";
      break;
    case kStageMount:
      code = ErrorCode::kEMOUNT_SETUP;
      if (r.index >= 0 && static_cast<size_t>(r.index) < plan.mounts.size()) {
        const MountOp& op = plan.mounts[r.index];
        what = std::string("mount step '") + MountKindName(op.kind) + "' on " + op.path;
        if (op.kind == MountOpKind::kProc && err == EPERM) {
          hint = " (the kernel refuses a fresh procfs here: the host's /proc has mounts over parts of it, as a rootless "
                 "container's masked paths are; use mode 'landlock' or 'auto', which picks it here)";
        }
      } else {
        what = "making / private";
      }
      break;
    case kStageChdir:
      code = ErrorCode::kEINVALID_ARGUMENT;
      what = "chdir(2) to " + plan.cwd + " inside the sandbox";
      hint = "; is the cwd readable under the policy?";
      break;
    case kStageCaps:
    case kStageNoNewPrivs:
      code = ErrorCode::kECAPS_DROP;
      break;
    case kStageLandlock:
      code = ErrorCode::kELANDLOCK_UNSUPPORTED;
      // ApplyLandlockInChild opens writable roots without following links: ELOOP there means
      // one became (or passes through) a symlink since it was planned.
      if (err == ELOOP) {
        code = ErrorCode::kEMOUNT_SETUP;
        what = "opening a writable root for its Landlock rule";
        hint = " (a writable root, or a directory on its way, became a symbolic link after the policy was resolved; nothing ran)";
      }
      break;
    case kStageSeccomp:
      code = ErrorCode::kESECCOMP_INSTALL;
      hint = "; kernel lacks CONFIG_SECCOMP_FILTER?";
      break;
    default:
      break;
  }
  return Status::Sys(code, what + " failed: " + errname + hint, StageName(r.stage), err);
}

// A sandbox that failed after it was cloned: killed (the whole tree goes with init) and reaped, so
// a failed spawn leaves no process behind.
void KillAndReap(int pidfd) {
  Sys(__NR_pidfd_send_signal, pidfd, SIGKILL, 0, 0);
  siginfo_t si;
  while (waitid(static_cast<idtype_t>(P_PIDFD), pidfd, &si, WEXITED) < 0 && errno == EINTR) {
  }
}

namespace {

// Isolated, prepared ahead: the steps that make placeholders on the host (a missing protected
// path, a missing deny-read path and its mask) wait for the go, so that a sandbox waiting to be
// used leaves nothing in the workspace. They depend on no later step (each makes its own name
// and binds or masks only it), so running them last builds the same tree.
void PlanDeferredSteps(const LinuxSpawnPlan& plan, Launch* L) {
  const size_t n = plan.mounts.size();
  L->deferred.assign(n, 0);
  L->check_ids.assign(n, 0);
  L->mount_ids.assign(2 * n, 0);
  std::vector<const std::string*> ghosts;
  for (size_t i = 0; i < n; ++i) {
    const MountOp& op = plan.mounts[i];
    switch (op.kind) {
      case MountOpKind::kGhostDir:
      case MountOpKind::kGhostFile:
        L->deferred[i] = 1;
        ghosts.push_back(&op.path);
        break;
      case MountOpKind::kMaskDir:
        if (std::any_of(ghosts.begin(), ghosts.end(), [&](const std::string* g) { return *g == op.path; })) {
          L->deferred[i] = 1;
          break;
        }
        L->check_ids[i] = 1;
        break;
      // The steps that bind or mask a host path: what it names is checked again at the go.
      case MountOpKind::kTmpClone:
      case MountOpKind::kBindRw:
      case MountOpKind::kBindRo:
      case MountOpKind::kPin:
      case MountOpKind::kMaskFile:
      case MountOpKind::kViewFile:
        L->check_ids[i] = 1;
        break;
      default:
        break;
    }
  }
}

}  // namespace

Status LaunchLinux(LinuxSpawnPlan& plan, Launch* L, LinuxSpawnResult* out) noexcept {
  const bool isolated = plan.mode == LinuxMode::kIsolated;
  // Both sandbox modes run the command under a small init (see LaunchAndWaitInChild); a plain
  // launch is a single vfork-style child.
  const bool uses_init = plan.mode != LinuxMode::kPlain;
  if (plan.tmp_slots > static_cast<int>(kMaxSlots)) {
    return Status::Error(ErrorCode::kEINVALID_ARGUMENT, "too many paths under /tmp to expose");
  }
  FdList owned;
  const int nstdio = static_cast<int>(plan.stdio.size());
  // Every fd the child needs is moved at or above nstdio so that placing stdio cannot clobber it
  // (a spare's stdio arrives with its go: up to kSpareMaxStdio fds).
  const int floor = L->spare ? kSpareMaxStdio : nstdio;
  std::vector<int>& staged = L->staged;
  staged.assign(nstdio, -1);
  for (int i = 0; i < nstdio; ++i) {
    int src = plan.stdio[i];
    int tmp = -1;
    if (src < 0) {
      tmp = open("/dev/null", O_RDWR | O_CLOEXEC);
      if (tmp < 0) return Status::Sys(ErrorCode::kESPAWN, "open(2) /dev/null failed", "open", errno);
      owned.Add(tmp);
      src = tmp;
    }
    staged[i] = owned.Add(fcntl(src, F_DUPFD_CLOEXEC, nstdio));
    if (staged[i] < 0) {
      return Status::Sys(ErrorCode::kEINVALID_ARGUMENT,
                         "stdio fd " + std::to_string(plan.stdio[i]) + " is not open", "fcntl", errno);
    }
  }
  // An fd the child keeps, moved to `floor` or above (the original is closed; the copy is owned).
  auto lift = [&](int* fd) -> bool {
    int hi = fcntl(*fd, F_DUPFD_CLOEXEC, floor);
    int e = errno;
    owned.Release(*fd);
    close(*fd);
    *fd = owned.Add(hi);
    errno = e;
    return hi >= 0;
  };
  // A pipe or socket pair whose second end goes to the child.
  auto pair = [&](int fds[2], bool socket) -> bool {
    int r = socket ? socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) : pipe2(fds, O_CLOEXEC);
    if (r < 0) return false;
    owned.Add(fds[0]);
    return lift(&fds[1]);
  };
  int errp[2], statp[2] = {-1, -1}, chan[2] = {-1, -1}, ctrl[2] = {-1, -1}, relay[2] = {-1, -1};
  if (!pair(errp, false)) return Status::Sys(ErrorCode::kESPAWN, "pipe2(2) failed", "pipe2", errno);
  const int err_w = errp[1];
  if (uses_init && !pair(statp, false)) return Status::Sys(ErrorCode::kESPAWN, "pipe2(2) failed", "pipe2", errno);
  if ((isolated && (plan.proxy_port != 0 || plan.pty_cols != 0)) || (uses_init && plan.seccomp_listener)) {
    if (!pair(chan, true)) return Status::Sys(ErrorCode::kESPAWN, "socketpair(2) failed", "socketpair", errno);
  }
  if (L->spare) {
    // The go socket; isolated also a relay from init to the command, both of whose ends are the
    // sandbox's (init passes the go on once the deferred steps are done).
    if (!pair(ctrl, true) || (isolated && (!pair(relay, true) || !lift(&relay[0])))) {
      return Status::Sys(ErrorCode::kESPAWN, "socketpair(2) failed", "socketpair", errno);
    }
  }

  std::vector<char*>& argv = L->argv;
  std::vector<char*>& envp = L->envp;
  for (std::string& s : plan.argv) argv.push_back(&s[0]);
  argv.push_back(nullptr);
  for (std::string& s : plan.envp) envp.push_back(&s[0]);
  envp.push_back(nullptr);
  for (const MountOp& op : plan.mounts) {
    L->mpaths.push_back(op.path.c_str());
    L->mdata.push_back(op.data.c_str());
  }
  plan.landlock_plan.Finalize();
  if (L->spare) {
    L->landlock_ids.assign(2 * plan.landlock_plan.c_paths.size(), 0);
    plan.landlock_plan.identities = L->landlock_ids.data();
    if (isolated) PlanDeferredSteps(plan, L);
  }

  ChildArgs& args = L->args;
  memset(&args, 0, sizeof args);
  args.tmpl_user_fd = args.tmpl_net_fd = args.tmpl_sys_fd = -1;
  args.spare_ctrl = args.spare_init_ctrl = args.spare_relay = -1;
  if (L->spare) {
    args.spare_ctrl = isolated ? relay[1] : ctrl[1];
    if (isolated) {
      args.spare_init_ctrl = ctrl[1];
      args.spare_relay = relay[0];
      args.deferred = L->deferred.data();
      args.check_ids = L->check_ids.data();
      args.mount_ids = L->mount_ids.data();
    }
  }
  args.plan = &plan;
  args.argv = argv.data();
  args.envp = envp.data();
  args.stdio_fds = staged.data();
  args.nstdio = nstdio;
  args.err_fd = err_w;
  args.status_fd = statp[1];
  args.fd_channel = chan[1];
  args.pty_slave = -1;
  args.parent_pid = getpid();
  args.fprog.len = static_cast<unsigned short>(plan.seccomp_filter.size());
  args.fprog.filter = plan.seccomp_filter.data();
  args.mount_paths = L->mpaths.data();
  args.mount_data = L->mdata.data();
  for (size_t s = 0; s < kMaxSlots; ++s) args.slots[s] = -1;
  args.shm_data = plan.shm_data.c_str();
  std::vector<int>& mask_fds = L->mask_fds;
  if (isolated) {
    size_t n = 0;
    bool proc = false;
    for (const MountOp& op : plan.mounts) {
      if (op.kind == MountOpKind::kMaskFile) ++n;
      if (op.kind == MountOpKind::kProc) proc = true;
    }
    args.ndeny = static_cast<int>(n);
    args.hide_init = plan.landlock;
    if (proc && !args.hide_init) n += kProcMaskCount;
    mask_fds.assign(n, -1);
  }
  args.mask_fds = mask_fds.data();
  args.nmasks = static_cast<int>(mask_fds.size());
  snprintf(args.uid_map, sizeof args.uid_map, "%u %u 1\n", geteuid(), geteuid());
  snprintf(args.gid_map, sizeof args.gid_map, "%u %u 1\n", getegid(), getegid());
  std::vector<int>& keep = L->keep;
  keep = staged;
  for (int fd : {err_w, statp[1], chan[1], ctrl[1], relay[0], relay[1]}) {
    if (fd >= 0) keep.push_back(fd);
  }
  for (int fd : plan.cgroup_fds) keep.push_back(fd);
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  args.keep_fds = keep.data();
  args.nkeep = static_cast<int>(keep.size());

  Stack& init_stack = L->init_stack;
  Stack& cmd_stack = L->cmd_stack;
  if (!init_stack.Allocate(uses_init ? kInitStackSize : 128 * 1024) ||
      (uses_init && !cmd_stack.Allocate(128 * 1024))) {
    return Status::Sys(ErrorCode::kESPAWN, "mmap(2) of a child stack failed", "mmap", errno);
  }
  args.cmd_stack_top = uses_init ? cmd_stack.top() : nullptr;
  if (args.spare_init_ctrl >= 0) {
    // The command's maker (HelperInChild) runs below init's own stack, which grows down from the
    // top of the mapping, and above its TLS block: 64 KiB of a mapping that lives until init is
    // reaped, so nothing frees it while the helper still runs.
    static_assert(kInitStackSize >= 256 * 1024 && kInitTlsOffset <= 64 * 1024, "the helper's stack must fit");
    args.helper_stack_top = static_cast<char*>(init_stack.base) + 128 * 1024;
  }
  int flags = CLONE_PIDFD | CLONE_VM | SIGCHLD;
  int (*entry)(void*) = CommandInChild;
  void* tls = nullptr;
  if (uses_init) {
    if (isolated) flags |= CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
    if (isolated && plan.new_net) flags |= CLONE_NEWNET;
    entry = InitInChild;
    tls = PrepareInitTls(init_stack.base);
    if (tls != nullptr) flags |= CLONE_SETTLS;
  } else {
    flags |= CLONE_VFORK;
  }
  // Signals stay blocked across clone: a handler of the parent must never run in the child.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  pid_t pid;
  int clone_errno = 0;
  int tmpl_user = -1, tmpl_net = -1, tmpl_sys = -1;
  const bool shared_net = isolated && plan.new_net && plan.proxy_port == 0 && plan.share_netns &&
                          GetNetTemplate(&tmpl_user, &tmpl_net, &tmpl_sys);
  // A proxy sandbox joins a namespace of its own made ahead (spawn_netns.cc); our copies of its
  // fds are closed once init holds it, whatever happens.
  NetTemplate pooled;
  struct PooledCloser {
    NetTemplate* t;
    ~PooledCloser() { ReleaseTemplate(t); }
  } pooled_closer{&pooled};
  const bool pooled_net = isolated && plan.new_net && plan.proxy_port != 0 && TakeProxyTemplate(&pooled);
  if (pooled_net) {
    tmpl_user = pooled.user_fd;
    tmpl_net = pooled.net_fd;
    tmpl_sys = pooled.sys_fd;
    args.tmpl_loopback = true;
  }
  if (shared_net || pooled_net) {
    args.tmpl_user_fd = tmpl_user;
    args.tmpl_net_fd = tmpl_net;
    args.tmpl_sys_fd = tmpl_sys;
    // init starts from a copy of our fd table: keep the sysfs mount fd through its fd sweep.
    if (tmpl_sys >= 0) {
      keep.push_back(tmpl_sys);
      std::sort(keep.begin(), keep.end());
      args.keep_fds = keep.data();
      args.nkeep = static_cast<int>(keep.size());
    }
    args.init_flags = (flags & ~CLONE_NEWNET) | CLONE_PARENT;
    args.init_stack_top = init_stack.top();
    args.init_tls = tls;
    args.init_pid = -EAGAIN;
    args.init_pidfd = -1;
    Stack stage0_stack;
    pid = -1;
    if (stage0_stack.Allocate(64 * 1024)) {
      pid_t s0 = clone(Stage0InChild, stage0_stack.top(), CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &args);
      if (s0 > 0) {
        int st;
        while (waitpid(s0, &st, __WALL) < 0 && errno == EINTR) {
        }
        pid = args.init_pid;
        pidfd = args.init_pidfd;
        if (pid < 0) clone_errno = -pid;
        if (pid < 0 && WIFEXITED(st) && WEXITSTATUS(st) == 125) clone_errno = 0;  // reported on err pipe
      } else {
        clone_errno = errno;
      }
    } else {
      clone_errno = ENOMEM;
    }
    if (pid < 0 && clone_errno == 0) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      ChildReport rep;
      close(err_w);
      owned.Release(err_w);
      if (read(errp[0], &rep, sizeof rep) == static_cast<ssize_t>(sizeof rep)) return ReportToStatus(plan, rep);
      return Status::Error(ErrorCode::kENAMESPACE_SETUP, "joining the shared network namespace failed");
    }
    out->shared_netns = pid > 0 && shared_net;
  } else {
    pid = clone(entry, init_stack.top(), flags, &args, &pidfd, tls, nullptr);
    clone_errno = errno;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    if (isolated && (clone_errno == EPERM || clone_errno == ENOSPC || clone_errno == EINVAL)) {
      return Status::Sys(ErrorCode::kEUSERNS_UNAVAILABLE,
                         std::string("clone(2) with new user/mount/pid namespaces failed: ") +
                             strerrorname_np(clone_errno) +
                             "; unprivileged user namespaces are unavailable here (check "
                             "kernel.unprivileged_userns_clone, user.max_user_namespaces, AppArmor); "
                             "use mode 'landlock' with degraded: true",
                         "clone", clone_errno);
    }
    return Status::Sys(ErrorCode::kESPAWN, std::string("clone(2) failed: ") + strerrorname_np(clone_errno),
                       "clone", clone_errno);
  }
  owned.Add(pidfd);
  // The child's copies are all it needs; close ours so EOF on the errno pipe means "exec'd".
  for (int fd : staged) {
    owned.Release(fd);
    close(fd);
  }
  owned.Release(err_w);
  close(err_w);
  if (statp[1] >= 0) {
    owned.Release(statp[1]);
    close(statp[1]);
  }
  for (int fd : {chan[1], ctrl[1], relay[0], relay[1]}) {
    if (fd < 0) continue;
    owned.Release(fd);
    close(fd);
  }

  // Blocks until the command has exec'd (EOF) or reported a failure, as libuv's spawn does; a
  // spare until its command is parked.
  ChildReport rep;
  Status failure;
  for (;;) {
    ssize_t n = read(errp[0], &rep, sizeof rep);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof rep)) {
      if (L->spare && rep.stage == kNote && rep.index == kNoteParked) break;
      if (rep.stage == kNote) continue;  // notes are informational (see NoteBits)
      failure = ReportToStatus(plan, rep);
    } else if (L->spare) {
      failure = Status::Error(ErrorCode::kESPAWN, "a sandbox prepared ahead ended before it was ready");
    }
    break;
  }
  if (!failure.ok()) {
    KillAndReap(pidfd);
    return failure;
  }
  owned.Release(pidfd);
  if (uses_init) {
    owned.Release(statp[0]);
    fcntl(statp[0], F_SETFL, O_NONBLOCK);
  }
  // The sandbox hands fds over on the channel before the command starts (they are already
  // queued). One that did not arrive: the sandbox is killed and reaped, and every fd received so
  // far is closed.
  auto handover = [&](int* fd, ErrorCode code, const char* what) -> Status {
    char byte;
    if (RecvFd(chan[0], &byte, fd, MSG_DONTWAIT) == 1 && *fd >= 0) return Status::Ok();
    KillAndReap(pidfd);
    for (int* got : {&out->pty_master_fd, &out->proxy_listener_fd, &out->seccomp_listener_fd}) {
      if (*got >= 0) close(*got);
      *got = -1;
    }
    return Status::Error(code, what);
  };
  if (chan[0] >= 0 && plan.pty_cols != 0) {
    Status st = handover(&out->pty_master_fd, ErrorCode::kESPAWN, "the sandbox did not hand over its pseudo-terminal");
    if (!st.ok()) return st;
  }
  if (chan[0] >= 0 && plan.proxy_port != 0) {
    Status st = handover(&out->proxy_listener_fd, ErrorCode::kEPROXY_START, "the sandbox did not hand over its proxy listener");
    if (!st.ok()) return st;
  }
  if (chan[0] >= 0 && plan.seccomp_listener) {
    // The command sent it before its execve.
    Status st = handover(&out->seccomp_listener_fd, ErrorCode::kESECCOMP_INSTALL, "the sandboxed command did not hand over its seccomp listener");
    if (!st.ok()) return st;
  }
  if (L->spare) {
    // The go (spawn_spare.cc) hands the stacks over; until then the errno pipe and the go
    // socket stay here.
    owned.Release(errp[0]);
    owned.Release(ctrl[0]);
    L->err_r = errp[0];
    L->ctrl = ctrl[0];
  } else if (uses_init) {
    out->init_stack = init_stack.base;
    out->init_stack_size = init_stack.size;
    init_stack.base = MAP_FAILED;  // init runs on it until it is reaped
  }
  out->pid = pid;
  out->pidfd = pidfd;
  out->status_fd = uses_init ? statp[0] : -1;
  out->mode = plan.mode;
  return Status::Ok();
}

}  // namespace spawn_internal

using namespace spawn_internal;

Status SpawnLinux(LinuxSpawnPlan& plan, LinuxSpawnResult* out) noexcept {
  spawn_internal::Launch launch;
  return spawn_internal::LaunchLinux(plan, &launch, out);
}

void ReleaseInitStack(LinuxSpawnResult* res) noexcept {
  if (res->init_stack != nullptr) spawn_internal::GiveStack(res->init_stack, res->init_stack_size);
  res->init_stack = nullptr;
}

bool ReadCommandStatus(const LinuxSpawnResult& res, int* code, int* signal, bool* eof) noexcept {
  int32_t st;
  ssize_t n;
  do {
    n = read(res.status_fd, &st, sizeof st);
  } while (n < 0 && errno == EINTR);
  *eof = n == 0;
  if (n != static_cast<ssize_t>(sizeof st)) return false;
  *code = -1;
  *signal = 0;
  if (WIFEXITED(st)) {
    *code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    *signal = WTERMSIG(st);
  }
  return true;
}

bool CollectExit(const LinuxSpawnResult& res, int* code, int* signal) noexcept {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(static_cast<idtype_t>(P_PIDFD), res.pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
    // Not this process's child (init made by the supervision process, which reaps it): the pidfd
    // became readable, so it has exited, and its status went to the status pipe if it had one.
    // Reported as killed: whatever came first through the pipe was delivered already.
    if (errno != ECHILD) return false;
    *code = -1;
    *signal = SIGKILL;
    return true;
  }
  if (si.si_pid == 0) return false;
  memset(&si, 0, sizeof si);
  while (waitid(static_cast<idtype_t>(P_PIDFD), res.pidfd, &si, WEXITED) < 0 && errno == EINTR) {
  }
  *code = -1;
  *signal = 0;
  if (si.si_code == CLD_EXITED) {
    *code = si.si_status;
  } else {
    *signal = si.si_status;
  }
  return true;
}

int InitSignalFor(LinuxMode mode, int sig) noexcept {
  // Isolated: SIGKILL ends init and with it the pid namespace; other signals are forwarded to
  // the command's group. Landlock: init must stay alive to kill the tree, so SIGKILL becomes its
  // teardown signal.
  return mode == LinuxMode::kLandlock && sig == SIGKILL ? kKillTreeSignal : sig;
}

int SignalTree(const LinuxSpawnResult& res, int sig) noexcept {
  if (res.mode != LinuxMode::kPlain) {
    long r = Sys(__NR_pidfd_send_signal, res.pidfd, InitSignalFor(res.mode, sig), 0, 0);
    return r < 0 ? static_cast<int>(r) : 0;
  }
  if (kill(-res.pid, sig) == 0) return 0;
  long r = Sys(__NR_pidfd_send_signal, res.pidfd, sig, 0, 0);
  return r < 0 ? static_cast<int>(r) : 0;
}

namespace {
struct ProbeArgs {
  char uid_map[48];
  char gid_map[48];
  long procfs;  // written by the child (CLONE_VM): the fresh procfs mount's result
};
int ProbeInChild(void* argp) {
  ProbeArgs* a = static_cast<ProbeArgs*>(argp);
  long r = WriteFileInChild("/proc/self/setgroups", "deny");
  if (r == 0 || r == -ENOENT) r = WriteFileInChild("/proc/self/uid_map", a->uid_map);
  if (r == 0) r = WriteFileInChild("/proc/self/gid_map", a->gid_map);
  if (r == 0) r = Sys(__NR_mount, 0, "/", 0, MS_REC | MS_PRIVATE, 0);
  if (r == 0) r = Sys(__NR_mount, "tmpfs", "/tmp", "tmpfs", 0, "size=4k");
  // Isolated mode's /proc, as init mounts it (pid 1 of a new pid namespace, in its own mount
  // namespace: nothing outside sees it). The kernel refuses it (EPERM) where the /proc we see has
  // locked mounts over its files, as a container runtime's masked paths are in a rootless
  // container: a procfs may only be mounted where one is already fully visible. Separate from
  // the result above: user namespaces work there, isolated mode would just have no /proc.
  if (r == 0) a->procfs = Sys(__NR_mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, 0);
  ExitInChild(r < 0 ? static_cast<int>(-r) : 0);
}
}  // namespace

int ProbeUserNamespaces(bool with_net, int* procfs) noexcept {
  ProbeArgs args;
  args.procfs = -ECHILD;  // not reached: the namespace itself failed
  snprintf(args.uid_map, sizeof args.uid_map, "%u %u 1\n", geteuid(), geteuid());
  snprintf(args.gid_map, sizeof args.gid_map, "%u %u 1\n", getegid(), getegid());
  Stack stack;
  if (!stack.Allocate(64 * 1024)) return -ENOMEM;
  int flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | SIGCHLD;
  if (with_net) flags |= CLONE_NEWNET;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = clone(ProbeInChild, stack.top(), flags | CLONE_VM | CLONE_VFORK, &args);
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return -e;
  int st = 0;
  while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {
  }
  if (procfs != nullptr) *procfs = static_cast<int>(args.procfs);
  if (WIFEXITED(st)) return -WEXITSTATUS(st);
  return -ECHILD;
}

}  // namespace psb
