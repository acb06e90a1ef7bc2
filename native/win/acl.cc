// DACL edits (acl.h).
// Tests: test/win32/addon.wine.js (ACL edits), test/win32/deferred.wine.js (batches),
// test/win32/protect.wine.js (ACE read-backs need real Windows; skipped under wine).
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

// Writes `acl` as the DACL of `path`. propagate = true: SetNamedSecurityInfoW, which also rewrites
// the inherited ACEs of everything below (a walk of the subtree: needed when an inheritable ACE
// changed). propagate = false: SetFileSecurityW on this object only, no walk; right for ACEs that
// do not inherit (DELETE on a protected root, FILE_DELETE_CHILD on its parent), which is what
// keeps the per-run deny edits on a workspace root cheap.
Status WriteDacl(const std::wstring& path, const Dacl& current, PACL acl, bool propagate) noexcept {
  if (propagate) {
    DWORD rc = ::SetNamedSecurityInfoW(const_cast<LPWSTR>(path.c_str()), SE_FILE_OBJECT, DACL_SECURITY_INFORMATION,
                                       nullptr, nullptr, acl, nullptr);
    if (rc != ERROR_SUCCESS) return WinError(ErrorCode::kEACL_EDIT, "SetNamedSecurityInfoW", rc, Narrow(path));
    return Status::Ok();
  }
  SECURITY_DESCRIPTOR sd;
  if (!::InitializeSecurityDescriptor(&sd, SECURITY_DESCRIPTOR_REVISION) ||
      !::SetSecurityDescriptorDacl(&sd, TRUE, acl, FALSE)) {
    return WinError(ErrorCode::kEACL_EDIT, "SetSecurityDescriptorDacl", ::GetLastError(), Narrow(path));
  }
  // Keep the object's inheritance state: auto-inherited stays auto-inherited, protected stays
  // protected (otherwise the next propagation from the parent would treat it differently).
  SECURITY_DESCRIPTOR_CONTROL control = 0;
  DWORD revision = 0;
  if (current.sd.get() != nullptr && ::GetSecurityDescriptorControl(current.sd.get(), &control, &revision)) {
    const SECURITY_DESCRIPTOR_CONTROL keep = control & (SE_DACL_AUTO_INHERITED | SE_DACL_PROTECTED);
    ::SetSecurityDescriptorControl(&sd, SE_DACL_AUTO_INHERITED | SE_DACL_PROTECTED, keep);
  }
  if (!::SetFileSecurityW(path.c_str(), DACL_SECURITY_INFORMATION, &sd)) {
    return WinError(ErrorCode::kEACL_EDIT, "SetFileSecurityW", ::GetLastError(), Narrow(path));
  }
  return Status::Ok();
}

