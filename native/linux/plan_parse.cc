// The TS plan into LinuxSpawnPlan and SupervisorConfig (plan_parse.h).
// Tests: see plan_parse.h.
#include "plan_parse.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>

#include "../js_error.h"
#include "landlock.h"
#include "plan_args.h"
#include "seccomp.h"

namespace psb {
namespace {

// plan.landlock's rules (or its envelope's) into ll, for ll->abi.
void AddRules(const Napi::Array& rules, const char* what, LandlockPlan* ll) {
  const int abi = ll->abi;
  for (uint32_t i = 0; i < rules.Length(); ++i) {
    Napi::Object r = GetObjectAt(rules, i, what);
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
  AddRules(GetArray(o, "rules"), "plan.landlock.rules", ll);
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

}  // namespace

void ParsePlan(Napi::Env env, const Napi::Object& o, LinuxSpawnPlan* out, SupervisorConfig* supervisor, PlanFor where) {
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
    Napi::Value e = ll.As<Napi::Object>().Get("envelope");
    if (e.IsArray()) {
      plan.envelope_plan.abi = plan.landlock_plan.abi;
      plan.envelope_plan.handled_fs = plan.landlock_plan.handled_fs;
      AddRules(e.As<Napi::Array>(), "plan.landlock.envelope", &plan.envelope_plan);
    }
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
    // carries them out inside these writable roots only (supervise_metadata.cc).
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
        // The same: a guessed name's stat, access, readlink and xattrs answer as missing (statNames).
        if (GetBool(ms.As<Napi::Object>(), "statNames", false)) {
          struct stat pst;
          if (stat("/proc", &pst) != 0) ThrowSandboxError(env, Status::Sys(ErrorCode::kESECCOMP_INSTALL, "deny-read: /proc cannot be looked up", "stat", errno));
          supervisor->stats = {true, metadata.readable, metadata.deny_read, pst.st_dev};
          cfg.notify_stats = true;
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
        PathRules& paths = supervisor->paths;
        paths.enabled = true;
        paths.writable = metadata.writable;
        paths.carveouts_in = GetStrings(po, "carveOuts");
        paths.present_only_in = GetStrings(po, "presentOnly");
        paths.devices_in = GetStrings(po, "devices");
        paths.inet_bind = net == "full";
        cfg.notify_paths = true;
        // changes: 'record': the journal both supervisors write (changes_journal.h), its
        // directory made by the host already.
        Napi::Value ch = po.Get("changes");
        if (ch.IsObject()) {
          Napi::Object co = ch.As<Napi::Object>();
          SupervisorConfig::JournalSpec& j = supervisor->journal_spec;
          j.dir = GetString(co, "dir");
          j.roots = GetStrings(co, "roots");
          if (co.Has("exclude")) j.exclude = GetStrings(co, "exclude");
          j.max_bytes = static_cast<uint64_t>(GetNumber(co, "maxBytes", 0));
          if (j.dir.empty()) throw Napi::TypeError::New(env, "Expected plan.seccomp.pathSupervisor.changes.dir to name the journal's directory");
        }
      }
      // The sandbox's lifetime share of the uid's inotify instances and watches (linux/quotas.ts).
      Napi::Value iq = ms.As<Napi::Object>().Get("inotify");
      if (iq.IsObject()) {
        supervisor->inotify = true;
        supervisor->inotify_instances = static_cast<uint32_t>(GetNumber(iq.As<Napi::Object>(), "instances", 0));
        supervisor->inotify_watches = static_cast<uint32_t>(GetNumber(iq.As<Napi::Object>(), "watches", 0));
      }
    }
    // Landlock mode with /proc privacy: read-only opens go to the read supervisor, which hides
    // other processes' /proc entries and /proc/net (supervise_reads.cc). Its opener thread is
    // confined by the rules the command gets.
    if (GetBool(s, "readSupervisor", false)) {
      if (plan.mode != LinuxMode::kLandlock || !metadata.enabled || !plan.landlock) {
        throw Napi::TypeError::New(env, "plan.seccomp.readSupervisor needs Landlock mode and the metadata supervisor");
      }
      struct stat pst;
      if (stat("/proc", &pst) != 0) {
        ThrowSandboxError(env, Status::Sys(ErrorCode::kESECCOMP_INSTALL, "procPrivacy: /proc cannot be looked up", "stat", errno));
      }
      supervisor->reads.proc_dev = pst.st_dev;
      // The opener thread is started by the supervisor, on its own fd table (supervisor.cc);
      // a failure there stops the command before its first supervised call is answered.
      if (plan.landlock_plan.abi <= 0) {
        ThrowSandboxError(env, Status::Sys(ErrorCode::kESECCOMP_INSTALL,
                                           "procPrivacy: the Landlock-confined opener thread could not be set up", "landlock_restrict_self", ENOSYS));
      }
      supervisor->reads.enabled = true;
      cfg.notify_reads = true;
      // With the stat class, an open of a name inside a denied directory answers as missing too.
      supervisor->reads.names = supervisor->stats;
      // Listings of /proc show the sandbox's own pids only: the listing is carried out on the
      // command's own open directory (pidfd_getfd), or in the procfs way on a reopen of it that
      // then takes its place (supervise_metadata.cc, ListReopened).
      metadata.list_dirs = true;
      cfg.notify_listdir = true;
    }
    // Isolated mode with placeholders: listings of the directories that hold them leave their
    // names out (supervise_metadata.cc, HideRules); the only class supervised in that mode.
    if (s.Has("hideNames")) {
      if (plan.mode != LinuxMode::kIsolated) throw Napi::TypeError::New(env, "plan.seccomp.hideNames needs isolated mode");
      supervisor->hide.paths = GetStrings(s, "hideNames");
      supervisor->hide.enabled = !supervisor->hide.paths.empty();
      cfg.notify_listdir = supervisor->hide.enabled;
      plan.seccomp_listener = plan.seccomp_listener || supervisor->hide.enabled;
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
  if (where == PlanFor::kHere) {
    Status st = MaterializeSupervisor(plan, supervisor);
    if (!st.ok()) ThrowSandboxError(env, st);
  }
}

Status MaterializeSupervisor(const LinuxSpawnPlan& plan, SupervisorConfig* supervisor) noexcept {
  try {
    // Read-only carve-outs inside the writable roots: the path supervisor (supervise_paths.cc)
    // looks them up now, before the command starts.
    PathRules& paths = supervisor->paths;
    if (paths.enabled) {
      const bool inet_bind = paths.inet_bind;
      paths = BuildPathRules(paths.writable, paths.carveouts_in, paths.present_only_in, paths.devices_in);
      paths.inet_bind = inet_bind;
    }
    const SupervisorConfig::JournalSpec& j = supervisor->journal_spec;
    if (!j.dir.empty() && paths.enabled) {
      auto journal = changes::Journal::Open(j.dir, j.roots, j.exclude, j.max_bytes);
      if (!journal) return Status::Sys(ErrorCode::kESECCOMP_INSTALL, "changes: the journal in " + j.dir + " cannot be opened", "open", errno);
      changes::Register(journal, j.dir);
      paths.journal = journal;
      supervisor->metadata.journal = journal;
    }
    // The read supervisor's opener thread is confined by the rules the command gets.
    if (supervisor->reads.enabled) supervisor->reads.opener_plan = std::make_shared<const LandlockPlan>(plan.landlock_plan);
  } catch (const std::bad_alloc&) {
    return Status::Sys(ErrorCode::kESECCOMP_INSTALL, "the supervisor's rules could not be made", "malloc", ENOMEM);
  }
  return Status::Ok();
}

StdioEnds::~StdioEnds() {
  for (int fd : child) close(fd);
  for (int fd : parent) {
    if (fd >= 0) close(fd);
  }
}

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

// The go of a sandbox prepared ahead: { file, argv, envp, cwd, stdio, ptyCols?, ptyRows? }.
SpareGo ParseSpareGo(Napi::Env env, const Napi::Object& o, StdioEnds* ends) {
  SpareGo go;
  go.file = GetString(o, "file");
  go.argv = GetStrings(o, "argv");
  if (go.argv.empty()) throw Napi::TypeError::New(env, "Expected argv to hold at least argv[0]");
  go.envp = GetStrings(o, "envp");
  go.cwd = GetString(o, "cwd");
  go.pty_cols = static_cast<uint16_t>(GetNumber(o, "ptyCols", 0));
  go.pty_rows = static_cast<uint16_t>(GetNumber(o, "ptyRows", 0));
  ParseStdio(env, GetArray(o, "stdio"), &go.stdio, ends);
  return go;
}

}  // namespace psb
