// ThrowSandboxError: turn a failed Status into an instance of lib/errors.ts's SandboxError.
// The class is handed to the addon once, at load (setErrorClass), and kept in AddonData.
// Tests: test/native/error-codes.test.ts (codes and SandboxError instances),
// test/native/addon.test.ts.
#pragma once

#include <napi.h>

#include "status.h"

namespace psb {

// Builds the SandboxError object (code, message, syscall, errno / winError). Never throws.
Napi::Value MakeSandboxError(Napi::Env env, const Status& status);
// Throws it as a JS exception (C++ exception with NAPI_CPP_EXCEPTIONS).
[[noreturn]] void ThrowSandboxError(Napi::Env env, const Status& status);

}  // namespace psb
