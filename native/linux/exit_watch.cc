// The exit watch (exit_watch.h).
// Tests: test/linux/exit-delivery.test.ts (a throw while an exit is delivered); see exit_watch.h.
#include "exit_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <utility>

namespace psb {
namespace {

// Owns a spawned process until its exit has been delivered to JS, the process has been reaped,
// and JS dropped its handle. Isolated mode watches init's status pipe first (the command's status
// arrives there once every sandboxed process is dead), then reaps init from its pidfd without
// keeping JS waiting for the namespaces' teardown.
struct ChildWatch {
  uv_poll_t status_poll;
  uv_poll_t pid_poll;
  LinuxSpawnResult res;
  Napi::FunctionReference on_exit;
  bool exited = false;     // delivered to JS
  bool reaped = false;     // waited for; pidfd no longer usable for signals
  int refs = 1;            // the JS External, plus one per open poll handle
  bool status_open = false;  // status_poll is initialised and not yet closing
  bool pid_open = false;     // pid_poll likewise
  bool loop_ref = true;      // the polls keep the event loop alive (SandboxedProcess.ref/unref)
  // While a poll is open (or closing), an async cleanup hook holds a terminating env (a Worker)
  // until the sandbox is dead and reaped and the polls are closed: libuv refuses to close a loop
  // with open handles (an abort), and init runs on a stack this object unmaps.
  napi_async_cleanup_hook_handle cleanup = nullptr;
  int open_polls = 0;

  // Applies loop_ref to every open poll; polls opened later pick it up in StartPidPoll.
  void ApplyRef() {
    for (auto [open, poll] : {std::pair{status_open, &status_poll}, std::pair{pid_open, &pid_poll}}) {
      if (!open) continue;
      if (loop_ref) uv_ref(reinterpret_cast<uv_handle_t*>(poll));
      else uv_unref(reinterpret_cast<uv_handle_t*>(poll));
    }
  }

