// Tunnel relay for the managed proxy. Once the proxy has allowed a CONNECT, SOCKS5 or WebSocket
// tunnel, the bytes move between the two sockets here, in C++: recv() into a per-direction buffer
// and send() out of it, driven by uv_poll handles on the JS thread's loop (level-triggered, like
// every libuv watcher). No thread per tunnel and no trip through JS streams, which capped the
// proxy at a fraction of a direct transfer.
//
// Why copying and not splice(2): measured on loopback (Linux 6.x, 2 vCPUs, bench/proxy.js and
// minimal C relays), splice through a pipe was the SLOWER relay: it halves the proxy's CPU (no
// copies), but the receiving client then spends 1.4-1.7x the CPU per byte, and the client, not the
// proxy, is the bottleneck. Why (perf, Linux 6.18): splice-to-socket appends the pipe's pages one
// 4 KiB page at a time (skb_splice_from_iter; tail pages of a compound page do not coalesce), so
// each 64 KiB skb the client receives has 16 fragments instead of the 2-3 of a copy's 32 KiB page
// frags; recv() then runs the usercopy check and copy loop per fragment, and copies data that sat
// untouched in two socket queues and the pipe (cold). Re-measured with 1 MiB pipes
// (F_SETPIPE_SZ), SPLICE_F_MORE, SPLICE_F_MOVE, SO_RCVLOWAT 256 KiB, reno: the client stayed at
// 1.4-1.8x; with a 256 KiB SO_SNDBUF it fell to 1.05x, but the proxy's CPU rose above a copy's.
// A 256 KiB buffer cost ~30% more proxy CPU than 1 MiB; 2-4 MiB cut
// the proxy's 13-32% but raised the client's by 2-20% (more data in flight, colder), so no gain.
// A dedicated relay thread (one edge-triggered epoll for all tunnels, C prototype) measured the
// same as this loop while the JS thread is free: the relay's cost is in the kernel (the two copies
// are ~40% of it, the rest TCP and waking the peers), and its syscalls per MB are already few
// (~1.5 recv, ~1.6 send, ~1 epoll_wait), so the relay stays on the loop, with libuv's own
// teardown (no thread to join, no cross-thread hand-off of onDone). The cost: a host whose JS
// thread is saturated slows its tunnels (JS busy in 4 ms slices: about 0.8x the prototype's
// median); moving the relay to such a thread is the next step if that matters. What did help is
// tuning the loopback sockets (TuneLoopback below).
//
//   h = relay(fdA, fdB, prefixAtoB, prefixBtoA, idleMs, onDone(err, bytesAtoB, bytesBtoA))
//   relayClose(h)   // tears the tunnel down; onDone runs once, with "closed"
//
// A counted body (a plain-HTTP response whose head JS has parsed and written):
//   h = relay(fdA, fdB, null, null, idleMs, onDone, /* held */ true)   // dups the fds; moves nothing
//   relayStart(h, length)   // moves exactly `length` bytes A->B, then onDone(null, length, 0)
// One way only (B->A is not read), and neither socket is shut down: the connection to B carries
// more after the body, written by JS once onDone ran. EOF from A before `length` is an error.
//
// Ownership: relay() duplicates both fds (F_DUPFD_CLOEXEC) and owns the duplicates; the caller
// then destroys its own sockets at once, in the same tick (libuv drops its epoll registration and
// closes its fd synchronously in uv_close, so nothing else reads the sockets after that). The
// connections stay open because the duplicates still reference them; they close when the relay
// closes its duplicates, after the poll handles are closed (libuv must stop watching an fd before
// it is closed).
//
// Semantics: a half-close passes through (EOF from one side becomes shutdown(SHUT_WR) on the
// other once that direction's buffer is drained); the relay ends when both directions are shut, on
// an error on either side (after moving whatever can still be moved), on idleMs without activity,
// on relayClose(), and when the Node environment is torn down (then without calling onDone).
// onDone is never called from inside relay() itself: a tunnel that is already finished when it is
// set up reports on the next loop turn. Every send() has MSG_NOSIGNAL: a peer that went away is
// an error for this tunnel, never a SIGPIPE for the host (whatever its SIGPIPE disposition).
//
// Threading: everything runs on the thread of the env that created the relay.
// Tests: test/network/relay.test.ts, test/network/chain.test.ts (tunnels in both relay modes).
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <napi.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <atomic>
#include <memory>
#include <new>
#include <string>

