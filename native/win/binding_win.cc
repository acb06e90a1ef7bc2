// Glue only: the Windows native functions. Argument shapes are checked here (TypeError); the
// mechanisms live in sid.cc, restricted_token.cc, acl.cc, desktop.cc, job_object.cc and
// spawn_win.cc, return Status, and never throw. lib/platform/win32.ts is the only caller.
// Tests: test/win32/addon.wine.js, test/win32/spawn.wine.js, test/win32/job.wine.js,
// test/win32/deferred.wine.js.
#include <napi.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "../addon_data.h"
#include "../js_error.h"
#include "acl.h"
#include "desktop.h"
#include "exit_watcher_win.h"
#include "job_object.h"
#include "restricted_token.h"
#include "sid.h"
#include "spawn_win.h"
#include "win_util.h"

namespace psb {

namespace {

using win::Sid;

void Check(Napi::Env env, const Status& s) {
  if (!s.ok()) ThrowSandboxError(env, s);
}

// A JS string as UTF-16, refusing embedded NULs (they would silently cut the Win32 string).
std::wstring WideArg(Napi::Env env, Napi::Value v, const char* what) {
  if (!v.IsString()) throw Napi::TypeError::New(env, std::string("Expected ") + what + " to be a string");
  std::u16string u = v.As<Napi::String>().Utf16Value();
  if (u.find(u'\0') != std::u16string::npos) {
    ThrowSandboxError(env, Status::Error(ErrorCode::kEINVALID_ARGUMENT,
                                         std::string(what) + " contains a NUL byte"));
  }
  return std::wstring(u.begin(), u.end());
}

Napi::String JsString(Napi::Env env, const std::wstring& w) {
  return Napi::String::New(env, std::u16string(w.begin(), w.end()));
}

Sid SidArg(Napi::Env env, Napi::Value v, const char* what) {
  Sid sid;
  Check(env, Sid::FromString(WideArg(env, v, what), &sid));
  return sid;
}

// libuv's fd helpers, exported by node.exe (and by the DLL of an embedding host). They map a
// HANDLE to a C runtime fd in *node's* CRT, which net.Socket({ fd }) then adopts.
template <typename Fn>
Fn NodeExport(const char* name) {
  const wchar_t* modules[] = {nullptr, L"libnode.dll", L"node.dll"};
  for (const wchar_t* m : modules) {
    HMODULE h = m == nullptr ? ::GetModuleHandleW(nullptr) : ::GetModuleHandleW(m);
    if (h == nullptr) continue;
    if (FARPROC p = ::GetProcAddress(h, name)) return reinterpret_cast<Fn>(reinterpret_cast<void*>(p));
  }
  return nullptr;
}
using UvOpenOsfhandle = int (*)(HANDLE);
using UvGetOsfhandle = HANDLE (*)(int);

// ---- SIDs -------------------------------------------------------------------------------------

Napi::Value SidNormalize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1) throw Napi::TypeError::New(env, "Usage: native.winSidNormalize(sidString)");
  Sid sid = SidArg(env, info[0], "sidString");
  std::wstring text;
  Check(env, sid.ToString(&text));
  return JsString(env, text);
}

Napi::Value SidLookup(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1) throw Napi::TypeError::New(env, "Usage: native.winSidLookup(sidString)");
  Sid sid = SidArg(env, info[0], "sidString");
  win::AccountName account;
  Check(env, sid.LookupAccount(&account));
  Napi::Object o = Napi::Object::New(env);
  o.Set("domain", JsString(env, account.domain));
  o.Set("name", JsString(env, account.name));
  o.Set("use", account.use);
  return o;
}

Napi::Value SidFromName(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1) throw Napi::TypeError::New(env, "Usage: native.winSidFromName(accountName)");
  Sid sid;
  Check(env, Sid::FromAccountName(WideArg(env, info[0], "accountName"), &sid));
  std::wstring text;
  Check(env, sid.ToString(&text));
  return JsString(env, text);
}

Napi::Value TokenSids(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  win::ScopedHandle token;
  Check(env, win::OpenOwnProcessToken(token.Receive()));
  Sid user, logon, world;
  Check(env, Sid::UserSidOf(token.get(), &user));
  Check(env, Sid::LogonSidOf(token.get(), &logon));
  Check(env, Sid::World(&world));
  std::wstring u, l, w;
  Check(env, user.ToString(&u));
  Check(env, logon.ToString(&l));
  Check(env, world.ToString(&w));
  Napi::Object o = Napi::Object::New(env);
  o.Set("user", JsString(env, u));
  o.Set("logon", JsString(env, l));
  o.Set("world", JsString(env, w));
  return o;
}

