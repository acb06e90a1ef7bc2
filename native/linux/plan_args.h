// Reading the fields of a plan object from JS (lib/platform/linux.ts) with the checks every
// field gets: the type, and no NUL byte in a string (it would silently cut the path the kernel
// sees). Each throws a TypeError naming the field.
// Tests: see plan_args.cc.
#pragma once

#include <napi.h>

#include <string>
#include <vector>

namespace psb {

std::string GetString(const Napi::Object& o, const char* key);
Napi::Array GetArray(const Napi::Object& o, const char* key);
Napi::Object GetObjectAt(const Napi::Array& a, uint32_t i, const char* what);
std::vector<std::string> GetStrings(const Napi::Object& o, const char* key);
double GetNumber(const Napi::Object& o, const char* key, double def);
bool GetBool(const Napi::Object& o, const char* key, bool def);

}  // namespace psb
