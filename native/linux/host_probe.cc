// What the addon tells the planner about this host: native.probe (kernel features and this
// process), cgroupDelegated, uidTaskCount, and the test hooks: the seccomp filter's self-check
// and a POSIX lock for the host (testPosixLock).
// Tests: test/native/addon.test.ts, test/linux/kernel-matrix.test.ts, test/linux/seccomp.test.ts.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <napi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <string>

#include "binding_linux.h"
#include "landlock.h"
#include "seccomp.h"
#include "spawn_linux.h"
#include "supervisor/supervise_connect.h"
#include "supervisor/supervise_paths.h"
#include "supervisor/task_access.h"
#include "syscall_numbers.h"

namespace psb {
namespace {

// Isolated mode builds its mount tree with mount_setattr(2) (Linux 5.12: read-only binds, applied
// recursively). Before it (Debian 11's 5.10) a spawn would fail half-way through the mount setup;
// the planner refuses up front instead. 0 when it exists, else -ENOSYS.
int MountApiSupported() {
  // Argument checks come first where the call exists (size 0 is EINVAL); ENOSYS means it does not.
  if (syscall(__NR_mount_setattr, -1, "", 0, nullptr, 0) < 0 && errno == ENOSYS) return -ENOSYS;
  return 0;
}

}  // namespace

// native.probe() -> facts about this kernel and process
Napi::Value ProbeJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("landlockAbi", Napi::Number::New(env, LandlockAbi()));
  o.Set("seccomp", Napi::Number::New(env, SeccompSupported()));
  o.Set("connectSupervisor", Napi::Number::New(env, ConnectSupervisorSupported()));
  // How the supervisors reach the command: "pidfd", "procfs" (a container's profile refuses
  // process_vm_readv and pidfd_getfd) or "none".
  o.Set("supervisorAccess", Napi::String::New(env, task::WayName()));
  int procfs = -ECHILD;
  o.Set("userns", Napi::Number::New(env, ProbeUserNamespaces(true, &procfs)));
  // 0 when isolated mode's fresh /proc can be mounted (only meaningful when userns is 0).
  o.Set("procfs", Napi::Number::New(env, procfs));
  o.Set("mountApi", Napi::Number::New(env, MountApiSupported()));
  // 0 when init can trace the command (Landlock mode's process cap as root without a cgroup).
  o.Set("processTracing", Napi::Number::New(env, ProcessTracingSupported()));
  o.Set("euid", Napi::Number::New(env, geteuid()));
  struct utsname u;
  if (uname(&u) == 0) {
    o.Set("kernel", std::string(u.release));
    o.Set("machine", std::string(u.machine));
  }
  return o;
}

// Test hook: SeccompSelfCheck (seccomp.h). { mismatches, cases, configs, first }.
Napi::Value SeccompSelfCheckJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  long cases = 0;
  char first[256] = "";
  int configs = 0;
  int mismatches = SeccompSelfCheck(&cases, &configs, first, sizeof first);
  Napi::Object o = Napi::Object::New(env);
  o.Set("mismatches", Napi::Number::New(env, mismatches));
  o.Set("cases", Napi::Number::New(env, static_cast<double>(cases)));
  o.Set("configs", Napi::Number::New(env, configs));
  o.Set("first", Napi::String::New(env, first));
  return o;
}

// native.cgroupDelegated(dir) -> whether systemd marked this cgroup as delegated to its payload
// (Delegate= on a service or scope): the "trusted.delegate" xattr (readable only with
// CAP_SYS_ADMIN) or "user.delegate" (set for unprivileged managers' units), value "1". Node's fs
// has no xattr call; this is the only signal systemd documents for "these sub-groups are yours".
Napi::Value CgroupDelegatedJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "Usage: native.cgroupDelegated(dir)");
  std::string dir = info[0].As<Napi::String>().Utf8Value();
  for (const char* name : {"trusted.delegate", "user.delegate"}) {
    char v[8] = {0};
    ssize_t n = getxattr(dir.c_str(), name, v, sizeof(v) - 1);
    if (n == 1 && v[0] == '1') return Napi::Boolean::New(env, true);
  }
  return Napi::Boolean::New(env, false);
}

// uidTaskCount(uid) -> { mine, visible }: the tasks (processes and threads) /proc shows for uid
// `uid`, and for all uids (lib/platform/linux-quotas.ts: Landlock mode's RLIMIT_NPROC base). One
// fstatat per process, on /proc/<pid>/task: its owner is the process's effective uid and its
// link count less two its thread count. A process whose effective uid is not its real one, or a
// non-dumpable one (its /proc directory is root's), is not counted: the count can only be low,
// which makes the cap tighter, never looser.
Napi::Value UidTaskCountJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint32_t uid = info[0].As<Napi::Number>().Uint32Value();
  double mine = 0, visible = 0;
  int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = proc >= 0 ? fdopendir(proc) : nullptr;
  if (d == nullptr) {
    if (proc >= 0) close(proc);
    return env.Undefined();
  }
  char path[300];
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "%s/task", e->d_name);
    struct stat st;
    if (fstatat(proc, path, &st, 0) != 0) continue;
    const double threads = st.st_nlink > 2 ? static_cast<double>(st.st_nlink - 2) : 1;
    visible += threads;
    if (st.st_uid == uid) mine += threads;
  }
  closedir(d);
  Napi::Object o = Napi::Object::New(env);
  o.Set("mine", mine);
  o.Set("visible", visible);
  return o;
}

// native.testPosixLock(fd, lock) -> 0 or -errno: a POSIX record lock (fcntl F_SETLK, the whole
// file) taken (lock true: F_WRLCK) or released on fd by this process. For tests only: Node has
// no fcntl locks, and a host's own locks must outlive what its sandboxes' supervision does
// (test/linux/supervisor-confined.test.ts). Never blocks.
Napi::Value TestPosixLockJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.testPosixLock(fd, lock)");
  struct flock fl = {};
  fl.l_type = info[1].ToBoolean().Value() ? F_WRLCK : F_UNLCK;
  fl.l_whence = SEEK_SET;
  const int r = fcntl(info[0].As<Napi::Number>().Int32Value(), F_SETLK, &fl);
  return Napi::Number::New(env, r == 0 ? 0 : -errno);
}

// native.testSkipPathChecks(skips) -> undefined: the path class's write checks to skip in this
// process (supervise_paths.h kSkip*; 0: none). For tests only, and refused (a TypeError) unless
// the environment has PSB_TEST_HOOKS=1: the checks stay in force for any host that did not ask.
Napi::Value TestSkipPathChecksJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* on = getenv("PSB_TEST_HOOKS");
  if (on == nullptr || strcmp(on, "1") != 0) throw Napi::TypeError::New(env, "native.testSkipPathChecks is for tests only (PSB_TEST_HOOKS=1)");
  if (info.Length() != 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.testSkipPathChecks(skips)");
  SetPathCheckSkips(info[0].As<Napi::Number>().Uint32Value());
  return env.Undefined();
}

}  // namespace psb
