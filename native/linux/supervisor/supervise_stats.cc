// Landlock mode's stat class (see supervise_stats.h for what it closes).
//
// What the filter sends here (SeccompConfig::notify_stats, seccomp_table.h kSuperviseStats):
// stat, lstat, newfstatat, statx, access, faccessat, faccessat2, readlink, readlinkat, getxattr,
// lgetxattr, listxattr, llistxattr, statfs, and getxattrat, listxattrat (6.13) and
// file_getattr (6.17), which are answered ENOSYS as on an older kernel (libc's getxattr and
// statvfs never use them). Each call is EMULATED, never
// continued (a path judged and then continued is looked up again by the kernel, after the
// command may have changed its memory or swapped a link: the classic TOCTOU):
//   1. copy the arguments once: the path string (and the xattr name) out of the command's
//      memory; the base the path starts at, /proc/<tid>/cwd or /proc/<tid>/fd/<dirfd>, opened
//      O_PATH here (the same object the command's fd or cwd names, whatever it does with them
//      later); then SECCOMP_IOCTL_NOTIF_ID_VALID checks they came from the task still waiting;
//   2. with this thread's effective capabilities cleared (the kernel's search checks answer for
//      the command's uid and gids, which hold no capabilities in Landlock mode), walk the path
//      here, one component at a time, each opened O_PATH|O_NOFOLLOW in the directory pinned
//      before it, ordinary symlinks read and followed here (at most 40), keeping the canonical
//      path of the directory reached (from the base's own path, as the kernel builds it from its
//      dentry chain; ".." pops it, a link's text is applied to it). Before a NAME is looked up in
//      a directory that lies inside a deny-read path (the most specific of the policy's
//      readable roots and deny-read paths wins, as for listings; the way down to a root nested
//      in a denied directory stays open), the walk stops with ENOENT: whether the name exists
//      there, and what it is, is never looked at, so an existing and a missing name give the
//      same answer, however the path is spelled (.., //, links, a dirfd or a cwd inside, /proc's
//      magic links). "." and ".." are not names: ~/.ssh/.. is the parent;
//      /proc's self and thread-self are the caller's; any other procfs link (fd/N, cwd, root,
//      exe) is followed only in the caller's own /proc/<pid> (Landlock's ptrace rule refuses the
//      command another process's; this thread is not in the command's domain), else EACCES;
//   3. act on the object reached, with the kernel's own call on it (fstat, statx and faccessat2
//      with AT_EMPTY_PATH, readlinkat with "", getxattr/listxattr through /proc/thread-self/fd/N), and
//      copy the result into the command's buffer (process_vm_writev or /proc/<tid>/mem).
// An empty path with AT_EMPTY_PATH (glibc's fstat is newfstatat(fd, "", AT_EMPTY_PATH)), and
// readlinkat's empty path, name the command's fd itself: it was opened under Landlock and these
// rules, so its answer reveals nothing new; still the string could be swapped between a check and
// the kernel's use, so it is carried out here too, on /proc/<tid>/fd/<fd>, with no lookup.
// The denied directory itself answers truly (its parent lists it: the name is not a secret).
// What the command sees that differs from the kernel's own call: ENOENT for every name inside a
// deny-read directory; EACCES for a magic link of another process that is a member of the
// sandbox (the kernel would follow it); a buffer the command mapped read-only is written where
// the procfs way is used (task_access.h), where the kernel would fail EFAULT.
// Kernel features: those of the metadata supervisor (seccomp user notification, 5.5+; the
// planner turns this class on only where the listing class runs). faccessat2 (5.8) is used on
// the pinned object.
// Tests: test/linux/landlock-denyread-stat.test.ts, test/linux/landlock-deny-read-swap.test.ts.
#include "supervise_stats.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "notify_args.h"
#include "../syscall_numbers.h"
#include "task_access.h"

#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif
#ifndef AT_EACCESS
#define AT_EACCESS 0x200
#endif

