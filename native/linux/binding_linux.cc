// Glue only: converts the TS plan (lib/platform/linux.ts) into LinuxSpawnPlan, spawns, and watches
// the exit through the process's pidfd on the libuv loop (no thread per child).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <napi.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../addon_data.h"
#include "../js_error.h"
#include "supervise_connect.h"
#include "supervisor.h"
#include "task_access.h"
#include "dir_watch.h"
#include "landlock.h"
#include "proc_fields.h"
#include "pty_linux.h"
#include "relay.h"
#include "seccomp.h"
#include "spawn_linux.h"
#include "stdio_adopt.h"
#include "syscall_numbers.h"
#include "tree_walk.h"

namespace psb {
namespace {

std::string GetString(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsString()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be a string");
  std::string s = v.As<Napi::String>().Utf8Value();
  // A NUL would silently truncate the path the kernel sees.
  if (s.find('\0') != std::string::npos) {
    throw Napi::TypeError::New(o.Env(), std::string("plan.") + key + " contains a NUL byte");
  }
  return s;
}

Napi::Array GetArray(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsArray()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be an array");
  return v.As<Napi::Array>();
}

Napi::Object GetObjectAt(const Napi::Array& a, uint32_t i, const char* what) {
  Napi::Value v = a.Get(i);
  if (!v.IsObject()) throw Napi::TypeError::New(a.Env(), std::string("Expected ") + what + " entries to be objects");
  return v.As<Napi::Object>();
}

std::vector<std::string> GetStrings(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsArray()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be an array");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<std::string> out;
  out.reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value e = a.Get(i);
    if (!e.IsString()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to hold strings");
    std::string s = e.As<Napi::String>().Utf8Value();
    if (s.find('\0') != std::string::npos) {
      throw Napi::TypeError::New(o.Env(), std::string("plan.") + key + " contains a NUL byte");
    }
    out.push_back(std::move(s));
  }
  return out;
}

double GetNumber(const Napi::Object& o, const char* key, double def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return def;
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be a number");
  return v.As<Napi::Number>().DoubleValue();
}

bool GetBool(const Napi::Object& o, const char* key, bool def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return def;
  if (!v.IsBoolean()) throw Napi::TypeError::New(o.Env(), std::string("Expected plan.") + key + " to be a boolean");
  return v.As<Napi::Boolean>().Value();
}

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

void FillLandlock(Napi::Env env, const Napi::Object& o, LandlockPlan* ll) {
  int abi = LandlockAbi();
  if (abi <= 0) {
    ThrowSandboxError(env, Status::Error(ErrorCode::kELANDLOCK_UNSUPPORTED,
                                         "Landlock is not available on this kernel (needs Linux 5.13+ with "
                                         "CONFIG_SECURITY_LANDLOCK and lsm=landlock)"));
  }
  ll->abi = abi;
  ll->handled_fs = LandlockHandledFs(abi);
  std::string net = GetString(o, "net");
  if (abi >= 4 && net != "full") ll->handled_net = landlock::kNetBindTcp | landlock::kNetConnectTcp;
  if (abi >= 6) {
    if (GetBool(o, "scopeSignals", true)) ll->scoped |= landlock::kScopeSignal;
    if (net != "full") ll->scoped |= landlock::kScopeAbstractUnix;
  }
  Napi::Array rules = GetArray(o, "rules");
  for (uint32_t i = 0; i < rules.Length(); ++i) {
    Napi::Object r = GetObjectAt(rules, i, "plan.landlock.rules");
    std::string access = GetString(r, "access");
    uint64_t bits = LandlockReadAccess(abi);
    if (access == "write") bits = LandlockWriteAccess(abi);
    if (access == "list") bits = landlock::kFsReadDir;
    if (access == "device") {
      bits |= landlock::kFsWriteFile | (abi >= 5 ? landlock::kFsIoctlDev : 0) | (abi >= 3 ? landlock::kFsTruncate : 0);
    }
    const uint8_t flags = (GetBool(r, "exact", false) ? LandlockPlan::kPathExact : 0) |
                          (GetBool(r, "volatile", false) ? LandlockPlan::kPathVolatile : 0);
    ll->AddPath(GetString(r, "path"), bits, flags);
  }
  ll->stdio_terminals = GetBool(o, "stdioTerminals", false);
  Napi::Value ports = o.Get("connectPorts");
  if (ports.IsArray()) {
    Napi::Array p = ports.As<Napi::Array>();
    for (uint32_t i = 0; i < p.Length(); ++i) {
      Napi::Value port = p.Get(i);
      if (!port.IsNumber()) throw Napi::TypeError::New(env, "Expected plan.landlock.connectPorts to hold numbers");
      ll->connect_ports.push_back(static_cast<uint16_t>(port.As<Napi::Number>().Uint32Value()));
    }
  }
}

// The plan's fields other than stdio (mode, command, limits, mounts, Landlock, seccomp) into
// *plan, and the supervisor's configuration into *supervisor. Throws on a malformed plan.
void ParsePlan(Napi::Env env, const Napi::Object& o, LinuxSpawnPlan* out, SupervisorConfig* supervisor) {
  LinuxSpawnPlan& plan = *out;
  std::string mode = GetString(o, "mode");
  if (mode == "plain") {
    plan.mode = LinuxMode::kPlain;
  } else if (mode == "isolated") {
    plan.mode = LinuxMode::kIsolated;
  } else if (mode == "landlock") {
    plan.mode = LinuxMode::kLandlock;
  } else {
    throw Napi::TypeError::New(env, "Expected plan.mode to be 'plain', 'isolated' or 'landlock'");
  }
  plan.file = GetString(o, "file");
  plan.argv = GetStrings(o, "argv");
  // argc 0 lets a program read envp as argv (the pkexec CVE-2021-4034 pattern): never allowed.
  if (plan.argv.empty()) throw Napi::TypeError::New(env, "Expected plan.argv to hold at least argv[0]");
  plan.envp = GetStrings(o, "envp");
  plan.cwd = GetString(o, "cwd");
  plan.setsid = GetBool(o, "setsid", plan.mode != LinuxMode::kPlain);
  // A pty: fd 0 becomes the controlling terminal, which needs a new session.
  plan.ctty = GetBool(o, "ctty", false);
  if (plan.ctty && !plan.setsid) throw Napi::TypeError::New(env, "plan.ctty needs plan.setsid");
  plan.pty_cols = static_cast<uint16_t>(GetNumber(o, "ptyCols", 0));
  plan.pty_rows = static_cast<uint16_t>(GetNumber(o, "ptyRows", 0));
  if ((plan.pty_cols != 0) != (plan.pty_rows != 0) || (plan.pty_cols != 0 && (plan.mode != LinuxMode::kIsolated || !plan.ctty))) {
    throw Napi::TypeError::New(env, "plan.ptyCols/ptyRows need each other, isolated mode and ctty");
  }
  plan.drop_caps = plan.mode != LinuxMode::kPlain;
  plan.new_net = GetBool(o, "newNet", true);
  plan.proxy_port = static_cast<uint16_t>(GetNumber(o, "proxyPort", 0));
  plan.rlimit_nproc = static_cast<uint64_t>(GetNumber(o, "rlimitNproc", 0));
  // Root without a pids cgroup: init traces the tree and counts (spawn_trace.cc).
  plan.trace_process_cap = static_cast<uint32_t>(GetNumber(o, "traceProcessCap", 0));
  if (plan.trace_process_cap != 0 && (plan.mode == LinuxMode::kPlain || !o.Get("seccomp").IsObject())) {
    throw Napi::TypeError::New(env, "plan.traceProcessCap needs a sandbox mode and a seccomp filter");
  }
  plan.rlimit_as = static_cast<uint64_t>(GetNumber(o, "rlimitAs", 0));
  plan.rlimit_nofile = static_cast<uint64_t>(GetNumber(o, "rlimitNofile", 0));
  plan.rlimit_sigpending = static_cast<uint64_t>(GetNumber(o, "rlimitSigpending", 0));
  plan.rlimit_msgqueue = static_cast<uint64_t>(GetNumber(o, "rlimitMsgqueue", 0));
  plan.inotify_instances = static_cast<int64_t>(GetNumber(o, "inotifyInstances", -1));
  plan.inotify_watches = static_cast<int64_t>(GetNumber(o, "inotifyWatches", -1));
  if (o.Get("shmData").IsString()) plan.shm_data = GetString(o, "shmData");
  Napi::Value cg = o.Get("cgroupFds");
  if (!cg.IsUndefined()) {
    if (!cg.IsArray()) throw Napi::TypeError::New(env, "Expected plan.cgroupFds to be an array");
    Napi::Array a = cg.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) {
      Napi::Value v = a.Get(i);
      if (!v.IsNumber() || v.As<Napi::Number>().Int32Value() < 0) {
        throw Napi::TypeError::New(env, "Expected plan.cgroupFds to hold open fds");
      }
      plan.cgroup_fds.push_back(v.As<Napi::Number>().Int32Value());
    }
  }
  if (plan.mode == LinuxMode::kIsolated) {
    Napi::Array mounts = GetArray(o, "mounts");
    for (uint32_t i = 0; i < mounts.Length(); ++i) {
      Napi::Object m = GetObjectAt(mounts, i, "plan.mounts");
      MountOp op;
      double kind = GetNumber(m, "kind", -1);
      if (kind < 0 || kind > static_cast<double>(MountOpKind::kStageOverlay)) {
        throw Napi::TypeError::New(env, "Expected plan.mounts[].kind to be a known mount step");
      }
      op.kind = static_cast<MountOpKind>(static_cast<int>(kind));
      op.path = GetString(m, "path");
      Napi::Value d = m.Get("data");
      if (d.IsString()) op.data = d.As<Napi::String>().Utf8Value();
      op.arg = static_cast<int>(GetNumber(m, "arg", 0));
      plan.mounts.push_back(std::move(op));
    }
    plan.tmp_slots = static_cast<int>(GetNumber(o, "tmpSlots", 0));
  }
  Napi::Value ll = o.Get("landlock");
  if (ll.IsObject()) {
    plan.landlock = true;
    FillLandlock(env, ll.As<Napi::Object>(), &plan.landlock_plan);
  }
  Napi::Value sc = o.Get("seccomp");
  uint16_t& connect_port = supervisor->proxy_port;
  MetadataRules& metadata = supervisor->metadata;
  if (sc.IsObject()) {
    Napi::Object s = sc.As<Napi::Object>();
    SeccompConfig cfg;
    std::string net = GetString(s, "net");
    cfg.net = net == "full" ? SeccompNet::kFull : net == "proxy" ? SeccompNet::kProxy : SeccompNet::kNone;
    cfg.isolated = plan.mode == LinuxMode::kIsolated;
    cfg.unix_stream_sockets = GetBool(s, "unixSockets", false);
    cfg.trace_forks = plan.trace_process_cap != 0;
    // Landlock mode with the proxy: connect() goes through the host's supervisor, which hands
    // over connections to 127.0.0.1:<connectSupervisor> only (supervise_connect.cc).
    connect_port = static_cast<uint16_t>(GetNumber(s, "connectSupervisor", 0));
    if (connect_port != 0) {
      if (plan.mode != LinuxMode::kLandlock || net != "proxy") {
        throw Napi::TypeError::New(env, "plan.seccomp.connectSupervisor needs Landlock mode and net 'proxy'");
      }
      cfg.notify_connect = true;
      plan.seccomp_listener = true;
    }
    // Landlock mode: chmod/chown/utime/xattr calls go to the host's metadata supervisor, which
    // carries them out inside these writable roots only (metadata_supervisor.cc).
    Napi::Value ms = s.Get("metadataSupervisor");
    if (ms.IsObject()) {
      if (plan.mode != LinuxMode::kLandlock) {
        throw Napi::TypeError::New(env, "plan.seccomp.metadataSupervisor needs Landlock mode");
      }
      metadata.writable = GetStrings(ms.As<Napi::Object>(), "writable");
      metadata.protect = GetStrings(ms.As<Napi::Object>(), "protect");
      if (ms.As<Napi::Object>().Has("readable")) {
        metadata.readable = GetStrings(ms.As<Napi::Object>(), "readable");
        metadata.deny_read = GetStrings(ms.As<Napi::Object>(), "denyRead");
        // Deny-read paths under readable roots: listings of them are refused (kListDir).
        if (GetBool(ms.As<Napi::Object>(), "listDirs", false)) {
          metadata.list_dirs = true;
          cfg.notify_listdir = true;
        }
      }
      metadata.enabled = true;
      cfg.notify_metadata = true;
      plan.seccomp_listener = true;
      // Read-only carve-outs inside the writable roots: writes, creates, removals and renames go
      // to the path supervisor (supervise_paths.cc), which looks the carve-outs up now, before
      // the command starts.
      Napi::Value ps = s.Get("pathSupervisor");
      if (ps.IsObject()) {
        Napi::Object po = ps.As<Napi::Object>();
        supervisor->paths = BuildPathRules(metadata.writable, GetStrings(po, "carveOuts"), GetStrings(po, "presentOnly"),
                                           GetStrings(po, "devices"));
        supervisor->paths.inet_bind = net == "full";
        cfg.notify_paths = true;
        // changes: 'record': the journal both supervisors write (changes_journal.h), its
        // directory made by the host already.
        Napi::Value ch = po.Get("changes");
        if (ch.IsObject()) {
          Napi::Object co = ch.As<Napi::Object>();
          const std::string dir = GetString(co, "dir");
          auto journal = changes::Journal::Open(dir, GetStrings(co, "roots"), co.Has("exclude") ? GetStrings(co, "exclude") : std::vector<std::string>(), static_cast<uint64_t>(GetNumber(co, "maxBytes", 0)));
          if (!journal) {
            ThrowSandboxError(env, Status::Sys(ErrorCode::kESECCOMP_INSTALL, "changes: the journal in " + dir + " cannot be opened", "open", errno));
          }
          changes::Register(journal, dir);
          supervisor->paths.journal = journal;
          metadata.journal = journal;
        }
      }
      // The sandbox's lifetime share of the uid's inotify instances and watches (linux-quotas.ts).
      Napi::Value iq = ms.As<Napi::Object>().Get("inotify");
      if (iq.IsObject()) {
        supervisor->inotify = true;
        supervisor->inotify_instances = static_cast<uint32_t>(GetNumber(iq.As<Napi::Object>(), "instances", 0));
        supervisor->inotify_watches = static_cast<uint32_t>(GetNumber(iq.As<Napi::Object>(), "watches", 0));
      }
    }
    // Landlock mode with /proc privacy: read-only opens go to the read supervisor, which hides
    // other processes' /proc entries and /proc/net (supervise_reads.cc). Its opener thread is
    // confined now, before the command exists, by the rules the command gets.
    if (GetBool(s, "readSupervisor", false)) {
      if (plan.mode != LinuxMode::kLandlock || !metadata.enabled || !plan.landlock) {
        throw Napi::TypeError::New(env, "plan.seccomp.readSupervisor needs Landlock mode and the metadata supervisor");
      }
      struct stat pst;
      if (stat("/proc", &pst) != 0) {
        ThrowSandboxError(env, Status::Sys(ErrorCode::kESECCOMP_INSTALL, "procPrivacy: /proc cannot be looked up", "stat", errno));
      }
      supervisor->reads.proc_dev = pst.st_dev;
      int r = StartReadOpener(plan.landlock_plan, &supervisor->reads.opener);
      if (r < 0) {
        ThrowSandboxError(env, Status::Sys(ErrorCode::kESECCOMP_INSTALL,
                                           "procPrivacy: the Landlock-confined opener thread could not be set up", "landlock_restrict_self", -r));
      }
      supervisor->reads.enabled = true;
      cfg.notify_reads = true;
      // Listings of /proc show the sandbox's own pids only: the listing is carried out on the
      // command's own open directory (pidfd_getfd), or in the procfs way on a reopen of it that
      // then takes its place (metadata_supervisor.cc, ListReopened).
      metadata.list_dirs = true;
      cfg.notify_listdir = true;
    }
    // Landlock mode below ABI 6: signals go through the host's signal supervisor, which lets
    // them reach members of the sandbox only (supervise_signals.cc).
    if (GetBool(s, "signalSupervisor", false)) {
      if (plan.mode != LinuxMode::kLandlock) throw Napi::TypeError::New(env, "plan.seccomp.signalSupervisor needs Landlock mode");
      supervisor->signals.enabled = true;
      cfg.notify_signals = true;
      plan.seccomp_listener = true;
    }
    int r = BuildSeccompFilter(cfg, &plan.seccomp_filter);
    if (r < 0) {
      ThrowSandboxError(env, Status::Sys(ErrorCode::kESECCOMP_INSTALL, "building the seccomp filter failed",
                                         "seccomp", -r));
    }
    plan.seccomp = true;
  }
}

// The parent's ends of the pipes made for 'in'/'out' stdio entries; closed unless released.
struct StdioEnds {
  std::vector<int> parent;  // per entry: our end, or -1
  std::vector<int> child;   // the command's ends, closed once it has its copies
  ~StdioEnds() {
    for (int fd : child) close(fd);
    for (int fd : parent) {
      if (fd >= 0) close(fd);
    }
  }
};

// stdio: number = host fd to pass, -1 = /dev/null, 'in'/'out' = a new pipe.
void ParseStdio(Napi::Env env, const Napi::Array& stdio, std::vector<int>* out, StdioEnds* ends) {
  for (uint32_t i = 0; i < stdio.Length(); ++i) {
    Napi::Value v = stdio.Get(i);
    bool ok = v.IsNumber() || (v.IsString() && (v.As<Napi::String>().Utf8Value() == "in" ||
                                                v.As<Napi::String>().Utf8Value() == "out"));
    if (!ok) throw Napi::TypeError::New(env, "Expected plan.stdio entries to be fd numbers, 'in' or 'out'");
  }
  ends->parent.assign(stdio.Length(), -1);
  for (uint32_t i = 0; i < stdio.Length(); ++i) {
    Napi::Value v = stdio.Get(i);
    if (v.IsNumber()) {
      out->push_back(v.As<Napi::Number>().Int32Value());
      continue;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) ThrowSandboxError(env, Status::Sys(ErrorCode::kESPAWN, "pipe2(2) failed", "pipe2", errno));
    bool child_reads = v.As<Napi::String>().Utf8Value() == "in";
    out->push_back(child_reads ? p[0] : p[1]);
    ends->child.push_back(child_reads ? p[0] : p[1]);
    ends->parent[i] = child_reads ? p[1] : p[0];
  }
}

// A started sandbox: its supervisor, its exit watch, and the JS result
// { pid, handle, fds, landlockAbi, listenerFd?, ptyFd?, sharedNetns }.
Napi::Value WatchStarted(Napi::Env env, const LinuxSpawnResult& res, SupervisorConfig&& supervisor,
                         const Napi::Function& on_exit, StdioEnds* ends, int landlock_abi) {
  ChildWatch* w = new ChildWatch();
  w->res = res;
  uv_loop_t* loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  if (res.seccomp_listener_fd >= 0) {
    // Landlock mode: members of the sandbox are init's descendants (supervise_signals.cc).
    if (supervisor.signals.enabled) {
      supervisor.signals.init = res.pid;
      supervisor.signals.init_pidfd = fcntl(res.pidfd, F_DUPFD_CLOEXEC, 0);
    }
    if (supervisor.reads.enabled) {
      supervisor.reads.members.init = res.pid;
      supervisor.reads.members.init_pidfd = fcntl(res.pidfd, F_DUPFD_CLOEXEC, 0);
    }
    // Owned by the supervisor from here on, whatever happens.
    int r = StartSupervisor(env, res.seccomp_listener_fd, std::move(supervisor));
    w->res.seccomp_listener_fd = -1;
    if (r < 0) {
      // The command runs already: its connects would fail (ENOSYS), never leak. Stop it anyway.
      SignalTree(w->res, SIGKILL);
    }
  }
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
  return result;
}

// native.spawn(plan, onExit) -> { pid, handle, fds, landlockAbi }
Napi::Value Spawn(const Napi::CallbackInfo& info) {
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
  LinuxSpawnResult res;
  Status s = SpawnLinux(plan, &res);
  if (!s.ok()) ThrowSandboxError(env, s);
  return WatchStarted(env, res, std::move(supervisor), info[1].As<Napi::Function>(), &ends,
                      plan.landlock ? plan.landlock_plan.abi : 0);
}

// ---- prepared-ahead sandboxes (spawn_spare.cc; lib/platform/linux-spare.ts) -------------

// A spare's JS handle, returned at once while a thread of libuv's pool prepares the spare (those
// threads live as long as the process, which init's parent-death signal needs: it follows the
// thread that cloned it). Using or discarding it waits for the preparation to end; it is used
// or discarded once. Whatever is left when the env goes away (a Worker ending, the process
// exiting) or JS drops the handle is discarded then, without waiting.
struct SpareRecord {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;       // the preparation has ended (spare or status says how)
  bool abandoned = false;  // dropped before it ended: the pool thread discards what it made
  Status status;
  LinuxSpare* spare = nullptr;
  SupervisorConfig supervisor;
  int landlock_abi = 0;
  napi_env env = nullptr;
  bool hooked = false;
  std::atomic<int> refs{2};  // the JS handle and the worker

