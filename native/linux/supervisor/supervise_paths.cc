// Landlock mode's path supervisor (see supervise_paths.h for what it closes).
//
// What the command's filter sends here (seccomp_table.h, kSupervisePaths): open, openat and
// creat whose flags ask for O_WRONLY, O_RDWR, O_CREAT or O_TRUNC (flags are a register: read-only
// opens never stop); rename, renameat, renameat2; unlink, unlinkat, rmdir; link, linkat; symlink,
// symlinkat; mkdir, mkdirat; mknod, mknodat; truncate; bind where sockets can be bound (a unix
// socket's path is a file; DoBind). (openat2 is ENOSYS in both modes: its
// flags are in memory. chmod, chown, utime and xattr calls are the metadata supervisor's, which
// refuses the carve-outs too.) Each call is EMULATED here, never continued:
//   1. copy its arguments once: path strings (process_vm_readv), its dirfds (pidfd_getfd; or
//      /proc/<tid>/mem and /proc/<tid>/fd/N where those are refused: task_access.h), its
//      cwd for a relative path (/proc/<tid>/cwd), the umask for a create (/proc/<tid>/status,
//      a file kept open per task: nargs::Umask); then SECCOMP_IOCTL_NOTIF_ID_VALID checks they
//      came from the task still waiting in the call. The copies are made with this thread's
//      effective capabilities cleared, and once more with them if that was refused (a
//      non-dumpable command: nargs::ReadWithCapsRetry); they are the same copies either way;
//   2. with this thread's effective capabilities cleared (the command has the host's uid and
//      gids and no capabilities, so the kernel's own checks answer as for the command; cleared
//      once and left so for the next path or metadata call, supervisor.cc), pin the
//      PARENT directory of each name with openat2(RESOLVE_NO_MAGICLINKS) (/proc magic links would
//      resolve against the host; the command's /proc/self/fd/N, /dev/fd/N and /dev/std* are
//      translated to its fd N first), and look at the last component in that pinned directory;
//   3. judge: the pinned parent's location is the path the kernel builds from its dentry chain
//      (readlink of /proc/self/fd/N), which the command cannot change once pinned but by renaming
//      an ancestor, and renaming the ancestors of a carve-out is refused (below); a directory
//      deeper than PATH_MAX, whose path the kernel cannot give, is located by walking up its
//      parents to the first writable root or carve-out, by (dev, ino) (WalkUp). The rules:
//        - writable roots: the parent must lie in one (the supervisor is not confined by the
//          command's Landlock domain, so it enforces that domain's write rules itself); opening
//          for writing outside them is allowed only for the device files Landlock grants (its
//          terminals: the ones on its fds 0-2 when it was spawned, recorded on the host then;
//          never what its fds 0-2 are at the call, where an O_PATH fd of any device can be put);
//        - inside a carve-out (at or below it, unless a deeper writable root): nothing is
//          created, opened for writing, truncated, removed, renamed into or out of, or linked;
//        - a carve-out's own object, by (dev, ino): never opened for writing or linked, by any
//          name (a hard link made before the run included);
//        - pinned objects, by (dev, ino): the carve-outs, every directory on the way from their
//          writable root to them, and the writable roots: never removed, renamed or replaced;
//        - held names: a carve-out missing at the start (and any missing directory on the way)
//          is never created, by open, mkdir, mknod, symlink, link or rename;
//   4. carry the call out on the pinned parent (openat, mkdirat, renameat2 ... with the last
//      component only) and answer with its result; an open's fd goes into the command with
//      SECCOMP_IOCTL_NOTIF_ADDFD (SECCOMP_ADDFD_FLAG_SEND where the kernel has it, 5.14+, so the
//      fd and the answer arrive together; for a file that can be executed, the fd first, then
//      our copy is dropped, then the answer: answer_later.cc, MustDropFirst). A create gets the
//      command's umask, not the host's.
// Why that is TOCTOU-safe: nothing the command can change after step 1 (its memory, its fd
// table, its cwd) is read again; the name acted on in step 4 is one component in the directory
// pinned in step 2; and what a name in that directory refers to can only change through calls
// that come here. A pinned object's names cannot change at all (removing, renaming, replacing or
// linking one is refused), so a check that a name is not a pinned object cannot be raced into a
// wrong answer, and the paths of the carve-outs and of every directory above them stay what they
// were at the start, which is what makes the path-prefix judgement of step 3 an object judgement.
// What the command sees: the kernel's errnos for the calls carried out; EROFS for a name that
// cannot be made because it is protected (a held name, a name inside a carve-out); EACCES for
// any other refusal (the errno Landlock gives for writes); ELOOP for a path through another /proc
// magic link.
// Differences from the kernel's own call, by design: an O_WRONLY open of a named FIFO with no
// reader waits on a short-lived thread of its own, never this one (answer_later.h: it retries a
// non-blocking open of the object judged here until a reader is there, then answers), so it
// returns up to 250 ms after the reader came rather than at once, and fails with EAGAIN when 256
// such waits are under way in the host already; /dev/tty is the command's
// controlling terminal (looked up from /proc/<tid>/stat), never the host's, and only when that is
// one of the terminals it was spawned with (else ENXIO, as for no terminal); a parent directory
// with a default ACL gets the umask applied all the same; where unshare(CLONE_FS) is refused (a
// container's seccomp profile) a create whose mode the host's umask narrowed is widened by a chmod
// right after (OwnFsContext), so the object has the narrower mode for a moment.
// Kernel features: seccomp user notification with SECCOMP_IOCTL_NOTIF_ADDFD and pidfd_getfd
// (5.9), openat2 (5.6). Without them the planner does not enable this supervisor, lists the
// carve-outs as not enforced and requires `degraded` (linux/plan.ts). SECCOMP_ADDFD_FLAG_SEND
// (5.14) and SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (5.19, seccomp.cc) are used where present:
// before 5.19 a signal that arrives after a call was received can make the caller run it again
// (a retried mkdir then fails with EEXIST), a correctness gap, not a security one.
// Tests: test/linux/landlock-carveouts.test.ts, test/linux/landlock-holes.test.ts,
// test/linux/protected-names-content.test.ts, test/linux/landlock-fifo.test.ts,
// test/linux/landlock-truncate.test.ts, test/linux/landlock-exec-written.test.ts,
// test/linux/landlock-terminals.test.ts, test/changes/record-landlock.test.ts.
#include "supervise_paths.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "answer_later.h"
#include "notify_args.h"
#include "../proc_fields.h"
#include "supervisor_profile.h"
#include "task_access.h"