namespace psb {
namespace {

using nargs::Fd;
using notify::ArgInt;
using notify::SeccompNotif;

constexpr int kSkip = -1;
#ifdef __NR_stat
constexpr int kNrStat = __NR_stat, kNrLstat = __NR_lstat, kNrAccess = __NR_access, kNrReadlink = __NR_readlink;
#else
constexpr int kNrStat = kSkip, kNrLstat = kSkip, kNrAccess = kSkip, kNrReadlink = kSkip;
#endif
constexpr int kMaxLinks = 40;  // the kernel's MAXSYMLINKS
constexpr size_t kXattrMax = 65536;  // XATTR_SIZE_MAX and XATTR_LIST_MAX
constexpr int kStatFlags = AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH;
constexpr int kStatxSync = 0x6000;  // AT_STATX_SYNC_TYPE
constexpr int kAccessFlags = AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH;

enum class Kind : uint8_t { kStat, kStatx, kStatfs, kAccess, kReadlink, kGetxattr, kListxattr, kNewer };

// One call's layout: where its dirfd (-1: none, AT_FDCWD), path, flags (-1: none) and first
// operand (the buffer, the mode, the xattr name) are; the l* variants never follow the last link.
struct Call {
  int nr;
  Kind kind;
  int8_t dirfd, path, flags, operand;
  bool nofollow;
};

constexpr Call kCalls[] = {
    {kNrStat, Kind::kStat, -1, 0, -1, 1, false},
    {kNrLstat, Kind::kStat, -1, 0, -1, 1, true},
    {__NR_newfstatat, Kind::kStat, 0, 1, 3, 2, false},
    {__NR_statx, Kind::kStatx, 0, 1, 2, 3, false},
    {kNrAccess, Kind::kAccess, -1, 0, -1, 1, false},
    {__NR_faccessat, Kind::kAccess, 0, 1, -1, 2, false},
    {__NR_faccessat2, Kind::kAccess, 0, 1, 3, 2, false},
    {kNrReadlink, Kind::kReadlink, -1, 0, -1, 1, true},
    {__NR_readlinkat, Kind::kReadlink, 0, 1, -1, 2, true},
    {__NR_getxattr, Kind::kGetxattr, -1, 0, -1, 1, false},
    {__NR_lgetxattr, Kind::kGetxattr, -1, 0, -1, 1, true},
    {__NR_listxattr, Kind::kListxattr, -1, 0, -1, 1, false},
    {__NR_llistxattr, Kind::kListxattr, -1, 0, -1, 1, true},
    {__NR_getxattrat, Kind::kNewer, 0, 1, 2, 3, false},
    {__NR_listxattrat, Kind::kNewer, 0, 1, 2, 3, false},
    {__NR_statfs, Kind::kStatfs, -1, 0, -1, 1, false},
    {__NR_file_getattr, Kind::kNewer, 0, 1, 4, 2, false},
};

const Call* FindCall(int nr) {
  for (const Call& c : kCalls) {
    if (c.nr != kSkip && c.nr == nr) return &c;
  }
  return nullptr;
}

// Length of the longest entry of roots that p lies in, or -1.
long Longest(const std::string& p, const std::vector<std::string>& roots) {
  long best = -1;
  for (const std::string& r : roots) {
    if (nargs::Under(p, r) && static_cast<long>(r.size()) > best) best = static_cast<long>(r.size());
  }
  return best;
}

// The walk of one call (step 2): the directory reached (cur) and its canonical path (where).
struct Walk {
  const StatRules& r;
  const SeccompNotif& n;
  Fd cur;
  std::string where;
  uint32_t tgid = 0;

  uint32_t Tgid() {
    if (tgid == 0) tgid = notify::ThreadGroup(n.pid);
    return tgid;
  }