// ---- Token, desktop (self-tests for probe() and the wine suite) -------------------------------

Napi::Value TokenProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsArray()) {
    throw Napi::TypeError::New(env, "Usage: native.winTokenProbe(capabilitySids: string[])");
  }
  Napi::Array caps = info[0].As<Napi::Array>();
  win::RestrictedTokenBuilder builder;
  for (uint32_t i = 0; i < caps.Length(); ++i) builder.AddCapabilitySid(SidArg(env, caps.Get(i), "capabilitySid"));
  win::ScopedHandle token;
  Check(env, builder.Create(&token));
  Napi::Object o = Napi::Object::New(env);
  o.Set("created", token.valid());
  o.Set("restricted", win::TokenIsRestricted(token.get()));
  return o;
}

Napi::Value DesktopProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  win::ScopedHandle token;
  Check(env, win::OpenOwnProcessToken(token.Receive()));
  Sid logon;
  Check(env, Sid::LogonSidOf(token.get(), &logon));
  win::PrivateDesktop desk;
  Check(env, desk.Create(logon));
  DWORD err_open = 0, err_closed = 0;
  bool while_open = win::DesktopExists(desk.name(), &err_open);
  std::wstring name = desk.name(), startup = desk.startup_name();
  desk.Close();
  bool after_close = win::DesktopExists(name, &err_closed);
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", JsString(env, name));
  o.Set("startupName", JsString(env, startup));
  o.Set("openWhileHeld", while_open);
  o.Set("openAfterClose", after_close);
  o.Set("errorAfterClose", static_cast<double>(err_closed));
  return o;
}

// ---- ACLs -------------------------------------------------------------------------------------

constexpr const char* kAclOpNames =
    "'grant-write', 'deny-write', 'deny-delete', 'deny-delete-child', 'remove-denies' or 'revoke'";

win::AclOp AclOpArg(Napi::Env env, Napi::Value v) {
  win::AclOp op;
  if (!v.IsString() || !win::ParseAclOp(v.As<Napi::String>().Utf8Value(), &op)) {
    throw Napi::TypeError::New(env, std::string("Expected op to be ") + kAclOpNames);
  }
  return op;
}

// winAclEdit(op, path, sid) -> changed. Synchronous: the edit (and the subtree walk of an
// inheritable change) runs on the calling thread. For tests, tools and the journal's recovery;
// spawn() uses winAclBatch.
Napi::Value AclEdit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsString()) {
    throw Napi::TypeError::New(env, std::string("Usage: native.winAclEdit(op, path, sid), op: ") + kAclOpNames);
  }
  win::AclOp op = AclOpArg(env, info[0]);
  std::wstring path = WideArg(env, info[1], "path");
  Sid sid = SidArg(env, info[2], "sid");
  bool changed = false;
  Check(env, win::ApplyAclOp(op, path, sid, &changed));
  return Napi::Boolean::New(env, changed);
}

// ---- ACL batch off the JS thread ----------------------------------------------------------------

struct AclBatchItem {
  win::AclOp op;
  std::wstring path;
  Sid sid;
};

struct AclBatchOutcome {
  bool attempted = false;
  bool changed = false;
  Status status;
};

// Runs the edits in order on a libuv thread-pool thread (Execute: Win32 calls only, no Node-API),
// then settles the promise on the JS thread (OnOK). A failed edit stops the batch unless
// continueOnError; cancel() stops it before the next edit (the one in progress completes: a
// SetNamedSecurityInfoW propagation cannot be interrupted half-way without leaving a mixed tree).
class AclBatchWorker : public Napi::AsyncWorker {
 public:
  AclBatchWorker(Napi::Env env, std::vector<AclBatchItem> items, bool continue_on_error,
                 std::shared_ptr<std::atomic<bool>> cancel)
      : Napi::AsyncWorker(env, "process-sandbox ACL batch"),
        deferred_(Napi::Promise::Deferred::New(env)),
        items_(std::move(items)),
        outcomes_(items_.size()),
        continue_on_error_(continue_on_error),
        cancel_(std::move(cancel)) {}

  Napi::Promise Promise() const { return deferred_.Promise(); }

