// Spawn a child on Windows: plain (CreateProcessW) or sandboxed (restricted token, private
// desktop, UI-restricted job) with CreateProcessAsUserW. Both use STARTUPINFOEXW with an explicit
// inherited-handle list and put the child in a kill-on-close job before its first instruction
// (PROC_THREAD_ATTRIBUTE_JOB_LIST, or CREATE_SUSPENDED + AssignProcessToJobObject where the
// attribute is not honoured).
//
//   SpawnOptions o;  o.application = L"C:\\Windows\\System32\\cmd.exe";  ...
//   SpawnResult r;
//   Status s = Spawn(o, &r);   // r.parent_ends[i] is our end of stdio pipe i (overlapped)
//
// Called on the JS thread; blocks only for the duration of CreateProcess. noexcept; every
// failure is a Status (ENOT_FOUND, ENOT_EXECUTABLE, EINVALID_ARGUMENT, ESPAWN, E<mechanism>).
// Tests: see spawn_win.cc.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "desktop.h"
#include "job_object.h"
#include "scoped_handle.h"
#include "sid.h"

namespace psb::win {

struct StdioChoice {
  enum Kind { kPipe, kIgnore, kHandle };
  Kind kind = kIgnore;
  HANDLE handle = nullptr;  // kHandle: the parent's handle to pass on (duplicated, not owned)
};

struct SpawnOptions {
  std::wstring application;  // absolute path of the executable
  std::wstring command_line; // already quoted
  std::vector<std::pair<std::wstring, std::wstring>> env;
  std::wstring cwd;
  StdioChoice stdio[3];
  bool sandboxed = false;
  std::vector<Sid> capability_sids;  // sandboxed only
  bool private_desktop = true;       // sandboxed only
  JobSettings job;
};

struct SpawnResult {
  ScopedHandle process;
  DWORD pid = 0;
  Job job;
  PrivateDesktop desktop;
  ScopedHandle parent_ends[3];  // valid for kPipe entries
  bool job_via_attribute = false;
  bool token_restricted = false;  // IsTokenRestricted on the token we built
  int admin_groups_disabled = 0;  // elevated host: administrator groups made deny-only
  bool integrity_lowered = false; // elevated host: High -> Medium
};

Status Spawn(const SpawnOptions& options, SpawnResult* result) noexcept;

// What Spawn checks first (cwd an existing directory, application present and not a directory),
// on its own: lets a deferred start refuse bad input before any ACL work. Two attribute reads.
Status CheckSpawnPaths(const std::wstring& application, const std::wstring& cwd) noexcept;

// The environment block CreateProcess wants: "k=v\0...\0\0", sorted case-insensitively by name.
Status BuildEnvironmentBlock(std::vector<std::pair<std::wstring, std::wstring>> env,
                             std::wstring* out) noexcept;

}  // namespace psb::win