#include "relay.h"

namespace psb {
namespace {

// Memory: a direction reads into a kSmallBuffer, allocated for the read and freed again as soon
// as the direction is drained and its socket has nothing more (idle and chatty tunnels, most of
// them, hold no buffer between bursts). The first time one read fills it (a bulk transfer), the
// direction takes a kBulkBuffer, if the process-wide kBulkBudget has room (every env, Workers
// included, shares it), and keeps it until the tunnel ends or stays idle for a timer tick
// (idleMs / 4). So a sandbox opening many tunnels pins at most 64 KiB per direction and the host
// at most 64 MiB of bulk buffers in all (as the splice relay's pipes were bounded by the kernel's
// pipe-user-pages-soft); each socket's own kernel buffers are larger than either.
constexpr size_t kSmallBuffer = 64 << 10;
constexpr size_t kBulkBuffer = 1 << 20;
constexpr size_t kBulkBudget = 64 << 20;
std::atomic<size_t> g_bulk_bytes{0};
// Bounded reads per wakeup keep one busy tunnel from starving the rest of the loop.
constexpr int kMaxReadsPerWakeup = 8;

// Reserves one kBulkBuffer in the process-wide budget.
bool TakeBulk() {
  size_t cur = g_bulk_bytes.load(std::memory_order_relaxed);
  while (cur + kBulkBuffer <= kBulkBudget) {
    if (g_bulk_bytes.compare_exchange_weak(cur, cur + kBulkBuffer, std::memory_order_relaxed)) return true;
  }
  return false;
}

// Tags the External so relayClose() never casts someone else's External.
constexpr napi_type_tag kRelayTag = {0x7073625f72656c61ULL, 0x795f68616e646c65ULL};

struct Side {
  uv_poll_t poll;
  int fd = -1;
  int events = 0;  // what the poll currently waits for
  bool poll_open = false;
};

// Bytes flowing from side `from` to side `to`, through buf[off, len).
struct Dir {
  int from = 0, to = 1;
  std::unique_ptr<char[]> buf;
  size_t cap = 0, off = 0, len = 0;
  bool bulk = false;  // holds a kBulkBuffer reservation (reads use kBulkBuffer)
  bool eof = false;   // `from` will send nothing more
  bool shut = false;  // `to` got shutdown(SHUT_WR)
  bool want_read = false, want_write = false;
  double bytes = 0;
  // A counted direction (relayStart): reads stop at `remaining`; done once it is 0 and all is sent.
  bool counted = false, done = false;
  double remaining = 0;
  bool disabled = false;  // not relayed at all (B->A of a counted body)
};

// Frees the direction's buffer (its unsent bytes, if any, are dropped) and its bulk reservation.
void ReleaseBuffer(Dir& d) {
  if (d.bulk) g_bulk_bytes.fetch_sub(kBulkBuffer, std::memory_order_relaxed);
  d.bulk = false;
  d.buf.reset();
  d.cap = d.off = d.len = 0;
}

struct Relay {
  napi_env env = nullptr;
  Side side[2];
  Dir dir[2];
  uv_timer_t timer;
  bool timer_open = false;
  uv_idle_t later;  // reports a tunnel that finished during relay() on the next loop turn
  bool later_open = false;
  uint64_t idle_ms = 0;
  uint64_t last_activity = 0;
  Napi::FunctionReference on_done;
  std::string error;
  bool finished = false;
  bool report_pending = false;  // finished, onDone not called yet
  bool in_setup = true;         // inside relay(): never call onDone from there
  bool held = false;            // relay(..., held): nothing moves until relayStart()
  // While any uv handle of ours is open (or closing), an async cleanup hook keeps a terminating
  // env (a Worker) from unloading the addon: libuv would otherwise call OnHandleClosed in
  // unmapped code. The hook is removed when the last handle has closed.
  napi_async_cleanup_hook_handle cleanup = nullptr;
  bool tearing_down = false;
  int open_handles = 0;
  int refs = 1;  // the JS External, plus one per open uv handle

