// Glue only: the Linux addon's table of entry points (binding_linux.h), and the small ones that
// are a call or two each: spawn (plan_parse.cc reads the plan, spawn_linux.cc spawns,
// exit_watch.cc watches), the Landlock-mode proxy's listener calls, closeOnPool and the
// directory watches (dir_watch.cc). Tests: test/native/addon.test.ts and every spawn.
#include <errno.h>
#include <fcntl.h>
#include <napi.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <string>
#include <utility>
#include <vector>

#include "../js_error.h"
#include "binding_linux.h"
#include "dir_watch.h"
#include "exit_watch.h"
#include "plan_args.h"
#include "plan_parse.h"
#include "pty_linux.h"
#include "relay.h"
#include "spawn_linux.h"
#include "stdio_adopt.h"
#include "supervision_process.h"
#include "supervisor/supervise_connect.h"
#include "supervisor/supervise_paths.h"
#include "supervisor/supervision_envelope.h"
#include "tree_walk.h"

namespace psb {

// native.spawn(plan, onExit) -> { pid, handle, fds, landlockAbi }
Napi::Value SpawnJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsObject() || !info[1].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.spawn(plan, onExit)");
  }
  Napi::Object o = info[0].As<Napi::Object>();
  LinuxSpawnPlan plan;
  SupervisorConfig supervisor;
  ParsePlan(env, o, &plan, &supervisor);
  StdioEnds ends;
  ParseStdio(env, GetArray(o, "stdio"), &plan.stdio, &ends);
  // The terminals the command starts with on fds 0-2: the ones its Landlock rules grant, and the
  // only ones the path supervisor opens for writing (never by its fd table at the time of a call).
  if (supervisor.paths.enabled && plan.landlock && plan.landlock_plan.stdio_terminals) {
    RecordStdioTerminals(&supervisor.paths, plan.stdio);
  }
  // Landlock mode with a supervision: spawned from the supervision's thread, confined by the
  // policy's outer envelope first (supervisor.h, StartSupervisionThread).
  LinuxSpawnResult res;
  SupervisionThread* on = nullptr;
  Status s = SpawnLinuxWhereSupervised(plan, &res, &on);
  if (!s.ok()) ThrowSandboxError(env, s);
  return WatchStarted(env, res, std::move(supervisor), info[1].As<Napi::Function>(), &ends,
                      plan.landlock ? plan.landlock_plan.abi : 0, on);
}

// native.listenLoopback() -> { fd, port }: a listener on 127.0.0.1 for Landlock mode's proxy.
Napi::Value ListenLoopbackJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint16_t port = 0;
  int fd = ListenLoopback(&port);
  if (fd < 0) ThrowSandboxError(env, Status::Sys(ErrorCode::kEPROXY_START, "listen(2) on 127.0.0.1 failed", "listen", -fd));
  Napi::Object o = Napi::Object::New(env);
  o.Set("fd", Napi::Number::New(env, fd));
  o.Set("port", Napi::Number::New(env, port));
  return o;
}

// native.admitProxyPeer(proxyPort, peerPort, supervised) -> whether the connection Landlock mode's
// host listener on 127.0.0.1:proxyPort accepted from 127.0.0.1:peerPort is the sandbox's own
// (supervise_connect.h). Never blocks: one netlink request the kernel answers as it is sent.
Napi::Value AdmitProxyPeerJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsBoolean()) {
    throw Napi::TypeError::New(env, "Usage: native.admitProxyPeer(proxyPort, peerPort, supervised)");
  }
  int proxy_port = info[0].As<Napi::Number>().Int32Value();
  int peer_port = info[1].As<Napi::Number>().Int32Value();
  if (proxy_port < 1 || proxy_port > 65535 || peer_port < 1 || peer_port > 65535) return Napi::Boolean::New(env, false);
  const bool supervised = info[2].As<Napi::Boolean>().Value();
  const uint16_t proxy = static_cast<uint16_t>(proxy_port), peer = static_cast<uint16_t>(peer_port);
  // A sandbox supervised by the supervision process: its connect class registered the peer there.
  return Napi::Boolean::New(env, AdmitProxyPeer(proxy, peer, supervised) ||
                                     (supervised && AdmitProxyPeerInSupervisionProcess(proxy, peer, supervised)));
}

