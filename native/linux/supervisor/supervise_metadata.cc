// Landlock mode's metadata supervisor (see supervise_metadata.h for what it closes).
//
// The command's seccomp filter turns chmod, fchmod, fchmodat, fchmodat2 (set-id modes are
// refused in the filter itself), chown, lchown, fchown, fchownat, utime, utimes, futimesat,
// utimensat, setxattr, lsetxattr, fsetxattr, setxattrat, removexattr, lremovexattr,
// fremovexattr and removexattrat into user notifications, and under restricted reads also
// inotify_add_watch (checked against the readable paths: a directory's watch reports the names
// made in it), and with deny-read paths under readable roots getdents64 and getdents (a listing
// of a denied directory is refused; any other is done here, on the command's own open file
// description, or where pidfd_getfd is refused on a reopen of it that then takes its place
// (ListReopened), and copied into its buffer). Each is EMULATED here, never continued:
//   1. read the call's arguments once: the path, name, value and times are copied out of the
//      command's memory (process_vm_readv, or /proc/<tid>/mem: task_access.h); its fd and dirfd
//      are duplicated (pidfd_getfd, or opened O_PATH through /proc/<tid>/fd/N), a relative path with AT_FDCWD starts at /proc/<tid>/cwd; then ID_VALID checks the copies
//      came from the task that is still waiting in the call (no pid reuse);
//   2. resolve the target ourselves, O_PATH, as the kernel would (following symlinks unless
//      nofollow, AT_EMPTY_PATH) but refusing /proc magic links (RESOLVE_NO_MAGICLINKS: they would
//      be resolved against the host process, not the command; /proc/self/fd/N and /dev/fd/N are
//      translated to the command's fd N first). The fd pins the object;
//   3. check where the pinned object is (its path, readlink of /proc/self/fd/N, which the kernel
//      builds from the object's own dentry chain): inside a writable root and outside every
//      protected path, else EACCES, the errno Landlock gives for writes there. Pipes, sockets and
//      other objects without a path have no location outside to protect and are allowed;
//   4. apply the change to the pinned object and answer with its result.
// Why that is TOCTOU-safe: nothing the command can change after step 1 (its memory, its fd table,
// its cwd) is read again, and the object checked in step 3 is the object changed in step 4. The
// command cannot move an object across a writable root's edge in between (Landlock refuses the
// rename or link on the outer side).
// Why the result matches what the command itself could do: steps 2 and 4 run with this thread's
// effective capabilities cleared (capset on the calling thread only; the permitted set is kept;
// they stay cleared for the next path or metadata call and are given back before any other
// class: nargs::LowerThreadCaps, supervisor.cc; step 1 runs cleared too and is made once more
// with them when refused, which copies the same arguments), and the command has the host's uid and gids but
// no capabilities (Landlock mode: no user namespace, every capability dropped). So directory
// search rights, ownership (chmod, utime with times, user xattrs), group membership (chown) and
// write access (utime "now") are the kernel's own checks, for the command's credentials.
// What the command sees: the same errnos as the kernel's for those checks; EACCES outside the
// writable roots; ELOOP for a path through another /proc magic link; EACCES when the host cannot
// read the command (a non-dumpable command of an unprivileged host, or Yama ptrace_scope >= 2).
// Isolated mode's placeholders (HideRules, at the end of the file) reuse the listing: getdents64
// and getdents of a directory that holds placeholders are carried out here the same way, without
// the placeholders' names; every other listing continues.
// Tests: test/linux/threats-fs.test.ts, test/linux/supervisor-thread.test.ts,
// test/linux/supervisor-access.test.ts, test/linux/landlock-deny-read.test.ts (listings),
// test/changes/record-landlock.test.ts; placeholders: test/linux/protected-names-content.test.ts,
// test/linux/spare.test.ts, test/linux/supervisor-access.test.ts (the procfs way),
// test/unit/linux-hidden-placeholders.test.ts (the plan).
#include "supervise_metadata.h"
#include "notify_args.h"
#include "supervise_reads.h"
#include "task_access.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statfs.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/inotify.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace psb {
namespace {

using nargs::Fd;
using nargs::GetFd;
using nargs::OwnFdPath;
using nargs::PathOf;
using nargs::ReadMem;
using nargs::ReadString;
using nargs::StartAt;
using nargs::Under;
using notify::ArgInt;
using notify::SeccompNotif;

enum class Op : uint8_t { kChmod, kChown, kUtimens, kUtimeval, kUtimbuf, kSetxattr, kRemovexattr, kSetxattrAt, kRemovexattrAt, kWatch, kListDir, kListDirOld };

constexpr uint32_t kInDontFollow = 0x02000000u;  // IN_DONT_FOLLOW

// Where a call names its target and its operands (argument numbers; -1 for none).
struct Call {
  int nr;
  Op op;
  int8_t dirfd;    // the dirfd argument; -1: AT_FDCWD
  int8_t path;     // the path argument; -1: the fd in argument 0 is the target
  int8_t flags;    // the AT_* flags argument; -1: none
  int8_t operand;  // the first operand: mode, uid, times, or the xattr name
  bool nofollow;   // the l* variants
};

constexpr int kSkip = -1;
#ifdef __NR_chmod
constexpr int kNrChmod = __NR_chmod, kNrChown = __NR_chown, kNrLchown = __NR_lchown;
constexpr int kNrUtime = __NR_utime, kNrUtimes = __NR_utimes, kNrFutimesat = __NR_futimesat;
constexpr int kNrGetdents = __NR_getdents;
#else
constexpr int kNrGetdents = kSkip;
constexpr int kNrChmod = kSkip, kNrChown = kSkip, kNrLchown = kSkip;
constexpr int kNrUtime = kSkip, kNrUtimes = kSkip, kNrFutimesat = kSkip;
#endif

constexpr Call kCalls[] = {
    {kNrChmod, Op::kChmod, -1, 0, -1, 1, false},
    {__NR_fchmod, Op::kChmod, -1, -1, -1, 1, false},
    {__NR_fchmodat, Op::kChmod, 0, 1, -1, 2, false},
    {__NR_fchmodat2, Op::kChmod, 0, 1, 3, 2, false},
    {kNrChown, Op::kChown, -1, 0, -1, 1, false},
    {kNrLchown, Op::kChown, -1, 0, -1, 1, true},
    {__NR_fchown, Op::kChown, -1, -1, -1, 1, false},
    {__NR_fchownat, Op::kChown, 0, 1, 4, 2, false},
    {kNrUtime, Op::kUtimbuf, -1, 0, -1, 1, false},
    {kNrUtimes, Op::kUtimeval, -1, 0, -1, 1, false},
    {kNrFutimesat, Op::kUtimeval, 0, 1, -1, 2, false},
    {__NR_utimensat, Op::kUtimens, 0, 1, 3, 2, false},
    {__NR_setxattr, Op::kSetxattr, -1, 0, -1, 1, false},
    {__NR_lsetxattr, Op::kSetxattr, -1, 0, -1, 1, true},
    {__NR_fsetxattr, Op::kSetxattr, -1, -1, -1, 1, false},
    {__NR_setxattrat, Op::kSetxattrAt, 0, 1, 2, 3, false},
    {__NR_removexattr, Op::kRemovexattr, -1, 0, -1, 1, false},
    {__NR_lremovexattr, Op::kRemovexattr, -1, 0, -1, 1, true},
    {__NR_fremovexattr, Op::kRemovexattr, -1, -1, -1, 1, false},
    {__NR_removexattrat, Op::kRemovexattrAt, 0, 1, 2, 3, false},
    // inotify_add_watch(fd, path, mask): the inotify fd and the mask are operands.
    {__NR_inotify_add_watch, Op::kWatch, -1, 1, -1, 2, false},
    // getdents64(fd, buf, count): the directory is the fd; buf and count are operands.
    {__NR_getdents64, Op::kListDir, -1, -1, -1, 1, false},
    {kNrGetdents, Op::kListDirOld, -1, -1, -1, 1, false},
};

const Call* FindCall(int nr) {
  for (const Call& c : kCalls) {
    if (c.nr != kSkip && c.nr == nr) return &c;
  }
  return nullptr;
}

// Step 3: 0 when the pinned object lies inside `roots` and outside `except`, else -EACCES.
int CheckLocation(int fd, const struct stat& st, const std::vector<std::string>& roots, const std::vector<std::string>& except) {
  const std::string p = PathOf(fd, st);
  // "pipe:[N]", "socket:[N]", "anon_inode:...": no path, nothing outside shares its metadata.
  if (p.empty()) return 0;
  if (p == "?") return -EACCES;
  struct statfs sfs;
  // /proc objects: their owners are processes, not the writable roots.
  if (fstatfs(fd, &sfs) != 0 || sfs.f_type == PROC_SUPER_MAGIC) return -EACCES;
  bool inside = false;
  for (const std::string& w : roots) inside = inside || Under(p, w);
  if (!inside) return -EACCES;
  for (const std::string& x : except) {
    if (Under(p, x)) return -EACCES;
  }
  return 0;
}

// Length of the longest entry of `roots` that p lies in, or -1.
long LongestUnder(const std::string& p, const std::vector<std::string>& roots) {
  long best = -1;
  for (const std::string& r : roots) {
    if (Under(p, r) && static_cast<long>(r.size()) > best) best = static_cast<long>(r.size());
  }
  return best;
}

// Reads (watches, listings) under deny-read paths: the most specific entry wins, as in the
// policy (a readable or writable root nested in a denied directory is readable again). With
// need_readable the object must also lie in a readable root (watches); listings are otherwise
// left to Landlock, which already decided the open. 0, or -EACCES.
int CheckRead(int fd, const struct stat& st, const MetadataRules& rules, bool need_readable) {
  const nargs::FdName proc(fd);
  char buf[PATH_MAX + 16];
  ssize_t n = readlink(proc, buf, sizeof buf);
  if (n <= 0 || n >= static_cast<ssize_t>(sizeof buf)) return -EACCES;
  if (buf[0] != '/') return 0;  // no path: nothing outside it to hide
  std::string p(buf, static_cast<size_t>(n));
  static const std::string kDeleted = " (deleted)";
  if (st.st_nlink == 0 && p.size() > kDeleted.size() && p.compare(p.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0) {
    p.resize(p.size() - kDeleted.size());
  }
  const long allow = LongestUnder(p, rules.readable);
  if (need_readable && allow < 0) return -EACCES;
  return LongestUnder(p, rules.deny_read) > allow ? -EACCES : 0;
}

// Operands copied out of the command's memory before anything is resolved.
struct Operands {
  uint32_t mode = 0, uid = 0, gid = 0;
  uint32_t mask = 0;  // inotify_add_watch
  uint64_t buf = 0, count = 0;  // getdents64, getdents: the command's buffer
  bool times_now = true;  // NULL times
  struct timespec times[2] = {};
  std::string name, value;
  int xattr_flags = 0;
};

// What a listing leaves out of each batch of getdents64 records it reads (len bytes at buf):
// filters them in place and returns the length left. Empty: nothing is left out.
using ListFilter = std::function<long(char* buf, long len)>;

// getdents64/getdents on the command's directory (fd: our copy, sharing its open file
// description and so its position), into its buffer. The old getdents records are the same size
// as getdents64's for the same name (both round 20 + the name's length up to 8), so a buffer that
// holds one holds the other: they are converted in place.
// filter: what is left out (a listing of /proc's root under /proc privacy, filtered to the
// sandbox's own processes; isolated mode's placeholders), read on while a whole batch was
// filtered away, so that an empty answer still means the end.
// mem: the command's /proc/<tid>/mem opened for writing before its task id was last checked
// (it holds that task's memory, whatever the id names later), or -1: written by task id.
long ListDir(int fd, const Operands& o, bool old_format, uint32_t tid, const ListFilter& filter, int mem = -1) {
  if (o.count == 0) return -EINVAL;
  std::vector<char> local(static_cast<size_t>(o.count > (1u << 20) ? (1u << 20) : o.count));
  long got;
  for (;;) {
    got = syscall(__NR_getdents64, fd, local.data(), local.size());
    if (got < 0) return -errno;
    if (got == 0 || !filter) break;
    got = filter(local.data(), got);
    if (got > 0) break;
  }
  if (old_format) {
    for (long at = 0; at < got;) {
      char* rec = local.data() + at;
      uint64_t ino, off;
      uint16_t reclen;
      uint8_t type;
      memcpy(&ino, rec, 8);
      memcpy(&off, rec + 8, 8);
      memcpy(&reclen, rec + 16, 2);
      type = static_cast<uint8_t>(rec[18]);
      if (reclen < 20 || at + reclen > got) return -EIO;
      // struct linux_dirent: d_ino, d_off (longs), d_reclen, d_name, then the type in the last byte.
      memmove(rec + 18, rec + 19, reclen - 19);
      rec[reclen - 1] = static_cast<char>(type);
      memcpy(rec, &ino, 8);
      memcpy(rec + 8, &off, 8);
      at += reclen;
    }
  }
  if (got == 0) return 0;
  const size_t len = static_cast<size_t>(got);
  const long put = mem >= 0 ? task::WriteMemFile(mem, o.buf, local.data(), len) : task::WriteTaskMemory(tid, o.buf, local.data(), len);
  // The entries were consumed from the directory's position already; a buffer the command made
  // unwritable meanwhile loses them, as a fault inside the kernel's own copy would.
  if (put != got) return put < 0 && put != -EFAULT ? -EACCES : -EFAULT;
  return got;
}

int ReadOperands(const Call& c, const SeccompNotif& n, Operands* o) {
  const uint32_t tid = n.pid;
  const int a = c.operand;
  switch (c.op) {
    case Op::kWatch:
      o->mask = static_cast<uint32_t>(n.data.args[a]);
      return 0;
    case Op::kListDir:
    case Op::kListDirOld:
      o->buf = n.data.args[a];
      o->count = static_cast<uint32_t>(n.data.args[a + 1]);  // an unsigned int in the kernel
      return 0;
    case Op::kChmod:
      o->mode = static_cast<uint32_t>(n.data.args[a]) & 07777;
      // The filter refuses set-id modes before they get here (seccomp.cc, FS-25); never set one.
      return (o->mode & 06000) != 0 ? -EPERM : 0;
    case Op::kChown:
      o->uid = static_cast<uint32_t>(n.data.args[a]);
      o->gid = static_cast<uint32_t>(n.data.args[a + 1]);
      return 0;
    case Op::kUtimens:
    case Op::kUtimeval:
    case Op::kUtimbuf: {
      const uint64_t ptr = n.data.args[a];
      if (ptr == 0) return 0;
      o->times_now = false;
      if (c.op == Op::kUtimens) return ReadMem(tid, ptr, o->times, sizeof o->times);
      if (c.op == Op::kUtimbuf) {
        int64_t t[2];  // struct utimbuf: actime, modtime
        if (int r = ReadMem(tid, ptr, t, sizeof t)) return r;
        o->times[0] = {static_cast<time_t>(t[0]), 0};
        o->times[1] = {static_cast<time_t>(t[1]), 0};
        return 0;
      }
      struct timeval tv[2];
      if (int r = ReadMem(tid, ptr, tv, sizeof tv)) return r;
      for (int i = 0; i < 2; ++i) {
        if (tv[i].tv_usec < 0 || tv[i].tv_usec >= 1000000) return -EINVAL;
        o->times[i] = {tv[i].tv_sec, tv[i].tv_usec * 1000};
      }
      return 0;
    }
    case Op::kSetxattr:
    case Op::kSetxattrAt:
    case Op::kRemovexattr:
    case Op::kRemovexattrAt: {
      if (int r = ReadString(tid, n.data.args[a], &o->name, XATTR_NAME_MAX + 1, -ERANGE)) return r;
      if (o->name.empty()) return -ERANGE;
      if (c.op == Op::kRemovexattr || c.op == Op::kRemovexattrAt) return 0;
      uint64_t value_ptr = 0, size = 0;
      if (c.op == Op::kSetxattr) {
        value_ptr = n.data.args[a + 1];
        size = n.data.args[a + 2];
        o->xattr_flags = ArgInt(n, a + 3);
      } else {
        // setxattrat(dfd, path, at_flags, name, args, size): the name is argument 3, so the
        // value, its size and the flags are in struct xattr_args (argument 4), never argument 6.
        struct {
          uint64_t value;
          uint32_t size, flags;
        } args;  // struct xattr_args (its only version)
        static_assert(sizeof args == 16, "struct xattr_args layout");
        if (n.data.args[a + 2] != sizeof args) return -EINVAL;
        if (int r = ReadMem(tid, n.data.args[a + 1], &args, sizeof args)) return r;
        value_ptr = args.value;
        size = args.size;
        o->xattr_flags = static_cast<int>(args.flags);
      }
      if (size > XATTR_SIZE_MAX) return -E2BIG;
      o->value.resize(size);
      return ReadMem(tid, value_ptr, &o->value[0], size);
    }
  }
  return -ENOSYS;
}

// Steps 1 and 2 for the target: on success *out pins it. Runs with the host's capabilities
// (pidfd_getfd and /proc/<tid>/cwd need them); the resolution itself is done by Resolve below.
struct Start {
  Fd base;             // the dirfd's copy, the cwd, or nothing (AT_FDCWD of ours: absolute paths)
  std::string path;    // empty with from_fd
  bool from_fd = false;  // base itself is the target
  bool nofollow = false;
};

int ReadStart(const Call& c, const SeccompNotif& n, int pidfd, Start* s) {
  if (c.path < 0) {
    s->from_fd = true;
    return GetFd(pidfd, n.pid, ArgInt(n, 0), &s->base);
  }
  const int flags = c.flags >= 0 ? ArgInt(n, c.flags) : 0;
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return -EINVAL;
  s->nofollow = c.nofollow || (flags & AT_SYMLINK_NOFOLLOW) != 0 ||
                (c.op == Op::kWatch && (static_cast<uint32_t>(n.data.args[c.operand]) & kInDontFollow) != 0);
  const int dirfd = c.dirfd >= 0 ? ArgInt(n, c.dirfd) : AT_FDCWD;
  if (c.op == Op::kUtimens && n.data.args[c.path] == 0) {
    // utimensat(fd, NULL, ...) is futimens(fd).
    if (dirfd == AT_FDCWD) return -EFAULT;
    s->from_fd = true;
    return GetFd(pidfd, n.pid, dirfd, &s->base);
  }
  if (int r = ReadString(n.pid, n.data.args[c.path], &s->path, PATH_MAX, -ENAMETOOLONG)) return r;
  if (s->path.empty()) {
    if ((flags & AT_EMPTY_PATH) == 0) return -ENOENT;
    s->from_fd = true;
  } else if (int own = s->nofollow ? -1 : OwnFdPath(s->path); own >= 0) {
    s->from_fd = true;
    s->path.clear();
    return GetFd(pidfd, n.pid, own, &s->base);
  }
  return StartAt(n, pidfd, dirfd, s->path, &s->base);
}

// Step 2 proper, with capabilities cleared: the object, pinned by an O_PATH fd.
int Resolve(Start* s, Fd* out) {
  if (s->from_fd) {
    out->Reset(s->base.fd);
    s->base.fd = -1;
    return 0;
  }
  struct {
    uint64_t flags, mode, resolve;
  } how = {static_cast<uint64_t>(O_PATH | O_CLOEXEC | (s->nofollow ? O_NOFOLLOW : 0)), 0, 0x02 /* RESOLVE_NO_MAGICLINKS */};
  int fd = static_cast<int>(syscall(__NR_openat2, s->base.fd >= 0 ? s->base.fd : AT_FDCWD, s->path.c_str(), &how, sizeof how));
  if (fd < 0) return -errno;
  out->Reset(fd);
  return 0;
}

// Step 4, with capabilities cleared: the change itself, on the pinned object. Returns the call's
// result (a watch descriptor for inotify_add_watch, else 0) or -errno.
long Apply(const Call& c, int fd, const struct stat& st, const Operands& o, int inotify_fd) {
  const nargs::FdName proc(fd);
  // Only a nofollow call reaches a symlink itself (a followed one resolved through it).
  const bool link = S_ISLNK(st.st_mode);
  int r = -1;
  switch (c.op) {
    case Op::kChmod:
      if (link) return -EOPNOTSUPP;  // the kernel's answer for a symlink's mode
      r = chmod(proc, o.mode);
      break;
    case Op::kChown:
      r = fchownat(fd, "", o.uid, o.gid, AT_EMPTY_PATH);
      break;
    case Op::kUtimens:
    case Op::kUtimeval:
    case Op::kUtimbuf:
      r = link ? utimensat(fd, "", o.times_now ? nullptr : o.times, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)
               : utimensat(AT_FDCWD, proc, o.times_now ? nullptr : o.times, 0);
      break;
    case Op::kSetxattr:
    case Op::kSetxattrAt:
      // No user xattrs on symlinks, and the others need capabilities the command lacks.
      if (link) return -EPERM;
      r = setxattr(proc, o.name.c_str(), o.value.data(), o.value.size(), o.xattr_flags);
      break;
    case Op::kRemovexattr:
    case Op::kRemovexattrAt:
      if (link) return -EPERM;
      r = removexattr(proc, o.name.c_str());
      break;
    case Op::kListDir:
    case Op::kListDirOld:
      return -ENOSYS;  // answered in Emulate
    case Op::kWatch: {
      // Through the magic link the pinned object is what gets watched; a symlink itself (with
      // IN_DONT_FOLLOW) cannot be named that way and is refused.
      if (link) return -EACCES;
      int wd = inotify_add_watch(inotify_fd, proc, o.mask & ~kInDontFollow);
      return wd >= 0 ? wd : -errno;
    }
  }
  return r == 0 ? 0 : -errno;
}

// What /proc/<tid>/fdinfo/<fd> says of the command's fd (fields -1 when absent).
struct FdInfo {
  int64_t pos = -1;
  long flags = -1, mnt_id = -1;
  int64_t ino = -1;  // Linux 5.14+
};

int ReadFdInfo(uint32_t tid, int fd, FdInfo* out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/fdinfo/%d", tid, fd);
  Fd f(open(path, O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) return errno == ENOENT ? -EBADF : -errno;
  char buf[512];
  const ssize_t got = read(f.fd, buf, sizeof buf - 1);
  if (got <= 0) return -EBADF;
  buf[got] = 0;
  const auto field = [&](const char* name) -> const char* {
    const char* at = strstr(buf, name);
    return at == nullptr ? nullptr : at + strlen(name);
  };
  if (const char* v = field("pos:")) out->pos = strtoll(v, nullptr, 10);
  if (const char* v = field("flags:")) out->flags = static_cast<long>(strtoul(v, nullptr, 8));
  if (const char* v = field("mnt_id:")) out->mnt_id = strtol(v, nullptr, 10);
  if (const char* v = field("\nino:")) out->ino = strtoll(v, nullptr, 10);
  return out->pos < 0 || out->flags < 0 ? -EBADF : 0;
}

// A listing in the procfs way (no pidfd_getfd: the command's open file description cannot be
// had). The command's directory is reopened through /proc/<tid>/fd/N (a new description of the
// same directory, at offset 0), moved to the command's position (fdinfo's pos), listed, and, when
// the position moved, put in place of fd N (SECCOMP_IOCTL_NOTIF_ADDFD with SETFD, its close-on-exec
// kept), so the command's next call goes on from there.
// Judged is the object reopened, never the number: the command may change fd N at any moment.
// fdinfo, read after the reopen, must show a description the command could list (not O_PATH:
// the kernel's getdents refuses one with EBADF, while the reopen would list a directory its
// Landlock rules never let it open) of that same object (inode and mount; kernels before 5.14
// print no inode: the callers then judge the object reopened on its own). A command that swaps
// fd N meanwhile gets EACCES, or, if it swapped it back, a listing of a directory it holds open
// for reading. Differences from the kernel's own call: fd N gets a new description (a dup of it
// made earlier, or the same description in another process, keeps the old position; its file
// locks stay with the old one).
struct Reopened {
  Fd dir, mem;
  FdInfo info;
  struct stat st;
  bool same = false;  // fdinfo shows this object (inode and mount); false before 5.14 too
};

// The reopen, its fdinfo and the command's memory, read before the last ID_VALID. 0 or -errno.
int ReopenAt(int listener, const SeccompNotif& n, Reopened* r) {
  const int child_fd = ArgInt(n, 0);
  if (child_fd < 0) return -EBADF;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/fd/%d", n.pid, child_fd);
  // O_DIRECTORY: anything else (a FIFO that would block the open among them) is ENOTDIR, as the
  // kernel's getdents says for it.
  r->dir.Reset(open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (r->dir.fd < 0) return errno == ENOENT ? -EBADF : errno == ENOTDIR ? -ENOTDIR : -EACCES;
  if (int e = ReadFdInfo(n.pid, child_fd, &r->info)) return e;
  // The memory the entries go to, pinned now: a task id reused after the check below never
  // receives them (the same ptrace access check as task::WriteTaskMemory's).
  snprintf(path, sizeof path, "/proc/%u/mem", n.pid);
  r->mem.Reset(open(path, O_WRONLY | O_CLOEXEC));
  if (r->mem.fd < 0) return errno == ENOENT ? -ESRCH : -EACCES;
  if (!notify::IdValid(listener, n.id)) return -ESRCH;
  if (r->info.flags & O_PATH) return -EBADF;
  struct statx sx;
  if (fstat(r->dir.fd, &r->st) != 0 || statx(r->dir.fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &sx) != 0) return -EACCES;
  r->same = r->info.ino >= 0 && static_cast<uint64_t>(r->info.ino) == static_cast<uint64_t>(r->st.st_ino) &&
            (sx.stx_mask & STATX_MNT_ID) != 0 && static_cast<uint64_t>(r->info.mnt_id) == sx.stx_mnt_id;
  if (r->info.ino >= 0 && !r->same) return -EACCES;
  return 0;
}

// Lists the reopen from the command's position and puts it in place of fd N when that moved.
long ListAndPutBack(int listener, const Call& c, const SeccompNotif& n, Reopened* r, const Operands& o, const ListFilter& filter) {
  if (r->info.flags & O_NONBLOCK) fcntl(r->dir.fd, F_SETFL, O_NONBLOCK);
  if (lseek(r->dir.fd, static_cast<off_t>(r->info.pos), SEEK_SET) < 0) return -errno;
  const long got = ListDir(r->dir.fd, o, c.op == Op::kListDirOld, n.pid, filter, r->mem.fd);
  if (got <= 0 || lseek(r->dir.fd, 0, SEEK_CUR) == static_cast<off_t>(r->info.pos)) return got;
  notify::SeccompNotifAddfd a;
  memset(&a, 0, sizeof a);
  a.id = n.id;
  a.flags = notify::kAddfdFlagSetfd;
  a.srcfd = static_cast<uint32_t>(r->dir.fd);
  a.newfd = static_cast<uint32_t>(ArgInt(n, 0));
  a.newfd_flags = (r->info.flags & O_CLOEXEC) ? O_CLOEXEC : 0;
  // Not installed (the call is gone, or no room): the command's position did not move, and the
  // entries it was given are not counted as read (a retry lists them again).
  if (ioctl(listener, notify::kNotifAddfd, &a) < 0) return errno == ENOENT ? -ESRCH : -EAGAIN;
  return got;
}

// /proc privacy: a listing of /proc's root keeps the sandbox's own processes only.
ListFilter ProcFilter(int listener, const SeccompNotif& n, const ReadRules* reads, const struct stat& st) {
  if (reads == nullptr || !IsProcRootDir(*reads, st)) return nullptr;
  return [listener, &n, reads](char* buf, long len) { return FilterProcListing(listener, n, *reads, buf, len); };
}

// Landlock mode's listing in the procfs way (kernels before 5.14, without fdinfo's inode: the
// object must lie in a readable root, not only a list-only one).
long ListReopened(int listener, const Call& c, const SeccompNotif& n, const MetadataRules& rules, const ReadRules* reads) {
  Operands o;
  if (int e = ReadOperands(c, n, &o)) return e;
  Reopened r;
  if (int e = ReopenAt(listener, n, &r)) return e;
  if (int e = CheckRead(r.dir.fd, r.st, rules, !r.same)) return e;
  return ListAndPutBack(listener, c, n, &r, o, ProcFilter(listener, n, reads, r.st));
}

long Emulate(int listener, const Call& c, const SeccompNotif& n, const MetadataRules& rules, const ReadRules* reads) {
  if (c.op == Op::kListDir || c.op == Op::kListDirOld) {
    // The command's own open directory, its position included: pidfd_getfd gives that; without
    // it (a container's seccomp profile) a reopen at its position that then takes its place.
    if (task::Way() == task::Access::kProcfs) return ListReopened(listener, c, n, rules, reads);
    if (task::Way() != task::Access::kPidfd) return -EPERM;
    Fd pidfd(notify::PidfdFor(listener, n));
    if (pidfd.fd < 0) return -EACCES;
    Operands o;
    if (int r = ReadOperands(c, n, &o)) return r;
    Fd dir(task::DupTaskFd(pidfd.fd, n.pid, ArgInt(n, 0)));
    if (dir.fd < 0) return static_cast<int>(dir.fd);
    if (!notify::IdValid(listener, n.id)) return -ESRCH;
    struct stat st;
    if (fstat(dir.fd, &st) != 0) return -EBADF;
    if (S_ISDIR(st.st_mode)) {
      if (int r = CheckRead(dir.fd, st, rules, false)) return r;
    }
    return ListDir(dir.fd, o, c.op == Op::kListDirOld, n.pid, ProcFilter(listener, n, reads, st));
  }
  // A pidfd serves pidfd_getfd only: /proc/<tid>/fd needs none (task_access.h).
  const bool procfs = task::Way() == task::Access::kProcfs;
  Fd pidfd(procfs ? -1 : notify::PidfdFor(listener, n));
  if (!procfs && pidfd.fd < 0) return -EACCES;
  Operands o;
  Start s;
  Fd inotify;  // inotify_add_watch: the command's instance (shared, so the watch is its own)
  // Steps 1 to 4 run with the thread's effective capabilities cleared (HandleMetadata); the
  // copies of step 1 are made once more with them when refused without them.
  const int read = nargs::ReadWithCapsRetry([&]() -> int {
    o = Operands();
    s = Start();
    inotify.Reset(-1);
    if (int r = ReadOperands(c, n, &o)) return r;
    if (c.op == Op::kWatch) {
      // The watch must go on the command's own instance: only a dup of its fd is that (an inotify
      // fd cannot be reopened through /proc). Without pidfd_getfd (a container's seccomp profile)
      // every watch under restricted reads is refused: fail closed (docs/security.md).
      const int dup = task::DupTaskFd(pidfd.fd, n.pid, ArgInt(n, 0));
      if (dup < 0) return dup == -EBADF ? -EBADF : -EACCES;
      inotify.Reset(dup);
    }
    return ReadStart(c, n, pidfd.fd, &s);
  });
  if (read != 0) return read;
  // Everything read from the command came from the task still waiting in this call.
  if (!notify::IdValid(listener, n.id)) return -ESRCH;
  Fd target;
  if (int r = Resolve(&s, &target)) return r;
  struct stat st;
  if (fstat(target.fd, &st) != 0) return -EACCES;
  const bool watch = c.op == Op::kWatch;
  if (int r = watch ? CheckRead(target.fd, st, rules, true) : CheckLocation(target.fd, st, rules.writable, rules.protect)) return r;
  // changes: 'record': the mode before a chmod of an object in the tree (an unlinked one is not).
  const bool noted = c.op == Op::kChmod && rules.journal && !S_ISLNK(st.st_mode) && st.st_nlink > 0;
  changes::Journal::Step step(noted ? rules.journal.get() : nullptr);
  if (noted) {
    if (int r = step.Mode(PathOf(target.fd, st), st)) return r;
  }
  const long rc = Apply(c, target.fd, st, o, inotify.fd);
  if (rc == 0 && noted) return step.Done(0);
  return rc;
}

// ---- Isolated mode's placeholders (HideRules) -------------------------------------------------
// Why a listing is filtered and every other call continued, and why that is enough: hiding is
// cosmetic, not a security property. The names are no secret (the policy names them; a stat, an
// open or a guess finds them), a write to them stays refused by the read-only mount whatever a
// listing shows, and a command that swaps fd N between the look below and the kernel's own call
// (a CONTINUE) sees the placeholders listed, which it could see by stat anyway. So the directory
// is looked up by a statx of /proc/<tid>/fd/N (no open, no copy of the fd: the cheap way for the
// many listings of other directories), and only a held directory's listing is carried out here.
// What it costs: every getdents of the run makes the notify round trip (the filter sees the fd
// number only), ≈9 µs a call on a loaded 2-CPU VM: `find` over 4,600 directories 1.9x
// (docs/performance.md).

// The held directory (dev, ino) names, or null.
const HideRules::Dir* HeldDir(const HideRules& rules, uint64_t dev, uint64_t ino) {
  for (const HideRules::Dir& d : rules.dirs) {
    if (d.dev == dev && d.ino == ino) return &d;
  }
  return nullptr;
}

const HideRules::Dir* HeldDir(const HideRules& rules, const struct stat& st) {
  return S_ISDIR(st.st_mode) ? HeldDir(rules, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)) : nullptr;
}

// The look before any copy: whether the command's fd N names a held directory, by a statx
// through /proc/<tid>/fd/N (no open; AT_STATX_DONT_SYNC: a network file system behind another fd
// is not asked, the cached attributes hold the type, device and inode).
bool NamesHeldDir(const HideRules& rules, uint32_t tid, int fd) {
  if (fd < 0) return false;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/fd/%d", tid, fd);
  struct statx sx;
  if (statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, STATX_TYPE | STATX_INO, &sx) != 0 || !S_ISDIR(sx.stx_mode)) return false;
  return HeldDir(rules, makedev(sx.stx_dev_major, sx.stx_dev_minor), sx.stx_ino) != nullptr;
}

// Drops the records of `names` from getdents64 records (len bytes at buf), in place.
long DropNames(char* buf, long len, const std::vector<std::string>& names) {
  long out = 0;
  for (long at = 0; at + 19 < len;) {
    uint16_t reclen;
    memcpy(&reclen, buf + at + 16, 2);
    if (reclen < 20 || at + reclen > len) break;  // never from the kernel: the rest is dropped
    const char* name = buf + at + 19;
    const size_t nlen = strnlen(name, reclen - 19u);
    bool drop = false;
    for (const std::string& x : names) drop = drop || (x.size() == nlen && memcmp(x.data(), name, nlen) == 0);
    if (!drop) {
      if (out != at) memmove(buf + out, buf + at, reclen);
      out += reclen;
    }
    at += reclen;
  }
  return out;
}

// The call continues as it is (a listing of a directory that holds no placeholder, or one the
// command's fd no longer names).
constexpr long kAsIs = LONG_MIN;

// A listing of a held directory without its placeholders' names: on the command's own open
// description (pidfd_getfd), or where that is refused on a reopen at its position that then takes
// its place (ReopenAt). Whatever fails before a record was read lets the call continue: the
// kernel's own answer is as good as ours, with the placeholders listed.
long ListHidden(int listener, const Call& c, const SeccompNotif& n, const HideRules& rules) {
  Operands o;
  if (ReadOperands(c, n, &o) != 0) return kAsIs;
  const auto drop = [](const HideRules::Dir* d) -> ListFilter {
    return [d](char* buf, long len) { return DropNames(buf, len, d->names); };
  };
  if (task::Way() == task::Access::kProcfs) {
    Reopened r;
    if (ReopenAt(listener, n, &r) != 0) return kAsIs;
    // Before 5.14 (no inode in fdinfo) the reopen may be another directory than fd N's by now:
    // a held one, which the command may list (they lie in its writable roots), or it continues.
    const HideRules::Dir* d = HeldDir(rules, r.st);
    if (d == nullptr) return kAsIs;
    return ListAndPutBack(listener, c, n, &r, o, drop(d));
  }
  if (task::Way() != task::Access::kPidfd) return kAsIs;
  Fd pidfd(notify::PidfdFor(listener, n));
  if (pidfd.fd < 0) return kAsIs;
  Fd dir(task::DupTaskFd(pidfd.fd, n.pid, ArgInt(n, 0)));
  struct stat st;
  if (dir.fd < 0 || !notify::IdValid(listener, n.id) || fstat(dir.fd, &st) != 0) return kAsIs;
  const HideRules::Dir* d = HeldDir(rules, st);
  if (d == nullptr) return kAsIs;
  return ListDir(dir.fd, o, c.op == Op::kListDirOld, n.pid, drop(d));
}

}  // namespace

bool IsMetadataCall(int nr, const MetadataRules& rules) noexcept {
  const Call* c = FindCall(nr);
  // With every path readable a watch needs no check (the count was taken by the caller).
  if (c == nullptr || (c->op == Op::kWatch && rules.readable.empty())) return false;
  return (c->op != Op::kListDir && c->op != Op::kListDirOld) || rules.list_dirs;
}

bool HandleMetadata(int listener, const SeccompNotif& n, const MetadataRules& rules, const ReadRules* reads) noexcept {
  if (!IsMetadataCall(n.data.nr, rules)) return false;
  const Call* c = FindCall(n.data.nr);
  // The thread's effective capabilities: cleared for a change (and left cleared for the next
  // call: nargs::LowerThreadCaps), its own for a listing (done on the command's own open
  // directory, as before).
  long rc = -EPERM;
  if (c->op == Op::kListDir || c->op == Op::kListDirOld) {
    nargs::RaiseThreadCaps();
    rc = Emulate(listener, *c, n, rules, reads);
  } else if (nargs::LowerThreadCaps()) {
    rc = Emulate(listener, *c, n, rules, reads);
  }
  // Never continued: a continued call would run with whatever the command put in memory by then.
  notify::RespondResult(listener, n.id, rc);
  return true;
}

void ResolveHidden(HideRules* rules, int init_pid) noexcept {
  char root[48];
  snprintf(root, sizeof root, "/proc/%d/root", init_pid);
  Fd at(open(root, O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (at.fd < 0) return;
  for (const std::string& p : rules->paths) {
    const size_t slash = p.rfind('/');
    if (slash == std::string::npos || slash + 1 >= p.size()) continue;
    // Relative to the sandbox's root (the plan's paths are canonical: no symlink on the way; the
    // command, already running, cannot swap a parent for one: each is a writable root or a pinned
    // directory, both mount points. Were one swapped, it would only hide names from itself).
    const std::string parent = p.substr(1, slash == 0 ? 0 : slash - 1);
    struct stat st;
    if (fstatat(at.fd, parent.c_str(), &st, parent.empty() ? AT_EMPTY_PATH : 0) != 0 || !S_ISDIR(st.st_mode)) continue;
    HideRules::Dir* dir = nullptr;
    for (HideRules::Dir& d : rules->dirs) {
      if (d.dev == static_cast<uint64_t>(st.st_dev) && d.ino == static_cast<uint64_t>(st.st_ino)) dir = &d;
    }
    if (dir == nullptr) {
      rules->dirs.push_back({static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), {}});
      dir = &rules->dirs.back();
    }
    dir->names.push_back(p.substr(slash + 1));
  }
}

bool IsHiddenListCall(int nr, const HideRules& rules) noexcept {
  const Call* c = FindCall(nr);
  return rules.enabled && c != nullptr && (c->op == Op::kListDir || c->op == Op::kListDirOld);
}

void HandleHidden(int listener, const SeccompNotif& n, const HideRules& rules) noexcept {
  // The look: which directory fd N names (through the magic link, as the command sees it).
  const Call* c = FindCall(n.data.nr);
  const long rc = c == nullptr || !NamesHeldDir(rules, n.pid, ArgInt(n, 0)) ? kAsIs : ListHidden(listener, *c, n, rules);
  if (rc == kAsIs) return notify::Continue(listener, n.id);
  notify::RespondResult(listener, n.id, rc);
}

}  // namespace psb
