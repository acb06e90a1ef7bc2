// Per-load state of the addon (one instance per Node environment / worker thread).
// Tests: test/native/error-codes.test.ts (setErrorClass and the error class it keeps).
#pragma once

#include <napi.h>

namespace psb {

struct AddonData {
  Napi::FunctionReference sandbox_error_class;  // lib/errors.ts SandboxError, set by setErrorClass
};

AddonData* GetAddonData(Napi::Env env);

// Implemented per OS (native/linux/binding_linux.cc, native/win/binding_win.cc, ...): adds the
// platform's functions to `exports`. binding.cc calls it once at load.
void InitPlatform(Napi::Env env, Napi::Object exports);

}  // namespace psb