  void Unref() {
    if (--refs == 0) delete this;
  }
  // The process is reaped: nothing runs on init's stack any more, and no fd need outlive it even
  // while JS still holds the handle. (The pidfd itself is closed when its poll handle closes.)
  void Reaped() {
    reaped = true;
    ReleaseInitStack(&res);
    if (res.status_fd >= 0) close(res.status_fd);
    res.status_fd = -1;
  }
  ~ChildWatch() {
    ReleaseInitStack(&res);
    if (res.pidfd >= 0) close(res.pidfd);
    if (res.status_fd >= 0) close(res.status_fd);
  }
  void Deliver(int code, int sig) {
    if (exited) return;
    exited = true;
    Napi::Env env = on_exit.Env();
    Napi::HandleScope scope(env);
    Napi::Value jcode = code >= 0 ? Napi::Number::New(env, code) : env.Null();
    Napi::Value jsig = sig > 0 ? Napi::Number::New(env, sig) : env.Null();
    Napi::FunctionReference cb = std::move(on_exit);
    // Called from a libuv callback: a C++ exception escaping here terminates the host. MakeCallback
    // also runs the ticks and microtasks the exit released, i.e. the caller's code after
    // `await exited` (a next spawn, whose unlistened 'error' event throws from a tick): whatever
    // throws there is the host's uncaught exception, delivered as Node delivers its own.
    try {
      cb.MakeCallback(env.Global(), {jcode, jsig});
    } catch (const Napi::Error& e) {
      napi_fatal_exception(env, e.Value());
    }
  }
};

void OnPollClosed(uv_handle_t* h) {
  ChildWatch* w = static_cast<ChildWatch*>(h->data);
  if (h == reinterpret_cast<uv_handle_t*>(&w->pid_poll) && w->reaped && w->res.pidfd >= 0) {
    close(w->res.pidfd);  // libuv no longer watches it
    w->res.pidfd = -1;
  }
  if (--w->open_polls == 0 && w->cleanup != nullptr) {
    napi_remove_async_cleanup_hook(w->cleanup);
    w->cleanup = nullptr;
  }
  w->Unref();
}

void ClosePoll(uv_poll_t* p) {
  ChildWatch* w = static_cast<ChildWatch*>(p->data);
  if (p == &w->status_poll) w->status_open = false;
  if (p == &w->pid_poll) w->pid_open = false;
  uv_poll_stop(p);
  uv_close(reinterpret_cast<uv_handle_t*>(p), OnPollClosed);
}

void OnPidfdReadable(uv_poll_t* handle, int status, int) {
  ChildWatch* w = static_cast<ChildWatch*>(handle->data);
  int code = -1, sig = 0;
  if (status == 0 && !CollectExit(w->res, &code, &sig)) return;  // spurious wakeup
  ClosePoll(handle);
  w->Reaped();
  w->Deliver(code, sig);  // no-op when the status pipe already delivered the command's status
}

void StartPidPoll(ChildWatch* w, uv_loop_t* loop) {
  w->refs++;
  w->open_polls++;
  uv_poll_init(loop, &w->pid_poll, w->res.pidfd);
  w->pid_poll.data = w;
  w->pid_open = true;
  uv_poll_start(&w->pid_poll, UV_READABLE, OnPidfdReadable);
  w->ApplyRef();
}

void OnStatusReadable(uv_poll_t* handle, int status, int) {
  ChildWatch* w = static_cast<ChildWatch*>(handle->data);
  int code = -1, sig = 0;
  bool eof = false;
  bool got = status == 0 && ReadCommandStatus(w->res, &code, &sig, &eof);
  if (!got && !eof && status == 0) return;  // spurious wakeup
  uv_loop_t* loop = handle->loop;
  ClosePoll(handle);
  // Reap init in the background either way; without a report its own status is what we have.
  StartPidPoll(w, loop);
  if (got) w->Deliver(code, sig);
}

// The env (a Worker being terminated, or the main thread at exit) is going away while the
// sandbox may still run: kill it, wait for init (briefly: the tree's teardown), and close the
// polls without calling JS. Without this, a Worker's exit aborted the process.
void TeardownWatch(napi_async_cleanup_hook_handle, void* arg) {
  ChildWatch* w = static_cast<ChildWatch*>(arg);
  w->exited = true;  // nothing is delivered to JS any more
  w->on_exit.Reset();
  if (!w->reaped && w->res.pidfd >= 0) {
    SignalTree(w->res, SIGKILL);
    siginfo_t si;
    while (waitid(static_cast<idtype_t>(3 /* P_PIDFD */), w->res.pidfd, &si, WEXITED) < 0 && errno == EINTR) {
    }
    w->Reaped();
  }
  if (w->status_open) ClosePoll(&w->status_poll);
  if (w->pid_open) ClosePoll(&w->pid_poll);
}

}  // namespace

Napi::Value WatchStarted(Napi::Env env, const LinuxSpawnResult& res, SupervisorConfig&& supervisor,
                         const Napi::Function& on_exit, StdioEnds* ends, int landlock_abi,
                         SupervisionThread* on) {
  ChildWatch* w = new ChildWatch();
  w->res = res;
  const bool confined = on != nullptr;  // the supervision acts from inside its envelope
  uv_loop_t* loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  if (res.seccomp_listener_fd >= 0) {
    SetSandboxInit(&supervisor, res.pid, res.pidfd);
    // Isolated mode: the directories that hold placeholders, as the sandbox sees them now that
    // its mounts are made (and before the supervisor answers the command's first listing).
    if (supervisor.hide.enabled) ResolveHidden(&supervisor.hide, res.pid);
    // Owned by the supervisor from here on, whatever happens.
    const bool sandboxed = res.mode != LinuxMode::kPlain;
    int r = StartSupervisor(env, res.seccomp_listener_fd, std::move(supervisor), on, sandboxed ? res.pidfd : -1,
                            InitSignalFor(res.mode, SIGKILL));
    on = nullptr;
    w->res.seccomp_listener_fd = -1;
    if (r < 0) {
      // The command runs already: its connects would fail (ENOSYS), never leak. Stop it anyway.
      SignalTree(w->res, SIGKILL);
    }
  }
  if (on != nullptr) EndSupervisionThread(on);  // no listener: nothing to serve
  w->on_exit = Napi::Persistent(on_exit);
  // Before any poll exists (see ChildWatch::cleanup). If it cannot be added, the watch works as
  // before, without teardown on env exit.
  napi_add_async_cleanup_hook(env, TeardownWatch, w, &w->cleanup);
  if (res.status_fd >= 0) {
    w->refs++;
    w->open_polls++;
    uv_poll_init(loop, &w->status_poll, res.status_fd);
    w->status_poll.data = w;
    w->status_open = true;
    uv_poll_start(&w->status_poll, UV_READABLE, OnStatusReadable);
  } else {
    StartPidPoll(w, loop);
  }

  Napi::Object result = Napi::Object::New(env);
  result.Set("pid", Napi::Number::New(env, res.pid));
  result.Set("handle", Napi::External<ChildWatch>::New(env, w, [](Napi::Env, ChildWatch* cw) { cw->Unref(); }));
  Napi::Array fds = Napi::Array::New(env, ends->parent.size());
  for (uint32_t i = 0; i < ends->parent.size(); ++i) {
    int fd = ends->parent[i];
    fds.Set(i, fd >= 0 ? Napi::Value(Napi::Number::New(env, fd)) : env.Null());
    ends->parent[i] = -1;  // JS owns it now
  }
  result.Set("fds", fds);
  result.Set("landlockAbi", Napi::Number::New(env, landlock_abi));
  if (res.proxy_listener_fd >= 0) result.Set("listenerFd", Napi::Number::New(env, res.proxy_listener_fd));
  if (res.pty_master_fd >= 0) result.Set("ptyFd", Napi::Number::New(env, res.pty_master_fd));
  result.Set("sharedNetns", Napi::Boolean::New(env, res.shared_netns));
  if (res.seccomp_listener_fd >= 0) result.Set("supervisionConfined", Napi::Boolean::New(env, confined));
  return result;
}

// native.kill(handle, signal) -> 0 or -errno
Napi::Value KillJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsExternal() || !info[1].IsNumber()) {
    throw Napi::TypeError::New(env, "Usage: native.kill(handle, signal)");
  }
  ChildWatch* w = info[0].As<Napi::External<ChildWatch>>().Data();
  if (w->exited || w->reaped || w->res.pidfd < 0) return Napi::Number::New(env, -ESRCH);
  return Napi::Number::New(env, SignalTree(w->res, info[1].As<Napi::Number>().Int32Value()));
}

// native.setRef(handle, on): whether the exit watch keeps the event loop alive.
Napi::Value SetRefJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsExternal() || !info[1].IsBoolean()) {
    throw Napi::TypeError::New(env, "Usage: native.setRef(handle, on)");
  }
  ChildWatch* w = info[0].As<Napi::External<ChildWatch>>().Data();
  w->loop_ref = info[1].As<Napi::Boolean>().Value();
  w->ApplyRef();
  return env.Undefined();
}

}  // namespace psb
