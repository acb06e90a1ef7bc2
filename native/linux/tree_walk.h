// Host-side walks of a tree a sandboxed command made (Landlock mode's per-run TMPDIR): removing it
// after the run, and measuring it while the command runs (limits.tmpBytes).
//
// The tree is the command's: it may hold directories with mode 000 (nested), files with no
// permissions, symlinks to host files, and paths longer than PATH_MAX. So both walks work through
// directory fds (openat, fstatat, unlinkat; never a path from the top), never follow a symlink,
// hold one directory fd at a time (the way back up is "..", checked to be the directory we came
// from), and never stay on another filesystem.
// Tests: see tree_walk.cc.
#pragma once

#include <napi.h>
#include <stdint.h>

#include <string>

namespace psb {

struct TreeRemoval {
  // Entries that could not be removed (the top directory included when it stays).
  uint64_t left = 0;
  // The first failure: errno and the path below the top directory (truncated).
  int first_errno = 0;
  std::string first_path;
};

// Removes `name` in directory `parent` (the host's own path, trusted) and everything below it.
// A directory the uid owns but cannot read, search or write (a command's chmod) is made 0700
// first, on that directory's own inode: through an O_PATH fd opened with O_NOFOLLOW, never a
// symlink's target. Never throws; what stays is counted in `out`.
void RemoveTree(const char* parent, const char* name, TreeRemoval* out);

struct TreeUsage {
  uint64_t bytes = 0;   // allocated blocks (st_blocks * 512) of every entry counted
  uint64_t inodes = 0;  // entries counted, the top directory included
  // Directories that could not be listed (their contents are not counted), or a change mid-walk
  // that ended it early (the next walk starts again).
  uint64_t unlisted = 0;
  bool cut_short = false;
};

// Measures the directory at `path` without changing anything. Stops early once `max_inodes` or
// `max_bytes` is passed (the caller's limit is over either way).
void MeasureTree(const char* path, uint64_t max_inodes, uint64_t max_bytes, TreeUsage* out);

// native.removeTree, native.removeTreeAsync and native.measureTree (the last two on the thread pool).
void RegisterTreeWalk(Napi::Env env, Napi::Object exports);

}  // namespace psb