namespace psb {
namespace {

unsigned g_check_skips = 0;  // SetPathCheckSkips: tests only

using nargs::EffectiveCapsCleared;
using nargs::Fd;
using nargs::GetFd;
using nargs::OwnFdPath;
using nargs::PathOf;
using nargs::ReadString;
using nargs::StartAt;
using nargs::Under;
using notify::ArgInt;
using notify::SeccompNotif;
using later::AnswerWithFd;
using later::kAnsweredLater;
using Id = PathRules::Id;

enum class Op : uint8_t { kOpen, kMkdir, kMknod, kUnlink, kRename, kLink, kSymlink, kTruncate, kBind };

// Where a call keeps its operands (argument numbers; -1: none / AT_FDCWD).
struct Call {
  int nr;
  Op op;
  int8_t dirfd, path;    // the (first) name
  int8_t dirfd2, path2;  // rename and link: the new name
  int8_t flags;          // open flags, AT_* flags or RENAME_* flags
  int8_t operand;        // open/mkdir/mknod mode; symlink target; truncate length
  int fixed_flags;       // creat: O_CREAT|O_WRONLY|O_TRUNC; rmdir: AT_REMOVEDIR
};

constexpr int kSkip = -1;
#ifdef __NR_open
constexpr int kNrOpen = __NR_open, kNrCreat = __NR_creat, kNrMkdir = __NR_mkdir, kNrMknod = __NR_mknod;
constexpr int kNrUnlink = __NR_unlink, kNrRmdir = __NR_rmdir, kNrRename = __NR_rename, kNrLink = __NR_link;
constexpr int kNrSymlink = __NR_symlink;
#else
constexpr int kNrOpen = kSkip, kNrCreat = kSkip, kNrMkdir = kSkip, kNrMknod = kSkip;
constexpr int kNrUnlink = kSkip, kNrRmdir = kSkip, kNrRename = kSkip, kNrLink = kSkip;
constexpr int kNrSymlink = kSkip;
#endif
#ifdef __NR_renameat
constexpr int kNrRenameat = __NR_renameat;
#else
constexpr int kNrRenameat = kSkip;
#endif
constexpr int kAtRemovedir = AT_REMOVEDIR;

constexpr Call kCalls[] = {
    {kNrOpen, Op::kOpen, -1, 0, -1, -1, 1, 2, 0},
    {__NR_openat, Op::kOpen, 0, 1, -1, -1, 2, 3, 0},
    {kNrCreat, Op::kOpen, -1, 0, -1, -1, -1, 1, O_CREAT | O_WRONLY | O_TRUNC},
    {kNrMkdir, Op::kMkdir, -1, 0, -1, -1, -1, 1, 0},
    {__NR_mkdirat, Op::kMkdir, 0, 1, -1, -1, -1, 2, 0},
    {kNrMknod, Op::kMknod, -1, 0, -1, -1, -1, 1, 0},
    {__NR_mknodat, Op::kMknod, 0, 1, -1, -1, -1, 2, 0},
    {kNrUnlink, Op::kUnlink, -1, 0, -1, -1, -1, -1, 0},
    {kNrRmdir, Op::kUnlink, -1, 0, -1, -1, -1, -1, kAtRemovedir},
    {__NR_unlinkat, Op::kUnlink, 0, 1, -1, -1, 2, -1, 0},
    {kNrRename, Op::kRename, -1, 0, -1, 1, -1, -1, 0},
    {kNrRenameat, Op::kRename, 0, 1, 2, 3, -1, -1, 0},
    {__NR_renameat2, Op::kRename, 0, 1, 2, 3, 4, -1, 0},
    {kNrLink, Op::kLink, -1, 0, -1, 1, -1, -1, 0},
    {__NR_linkat, Op::kLink, 0, 1, 2, 3, 4, -1, 0},
    {kNrSymlink, Op::kSymlink, -1, 1, -1, -1, -1, 0, 0},
    {__NR_symlinkat, Op::kSymlink, 1, 2, -1, -1, -1, 0, 0},
    {__NR_truncate, Op::kTruncate, -1, 0, -1, -1, -1, 1, 0},
    {__NR_bind, Op::kBind, -1, -1, -1, -1, -1, -1, 0},
};

const Call* FindCall(int nr) {
  for (const Call& c : kCalls) {
    if (c.nr != kSkip && c.nr == nr) return &c;
  }
  return nullptr;
}

constexpr uint64_t kResolveNoMagiclinks = 0x02;
constexpr int kMaxLinks = 40;           // the kernel's MAXSYMLINKS

int Openat2(int dirfd, const char* path, uint64_t flags) {
  struct {
    uint64_t flags, mode, resolve;
  } how = {flags | O_CLOEXEC, 0, kResolveNoMagiclinks};
  int fd = static_cast<int>(syscall(__NR_openat2, dirfd, path, &how, sizeof how));
  return fd >= 0 ? fd : -errno;
}

bool Has(const std::vector<Id>& ids, const struct stat& st) {
  const Id id{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  for (const Id& x : ids) {
    if (x == id) return true;
  }
  return false;
}

// The deepest entry of `list` that p lies at or below; 0 when none.
size_t Deepest(const std::string& p, const std::vector<std::string>& list) {
  size_t best = 0;
  for (const std::string& x : list) {
    if (x.size() >= best && Under(p, x)) best = x.size() == 0 ? 1 : x.size();
  }
  return best;
}

bool InWritable(const PathRules& r, const std::string& p) { return !p.empty() && p[0] == '/' && Deepest(p, r.writable) > 0; }

// At or below a carve-out, with no writable root deeper on the way (isolated mode applies the
// binds outermost first, a carve-out after a root of the same path: the deeper one wins).
bool InCarveout(const PathRules& r, const std::string& p) {
  const size_t c = Deepest(p, r.carveouts);
  return c > 0 && c >= Deepest(p, r.writable);
}

std::string Join(const std::string& dir, const std::string& name) { return dir == "/" ? "/" + name : dir + "/" + name; }

// Whether making the name `p` would create a held (missing) carve-out or a directory on its way.
bool Held(const PathRules& r, const std::string& p) {
  for (const std::string& h : r.held) {
    if (Under(h, p)) return true;
  }
  return false;
}

// A name split into its pinned parent directory and its last component.
struct Name {
  Fd dir;
  std::string dir_path;  // the kernel's path of dir ("?" when unknown)
  bool deep = false;     // its path could not be read (longer than PATH_MAX): see Locate
  std::string last;      // "" for "/", else the last component ("." and ".." included)
  bool slash = false;    // the path ended in '/'
};

// Pins the parent of `path` (relative to base, or absolute) and splits off its last component.
int Split(int base, const std::string& path, Name* out) {
  PSB_PROF_MARK(kPathsAct);
  if (path.empty()) return -ENOENT;
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/') --end;
  out->slash = end < path.size();
  if (end == 1 && path[0] == '/') {
    out->last.clear();
    out->slash = false;
  }
  const std::string trimmed = path.substr(0, end);
  const size_t cut = trimmed.rfind('/');
  std::string dir;
  if (trimmed == "/") {
    dir = "/";
  } else if (cut == std::string::npos) {
    dir = ".";
    out->last = trimmed;
  } else {
    dir = cut == 0 ? "/" : trimmed.substr(0, cut);
    out->last = trimmed.substr(cut + 1);
  }
  const int fd = Openat2(base >= 0 ? base : AT_FDCWD, dir.c_str(), O_PATH | O_DIRECTORY);
  if (fd < 0) return fd;
  out->dir.Reset(fd);
  // A directory's path; one removed since keeps a " (deleted)" suffix, and nothing can be made in
  // it anyway (no stat needed for the suffix rule, which is for unlinked files).
  struct stat st;
  st.st_nlink = 1;
  out->dir_path = PathOf(fd, st);
  if (out->dir_path.empty()) out->dir_path = "?";
  out->deep = out->dir_path == "?";
  PSB_PROF_MARK(kPathsPin);
  return 0;
}

bool Special(const Name& n) { return n.last.empty() || n.last == "." || n.last == ".."; }

enum class Where : uint8_t { kOutside, kWritable, kCarveout };

// Where directory `dir` lies, found by walking up its parents (".."): the first writable root or
// carve-out met decides (a carve-out first when one directory is both). For a directory whose
// path is too long for the kernel to give (a tree deeper than PATH_MAX): the carve-outs and every
// directory above them are pinned, so this walk meets the same objects their paths named.
Where WalkUp(const PathRules& r, int dir) {
  Fd cur(fcntl(dir, F_DUPFD_CLOEXEC, 0));
  struct stat st, up;
  if (cur.fd < 0 || fstat(cur.fd, &st) != 0) return Where::kOutside;
  for (int depth = 0; depth < 65536; ++depth) {
    if (Has(r.carveout_ids, st)) return Where::kCarveout;
    if (Has(r.root_ids, st)) return Where::kWritable;
    Fd parent(openat(cur.fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (parent.fd < 0 || fstat(parent.fd, &up) != 0) return Where::kOutside;
    if (up.st_dev == st.st_dev && up.st_ino == st.st_ino) return Where::kOutside;  // "/"
    cur = std::move(parent);
    st = up;
  }
  return Where::kOutside;
}

// Where the pinned directory of name n lies.
Where Locate(const PathRules& r, const Name& n) {
  if (n.deep) return WalkUp(r, n.dir.fd);
  if (!InWritable(r, n.dir_path)) return Where::kOutside;
  return InCarveout(r, n.dir_path) ? Where::kCarveout : Where::kWritable;
}

// May the name (n.dir, n.last) be made? 0, -EACCES or -EROFS. With `exists_fails`, a name that
// exists already gets the kernel's EEXIST first (mkdir of an existing .git/hooks is EEXIST, which
// tools ignore, as in isolated mode).
int MayCreate(const PathRules& r, const Name& n, bool exists_fails = false) {
  struct stat st;
  if (exists_fails && fstatat(n.dir.fd, n.last.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return -EEXIST;
  if (Locate(r, n) != Where::kWritable) return -EACCES;
  // (Held names and carve-outs have paths the planner wrote: never below a path too long to read.)
  if (n.deep) return 0;
  const std::string p = Join(n.dir_path, n.last);
  // A protected name (held while missing, or inside a carve-out) is read-only, not forbidden:
  // EROFS, as isolated mode's read-only mounts answer and as srt reports it, so that the user,
  // and a model reading stderr, sees "Read-only file system" rather than "Permission denied".
  if (Held(r, p) || InCarveout(r, p)) return -EROFS;
  return 0;
}

// May the entry (n.dir, n.last) be removed, renamed or replaced? 0 or -EACCES. A missing entry
// is left to the call itself (its ENOENT).
int MayRemove(const PathRules& r, const Name& n) {
  if (Locate(r, n) != Where::kWritable) return -EACCES;
  struct stat st;
  if (fstatat(n.dir.fd, n.last.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && Has(r.pinned, st)) return -EACCES;
  if (!n.deep && InCarveout(r, Join(n.dir_path, n.last))) return -EACCES;
  return 0;
}

// The command's controlling terminal's device number (0: none), from /proc/<tid>/stat.
dev_t ControllingTty(uint32_t tid) {
  procfs::StatFields st;
  return procfs::ReadStat(tid, &st) == 5 ? static_cast<dev_t>(st.tty_nr) : 0;
}

// The terminal the command was spawned with that has these numbers (dev 0, ino 0: any with that
// rdev), or null.
const PathRules::Terminal* HeldTerminal(const PathRules& r, dev_t dev, ino_t ino, dev_t rdev) {
  for (const PathRules::Terminal& t : r.terminals) {
    if (t.rdev != rdev) continue;
    if ((dev == 0 && ino == 0) || (t.id.dev == dev && t.id.ino == ino)) return &t;
  }
  return nullptr;
}

// May the existing object x (st) be opened for writing or truncated? `path` is where it was
// reached (its parent's path and name; or its own path for an fd the command named). 0 or -EACCES.
int MayWrite(const PathRules& r, const struct stat& st, const std::string& path, const Name* parent) {
  const unsigned skips = __atomic_load_n(&g_check_skips, __ATOMIC_RELAXED);
  if (skips & kSkipWritableCheck) return 0;
  if (Has(r.carveout_ids, st)) return -EACCES;
  if (parent != nullptr && parent->deep) {
    const Where w = Locate(r, *parent);
    if (w != Where::kOutside) return w == Where::kWritable ? 0 : -EACCES;
  } else {
    if (path.empty()) return 0;  // a pipe or socket: no name, nothing on disk to protect
    if (InCarveout(r, path)) return -EACCES;
    if (InWritable(r, path)) return 0;
  }
  if (S_ISDIR(st.st_mode)) return 0;  // the open itself fails (EISDIR)
  if (!S_ISCHR(st.st_mode)) return -EACCES;
  if (Has(r.devices, st) || st.st_rdev == makedev(5, 0)) return 0;
  // A terminal the command had on fds 0-2 when it started, never by what its fds 0-2 are now
  // (Reopen opens the held one).
  if (skips & kSkipTerminalCheck) return 0;
  return HeldTerminal(r, st.st_dev, st.st_ino, st.st_rdev) != nullptr ? 0 : -EACCES;
}

// Opens the pinned object x (O_PATH) for the command's flags: 0 with a new fd in *out, -errno,
// or kAnsweredLater (a FIFO's waiter took x over and answers the call).
int Reopen(const PathRules& r, int listener, const SeccompNotif& n, Fd* x, const struct stat& st, int flags, Fd* out) {
  int f = (flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC)) | O_NOCTTY | O_CLOEXEC;
  if ((flags & O_TMPFILE) == O_TMPFILE) f &= ~O_TMPFILE;
  if (S_ISCHR(st.st_mode)) {
    // A terminal: the one the command was spawned with, held since (a name of the same numbers
    // may be another terminal now). /dev/tty opened here would be the HOST's terminal: the
    // command's controlling terminal instead, and only when it is one of those.
    const bool tty = st.st_rdev == makedev(5, 0);
    const dev_t ctty = tty ? ControllingTty(n.pid) : 0;
    if (tty && ctty == 0) return -ENXIO;
    const PathRules::Terminal* t = tty ? HeldTerminal(r, 0, 0, ctty) : HeldTerminal(r, st.st_dev, st.st_ino, st.st_rdev);
    if (tty && t == nullptr) return -ENXIO;
    if (t != nullptr) {
      const int fd = open(nargs::FdName(*t->held), f);
      if (fd < 0) return -errno;
      out->Reset(fd);
      return 0;
    }
  }
  const nargs::FdName proc(x->fd);
  if (S_ISFIFO(st.st_mode) && (flags & O_NONBLOCK) == 0) {
    // A blocking open would stall this thread until a partner came. Non-blocking first: it
    // succeeds where the blocking one would return at once (read-write never waits; a write-only
    // one finds a reader there). A write-only one without a reader (ENXIO) waits for one on a
    // thread of its own, on the object judged here (no name is resolved again), and that thread
    // answers (answer_later.h). A read-only one (here only with O_CREAT or O_TRUNC) is opened
    // at once: a read before a writer came sees end-of-file.
    int fd = open(proc, f | O_NONBLOCK);
    if (fd < 0 && errno == ENXIO && (f & O_ACCMODE) == O_WRONLY) {
      if (!later::WaitForReader(r.fifo_waiters, listener, n.id, x->fd, f, (flags & O_CLOEXEC) != 0)) return -EAGAIN;
      x->Release();
      return kAnsweredLater;
    }
    if (fd < 0) return -errno;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    out->Reset(fd);
    return 0;
  }
  const int fd = open(proc, f);
  if (fd < 0) return -errno;
  out->Reset(fd);
  return 0;
}

// What an open, a truncate or a link source resolves to: an existing object (x) or, for a
// create, a name to make.
struct Target {
  Fd x;            // O_PATH, the object (existing)
  struct stat st;  // its stat
  std::string path;  // where it was reached
  Name name;       // the parent and the name (create, or the last hop)
  bool create = false;
};

// Resolves `path` from base as an open with `flags` would, one last component at a time so that
// every hop is judged in a pinned directory (a symlink at the end is followed by reading it and
// going on from its directory). Own-fd paths (/proc/self/fd/N...) are the command's fd N.
int ResolveForWrite(Fd* own, Fd* base, std::string path, int flags, bool follow, Target* t) {
  if (own->fd >= 0) {
    // The command's own fd N (/proc/self/fd/N, /dev/fd/N, /dev/std*), copied with the arguments.
    t->x.Reset(own->Release());
    if (fstat(t->x.fd, &t->st) != 0) return -EACCES;
    t->path = PathOf(t->x.fd, t->st);
    if (t->path == "?") return -EACCES;
    return 0;
  }
  int start = base->fd;
  Fd hop;  // the directory a followed link's target is relative to
  for (int links = 0;; ++links) {
    Name nm;
    if (int r = Split(start, path, &nm)) return r;
    if (Special(nm)) {
      // ".", ".." or "/": a directory that exists; nothing to create.
      if (flags & O_CREAT) return -EISDIR;
      const int fd = Openat2(nm.dir.fd, nm.last.empty() ? "." : nm.last.c_str(), O_PATH);
      if (fd < 0) return fd;
      t->x.Reset(fd);
      if (fstat(fd, &t->st) != 0) return -EACCES;
      t->path = PathOf(fd, t->st);
      return 0;
    }
    const int fd = Openat2(nm.dir.fd, nm.last.c_str(), O_PATH | O_NOFOLLOW);
    if (fd == -ENOENT) {
      if ((flags & O_CREAT) == 0) return -ENOENT;
      if (nm.slash) return -EISDIR;
      t->create = true;
      t->name = std::move(nm);
      return 0;
    }
    if (fd < 0) return fd;
    t->x.Reset(fd);
    if (fstat(fd, &t->st) != 0) return -EACCES;
    if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL)) return -EEXIST;
    if (S_ISLNK(t->st.st_mode) && follow && !(flags & O_NOFOLLOW)) {
      if (links >= kMaxLinks) return -ELOOP;
      char buf[PATH_MAX];
      ssize_t len = readlinkat(fd, "", buf, sizeof buf);
      // (A link this task may not read, e.g. another process's /proc magic link outside the
      // envelope's domain: that refusal, not a length.)
      if (len < 0) return -errno;
      if (len == 0 || len >= static_cast<ssize_t>(sizeof buf)) return len == 0 ? -ENOENT : -ENAMETOOLONG;
      path.assign(buf, static_cast<size_t>(len));
      if (nm.slash) path += "/";
      hop.Reset(nm.dir.Release());
      start = hop.fd;
      continue;
    }
    if (S_ISLNK(t->st.st_mode) && (flags & O_NOFOLLOW) && !(flags & O_PATH)) return -ELOOP;
    if (nm.slash && !S_ISDIR(t->st.st_mode)) return -ENOTDIR;
    t->path = Join(nm.dir_path, nm.last);
    t->name = std::move(nm);
    return 0;
  }
}

// A pidfd for the calling task, made only when a call names an fd of its own (a dirfd, or
// /proc/self/fd/N): most calls name a path from the cwd, which /proc/<tid>/cwd gives.
struct LazyPidfd {
  int listener;
  const SeccompNotif& n;
  Fd fd;
  int Copy(int child_fd, Fd* out) {
    // /proc/<tid>/fd needs no pidfd (task_access.h: a container's seccomp profile).
    if (task::Way() == task::Access::kProcfs) return GetFd(-1, n.pid, child_fd, out);
    if (fd.fd < 0) fd.Reset(notify::PidfdFor(listener, n));
    if (fd.fd < 0) return -EACCES;
    return GetFd(fd.fd, n.pid, child_fd, out);
  }
};

// Where a path starts (see nargs::StartAt): nothing for an absolute one, the cwd for AT_FDCWD,
// else a copy of the dirfd.
int Start(const SeccompNotif& n, LazyPidfd* pid, int dirfd, const std::string& path, Fd* base) {
  if (path[0] == '/') return 0;
  if (dirfd != AT_FDCWD) return pid->Copy(dirfd, base);
  return StartAt(n, -1, AT_FDCWD, path, base);
}

// The call's copied operands (step 1).
struct Args {
  std::string path, path2, target;
  Fd base, base2;
  Fd own;  // the command's fd N for a path naming it (/proc/self/fd/N, /dev/fd/N, /dev/std*)
  int flags = 0;
  uint32_t mode = 0;
  uint64_t operand = 0;  // mknod's dev, truncate's length
  int umask = -1;     // read when a create needs it (CmdUmask)
  int listener = -1;
  bool empty_path = false;  // linkat AT_EMPTY_PATH with ""
};

int ReadArgs(const Call& c, const SeccompNotif& n, LazyPidfd* pid, Args* a) {
  a->flags = c.flags >= 0 ? ArgInt(n, c.flags) : 0;
  a->flags |= c.fixed_flags;
  if (c.op == Op::kOpen || c.op == Op::kMkdir || c.op == Op::kMknod) a->mode = static_cast<uint32_t>(n.data.args[c.operand]);
  if (c.op == Op::kMknod) a->operand = n.data.args[c.operand + 1];
  if (c.op == Op::kTruncate) a->operand = n.data.args[c.operand];
  if (c.op == Op::kSymlink) {
    if (int r = ReadString(n.pid, n.data.args[c.operand], &a->target, PATH_MAX, -ENAMETOOLONG)) return r;
    if (a->target.empty()) return -ENOENT;
  }
  if (int r = ReadString(n.pid, n.data.args[c.path], &a->path, PATH_MAX, -ENAMETOOLONG)) return r;
  const int dirfd = c.dirfd >= 0 ? ArgInt(n, c.dirfd) : AT_FDCWD;
  if (c.op == Op::kLink && a->path.empty() && (a->flags & AT_EMPTY_PATH)) {
    a->empty_path = true;
    if (dirfd == AT_FDCWD) return -ENOENT;
    if (int r = pid->Copy(dirfd, &a->base)) return r;
  } else {
    if (a->path.empty()) return -ENOENT;
    const bool follows = c.op == Op::kOpen || c.op == Op::kTruncate || (c.op == Op::kLink && (a->flags & AT_SYMLINK_FOLLOW));
    const bool nofollow_open = c.op == Op::kOpen && (a->flags & O_NOFOLLOW);
    if (int own = follows && !nofollow_open ? OwnFdPath(a->path) : -1; own >= 0) {
      if (int r = pid->Copy(own, &a->own)) return r;
    } else if (int r = Start(n, pid, dirfd, a->path, &a->base)) {
      return r;
    }
  }
  if (c.path2 >= 0) {
    if (int r = ReadString(n.pid, n.data.args[c.path2], &a->path2, PATH_MAX, -ENAMETOOLONG)) return r;
    if (a->path2.empty()) return -ENOENT;
    const int dirfd2 = c.dirfd2 >= 0 ? ArgInt(n, c.dirfd2) : AT_FDCWD;
    if (int r = Start(n, pid, dirfd2, a->path2, &a->base2)) return r;
  }
  return 0;
}

// The command's umask, read only when something is about to be created (most write-opens open a
// file that exists: reading /proc/<tid>/status costs more than the rest of the call), and checked
// like the other copies to come from the task still waiting in the call.
int CmdUmask(const SeccompNotif& n, Args* a) {
  if (a->umask >= 0) return a->umask;
  PSB_PROF_MARK(kPathsAct);
  const int u = nargs::Umask(n.pid);
  if (u < 0) return u;
  if (!notify::IdValid(a->listener, n.id)) return -ESRCH;
  PSB_PROF_MARK(kPathsUmask);
  a->umask = u;
  return u;
}

// This thread's file-system context: its own, with umask 0, so that a create gets exactly the
// mode computed from the command's umask (applied by hand). A container runtime's default seccomp
// profile refuses unshare() without CAP_SYS_ADMIN (Docker's: EPERM): the context then stays the
// host process's, whose umask must not be changed (every host thread shares it), and a create
// whose mode that umask narrowed gets the missing permission bits back with a chmod of the object
// it made (FixMode). Once per thread.
thread_local int host_umask = -1;  // -1: own context (umask 0)
bool OwnFsContext() {
  thread_local bool done = false;
  if (done) return true;
  if (unshare(CLONE_FS) == 0) {
    umask(0);
  } else {
    // Read, never set: umask(2) would change it for the whole host process for a moment.
    const int u = nargs::Umask(static_cast<uint32_t>(syscall(SYS_gettid)));
    if (u < 0) return false;
    host_umask = u;
  }
  done = true;
  return true;
}

// After a create with mode `perm` through the host's shared umask: gives the object (the fd of a
// file just made, or name `last` in the pinned directory `dir`, never followed) the permission
// bits that umask took away; its other mode bits (a set-gid directory's inherited S_ISGID) stay.
// 0 or -errno. Nothing to do with a context of our own or when the umask took nothing.
int FixMode(int fd, int dir, const char* last, mode_t perm) {
  if (host_umask <= 0 || (perm & static_cast<mode_t>(host_umask) & 0777) == 0) return 0;
  Fd obj;
  if (fd < 0) {
    obj.Reset(openat(dir, last, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (obj.fd < 0) return -errno;
    fd = obj.fd;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  if (S_ISLNK(st.st_mode)) return 0;
  const nargs::FdName proc(fd);
  const mode_t want = (st.st_mode & 07777) | (perm & 0777);
  return chmod(proc, want) == 0 ? 0 : -errno;
}

// bind(fd, addr, len), carried out on a copy of the command's socket (the same socket: binding
// the copy binds it). A unix socket's path is made like any create: in the pinned parent (this
// thread's own cwd, fchdir'ed there), outside the carve-outs, with the command's umask. Abstract
// and autobound unix names make nothing on disk; AF_INET/AF_INET6 only with network 'full'
// (otherwise Landlock's own answer, EACCES).
// DoBind's answer for "let the kernel run it" (procfs way only; see there).
constexpr long kContinueBind = 1L << 40;

long DoBind(const PathRules& r, const SeccompNotif& n, LazyPidfd* pid, Args* a) {
  const int len = ArgInt(n, 2);
  if (len < static_cast<int>(sizeof(sa_family_t)) || len > static_cast<int>(sizeof(sockaddr_storage))) return -EINVAL;
  sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  if (int e = nargs::ReadMem(n.pid, n.data.args[1], &ss, static_cast<size_t>(len))) return e;
  // The same socket, not an object anchor: binding the copy binds the command's socket. Where a
  // container's profile refuses pidfd_getfd there is no such copy (task_access.h): the call is
  // judged as below and then continued (kContinueBind), the one call this class continues. What
  // that leaves: the path is resolved again by the kernel, so a command racing its own bind()
  // can make a socket file (no content: nothing can run it) inside a carve-out; Landlock's
  // MAKE_SOCK right still keeps it inside the writable roots (docs/security.md).
  const bool same_socket = task::Way() == task::Access::kPidfd;
  Fd sock;
  if (same_socket) {
    if (pid->fd.fd < 0) pid->fd.Reset(notify::PidfdFor(a->listener, n));
    if (pid->fd.fd < 0) return -EACCES;
    sock.Reset(task::DupTaskFd(pid->fd.fd, n.pid, ArgInt(n, 0)));
    if (sock.fd < 0) return static_cast<int>(sock.fd);
  }
  std::string path;
  const bool unix_path = ss.ss_family == AF_UNIX && len > static_cast<int>(sizeof(sa_family_t)) &&
                         reinterpret_cast<const sockaddr_un*>(&ss)->sun_path[0] != 0;
  if (unix_path) {
    const sockaddr_un* un = reinterpret_cast<const sockaddr_un*>(&ss);
    const size_t max = static_cast<size_t>(len) - sizeof(sa_family_t);
    path.assign(un->sun_path, strnlen(un->sun_path, std::min(max, sizeof un->sun_path)));
    if (int e = Start(n, pid, AT_FDCWD, path, &a->base)) return e;
  }
  if (!notify::IdValid(a->listener, n.id)) return -ESRCH;
  EffectiveCapsCleared lowered;
  if (!lowered.ok()) return -EPERM;
  if (!unix_path) {
    if ((ss.ss_family == AF_INET || ss.ss_family == AF_INET6) && !r.inet_bind) return -EACCES;
    if (!same_socket) return kContinueBind;  // the kernel's and Landlock's own checks then
    return bind(sock.fd, reinterpret_cast<const sockaddr*>(&ss), static_cast<socklen_t>(len)) == 0 ? 0 : -errno;
  }
  Name nm;
  if (int e = Split(a->base.fd, path, &nm)) return e;
  if (Special(nm) || nm.slash) return -EADDRINUSE;
  if (int e = MayCreate(r, nm)) return e;
  // A socket file the kernel would make itself (a continued call) would not be journaled.
  if (!same_socket && r.journal && (nm.deep || r.journal->Records(Join(nm.dir_path, nm.last)))) return -EACCES;
  if (!same_socket) return kContinueBind;
  const int u = CmdUmask(n, a);
  if (u < 0) return u;
  changes::Journal::Step step(r.journal.get());
  if (int e = step.Before(Join(nm.dir_path, nm.last), nm.dir.fd, nm.last.c_str())) return e;
  sockaddr_un here;
  memset(&here, 0, sizeof here);
  here.sun_family = AF_UNIX;
  if (nm.last.size() >= sizeof here.sun_path) return -ENAMETOOLONG;
  memcpy(here.sun_path, nm.last.data(), nm.last.size());
  if (host_umask >= 0) {
    // No file-system context of our own (OwnFsContext: unshare refused): this thread's cwd and
    // umask are the host process's, never changed here. The name is reached through the pinned
    // directory's /proc/self/fd link instead, and what the host's umask took is given back.
    const int w = snprintf(here.sun_path, sizeof here.sun_path, "/proc/thread-self/fd/%d/%s", nm.dir.fd, nm.last.c_str());
    if (w < 0 || static_cast<size_t>(w) >= sizeof here.sun_path) return -ENAMETOOLONG;
    if (bind(sock.fd, reinterpret_cast<const sockaddr*>(&here), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + w + 1)) != 0) {
      return -errno;
    }
    if (int e = FixMode(-1, nm.dir.fd, nm.last.c_str(), 0777 & ~static_cast<mode_t>(u))) return e;
    return step.Done(0);
  }
  // This thread's cwd and umask are its own (OwnFsContext).
  if (fchdir(nm.dir.fd) != 0) return -errno;
  umask(static_cast<mode_t>(u));
  const int rc = bind(sock.fd, reinterpret_cast<const sockaddr*>(&here), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + nm.last.size() + 1));
  const int err = errno;
  umask(0);
  return rc == 0 ? step.Done(0) : -err;
}



// An open (open, openat, creat). Returns 0 with a new fd of ours in *out, -errno, or
// kAnsweredLater (Reopen: a FIFO's waiter answers).
int DoOpen(const PathRules& r, const SeccompNotif& n, Args* a, Fd* out) {
  const int flags = a->flags;
  if ((flags & O_TMPFILE) == O_TMPFILE) {
    // An unnamed file in a directory: made there like any create (linkat names it later).
    const int d = Openat2(a->base.fd >= 0 ? a->base.fd : AT_FDCWD, a->path.c_str(), O_PATH | O_DIRECTORY);
    if (d < 0) return d;
    Fd dir(d);
    struct stat st;
    if (fstat(d, &st) != 0) return -EACCES;
    const std::string p = PathOf(d, st);
    if (!InWritable(r, p) || InCarveout(r, p)) return -EACCES;
    const int u = CmdUmask(n, a);
    if (u < 0) return u;
    const mode_t perm = static_cast<mode_t>(a->mode & 07777 & ~static_cast<uint32_t>(u));
    const int fd = openat(d, ".", (flags & ~O_CLOEXEC) | O_CLOEXEC, perm);
    if (fd < 0) return -errno;
    if (int e = FixMode(fd, -1, nullptr, perm)) {
      close(fd);
      return e;
    }
    out->Reset(fd);
    return 0;
  }
  Target t;
  if (int e = ResolveForWrite(&a->own, &a->base, a->path, flags, true, &t)) return e;
  changes::Journal::Step step(r.journal.get());
  if (t.create) {
    if (int e = MayCreate(r, t.name)) return e;
    const int u = CmdUmask(n, a);
    if (u < 0) return u;
    const mode_t mode = static_cast<mode_t>(a->mode & 07777 & ~static_cast<uint32_t>(u));
    if (int e = step.Before(Join(t.name.dir_path, t.name.last), t.name.dir.fd, t.name.last.c_str())) return e;
    // O_NOFOLLOW: a symlink put at the name since it was looked up is not followed.
    const int fd = openat(t.name.dir.fd, t.name.last.c_str(), (flags & ~O_CLOEXEC) | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, mode);
    if (fd < 0) return -errno;
    Fd made(fd);
    if (int e = FixMode(fd, -1, nullptr, mode)) return e;
    if (int e = step.Done(0)) return e;
    out->Reset(made.Release());
    return 0;
  }
  if (int e = MayWrite(r, t.st, t.path, t.name.dir.fd >= 0 ? &t.name : nullptr)) return e;
  // Only an open that can change the bytes of a regular file is journaled (a terminal, a FIFO or
  // a device is not a file in the tree).
  const bool changes = S_ISREG(t.st.st_mode) && t.st.st_nlink > 0 && ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) != 0);
  if (changes) {
    if (t.name.dir.fd >= 0 && t.name.deep) return r.journal ? -ENAMETOOLONG : Reopen(r, a->listener, n, &t.x, t.st, flags, out);
    if (int e = step.Before(t.path, t.x.fd, nullptr)) return e;
  }
  const int rc = Reopen(r, a->listener, n, &t.x, t.st, flags, out);
  if (rc == 0 && changes) {
    if (int e = step.Done(0)) {
      out->Reset(-1);
      return e;
    }
  }
  return rc;
}

long DoTruncate(const PathRules& r, Args* a) {
  Target t;
  if (int e = ResolveForWrite(&a->own, &a->base, a->path, O_WRONLY, true, &t)) return e;
  if (int e = MayWrite(r, t.st, t.path, t.name.dir.fd >= 0 ? &t.name : nullptr)) return e;
  if (S_ISDIR(t.st.st_mode)) return -EISDIR;
  changes::Journal::Step step(r.journal.get());
  if (S_ISREG(t.st.st_mode) && t.st.st_nlink > 0) {
    if (int e = step.Before(t.name.dir.fd >= 0 && t.name.deep ? "?" : t.path, t.x.fd, nullptr)) return e;
  }
  const nargs::FdName proc(t.x.fd);
  if (truncate(proc, static_cast<off_t>(a->operand)) != 0) return -errno;
  return step.Done(0);
}

long DoLink(const PathRules& r, Args* a) {
  if (a->flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH)) return -EINVAL;
  Target src;
  if (a->empty_path) {
    src.x.Reset(a->base.Release());
    if (fstat(src.x.fd, &src.st) != 0) return -EACCES;
    src.path = PathOf(src.x.fd, src.st);
  } else {
    const bool follow = (a->flags & AT_SYMLINK_FOLLOW) != 0;
    if (int e = ResolveForWrite(&a->own, &a->base, a->path, follow ? 0 : O_NOFOLLOW | O_PATH, follow, &src)) return e;
  }
  Name dst;
  if (int e = Split(a->base2.fd, a->path2, &dst)) return e;
  if (Special(dst)) return -EEXIST;
  if (int e = MayCreate(r, dst, true)) return e;
  if (S_ISDIR(src.st.st_mode)) return -EPERM;
  // A carve-out's object gets no second name (isolated mode: another mount, EXDEV); an object
  // from outside the writable roots neither (Landlock: no REFER right there, EXDEV).
  if (Has(r.carveout_ids, src.st)) return -EACCES;
  if (src.name.dir.fd >= 0 && src.name.deep) {
    const Where w = Locate(r, src.name);
    if (w != Where::kWritable) return w == Where::kCarveout ? -EACCES : -EXDEV;
  } else {
    if (!src.path.empty() && InCarveout(r, src.path)) return -EACCES;
    if (src.path.empty() || src.path == "?" || !InWritable(r, src.path)) return -EXDEV;
  }
  changes::Journal::Step step(r.journal.get());
  if (int e = step.Before(Join(dst.dir_path, dst.last), dst.dir.fd, dst.last.c_str())) return e;
  const nargs::FdName proc(src.x.fd);
  if (linkat(AT_FDCWD, proc, dst.dir.fd, dst.last.c_str(), AT_SYMLINK_FOLLOW) != 0) return -errno;
  return step.Done(0);
}

long DoRename(const PathRules& r, Args* a) {
  Name from, to;
  if (int e = Split(a->base.fd, a->path, &from)) return e;
  if (int e = Split(a->base2.fd, a->path2, &to)) return e;
  if (Special(from) || Special(to)) return -EBUSY;
  if (int e = MayRemove(r, from)) return e;
  if (int e = MayRemove(r, to)) return e;  // replacing (or, with RENAME_EXCHANGE, moving) it
  if (int e = MayCreate(r, to)) return e;
  if ((a->flags & 2 /* RENAME_EXCHANGE */) != 0 && MayCreate(r, from) != 0) return -EACCES;
  struct stat st;
  if (from.slash && fstatat(from.dir.fd, from.last.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) return -ENOTDIR;
  changes::Journal::Step step(r.journal.get());
  const std::string from_path = Join(from.dir_path, from.last), to_path = Join(to.dir_path, to.last);
  if (r.journal) {
    // An exchange (or a whiteout) has no record that undoes it: refused as a file system
    // without it would (EINVAL), where either name is recorded.
    if ((a->flags & ~1 /* RENAME_NOREPLACE */) != 0 && (r.journal->Records(from_path) || r.journal->Records(to_path))) return -EINVAL;
    if (int e = step.Rename(from_path, from.dir.fd, from.last.c_str(), to_path, to.dir.fd, to.last.c_str())) return e;
  }
  const long rc = syscall(__NR_renameat2, from.dir.fd, from.last.c_str(), to.dir.fd, to.last.c_str(), static_cast<unsigned>(a->flags));
  if (rc != 0) return -errno;
  return step.Done(0);
}

long DoUnlink(const PathRules& r, Args* a) {
  if (a->flags & ~AT_REMOVEDIR) return -EINVAL;
  const bool dir = (a->flags & AT_REMOVEDIR) != 0;
  Name nm;
  if (int e = Split(a->base.fd, a->path, &nm)) return e;
  if (Special(nm)) return !dir ? -EISDIR : nm.last == "." ? -EINVAL : nm.last == ".." ? -ENOTEMPTY : -EBUSY;
  if (int e = MayRemove(r, nm)) return e;
  struct stat st;
  if (!dir && nm.slash && fstatat(nm.dir.fd, nm.last.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return S_ISDIR(st.st_mode) ? -EISDIR : -ENOTDIR;
  changes::Journal::Step step(r.journal.get());
  if (r.journal) {
    // What unlinkat would refuse is refused before anything is saved (a file is not copied for
    // an rmdir that fails with ENOTDIR, or an unlink of a directory).
    if (fstatat(nm.dir.fd, nm.last.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return -errno;
    if (dir != S_ISDIR(st.st_mode)) return dir ? -ENOTDIR : -EISDIR;
    if (int e = step.Before(Join(nm.dir_path, nm.last), nm.dir.fd, nm.last.c_str())) return e;
  }
  if (unlinkat(nm.dir.fd, nm.last.c_str(), a->flags) != 0) return -errno;
  return step.Done(0);
}

long DoMake(const PathRules& r, const SeccompNotif& n, const Call& c, Args* a) {
  Name nm;
  if (int e = Split(a->base.fd, a->path, &nm)) return e;
  if (Special(nm)) return -EEXIST;
  if (nm.slash && c.op != Op::kMkdir) {
    struct stat st;
    return fstatat(nm.dir.fd, nm.last.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ? -EEXIST : -ENOENT;
  }
  if (int e = MayCreate(r, nm, true)) return e;
  const int u = c.op == Op::kSymlink ? 0 : CmdUmask(n, a);
  if (u < 0) return u;
  const mode_t perm = static_cast<mode_t>(a->mode & 07777 & ~static_cast<uint32_t>(u));
  changes::Journal::Step step(r.journal.get());
  if (int e = step.Before(Join(nm.dir_path, nm.last), nm.dir.fd, nm.last.c_str())) return e;
  int rc = -1;
  switch (c.op) {
    case Op::kMkdir:
      rc = mkdirat(nm.dir.fd, nm.last.c_str(), perm);
      break;
    case Op::kMknod:
      rc = mknodat(nm.dir.fd, nm.last.c_str(), (a->mode & S_IFMT) | perm, static_cast<dev_t>(a->operand));
      break;
    case Op::kSymlink:
      rc = symlinkat(a->target.c_str(), nm.dir.fd, nm.last.c_str());
      break;
    default:
      return -ENOSYS;
  }
  if (rc != 0) return -errno;
  // (The object at that name gets only a chmod the command could make itself: same
  // credentials, capabilities cleared, a name where it may create.)
  if (c.op != Op::kSymlink) {
    if (int e = FixMode(-1, nm.dir.fd, nm.last.c_str(), perm)) return e;
  }
  return step.Done(0);
}


}  // namespace

PathRules BuildPathRules(const std::vector<std::string>& writable, const std::vector<std::string>& carveouts,
                         const std::vector<std::string>& present_only, const std::vector<std::string>& devices) {
  PathRules r;
  r.enabled = true;
  r.writable = writable;
  r.carveouts_in = carveouts;
  r.present_only_in = present_only;
  r.devices_in = devices;
  auto id_of = [](const struct stat& st) { return Id{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)}; };
  struct stat st;
  for (const std::string& w : writable) {
    if (lstat(w.c_str(), &st) != 0) continue;
    r.pinned.push_back(id_of(st));
    r.root_ids.push_back(id_of(st));
  }
  for (const std::string& d : devices) {
    if (stat(d.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) r.devices.push_back(id_of(st));
  }
  // Walks a carve-out down from its writable root, pinning what is on the way; a symlink on the
  // way (or the carve-out itself being one) is pinned too, and its target is walked in turn.
  std::vector<std::pair<std::string, bool>> todo;  // (path, present only)
  for (const std::string& c : carveouts) {
    bool present = false;
    for (const std::string& p : present_only) present = present || p == c;
    todo.emplace_back(c, present);
  }
  for (size_t i = 0; i < todo.size() && i < 1024; ++i) {
    const std::string c = todo[i].first;
    const bool present_only_c = todo[i].second;
    std::string root;
    for (const std::string& w : writable) {
      if (w != c && Under(c, w) && w.size() > root.size()) root = w;
    }
    if (root.empty()) continue;  // outside every writable root: read-only already
    std::string cur = root;
    size_t at = root == "/" ? 1 : root.size() + 1;
    while (at <= c.size()) {
      size_t next = c.find('/', at);
      if (next == std::string::npos) next = c.size();
      const size_t part_at = at;
      const std::string part = c.substr(at, next - at);
      at = next + 1;
      if (part.empty() || part == ".") continue;
      const std::string p = Join(cur, part);
      const bool last = next >= c.size();
      if (lstat(p.c_str(), &st) != 0) {
        // Missing: held (its name and the missing directories on the way cannot be made).
        if (!present_only_c) r.held.push_back(Join(cur, c.substr(part_at)));
        break;
      }
      r.pinned.push_back(id_of(st));
      if (S_ISLNK(st.st_mode)) {
        char* real = realpath(p.c_str(), nullptr);
        if (last) {
          r.carveout_ids.push_back(id_of(st));
          r.carveouts.push_back(p);
        }
        if (real != nullptr) {
          std::string target(real);
          free(real);
          if (!last) target += c.substr(next);
          todo.emplace_back(target, present_only_c);
        }
        break;
      }
      if (last) {
        r.carveouts.push_back(p);
        r.carveout_ids.push_back(id_of(st));
        break;
      }
      if (!S_ISDIR(st.st_mode)) break;  // a file on the way: nothing can be made below it
      cur = p;
    }
  }
  return r;
}

void RecordStdioTerminals(PathRules* r, const std::vector<int>& stdio) {
  for (size_t i = 0; i < stdio.size() && i < 3; ++i) {
    struct stat st;
    if (stdio[i] < 0 || fstat(stdio[i], &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    if (!isatty(stdio[i])) continue;  // TCGETS answers: a terminal, what landlock.cc grants
    if (HeldTerminal(*r, st.st_dev, st.st_ino, st.st_rdev) != nullptr) continue;  // fds 1, 2: the same
    const nargs::FdName proc(stdio[i]);
    const int fd = open(proc, O_PATH | O_CLOEXEC);  // this object, not a name's
    if (fd < 0) continue;  // not held: not granted (the command still has it on its fds)
    std::shared_ptr<const int> held(new int(fd), [](const int* p) {
      close(*p);
      delete p;
    });
    r->terminals.push_back({{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)}, static_cast<uint64_t>(st.st_rdev), held});
  }
}

void SetPathCheckSkips(unsigned skips) noexcept { __atomic_store_n(&g_check_skips, skips, __ATOMIC_RELAXED); }
unsigned PathCheckSkips() noexcept { return __atomic_load_n(&g_check_skips, __ATOMIC_RELAXED); }

bool IsPathCall(int nr) noexcept { return FindCall(nr) != nullptr; }

bool HandlePaths(int listener, const SeccompNotif& n, const PathRules& rules, bool own_thread) noexcept {
  const Call* c = FindCall(n.data.nr);
  if (c == nullptr) return false;
  // Never continued: a continued call would run with whatever the command put in memory by then.
  if (!own_thread || !OwnFsContext()) {
    notify::Respond(listener, n.id, -EAGAIN);
    return true;
  }
  LazyPidfd pid{listener, n, Fd()};
  Args a;
  a.listener = listener;
  if (c->op == Op::kBind) {
    // bind copies the command's socket and clears the capabilities itself, as the other
    // classes do (rare: no reason to make it the thread-wide way).
    nargs::RaiseThreadCaps();
    const long rc = DoBind(rules, n, &pid, &a);
    if (rc == kContinueBind) notify::Continue(listener, n.id);
    else notify::RespondResult(listener, n.id, rc);
    return true;
  }
  // The thread's effective capabilities are cleared for the whole call, the copies included
  // (read once more with them only when refused without them: ReadWithCapsRetry), and stay
  // cleared for the next path or metadata call (LowerThreadCaps).
  const bool lowered = nargs::LowerThreadCaps();
  PSB_PROF_MARK(kPathsCaps);
  long rc = !lowered ? -EPERM : nargs::ReadWithCapsRetry([&] {
    a = Args();
    a.listener = listener;
    return ReadArgs(*c, n, &pid, &a);
  });
  // Everything read from the command came from the task still waiting in this call.
  if (rc == 0 && !notify::IdValid(listener, n.id)) return true;
  PSB_PROF_MARK(kPathsRead);
  Fd give;
  if (rc == 0) {
    switch (c->op) {
      case Op::kOpen:
        rc = DoOpen(rules, n, &a, &give);
        break;
      case Op::kTruncate:
        rc = DoTruncate(rules, &a);
        break;
      case Op::kLink:
        rc = DoLink(rules, &a);
        break;
      case Op::kRename:
        rc = DoRename(rules, &a);
        break;
      case Op::kUnlink:
        rc = DoUnlink(rules, &a);
        break;
      case Op::kMkdir:
      case Op::kMknod:
      case Op::kSymlink:
        rc = DoMake(rules, n, *c, &a);
        break;
      case Op::kBind:
        break;
    }
    PSB_PROF_MARK(kPathsAct);
  }
  if (c->op == Op::kOpen && rc == kAnsweredLater) return true;
  if (rc == 0 && give.fd >= 0) {
    AnswerWithFd(listener, n.id, give.fd, (a.flags & O_CLOEXEC) != 0);
    PSB_PROF_MARK(kPathsAddfd);
    return true;
  }
  notify::RespondResult(listener, n.id, rc);
  PSB_PROF_MARK(kPathsAnswer);
  return true;
}

void RebuildPathRules(PathRules* paths) {
  // The carve-outs as they are now (one may have been made or removed since the preparation):
  // the parked command makes no call before GoSpare releases it.
  // What is not built from the tree (the policy's bind right) is kept across the rebuild.
  if (!paths->enabled) return;
  const bool inet_bind = paths->inet_bind;
  std::shared_ptr<changes::Journal> journal = std::move(paths->journal);
  std::shared_ptr<later::Share> fifo_waiters = std::move(paths->fifo_waiters);
  *paths = BuildPathRules(paths->writable, paths->carveouts_in, paths->present_only_in, paths->devices_in);
  paths->inet_bind = inet_bind;
  paths->journal = std::move(journal);
  paths->fifo_waiters = std::move(fifo_waiters);
}

}  // namespace psb