  void Execute() override {
    for (size_t i = 0; i < items_.size(); ++i) {
      if (cancel_->load()) {
        cancelled_ = true;
        return;
      }
      AclBatchOutcome& o = outcomes_[i];
      o.attempted = true;
      o.status = win::ApplyAclOp(items_[i].op, items_[i].path, items_[i].sid, &o.changed);
      if (!o.status.ok() && !continue_on_error_) return;
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Array results = Napi::Array::New(env, outcomes_.size());
    for (uint32_t i = 0; i < outcomes_.size(); ++i) {
      const AclBatchOutcome& o = outcomes_[i];
      if (!o.attempted) {
        results.Set(i, env.Null());
        continue;
      }
      Napi::Object r = Napi::Object::New(env);
      if (o.status.ok()) {
        r.Set("changed", o.changed);
      } else {
        r.Set("error", MakeSandboxError(env, o.status));
      }
      results.Set(i, r);
    }
    Napi::Object out = Napi::Object::New(env);
    out.Set("results", results);
    out.Set("cancelled", cancelled_);
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::vector<AclBatchItem> items_;
  std::vector<AclBatchOutcome> outcomes_;
  bool continue_on_error_;
  bool cancelled_ = false;
  std::shared_ptr<std::atomic<bool>> cancel_;
};

// winAclBatch([{ op, path, sid }, ...], { continueOnError }?) -> { promise, cancel() }
//   promise resolves { results: Array<{ changed } | { error: SandboxError } | null>, cancelled }
//   (null: not attempted, after a failure or a cancel). Arguments are checked here, synchronously
//   (TypeError / SandboxError EINVALID_ARGUMENT / ESID_LOOKUP); nothing runs then.
Napi::Value AclBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || info.Length() > 2 || !info[0].IsArray() ||
      (info.Length() == 2 && !info[1].IsObject() && !info[1].IsUndefined())) {
    throw Napi::TypeError::New(env, "Usage: native.winAclBatch([{ op, path, sid }, ...], { continueOnError }?)");
  }
  Napi::Array edits = info[0].As<Napi::Array>();
  std::vector<AclBatchItem> items;
  items.reserve(edits.Length());
  for (uint32_t i = 0; i < edits.Length(); ++i) {
    Napi::Value e = edits.Get(i);
    if (!e.IsObject()) throw Napi::TypeError::New(env, "Expected each edit to be { op, path, sid }");
    Napi::Object o = e.As<Napi::Object>();
    win::AclOp op = AclOpArg(env, o.Get("op"));
    std::wstring path = WideArg(env, o.Get("path"), "path");
    Sid sid = SidArg(env, o.Get("sid"), "sid");
    items.push_back(AclBatchItem{op, std::move(path), std::move(sid)});
  }
  bool continue_on_error = false;
  if (info.Length() == 2 && info[1].IsObject()) {
    continue_on_error = info[1].As<Napi::Object>().Get("continueOnError").ToBoolean().Value();
  }
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  auto* worker = new AclBatchWorker(env, std::move(items), continue_on_error, cancel);
  Napi::Promise promise = worker->Promise();
  worker->Queue();  // the worker deletes itself after OnOK/OnError
  Napi::Object out = Napi::Object::New(env);
  out.Set("promise", promise);
  out.Set("cancel", Napi::Function::New(
                        env,
                        [cancel](const Napi::CallbackInfo& ci) -> Napi::Value {
                          cancel->store(true);
                          return ci.Env().Undefined();
                        },
                        "cancel"));
  return out;
}

Napi::Value AclSddl(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1) throw Napi::TypeError::New(env, "Usage: native.winAclSddl(path)");
  std::wstring sddl;
  Check(env, win::DaclSddl(WideArg(env, info[0], "path"), &sddl));
  return JsString(env, sddl);
}

// ---- Spawn ------------------------------------------------------------------------------------

struct ChildRecord {
  win::ScopedHandle process;
  win::Job job;
  win::PrivateDesktop desktop;
};

ChildRecord* ChildArg(Napi::Env env, Napi::Value v) {
  if (!v.IsExternal()) throw Napi::TypeError::New(env, "Expected handle to be a child handle from winSpawn");
  return v.As<Napi::External<ChildRecord>>().Data();
}

uint64_t OptionalCount(Napi::Env env, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) return 0;
  if (!v.IsNumber() || v.As<Napi::Number>().DoubleValue() < 0) {
    throw Napi::TypeError::New(env, std::string("Expected job.") + key + " to be a non-negative number");
  }
  return static_cast<uint64_t>(v.As<Napi::Number>().DoubleValue());
}

