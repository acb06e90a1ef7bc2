// Glue only: the exports table shared by every OS. Platform functions are added by InitPlatform.
// Tests: test/native/addon-load.test.ts, test/native/addon.test.ts (the exports load),
// test/win32/addon.wine.js (the Windows build).
#include <napi.h>

#include "addon_data.h"
#include "status.h"

namespace psb {

AddonData* GetAddonData(Napi::Env env) { return env.GetInstanceData<AddonData>(); }

namespace {

Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.setErrorClass(SandboxError)");
  }
  GetAddonData(env)->sandbox_error_class = Napi::Persistent(info[0].As<Napi::Function>());
  return env.Undefined();
}

Napi::Array ErrorCodes(Napi::Env env) {
  Napi::Array codes = Napi::Array::New(env);
  uint32_t i = 0;
  for (int c = 0; c < static_cast<int>(ErrorCode::kCount); ++c) {
    codes.Set(i++, ErrorCodeName(static_cast<ErrorCode>(c)));
  }
  return codes;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new AddonData());
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass, "setErrorClass"));
  exports.Set("errorCodes", ErrorCodes(env));
  InitPlatform(env, exports);
  return exports;
}

}  // namespace
}  // namespace psb

// NODE_API_MODULE pastes its second argument into an identifier, so it must be unqualified.
using psb::Init;
NODE_API_MODULE(process_sandbox, Init)
