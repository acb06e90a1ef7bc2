// Landlock mode's metadata supervisor: Landlock has no right for chmod, chown, utime or xattr
// changes, so without it a sandboxed command could chmod 0666 any file it owns outside the
// writable roots (as root: any root-owned file). The command's filter stops those calls
// (SeccompConfig::notify_metadata) and the host carries each one out itself, on the object it
// resolved and pinned, only when that object lies inside a writable root and outside every
// protected path. See supervise_metadata.cc. The same file holds isolated mode's one supervised
// class, its placeholders left out of listings (HideRules below), which reuses the listing.
//
// Threading: HandleMetadata runs on the sandbox's supervisor thread (supervisor.cc),
// never on the host's loop: a call the command makes slow (a walk through 40 symlinks of 4 kB
// each, an inode lock held by its own 2 GiB write) then stalls only that sandbox's supervised calls.
// It clears that thread's effective capabilities and leaves them cleared for the next path or
// metadata call (nargs::LowerThreadCaps; the supervisor gives them back before any other class,
// and a listing runs with them, as before).
// Tests: see supervise_metadata.cc.
#pragma once

#include <stdint.h>

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

// Isolated mode's placeholders (lib/platform/linux/mounts.ts): the empty read-only files and
// directories that hold missing protected names for the run are left out of the listings of the
// directories that hold them, so that tar, npm pack or find inside do not take them for the
// command's files. Cosmetic, not a protection: HandleHidden says why it may be raced.
struct HideRules {
  bool enabled = false;
  // The placeholders: absolute paths, as the plan names them.
  std::vector<std::string> paths;
  // A directory that holds placeholders, as the sandbox sees it (ResolveHidden), and their names.
  struct Dir {
    uint64_t dev = 0, ino = 0;
    std::vector<std::string> names;
  };
  std::vector<Dir> dirs;
};

// Fills rules->dirs from rules->paths, each parent looked up in the mount tree of the sandbox
// whose init is init_pid (under /proc/<init_pid>/root), once its mounts are made: a writable root
// staged on an overlay (changes: 'stage') has the overlay's device there, not the host's. A
// directory that cannot be looked up is left out (its placeholders stay listed).
void ResolveHidden(HideRules* rules, int init_pid) noexcept;

// Whether HandleHidden answers a notification for syscall nr (getdents64, getdents).
bool IsHiddenListCall(int nr, const HideRules& rules) noexcept;

// Answers notification n (IsHiddenListCall): a listing of a directory in rules.dirs without the
// placeholders' names; any other call continues as it is.
void HandleHidden(int listener, const notify::SeccompNotif& n, const HideRules& rules) noexcept;

// Whether HandleMetadata answers a notification for syscall nr under these rules.
bool IsMetadataCall(int nr, const MetadataRules& rules) noexcept;

// Answers notification n when it is a metadata call (returns true); false for any other call.
// reads (may be null): with /proc privacy, a listing of /proc's root shows the sandbox's own
// processes only (supervise_reads.h, FilterProcListing).
bool HandleMetadata(int listener, const notify::SeccompNotif& n, const MetadataRules& rules, const ReadRules* reads = nullptr) noexcept;

}  // namespace psb
