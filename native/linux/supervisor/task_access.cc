// See task_access.h (why there are two ways).
// Tests: test/linux/supervisor-access.test.ts (both ways, under a container-like profile).
#include "task_access.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>

#include "../syscall_numbers.h"
#include "notify_args.h"

namespace psb {
namespace task {
namespace {

std::atomic<int> way{-1};

// Both calls tried on this process itself: a seccomp filter's answer does not depend on the
// target, and the ptrace access check passes for one's own thread group, so a refusal here is
// the filter's (or a kernel without the call).
bool PidfdWorks() {
  static const char kSrc[8] = "psb-ta";
  char dst[8] = {};
  struct iovec local = {dst, sizeof dst};
  struct iovec remote = {const_cast<char*>(kSrc), sizeof kSrc};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof dst)) return false;
  if (memcmp(dst, kSrc, sizeof dst) != 0) return false;
  const int pidfd = static_cast<int>(syscall(__NR_pidfd_open, getpid(), 0));
  if (pidfd < 0) return false;
  const int copy = static_cast<int>(syscall(__NR_pidfd_getfd, pidfd, pidfd, 0));
  close(pidfd);
  if (copy < 0) return false;
  close(copy);
  return true;
}

bool ProcfsWorks() {
  static const char kSrc[8] = "psb-tb";
  char dst[8] = {};
  const int mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  if (mem < 0) return false;
  const bool read_ok = pread(mem, dst, sizeof dst, static_cast<off_t>(reinterpret_cast<uintptr_t>(kSrc))) == static_cast<ssize_t>(sizeof dst) &&
                       memcmp(dst, kSrc, sizeof dst) == 0;
  const nargs::FdName path(mem);
  const int obj = read_ok ? open(path, O_PATH | O_CLOEXEC) : -1;
  close(mem);
  if (obj < 0) return false;
  close(obj);
  return true;
}

}  // namespace

Access Way() noexcept {
  int w = way.load(std::memory_order_relaxed);
  if (w < 0) {
    // Deterministic: threads deciding at once decide the same.
    w = static_cast<int>(PidfdWorks() ? Access::kPidfd : ProcfsWorks() ? Access::kProcfs : Access::kNone);
    way.store(w, std::memory_order_relaxed);
  }
  return static_cast<Access>(w);
}

const char* WayName() noexcept {
  switch (Way()) {
    case Access::kPidfd:
      return "pidfd";
    case Access::kProcfs:
      return "procfs";
    case Access::kNone:
      break;
  }
  return "none";
}

long ReadTaskMemory(uint32_t tid, uint64_t addr, void* buf, size_t len) noexcept {
  if (len == 0) return 0;
  const Access w = Way();
  if (w == Access::kPidfd) {
    struct iovec local = {buf, len};
    struct iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), len};
    const ssize_t got = process_vm_readv(static_cast<pid_t>(tid), &local, 1, &remote, 1, 0);
    return got >= 0 ? got : -errno;
  }
  if (w != Access::kProcfs) return -EPERM;
  // An address past off_t's range is no user address: nothing mapped there.
  if (addr > static_cast<uint64_t>(INT64_MAX)) return -EFAULT;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/mem", tid);
  const int mem = open(path, O_RDONLY | O_CLOEXEC);
  if (mem < 0) return errno == ENOENT ? -ESRCH : -errno;
  const ssize_t got = pread(mem, buf, len, static_cast<off_t>(addr));
  const int e = errno;
  close(mem);
  // EIO: the first page is not mapped (process_vm_readv's EFAULT); 0: the task has no memory
  // any more (it is exiting).
  if (got < 0) return e == EIO || e == EFAULT ? -EFAULT : -e;
  return got == 0 ? -ESRCH : got;
}

long WriteTaskMemory(uint32_t tid, uint64_t addr, const void* buf, size_t len) noexcept {
  if (len == 0) return 0;
  const Access w = Way();
  if (w == Access::kPidfd) {
    struct iovec local = {const_cast<void*>(buf), len};
    struct iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), len};
    const ssize_t put = process_vm_writev(static_cast<pid_t>(tid), &local, 1, &remote, 1, 0);
    return put >= 0 ? put : -errno;
  }
  if (w != Access::kProcfs) return -EPERM;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/mem", tid);
  const int mem = open(path, O_WRONLY | O_CLOEXEC);
  if (mem < 0) return errno == ENOENT ? -ESRCH : -errno;
  const long put = WriteMemFile(mem, addr, buf, len);
  close(mem);
  return put;
}

long WriteMemFile(int mem, uint64_t addr, const void* buf, size_t len) noexcept {
  if (len == 0) return 0;
  if (addr > static_cast<uint64_t>(INT64_MAX)) return -EFAULT;
  const ssize_t put = pwrite(mem, buf, len, static_cast<off_t>(addr));
  // EIO: the first page is not mapped; 0: the task has no memory any more (it is exiting).
  if (put < 0) return errno == EIO || errno == EFAULT ? -EFAULT : -errno;
  return put == 0 ? -ESRCH : put;
}

int DupTaskFd(int pidfd, uint32_t tid, int fd) noexcept {
  (void)tid;
  if (Way() != Access::kPidfd) return -EPERM;
  if (pidfd < 0) return -ESRCH;
  const int copy = static_cast<int>(syscall(__NR_pidfd_getfd, pidfd, fd, 0));
  return copy >= 0 ? copy : -errno;
}

int TaskFdObject(int pidfd, uint32_t tid, int fd) noexcept {
  if (Way() != Access::kProcfs) return DupTaskFd(pidfd, tid, fd);
  if (fd < 0) return -EBADF;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/fd/%d", tid, fd);
  // Followed: the magic link jumps to the object the fd holds, wherever its path is.
  const int obj = open(path, O_PATH | O_CLOEXEC);
  if (obj >= 0) return obj;
  return errno == ENOENT ? -EBADF : -errno;
}

}  // namespace task
}  // namespace psb