// winDeleteChildProbe(dir, file, capabilitySid) -> { deleted: boolean, exitCode }
// The self-test Codex's legacy backend runs before trusting a write-restricted token: a sandboxed
// `cmd.exe /c del` of `file`, in `dir`, which grants our restricting SIDs nothing. On a kernel that
// does not apply the restricting SIDs to FILE_DELETE_CHILD/DELETE, the file is gone afterwards.
// Blocks the calling thread until cmd.exe exits (bounded: 20 s, then it is killed).
Napi::Value DeleteChildProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3) throw Napi::TypeError::New(env, "Usage: native.winDeleteChildProbe(dir, file, capabilitySid)");
  std::wstring dir = WideArg(env, info[0], "dir");
  std::wstring file = WideArg(env, info[1], "file");
  Sid cap = SidArg(env, info[2], "capabilitySid");
  wchar_t sys[MAX_PATH];
  UINT n = ::GetSystemDirectoryW(sys, MAX_PATH);
  if (n == 0 || n >= MAX_PATH) Check(env, win::WinError(ErrorCode::kESPAWN, "GetSystemDirectoryW", ::GetLastError()));
  win::SpawnOptions o;
  o.application = std::wstring(sys) + L"\\cmd.exe";
  o.command_line = L"cmd.exe /d /c del /f /q \"" + file + L"\"";
  wchar_t root[MAX_PATH];
  UINT rn = ::GetWindowsDirectoryW(root, MAX_PATH);
  if (rn > 0 && rn < MAX_PATH) o.env.emplace_back(L"SystemRoot", root);
  o.cwd = dir;
  o.sandboxed = true;
  o.capability_sids.push_back(std::move(cap));
  o.private_desktop = true;
  win::SpawnResult r;
  Check(env, win::Spawn(o, &r));
  DWORD wait = ::WaitForSingleObject(r.process.get(), 20000);
  if (wait != WAIT_OBJECT_0) {
    ::TerminateProcess(r.process.get(), 1);
    ThrowSandboxError(env, Status::Error(ErrorCode::kESPAWN, "the FILE_DELETE_CHILD self-test (cmd.exe /c del) did not finish in 20 s"));
  }
  DWORD code = 0;
  ::GetExitCodeProcess(r.process.get(), &code);
  Napi::Object out = Napi::Object::New(env);
  out.Set("deleted", ::GetFileAttributesW(file.c_str()) == INVALID_FILE_ATTRIBUTES);
  out.Set("exitCode", static_cast<double>(code));
  return out;
}

