// Sid: an owned copy of a security identifier, plus lookups and conversions.
//
//   Sid cap;
//   Status s = Sid::FromString(L"S-1-5-21-1-2-3-4", &cap);   // ESID_LOOKUP, winError 1337 if bad
//   Sid logon;
//   s = Sid::LogonSidOf(token, &logon);                       // from TokenGroups (SE_GROUP_LOGON_ID)
//   std::wstring text;  s = cap.ToString(&text);
//
// Plain value type; no handles held. Every failure carries the Win32 code and the API name.
// Tests: see sid.cc.
#pragma once

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <string>
#include <vector>

#include "../status.h"

namespace psb::win {

struct AccountName {
  std::wstring domain;
  std::wstring name;
  int use = 0;  // SID_NAME_USE (1 user, 2 group, 4 alias, 5 well-known group, ...)
};

class Sid {
 public:
  Sid() = default;

  static Status FromString(const std::wstring& text, Sid* out) noexcept;   // ConvertStringSidToSidW
  static Status FromAccountName(const std::wstring& name, Sid* out) noexcept;  // LookupAccountNameW
  static Status FromPsid(PSID psid, Sid* out) noexcept;                     // copy of a valid SID
  static Status World(Sid* out) noexcept;                                   // S-1-1-0 (Everyone)
  static Status LogonSidOf(HANDLE token, Sid* out) noexcept;                // TokenGroups, SE_GROUP_LOGON_ID
  static Status UserSidOf(HANDLE token, Sid* out) noexcept;                 // TokenUser

  Status ToString(std::wstring* out) const noexcept;          // ConvertSidToStringSidW
  Status LookupAccount(AccountName* out) const noexcept;      // LookupAccountSidW

  bool empty() const noexcept { return bytes_.empty(); }
  PSID get() const noexcept { return empty() ? nullptr : const_cast<BYTE*>(bytes_.data()); }

 private:
  std::vector<BYTE> bytes_;
};

// The current process's primary token, opened with the rights the restricted-token builder needs.
Status OpenOwnProcessToken(HANDLE* out) noexcept;

}  // namespace psb::win