  void Release() {
    if (--refs == 0) delete this;
  }
  // The prepared spare, now owned by the caller (null if preparing failed or it was taken).
  LinuxSpare* Take() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return done; });
    LinuxSpare* s = spare;
    spare = nullptr;
    return s;
  }
  // Without waiting: what was made is discarded now, or by the pool thread when it is done.
  void Abandon() {
    LinuxSpare* s;
    {
      std::lock_guard<std::mutex> lock(mu);
      abandoned = true;
      s = spare;
      spare = nullptr;
    }
    if (s != nullptr) DiscardSpare(s);
  }
  void Unhook() {
    if (hooked) napi_remove_env_cleanup_hook(env, OnEnvExit, this);
    hooked = false;
  }
  static void OnEnvExit(void* arg) {
    SpareRecord* r = static_cast<SpareRecord*>(arg);
    r->hooked = false;
    r->Abandon();
  }
};

class PrepareWorker : public Napi::AsyncWorker {
 public:
  PrepareWorker(Napi::Function cb, LinuxSpawnPlan&& plan, SpareRecord* rec)
      : Napi::AsyncWorker(cb, "psb:prepareSpare"), plan_(std::move(plan)), rec_(rec) {}
  ~PrepareWorker() override { rec_->Release(); }
  void Execute() override {
    LinuxSpare* spare = nullptr;
    Status st = PrepareSpare(std::move(plan_), &spare);
    bool abandoned;
    {
      std::lock_guard<std::mutex> lock(rec_->mu);
      abandoned = rec_->abandoned;
      rec_->status = st;
      if (!abandoned) rec_->spare = spare;
      rec_->done = true;
    }
    rec_->cv.notify_all();
    if (abandoned && spare != nullptr) DiscardSpare(spare);
  }
  void OnOK() override {
    Napi::Env env = Env();
    Callback().Call({rec_->status.ok() ? env.Null() : MakeSandboxError(env, rec_->status)});
  }