// winSpawn({ file, commandLine, env: [[k, v], ...], cwd, stdio: [s0, s1, s2], sandboxed,
//            capabilitySids, privateDesktop, job: { uiRestrictions, activeProcessLimit,
//            processMemoryLimit } }, onExit(code))
//   s = 'pipe' | 'ignore' | fd number (the parent's fd, passed on)
// -> { pid, handle, fds: [fd|null x3], desktop, jobViaAttribute, tokenRestricted }
Napi::Value Spawn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsObject() || !info[1].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.winSpawn(options, onExit)");
  }
  Napi::Object opts = info[0].As<Napi::Object>();
  win::SpawnOptions o;
  o.application = WideArg(env, opts.Get("file"), "file");
  o.command_line = WideArg(env, opts.Get("commandLine"), "commandLine");
  o.cwd = WideArg(env, opts.Get("cwd"), "cwd");
  Napi::Value env_v = opts.Get("env");
  if (!env_v.IsArray()) throw Napi::TypeError::New(env, "Expected env to be an array of [name, value]");
  Napi::Array env_a = env_v.As<Napi::Array>();
  for (uint32_t i = 0; i < env_a.Length(); ++i) {
    Napi::Value pair = env_a.Get(i);
    if (!pair.IsArray() || pair.As<Napi::Array>().Length() != 2) {
      throw Napi::TypeError::New(env, "Expected env to be an array of [name, value]");
    }
    std::wstring k = WideArg(env, pair.As<Napi::Array>().Get(0u), "env name");
    std::wstring v = WideArg(env, pair.As<Napi::Array>().Get(1u), "env value");
    if (k.empty() || k.find(L'=', 1) != std::wstring::npos) {
      ThrowSandboxError(env, Status::Error(ErrorCode::kEINVALID_ARGUMENT,
                                           "env name '" + win::Narrow(k) + "' is empty or contains '='"));
    }
    o.env.emplace_back(std::move(k), std::move(v));
  }
  Napi::Value stdio_v = opts.Get("stdio");
  if (!stdio_v.IsArray() || stdio_v.As<Napi::Array>().Length() != 3) {
    throw Napi::TypeError::New(env, "Expected stdio to be an array of 3 entries");
  }
  Napi::Array stdio = stdio_v.As<Napi::Array>();
  auto uv_get = NodeExport<UvGetOsfhandle>("uv_get_osfhandle");
  auto uv_open = NodeExport<UvOpenOsfhandle>("uv_open_osfhandle");
  for (uint32_t i = 0; i < 3; ++i) {
    Napi::Value s = stdio.Get(i);
    if (s.IsString() && s.As<Napi::String>().Utf8Value() == "pipe") {
      if (uv_open == nullptr) {
        ThrowSandboxError(env, Status::Error(ErrorCode::kESPAWN,
                                             "stdio 'pipe' needs uv_open_osfhandle, which this host does not export"));
      }
      o.stdio[i].kind = win::StdioChoice::kPipe;
    } else if (s.IsString() && s.As<Napi::String>().Utf8Value() == "ignore") {
      o.stdio[i].kind = win::StdioChoice::kIgnore;
    } else if (s.IsNumber()) {
      int fd = s.As<Napi::Number>().Int32Value();
      o.stdio[i].kind = win::StdioChoice::kHandle;
      o.stdio[i].handle = uv_get != nullptr ? uv_get(fd) : ::GetStdHandle(fd == 0   ? STD_INPUT_HANDLE
                                                                         : fd == 1 ? STD_OUTPUT_HANDLE
                                                                                   : STD_ERROR_HANDLE);
    } else {
      throw Napi::TypeError::New(env, "Expected stdio entries to be 'pipe', 'ignore' or an fd number");
    }
  }
  o.sandboxed = opts.Get("sandboxed").ToBoolean();
  Napi::Value caps_v = opts.Get("capabilitySids");
  if (caps_v.IsArray()) {
    Napi::Array caps = caps_v.As<Napi::Array>();
    for (uint32_t i = 0; i < caps.Length(); ++i) o.capability_sids.push_back(SidArg(env, caps.Get(i), "capabilitySid"));
  }
  Napi::Value desk_v = opts.Get("privateDesktop");
  o.private_desktop = desk_v.IsUndefined() ? true : desk_v.ToBoolean().Value();
  Napi::Value job_v = opts.Get("job");
  if (job_v.IsObject()) {
    Napi::Object job = job_v.As<Napi::Object>();
    o.job.ui_restrictions = job.Get("uiRestrictions").ToBoolean();
    o.job.active_process_limit = static_cast<uint32_t>(OptionalCount(env, job, "activeProcessLimit"));
    o.job.process_memory_limit = OptionalCount(env, job, "processMemoryLimit");
  }

  win::SpawnResult r;
  Check(env, win::Spawn(o, &r));

  // Hand the parent pipe ends to node's CRT; from here on node owns them.
  Napi::Array fds = Napi::Array::New(env, 3);
  for (uint32_t i = 0; i < 3; ++i) {
    if (!r.parent_ends[i].valid()) {
      fds.Set(i, env.Null());
      continue;
    }
    int fd = uv_open(r.parent_ends[i].get());
    if (fd < 0) {
      r.job.Terminate(1);
      ThrowSandboxError(env, Status::Error(ErrorCode::kESPAWN, "uv_open_osfhandle failed for a stdio pipe"));
    }
    r.parent_ends[i].Release();
    fds.Set(i, fd);
  }

  win::ScopedHandle watch;
  HANDLE self = ::GetCurrentProcess();
  if (!::DuplicateHandle(self, r.process.get(), self, watch.Receive(), SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION,
                         FALSE, 0)) {
    DWORD err = ::GetLastError();
    r.job.Terminate(1);
    Check(env, win::WinError(ErrorCode::kESPAWN, "DuplicateHandle", err, "process"));
  }
  auto* record = new ChildRecord{std::move(r.process), std::move(r.job), std::move(r.desktop)};
  Napi::Object out = Napi::Object::New(env);
  out.Set("pid", static_cast<double>(r.pid));
  out.Set("fds", fds);
  out.Set("desktop", record->desktop.valid() ? Napi::Value(JsString(env, record->desktop.startup_name()))
                                             : env.Null());
  out.Set("jobViaAttribute", r.job_via_attribute);
  out.Set("tokenRestricted", r.token_restricted);
  out.Set("adminGroupsDisabled", r.admin_groups_disabled);
  out.Set("integrityLowered", r.integrity_lowered);
  out.Set("handle", Napi::External<ChildRecord>::New(env, record, [](Napi::Env, ChildRecord* c) { delete c; }));
  if (!win::WatchExit(env, std::move(watch), info[1].As<Napi::Function>())) {
    record->job.Terminate(1);
    ThrowSandboxError(env, Status::Error(ErrorCode::kESPAWN, "could not start the exit watcher thread"));
  }
  return out;
}

