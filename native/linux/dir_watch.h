// Directory watches for caches of what the planner read from the file system (lib/permissions/
// walk-cache.ts): an inotify instance whose pending events say, synchronously and without a trip
// through the event loop, which watched directories changed since the last look, and the mount
// table's change flag (a mount changes what a path shows without any inotify event).
//
//   int fd = DirWatchOpen(&mount_fd);            // once
//   int wd = DirWatchAdd(fd, "/work/proj/src");  // before the cached read is trusted
//   ... later, before every use of the cache:
//   std::vector<std::pair<int, std::string>> changed; bool all = DirWatchPoll(fd, mount_fd, &changed);
//
// Why synchronous: inotify queues an event in the syscall that made the change, so a change made
// before a poll is always seen by it; Node's fs.watch would deliver it only on a later loop turn,
// after a spawn that had already trusted the cache.
// Tests: see dir_watch.cc.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace psb {

// An inotify instance (non-blocking, close-on-exec), or -errno. *mount_fd gets /proc/self/
// mountinfo opened and read once (the kernel flags it POLLPRI when the mount table changes), or
// -1 when it cannot be watched: the caller must then not cache anything.
int DirWatchOpen(int* mount_fd) noexcept;
// Watches `dir` (never through a final symlink, directories only) for entries created, removed,
// renamed or changed in attributes, and for its own removal or move. Returns the watch
// descriptor (the same one again for the same directory) or -errno.
int DirWatchAdd(int fd, const char* dir) noexcept;
void DirWatchRemove(int fd, int wd) noexcept;
// Drains every pending event: *changed gets (watch descriptor, entry name) for each ("" when the
// event is about the watched directory itself). Returns true when everything must be considered
// changed: the event queue overflowed, the mount table changed, or reading failed.
bool DirWatchPoll(int fd, int mount_fd, std::vector<std::pair<int, std::string>>* changed) noexcept;

}  // namespace psb
