// Landlock mode's stat class: with deny-read paths under readable roots, the names inside a
// denied directory cannot be listed (the listing class, supervise_metadata.cc kListDir), but
// Landlock (up to ABI 7) checks no lookup, stat, access, readlink or xattr read: `stat
// ~/.ssh/id_rsa` would tell that the name exists, its size and its times. The command's filter
// then also stops stat, lstat, newfstatat, statx, statfs, access, faccessat, faccessat2,
// readlink, readlinkat, getxattr, lgetxattr, listxattr and llistxattr (and the newest xattr
// and attribute reads on a path: SeccompConfig::notify_stats), and
// this class carries each one out itself, answering for every name inside a denied directory,
// at any depth and by any spelling, exactly as for a missing one (ENOENT). See
// supervise_stats.cc for the rules and why.
//
// Threading: HandleStat runs on the sandbox's supervisor thread (supervisor.cc) with that
// thread's effective capabilities cleared (left cleared, as the paths and metadata classes do).
// Tests: see supervise_stats.cc.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "notify_abi.h"

namespace psb {

struct StatRules {
  bool enabled = false;
  // Canonical absolute paths: every root the command's Landlock rules grant (readable,
  // writable; most specific wins), and the deny-read paths carved out of them (the metadata
  // rules' readable and deny_read, supervise_metadata.h).
  std::vector<std::string> readable, deny_read;
  // The device of the host's /proc: its self and thread-self links name the caller here.
  dev_t proc_dev = 0;
};

// Whether looking `name` up in directory `dir` (its canonical path; empty: it has none) would
// tell something of a deny-read directory's contents ("." and ".." never do). False unless
// rules.enabled. The read class asks it too (supervise_reads.cc, with /proc privacy).
bool HiddenLookup(const StatRules& rules, const std::string& dir, const std::string& name) noexcept;

// *where (a canonical path, or empty: none), after stepping to component `name` from it.
void StepPath(std::string* where, const std::string& name) noexcept;

// Whether HandleStat answers syscall nr (the calls the filter sends for notify_stats).
bool IsStatCall(int nr) noexcept;

// Answers notification n (IsStatCall). Never continues it.
void HandleStat(int listener, const notify::SeccompNotif& n, const StatRules& rules) noexcept;

}  // namespace psb
