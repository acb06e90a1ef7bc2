// RestrictedTokenBuilder: a write-restricted primary token for the sandboxed child.
//
//   RestrictedTokenBuilder b;
//   b.AddCapabilitySid(cap);                 // configure: never fails for OS reasons
//   ScopedHandle token;
//   Status s = b.Create(&token);             // touches the OS once
//
// Create() calls CreateRestrictedToken(DISABLE_MAX_PRIVILEGE | LUA_TOKEN | WRITE_RESTRICTED) on
// the process token. Restricting SIDs, in this order: the capability SIDs, the logon SID, Everyone.
// Then the token gets a default DACL (GENERIC_ALL for the user, SYSTEM, the logon SID and the
// capability SIDs) so the child can create and use its own pipes and processes, and
// SeChangeNotifyPrivilege is enabled. Unlike Codex we leave Everyone out of the default DACL: the
// logon SID already passes the restricted check, and Everyone would let any account on the
// machine open the sandboxed processes.
// On an elevated host, BUILTIN\Administrators and S-1-5-114 become deny-only and the integrity
// level is capped at Medium. The child keeps the logon SID and Medium integrity otherwise (so it can
// read other same-user processes' memory; the enforcement report lists that gap).
// Single-threaded use.
// Tests: see restricted_token.cc.
#pragma once

#include <vector>

#include "scoped_handle.h"
#include "sid.h"

namespace psb::win {

class RestrictedTokenBuilder {
 public:
  void AddCapabilitySid(Sid sid) { capability_sids_.push_back(std::move(sid)); }

  Status Create(ScopedHandle* out) noexcept;

  // After Create(): the logon SID that was used (also needed for the desktop DACL).
  const Sid& logon_sid() const noexcept { return logon_sid_; }
  // After Create(): administrator groups made deny-only (an elevated host), and whether the
  // integrity level was lowered from High (or System) to Medium.
  int admin_groups_disabled() const noexcept { return admin_groups_disabled_; }
  bool integrity_lowered() const noexcept { return integrity_lowered_; }

 private:
  std::vector<Sid> capability_sids_;
  Sid logon_sid_;
  int admin_groups_disabled_ = 0;
  bool integrity_lowered_ = false;
};

// IsTokenRestricted, for tests and the enforcement report.
bool TokenIsRestricted(HANDLE token) noexcept;

}  // namespace psb::win
