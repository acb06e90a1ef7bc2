// Landlock mode: the outer envelope the supervision's thread confines itself to before it spawns
// the command (supervisor.h, StartSupervisionThread). Whatever a class of calls carries out for
// the command, a judging bug or a check disabled by mistake included, the kernel then refuses
// outside it. Tests: test/linux/supervisor-envelope.test.ts, test/linux/landlock-terminals.test.ts.
#pragma once

#include <functional>

#include "../landlock.h"
#include "../spawn_linux.h"
#include "supervisor.h"

namespace psb {

// Built from the parsed plan (its envelope_plan) before the spawn, on the thread that asked for
// it (the JS thread, or a pool thread for a spare); its paths are opened by the supervision's
// thread, in the host's fd table.
LandlockPlan SupervisionEnvelope(const LinuxSpawnPlan& plan);

// Runs `spawn` (a SpawnLinux or a PrepareSpare of `plan`; it sets the init pidfd it made) where
// the plan's supervision will act from: for Landlock mode with a supervision, on a supervision
// thread confined by the envelope first, returned in *on for StartSupervisor (or null when the
// spawn failed: the thread has ended); else on the calling thread, *on null.
Status SpawnWhereSupervised(const LinuxSpawnPlan& plan, const std::function<Status(int* pidfd)>& spawn, SupervisionThread** on);
// The same for a spawn made now (SpawnLinux into *res).
Status SpawnLinuxWhereSupervised(LinuxSpawnPlan& plan, LinuxSpawnResult* res, SupervisionThread** on);

}  // namespace psb
