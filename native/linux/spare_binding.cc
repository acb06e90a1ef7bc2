// native.prepareSpare / spawnSpare / discardSpare(Async): sandboxes prepared ahead
// (spawn_spare.cc does the work; lib/platform/linux-spare.ts decides when). Tests:
// test/linux/spare.test.ts.
#include <napi.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>

#include "../js_error.h"
#include "binding_linux.h"
#include "exit_watch.h"
#include "plan_args.h"
#include "plan_parse.h"
#include "proc_fields.h"
#include "spawn_linux.h"
#include "supervisor/supervision_envelope.h"

namespace psb {
namespace {

// A spare's JS handle, returned at once while a thread of libuv's pool prepares the spare (those
// threads live as long as the process, which init's parent-death signal needs: it follows the
// thread that cloned it; in Landlock mode with a supervision the pool thread has the spare
// prepared on the supervision's thread, which outlives init: supervision_envelope.h). Using or
// discarding it waits for the preparation to end; it is used or discarded once. Whatever is left when the env goes away (a Worker ending, the process
// exiting) or JS drops the handle is discarded then, without waiting.
struct SpareRecord {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;       // the preparation has ended (spare or status says how)
  bool abandoned = false;  // dropped before it ended: the pool thread discards what it made
  Status status;
  LinuxSpare* spare = nullptr;
  // Landlock mode with a supervision: the thread the spare was prepared on, confined by the
  // envelope, which serves its supervision when it is used (supervision_envelope.h).
  SupervisionThread* on = nullptr;
  SupervisorConfig supervisor;
  int landlock_abi = 0;
  napi_env env = nullptr;
  bool hooked = false;
  std::atomic<int> refs{2};  // the JS handle and the worker

  void Release() {
    if (--refs == 0) delete this;
  }
  // The prepared spare, now owned by the caller (null if preparing failed or it was taken).
  LinuxSpare* Take(SupervisionThread** thread) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return done; });
    LinuxSpare* s = spare;
    spare = nullptr;
    *thread = on;
    on = nullptr;
    return s;
  }
  // Without waiting: what was made is discarded now, or by the pool thread when it is done.
  void Abandon() {
    LinuxSpare* s;
    SupervisionThread* t;
    {
      std::lock_guard<std::mutex> lock(mu);
      abandoned = true;
      s = spare;
      spare = nullptr;
      t = on;
      on = nullptr;
    }
    Discard(s, t);
  }
  // The spare's processes exit and are reaped, then its thread ends.
  static void Discard(LinuxSpare* s, SupervisionThread* t) {
    if (s != nullptr) DiscardSpare(s);
    if (t != nullptr) EndSupervisionThread(t);
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
    SupervisionThread* on = nullptr;
    // Where its supervision will act from, as native.spawn does (binding_linux.cc).
    Status st = SpawnWhereSupervised(
        plan_,
        [&](int* pidfd) {
          Status s = PrepareSpare(std::move(plan_), &spare);
          if (spare != nullptr) *pidfd = SparePidfd(spare);
          return s;
        },
        &on);
    bool abandoned;
    {
      std::lock_guard<std::mutex> lock(rec_->mu);
      abandoned = rec_->abandoned;
      rec_->status = st;
      if (!abandoned) {
        rec_->spare = spare;
        rec_->on = on;
      }
      rec_->done = true;
    }
    rec_->cv.notify_all();
    if (abandoned) SpareRecord::Discard(spare, on);
  }
  void OnOK() override {
    Napi::Env env = Env();
    Callback().Call({rec_->status.ok() ? env.Null() : MakeSandboxError(env, rec_->status)});
  }

 private:
  LinuxSpawnPlan plan_;
  SpareRecord* rec_;
};

}  // namespace

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
  SupervisionThread* on = nullptr;
  LinuxSpare* spare = rec->Take(&on);
  int mask = procfs::Umask();
  if (spare == nullptr || mask < 0) {
    SpareRecord::Discard(spare, on);
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
  Status s = GoSpare(spare, go, &res, &used);  // the spare is gone (reaped) unless used
  if (!s.ok() || !used) {
    SpareRecord::Discard(nullptr, on);
    if (!s.ok()) ThrowSandboxError(env, s);
    return env.Null();
  }
  return WatchStarted(env, res, std::move(rec->supervisor), info[2].As<Napi::Function>(), &ends, rec->landlock_abi, on);
}

// Ends a spare unused on a thread of libuv's pool (its preparation may still be under way, and its
// processes must be reaped): the JS thread does not wait.
class DiscardWorker : public Napi::AsyncWorker {
 public:
  DiscardWorker(Napi::Function cb, SpareRecord* rec, Napi::Value handle) : Napi::AsyncWorker(cb, "psb:discardSpare"), rec_(rec) {
    handle_ = Napi::Persistent(handle);  // the record lives until we are done
  }
  void Execute() override {
    SupervisionThread* on = nullptr;
    LinuxSpare* spare = rec_->Take(&on);
    SpareRecord::Discard(spare, on);
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
  SupervisionThread* on = nullptr;
  LinuxSpare* spare = rec->Take(&on);
  SpareRecord::Discard(spare, on);
  return info.Env().Undefined();
}

}  // namespace psb