 private:
  LinuxSpawnPlan plan_;
  SpareRecord* rec_;
};

// native.prepareSpare(plan, done(err)) -> spare: plan as for spawn, without stdio. done is called
// once the preparation has ended; the handle may be used (or discarded) before that.
Napi::Value PrepareSpareJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsObject() || !info[1].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.prepareSpare(plan, callback)");
  }
  LinuxSpawnPlan plan;
  SpareRecord* rec = new SpareRecord();
  try {
    ParsePlan(env, info[0].As<Napi::Object>(), &plan, &rec->supervisor);
  } catch (...) {
    delete rec;
    throw;
  }
  rec->landlock_abi = plan.landlock ? plan.landlock_plan.abi : 0;
  rec->env = env;
  rec->hooked = napi_add_env_cleanup_hook(env, SpareRecord::OnEnvExit, rec) == napi_ok;
  Napi::Value handle = Napi::External<SpareRecord>::New(env, rec, [](Napi::Env, SpareRecord* r) {
    r->Unhook();
    r->Abandon();
    r->Release();
  });
  (new PrepareWorker(info[1].As<Napi::Function>(), std::move(plan), rec))->Queue();
  return handle;
}

SpareRecord* SpareArg(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsExternal()) throw Napi::TypeError::New(info.Env(), "Expected a spare handle");
  return info[0].As<Napi::External<SpareRecord>>().Data();
}