// winSpawnCheck(file, cwd): the path checks winSpawn starts with (ENOT_FOUND, ENOT_EXECUTABLE,
// EINVALID_ARGUMENT for the cwd), synchronously, so a deferred start refuses bad input at once.
Napi::Value SpawnCheck(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2) throw Napi::TypeError::New(env, "Usage: native.winSpawnCheck(file, cwd)");
  Check(env, win::CheckSpawnPaths(WideArg(env, info[0], "file"), WideArg(env, info[1], "cwd")));
  return env.Undefined();
}

// winKill(handle, exitCode): TerminateJobObject, which ends the whole tree. false once released.
Napi::Value Kill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[1].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.winKill(handle, exitCode)");
  ChildRecord* c = ChildArg(env, info[0]);
  if (!c->job.valid()) return Napi::Boolean::New(env, false);
  Check(env, c->job.Terminate(info[1].As<Napi::Number>().Uint32Value()));
  return Napi::Boolean::New(env, true);
}

// winCloseJob(handle): drop our job handle; kill-on-close ends whatever still runs in it.
Napi::Value CloseJob(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1) throw Napi::TypeError::New(env, "Usage: native.winCloseJob(handle)");
  ChildRecord* c = ChildArg(env, info[0]);
  c->job.Close();
  return env.Undefined();
}

// winRelease(handle): after exit; closes the job (ending leftovers), the desktop and the process.
Napi::Value Release(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1) throw Napi::TypeError::New(env, "Usage: native.winRelease(handle)");
  ChildRecord* c = ChildArg(env, info[0]);
  c->job.Close();
  c->desktop.Close();
  c->process.Reset();
  return env.Undefined();
}

Napi::Value WineVersion(const Napi::CallbackInfo& info) {
  std::string v = win::WineVersion();
  if (v.empty()) return info.Env().Null();
  return Napi::String::New(info.Env(), v);
}

}  // namespace

void InitPlatform(Napi::Env env, Napi::Object exports) {
  exports.Set("platform", Napi::String::New(env, "win32"));
  exports.Set("winWineVersion", Napi::Function::New(env, WineVersion, "winWineVersion"));
  exports.Set("winSidNormalize", Napi::Function::New(env, SidNormalize, "winSidNormalize"));
  exports.Set("winSidLookup", Napi::Function::New(env, SidLookup, "winSidLookup"));
  exports.Set("winSidFromName", Napi::Function::New(env, SidFromName, "winSidFromName"));
  exports.Set("winTokenSids", Napi::Function::New(env, TokenSids, "winTokenSids"));
  exports.Set("winTokenProbe", Napi::Function::New(env, TokenProbe, "winTokenProbe"));
  exports.Set("winDesktopProbe", Napi::Function::New(env, DesktopProbe, "winDesktopProbe"));
  exports.Set("winAclEdit", Napi::Function::New(env, AclEdit, "winAclEdit"));
  exports.Set("winAclBatch", Napi::Function::New(env, AclBatch, "winAclBatch"));
  exports.Set("winAclSddl", Napi::Function::New(env, AclSddl, "winAclSddl"));
  exports.Set("winSpawn", Napi::Function::New(env, Spawn, "winSpawn"));
  exports.Set("winSpawnCheck", Napi::Function::New(env, SpawnCheck, "winSpawnCheck"));
  exports.Set("winDeleteChildProbe", Napi::Function::New(env, DeleteChildProbe, "winDeleteChildProbe"));
  exports.Set("winKill", Napi::Function::New(env, Kill, "winKill"));
  exports.Set("winCloseJob", Napi::Function::New(env, CloseJob, "winCloseJob"));
  exports.Set("winRelease", Napi::Function::New(env, Release, "winRelease"));
}

}  // namespace psb