  int Root() {
    cur.Reset(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    where = "/";
    return cur.fd < 0 ? -errno : 0;
  }

  bool ProcRoot(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == r.proc_dev && st.st_ino == 1;  // PROC_ROOT_INO
  }

  // A procfs link below /proc/<pid> (path: the link's, or its directory's): 0 when <pid> is the
  // caller's own process, else -EACCES (Landlock's ptrace rule, for the command).
  int OwnProc(const std::string& path) {
    if (path.compare(0, 6, "/proc/") != 0) return -EACCES;
    char* end = nullptr;
    const long id = strtol(path.c_str() + 6, &end, 10);
    if (id <= 0 || id > INT32_MAX || (*end != '/' && *end != 0)) return -EACCES;
    const uint32_t me = Tgid();
    if (me == 0) return -ESRCH;
    return static_cast<uint32_t>(id) == me || notify::ThreadGroup(static_cast<uint32_t>(id)) == me ? 0 : -EACCES;
  }

  // Follows a procfs link `name` found in cur (next: the link, O_PATH|O_NOFOLLOW). 1 when it was
  // given as text (todo grew), 0 when cur is now its object, or -errno.
  int ProcLink(const std::string& name, const Fd& next, std::vector<std::string>* todo) {
    if (ProcRoot(cur.fd)) {
      if (name == "self" || name == "thread-self") {
        const uint32_t me = Tgid();
        if (me == 0) return -ESRCH;
        std::string to = std::to_string(me);
        if (name == "thread-self") to += "/task/" + std::to_string(n.pid);
        nargs::PushPath(to, todo);
        return 1;
      }
      return 2;  // mounts, net: ordinary links ("self/...")
    }
    struct stat st;
    if (fstat(next.fd, &st) != 0) return -errno;
    if (int e = OwnProc(nargs::PathOf(next.fd, st))) return e;
    Fd to(openat(cur.fd, name.c_str(), O_PATH | O_CLOEXEC));
    if (to.fd < 0) return -errno;
    if (fstat(to.fd, &st) != 0) return -errno;
    where = nargs::PathOf(to.fd, st);
    cur = std::move(to);
    return 0;
  }

  // Walks path from cur (already the base, or any for an absolute path).
  int Run(const std::string& path, bool follow_last) {
    if (path[0] == '/') {
      if (int e = Root()) return e;
    }
    std::vector<std::string> todo;
    nargs::PushPath(path, &todo);
    bool slash = path.back() == '/';  // the last component must be a directory; a link there is followed
    int links = 0;
    while (!todo.empty()) {
      const std::string name = todo.back();
      todo.pop_back();
      const bool last = todo.empty();
      if (HiddenLookup(r, where, name)) return -ENOENT;
      Fd next(openat(cur.fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (next.fd < 0) return -errno;
      struct stat st;
      if (fstat(next.fd, &st) != 0) return -errno;
      if (!S_ISLNK(st.st_mode) || (last && !follow_last && !slash)) {
        if (last && slash && !S_ISDIR(st.st_mode)) return -ENOTDIR;
        StepPath(&where, name);
        cur = std::move(next);
        continue;
      }
      if (++links > kMaxLinks) return -ELOOP;
      struct statfs sfs;
      if (fstatfs(next.fd, &sfs) == 0 && sfs.f_type == PROC_SUPER_MAGIC) {
        const int got = ProcLink(name, next, &todo);
        if (got < 0) return got;
        if (got == 0 && last && slash && !IsDir(cur.fd)) return -ENOTDIR;
        if (got < 2) continue;
      }
      // An ordinary link: read, and go on from its directory.
      std::string target;
      if (int e = nargs::ReadLinkOf(next.fd, &target)) return e;
      if (target[0] == '/') {
        if (int e = Root()) return e;
      }
      if (last && target.back() == '/') slash = true;
      nargs::PushPath(target, &todo);
    }
    return 0;
  }

  // A procfs link (obj, its stat) read by readlink: /proc's self and thread-self give the
  // caller's text; another process's magic link (exe, cwd, fd/N) is read with ptrace access,
  // which Landlock refuses the command: "-". Empty: read it as it is.
  std::string ProcSelfText(int obj, const struct stat& st) {
    struct statfs sfs;
    if (fstatfs(obj, &sfs) != 0 || sfs.f_type != PROC_SUPER_MAGIC) return std::string();
    const std::string p = nargs::PathOf(obj, st);
    if (p == "/proc/self" || p == "/proc/thread-self") {
      const uint32_t me = Tgid();
      if (me == 0) return "-";
      return std::to_string(me) + (p == "/proc/self" ? "" : "/task/" + std::to_string(n.pid));
    }
    if (p == "/proc/mounts" || p == "/proc/net") return std::string();
    return OwnProc(p) == 0 ? std::string() : "-";
  }

  static bool IsDir(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  }
};

// Copies len bytes to the command's memory at addr: 0 or -errno (EFAULT as the kernel's copy).
int Put(const SeccompNotif& n, uint64_t addr, const void* buf, size_t len) {
  if (len == 0) return 0;
  return nargs::ReadWithCapsRetry([&]() -> int {
    const long put = task::WriteTaskMemory(n.pid, addr, buf, len);
    if (put == static_cast<long>(len)) return 0;
    return put < 0 && put != -EFAULT ? static_cast<int>(put) : -EFAULT;
  });
}

// Opens the base of a call's path: the command's cwd or its fd `dirfd` (O_PATH, the same object).
int OpenBase(const SeccompNotif& n, int dirfd, Fd* out) {
  char p[64];
  if (dirfd == AT_FDCWD) snprintf(p, sizeof p, "/proc/%u/cwd", n.pid);
  else if (dirfd < 0) return -EBADF;
  else snprintf(p, sizeof p, "/proc/%u/fd/%d", n.pid, dirfd);
  out->Reset(open(p, O_PATH | O_CLOEXEC));
  if (out->fd >= 0) return 0;
  return errno == ENOENT ? (dirfd == AT_FDCWD ? -ENOENT : -EBADF) : -errno;
}

// Step 3 on the object reached: the call's result (>= 0) or -errno.
long Act(const Call& c, const SeccompNotif& n, Walk* w, int flags, const std::string& xname) {
  const int obj = w->cur.fd;
  const uint64_t op = n.data.args[c.operand];
  switch (c.kind) {
    case Kind::kStat: {
      struct stat st;
      if (fstat(obj, &st) != 0) return -errno;
      return Put(n, op, &st, sizeof st);
    }
    case Kind::kStatx: {
      struct statx sx;
      if (statx(obj, "", AT_EMPTY_PATH | (flags & kStatxSync), static_cast<unsigned>(n.data.args[3]), &sx) != 0) return -errno;
      return Put(n, n.data.args[4], &sx, sizeof sx);
    }
    case Kind::kStatfs: {
      struct statfs sfs;
      if (fstatfs(obj, &sfs) != 0) return -errno;
      return Put(n, op, &sfs, sizeof sfs);
    }
    case Kind::kAccess:
      // AT_EACCESS: this thread's effective credentials, the command's uid and gids without
      // capabilities (its real ones are the same: no set-id program runs under no_new_privs).
      if (syscall(__NR_faccessat2, obj, "", static_cast<int>(op), AT_EMPTY_PATH | AT_EACCESS) != 0) return -errno;
      return 0;
    case Kind::kReadlink: {
      struct stat st;
      if (fstat(obj, &st) != 0) return -errno;
      if (!S_ISLNK(st.st_mode)) return -EINVAL;
      char buf[PATH_MAX];
      const std::string self = w->ProcSelfText(obj, st);
      ssize_t len;
      if (self == "-") {
        return -EACCES;
      } else if (!self.empty()) {
        len = static_cast<ssize_t>(self.size());
        memcpy(buf, self.data(), self.size());
      } else {
        len = readlinkat(obj, "", buf, sizeof buf);
        if (len < 0) return -errno;
      }
      const size_t size = static_cast<size_t>(ArgInt(n, c.operand + 1));
      const size_t put = static_cast<size_t>(len) < size ? static_cast<size_t>(len) : size;
      if (int e = Put(n, op, buf, put)) return e;
      return static_cast<long>(put);
    }
    case Kind::kGetxattr:
    case Kind::kListxattr: {
      // Through the magic link (thread-self: this task's own fd table, not the host's): an O_PATH
      // fd takes no f*xattr, and the link reaches the object itself (a symlink too, not what it
      // points to).
      const nargs::FdName p(obj);
      const bool get = c.kind == Kind::kGetxattr;
      const uint64_t dest = get ? n.data.args[c.operand + 1] : op;
      size_t size = static_cast<size_t>(n.data.args[get ? c.operand + 2 : c.operand + 1]);
      if (size > kXattrMax) size = kXattrMax;
      std::vector<char> buf(size);
      const ssize_t got = get ? getxattr(p, xname.c_str(), buf.data(), size) : listxattr(p, buf.data(), size);
      if (got < 0) return -errno;
      if (size == 0) return got;
      if (int e = Put(n, dest, buf.data(), static_cast<size_t>(got))) return e;
      return got;
    }
    case Kind::kNewer:
      break;
  }
  return -ENOSYS;
}

// The checks the kernel makes before any lookup: -errno, or 0. flags gets the AT_* flags.
int Precheck(const Call& c, const SeccompNotif& n, int* flags) {
  *flags = c.flags >= 0 ? ArgInt(n, c.flags) : 0;
  if (c.nofollow) *flags |= AT_SYMLINK_NOFOLLOW;
  switch (c.kind) {
    case Kind::kStat:
      return (*flags & ~kStatFlags) != 0 ? -EINVAL : 0;
    case Kind::kStatx:
      if ((*flags & ~(kStatFlags | kStatxSync)) != 0 || (*flags & kStatxSync) == kStatxSync) return -EINVAL;
      return (n.data.args[3] & 0x80000000u) != 0 ? -EINVAL : 0;  // STATX__RESERVED
    case Kind::kAccess:
      if ((*flags & ~kAccessFlags) != 0) return -EINVAL;
      return (ArgInt(n, c.operand) & ~7) != 0 ? -EINVAL : 0;
    case Kind::kReadlink:
      *flags |= AT_EMPTY_PATH;  // readlinkat(fd, "") reads the link fd names
      return ArgInt(n, c.operand + 1) <= 0 ? -EINVAL : 0;
    default:
      return 0;
  }
}

long Emulate(int listener, const Call& c, const SeccompNotif& n, const StatRules& r) {
  int flags;
  if (int e = Precheck(c, n, &flags)) return e;
  // Step 1: the copies (made once more with the thread's capabilities where refused without
  // them: a non-dumpable command, nargs::ReadWithCapsRetry).
  std::string path, xname;
  const uint64_t at = n.data.args[c.path];
  const bool empty_ok = (flags & AT_EMPTY_PATH) != 0;
  Walk w{r, n, Fd(), std::string()};
  const int dirfd = c.dirfd >= 0 ? ArgInt(n, c.dirfd) : AT_FDCWD;
  const int copied = nargs::ReadWithCapsRetry([&]() -> int {
    if (at != 0 || !empty_ok) {
      if (int e = nargs::ReadString(n.pid, at, &path, PATH_MAX, -ENAMETOOLONG)) return e;
    }
    if (c.kind == Kind::kGetxattr) {
      if (int e = nargs::ReadString(n.pid, n.data.args[c.operand], &xname, 256, -ERANGE)) return e;
      if (xname.empty()) return -ERANGE;
    }
    if (path.empty() && !empty_ok) return -ENOENT;
    return path.empty() || path[0] != '/' ? OpenBase(n, dirfd, &w.cur) : 0;
  });
  if (copied != 0) return copied;
  if (!notify::IdValid(listener, n.id)) return -ESRCH;
  // Step 2: the walk (none for an empty path: the command's fd or cwd itself).
  if (!path.empty()) {
    if (path[0] != '/') {
      struct stat st;
      if (fstat(w.cur.fd, &st) != 0) return -errno;
      if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
      w.where = nargs::PathOf(w.cur.fd, st);
    }
    if (int e = w.Run(path, (flags & AT_SYMLINK_NOFOLLOW) == 0)) return e;
  }
  // Step 3.
  return Act(c, n, &w, flags, xname);
}

}  // namespace

bool HiddenLookup(const StatRules& r, const std::string& dir, const std::string& name) noexcept {
  if (!r.enabled || dir.empty() || name == "." || name == "..") return false;  // no path: a pipe, a socket
  if (dir[0] != '/') return true;  // a path too long to read back: fail closed
  const long deny = Longest(dir, r.deny_read);
  if (deny < 0 || deny <= Longest(dir, r.readable)) return false;
  // Inside a denied directory: only the way down to a root nested in it stays open.
  const std::string child = dir == "/" ? "/" + name : dir + "/" + name;
  for (const std::string& g : r.readable) {
    if (static_cast<long>(g.size()) > deny && (nargs::Under(g, child) || nargs::Under(child, g))) return false;
  }
  return true;
}

void StepPath(std::string* where, const std::string& name) noexcept {
  if (where->empty() || name == ".") return;
  if (name == "..") {
    const size_t slash = where->rfind('/');
    *where = slash == 0 || slash == std::string::npos ? "/" : where->substr(0, slash);
    return;
  }
  *where = *where == "/" ? "/" + name : *where + "/" + name;
}

bool IsStatCall(int nr) noexcept { return FindCall(nr) != nullptr; }

void HandleStat(int listener, const SeccompNotif& n, const StatRules& rules) noexcept {
  const Call* c = FindCall(n.data.nr);
  long rc = -ENOSYS;
  // Steps 2 and 3 for the command's credentials; left cleared for the next such call.
  if (c != nullptr && c->kind != Kind::kNewer) rc = nargs::LowerThreadCaps() ? Emulate(listener, *c, n, rules) : -EPERM;
  if (rc == -ESRCH && !notify::IdValid(listener, n.id)) return;  // the call is gone
  notify::RespondResult(listener, n.id, rc);
}

}  // namespace psb
