// WatchExit (exit_watcher_win.h).
// Tests: test/win32/spawn.wine.js (exit codes), test/win32/job.wine.js.
#include "exit_watcher_win.h"

#include <thread>

namespace psb::win {

bool WatchExit(Napi::Env env, ScopedHandle process, Napi::Function callback) {
  Napi::ThreadSafeFunction tsfn =
      Napi::ThreadSafeFunction::New(env, callback, "process-sandbox exit watcher", 0, 1);
  HANDLE raw = process.Release();
  try {
    std::thread([tsfn, raw]() mutable {
      ScopedHandle owned(raw);
      ::WaitForSingleObject(owned.get(), INFINITE);
      DWORD code = 0;
      if (!::GetExitCodeProcess(owned.get(), &code)) code = static_cast<DWORD>(-1);
      tsfn.BlockingCall([code](Napi::Env cb_env, Napi::Function cb) {
        // The JS callback may throw; node-addon-api turns that into an uncaught exception.
        cb.Call({Napi::Number::New(cb_env, static_cast<double>(code))});
      });
      tsfn.Release();
    }).detach();
  } catch (...) {
    ::CloseHandle(raw);
    tsfn.Release();
    return false;
  }
  return true;
}

}  // namespace psb::win
