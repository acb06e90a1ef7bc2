// See notify_args.h.
// Tests: test/linux/threats-fs.test.ts, test/linux/supervisor-access.test.ts (procfs fallbacks),
// test/linux/landlock-carveouts.test.ts, test/linux/supervisor-thread.test.ts.
#include "notify_args.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "../proc_fields.h"
#include "task_access.h"

namespace psb {
namespace nargs {

int ReadMem(uint32_t tid, uint64_t addr, void* buf, size_t len) {
  if (len == 0) return 0;
  const long got = task::ReadTaskMemory(tid, addr, buf, len);
  if (got < 0 && got != -EFAULT) return got == -ESRCH ? -ESRCH : -EACCES;  // EPERM: unreadable task
  return got == static_cast<long>(len) ? 0 : -EFAULT;
}

int ReadString(uint32_t tid, uint64_t addr, std::string* out, size_t max, int too_long) {
  if (addr == 0) return -EFAULT;
  out->clear();
  char page[4096];
  // The first read is short (a path is mostly far shorter than the rest of its page: copying
  // that costs more than a second read of the rare longer one); each later one reads to a page
  // end, so that a string ending just before an unmapped page still reads.
  size_t first = 256;
  while (out->size() < max) {
    size_t chunk = 4096 - static_cast<size_t>((addr + out->size()) & 4095);
    if (chunk > first) chunk = first;
    first = 4096;
    if (chunk > max - out->size()) chunk = max - out->size();
    int r = ReadMem(tid, addr + out->size(), page, chunk);
    if (r < 0) return r;
    const void* nul = memchr(page, 0, chunk);
    if (nul != nullptr) {
      out->append(page, static_cast<const char*>(nul) - page);
      return 0;
    }
    out->append(page, chunk);
  }
  return too_long;
}

int OwnFdPath(const std::string& path) {
  if (path == "/dev/stdin") return 0;
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/proc/self/fd/", "/proc/thread-self/fd/", "/dev/fd/"}) {
    size_t n = strlen(prefix);
    if (path.compare(0, n, prefix) != 0 || path.size() == n || path.size() > n + 9) continue;
    int fd = 0;
    for (size_t i = n; i < path.size(); ++i) {
      if (path[i] < '0' || path[i] > '9') return -1;
      fd = fd * 10 + (path[i] - '0');
    }
    return fd;
  }
  return -1;
}

int GetFd(int pidfd, uint32_t tid, int fd, Fd* out) {
  const int copy = task::TaskFdObject(pidfd, tid, fd);
  if (copy < 0) return copy == -EBADF ? -EBADF : -EACCES;
  out->Reset(copy);
  return 0;
}

int StartAt(const notify::SeccompNotif& n, int pidfd, int dirfd, const std::string& path, Fd* base) {
  if (!path.empty() && path[0] == '/') return 0;
  if (dirfd != AT_FDCWD) return GetFd(pidfd, n.pid, dirfd, base);
  char cwd[64];
  snprintf(cwd, sizeof cwd, "/proc/%u/cwd", n.pid);
  base->Reset(open(cwd, O_PATH | O_DIRECTORY | O_CLOEXEC));
  return base->fd < 0 ? -EACCES : 0;
}

namespace {

// The /proc/<tid>/status files this thread opened, kept for the next reads (about 1.5 us of the
// 5 us a read costs is the open: the path walk through /proc). An open status file stays bound
// to the task it was opened for (the proc inode holds that task's struct pid, never a number):
// once that task has been reaped, reading it fails (ESRCH) and it is opened afresh by number,
// which a task reusing the id answers. So a read answers for the task holding the id now; a
// thread that takes over its group leader's id by exec takes its struct pid too, so the kept
// file reads it. Per thread (each supervisor has one of its own); closed when it ends.
struct StatusFiles {
  notify::TidFdRing ring;
  // Reads the start of task tid's status into buf (NUL-terminated); its length, or -1.
  ssize_t Read(uint32_t tid, char* buf, size_t size) {
    if (notify::TidFdRing::Entry* x = ring.Find(tid)) {
      const ssize_t n = pread(x->fd, buf, size - 1, 0);
      if (n > 0) {
        buf[n] = 0;
        return n;
      }
      notify::TidFdRing::Drop(x);  // that task is gone: the id names another one now, or none
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/status", tid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const ssize_t n = pread(fd, buf, size - 1, 0);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    buf[n] = 0;
    ring.Put(tid, fd);
    return n;
  }
};
thread_local StatusFiles status_files;

}  // namespace

void CloseThreadFds() noexcept {
  status_files.ring.Clear();
  notify::pidfd_cache.ring.Clear();
}

int Umask(uint32_t tid) {
  char buf[512];  // "Umask:" is the second line
  if (status_files.Read(tid, buf, sizeof buf) <= 0) return -EACCES;
  const long u = procfs::KeyNumber(buf, "Umask", 8, -1);
  if (u < 0) return -EACCES;
  return static_cast<int>(u & 0777);
}

EffectiveCapsCleared::EffectiveCapsCleared() {
  if (syscall(SYS_capget, &hdr_, saved_) != 0) return;
  if ((saved_[0].effective | saved_[1].effective) == 0) {
    ok_ = true;
    return;
  }
  __user_cap_data_struct lowered[2] = {saved_[0], saved_[1]};
  lowered[0].effective = lowered[1].effective = 0;
  ok_ = changed_ = syscall(SYS_capset, &hdr_, lowered) == 0;
}

EffectiveCapsCleared::~EffectiveCapsCleared() {
  if (changed_) syscall(SYS_capset, &hdr_, saved_);
}

namespace {
struct ThreadCaps {
  bool cleared = false;  // the effective set was cleared by LowerThreadCaps and not given back
  __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved[2] = {};
};
thread_local ThreadCaps thread_caps;
}  // namespace

bool LowerThreadCaps() {
  ThreadCaps& t = thread_caps;
  if (t.cleared) return true;
  // Read afresh each time they are given back and cleared again: nothing else on this thread
  // changes them but EffectiveCapsCleared, which restores what it found.
  if (syscall(SYS_capget, &t.hdr, t.saved) != 0) return false;
  if ((t.saved[0].effective | t.saved[1].effective) == 0) return true;
  __user_cap_data_struct lowered[2] = {t.saved[0], t.saved[1]};
  lowered[0].effective = lowered[1].effective = 0;
  if (syscall(SYS_capset, &t.hdr, lowered) != 0) return false;
  t.cleared = true;
  return true;
}

void RaiseThreadCaps() {
  ThreadCaps& t = thread_caps;
  if (!t.cleared) return;
  // Cannot fail: the effective set asked for is the one the thread had, within its permitted set.
  syscall(SYS_capset, &t.hdr, t.saved);
  t.cleared = false;
}

bool ThreadCapsCleared() { return thread_caps.cleared; }

// Prepends the components of `text` to `todo` (kept in reverse: the next one is at the back).
void PushPath(const std::string& text, std::vector<std::string>* todo) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (at <= text.size()) {
    size_t slash = text.find('/', at);
    if (slash == std::string::npos) slash = text.size();
    if (slash > at) parts.push_back(text.substr(at, slash - at));
    at = slash + 1;
  }
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo->push_back(*it);
}

bool Under(const std::string& p, const std::string& root) {
  if (root == "/") return true;
  return p.compare(0, root.size(), root) == 0 && (p.size() == root.size() || p[root.size()] == '/');
}

std::string PathOf(int fd, const struct stat& st) {
  const FdName proc(fd);
  char buf[PATH_MAX + 16];
  ssize_t n = readlink(proc, buf, sizeof buf);
  if (n <= 0 || n >= static_cast<ssize_t>(sizeof buf)) return "?";
  if (buf[0] != '/') return std::string();
  std::string p(buf, static_cast<size_t>(n));
  // An unlinked object's path carries this suffix; a live one named so keeps it (nlink > 0).
  static const std::string kDeleted = " (deleted)";
  if (st.st_nlink == 0 && p.size() > kDeleted.size() && p.compare(p.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0) {
    p.resize(p.size() - kDeleted.size());
  }
  return p;
}

int ReadLinkOf(int fd, std::string* out) {
  char buf[PATH_MAX];
  const ssize_t len = readlinkat(fd, "", buf, sizeof buf);
  if (len < 0) return -errno;
  if (len == 0) return -ENOENT;
  if (len >= static_cast<ssize_t>(sizeof buf)) return -ENAMETOOLONG;
  out->assign(buf, static_cast<size_t>(len));
  return 0;
}

}  // namespace nargs
}  // namespace psb
