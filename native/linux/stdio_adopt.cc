// The srt drop-in's fast wrapped line (lib/srt/attach.ts): a line that `wrapWithSandbox` returned
// runs in a shell the host itself spawned, asks the host (over a FIFO) to run the command, and
// waits; the host takes the shell's fds 0-2 and runs the sandbox in-process, as spawnSandboxed does.
//
//   adoptChildStdio(pid, [a, b, c]) -> { pidfd, fds: [dup of a, of b, of c] }
//     Only a direct child of this process is adopted (its parent pid is ours): a line run by anyone
//     else (another tool, or a sandboxed command that learned the line's token) gets nothing and
//     the line falls back to the CLI. The fds are dups (pidfd_getfd: the same open file
//     descriptions, sockets included, which /proc/<pid>/fd/N cannot reopen); -1 where the child
//     has no such fd. ENOSYS/EPERM where pidfd_getfd is missing or refused (Linux < 5.6, a
//     container's seccomp profile): the line falls back to the CLI too.
//   makeFifo(path): mkfifo 0600 (Node has none).
//   pidfdExit(pidfd) -> null while the child runs, else { code, signal }: peeked with WNOWAIT, so
//     the child stays for whoever reaps it (Node's child_process does).
//
// Tests: test/srt/wrap-attach.test.ts.
#include <errno.h>
#include <fcntl.h>
#include <napi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "../js_error.h"
#include "proc_fields.h"
#include "syscall_numbers.h"

#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace psb {
namespace {

[[noreturn]] void ThrowSys(const Napi::Env& env, const char* op, int err) {
  ThrowSandboxError(env, Status::Sys(ErrorCode::kESPAWN, std::string("could not take over the wrapped line's stdio: ") + op + " failed", op, err));
}

// The parent pid of pid from /proc/<pid>/stat, or -1.
long ParentOf(int pid) {
  procfs::StatFields st;
  return procfs::ReadStat(pid, &st) >= 2 ? st.ppid : -1;
}

Napi::Value AdoptChildStdio(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "Expected pid to be a number");
  const int pid = info[0].As<Napi::Number>().Int32Value();
  if (pid <= 1) throw Napi::TypeError::New(env, "Expected pid to be a process id");
  if (!info[1].IsArray() || info[1].As<Napi::Array>().Length() != 3) throw Napi::TypeError::New(env, "Expected three fd numbers");
  int want[3];
  for (uint32_t i = 0; i < 3; ++i) {
    const Napi::Value v = info[1].As<Napi::Array>().Get(i);
    if (!v.IsNumber() || v.As<Napi::Number>().Int32Value() < 0) throw Napi::TypeError::New(env, "Expected three fd numbers");
    want[i] = v.As<Napi::Number>().Int32Value();
  }
  const int pidfd = static_cast<int>(syscall(__NR_pidfd_open, pid, 0));
  if (pidfd < 0) ThrowSys(env, "pidfd_open", errno);
  // Checked after the pidfd pins the process: if pid died and was reused before pidfd_open, the
  // pidfd and /proc both name the new process, which is no child of ours.
  if (ParentOf(pid) != getpid()) {
    close(pidfd);
    ThrowSys(env, "adopt (not a child of this process)", EPERM);
  }
  Napi::Array fds = Napi::Array::New(env, 3);
  int got[3] = {-1, -1, -1};
  for (int i = 0; i < 3; ++i) {
    got[i] = static_cast<int>(syscall(__NR_pidfd_getfd, pidfd, want[i], 0));
    if (got[i] < 0 && errno != EBADF) {
      const int err = errno;
      for (int j = 0; j < i; ++j)
        if (got[j] >= 0) close(got[j]);
      close(pidfd);
      ThrowSys(env, "pidfd_getfd", err);
    }
    fds.Set(i, Napi::Number::New(env, got[i]));
  }
  // The fds were taken from the process the pidfd names, alive until now (a zombie keeps none).
  if (syscall(__NR_pidfd_send_signal, pidfd, 0, nullptr, 0) != 0) {
    const int err = errno;
    for (int fd : got)
      if (fd >= 0) close(fd);
    close(pidfd);
    ThrowSys(env, "pidfd_send_signal", err);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("pidfd", Napi::Number::New(env, pidfd));
  o.Set("fds", fds);
  return o;
}

Napi::Value PidfdExit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "Expected pidfd to be a number");
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(info[0].As<Napi::Number>().Int32Value()), &si,
             WEXITED | WNOHANG | WNOWAIT) != 0) {
    // ECHILD: reaped already (by Node's child_process): it has exited, status unknown.
    if (errno == ECHILD) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("code", env.Null());
      o.Set("signal", env.Null());
      return o;
    }
    ThrowSys(env, "waitid", errno);
  }
  if (si.si_pid == 0) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  const bool exited = si.si_code == CLD_EXITED;
  o.Set("code", exited ? Napi::Value(Napi::Number::New(env, si.si_status)) : env.Null());
  o.Set("signal", exited ? env.Null() : Napi::Value(Napi::Number::New(env, si.si_status)));
  return o;
}

// makeFifo(path): a FIFO only this user can use (0600); EEXIST is an error (the names are random).
Napi::Value MakeFifo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "Expected path to be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  if (mkfifo(path.c_str(), 0600) != 0) ThrowSys(env, "mkfifo", errno);
  return env.Undefined();
}

}  // namespace

void RegisterStdioAdopt(Napi::Env env, Napi::Object exports) {
  exports.Set("adoptChildStdio", Napi::Function::New(env, AdoptChildStdio, "adoptChildStdio"));
  exports.Set("makeFifo", Napi::Function::New(env, MakeFifo, "makeFifo"));
  exports.Set("pidfdExit", Napi::Function::New(env, PidfdExit, "pidfdExit"));
}

}  // namespace psb
