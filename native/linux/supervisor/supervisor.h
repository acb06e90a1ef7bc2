// Landlock mode's syscall supervisor: answers the seccomp user notifications of a sandbox's
// filter, on a task of its own with an fd table of its own (supervisor.cc: the loop, its
// confinement, its lifetime, the dispatch). One file
// per class of calls it judges: connect() (SeccompConfig::notify_connect) is answered so that the
// command's only TCP connections are to the managed proxy at 127.0.0.1:<port>
// (supervise_connect.cc); metadata changes (SeccompConfig::notify_metadata) are carried out by
// the host only inside the writable roots (supervise_metadata.cc); inotify instances and watches
// are counted against the sandbox's share of the uid's limits (supervisor.cc); write-opens,
// creates, renames and removals are carried out outside read-only carve-outs only
// (supervise_paths.cc); below Landlock ABI 6, signals reach members of the sandbox only
// (supervise_signals.cc); with deny-read paths under readable roots, the stat family answers
// for a name inside a denied directory as for a missing one (supervise_stats.cc). Isolated mode
// supervises one class only: listings, which leave its placeholders' names out
// (supervise_metadata.cc, HideRules).
// Tests: see supervisor.cc and the class files.
#pragma once

#include <stdint.h>

#include <napi.h>

#include "../landlock.h"
#include "supervise_metadata.h"
#include "supervise_paths.h"
#include "supervise_reads.h"
#include "supervise_signals.h"
#include "supervise_stats.h"

namespace psb {

struct SupervisorConfig {
  uint16_t proxy_port = 0;  // 0: connect() is not supervised
  MetadataRules metadata;
  // Read-only carve-outs inside writable roots (supervise_paths.cc).
  PathRules paths;
  // Landlock mode below ABI 6: signals to members only (supervise_signals.cc).
  SignalRules signals;
  // Landlock mode with /proc privacy: read-only opens (supervise_reads.cc).
  ReadRules reads;
  // Landlock mode with deny-read paths under readable roots: the stat family (supervise_stats.cc).
  StatRules stats;
  // Isolated mode with placeholders: their names left out of listings (supervise_metadata.cc).
  HideRules hide;
  // Landlock mode's inotify caps: how many instances (inotify_init*) and watches
  // (inotify_add_watch) the sandbox may create in its lifetime. The kernel counts both per uid,
  // host included, and tells nobody when one is released, so creations are what is counted.
  bool inotify = false;
  uint32_t inotify_instances = 0, inotify_watches = 0;
  // changes: 'record': where the journal is to be opened (MaterializeSupervisor opens it; the
  // host has made the directory). Empty dir: none.
  struct JournalSpec {
    std::string dir;
    std::vector<std::string> roots, exclude;
    uint64_t max_bytes = 0;
  } journal_spec;
};

// Landlock mode: the sandbox's members are init's descendants (supervise_signals.cc); the
// classes that judge by membership get init's pid and a copy of its pidfd.
void SetSandboxInit(SupervisorConfig* config, pid_t init, int init_pidfd) noexcept;

// Takes ownership of listener_fd (the filter's notification fd) and serves it on a task of its
// own until no task uses the filter any more (POLLHUP) or env is torn down. Holds no handle on
// env's loop. Called on env's thread; returns without waiting for that task to set itself up
// (its fd table, the read opener): the command's notified calls wait on the listener until it
// serves. Returns 0 or -errno (the thread could not start: listener_fd is closed, and every
// notified call fails with ENOSYS). init_pidfd (copied) and kill_signal: what tears the sandbox
// down if the task's setup fails later (spawn_linux.h InitSignalFor); -1: nothing is sent, and
// the notified calls fail with ENOSYS all the same.
// `on`: the supervision thread the spawn ran on (StartSupervisionThread); the supervision is
// then served from it, inside its envelope, and it is used up either way. nullptr: a thread of
// its own, with the host's whole authority (a sandbox prepared ahead).
struct SupervisionThread;
int StartSupervisor(napi_env env, int listener_fd, SupervisorConfig config, SupervisionThread* on, int init_pidfd, int kill_signal) noexcept;

// Landlock mode: the thread that will carry the supervision, started before the spawn. It sets
// no_new_privs on itself and restricts itself with `envelope` (the policy's outer envelope,
// supervision_envelope.h) before anything else; the command is then spawned from it
// (RunOnSupervisionThread), so the command's own domain nests under the envelope and the
// supervision, confined, may still reach it (Landlock's ptrace rule). nullptr with *err = -errno
// when the thread could not start. `envelope` must live until RunOnSupervisionThread returns.
SupervisionThread* StartSupervisionThread(const LandlockPlan& envelope, int* err) noexcept;
// Runs fn on the thread once it has confined itself, and waits until fn has returned: 0; or
// -errno without running fn when the thread could not confine itself (it has ended, and t is
// gone).
int RunOnSupervisionThread(SupervisionThread* t, void (*fn)(void*), void* arg) noexcept;
// The spawn run on it succeeded: the thread outlives init (a copy of init_pidfd is taken), whose
// parent it is (supervisor.cc OutliveInit).
void SupervisionThreadSpawned(SupervisionThread* t, int init_pidfd) noexcept;
// Ends the thread without a supervision to serve (the spawn failed).
void EndSupervisionThread(SupervisionThread* t) noexcept;

}  // namespace psb