// The host's umask, without changing it (umask(2) can only set it: another thread could create a
// file in between). -1 when it cannot be read.
int ReadUmask() {
  char buf[2048];
  if (!procfs::ReadSmall("/proc/thread-self/status", buf, sizeof buf)) return -1;
  return static_cast<int>(procfs::KeyNumber(buf, "Umask", 8, -1));
}

// native.spawnSpare(spare, { file, argv, envp, cwd, stdio, ptyCols?, ptyRows? }, onExit): the
// spawn result as native.spawn gives it, or null when the spare cannot be used (its preparation
// failed, or a path one of its rules was made from names another inode now). Either way the
// spare is gone. ptyCols/ptyRows: the size its own terminal gets (isolated mode, `pty`).
Napi::Value SpawnSpareJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SpareRecord* rec = SpareArg(info);
  if (info.Length() != 3 || !info[1].IsObject() || !info[2].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.spawnSpare(spare, request, onExit)");
  }
  Napi::Object o = info[1].As<Napi::Object>();
  SpareGo go;
  go.file = GetString(o, "file");
  go.argv = GetStrings(o, "argv");
  if (go.argv.empty()) throw Napi::TypeError::New(env, "Expected argv to hold at least argv[0]");
  go.envp = GetStrings(o, "envp");
  go.cwd = GetString(o, "cwd");
  go.pty_cols = static_cast<uint16_t>(GetNumber(o, "ptyCols", 0));
  go.pty_rows = static_cast<uint16_t>(GetNumber(o, "ptyRows", 0));
  StdioEnds ends;
  ParseStdio(env, GetArray(o, "stdio"), &go.stdio, &ends);
  rec->Unhook();
  LinuxSpare* spare = rec->Take();
  int mask = ReadUmask();
  if (spare == nullptr || mask < 0) {
    if (spare != nullptr) DiscardSpare(spare);
    return env.Null();
  }
  go.umask = static_cast<unsigned>(mask);
  // The carve-outs as they are now (one may have been made or removed since the preparation):
  // the parked command makes no call before GoSpare releases it.
  // What is not built from the tree (the policy's bind right) is kept across the rebuild.
  PathRules& paths = rec->supervisor.paths;
  if (paths.enabled) {
    const bool inet_bind = paths.inet_bind;
    std::shared_ptr<changes::Journal> journal = std::move(paths.journal);
    paths = BuildPathRules(paths.writable, paths.carveouts_in, paths.present_only_in, paths.devices_in);
    paths.inet_bind = inet_bind;
    paths.journal = std::move(journal);
  }
  LinuxSpawnResult res;
  bool used = false;
  Status s = GoSpare(spare, go, &res, &used);
  if (!s.ok()) ThrowSandboxError(env, s);
  if (!used) return env.Null();
  return WatchStarted(env, res, std::move(rec->supervisor), info[2].As<Napi::Function>(), &ends, rec->landlock_abi);
}

