// ThrowSandboxError (js_error.h).
// Tests: see js_error.h.
#include "js_error.h"

#include "addon_data.h"

namespace psb {

Napi::Value MakeSandboxError(Napi::Env env, const Status& status) {
  AddonData* data = GetAddonData(env);
  Napi::Object details = Napi::Object::New(env);
  if (!status.syscall.empty()) details.Set("syscall", status.syscall);
  if (status.sys_error != 0) {
#ifdef _WIN32
    details.Set("winError", Napi::Number::New(env, status.sys_error));
#else
    details.Set("errno", Napi::Number::New(env, status.sys_error));
#endif
  }
  Napi::String code = Napi::String::New(env, ErrorCodeName(status.code));
  Napi::String message = Napi::String::New(env, status.message);
  if (data != nullptr && !data->sandbox_error_class.IsEmpty()) {
    return data->sandbox_error_class.New({code, message, details});
  }
  // setErrorClass was not called (only possible when the addon is loaded by hand): still give a
  // coded Error rather than losing the code.
  Napi::Error err = Napi::Error::New(env, status.message);
  err.Set("code", code);
  err.Set("details", details);
  return err.Value();
}

void ThrowSandboxError(Napi::Env env, const Status& status) {
  throw Napi::Error(env, MakeSandboxError(env, status));
}

}  // namespace psb
