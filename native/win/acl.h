// DACL edits on files and directories for the capability SIDs of the restricted token.
//
//   bool changed;
//   Status s = GrantWrite(L"C:\\work\\repo", cap, &changed);    // inheritable modify rights
//   s = DenyWrite(L"C:\\work\\repo\\.git\\hooks", cap, &changed);  // deny-write ACE (+ parent
//                                                                   //   delete-child deny)
//   s = RevokeSid(L"C:\\tmp\\run-1", cap);                         // drop every ACE of `cap`
//
// Edits are idempotent: an explicit ACE with the same SID, type and mask is left alone (changed =
// false). Paths are absolute Win32 paths. Blocking file-system calls: never call on a JS thread in
// a hot loop. All failures are EACL_EDIT with the Win32 code and the API name.
// Tests: see acl.cc.
#pragma once

#include <string>

#include "sid.h"

namespace psb::win {

// Modify rights for writable roots: read, write, execute, delete; inherited by files and dirs.
constexpr DWORD kWriteRootMask = FILE_GENERIC_READ | FILE_GENERIC_WRITE | FILE_GENERIC_EXECUTE | DELETE |
                                 FILE_DELETE_CHILD;
// What a protected path denies. READ_CONTROL and SYNCHRONIZE are left out on purpose: readers
// need them, and they do not let anything change.
constexpr DWORD kDenyWriteMask = FILE_WRITE_DATA | FILE_APPEND_DATA | FILE_WRITE_EA |
                                 FILE_WRITE_ATTRIBUTES | DELETE | FILE_DELETE_CHILD | WRITE_DAC |
                                 WRITE_OWNER;

Status GrantWrite(const std::wstring& path, const Sid& sid, bool* changed) noexcept;
// Denies writes to `path` (inherited below it) and, on its parent directory, FILE_DELETE_CHILD
// (this object only), so the protected entry cannot be renamed away and recreated.
Status DenyWrite(const std::wstring& path, const Sid& sid, bool* changed) noexcept;
// An explicit deny ACE of `mask` for `sid` on `path` itself (not inherited): DELETE on a protected
// root (so it cannot be renamed away and replanted), FILE_DELETE_CHILD on its parent. Written with
// SetFileSecurityW, so nothing below is walked.
Status DenyThisObject(const std::wstring& path, const Sid& sid, DWORD mask, bool* changed) noexcept;
// Removes every explicit deny ACE of `sid` on `path` (the per-run denies), leaving its allow ACEs.
// Walks the subtree only when a removed ACE was inheritable.
Status RemoveDenies(const std::wstring& path, const Sid& sid, bool* changed) noexcept;
Status RevokeSid(const std::wstring& path, const Sid& sid) noexcept;

// One edit of a batch (winAclEdit, and winAclBatch off the JS thread): the functions above by name.
enum class AclOp { kGrantWrite, kDenyWrite, kDenyDelete, kDenyDeleteChild, kRemoveDenies, kRevoke };
// "grant-write" | "deny-write" | "deny-delete" | "deny-delete-child" | "remove-denies" | "revoke".
bool ParseAclOp(const std::string& name, AclOp* out) noexcept;
// Runs one edit. `changed`: whether the DACL was rewritten (always true for a revoke).
Status ApplyAclOp(AclOp op, const std::wstring& path, const Sid& sid, bool* changed) noexcept;

// The DACL as SDDL text (tests and diagnostics).
Status DaclSddl(const std::wstring& path, std::wstring* out) noexcept;

}  // namespace psb::win