// native.dropQueuedConnections(fd) -> how many connections were waiting on a listener, each
// accepted and closed at once, or -errno. Landlock mode's proxy listener is reachable from the
// whole host; one a sandbox prepared ahead has held while it waited may have queued connections
// from anything local, which the proxy would otherwise serve as the run's own. Called just before
// the command starts (it cannot connect before then). Never blocks: the listener is switched to
// non-blocking for the drain (a queued connection reset meanwhile would block accept), then back.
Napi::Value DropQueuedConnectionsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.dropQueuedConnections(fd)");
  int fd = info[0].As<Napi::Number>().Int32Value();
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return Napi::Number::New(env, -errno);
  int dropped = 0;
  for (;;) {
    int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) {
      close(c);
      ++dropped;
      continue;
    }
    // EAGAIN: none left. ECONNABORTED: one was reset while queued (gone already); go on.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    break;
  }
  int e = errno;
  fcntl(fd, F_SETFL, flags);
  if (e != EAGAIN && e != EWOULDBLOCK) return Napi::Number::New(env, -e);
  return Napi::Number::New(env, dropped);
}

// Closes `fd` on the libuv thread pool. For an fd that holds the last reference to an unlinked
// inode, close() frees the inode (about 70 us on ext4): removing through the path first and
// closing here keeps that off the JS thread. (Node's own fs.close may run inline on this thread:
// libuv submits it through io_uring.) If the work cannot be queued, it is closed at once.
void CloseOnPool(Napi::Env env, int fd) {
  uv_loop_t* loop = nullptr;
  uv_work_t* req = new uv_work_t;
  req->data = reinterpret_cast<void*>(static_cast<intptr_t>(fd));
  auto work = [](uv_work_t* r) { close(static_cast<int>(reinterpret_cast<intptr_t>(r->data))); };
  auto done = [](uv_work_t* r, int) { delete r; };
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || loop == nullptr || uv_queue_work(loop, req, work, done) != 0) {
    close(fd);
    delete req;
  }
}

// native.closeOnPool(fd): see CloseOnPool (the Landlock-mode TMPDIR, removed with an fd open).
Napi::Value CloseOnPoolJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.closeOnPool(fd)");
  int fd = info[0].As<Napi::Number>().Int32Value();
  if (fd >= 0) CloseOnPool(env, fd);
  return env.Undefined();
}

// native.dirWatchOpen() -> { fd, mountFd } (fd: -errno on failure); see dir_watch.h.
Napi::Value DirWatchOpenJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int mount_fd = -1;
  int fd = DirWatchOpen(&mount_fd);
  Napi::Object o = Napi::Object::New(env);
  o.Set("fd", Napi::Number::New(env, fd));
  o.Set("mountFd", Napi::Number::New(env, mount_fd));
  return o;
}

// native.dirWatchAdd(fd, dir) -> wd or -errno.
Napi::Value DirWatchAddJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsNumber() || !info[1].IsString()) throw Napi::TypeError::New(env, "Usage: native.dirWatchAdd(fd, dir)");
  std::string dir = info[1].As<Napi::String>().Utf8Value();
  return Napi::Number::New(env, DirWatchAdd(info[0].As<Napi::Number>().Int32Value(), dir.c_str()));
}

// native.dirWatchRemove(fd, wd).
Napi::Value DirWatchRemoveJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsNumber() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.dirWatchRemove(fd, wd)");
  DirWatchRemove(info[0].As<Napi::Number>().Int32Value(), info[1].As<Napi::Number>().Int32Value());
  return env.Undefined();
}

// native.dirWatchPoll(fd, mountFd) -> [wd, name, wd, name, ...] of the events since the last
// poll (name '' for the directory itself), or null: everything changed.
Napi::Value DirWatchPollJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsNumber() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.dirWatchPoll(fd, mountFd)");
  std::vector<std::pair<int, std::string>> changed;
  if (DirWatchPoll(info[0].As<Napi::Number>().Int32Value(), info[1].As<Napi::Number>().Int32Value(), &changed)) return env.Null();
  Napi::Array a = Napi::Array::New(env, changed.size() * 2);
  for (uint32_t i = 0; i < changed.size(); ++i) {
    a.Set(2 * i, Napi::Number::New(env, changed[i].first));
    a.Set(2 * i + 1, Napi::String::New(env, changed[i].second));
  }
  return a;
}

