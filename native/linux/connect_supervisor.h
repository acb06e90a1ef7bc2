// Landlock mode's syscall supervisor: answers the seccomp user notifications of a sandbox's
// filter on the host's loop. connect() (SeccompConfig::notify_connect) is answered so that the
// command's only TCP connections are to the managed proxy at 127.0.0.1:<port> (see
// connect_supervisor.cc); metadata changes (SeccompConfig::notify_metadata) are carried out by the
// host only inside the writable roots (see metadata_supervisor.cc); below Landlock ABI 6, signal
// calls (SeccompConfig::notify_signals) reach members of the sandbox only (supervise_signals.cc);
// inotify instances and watches are counted against the sandbox's share of the uid's limits.
#pragma once

#include <stdint.h>
#include <uv.h>

#include <napi.h>

#include "metadata_supervisor.h"
#include "supervise_signals.h"

namespace psb {

struct SupervisorConfig {
  uint16_t proxy_port = 0;  // 0: connect() is not supervised
  MetadataRules metadata;
  // Landlock mode's inotify caps: how many instances (inotify_init*) and watches
  // (inotify_add_watch) the sandbox may create in its lifetime. The kernel counts both per uid,
  // host included, and tells nobody when one is released, so creations are what is counted.
  bool inotify = false;
  uint32_t inotify_instances = 0, inotify_watches = 0;
  // Landlock mode below ABI 6: signals to members only (supervise_signals.cc).
  SignalRules signals;
};

// Takes ownership of listener_fd (the filter's notification fd) and serves it on env's loop until
// no task uses the filter any more (POLLHUP) or env is torn down. Never keeps the loop alive.
// Returns 0 or -errno (then listener_fd is closed, and every notified call fails with ENOSYS).
int StartSupervisor(napi_env env, uv_loop_t* loop, int listener_fd, SupervisorConfig config) noexcept;

// Landlock mode's proxy listener is on the host's 127.0.0.1:<proxy_port>. Whether the connection
// it accepted from 127.0.0.1:<peer_port> is the sandbox's own: with the connect supervisor
// (`supervised`), its peer socket must be one the supervisor made for this port (used up by this
// call); without it (the command connects itself), the peer socket must belong to this process's
// uid. False for anything else, or when the peer socket cannot be found (already closed).
bool AdmitProxyPeer(uint16_t proxy_port, uint16_t peer_port, bool supervised) noexcept;

}  // namespace psb
