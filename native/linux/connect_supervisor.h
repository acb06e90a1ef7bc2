// Landlock mode's connect supervisor: answers the seccomp user notifications of a sandbox's
// connect() calls (SeccompConfig::notify_connect), so that the command's only TCP connections are
// to the managed proxy at 127.0.0.1:<port>. See connect_supervisor.cc.
#pragma once

#include <stdint.h>
#include <uv.h>

#include <napi.h>

namespace psb {

// Takes ownership of listener_fd (the filter's notification fd) and serves it on env's loop until
// no task uses the filter any more (POLLHUP) or env is torn down. Never keeps the loop alive.
// Returns 0 or -errno (then listener_fd is closed, and every notified connect fails with ENOSYS).
int StartConnectSupervisor(napi_env env, uv_loop_t* loop, int listener_fd, uint16_t proxy_port) noexcept;

}  // namespace psb
