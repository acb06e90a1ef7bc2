// The TS plan (lib/platform/linux/plan.ts, passed by lib/platform/linux/index.ts) into the spawner's
// LinuxSpawnPlan and the supervisor's SupervisorConfig, and the stdio entries into fds. Used by
// native.spawn and by the prepared-ahead sandboxes (spare_binding.cc). Tests:
// test/native/addon.test.ts (malformed plans), and every sandboxed spawn.
#pragma once

#include <napi.h>

#include <vector>

#include "spawn_linux.h"
#include "supervisor/supervisor.h"

namespace psb {

// Where a parsed plan is spawned: here (in this process), or in the supervision process
// (supervision_process.h), which gets it as bytes (plan_wire.h).
enum class PlanFor { kHere, kSupervisionProcess };

// The plan's fields other than stdio (mode, command, limits, mounts, Landlock, seccomp) into
// *plan, and the supervisor's configuration into *supervisor. Throws on a malformed plan.
// kHere: what the supervisor makes from the files (MaterializeSupervisor) is made too;
// kSupervisionProcess: only its inputs are read, to be made there.
void ParsePlan(Napi::Env env, const Napi::Object& o, LinuxSpawnPlan* out, SupervisorConfig* supervisor,
               PlanFor where = PlanFor::kHere);

// What the supervisor makes from its inputs and the files as they are now: the path rules'
// lookups (BuildPathRules), the changes journal (opened and registered), the read opener's rules.
// Run where the sandbox is spawned, once per plan.
Status MaterializeSupervisor(const LinuxSpawnPlan& plan, SupervisorConfig* supervisor) noexcept;

// The parent's ends of the pipes made for 'in'/'out' stdio entries; closed unless released.
struct StdioEnds {
  std::vector<int> parent;  // per entry: our end, or -1
  std::vector<int> child;   // the command's ends, closed once it has its copies
  ~StdioEnds();
};

// stdio: number = host fd to pass, -1 = /dev/null, 'in'/'out' = a new pipe.
void ParseStdio(Napi::Env env, const Napi::Array& stdio, std::vector<int>* out, StdioEnds* ends);

// The go of a sandbox prepared ahead (native.spawnSpare's request): its stdio as ParseStdio
// makes it; the umask is the caller's to set.
SpareGo ParseSpareGo(Napi::Env env, const Napi::Object& o, StdioEnds* ends);

}  // namespace psb
