#include "restricted_token.h"

#include <aclapi.h>

#include <memory>

#include "win_util.h"

namespace psb::win {

namespace {

Status SetDefaultDacl(HANDLE token, const std::vector<const Sid*>& sids) noexcept {
  std::vector<EXPLICIT_ACCESSW> entries(sids.size());
  for (size_t i = 0; i < sids.size(); ++i) {
    EXPLICIT_ACCESSW& e = entries[i];
    e = EXPLICIT_ACCESSW{};
    e.grfAccessPermissions = GENERIC_ALL;
    e.grfAccessMode = GRANT_ACCESS;
    e.grfInheritance = NO_INHERITANCE;
    e.Trustee.TrusteeForm = TRUSTEE_IS_SID;
    e.Trustee.TrusteeType = TRUSTEE_IS_UNKNOWN;
    e.Trustee.ptstrName = reinterpret_cast<LPWSTR>(sids[i]->get());
  }
  ScopedLocal<PACL> acl;
  DWORD rc = ::SetEntriesInAclW(static_cast<ULONG>(entries.size()), entries.data(), nullptr,
                                acl.Receive());
  if (rc != ERROR_SUCCESS) return WinError(ErrorCode::kETOKEN_CREATE, "SetEntriesInAclW", rc);
  TOKEN_DEFAULT_DACL dd{acl.get()};
  if (!::SetTokenInformation(token, TokenDefaultDacl, &dd, sizeof(dd))) {
    return WinError(ErrorCode::kETOKEN_CREATE, "SetTokenInformation", ::GetLastError(),
                    "TokenDefaultDacl");
  }
  return Status::Ok();
}

Status EnableChangeNotify(HANDLE token) noexcept {
  TOKEN_PRIVILEGES tp{};
  tp.PrivilegeCount = 1;
  if (!::LookupPrivilegeValueW(nullptr, SE_CHANGE_NOTIFY_NAME, &tp.Privileges[0].Luid)) {
    return WinError(ErrorCode::kETOKEN_CREATE, "LookupPrivilegeValueW", ::GetLastError(),
                    "SeChangeNotifyPrivilege");
  }
  tp.Privileges[0].Attributes = SE_PRIVILEGE_ENABLED;
  if (!::AdjustTokenPrivileges(token, FALSE, &tp, 0, nullptr, nullptr)) {
    return WinError(ErrorCode::kETOKEN_CREATE, "AdjustTokenPrivileges", ::GetLastError(),
                    "SeChangeNotifyPrivilege");
  }
  // ERROR_NOT_ALL_ASSIGNED only means the privilege was already gone; the token still works.
  return Status::Ok();
}

}  // namespace

Status RestrictedTokenBuilder::Create(ScopedHandle* out) noexcept {
  ScopedHandle base;
  Status s = OpenOwnProcessToken(base.Receive());
  if (!s.ok()) return s;
  s = Sid::LogonSidOf(base.get(), &logon_sid_);
  if (!s.ok()) return s;
  Sid world;
  s = Sid::World(&world);
  if (!s.ok()) return s;

  std::vector<const Sid*> restricting;
  try {
    for (const Sid& cap : capability_sids_) restricting.push_back(&cap);
    restricting.push_back(&logon_sid_);
    restricting.push_back(&world);
  } catch (...) {
    return WinError(ErrorCode::kETOKEN_CREATE, "CreateRestrictedToken", ERROR_NOT_ENOUGH_MEMORY);
  }
  std::vector<SID_AND_ATTRIBUTES> sa(restricting.size());
  for (size_t i = 0; i < restricting.size(); ++i) {
    sa[i].Sid = restricting[i]->get();
    sa[i].Attributes = 0;
  }
  ScopedHandle restricted;
  if (!::CreateRestrictedToken(base.get(), DISABLE_MAX_PRIVILEGE | LUA_TOKEN | WRITE_RESTRICTED, 0,
                               nullptr, 0, nullptr, static_cast<DWORD>(sa.size()), sa.data(),
                               restricted.Receive())) {
    return WinError(ErrorCode::kETOKEN_CREATE, "CreateRestrictedToken", ::GetLastError());
  }
  Sid user, system;
  s = Sid::UserSidOf(base.get(), &user);
  if (!s.ok()) return s;
  s = Sid::FromString(L"S-1-5-18", &system);
  if (!s.ok()) return s;
  std::vector<const Sid*> default_dacl;
  try {
    default_dacl.push_back(&user);
    default_dacl.push_back(&system);
    default_dacl.push_back(&logon_sid_);
    for (const Sid& cap : capability_sids_) default_dacl.push_back(&cap);
  } catch (...) {
    return WinError(ErrorCode::kETOKEN_CREATE, "SetTokenInformation", ERROR_NOT_ENOUGH_MEMORY);
  }
  s = SetDefaultDacl(restricted.get(), default_dacl);
  if (!s.ok()) return s;
  s = EnableChangeNotify(restricted.get());
  if (!s.ok()) return s;
  *out = std::move(restricted);
  return Status::Ok();
}

bool TokenIsRestricted(HANDLE token) noexcept { return ::IsTokenRestricted(token) != FALSE; }

}  // namespace psb::win
