// PrivateDesktop (desktop.h).
// Tests: test/win32/addon.wine.js (winDesktopProbe), test/win32/spawn.wine.js (desktop).
#include "desktop.h"

#include <aclapi.h>

#include "win_util.h"

namespace psb::win {

namespace {

Status WindowStationName(std::wstring* out) noexcept {
  HWINSTA ws = ::GetProcessWindowStation();  // not owned: must not be closed
  if (ws == nullptr) return WinError(ErrorCode::kEDESKTOP_CREATE, "GetProcessWindowStation", ::GetLastError());
  wchar_t buf[256];
  DWORD needed = 0;
  if (!::GetUserObjectInformationW(ws, UOI_NAME, buf, sizeof(buf), &needed)) {
    return WinError(ErrorCode::kEDESKTOP_CREATE, "GetUserObjectInformationW", ::GetLastError(), "UOI_NAME");
  }
  try {
    out->assign(buf);
  } catch (...) {
    return WinError(ErrorCode::kEDESKTOP_CREATE, "GetUserObjectInformationW", ERROR_NOT_ENOUGH_MEMORY);
  }
  return Status::Ok();
}

}  // namespace

Status PrivateDesktop::Create(const Sid& logon_sid) noexcept {
  std::wstring hex, winsta;
  Status s = RandomHex(12, ErrorCode::kEDESKTOP_CREATE, &hex);
  if (!s.ok()) return s;
  s = WindowStationName(&winsta);
  if (!s.ok()) return s;
  try {
    name_ = L"process-sandbox-" + hex;
    startup_name_ = winsta + L"\\" + name_;
  } catch (...) {
    return WinError(ErrorCode::kEDESKTOP_CREATE, "CreateDesktopW", ERROR_NOT_ENOUGH_MEMORY);
  }
  const ACCESS_MASK all = DESKTOP_CREATEMENU | DESKTOP_CREATEWINDOW | DESKTOP_ENUMERATE |
                          DESKTOP_HOOKCONTROL | DESKTOP_JOURNALPLAYBACK | DESKTOP_JOURNALRECORD |
                          DESKTOP_READOBJECTS | DESKTOP_SWITCHDESKTOP | DESKTOP_WRITEOBJECTS |
                          READ_CONTROL | WRITE_DAC | WRITE_OWNER | DELETE;
  handle_.Reset(::CreateDesktopW(name_.c_str(), nullptr, nullptr, 0, all, nullptr));
  if (!handle_.valid()) {
    return WinError(ErrorCode::kEDESKTOP_CREATE, "CreateDesktopW", ::GetLastError(), Narrow(name_));
  }

  // Add an allow ACE for the logon SID, which the restricted token keeps as a restricting SID.
  PACL current = nullptr;
  ScopedLocal<PSECURITY_DESCRIPTOR> sd;
  DWORD rc = ::GetSecurityInfo(handle_.get(), SE_WINDOW_OBJECT, DACL_SECURITY_INFORMATION, nullptr,
                               nullptr, &current, nullptr, sd.Receive());
  if (rc != ERROR_SUCCESS) {
    handle_.Reset();
    return WinError(ErrorCode::kEDESKTOP_CREATE, "GetSecurityInfo", rc, Narrow(name_));
  }
  EXPLICIT_ACCESSW e{};
  e.grfAccessPermissions = all & ~(WRITE_DAC | WRITE_OWNER | DELETE);
  e.grfAccessMode = GRANT_ACCESS;
  e.grfInheritance = NO_INHERITANCE;
  e.Trustee.TrusteeForm = TRUSTEE_IS_SID;
  e.Trustee.TrusteeType = TRUSTEE_IS_UNKNOWN;
  e.Trustee.ptstrName = reinterpret_cast<LPWSTR>(logon_sid.get());
  ScopedLocal<PACL> next;
  rc = ::SetEntriesInAclW(1, &e, current, next.Receive());
  if (rc == ERROR_SUCCESS) {
    rc = ::SetSecurityInfo(handle_.get(), SE_WINDOW_OBJECT, DACL_SECURITY_INFORMATION, nullptr, nullptr,
                           next.get(), nullptr);
    if (rc != ERROR_SUCCESS) {
      handle_.Reset();
      return WinError(ErrorCode::kEDESKTOP_CREATE, "SetSecurityInfo", rc, Narrow(name_));
    }
  } else {
    handle_.Reset();
    return WinError(ErrorCode::kEDESKTOP_CREATE, "SetEntriesInAclW", rc, Narrow(name_));
  }
  return Status::Ok();
}

bool DesktopExists(const std::wstring& name, DWORD* err) noexcept {
  HDESK h = ::OpenDesktopW(name.c_str(), 0, FALSE, DESKTOP_READOBJECTS);
  if (h == nullptr) {
    *err = ::GetLastError();
    return false;
  }
  ::CloseDesktop(h);
  *err = 0;
  return true;
}

}  // namespace psb::win