  void Unref() {
    if (--refs == 0) delete this;
  }
  ~Relay() {
    for (Dir& d : dir) ReleaseBuffer(d);
    for (Side& s : side) {
      if (s.fd >= 0) close(s.fd);
    }
  }
};

void OnHandleClosed(uv_handle_t* h) {
  Relay* r = static_cast<Relay*>(h->data);
  for (Side& s : r->side) {
    // The poll handle is closed: libuv no longer watches the fd, so it may be closed now.
    if (h == reinterpret_cast<uv_handle_t*>(&s.poll) && s.fd >= 0) {
      close(s.fd);
      s.fd = -1;
    }
  }
  if (--r->open_handles == 0 && r->cleanup) {
    napi_remove_async_cleanup_hook(r->cleanup);
    r->cleanup = nullptr;
  }
  r->Unref();
}

void CloseHandle(Relay* r, uv_handle_t* h) {
  h->data = r;
  uv_close(h, OnHandleClosed);
}

// Calls onDone. From relayClose() an exception thrown by onDone propagates to the JS caller; from
// a libuv callback it becomes an uncaught exception (a C++ exception escaping into libuv would
// terminate the process).
void Report(Relay* r, bool from_js = false) {
  if (!r->report_pending || r->on_done.IsEmpty()) return;
  r->report_pending = false;
  Napi::Env env(r->env);
  Napi::HandleScope scope(env);
  Napi::FunctionReference cb = std::move(r->on_done);
  try {
    Napi::Value err = r->error.empty() ? env.Null() : Napi::String::New(env, r->error);
    // MakeCallback: outside JS it also runs the microtasks the callback queued.
    cb.MakeCallback(env.Global(), {err, Napi::Number::New(env, r->dir[0].bytes), Napi::Number::New(env, r->dir[1].bytes)});
  } catch (const Napi::Error& e) {
    if (from_js) throw;
    napi_fatal_exception(env, e.Value());
  }
}

void OnLater(uv_idle_t* h) {
  Relay* r = static_cast<Relay*>(h->data);
  uv_idle_stop(h);
  r->later_open = false;
  CloseHandle(r, reinterpret_cast<uv_handle_t*>(h));
  Report(r);
}

// Stops everything and releases the fds (the sockets' duplicates after their polls are closed).
// Calls onDone unless the env is going away or we are still inside relay().
void Finish(Relay* r, const char* error, bool call_js = true, bool from_js = false) {
  if (r->finished) return;
  r->finished = true;
  if (error && error != r->error.c_str()) r->error = error;
  if (r->timer_open) {
    uv_timer_stop(&r->timer);
    r->timer_open = false;
    CloseHandle(r, reinterpret_cast<uv_handle_t*>(&r->timer));
  }
  for (Side& s : r->side) {
    if (!s.poll_open) continue;
    uv_poll_stop(&s.poll);
    s.poll_open = false;
    CloseHandle(r, reinterpret_cast<uv_handle_t*>(&s.poll));
  }
  for (Dir& d : r->dir) ReleaseBuffer(d);
  if (!call_js) {
    r->on_done.Reset();
    return;
  }
  r->report_pending = true;
  if (!r->in_setup) return Report(r, from_js);
  uv_loop_t* loop = nullptr;
  napi_get_uv_event_loop(r->env, &loop);
  if (loop && uv_idle_init(loop, &r->later) == 0) {
    r->later.data = r;
    r->later_open = true;
    r->refs++;
    r->open_handles++;
    uv_idle_start(&r->later, OnLater);
  }
}

// The env (main thread at exit, or a worker being terminated) is going away: release the kernel
// objects and the uv handles, and call no JS. The env waits until OnHandleClosed removes the hook.
void TeardownHook(napi_async_cleanup_hook_handle, void* arg) {
  Relay* r = static_cast<Relay*>(arg);
  r->tearing_down = true;
  if (r->later_open) {
    uv_idle_stop(&r->later);
    r->later_open = false;
    CloseHandle(r, reinterpret_cast<uv_handle_t*>(&r->later));
  }
  r->report_pending = false;
  Finish(r, "closed", false);
  r->on_done.Reset();
}

// Loopback sockets (the client's side of every tunnel, and an upstream on this host) are tuned for
// a link that has no congestion and no loss. Measured with bench/proxy.js, CONNECT 300 MB, both
// settings against neither, interleaved, 15 rounds at load 6: proxy CPU per GB 346-352 ms against
// 428-453 (-19-22%), the client's 425-494 against 525-542 (-6-22%).
// - TCP_CONGESTION "reno": where the host's default is a pacing algorithm (BBR, as on the test VM
//   and many servers), every send() was paced: tcp_write_xmit arms an hrtimer per burst and the
//   rest goes out from a timer softirq. Pacing has nothing to pace on loopback. Reno is the one
//   algorithm any user may set (TCP_CONG_NON_RESTRICTED); a remote socket keeps the host's choice.
//   Alone: proxy CPU per GB -13-16%, the client's -4-6%.
// - SO_SNDBUF 512 KiB (the kernel doubles it; autotuning grows it to several MiB): the client
//   reads what the relay has just written instead of megabytes queued earlier, already out of
//   its cache. Alone: the client's CPU per GB -13-20%, the proxy's -1 to +7%. (Half that cost
//   the proxy +19%; a 2-4 MiB bulk buffer cut the proxy's CPU 13-32% but raised the client's
//   2-20%, no gain in all.)
// Failures (not TCP, an old kernel) change nothing.
void TuneLoopback(int fd) {
  sockaddr_storage local;
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return;
  bool loopback = false;
  if (local.ss_family == AF_INET) {
    loopback = (ntohl(reinterpret_cast<sockaddr_in*>(&local)->sin_addr.s_addr) >> 24) == 127;
  } else if (local.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr;
    loopback = IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  if (!loopback) return;
  static const char kReno[] = "reno";
  setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, kReno, sizeof(kReno) - 1);
  const int sndbuf = 512 << 10;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
}

std::string ErrorText(const char* op, int err) {
  return std::string(op) + ": " + uv_err_name(-err);
}

// The pending error of a socket (SO_ERROR), or 0.
int SocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return 0;
  return err;
}

// Moves what it can in one direction. Returns false on a hard error (r->error says which); else
// want_read / want_write say what to wait for.
bool Pump(Relay* r, Dir& d) {
  const int from = r->side[d.from].fd, to = r->side[d.to].fd;
  d.want_read = d.want_write = false;
  if (d.disabled || d.done) return true;
  int reads = 0;
  for (;;) {
    if (d.off < d.len) {
      ssize_t n = send(to, d.buf.get() + d.off, d.len - d.off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        d.off += static_cast<size_t>(n);
        d.bytes += static_cast<double>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        d.want_write = true;
        return true;
      }
      r->error = ErrorText("write", n < 0 ? errno : EPIPE);
      return false;
    }
    if (d.counted && d.remaining == 0) {
      d.done = true;  // all of it sent; `to` stays open for what follows the body
      return true;
    }
    if (d.eof) {
      if (!d.shut) {
        shutdown(to, SHUT_WR);  // an error here shows up on the next read or write of `to`
        d.shut = true;
      }
      return true;
    }
    // Out of reads for this wakeup: the level-triggered poll brings us straight back. The buffer is
    // empty here and EOF is handled above, so nothing but a read can be pending (waiting for
    // nothing here would stall the direction until the idle timeout).
    if (reads++ == kMaxReadsPerWakeup) {
      d.want_read = true;
      return true;
    }
    const size_t size = d.bulk ? kBulkBuffer : kSmallBuffer;
    if (d.cap != size) {  // none yet, freed while idle, a prefix's size, or just went bulk
      d.buf.reset(new (std::nothrow) char[size]);
      d.cap = d.buf ? size : 0;
      if (!d.buf) {
        r->error = "read: ENOMEM";
        return false;
      }
    }
    d.off = d.len = 0;
    // A counted direction never reads past its end: what follows belongs to the next message.
    const size_t want = d.counted && d.remaining < static_cast<double>(d.cap) ? static_cast<size_t>(d.remaining) : d.cap;
    ssize_t n = recv(from, d.buf.get(), want, MSG_DONTWAIT);
    if (n > 0) {
      d.len = static_cast<size_t>(n);
      if (d.counted) d.remaining -= static_cast<double>(n);
      if (d.len == d.cap && !d.bulk) d.bulk = TakeBulk();
      continue;
    }
    if (n == 0) {
      if (d.counted) {
        r->error = "read: EOF before the end of the body";
        return false;
      }
      d.eof = true;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!d.bulk) {  // drained and nothing to read: hold no buffer while waiting
        d.buf.reset();
        d.cap = 0;
      }
      d.want_read = true;
      return true;
    }
    r->error = ErrorText("read", errno);
    return false;
  }
}

