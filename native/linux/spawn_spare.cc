// Sandboxes prepared ahead ("spares"): the whole of a sandbox's setup, made before the spawn that
// uses it, so that the spawn itself costs little more than an unsandboxed one.
//
//   PrepareSpare   (on a thread that lives as long as the process: init's parent-death signal
//                  follows the thread that cloned it) launches as SpawnLinux does, but the
//                  command parks after seccomp (ParkInChild) with no stdio and no cwd, and in
//                  isolated mode init parks before the steps that make placeholders on the host.
//                  What the sandbox hands over at launch (isolated mode's proxy listener and
//                  terminal master, the seccomp listener) is held with the spare and goes with
//                  its spawn.
//   GoSpare        (the spawn) checks that every path a Landlock rule or a bind was made from
//                  still names the same inode, puts argv, envp, the file and the cwd in place, and
//                  sends the stdio fds; isolated init makes the placeholders and passes them on;
//                  the command places them, enters the cwd and calls execve.
//   DiscardSpare   closes the go socket: the parked processes see EOF and exit.
//
// The plan a spare was made from must be the plan of the spawn that uses it; the caller compares
// them (lib/platform/linux-spare.ts). What a path names is re-checked here.
// Tests: test/linux/spare.test.ts, test/linux/fast-path.test.ts.
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <memory>
#include <string>

#include "spawn_internal.h"

namespace psb {

struct LinuxSpare {
  LinuxSpawnPlan plan;
  spawn_internal::Launch launch;
  LinuxSpawnResult res;  // pid, pidfd, status fd and seccomp listener; the stacks stay in launch