void InitPlatform(Napi::Env env, Napi::Object exports) {
  exports.Set("platform", "linux");
  exports.Set("spawn", Napi::Function::New(env, SpawnJs, "spawn"));
  exports.Set("spawnInSupervisionProcess", Napi::Function::New(env, SpawnInSupervisionProcessJs, "spawnInSupervisionProcess"));
  exports.Set("serveSupervision", Napi::Function::New(env, ServeSupervisionJs, "serveSupervision"));
  exports.Set("supervisionSocketpair", Napi::Function::New(env, SupervisionSocketpairJs, "supervisionSocketpair"));
  exports.Set("supervisionAttach", Napi::Function::New(env, SupervisionAttachJs, "supervisionAttach"));
  exports.Set("supervisionProcess", Napi::Function::New(env, SupervisionProcessJs, "supervisionProcess"));
  exports.Set("kill", Napi::Function::New(env, KillJs, "kill"));
  exports.Set("prepareSpare", Napi::Function::New(env, PrepareSpareJs, "prepareSpare"));
  exports.Set("admitProxyPeer", Napi::Function::New(env, AdmitProxyPeerJs, "admitProxyPeer"));
  exports.Set("dropQueuedConnections", Napi::Function::New(env, DropQueuedConnectionsJs, "dropQueuedConnections"));
  exports.Set("spawnSpare", Napi::Function::New(env, SpawnSpareJs, "spawnSpare"));
  exports.Set("discardSpare", Napi::Function::New(env, DiscardSpareJs, "discardSpare"));
  exports.Set("discardSpareAsync", Napi::Function::New(env, DiscardSpareAsyncJs, "discardSpareAsync"));
  exports.Set("setRef", Napi::Function::New(env, SetRefJs, "setRef"));
  exports.Set("probe", Napi::Function::New(env, ProbeJs, "probe"));
  exports.Set("listenLoopback", Napi::Function::New(env, ListenLoopbackJs, "listenLoopback"));
  exports.Set("lockPlaceholder", Napi::Function::New(env, LockPlaceholderJs, "lockPlaceholder"));
  exports.Set("releasePlaceholder", Napi::Function::New(env, ReleasePlaceholderJs, "releasePlaceholder"));
  exports.Set("removeLookalike", Napi::Function::New(env, RemoveLookalikeJs, "removeLookalike"));
  exports.Set("cgroupDelegated", Napi::Function::New(env, CgroupDelegatedJs, "cgroupDelegated"));
  exports.Set("closeOnPool", Napi::Function::New(env, CloseOnPoolJs, "closeOnPool"));
  exports.Set("dirWatchOpen", Napi::Function::New(env, DirWatchOpenJs, "dirWatchOpen"));
  exports.Set("dirWatchAdd", Napi::Function::New(env, DirWatchAddJs, "dirWatchAdd"));
  exports.Set("dirWatchRemove", Napi::Function::New(env, DirWatchRemoveJs, "dirWatchRemove"));
  exports.Set("dirWatchPoll", Napi::Function::New(env, DirWatchPollJs, "dirWatchPoll"));
  exports.Set("uidTaskCount", Napi::Function::New(env, UidTaskCountJs, "uidTaskCount"));
  exports.Set("xattr", Napi::Function::New(env, XattrJs, "xattr"));
  exports.Set("closeChangesJournal", Napi::Function::New(env, CloseChangesJournalJs, "closeChangesJournal"));
  exports.Set("mkfifo", Napi::Function::New(env, MkfifoJs, "mkfifo"));
  exports.Set("testPosixLock", Napi::Function::New(env, TestPosixLockJs, "testPosixLock"));
  exports.Set("testSkipPathChecks", Napi::Function::New(env, TestSkipPathChecksJs, "testSkipPathChecks"));
  exports.Set("testPlanWire", Napi::Function::New(env, TestPlanWireJs, "testPlanWire"));
  exports.Set("seccompSelfCheck", Napi::Function::New(env, SeccompSelfCheckJs, "seccompSelfCheck"));
  RegisterPty(env, exports);
  RegisterTreeWalk(env, exports);
  RegisterStdioAdopt(env, exports);
  RegisterRelay(env, exports);
}

}  // namespace psb