void OnPoll(uv_poll_t* handle, int status, int events);

void Step(Relay* r) {
  if (r->finished || r->held) return;
  for (Dir& d : r->dir) {
    if (!Pump(r, d)) return Finish(r, r->error.c_str());
  }
  if (r->dir[0].shut && r->dir[1].shut) return Finish(r, nullptr);
  if (r->dir[0].done) return Finish(r, nullptr);
  for (int i = 0; i < 2; i++) {
    Side& s = r->side[i];
    int ev = 0;
    for (const Dir& d : r->dir) {
      if (d.from == i && d.want_read) ev |= UV_READABLE;
      if (d.to == i && d.want_write) ev |= UV_WRITABLE;
    }
    if (ev == s.events) continue;
    s.events = ev;
    int rc = ev != 0 ? uv_poll_start(&s.poll, ev, OnPoll) : uv_poll_stop(&s.poll);
    if (rc != 0) return Finish(r, ErrorText("poll", -rc).c_str());
  }
}

void OnPoll(uv_poll_t* handle, int status, int) {
  // Both polls and the timer point at the Relay; either side's event may unblock either direction.
  Relay* r = static_cast<Relay*>(handle->data);
  if (r->finished) return;
  r->last_activity = uv_now(handle->loop);
  if (status < 0) {
    // libuv reports POLLERR (a reset, typically) as an error and stops this poll. Move what can
    // still be moved (data that arrived before the reset), then end the tunnel.
    Side* s = &r->side[0].poll == handle ? &r->side[0] : &r->side[1];
    s->events = 0;
    int err = SocketError(s->fd);
    Step(r);
    if (!r->finished) Finish(r, err != 0 ? ErrorText("socket", err).c_str() : ErrorText("poll", -status).c_str());
    return;
  }
  Step(r);
}

