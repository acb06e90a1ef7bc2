// native.prepareSpare / spawnSpare / discardSpare(Async): sandboxes prepared ahead
// (spawn_spare.cc does the work; lib/platform/linux-spare.ts decides when). Tests:
// test/linux/spare.test.ts.
#include <napi.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../js_error.h"
#include "binding_linux.h"
#include "exit_watch.h"
#include "plan_args.h"
#include "plan_parse.h"
#include "proc_fields.h"
#include "spawn_linux.h"
#include "supervision_process.h"
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
  // Prepared in the supervision process (supervision_process.h): its id there (chosen here;
  // 0 once taken, dropped, or when the preparation could not be sent), whether the preparation
  // has been sent (or never will be), and the plan to send; spare and on stay null. Its go may
  // follow as soon as it is sent: the process serves them in order.
  bool remote = false;
  int32_t remote_id = 0;
  bool sent = false;
  std::string remote_bytes;
  std::vector<int> remote_fds;
  napi_env env = nullptr;
  bool hooked = false;
  std::atomic<int> refs{2};  // the JS handle and the worker

  void Release() {
    if (--refs == 0) delete this;
  }
  // The prepared spare, now owned by the caller (null if preparing failed or it was taken).
  LinuxSpare* Take(SupervisionThread** thread, int32_t* id = nullptr) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return done || (remote && sent); });
    LinuxSpare* s = spare;
    spare = nullptr;
    *thread = on;
    on = nullptr;
    if (id != nullptr) *id = remote_id;
    remote_id = 0;
    return s;
  }
  // Without waiting: what was made is discarded now, or by the pool thread when it is done.
  void Abandon() {
    LinuxSpare* s;
    SupervisionThread* t;
    int32_t id;
    {
      std::lock_guard<std::mutex> lock(mu);
      abandoned = true;
      s = spare;
      spare = nullptr;
      t = on;
      on = nullptr;
      id = sent ? remote_id : 0;  // (not sent yet: it never will be)
      remote_id = 0;
    }
    Discard(s, t, id);
  }
  // The spare's processes exit and are reaped, then its thread ends (in the supervision process
  // when it was prepared there).
  static void Discard(LinuxSpare* s, SupervisionThread* t, int32_t id = 0) {
    if (s != nullptr) DiscardSpare(s);
    if (t != nullptr) EndSupervisionThread(t);
    if (id > 0) DiscardSpareInSupervisionProcess(id);
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
    if (rec_->remote) return ExecuteThere();
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
  // Prepared in the supervision process: the same record, with its id there. The preparation
  // is sent under the record's lock, so that a discard (Abandon) can only follow it.
  void ExecuteThere() {
    std::shared_ptr<SupervisionReply> sent;
    Status st;
    {
      std::lock_guard<std::mutex> lock(rec_->mu);
      if (!rec_->abandoned) {
        sent = SendPrepareToSupervisionProcess(std::move(rec_->remote_bytes), std::move(rec_->remote_fds), rec_->remote_id, &st);
        if (!sent) rec_->remote_id = 0;
      }
      rec_->sent = true;
    }
    rec_->cv.notify_all();
    if (sent) st = AwaitPrepareInSupervisionProcess(sent);
    {
      std::lock_guard<std::mutex> lock(rec_->mu);
      rec_->status = st;
      rec_->done = true;
    }
    rec_->cv.notify_all();
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

// native.prepareSpare(plan, done(err), inSupervisionProcess?) -> spare: plan as for spawn, without
// stdio. done is called once the preparation has ended; the handle may be used (or discarded)
// before that. inSupervisionProcess: prepared (and later served) by the supervision process
// (supervision_process.h), which must be running.
Napi::Value PrepareSpareJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || info.Length() > 3 || !info[0].IsObject() || !info[1].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.prepareSpare(plan, callback, inSupervisionProcess?)");
  }
  LinuxSpawnPlan plan;
  SpareRecord* rec = new SpareRecord();
  try {
    rec->remote = info.Length() == 3 && info[2].ToBoolean().Value();
    if (rec->remote) {
      SpareToWire(env, info[0].As<Napi::Object>(), &rec->remote_bytes, &rec->remote_fds);
      rec->remote_id = NextSpareIdInSupervisionProcess();
    }
    else ParsePlan(env, info[0].As<Napi::Object>(), &plan, &rec->supervisor);
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
  StdioEnds ends;
  rec->Unhook();
  SupervisionThread* on = nullptr;
  if (rec->remote) {
    int32_t id = 0;
    rec->Take(&on, &id);
    return id > 0 ? SpawnSpareInSupervisionProcess(env, id, o, info[2].As<Napi::Function>()) : env.Null();
  }
  SpareGo go = ParseSpareGo(env, o, &ends);
  LinuxSpare* spare = rec->Take(&on);
  int mask = procfs::Umask();
  if (spare == nullptr || mask < 0) {
    SpareRecord::Discard(spare, on);
    return env.Null();
  }
  go.umask = static_cast<unsigned>(mask);
  rec->supervisor.paths.rebuild_at_serve = true;
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
    int32_t id = 0;
    LinuxSpare* spare = rec_->Take(&on, &id);
    SpareRecord::Discard(spare, on, id);
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
  int32_t id = 0;
  LinuxSpare* spare = rec->Take(&on, &id);
  SpareRecord::Discard(spare, on, id);
  return info.Env().Undefined();
}

}  // namespace psb
