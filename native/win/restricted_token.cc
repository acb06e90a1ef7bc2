// RestrictedTokenBuilder (restricted_token.h).
// Tests: test/win32/token.wine.js, test/win32/addon.wine.js (winTokenProbe, winTokenSids).
#include "restricted_token.h"

#include <aclapi.h>

#include <memory>
#include <new>

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

Status QueryToken(HANDLE token, TOKEN_INFORMATION_CLASS cls, std::unique_ptr<BYTE[]>* out) noexcept {
  DWORD len = 0;
  ::GetTokenInformation(token, cls, nullptr, 0, &len);
  if (len == 0) return WinError(ErrorCode::kETOKEN_CREATE, "GetTokenInformation", ::GetLastError());
  out->reset(new (std::nothrow) BYTE[len]);
  if (!*out) return WinError(ErrorCode::kETOKEN_CREATE, "GetTokenInformation", ERROR_NOT_ENOUGH_MEMORY);
  if (!::GetTokenInformation(token, cls, out->get(), len, &len)) {
    return WinError(ErrorCode::kETOKEN_CREATE, "GetTokenInformation", ::GetLastError());
  }
  return Status::Ok();
}

// The mandatory integrity RID of a token (SECURITY_MANDATORY_*_RID).
Status IntegrityRid(HANDLE token, DWORD* rid) noexcept {
  std::unique_ptr<BYTE[]> buf;
  Status s = QueryToken(token, TokenIntegrityLevel, &buf);
  if (!s.ok()) return s;
  PSID sid = reinterpret_cast<TOKEN_MANDATORY_LABEL*>(buf.get())->Label.Sid;
  *rid = *::GetSidSubAuthority(sid, *::GetSidSubAuthorityCount(sid) - 1);
  return Status::Ok();
}

// Groups of an elevated administrator that must not reach the child: in a restricted token they
// would still pass the normal access check (WRITE_RESTRICTED adds a second check for writes only,
// and reads, process memory and every object granting Administrators stay open).
//   S-1-5-32-544 BUILTIN\Administrators, S-1-5-114 local account and member of Administrators.
Status AdminGroupsIn(HANDLE token, std::vector<Sid>* out) noexcept {
  std::unique_ptr<BYTE[]> buf;
  Status s = QueryToken(token, TokenGroups, &buf);
  if (!s.ok()) return s;
  Sid candidates[2];
  s = Sid::FromString(L"S-1-5-32-544", &candidates[0]);
  if (!s.ok()) return s;
  s = Sid::FromString(L"S-1-5-114", &candidates[1]);
  if (!s.ok()) return s;
  auto* groups = reinterpret_cast<TOKEN_GROUPS*>(buf.get());
  try {
    for (Sid& c : candidates) {
      for (DWORD i = 0; i < groups->GroupCount; ++i) {
        // Already deny-only (a UAC-filtered token): nothing to do.
        if ((groups->Groups[i].Attributes & SE_GROUP_USE_FOR_DENY_ONLY) != 0) continue;
        if (::EqualSid(groups->Groups[i].Sid, c.get())) {
          out->push_back(std::move(c));
          break;
        }
      }
    }
  } catch (...) {
    return WinError(ErrorCode::kETOKEN_CREATE, "CreateRestrictedToken", ERROR_NOT_ENOUGH_MEMORY);
  }
  return Status::Ok();
}

// Cap the token at Medium integrity: an elevated host runs at High, and a High child could write
// to (and read the memory of) every Medium process and object of the user.
Status CapAtMedium(HANDLE token, bool* lowered) noexcept {
  *lowered = false;
  DWORD rid = 0;
  Status s = IntegrityRid(token, &rid);
  if (!s.ok()) return s;
  if (rid <= SECURITY_MANDATORY_MEDIUM_RID) return Status::Ok();
  Sid medium;
  s = Sid::FromString(L"S-1-16-8192", &medium);
  if (!s.ok()) return s;
  TOKEN_MANDATORY_LABEL label{};
  label.Label.Sid = medium.get();
  label.Label.Attributes = SE_GROUP_INTEGRITY;
  if (!::SetTokenInformation(token, TokenIntegrityLevel, &label,
                             sizeof(label) + ::GetLengthSid(medium.get()))) {
    return WinError(ErrorCode::kETOKEN_CREATE, "SetTokenInformation", ::GetLastError(), "TokenIntegrityLevel");
  }
  *lowered = true;
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
  // An elevated host: the administrator groups become deny-only in the child.
  std::vector<Sid> admin;
  s = AdminGroupsIn(base.get(), &admin);
  if (!s.ok()) return s;
  std::vector<SID_AND_ATTRIBUTES> disable(admin.size());
  for (size_t i = 0; i < admin.size(); ++i) {
    disable[i].Sid = admin[i].get();
    disable[i].Attributes = 0;
  }
  ScopedHandle restricted;
  if (!::CreateRestrictedToken(base.get(), DISABLE_MAX_PRIVILEGE | LUA_TOKEN | WRITE_RESTRICTED,
                               static_cast<DWORD>(disable.size()), disable.empty() ? nullptr : disable.data(), 0,
                               nullptr, static_cast<DWORD>(sa.size()), sa.data(), restricted.Receive())) {
    return WinError(ErrorCode::kETOKEN_CREATE, "CreateRestrictedToken", ::GetLastError());
  }
  admin_groups_disabled_ = static_cast<int>(admin.size());
  s = CapAtMedium(restricted.get(), &integrity_lowered_);
  if (!s.ok()) return s;
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
