// A started sandbox's exit watch on the host's libuv loop: the process's pidfd (and isolated
// mode's status pipe), no thread per child; and the start of its Landlock-mode supervisor. The
// JS handle it returns is what native.kill and native.setRef act on. Tests:
// test/linux/threats-rob.test.ts (ROB-10..14) and every spawn.
#pragma once

#include <napi.h>

#include "plan_parse.h"
#include "spawn_linux.h"
#include "supervisor/supervisor.h"

namespace psb {

// A started sandbox: its supervisor, its exit watch, and the JS result
// { pid, handle, fds, landlockAbi, listenerFd?, ptyFd?, sharedNetns, supervisionConfined? }
// (supervisionConfined, with a supervisor: whether it is served from `on`, confined by the
// policy's outer envelope, supervisor.h StartSupervisionThread).
Napi::Value WatchStarted(Napi::Env env, const LinuxSpawnResult& res, SupervisorConfig&& supervisor,
                         const Napi::Function& on_exit, StdioEnds* ends, int landlock_abi,
                         SupervisionThread* on = nullptr);

Napi::Value KillJs(const Napi::CallbackInfo& info);
Napi::Value SetRefJs(const Napi::CallbackInfo& info);

}  // namespace psb