  ~LinuxSpare() {
    if (launch.ctrl >= 0) close(launch.ctrl);
    launch.ctrl = -1;
    if (res.seccomp_listener_fd >= 0) close(res.seccomp_listener_fd);
    if (res.proxy_listener_fd >= 0) close(res.proxy_listener_fd);
    if (res.pty_master_fd >= 0) close(res.pty_master_fd);
    if (res.pidfd >= 0) {
      // The parked processes see EOF on the go socket and exit (isolated: init's exit ends the
      // namespace). Reaped here, so nothing runs on the stacks when they go back to the pool.
      siginfo_t si;
      while (waitid(static_cast<idtype_t>(P_PIDFD), res.pidfd, &si, WEXITED) < 0 && errno == EINTR) {
      }
      close(res.pidfd);
    }
    if (res.status_fd >= 0) close(res.status_fd);
  }
};

using namespace spawn_internal;

Status PrepareSpare(LinuxSpawnPlan&& plan, LinuxSpare** out) noexcept {
  *out = nullptr;
  const bool isolated = plan.mode == LinuxMode::kIsolated;
  // A terminal only inside an isolated sandbox (init makes it; a host pty's slave is stdio).
  const bool ns_pty = isolated && plan.pty_cols != 0 && plan.ctty;
  if (plan.mode == LinuxMode::kPlain || (plan.ctty && !ns_pty) || (plan.pty_cols != 0 && !ns_pty) || !plan.seccomp ||
      !plan.stdio.empty() || (!isolated && !plan.landlock) || (isolated && plan.trace_process_cap != 0)) {
    return Status::Error(ErrorCode::kEINVALID_ARGUMENT,
                         "internal: a sandbox prepared ahead needs a sandbox mode, no stdio, no terminal but one inside an isolated sandbox, "
                         "and, isolated, no traced process cap (its helper makes the command)");
  }
  std::unique_ptr<LinuxSpare> s(new LinuxSpare());
  s->plan = std::move(plan);
  s->launch.spare = true;
  // Its Landlock rules are made now, before its stdio arrives with the go (which holds no
  // terminal: the caller checks): nothing on its fds 0-2 at this point is granted by inode.
  s->plan.landlock_plan.stdio_terminals = false;
  Status st = LaunchLinux(s->plan, &s->launch, &s->res);
  if (!st.ok()) {
    s->res = LinuxSpawnResult();  // nothing is left running after a failed launch
    return st;
  }
  *out = s.release();
  return Status::Ok();
}

namespace {

// Whether `path` names what was recorded for it (device and inode; 0/0 for missing), followed as
// the step or rule that recorded it followed it.
bool SameIdentity(const char* path, const uint64_t* id) {
  struct stat st;
  if (stat(path, &st) < 0) return (errno == ENOENT || errno == ENOTDIR || errno == EACCES) && id[0] == 0 && id[1] == 0;
  return id[0] == st.st_dev && id[1] == st.st_ino;
}

// Isolated mode: the sandbox's own /dev, /proc, /sys and /tmp, where a path names something the
// host cannot see. (A host path exposed there is a bind, checked as such.)
bool PrivateInIsolated(const char* path) {
  for (const char* top : {"/dev", "/proc", "/sys", "/tmp"}) {
    size_t n = strlen(top);
    if (strncmp(path, top, n) == 0 && (path[n] == 0 || path[n] == '/')) return true;
  }
  return false;
}

// A tool cache's overlay (lib/platform/linux-caches.ts) is the sandbox's own mount at the cache's
// path: its Landlock rule names the overlay, never the host's directory, whose identity the
// kTmpClone step before it records and checks.
bool OverlaidInIsolated(const LinuxSpawnPlan& plan, const char* path) {
  for (const MountOp& op : plan.mounts) {
    if (op.kind == MountOpKind::kOverlay && op.path == path) return true;
  }
  return false;
}

bool SpareStillValid(const LinuxSpare* s) noexcept {
  const LandlockPlan& ll = s->plan.landlock_plan;
  const bool isolated = s->plan.mode == LinuxMode::kIsolated;
  for (size_t i = 0; i < s->launch.landlock_ids.size() / 2; ++i) {
    if (isolated && (PrivateInIsolated(ll.c_paths[i]) || OverlaidInIsolated(s->plan, ll.c_paths[i]))) continue;
    if (i < ll.path_flags.size() && (ll.path_flags[i] & LandlockPlan::kPathVolatile) != 0) continue;
    if (!SameIdentity(ll.c_paths[i], &s->launch.landlock_ids[2 * i])) return false;
  }
  for (size_t i = 0; i < s->launch.check_ids.size(); ++i) {
    if (s->launch.check_ids[i] && !SameIdentity(s->plan.mounts[i].path.c_str(), &s->launch.mount_ids[2 * i])) return false;
  }
  return true;
}

}  // namespace

Status GoSpare(LinuxSpare* spare, SpareGo& go, LinuxSpawnResult* out, bool* used) noexcept {
  std::unique_ptr<LinuxSpare> s(spare);
  *used = false;
  const int nstdio = static_cast<int>(go.stdio.size());
  if (nstdio > kSpareMaxStdio || !SpareStillValid(s.get())) return Status::Ok();
  LinuxSpawnPlan& p = s->plan;
  Launch& L = s->launch;
  p.file = std::move(go.file);
  p.argv = std::move(go.argv);
  p.envp = std::move(go.envp);
  p.cwd = std::move(go.cwd);
  if (p.argv.empty()) return Status::Error(ErrorCode::kEINVALID_ARGUMENT, "internal: argv is empty");
  L.argv.clear();
  for (std::string& a : p.argv) L.argv.push_back(&a[0]);
  L.argv.push_back(nullptr);
  L.envp.clear();
  for (std::string& e : p.envp) L.envp.push_back(&e[0]);
  L.envp.push_back(nullptr);
  L.args.argv = L.argv.data();
  L.args.envp = L.envp.data();
  L.args.spare_umask = go.umask;

  FdList owned;
  int fds[kSpareMaxStdio];
  for (int i = 0; i < nstdio; ++i) {
    fds[i] = go.stdio[i];
    if (fds[i] < 0) {
      fds[i] = owned.Add(open("/dev/null", O_RDWR | O_CLOEXEC));
      if (fds[i] < 0) return Status::Sys(ErrorCode::kESPAWN, "open(2) /dev/null failed", "open", errno);
    }
  }
  // Its terminal (made at preparation, in the size of the spawn it was planned with) gets this
  // spawn's size before the command starts; with no controlling terminal yet, nobody is signalled.
  if (s->res.pty_master_fd >= 0 && go.pty_cols != 0) {
    struct winsize ws = {go.pty_rows, go.pty_cols, 0, 0};
    if (ioctl(s->res.pty_master_fd, TIOCSWINSZ, &ws) != 0) return Status::Ok();  // not used
  }
  *used = true;
  long sent = SendFdsInChild(L.ctrl, 'G', fds, nstdio);
  if (sent != 1) {
    // It died while it waited (something of the same uid can kill a Landlock-mode spare, as it
    // can kill the host): not used; the caller makes the sandbox on the spot.
    KillAndReap(s->res.pidfd);
    *used = false;
    return Status::Ok();
  }
  // As SpawnLinux: EOF once the command has exec'd, or its failure (isolated: or init's, making
  // the placeholders).
  ChildReport rep;
  Status failure;
  for (;;) {
    ssize_t n = read(L.err_r, &rep, sizeof rep);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof rep)) {
      if (rep.stage == kNote) continue;
      failure = ReportToStatus(p, rep);
    }
    break;
  }
  if (!failure.ok()) {
    KillAndReap(s->res.pidfd);
    return failure;
  }
  *out = s->res;
  out->init_stack = L.init_stack.base;
  out->init_stack_size = L.init_stack.size;
  L.init_stack.base = MAP_FAILED;  // init runs on it until it is reaped
  s->res = LinuxSpawnResult();     // the caller's now
  return Status::Ok();
}

void DiscardSpare(LinuxSpare* s) noexcept { delete s; }

int SparePidfd(const LinuxSpare* s) noexcept { return s->res.pidfd; }

}  // namespace psb
