// Landlock mode: the outer envelope the supervision's thread confines itself to before it spawns
// the command (supervisor.h, StartSupervisionThread). Whatever a class of calls carries out for
// the command, a judging bug or a check disabled by mistake included, the kernel then refuses
// outside it. Tests: test/linux/supervisor-envelope.test.ts.
#pragma once

#include "../landlock.h"
#include "../spawn_linux.h"

namespace psb {

// Built on the JS thread from the parsed plan (its envelope_plan) before the spawn; its paths
// are opened by the supervision's thread, in the host's fd table.
LandlockPlan SupervisionEnvelope(const LinuxSpawnPlan& plan);

}  // namespace psb
