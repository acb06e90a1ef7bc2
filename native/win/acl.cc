#include "acl.h"

#include <aclapi.h>
#include <sddl.h>

#include "scoped_handle.h"
#include "win_util.h"

namespace psb::win {

namespace {

struct Dacl {
  ScopedLocal<PSECURITY_DESCRIPTOR> sd;
  PACL acl = nullptr;  // points into sd
};

Status ReadDacl(const std::wstring& path, Dacl* out) noexcept {
  DWORD rc = ::GetNamedSecurityInfoW(path.c_str(), SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, nullptr,
                                     nullptr, &out->acl, nullptr, out->sd.Receive());
  if (rc != ERROR_SUCCESS) {
    return WinError(ErrorCode::kEACL_EDIT, "GetNamedSecurityInfoW", rc, Narrow(path));
  }
  return Status::Ok();
}

// An explicit (not inherited) ACE of `type` for `sid` whose mask covers `mask`.
bool HasExplicitAce(PACL acl, BYTE type, const Sid& sid, DWORD mask, BYTE inherit_flags) noexcept {
  if (acl == nullptr) return false;
  for (DWORD i = 0; i < acl->AceCount; ++i) {
    void* raw = nullptr;
    if (!::GetAce(acl, i, &raw)) continue;
    auto* header = static_cast<ACE_HEADER*>(raw);
    if (header->AceType != type || (header->AceFlags & INHERITED_ACE) != 0) continue;
    if ((header->AceFlags & (OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE)) != inherit_flags) continue;
    // ACCESS_ALLOWED_ACE and ACCESS_DENIED_ACE share the layout.
    auto* ace = static_cast<ACCESS_ALLOWED_ACE*>(raw);
    if ((ace->Mask & mask) == mask && ::EqualSid(&ace->SidStart, sid.get())) return true;
  }
  return false;
}

Status ApplyEntry(const std::wstring& path, PACL current, ACCESS_MODE mode, DWORD mask, DWORD inheritance,
                  const Sid& sid) noexcept {
  EXPLICIT_ACCESSW e{};
  e.grfAccessPermissions = mask;
  e.grfAccessMode = mode;
  e.grfInheritance = inheritance;
  e.Trustee.TrusteeForm = TRUSTEE_IS_SID;
  e.Trustee.TrusteeType = TRUSTEE_IS_UNKNOWN;
  e.Trustee.ptstrName = reinterpret_cast<LPWSTR>(sid.get());
  ScopedLocal<PACL> next;
  DWORD rc = ::SetEntriesInAclW(1, &e, current, next.Receive());
  if (rc != ERROR_SUCCESS) return WinError(ErrorCode::kEACL_EDIT, "SetEntriesInAclW", rc, Narrow(path));
  rc = ::SetNamedSecurityInfoW(const_cast<LPWSTR>(path.c_str()), SE_FILE_OBJECT, DACL_SECURITY_INFORMATION,
                               nullptr, nullptr, next.get(), nullptr);
  if (rc != ERROR_SUCCESS) {
    return WinError(ErrorCode::kEACL_EDIT, "SetNamedSecurityInfoW", rc, Narrow(path));
  }
  return Status::Ok();
}

// Inheritance only makes sense on directories; a writable or protected *file* gets a plain ACE.
bool IsDirectory(const std::wstring& path) noexcept {
  DWORD attrs = ::GetFileAttributesW(path.c_str());
  return attrs != INVALID_FILE_ATTRIBUTES && (attrs & FILE_ATTRIBUTE_DIRECTORY) != 0;
}

std::wstring ParentOf(const std::wstring& path) {
  size_t cut = path.find_last_of(L"\\/");
  if (cut == std::wstring::npos || cut < 3) return std::wstring();  // "C:\" has no parent to edit
  return path.substr(0, cut);
}

}  // namespace

Status GrantWrite(const std::wstring& path, const Sid& sid, bool* changed) noexcept {
  *changed = false;
  Dacl d;
  Status s = ReadDacl(path, &d);
  if (!s.ok()) return s;
  const bool dir = IsDirectory(path);
  const BYTE inherit = dir ? OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE : 0;
  if (HasExplicitAce(d.acl, ACCESS_ALLOWED_ACE_TYPE, sid, kWriteRootMask, inherit)) return Status::Ok();
  s = ApplyEntry(path, d.acl, GRANT_ACCESS, kWriteRootMask, dir ? SUB_CONTAINERS_AND_OBJECTS_INHERIT : NO_INHERITANCE,
                 sid);
  if (s.ok()) *changed = true;
  return s;
}

Status DenyWrite(const std::wstring& path, const Sid& sid, bool* changed) noexcept {
  *changed = false;
  Dacl d;
  Status s = ReadDacl(path, &d);
  if (!s.ok()) return s;
  const bool dir = IsDirectory(path);
  const BYTE inherit = dir ? OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE : 0;
  if (!HasExplicitAce(d.acl, ACCESS_DENIED_ACE_TYPE, sid, kDenyWriteMask, inherit)) {
    s = ApplyEntry(path, d.acl, DENY_ACCESS, kDenyWriteMask, dir ? SUB_CONTAINERS_AND_OBJECTS_INHERIT : NO_INHERITANCE,
                   sid);
    if (!s.ok()) return s;
    *changed = true;
  }
  std::wstring parent;
  try {
    parent = ParentOf(path);
  } catch (...) {
    return WinError(ErrorCode::kEACL_EDIT, "DenyWrite", ERROR_NOT_ENOUGH_MEMORY);
  }
  if (parent.empty()) return Status::Ok();
  Dacl p;
  s = ReadDacl(parent, &p);
  if (!s.ok()) return s;
  if (!HasExplicitAce(p.acl, ACCESS_DENIED_ACE_TYPE, sid, FILE_DELETE_CHILD, 0)) {
    s = ApplyEntry(parent, p.acl, DENY_ACCESS, FILE_DELETE_CHILD, NO_INHERITANCE, sid);
    if (!s.ok()) return s;
    *changed = true;
  }
  return Status::Ok();
}

Status RevokeSid(const std::wstring& path, const Sid& sid) noexcept {
  Dacl d;
  Status s = ReadDacl(path, &d);
  if (!s.ok()) return s;
  return ApplyEntry(path, d.acl, REVOKE_ACCESS, 0, NO_INHERITANCE, sid);
}

Status DaclSddl(const std::wstring& path, std::wstring* out) noexcept {
  Dacl d;
  Status s = ReadDacl(path, &d);
  if (!s.ok()) return s;
  ScopedLocal<LPWSTR> text;
  if (!::ConvertSecurityDescriptorToStringSecurityDescriptorW(d.sd.get(), SDDL_REVISION_1,
                                                              DACL_SECURITY_INFORMATION, text.Receive(),
                                                              nullptr)) {
    return WinError(ErrorCode::kEACL_EDIT, "ConvertSecurityDescriptorToStringSecurityDescriptorW",
                    ::GetLastError(), Narrow(path));
  }
  try {
    out->assign(text.get());
  } catch (...) {
    return WinError(ErrorCode::kEACL_EDIT, "DaclSddl", ERROR_NOT_ENOUGH_MEMORY);
  }
  return Status::Ok();
}

}  // namespace psb::win
