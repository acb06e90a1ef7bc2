// native.openPty / resizePty (pty_linux.cc).
// Tests: see pty_linux.cc.
#pragma once
#include <napi.h>

namespace psb {
// Adds openPty/resizePty to the Linux binding's exports (see pty_linux.cc).
void RegisterPty(Napi::Env env, Napi::Object exports);
}  // namespace psb
