// Reading a notified call's arguments, once, on the host (see supervise_metadata.cc and
// supervise_paths.cc, which both emulate calls they were sent and never continue them):
// strings and structs are copied out of the command's memory, its fds are taken as path anchors
// (task_access.h: process_vm_readv and pidfd_getfd, or /proc/<tid>/mem and /proc/<tid>/fd/N
// where a container's seccomp profile refuses those), a relative path with AT_FDCWD starts at
// /proc/<tid>/cwd. Nothing here
// is read twice; callers check SECCOMP_IOCTL_NOTIF_ID_VALID after the last copy (no pid reuse).
// Host side only: never used between fork and exec.
// Tests: see notify_args.cc.
#pragma once

#include <stdio.h>

#include <linux/capability.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "notify_abi.h"

namespace psb {
namespace nargs {

// An fd of ours, closed on every return path.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd(o.Release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) Reset(o.Release());
    return *this;
  }
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  void Reset(int f) {
    if (fd >= 0) close(fd);
    fd = f;
  }
  int Release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

// Exactly len bytes of the command's memory, or -EFAULT (-ESRCH: gone; -EACCES: unreadable).
int ReadMem(uint32_t tid, uint64_t addr, void* buf, size_t len);

// A NUL-terminated string of at most max bytes (NUL included), read up to page ends so that a
// string ending just before an unmapped page still reads. -EFAULT or too_long when it does not.
int ReadString(uint32_t tid, uint64_t addr, std::string* out, size_t max, int too_long);

// /proc/self/fd/N, /proc/thread-self/fd/N, /dev/fd/N and /dev/std{in,out,err} name the
// command's own fd N; resolved here they would name the host's. -1 when path is none of them.
int OwnFdPath(const std::string& path);

// The name of fd `fd` of the supervision's own table, "/proc/thread-self/fd/<fd>", for calls that
// take a path. Never /proc/self/fd: that is the host's table, which the supervision does not
// share (supervisor.cc, Confinement), so the same number names another file there.
struct FdName {
  char path[40];
  explicit FdName(int fd) { snprintf(path, sizeof path, "/proc/thread-self/fd/%d", fd); }
  operator const char*() const { return path; }  // NOLINT: used where a path is taken
};

// The object behind the command's fd `fd` (task::TaskFdObject: a pidfd_getfd dup, or an O_PATH
// open of /proc/<tid>/fd/<fd>; use it as an anchor, through /proc/self/fd/M or *at calls, never
// as the command's open file description): 0, -EBADF, or -EACCES. pidfd may be -1 when
// task::Way() is kProcfs.
int GetFd(int pidfd, uint32_t tid, int fd, Fd* out);

// Where a path the command passed starts: `base` is the dirfd's copy or the command's cwd
// (opened O_PATH), or -1 for an absolute path (the command's root is the host's: Landlock mode
// has no chroot, seccomp refuses it). `dirfd` is the call's dirfd argument (AT_FDCWD for none).
int StartAt(const notify::SeccompNotif& n, int pidfd, int dirfd, const std::string& path, Fd* base);

// The command's umask (/proc/<tid>/status, the file kept open per task between reads: see
// StatusFiles in notify_args.cc), or -EACCES.
int Umask(uint32_t tid);

// Closes the fds this thread keeps between calls (the status files, the pidfds): for a task that
// ends while the thread-local storage it used lives on (supervisor.cc, the sibling task).
void CloseThreadFds() noexcept;

// Clears this thread's effective capabilities for the object's lifetime (the permitted set is
// kept and the effective set restored); a host without any does nothing. ok() is false when
// they could not be cleared. Why: the command has the host's uid and gids and no capabilities
// (Landlock mode), so with the effective set empty the kernel's own permission checks answer
// for the command's credentials.
class EffectiveCapsCleared {
 public:
  EffectiveCapsCleared();
  ~EffectiveCapsCleared();
  EffectiveCapsCleared(const EffectiveCapsCleared&) = delete;
  EffectiveCapsCleared& operator=(const EffectiveCapsCleared&) = delete;
  bool ok() const { return ok_; }

 private:
  __user_cap_header_struct hdr_ = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[2] = {};
  bool ok_ = false, changed_ = false;
};

// The supervisor thread's effective capabilities, cleared and LEFT cleared between calls, for the
// classes that act with them cleared (paths, metadata): clearing and restoring them around every
// call cost two capset() calls (≈1.2 us) per call on a root host. LowerThreadCaps clears them
// (nothing when they are clear already): true when the effective set is empty now.
// RaiseThreadCaps gives back what it cleared: before a class that reads or acts with the
// thread's capabilities (connect, signals, listings, bind), and for the one retry of a read that
// was refused without them (ReadWithCapsRetry). A host without capabilities has nothing to clear.
bool LowerThreadCaps();
void RaiseThreadCaps();
// Whether LowerThreadCaps cleared something (so a read refused now might pass with them).
bool ThreadCapsCleared();

// Runs read() (copying a call's arguments out of the command: process_vm_readv, pidfd_getfd,
// /proc/<tid>/cwd) with the thread's capabilities cleared; if it is refused (-EACCES or -EPERM)
// and capabilities were cleared, runs it once more with them and clears them again. What the
// copies are does not depend on the capabilities, only whether the kernel lets the host make
// them (a non-dumpable command or Yama's ptrace_scope need CAP_SYS_PTRACE): the answer is the
// one a read made with them would get, as before. read() must start from scratch each time.
template <typename F>
int ReadWithCapsRetry(F read) {
  int r = read();
  if ((r == -EACCES || r == -EPERM) && ThreadCapsCleared()) {
    RaiseThreadCaps();
    r = read();
    if (!LowerThreadCaps()) return -EPERM;
  }
  return r;
}

// Prepends the components of path `text` to `todo`, kept in reverse (the next one at the back):
// the resolvers' work list (supervise_reads.cc, supervise_stats.cc); empty components dropped.
void PushPath(const std::string& text, std::vector<std::string>* todo);

// The target of the symlink `fd` is an O_PATH fd of (readlinkat with ""), into *out: 0, or
// -errno (-ENOENT for an empty target, -ENAMETOOLONG past PATH_MAX).
int ReadLinkOf(int fd, std::string* out);

// Whether canonical path p is root or lies below it.
bool Under(const std::string& p, const std::string& root);

// The pinned object's path as the kernel builds it from the object's own dentry chain (readlink
// of /proc/self/fd/N): empty when it has none ("pipe:[N]", "anon_inode:..."), "?" when unknown.
// An unlinked object's " (deleted)" suffix is dropped when st says it is unlinked.
std::string PathOf(int fd, const struct stat& st);

}  // namespace nargs
}  // namespace psb