Status ApplyEntry(const std::wstring& path, const Dacl& current, ACCESS_MODE mode, DWORD mask, DWORD inheritance,
                  const Sid& sid) noexcept {
  EXPLICIT_ACCESSW e{};
  e.grfAccessPermissions = mask;
  e.grfAccessMode = mode;
  e.grfInheritance = inheritance;
  e.Trustee.TrusteeForm = TRUSTEE_IS_SID;
  e.Trustee.TrusteeType = TRUSTEE_IS_UNKNOWN;
  e.Trustee.ptstrName = reinterpret_cast<LPWSTR>(sid.get());
  ScopedLocal<PACL> next;
  DWORD rc = ::SetEntriesInAclW(1, &e, current.acl, next.Receive());
  if (rc != ERROR_SUCCESS) return WinError(ErrorCode::kEACL_EDIT, "SetEntriesInAclW", rc, Narrow(path));
  // Only an inheritable change (or a revoke, which may drop inheritable ACEs) needs the walk.
  return WriteDacl(path, current, next.get(), inheritance != NO_INHERITANCE || mode == REVOKE_ACCESS);
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
  s = ApplyEntry(path, d, GRANT_ACCESS, kWriteRootMask, dir ? SUB_CONTAINERS_AND_OBJECTS_INHERIT : NO_INHERITANCE,
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
    s = ApplyEntry(path, d, DENY_ACCESS, kDenyWriteMask, dir ? SUB_CONTAINERS_AND_OBJECTS_INHERIT : NO_INHERITANCE,
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
    s = ApplyEntry(parent, p, DENY_ACCESS, FILE_DELETE_CHILD, NO_INHERITANCE, sid);
    if (!s.ok()) return s;
    *changed = true;
  }
  return Status::Ok();
}

Status DenyThisObject(const std::wstring& path, const Sid& sid, DWORD mask, bool* changed) noexcept {
  *changed = false;
  Dacl d;
  Status s = ReadDacl(path, &d);
  if (!s.ok()) return s;
  if (HasExplicitAce(d.acl, ACCESS_DENIED_ACE_TYPE, sid, mask, 0)) return Status::Ok();
  s = ApplyEntry(path, d, DENY_ACCESS, mask, NO_INHERITANCE, sid);
  if (s.ok()) *changed = true;
  return s;
}

Status RemoveDenies(const std::wstring& path, const Sid& sid, bool* changed) noexcept {
  *changed = false;
  Dacl d;
  Status s = ReadDacl(path, &d);
  if (!s.ok()) return s;
  if (d.acl == nullptr) return Status::Ok();
  ACL_SIZE_INFORMATION info{};
  if (!::GetAclInformation(d.acl, &info, sizeof(info), AclSizeInformation)) {
    return WinError(ErrorCode::kEACL_EDIT, "GetAclInformation", ::GetLastError(), Narrow(path));
  }
  // A copy without our explicit deny ACEs for `sid`, everything else in the same order.
  ScopedLocal<PACL> next(static_cast<PACL>(::LocalAlloc(LPTR, info.AclBytesInUse)));
  if (next.get() == nullptr || !::InitializeAcl(next.get(), info.AclBytesInUse, ACL_REVISION)) {
    return WinError(ErrorCode::kEACL_EDIT, "InitializeAcl", ::GetLastError(), Narrow(path));
  }
  bool inheritable = false;
  for (DWORD i = 0; i < d.acl->AceCount; ++i) {
    void* raw = nullptr;
    if (!::GetAce(d.acl, i, &raw)) continue;
    auto* header = static_cast<ACE_HEADER*>(raw);
    if (header->AceType == ACCESS_DENIED_ACE_TYPE && (header->AceFlags & INHERITED_ACE) == 0 &&
        ::EqualSid(&static_cast<ACCESS_DENIED_ACE*>(raw)->SidStart, sid.get())) {
      *changed = true;
      if ((header->AceFlags & (OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE)) != 0) inheritable = true;
      continue;
    }
    if (!::AddAce(next.get(), ACL_REVISION, MAXDWORD, raw, header->AceSize)) {
      return WinError(ErrorCode::kEACL_EDIT, "AddAce", ::GetLastError(), Narrow(path));
    }
  }
  if (!*changed) return Status::Ok();
  return WriteDacl(path, d, next.get(), inheritable);
}

Status RevokeSid(const std::wstring& path, const Sid& sid) noexcept {
  Dacl d;
  Status s = ReadDacl(path, &d);
  if (!s.ok()) return s;
  return ApplyEntry(path, d, REVOKE_ACCESS, 0, NO_INHERITANCE, sid);
}

bool ParseAclOp(const std::string& name, AclOp* out) noexcept {
  static const struct {
    const char* name;
    AclOp op;
  } kOps[] = {{"grant-write", AclOp::kGrantWrite},        {"deny-write", AclOp::kDenyWrite},
              {"deny-delete", AclOp::kDenyDelete},        {"deny-delete-child", AclOp::kDenyDeleteChild},
              {"remove-denies", AclOp::kRemoveDenies},    {"revoke", AclOp::kRevoke}};
  for (const auto& o : kOps) {
    if (name == o.name) {
      *out = o.op;
      return true;
    }
  }
  return false;
}

Status ApplyAclOp(AclOp op, const std::wstring& path, const Sid& sid, bool* changed) noexcept {
  *changed = false;
  switch (op) {
    case AclOp::kGrantWrite:
      return GrantWrite(path, sid, changed);
    case AclOp::kDenyWrite:
      return DenyWrite(path, sid, changed);
    case AclOp::kDenyDelete:
      return DenyThisObject(path, sid, DELETE, changed);
    case AclOp::kDenyDeleteChild:
      return DenyThisObject(path, sid, FILE_DELETE_CHILD, changed);
    case AclOp::kRemoveDenies:
      return RemoveDenies(path, sid, changed);
    case AclOp::kRevoke: {
      Status s = RevokeSid(path, sid);
      *changed = s.ok();
      return s;
    }
  }
  return Status::Error(ErrorCode::kEACL_EDIT, "unknown ACL edit");
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
