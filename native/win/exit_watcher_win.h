// WatchExit: report a child's exit code to JS without blocking the event loop.
//
//   WatchExit(env, std::move(process_dup), callback);   // callback(exitCode) on the JS thread
//
// One dedicated thread per child (never the libuv pool: a long-lived child would pin a worker),
// blocked in WaitForSingleObject on its own duplicate of the process handle, then a
// ThreadSafeFunction call. The pending call keeps the event loop alive, like child_process.
// Called on the JS thread. Returns false (and calls nothing) if the thread cannot be started.
// Tests: see exit_watcher_win.cc.
#pragma once

#include <napi.h>

#include "scoped_handle.h"

namespace psb::win {

bool WatchExit(Napi::Env env, ScopedHandle process, Napi::Function callback);

}  // namespace psb::win
