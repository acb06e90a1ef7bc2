// Sid (sid.h).
// Tests: test/win32/addon.wine.js (winSidFromName, winSidLookup, winSidNormalize).
#include "sid.h"

#include <sddl.h>

#include <memory>

#include "scoped_handle.h"
#include "win_util.h"

namespace psb::win {

Status Sid::FromPsid(PSID psid, Sid* out) noexcept {
  if (psid == nullptr || !::IsValidSid(psid)) {
    return WinError(ErrorCode::kESID_LOOKUP, "IsValidSid", ERROR_INVALID_SID);
  }
  DWORD len = ::GetLengthSid(psid);
  try {
    out->bytes_.assign(static_cast<BYTE*>(psid), static_cast<BYTE*>(psid) + len);
  } catch (...) {
    return WinError(ErrorCode::kESID_LOOKUP, "GetLengthSid", ERROR_NOT_ENOUGH_MEMORY);
  }
  return Status::Ok();
}

Status Sid::FromString(const std::wstring& text, Sid* out) noexcept {
  ScopedLocal<PSID> psid;
  if (!::ConvertStringSidToSidW(text.c_str(), psid.Receive())) {
    DWORD err = ::GetLastError();
    return WinError(ErrorCode::kESID_LOOKUP, "ConvertStringSidToSidW", err, "'" + Narrow(text) + "'");
  }
  return FromPsid(psid.get(), out);
}

Status Sid::FromAccountName(const std::wstring& name, Sid* out) noexcept {
  DWORD sid_len = 0, domain_len = 0;
  SID_NAME_USE use;
  ::LookupAccountNameW(nullptr, name.c_str(), nullptr, &sid_len, nullptr, &domain_len, &use);
  DWORD err = ::GetLastError();
  if (sid_len == 0) {
    return WinError(ErrorCode::kESID_LOOKUP, "LookupAccountNameW", err, "'" + Narrow(name) + "'");
  }
  try {
    std::vector<BYTE> sid(sid_len);
    std::wstring domain(domain_len + 1, L'\0');
    if (!::LookupAccountNameW(nullptr, name.c_str(), sid.data(), &sid_len, domain.data(), &domain_len,
                              &use)) {
      err = ::GetLastError();
      return WinError(ErrorCode::kESID_LOOKUP, "LookupAccountNameW", err, "'" + Narrow(name) + "'");
    }
    return FromPsid(sid.data(), out);
  } catch (...) {
    return WinError(ErrorCode::kESID_LOOKUP, "LookupAccountNameW", ERROR_NOT_ENOUGH_MEMORY);
  }
}

Status Sid::World(Sid* out) noexcept {
  BYTE buf[SECURITY_MAX_SID_SIZE];
  DWORD len = sizeof(buf);
  if (!::CreateWellKnownSid(WinWorldSid, nullptr, buf, &len)) {
    return WinError(ErrorCode::kESID_LOOKUP, "CreateWellKnownSid", ::GetLastError(), "WinWorldSid");
  }
  return FromPsid(buf, out);
}

namespace {

// GetTokenInformation into a heap buffer sized by the first call.
Status TokenInfo(HANDLE token, TOKEN_INFORMATION_CLASS cls, std::unique_ptr<BYTE[]>* out) noexcept {
  DWORD len = 0;
  ::GetTokenInformation(token, cls, nullptr, 0, &len);
  if (len == 0) return WinError(ErrorCode::kESID_LOOKUP, "GetTokenInformation", ::GetLastError());
  out->reset(new (std::nothrow) BYTE[len]);
  if (!*out) return WinError(ErrorCode::kESID_LOOKUP, "GetTokenInformation", ERROR_NOT_ENOUGH_MEMORY);
  if (!::GetTokenInformation(token, cls, out->get(), len, &len)) {
    return WinError(ErrorCode::kESID_LOOKUP, "GetTokenInformation", ::GetLastError());
  }
  return Status::Ok();
}

}  // namespace

Status Sid::LogonSidOf(HANDLE token, Sid* out) noexcept {
  std::unique_ptr<BYTE[]> buf;
  Status s = TokenInfo(token, TokenGroups, &buf);
  if (!s.ok()) return s;
  auto* groups = reinterpret_cast<TOKEN_GROUPS*>(buf.get());
  for (DWORD i = 0; i < groups->GroupCount; ++i) {
    if ((groups->Groups[i].Attributes & SE_GROUP_LOGON_ID) == SE_GROUP_LOGON_ID) {
      return FromPsid(groups->Groups[i].Sid, out);
    }
  }
  return Status::Sys(ErrorCode::kESID_LOOKUP,
                     "GetTokenInformation(TokenGroups): the token has no logon SID (SE_GROUP_LOGON_ID)",
                     "GetTokenInformation", ERROR_NOT_FOUND);
}

Status Sid::UserSidOf(HANDLE token, Sid* out) noexcept {
  std::unique_ptr<BYTE[]> buf;
  Status s = TokenInfo(token, TokenUser, &buf);
  if (!s.ok()) return s;
  return FromPsid(reinterpret_cast<TOKEN_USER*>(buf.get())->User.Sid, out);
}

Status Sid::ToString(std::wstring* out) const noexcept {
  ScopedLocal<LPWSTR> text;
  if (!::ConvertSidToStringSidW(get(), text.Receive())) {
    return WinError(ErrorCode::kESID_LOOKUP, "ConvertSidToStringSidW", ::GetLastError());
  }
  try {
    out->assign(text.get());
  } catch (...) {
    return WinError(ErrorCode::kESID_LOOKUP, "ConvertSidToStringSidW", ERROR_NOT_ENOUGH_MEMORY);
  }
  return Status::Ok();
}

Status Sid::LookupAccount(AccountName* out) const noexcept {
  DWORD name_len = 0, domain_len = 0;
  SID_NAME_USE use;
  ::LookupAccountSidW(nullptr, get(), nullptr, &name_len, nullptr, &domain_len, &use);
  DWORD err = ::GetLastError();
  if (name_len == 0) return WinError(ErrorCode::kESID_LOOKUP, "LookupAccountSidW", err);
  try {
    std::wstring name(name_len, L'\0'), domain(domain_len + 1, L'\0');
    if (!::LookupAccountSidW(nullptr, get(), name.data(), &name_len, domain.data(), &domain_len, &use)) {
      return WinError(ErrorCode::kESID_LOOKUP, "LookupAccountSidW", ::GetLastError());
    }
    name.resize(name_len);
    domain.resize(domain_len);
    out->name = std::move(name);
    out->domain = std::move(domain);
    out->use = static_cast<int>(use);
  } catch (...) {
    return WinError(ErrorCode::kESID_LOOKUP, "LookupAccountSidW", ERROR_NOT_ENOUGH_MEMORY);
  }
  return Status::Ok();
}

Status OpenOwnProcessToken(HANDLE* out) noexcept {
  const DWORD access = TOKEN_DUPLICATE | TOKEN_QUERY | TOKEN_ASSIGN_PRIMARY | TOKEN_ADJUST_DEFAULT |
                       TOKEN_ADJUST_SESSIONID | TOKEN_ADJUST_PRIVILEGES;
  if (!::OpenProcessToken(::GetCurrentProcess(), access, out)) {
    return WinError(ErrorCode::kETOKEN_CREATE, "OpenProcessToken", ::GetLastError());
  }
  return Status::Ok();
}

}  // namespace psb::win