void OnTimer(uv_timer_t* t) {
  Relay* r = static_cast<Relay*>(t->data);
  if (r->finished) return;
  const uint64_t quiet = uv_now(t->loop) - r->last_activity;
  if (quiet >= r->idle_ms) return Finish(r, "idle");
  // Quiet for a whole tick: drained directions give their (bulk) buffers back.
  if (quiet >= uv_timer_get_repeat(t)) {
    for (Dir& d : r->dir) {
      if (d.off == d.len) ReleaseBuffer(d);
    }
  }
}

Relay* FromExternal(const Napi::CallbackInfo& info) {
  Napi::Value v = info.Length() > 0 ? info[0] : info.Env().Undefined();
  bool tagged = false;
  if (v.IsExternal()) napi_check_object_type_tag(info.Env(), v, &kRelayTag, &tagged);
  if (!tagged) throw Napi::TypeError::New(info.Env(), "Expected a relay handle");
  return v.As<Napi::External<Relay>>().Data();
}

std::string BufferOrEmpty(const Napi::Value& v) {
  if (v.IsNull() || v.IsUndefined()) return {};
  if (!v.IsBuffer()) throw Napi::TypeError::New(v.Env(), "Expected a Buffer or null");
  auto b = v.As<Napi::Buffer<char>>();
  return std::string(b.Data(), b.Length());
}

