// Job (job_object.h).
// Tests: test/win32/job.wine.js (kill-on-close, kill(), leftovers).
#include "job_object.h"

#include "win_util.h"

namespace psb::win {

Status Job::Create(const JobSettings& settings) noexcept {
  handle_.Reset(::CreateJobObjectW(nullptr, nullptr));
  if (!handle_.valid()) return WinError(ErrorCode::kEJOB_CREATE, "CreateJobObjectW", ::GetLastError());

  JOBOBJECT_EXTENDED_LIMIT_INFORMATION limits{};
  // No BREAKAWAY_OK: nothing in the job may leave it. DIE_ON_UNHANDLED_EXCEPTION: a crashing
  // child ends instead of waiting on an error-reporting dialog nobody can see on its desktop.
  limits.BasicLimitInformation.LimitFlags =
      JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION;
  if (settings.active_process_limit > 0) {
    limits.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_ACTIVE_PROCESS;
    limits.BasicLimitInformation.ActiveProcessLimit = settings.active_process_limit;
  }
  if (settings.process_memory_limit > 0) {
    limits.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_PROCESS_MEMORY;
    limits.ProcessMemoryLimit = static_cast<SIZE_T>(settings.process_memory_limit);
  }
  if (!::SetInformationJobObject(handle_.get(), JobObjectExtendedLimitInformation, &limits,
                                 sizeof(limits))) {
    DWORD err = ::GetLastError();
    handle_.Reset();
    return WinError(ErrorCode::kEJOB_CREATE, "SetInformationJobObject", err,
                    "JobObjectExtendedLimitInformation");
  }
  if (settings.ui_restrictions) {
    JOBOBJECT_BASIC_UI_RESTRICTIONS ui{};
    ui.UIRestrictionsClass = JOB_OBJECT_UILIMIT_READCLIPBOARD | JOB_OBJECT_UILIMIT_WRITECLIPBOARD |
                             JOB_OBJECT_UILIMIT_GLOBALATOMS | JOB_OBJECT_UILIMIT_DISPLAYSETTINGS |
                             JOB_OBJECT_UILIMIT_DESKTOP | JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS |
                             JOB_OBJECT_UILIMIT_EXITWINDOWS | JOB_OBJECT_UILIMIT_HANDLES;
    if (!::SetInformationJobObject(handle_.get(), JobObjectBasicUIRestrictions, &ui, sizeof(ui))) {
      DWORD err = ::GetLastError();
      handle_.Reset();
      return WinError(ErrorCode::kEJOB_CREATE, "SetInformationJobObject", err,
                      "JobObjectBasicUIRestrictions");
    }
  }
  return Status::Ok();
}

Status Job::Assign(HANDLE process) noexcept {
  if (!::AssignProcessToJobObject(handle_.get(), process)) {
    return WinError(ErrorCode::kEJOB_CREATE, "AssignProcessToJobObject", ::GetLastError());
  }
  return Status::Ok();
}

bool Job::Contains(HANDLE process) const noexcept {
  BOOL in = FALSE;
  return ::IsProcessInJob(process, handle_.get(), &in) && in;
}

Status Job::Terminate(UINT exit_code) noexcept {
  if (!handle_.valid()) return Status::Ok();
  if (!::TerminateJobObject(handle_.get(), exit_code)) {
    return WinError(ErrorCode::kEJOB_CREATE, "TerminateJobObject", ::GetLastError());
  }
  return Status::Ok();
}

}  // namespace psb::win