// Ends a spare unused on a thread of libuv's pool (its preparation may still be under way, and its
// processes must be reaped): the JS thread does not wait.
class DiscardWorker : public Napi::AsyncWorker {
 public:
  DiscardWorker(Napi::Function cb, SpareRecord* rec, Napi::Value handle) : Napi::AsyncWorker(cb, "psb:discardSpare"), rec_(rec) {
    handle_ = Napi::Persistent(handle);  // the record lives until we are done
  }
  void Execute() override {
    LinuxSpare* spare = rec_->Take();
    if (spare != nullptr) DiscardSpare(spare);
  }

 private:
  SpareRecord* rec_;
  Napi::Reference<Napi::Value> handle_;
};

// native.discardSpareAsync(spare, done()): as discardSpare, off the JS thread.
Napi::Value DiscardSpareAsyncJs(const Napi::CallbackInfo& info) {
  SpareRecord* rec = SpareArg(info);
  if (info.Length() != 2 || !info[1].IsFunction()) throw Napi::TypeError::New(info.Env(), "Usage: native.discardSpareAsync(spare, done)");
  rec->Unhook();
  (new DiscardWorker(info[1].As<Napi::Function>(), rec, info[0]))->Queue();
  return info.Env().Undefined();
}

// native.discardSpare(spare): waits for its preparation to end, then ends it unused.
Napi::Value DiscardSpareJs(const Napi::CallbackInfo& info) {
  SpareRecord* rec = SpareArg(info);
  rec->Unhook();
  LinuxSpare* spare = rec->Take();
  if (spare != nullptr) DiscardSpare(spare);
  return info.Env().Undefined();
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
  return Napi::Boolean::New(env, AdmitProxyPeer(static_cast<uint16_t>(proxy_port), static_cast<uint16_t>(peer_port),
                                                info[2].As<Napi::Boolean>().Value()));
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

// native.kill(handle, signal) -> 0 or -errno
Napi::Value Kill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsExternal() || !info[1].IsNumber()) {
    throw Napi::TypeError::New(env, "Usage: native.kill(handle, signal)");
  }
  ChildWatch* w = info[0].As<Napi::External<ChildWatch>>().Data();
  if (w->exited || w->reaped || w->res.pidfd < 0) return Napi::Number::New(env, -ESRCH);
  return Napi::Number::New(env, SignalTree(w->res, info[1].As<Napi::Number>().Int32Value()));
}

