// The plan's field readers (plan_args.h).
// Tests: test/native/addon.test.ts (malformed plans: TypeErrors), and every sandboxed spawn.
#include "plan_args.h"

#include <utility>

namespace psb {

std::string GetString(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsString()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be a string");
  std::string s = v.As<Napi::String>().Utf8Value();
  // A NUL would silently truncate the path the kernel sees.
  if (s.find('\0') != std::string::npos) {
    throw Napi::TypeError::New(o.Env(), std::string("plan.") + key + " contains a NUL byte");
  }
  return s;
}

Napi::Array GetArray(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsArray()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be an array");
  return v.As<Napi::Array>();
}

Napi::Object GetObjectAt(const Napi::Array& a, uint32_t i, const char* what) {
  Napi::Value v = a.Get(i);
  if (!v.IsObject()) throw Napi::TypeError::New(a.Env(), std::string("Expected ") + what + " entries to be objects");
  return v.As<Napi::Object>();
}

std::vector<std::string> GetStrings(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsArray()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be an array");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<std::string> out;
  out.reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value e = a.Get(i);
    if (!e.IsString()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to hold strings");
    std::string s = e.As<Napi::String>().Utf8Value();
    if (s.find('\0') != std::string::npos) {
      throw Napi::TypeError::New(o.Env(), std::string("plan.") + key + " contains a NUL byte");
    }
    out.push_back(std::move(s));
  }
  return out;
}

double GetNumber(const Napi::Object& o, const char* key, double def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return def;
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be a number");
  return v.As<Napi::Number>().DoubleValue();
}

bool GetBool(const Napi::Object& o, const char* key, bool def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return def;
  if (!v.IsBoolean()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be a boolean");
  return v.As<Napi::Boolean>().Value();
}

}  // namespace psb
