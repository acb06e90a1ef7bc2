// Status: the result of every native operation below binding.cc. No exceptions below this line:
// functions return a Status (or 0/-errno in child-side code) and binding.cc turns a failed Status
// into a SandboxError via ThrowSandboxError (js_error.h).
//
//   Status s = DoThing();            // noexcept
//   if (!s.ok()) return s;           // propagate
//   Status::Errno(ErrorCode::kEMOUNT_SETUP, "mount(2) /tmp", errno);
// Tests: test/native/error-codes.test.ts (every code maps to lib/errors.ts), and every failing
// native call.
#pragma once

#include <string>

namespace psb {

enum class ErrorCode : int {
#define PSB_ERROR(name, text) k##name,
#include "error_codes.def"
#undef PSB_ERROR
  kCount
};

// Stable string name of a code ("EMOUNT_SETUP"); the same string lib/errors.ts uses.
const char* ErrorCodeName(ErrorCode code) noexcept;

struct Status {
  bool failed = false;
  ErrorCode code = ErrorCode::kESPAWN;
  std::string message;   // one line a person can act on; names the operation ("mount(2) failed: ...")
  std::string syscall;   // "mount", "CreateDesktopW", ...
  int sys_error = 0;     // errno on POSIX, GetLastError() on Windows; 0 when not applicable

  static Status Ok() { return Status(); }
  static Status Error(ErrorCode c, std::string msg) {
    Status s;
    s.failed = true;
    s.code = c;
    s.message = std::move(msg);
    return s;
  }
  static Status Sys(ErrorCode c, std::string msg, std::string call, int err) {
    Status s = Error(c, std::move(msg));
    s.syscall = std::move(call);
    s.sys_error = err;
    return s;
  }
  bool ok() const { return !failed; }
};

}  // namespace psb