// native.setRef(handle, on): whether the exit watch keeps the event loop alive.
Napi::Value SetRef(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsExternal() || !info[1].IsBoolean()) {
    throw Napi::TypeError::New(env, "Usage: native.setRef(handle, on)");
  }
  ChildWatch* w = info[0].As<Napi::External<ChildWatch>>().Data();
  w->loop_ref = info[1].As<Napi::Boolean>().Value();
  w->ApplyRef();
  return env.Undefined();
}

// Isolated mode builds its mount tree with mount_setattr(2) (Linux 5.12: read-only binds, applied
// recursively). Before it (Debian 11's 5.10) a spawn would fail half-way through the mount setup;
// the planner refuses up front instead. 0 when it exists, else -ENOSYS.
int MountApiSupported() {
  // Argument checks come first where the call exists (size 0 is EINVAL); ENOSYS means it does not.
  if (syscall(__NR_mount_setattr, -1, "", 0, nullptr, 0) < 0 && errno == ENOSYS) return -ENOSYS;
  return 0;
}

// native.probe() -> facts about this kernel and process
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("landlockAbi", Napi::Number::New(env, LandlockAbi()));
  o.Set("seccomp", Napi::Number::New(env, SeccompSupported()));
  o.Set("connectSupervisor", Napi::Number::New(env, ConnectSupervisorSupported()));
  // How the supervisors reach the command: "pidfd", "procfs" (a container's profile refuses
  // process_vm_readv and pidfd_getfd) or "none".
  o.Set("supervisorAccess", Napi::String::New(env, task::WayName()));
  int procfs = -ECHILD;
  o.Set("userns", Napi::Number::New(env, ProbeUserNamespaces(true, &procfs)));
  // 0 when isolated mode's fresh /proc can be mounted (only meaningful when userns is 0).
  o.Set("procfs", Napi::Number::New(env, procfs));
  o.Set("mountApi", Napi::Number::New(env, MountApiSupported()));
  // 0 when init can trace the command (Landlock mode's process cap as root without a cgroup).
  o.Set("processTracing", Napi::Number::New(env, ProcessTracingSupported()));
  o.Set("euid", Napi::Number::New(env, geteuid()));
  struct utsname u;
  if (uname(&u) == 0) {
    o.Set("kernel", std::string(u.release));
    o.Set("machine", std::string(u.machine));
  }
  return o;
}

// native.lockPlaceholder(path) -> fd (holding a shared flock) or -errno.
// Placeholders for missing protected paths live on the host while runs use them; every run that
// relies on one holds a shared lock on it, across processes, so that no run removes it from under
// another (which would detach that run's bind and let it create the path for real).
Napi::Value LockPlaceholder(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "Usage: native.lockPlaceholder(path)");
  std::string path = info[0].As<Napi::String>().Utf8Value();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return Napi::Number::New(env, -errno);
  // Never a blocking flock on the JS thread: the placeholder is visible inside the sandbox, so a
  // command can flock(LOCK_EX) it and hold it for as long as it runs. A host run that releases a
  // placeholder holds LOCK_EX only for an fstat+rmdir, so a few short retries ride that out; a
  // lock still held after them is someone else's, and the caller fails the spawn (-EWOULDBLOCK)
  // instead of freezing the event loop.
  constexpr int kTries = 10;
  const struct timespec kPause = {0, 2 * 1000 * 1000};  // 2 ms: at most ~20 ms in all
  int r = -1;
  for (int i = 0; i < kTries; ++i) {
    r = flock(fd, LOCK_SH | LOCK_NB);
    if (r == 0 || errno != EWOULDBLOCK) break;
    if (i + 1 < kTries) nanosleep(&kPause, nullptr);
  }
  if (r < 0) {
    int e = errno;
    close(fd);
    return Napi::Number::New(env, -e);
  }
  return Napi::Number::New(env, fd);
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

// Test hook: SeccompSelfCheck (seccomp.h). { mismatches, cases, configs, first }.
Napi::Value SeccompSelfCheckJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  long cases = 0;
  char first[256] = "";
  int configs = 0;
  int mismatches = SeccompSelfCheck(&cases, &configs, first, sizeof first);
  Napi::Object o = Napi::Object::New(env);
  o.Set("mismatches", Napi::Number::New(env, mismatches));
  o.Set("cases", Napi::Number::New(env, static_cast<double>(cases)));
  o.Set("configs", Napi::Number::New(env, configs));
  o.Set("first", Napi::String::New(env, first));
  return o;
}

