// Time spent per step of the supervisor's answers, for measuring only: compiled in with
// CPPFLAGS=-DPSB_PROFILE_SUPERVISOR (off by default; nothing of it is in a normal build). Each
// supervisor thread sums, per step, the wall time between marks (CLOCK_MONOTONIC, vDSO: no
// syscall) and prints the sums to stderr when it ends (docs/performance.md has what was found).
// Tests: none (compiled only with -DPSB_PROFILE_SUPERVISOR, for measuring).
#pragma once

#ifdef PSB_PROFILE_SUPERVISOR
#include <stdint.h>
#include <stdio.h>
#include <time.h>

namespace psb {
namespace prof {

enum Step {
  kWait,       // poll + RECV: waiting for the next call
  kMetadata,   // the metadata class, whole
  kPathsRead,  // paths: copying the arguments (strings, cwd, dirfds) and ID_VALID
  kPathsCaps,  // paths: clearing and restoring the effective capabilities
  kPathsPin,   // paths: pinning parents (openat2) and reading their paths
  kPathsUmask, // paths: the command's umask
  kPathsAct,   // paths: judging and carrying the call out
  kPathsAnswer,// paths: the answer (SEND)
  kPathsAddfd, // paths: the answer with an fd (ADDFD with SEND: waits for the command to take it)
  kOther,      // the other classes and continued calls
  kSteps
};
inline const char* const kNames[kSteps] = {"wait", "metadata", "paths.read", "paths.caps", "paths.pin", "paths.umask", "paths.act", "paths.answer", "paths.addfd", "other"};

struct Sums {
  uint64_t ns[kSteps] = {};
  uint64_t n[kSteps] = {};
  uint64_t last = 0;
  uint64_t calls = 0;
  ~Sums() {
    if (calls == 0) return;
    fprintf(stderr, "psb-supervisor profile: %llu calls\n", static_cast<unsigned long long>(calls));
    for (int i = 0; i < kSteps; ++i) {
      if (n[i] == 0) continue;
      fprintf(stderr, "  %-13s %8llu x %8.2f us = %9.1f ms\n", kNames[i], static_cast<unsigned long long>(n[i]), ns[i] / 1e3 / n[i], ns[i] / 1e6);
    }
  }
};
inline thread_local Sums sums;

inline uint64_t Now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}
// Starts timing (the time since the last mark is dropped).
inline void Start() { sums.last = Now(); }
// Adds the time since the last mark to step s.
inline void Mark(Step s) {
  const uint64_t t = Now();
  sums.ns[s] += t - sums.last;
  sums.n[s] += 1;
  sums.last = t;
}

}  // namespace prof
}  // namespace psb
#define PSB_PROF_START() ::psb::prof::Start()
#define PSB_PROF_MARK(s) ::psb::prof::Mark(::psb::prof::s)
#define PSB_PROF_CALL() (++::psb::prof::sums.calls)
#else
#define PSB_PROF_START() ((void)0)
#define PSB_PROF_MARK(s) ((void)0)
#define PSB_PROF_CALL() ((void)0)
#endif
