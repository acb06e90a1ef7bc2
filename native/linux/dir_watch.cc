// See dir_watch.h.
// Tests: test/linux/walk-cache.test.ts (the planner cache dropped after a change).
#include "dir_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

namespace psb {
namespace {

// Reads the whole file: a read to the end is what re-arms the POLLPRI change flag.
void DrainMountinfo(int fd) {
  char buf[8192];
  lseek(fd, 0, SEEK_SET);
  while (read(fd, buf, sizeof buf) > 0) {
  }
}

}  // namespace

int DirWatchOpen(int* mount_fd) noexcept {
  *mount_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  if (*mount_fd >= 0) DrainMountinfo(*mount_fd);
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (*mount_fd >= 0) close(*mount_fd);
    *mount_fd = -1;
    return -e;
  }
  return fd;
}

int DirWatchAdd(int fd, const char* dir) noexcept {
  // Everything that can change a directory listing or whether it can be read. IN_ONLYDIR and
  // IN_DONT_FOLLOW: a path that is (now) a symlink or a file is refused, never watched elsewhere.
  constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF |
                             IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW;
  int wd = inotify_add_watch(fd, dir, kMask);
  return wd < 0 ? -errno : wd;
}

void DirWatchRemove(int fd, int wd) noexcept { inotify_rm_watch(fd, wd); }

bool DirWatchPoll(int fd, int mount_fd, std::vector<std::pair<int, std::string>>* changed) noexcept {
  bool all = false;
  if (mount_fd < 0) return true;
  struct pollfd p = {mount_fd, POLLPRI, 0};
  if (poll(&p, 1, 0) != 0) {
    all = true;
    DrainMountinfo(mount_fd);
  }
  alignas(struct inotify_event) char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return all || errno != EAGAIN;
    if (n == 0) return true;
    for (char* at = buf; at < buf + n;) {
      const struct inotify_event* ev = reinterpret_cast<const struct inotify_event*>(at);
      if (ev->mask & IN_Q_OVERFLOW) all = true;
      if (ev->wd >= 0) changed->emplace_back(ev->wd, ev->len > 0 ? std::string(ev->name) : std::string());
      at += sizeof(struct inotify_event) + ev->len;
    }
  }
}

}  // namespace psb