// native.closeOnPool(fd): see CloseOnPool (the Landlock-mode TMPDIR, removed with an fd open).
Napi::Value CloseOnPoolJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.closeOnPool(fd)");
  int fd = info[0].As<Napi::Number>().Int32Value();
  if (fd >= 0) CloseOnPool(env, fd);
  return env.Undefined();
}

// The parent directory of `path` (O_PATH), opened without following a symlink anywhere on the
// way, and its last component; -errno on failure (-ELOOP: a link on the way). Placeholder paths
// are canonical (the policy's paths were resolved with realpath), so a link on the way now is a
// command's doing: it can replace a directory it may write (ws/tools) with a link to anywhere,
// and a removal by path would then delete the entry of the same name there, outside the sandbox.
// Removals go through this fd (fstatat/unlinkat), so the name is looked up only where planned.
int OpenParentNoFollow(const std::string& path, std::string* name) {
  size_t slash = path.find_last_of('/');
  if (path.empty() || path[0] != '/' || slash + 1 >= path.size()) return -EINVAL;
  *name = path.substr(slash + 1);
  std::string parent = slash == 0 ? "/" : path.substr(0, slash);
  struct {
    uint64_t flags, mode, resolve;
  } how = {O_PATH | O_DIRECTORY | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */ | 0x02 /* RESOLVE_NO_MAGICLINKS */};
  long fd = syscall(__NR_openat2, AT_FDCWD, parent.c_str(), &how, sizeof how);
  return fd < 0 ? -errno : static_cast<int>(fd);
}

// native.releasePlaceholder(fd, path, remove) -> true when it removed the placeholder. Removal
// happens only if no other run holds it (LOCK_EX succeeds) and `path`, looked up without
// following a link on the way (OpenParentNoFollow), is still the same inode.
// The fd is closed either way: after a removal on the thread pool (CloseOnPool), otherwise at
// once (a shared lock kept a moment longer would make another run's release fail and leave the
// placeholder behind).
Napi::Value ReleasePlaceholder(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsNumber() || !info[1].IsString() || !info[2].IsBoolean()) {
    throw Napi::TypeError::New(env, "Usage: native.releasePlaceholder(fd, path, remove)");
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  std::string path = info[1].As<Napi::String>().Utf8Value();
  bool removed = false;
  if (info[2].As<Napi::Boolean>().Value() && flock(fd, LOCK_EX | LOCK_NB) == 0) {
    std::string name;
    int dir = OpenParentNoFollow(path, &name);
    struct stat a, b;
    if (dir >= 0 && fstat(fd, &a) == 0 && fstatat(dir, name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev) {
      removed = unlinkat(dir, name.c_str(), S_ISDIR(b.st_mode) ? AT_REMOVEDIR : 0) == 0;
    }
    if (dir >= 0) close(dir);
  }
  if (removed) CloseOnPool(env, fd);
  else close(fd);
  return Napi::Boolean::New(env, removed);
}

// native.removeLookalike(path) -> 0, or -errno: removes what is at `path` only while it still
// looks like a placeholder (an empty 0555 directory: rmdir takes only an empty one; an empty 0444
// regular file), looked up without following a link on the way (OpenParentNoFollow). For a
// lookalike whose lock a command holds (lib/platform/linux.ts claimPlaceholders): the command
// can also swap what is on the way between the host's look and its removal.
Napi::Value RemoveLookalike(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "Usage: native.removeLookalike(path)");
  std::string path = info[0].As<Napi::String>().Utf8Value();
  std::string name;
  int dir = OpenParentNoFollow(path, &name);
  if (dir < 0) return Napi::Number::New(env, dir);
  struct stat st;
  int r = 0;
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    r = -errno;
  } else if (S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0555) {
    r = unlinkat(dir, name.c_str(), AT_REMOVEDIR) == 0 ? 0 : -errno;
  } else if (S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0444 && st.st_size == 0) {
    r = unlinkat(dir, name.c_str(), 0) == 0 ? 0 : -errno;
  } else {
    r = -EEXIST;  // no longer a lookalike: left alone
  }
  close(dir);
  return Napi::Number::New(env, r);
}

// native.cgroupDelegated(dir) -> whether systemd marked this cgroup as delegated to its payload
// (Delegate= on a service or scope): the "trusted.delegate" xattr (readable only with
// CAP_SYS_ADMIN) or "user.delegate" (set for unprivileged managers' units), value "1". Node's fs
// has no xattr call; this is the only signal systemd documents for "these sub-groups are yours".
Napi::Value CgroupDelegated(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "Usage: native.cgroupDelegated(dir)");
  std::string dir = info[0].As<Napi::String>().Utf8Value();
  for (const char* name : {"trusted.delegate", "user.delegate"}) {
    char v[8] = {0};
    ssize_t n = getxattr(dir.c_str(), name, v, sizeof(v) - 1);
    if (n == 1 && v[0] == '1') return Napi::Boolean::New(env, true);
  }
  return Napi::Boolean::New(env, false);
}

// native.xattr(path, name[, value]) -> without value: the attribute's value (a string), or
// -errno (-ENODATA: none); with value: sets it, 0 or -errno. Never follows a final symlink.
// Node's fs has no xattr call; changes: 'stage' reads overlayfs's user.overlay.opaque marks and
// checks that a layer dir's file system takes user xattrs (lib/changes/overlay.ts).
Napi::Value XattrJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsString() || (info.Length() > 2 && !info[2].IsString())) {
    throw Napi::TypeError::New(env, "Usage: native.xattr(path, name[, value])");
  }
  std::string p = info[0].As<Napi::String>().Utf8Value(), name = info[1].As<Napi::String>().Utf8Value();
  if (info.Length() > 2) {
    std::string v = info[2].As<Napi::String>().Utf8Value();
    return Napi::Number::New(env, lsetxattr(p.c_str(), name.c_str(), v.data(), v.size(), 0) == 0 ? 0 : -errno);
  }
  char v[256];
  ssize_t n = lgetxattr(p.c_str(), name.c_str(), v, sizeof v);
  if (n < 0) return Napi::Number::New(env, -errno);
  return Napi::String::New(env, v, static_cast<size_t>(n));
}

