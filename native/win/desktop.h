// PrivateDesktop: a desktop with a random name on the current window station, for one child.
//
//   PrivateDesktop desk;
//   Status s = desk.Create(logon_sid);   // CreateDesktopW + an allow ACE for the logon SID
//   si.lpDesktop = desk.startup_name();   // L"WinSta0\\process-sandbox-<hex>"
//   ... keep `desk` alive until the child has exited ...
//
// Windows destroys the desktop once the last handle is closed and no thread uses it, so the owner
// keeps its handle until the child ends (closing earlier could destroy it before the child's
// user32 attaches). Single-threaded use.
// Tests: see desktop.cc.
#pragma once

#include <string>

#include "scoped_handle.h"
#include "sid.h"

namespace psb::win {

class PrivateDesktop {
 public:
  Status Create(const Sid& logon_sid) noexcept;
  void Close() noexcept { handle_.Reset(); }

  bool valid() const noexcept { return handle_.valid(); }
  const std::wstring& name() const noexcept { return name_; }                 // desktop name only
  const std::wstring& startup_name() const noexcept { return startup_name_; } // "<winsta>\<desktop>"

 private:
  ScopedDesktop handle_;
  std::wstring name_;
  std::wstring startup_name_;
};

// True when a desktop of that name can still be opened on the current window station.
bool DesktopExists(const std::wstring& name, DWORD* err) noexcept;

}  // namespace psb::win
