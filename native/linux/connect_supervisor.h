// Landlock mode's syscall supervisor: answers the seccomp user notifications of a sandbox's
// filter on the host's loop. connect() (SeccompConfig::notify_connect) is answered so that the
// command's only TCP connections are to the managed proxy at 127.0.0.1:<port> (see
// connect_supervisor.cc); metadata changes (SeccompConfig::notify_metadata) are carried out by the
// host only inside the writable roots (see metadata_supervisor.cc).
#pragma once

#include <stdint.h>
#include <uv.h>

#include <napi.h>

#include "metadata_supervisor.h"

namespace psb {

// Takes ownership of listener_fd (the filter's notification fd) and serves it on env's loop until
// no task uses the filter any more (POLLHUP) or env is torn down. Never keeps the loop alive.
// proxy_port 0: connect() is not supervised. Returns 0 or -errno (then listener_fd is closed,
// and every notified call fails with ENOSYS).
int StartSupervisor(napi_env env, uv_loop_t* loop, int listener_fd, uint16_t proxy_port, MetadataRules metadata) noexcept;

}  // namespace psb
