// Pseudo-terminals for spawn(..., { pty }): the pair is made here, in the parent, before the
// spawn. The slave goes to the child as fds 0-2 (the child makes it its controlling terminal with
// TIOCSCTTY after setsid: see CommandInChild); the master stays with JS (output, input, resize).
// Nothing here runs between fork and exec, so libc is fine.
// Tests: test/linux/pty.test.ts, test/linux/landlock-terminals.test.ts (terminals in both modes).
#include <errno.h>
#include <fcntl.h>
#include <napi.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <string>

#include "../js_error.h"
#include "pty_linux.h"

namespace psb {
namespace {

unsigned short GetSize(const Napi::Env& env, const Napi::Value& v, const char* what) {
  if (!v.IsNumber()) throw Napi::TypeError::New(env, std::string("Expected ") + what + " to be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  // The kernel keeps unsigned shorts; 0 would make many programs divide by zero.
  if (!(d >= 1 && d <= 65535) || d != static_cast<double>(static_cast<int>(d))) {
    throw Napi::RangeError::New(env, std::string(what) + " must be an integer from 1 to 65535");
  }
  return static_cast<unsigned short>(d);
}

[[noreturn]] void ThrowSys(const Napi::Env& env, const char* op, int err) {
  ThrowSandboxError(env, Status::Sys(ErrorCode::kESPAWN, std::string("could not set up a pseudo-terminal: ") + op + " failed", op, err));
}

// openPty(cols, rows) -> { master, slave, name }. Both fds are close-on-exec: the child gets the
// slave only through the explicit stdio placement.
Napi::Value OpenPty(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct winsize ws = {};
  ws.ws_col = GetSize(env, info[0], "cols");
  ws.ws_row = GetSize(env, info[1], "rows");
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) ThrowSys(env, "posix_openpt", errno);
  char name[128];
  if (grantpt(master) != 0 || unlockpt(master) != 0 || ptsname_r(master, name, sizeof name) != 0) {
    int e = errno;
    close(master);
    ThrowSys(env, "unlockpt", e);
  }
  int slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) {
    int e = errno;
    close(master);
    ThrowSys(env, "open", e);
  }
  if (ioctl(master, TIOCSWINSZ, &ws) != 0) {
    int e = errno;
    close(master);
    close(slave);
    ThrowSys(env, "ioctl", e);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("master", Napi::Number::New(env, master));
  o.Set("slave", Napi::Number::New(env, slave));
  o.Set("name", Napi::String::New(env, name));
  return o;
}

// resizePty(masterFd, cols, rows): TIOCSWINSZ on the master; the kernel sends SIGWINCH to the
// terminal's foreground process group.
Napi::Value ResizePty(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "Expected fd to be a number");
  int fd = info[0].As<Napi::Number>().Int32Value();
  struct winsize ws = {};
  ws.ws_col = GetSize(env, info[1], "cols");
  ws.ws_row = GetSize(env, info[2], "rows");
  if (ioctl(fd, TIOCSWINSZ, &ws) != 0) ThrowSys(env, "ioctl", errno);
  return env.Undefined();
}

// ptyPeer(masterFd) -> a new fd for its slave (TIOCGPTPEER: no path lookup, so it works for a
// terminal of the sandbox's own devpts, which the host cannot name). Close-on-exec.
Napi::Value PtyPeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "Expected fd to be a number");
  int fd = ioctl(info[0].As<Napi::Number>().Int32Value(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) ThrowSys(env, "ioctl", errno);
  return Napi::Number::New(env, fd);
}

}  // namespace

void RegisterPty(Napi::Env env, Napi::Object exports) {
  exports.Set("openPty", Napi::Function::New(env, OpenPty, "openPty"));
  exports.Set("resizePty", Napi::Function::New(env, ResizePty, "resizePty"));
  exports.Set("ptyPeer", Napi::Function::New(env, PtyPeer, "ptyPeer"));
}

}  // namespace psb
