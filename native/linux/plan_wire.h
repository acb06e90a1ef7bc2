// A Landlock-mode plan on the supervision process's channel (supervision_process.h), as bytes.
//
// The host reads the TS plan into LinuxSpawnPlan and SupervisorConfig itself (ParsePlan with
// PlanFor::kSupervisionProcess: the same checks and the same errors as a spawn in the host), and
// sends the result: its fields in a fixed order, fixed-width numbers and length-prefixed strings.
// This replaced a JSON of the TS plan (≈19 KB for a plain policy on a host with a busy temp dir),
// whose stringify in the host and parse there cost ≈230 µs a spawn (docs/performance.md). The
// fds (stdio, cgroup.procs) travel beside the bytes (SCM_RIGHTS); the bytes name them by index.
// What the supervisor makes from the files (MaterializeSupervisor) is made there, not sent.
// Both ends are this addon, built once: the format has no version. The decoder still checks every
// length against what is left, so a short or garbled message is refused, never read past.
// Tests: every Landlock-mode spawn of the suites' process pass (scripts/test-all.sh), and
// test/linux/supervision-process.test.ts.
#pragma once

#include <string>
#include <vector>

#include "spawn_linux.h"
#include "supervisor/supervisor.h"

namespace psb {

// plan and the supervisor's inputs into *out; plan.stdio and plan.cgroup_fds (fds, -1 for
// none) are appended to *fds and named by index.
void EncodePlan(const LinuxSpawnPlan& plan, const SupervisorConfig& supervisor, std::string* out, std::vector<int>* fds);
// The reverse, the fds received put back in place (an index out of range: -1). False on a
// malformed message.
bool DecodePlan(const std::string& in, const std::vector<int>& fds, LinuxSpawnPlan* plan, SupervisorConfig* supervisor);

// A prepared sandbox's go (SpareGo without its umask, which the message's header carries).
void EncodeGo(const SpareGo& go, std::string* out, std::vector<int>* fds);
bool DecodeGo(const std::string& in, const std::vector<int>& fds, SpareGo* go);

}  // namespace psb
