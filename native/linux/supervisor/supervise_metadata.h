// Landlock mode's metadata supervisor: Landlock has no right for chmod, chown, utime or xattr
// changes, so without it a sandboxed command could chmod 0666 any file it owns outside the
// writable roots (as root: any root-owned file). The command's filter stops those calls
// (SeccompConfig::notify_metadata) and the host carries each one out itself, on the object it
// resolved and pinned, only when that object lies inside a writable root and outside every
// protected path. See supervise_metadata.cc.
//
// Threading: HandleMetadata runs on the sandbox's supervisor thread (supervisor.cc),
// never on the host's loop: a call the command makes slow (a walk through 40 symlinks of 4 kB
// each, an inode lock held by its own 2 GiB write) then stalls only that sandbox's supervised calls.
// It clears that thread's effective capabilities and leaves them cleared for the next path or
// metadata call (nargs::LowerThreadCaps; the supervisor gives them back before any other class,
// and a listing runs with them, as before).
// Tests: see supervise_metadata.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "changes_journal.h"
#include "notify_abi.h"

namespace psb {

struct ReadRules;  // supervise_reads.h

struct MetadataRules {
  bool enabled = false;
  // Canonical absolute paths (the plan's writable roots and private TMPDIR).
  std::vector<std::string> writable;
  // Canonical absolute paths inside those that stay unchanged (read-only carve-outs, deny-read).
  std::vector<std::string> protect;
  // Restricted reads: what the command's Landlock rules let it read or list (empty: everything).
  // inotify_add_watch is emulated against these too: Landlock does not check it, and a watch on
  // a directory reports the names made in it (IN_CREATE), a listing by another name.
  std::vector<std::string> readable, deny_read;
  // Deny-read paths under readable roots (Landlock mode's complement rules, linux/plan.ts): the
  // list right the directories above a denied path keep reaches the denied directory too, so
  // getdents64/getdents are emulated and refused on a directory inside deny_read (unless a
  // readable root nested in it is more specific). readable then holds every root granted.
  bool list_dirs = false;
  // changes: 'record' (changes_journal.h): a chmod of a recorded object notes its mode first.
  std::shared_ptr<changes::Journal> journal;
};

// Whether HandleMetadata answers a notification for syscall nr under these rules.
bool IsMetadataCall(int nr, const MetadataRules& rules) noexcept;

// Answers notification n when it is a metadata call (returns true); false for any other call.
// reads (may be null): with /proc privacy, a listing of /proc's root shows the sandbox's own
// processes only (supervise_reads.h, FilterProcListing).
bool HandleMetadata(int listener, const notify::SeccompNotif& n, const MetadataRules& rules, const ReadRules* reads = nullptr) noexcept;

}  // namespace psb