// uidTaskCount(uid) -> { mine, visible }: the tasks (processes and threads) /proc shows for uid
// `uid`, and for all uids (lib/platform/linux-quotas.ts: Landlock mode's RLIMIT_NPROC base). One
// fstatat per process, on /proc/<pid>/task: its owner is the process's effective uid and its
// link count less two its thread count. A process whose effective uid is not its real one, or a
// non-dumpable one (its /proc directory is root's), is not counted: the count can only be low,
// which makes the cap tighter, never looser.
// closeChangesJournal(dir): after the sandbox ended, waits for a journaled call in progress and
// refuses every later one (changes_journal.h). 1 closed, 0 none registered, -1 incomplete.
Napi::Value CloseChangesJournalJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "closeChangesJournal(dir)");
  return Napi::Number::New(env, changes::CloseByDir(info[0].As<Napi::String>().Utf8Value()));
}

// mkfifo(path, mode): 0 or -errno. Revert puts back a FIFO a recorded command removed
// (lib/changes/journal.ts); Node has no mkfifo.
Napi::Value MkfifoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "mkfifo(path, mode)");
  const std::string p = info[0].As<Napi::String>().Utf8Value();
  const int rc = mkfifo(p.c_str(), static_cast<mode_t>(info[1].As<Napi::Number>().Uint32Value() & 07777));
  return Napi::Number::New(env, rc == 0 ? 0 : -errno);
}

Napi::Value UidTaskCountJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint32_t uid = info[0].As<Napi::Number>().Uint32Value();
  double mine = 0, visible = 0;
  int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = proc >= 0 ? fdopendir(proc) : nullptr;
  if (d == nullptr) {
    if (proc >= 0) close(proc);
    return env.Undefined();
  }
  char path[300];
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "%s/task", e->d_name);
    struct stat st;
    if (fstatat(proc, path, &st, 0) != 0) continue;
    const double threads = st.st_nlink > 2 ? static_cast<double>(st.st_nlink - 2) : 1;
    visible += threads;
    if (st.st_uid == uid) mine += threads;
  }
  closedir(d);
  Napi::Object o = Napi::Object::New(env);
  o.Set("mine", mine);
  o.Set("visible", visible);
  return o;
}

}  // namespace

void InitPlatform(Napi::Env env, Napi::Object exports) {
  exports.Set("platform", "linux");
  exports.Set("spawn", Napi::Function::New(env, Spawn, "spawn"));
  exports.Set("kill", Napi::Function::New(env, Kill, "kill"));
  exports.Set("prepareSpare", Napi::Function::New(env, PrepareSpareJs, "prepareSpare"));
  exports.Set("admitProxyPeer", Napi::Function::New(env, AdmitProxyPeerJs, "admitProxyPeer"));
  exports.Set("dropQueuedConnections", Napi::Function::New(env, DropQueuedConnectionsJs, "dropQueuedConnections"));
  exports.Set("spawnSpare", Napi::Function::New(env, SpawnSpareJs, "spawnSpare"));
  exports.Set("discardSpare", Napi::Function::New(env, DiscardSpareJs, "discardSpare"));
  exports.Set("discardSpareAsync", Napi::Function::New(env, DiscardSpareAsyncJs, "discardSpareAsync"));
  exports.Set("setRef", Napi::Function::New(env, SetRef, "setRef"));
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  exports.Set("listenLoopback", Napi::Function::New(env, ListenLoopbackJs, "listenLoopback"));
  exports.Set("lockPlaceholder", Napi::Function::New(env, LockPlaceholder, "lockPlaceholder"));
  exports.Set("releasePlaceholder", Napi::Function::New(env, ReleasePlaceholder, "releasePlaceholder"));
  exports.Set("removeLookalike", Napi::Function::New(env, RemoveLookalike, "removeLookalike"));
  exports.Set("cgroupDelegated", Napi::Function::New(env, CgroupDelegated, "cgroupDelegated"));
  exports.Set("xattr", Napi::Function::New(env, XattrJs, "xattr"));
  exports.Set("closeOnPool", Napi::Function::New(env, CloseOnPoolJs, "closeOnPool"));
  exports.Set("dirWatchOpen", Napi::Function::New(env, DirWatchOpenJs, "dirWatchOpen"));
  exports.Set("dirWatchAdd", Napi::Function::New(env, DirWatchAddJs, "dirWatchAdd"));
  exports.Set("dirWatchRemove", Napi::Function::New(env, DirWatchRemoveJs, "dirWatchRemove"));
  exports.Set("dirWatchPoll", Napi::Function::New(env, DirWatchPollJs, "dirWatchPoll"));
  exports.Set("uidTaskCount", Napi::Function::New(env, UidTaskCountJs, "uidTaskCount"));
  exports.Set("closeChangesJournal", Napi::Function::New(env, CloseChangesJournalJs, "closeChangesJournal"));
  exports.Set("mkfifo", Napi::Function::New(env, MkfifoJs, "mkfifo"));
  exports.Set("seccompSelfCheck", Napi::Function::New(env, SeccompSelfCheckJs, "seccompSelfCheck"));
  RegisterPty(env, exports);
  RegisterTreeWalk(env, exports);
  RegisterStdioAdopt(env, exports);
  InitRelay(env, exports);
}

}  // namespace psb
