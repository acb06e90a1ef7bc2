// native.adoptChildStdio / makeFifo / pidfdExit (stdio_adopt.cc).
// Tests: see stdio_adopt.cc.
#pragma once
#include <napi.h>

namespace psb {
// Adds adoptChildStdio/pidfdExit to the Linux binding's exports (see stdio_adopt.cc).
void RegisterStdioAdopt(Napi::Env env, Napi::Object exports);
}  // namespace psb
