// The supervisor's connect class (supervise_connect.cc): in Landlock mode with the proxy, the
// command's only TCP connections are ones the supervisor made to the managed proxy at
// 127.0.0.1:<port>, and the proxy serves only those (AdmitProxyPeer). The supervisor
// (supervisor.cc) calls these on its own thread; AdmitProxyPeer is called by the proxy, on any
// thread.
// Tests: see supervise_connect.cc.
#pragma once

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "notify_abi.h"

namespace psb {

// One sandbox's connect state: its proxy port and its blocking connects still under way.
struct ConnectClass;

// nullptr when out of memory.
ConnectClass* NewConnectClass(uint16_t proxy_port) noexcept;

// Answers one connect() notification (see supervise_connect.cc for the rules).
void HandleConnect(ConnectClass* c, int listener, const notify::SeccompNotif& n) noexcept;

// The sockets of blocking connects still under way, for the supervisor's poll(): fills at most
// max entries (events POLLOUT) and returns how many.
size_t ConnectPollFds(const ConnectClass* c, struct pollfd* out, size_t max) noexcept;

// Answers the waiting connects whose sockets poll() reported (fds as filled above, with revents).
void ConnectPollDone(ConnectClass* c, int listener, const struct pollfd* fds, size_t n) noexcept;

// The class's socket pair (see supervise_connect.cc, Threading), made by NewConnectClass on the
// host's thread: the sending end is the supervisor's, the receiving end the host's, which closes
// it (releasing what is still on its way) once the class has ended.
int ConnectSendEnd(const ConnectClass* c) noexcept;
int ConnectReceiveEnd(const ConnectClass* c) noexcept;

// On a thread of the host's fd table: closes the registry copies of connections that a
// supervisor dropped (they are in that table).
void ClosePeerLeftovers() noexcept;

// The supervisor ends: the connections made and not accepted yet are served no more, the
// connects under way are dropped (their calls fail once the listener is closed), c is freed.
void EndConnectClass(ConnectClass* c) noexcept;

// Landlock mode's proxy listener is on the host's 127.0.0.1:<proxy_port>. Whether the connection
// it accepted from 127.0.0.1:<peer_port> is the sandbox's own: with the connect supervisor
// (`supervised`), its peer socket must be one the supervisor made for this port (used up by this
// call); without it (the command connects itself), the peer socket must belong to this process's
// uid. False for anything else, or when the peer socket cannot be found (already closed).
bool AdmitProxyPeer(uint16_t proxy_port, uint16_t peer_port, bool supervised) noexcept;

}  // namespace psb
