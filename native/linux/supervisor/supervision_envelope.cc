// The supervision's envelope (supervision_envelope.h).
#include "supervision_envelope.h"

#include <unistd.h>

#include <string>

namespace psb {

LandlockPlan SupervisionEnvelope(const LinuxSpawnPlan& plan) {
  // The policy's grants before deny-read carving (lib/platform/linux/plan.ts): readable roots
  // whole (the supervision lists and stats deny-read paths), writable roots whole (it judges
  // carve-outs itself), the run's TMPDIR, the devices the policy allows.
  LandlockPlan e = plan.envelope_plan;
  const int abi = e.abi;
  // /proc, read and write: the classes reach the command through /proc/<tid>/{fd,fdinfo,cwd,mem,
  // status} (mem written where process_vm_writev is refused: task_access.h), list /proc for the
  // read class, and the spawn's children write their own oom_score_adj (spawn_command.cc) under
  // this domain. What the write right leaves is listed in docs/security.md: another process's
  // files there are refused anyway (Landlock's ptrace rule: a task outside this domain and its
  // nested ones), the host's own /proc/self ones and the global ones (/proc/sys, as root) are not.
  e.AddPath("/proc", LandlockReadAccess(abi) | landlock::kFsWriteFile | (abi >= 3 ? landlock::kFsTruncate : 0));
  // The terminals on the command's fds 0-2 at spawn, by inode (the same object the command's own
  // rules grant, landlock.cc stdio_terminals): the path class opens the one held at spawn for
  // the command (supervise_paths.cc MayWrite); another session's terminal is refused. Named
  // through the fd in the host's table, which the thread shares; /proc/thread-self follows the
  // fd to the object, never a path another terminal could take.
  constexpr uint64_t kTerminal = landlock::kFsReadFile | landlock::kFsWriteFile | landlock::kFsIoctlDev;
  for (size_t i = 0; i < plan.stdio.size() && i < 3; ++i) {
    if (plan.stdio[i] >= 0 && isatty(plan.stdio[i])) {
      e.AddPath("/proc/thread-self/fd/" + std::to_string(plan.stdio[i]), kTerminal);
    }
  }
  // Signals (ABI 6): to tasks of this domain and the ones nested in it only, the sandbox's.
  if (abi >= 6) e.scoped = landlock::kScopeSignal;
  e.Finalize();
  return e;
}

Status SpawnWhereSupervised(const LinuxSpawnPlan& plan, const std::function<Status(int* pidfd)>& spawn, SupervisionThread** on) {
  *on = nullptr;
  int pidfd = -1;
  if (plan.mode != LinuxMode::kLandlock || !plan.seccomp_listener || plan.envelope_plan.abi <= 0) return spawn(&pidfd);
  const LandlockPlan envelope = SupervisionEnvelope(plan);
  int err = 0;
  SupervisionThread* t = StartSupervisionThread(envelope, &err);
  if (t == nullptr) return Status::Sys(ErrorCode::kESECCOMP_INSTALL, "the supervision's thread could not be started", "pthread_create", -err);
  struct Job {
    const std::function<Status(int*)>* spawn;
    Status s;
    int pidfd = -1;
  } job{&spawn, {}};
  const int confined = RunOnSupervisionThread(
      t, [](void* a) {
        Job* j = static_cast<Job*>(a);
        j->s = (*j->spawn)(&j->pidfd);
      },
      &job);
  // Fail closed: nothing was spawned. As for the command's own Landlock layer (E2BIG: the host
  // is nested too deep already, 16 layers at most; the envelope takes one more per sandbox).
  if (confined < 0) {
    return Status::Sys(ErrorCode::kELANDLOCK_UNSUPPORTED, "the supervision's Landlock envelope could not be applied",
                       "landlock_restrict_self", -confined);
  }
  if (!job.s.ok()) {
    EndSupervisionThread(t);
    return job.s;
  }
  SupervisionThreadSpawned(t, job.pidfd);
  *on = t;
  return job.s;
}

Status SpawnLinuxWhereSupervised(LinuxSpawnPlan& plan, LinuxSpawnResult* res, SupervisionThread** on) {
  return SpawnWhereSupervised(
      plan,
      [&](int* pidfd) {
        Status st = SpawnLinux(plan, res);
        *pidfd = res->pidfd;
        return st;
      },
      on);
}

}  // namespace psb
