// Job: the kill-on-close job every child is born into.
//
//   JobSettings js;  js.ui_restrictions = true;  js.active_process_limit = 64;
//   Job job;
//   Status s = job.Create(js);        // CreateJobObjectW + SetInformationJobObject
//   ... PROC_THREAD_ATTRIBUTE_JOB_LIST with job.get() ...
//   job.Terminate(1);                 // ends the whole tree
//   job.Close();                      // kill-on-close: anything still running ends too
//
// Single-threaded use.
// Tests: see job_object.cc.
#pragma once

#include <cstdint>

#include "scoped_handle.h"
#include "../status.h"

namespace psb::win {

struct JobSettings {
  bool ui_restrictions = false;       // no clipboard, global atoms, display changes, desktop switch
  uint32_t active_process_limit = 0;  // 0 = none
  uint64_t process_memory_limit = 0;  // bytes per process; 0 = none
};

class Job {
 public:
  Status Create(const JobSettings& settings) noexcept;
  Status Assign(HANDLE process) noexcept;       // AssignProcessToJobObject
  bool Contains(HANDLE process) const noexcept; // IsProcessInJob
  Status Terminate(UINT exit_code) noexcept;
  void Close() noexcept { handle_.Reset(); }

  bool valid() const noexcept { return handle_.valid(); }
  HANDLE get() const noexcept { return handle_.get(); }

 private:
  ScopedHandle handle_;
};

}  // namespace psb::win