Napi::Value RelayJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 6 || !info[0].IsNumber() || !info[1].IsNumber() || !info[4].IsNumber() || !info[5].IsFunction()) {
    throw Napi::TypeError::New(env, "relay(fdA, fdB, prefixAtoB, prefixBtoA, idleMs, onDone[, held])");
  }
  const bool held = info.Length() > 6 && info[6].ToBoolean().Value();
  const int fds[2] = {info[0].As<Napi::Number>().Int32Value(), info[1].As<Napi::Number>().Int32Value()};
  const double idle = info[4].As<Napi::Number>().DoubleValue();
  if (!(idle > 0) || idle > 1e12) throw Napi::TypeError::New(env, "relay: idleMs must be a positive number");
  for (int fd : fds) {
    int type = 0;
    socklen_t len = sizeof(type);
    // Only stream sockets: shutdown(SHUT_WR) carries a half-close, and anything else is a caller bug.
    if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
      throw Napi::TypeError::New(env, "relay: both fds must be connected stream sockets");
    }
  }
  if (fds[0] == fds[1]) throw Napi::TypeError::New(env, "relay: the two fds must differ");
  std::string prefix[2] = {BufferOrEmpty(info[2]), BufferOrEmpty(info[3])};
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || loop == nullptr) throw Napi::Error::New(env, "relay: no event loop");

  auto* r = new Relay();
  r->env = env;
  r->held = held;
  for (int i = 0; i < 2; i++) {
    // Bytes the caller had already read from side i go out first: they start that direction's buffer.
    if (prefix[i].empty()) continue;
    r->dir[i].cap = r->dir[i].len = prefix[i].size();
    r->dir[i].buf.reset(new char[r->dir[i].cap]);
    memcpy(r->dir[i].buf.get(), prefix[i].data(), prefix[i].size());
  }
  r->dir[1].from = 1;
  r->dir[1].to = 0;
  r->idle_ms = static_cast<uint64_t>(idle);
  // Before any uv handle exists (see Relay::cleanup).
  if (napi_add_async_cleanup_hook(env, TeardownHook, r, &r->cleanup) != napi_ok) {
    delete r;
    throw Napi::Error::New(env, "relay: napi_add_async_cleanup_hook failed");
  }
  std::string failed;
  for (int i = 0; i < 2 && failed.empty(); i++) {
    r->side[i].fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
    if (r->side[i].fd < 0) {
      failed = ErrorText("dup", errno);
      break;
    }
    TuneLoopback(r->side[i].fd);
  }
  for (int i = 0; i < 2 && failed.empty(); i++) {
    int rc = uv_poll_init(loop, &r->side[i].poll, r->side[i].fd);
    if (rc != 0) {
      failed = ErrorText("uv_poll_init", -rc);
      break;
    }
    r->side[i].poll.data = r;
    r->side[i].poll_open = true;
    r->refs++;
    r->open_handles++;
  }
  if (failed.empty()) {
    int rc = uv_timer_init(loop, &r->timer);
    if (rc != 0) failed = ErrorText("uv_timer_init", -rc);
  }
  if (!failed.empty()) {
    // Open poll handles must be closed through libuv; the Relay (and the fds) go with the last one.
    for (Side& s : r->side) {
      if (!s.poll_open) continue;
      s.poll_open = false;
      CloseHandle(r, reinterpret_cast<uv_handle_t*>(&s.poll));
    }
    r->finished = true;
    if (r->open_handles == 0) {
      napi_remove_async_cleanup_hook(r->cleanup);
      r->cleanup = nullptr;
    }
    r->Unref();
    throw Napi::Error::New(env, "relay: " + failed);
  }
  r->timer.data = r;
  r->timer_open = true;
  r->refs++;
  r->open_handles++;
  r->last_activity = uv_now(loop);
  uint64_t tick = r->idle_ms / 4 > 0 ? r->idle_ms / 4 : 1;
  uv_timer_start(&r->timer, OnTimer, tick, tick);
  r->on_done = Napi::Persistent(info[5].As<Napi::Function>());
  auto handle = Napi::External<Relay>::New(env, r, [](Napi::Env, Relay* rel) { rel->Unref(); });
  napi_type_tag_object(env, handle, &kRelayTag);
  Step(r);  // prefixes, and whatever is already buffered in the kernel
  r->in_setup = false;
  return handle;
}

Napi::Value RelayStartJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Relay* r = FromExternal(info);
  if (info.Length() < 2 || !info[1].IsNumber()) throw Napi::TypeError::New(env, "relayStart(handle, length)");
  const double length = info[1].As<Napi::Number>().DoubleValue();
  if (!(length >= 0) || length > 9007199254740991.0 || length != static_cast<double>(static_cast<int64_t>(length))) {
    throw Napi::TypeError::New(env, "relayStart: length must be a non-negative integer");
  }
  if (!r->held || r->finished) return Napi::Boolean::New(env, false);
  r->held = false;
  r->dir[0].counted = true;
  r->dir[0].remaining = length;
  r->dir[1].disabled = true;
  r->last_activity = uv_now(r->timer.loop);
  r->in_setup = true;  // a body already complete reports on the next loop turn, as in relay()
  Step(r);
  r->in_setup = false;
  return Napi::Boolean::New(env, true);
}

Napi::Value RelayCloseJs(const Napi::CallbackInfo& info) {
  Relay* r = FromExternal(info);
  bool was_open = !r->finished;
  Finish(r, "closed", true, true);
  return Napi::Boolean::New(info.Env(), was_open);
}

}  // namespace

void RegisterRelay(Napi::Env env, Napi::Object exports) {
  exports.Set("relay", Napi::Function::New(env, RelayJs, "relay"));
  exports.Set("relayStart", Napi::Function::New(env, RelayStartJs, "relayStart"));
  exports.Set("relayClose", Napi::Function::New(env, RelayCloseJs, "relayClose"));
}

}  // namespace psb
