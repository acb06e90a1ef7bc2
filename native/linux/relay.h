// Managed-proxy tunnel relay (recv/send between two sockets on the libuv loop). See relay.cc.
// Tests: see relay.cc.
#pragma once

#include <napi.h>

namespace psb {

// Adds relay(), relayStart() and relayClose() to the addon's exports.
void RegisterRelay(Napi::Env env, Napi::Object exports);

}  // namespace psb
