// Landlock mode's /proc privacy (see supervise_reads.h for what it hides).
//
// What the filter sends here: open and openat whose flags ask for no write, create or truncate
// and are not O_PATH (seccomp_table.h, kSuperviseReads; creat always writes; openat2 is ENOSYS).
// An O_PATH open stays the kernel's: it reads nothing and checks no access (Landlock's neither),
// and SECCOMP_IOCTL_NOTIF_ADDFD cannot hand an O_PATH fd over; whatever is read through one later
// is a new open (openat on it, or /proc/self/fd/N) and comes here. Each open is
// EMULATED, never continued (a path judged and then continued is resolved again by the kernel,
// after the command may have changed its memory or swapped a link):
//   1. copy the arguments once (the path string; the dirfd or the cwd as an O_PATH anchor;
//      notify_args.h), and check with SECCOMP_IOCTL_NOTIF_ID_VALID that they came from the task
//      still waiting in the call;
//   2. with this thread's effective capabilities cleared (the kernel's directory search checks
//      answer for the command's uid and gids), resolve the path here, one component at a time,
//      each opened O_PATH|O_NOFOLLOW in the directory pinned before it (with a deny-read path
//      under a readable root, a name inside a denied directory is never looked up: ENOENT, as
//      for a missing one; supervise_stats.h HiddenLookup). An ordinary symlink is
//      read and followed here (at most 40, the kernel's limit). procfs's own links are the
//      command's, not the host's: /proc/self and /proc/thread-self are the calling task's
//      process and thread, /proc/mounts and /proc/net are read and followed as text (they point
//      into self). Any other procfs link is a "magic" link (fd/N, cwd, root, exe, ns/...): it
//      is followed (by the kernel, for the host) only where its directory is a member's pid
//      directory (judged as in 3), else the open fails as in 3;
//   3. judge the object reached. On procfs (fstatfs): it must be on the host's /proc (its
//      device; another procfs mount: EACCES), and its path there (the kernel's, from the pinned
//      object's dentry chain) decides: below /proc/<pid>, the process must be a member of the
//      sandbox (the caller's own process and threads; else a strict descendant of the sandbox's
//      init, judged as supervise_signals.cc does for signals, pidfd-pinned), or the open fails
//      with ENOENT, as if the sandbox had a pid namespace: tools that list /proc (ps, top, pgrep)
//      skip a process that is gone without a word, where EACCES would be reported;
//      /proc/<pid>/net and /proc/<pid>/task/<tid>/net (the host's network tables: Landlock mode
//      shares the host's network namespace) fail with EACCES for members too. Everything else on
//      procfs (cpuinfo, meminfo, sys/...) is allowed;
//   4. open it: a procfs object is reopened here (open of /proc/self/fd/N of the pinned object
//      with the command's flags; no process can take over a pinned pid directory: a process
//      that has exited leaves its directory's entries failing, and its pid is only reused after
//      that, so a member judged in 3 is the process the pinned object belongs to when the reopen
//      succeeds). Any other object is reopened by the READ OPENER, a host thread confined by a
//      Landlock ruleset built from the command's rules before the command started
//      (StartReadOpener): the supervisor itself is not confined by the command's Landlock
//      domain, and Landlock checks an open on the object it resolves (/proc/thread-self/fd/N of
//      the opener), so a file the command's rules deny stays denied (EACCES). The new fd goes
//      into the command with SECCOMP_IOCTL_NOTIF_ADDFD.
// Why procfs objects are opened by this thread and not the opener: Landlock's ptrace rule lets
// a domain reach only processes of its own or a nested domain. The opener's domain is a sibling
// of the command's, so /proc/self/maps, environ or mem would be refused to the command; the
// command's own Landlock rules grant /proc (a platform read), so nothing Landlock would refuse
// is given (the planner refuses the option when a deny-read path lies under /proc).
// What the command sees that differs from the kernel's own open: a FIFO opened for reading
// without O_NONBLOCK returns when the first writer has written or come and gone, not when it
// opened (later::WaitForWriter: the supervisor never waits for a writer itself); a read-only
// open of /dev/tty fails with ENXIO (here it would be the host's terminal); a terminal of the
// command's stdio opened read-only by its name (/dev/pts/N) fails with EACCES (the opener has
// no rule for it). A listing of /proc's root shows the sandbox's own pids only (the metadata
// supervisor carries getdents out on the command's own directory and FilterProcListing drops the
// others; on a reopen of it where pidfd_getfd is refused); stat() of /proc/<pid> still answers.
// Kernel features: those of the path supervisor (seccomp user notification with ADDFD, 5.9;
// openat2 is not needed). Where the supervisor cannot run, the planner refuses the option.
// Tests: test/linux/landlock-proc.test.ts, test/linux/threats-proc.test.ts,
// test/linux/landlock-denyread-procfs.test.ts, test/linux/threats-net.test.ts (/proc/net).
#include "supervise_reads.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "answer_later.h"
#include "notify_args.h"
#include "task_access.h"

#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif

namespace psb {

// The read opener: one host thread per sandbox, confined by the command's Landlock rules, that
// reopens an object the supervisor pinned (open of /proc/thread-self/fd/N: Landlock checks the
// object) and answers with the new fd. The supervisor asks one open at a time.
class ReadOpener {
 public:
  ~ReadOpener() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (started_) pthread_join(thread_, nullptr);
  }

  int Start(const LandlockPlan& plan) {
    plan_ = plan;
    plan_.stdio_terminals = false;  // the host's fds 0-2 are not the command's
    plan_.identities = nullptr;
    plan_.Finalize();
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int rc = pthread_create(&thread_, &attr, Main, this);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    pthread_attr_destroy(&attr);
    if (rc != 0) return -rc;
    started_ = true;
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [this] { return setup_ <= 0; });
    return setup_;
  }

  // A new fd of ours for object fd (ours, O_PATH) opened with flags, or -errno.
  int Open(int fd, int flags) {
    std::unique_lock<std::mutex> g(mu_);
    if (setup_ != 0 || stop_) return -EACCES;
    fd_ = fd, flags_ = flags, asked_ = true;
    cv_.notify_all();
    cv_.wait(g, [this] { return !asked_; });
    return result_;
  }

 private:
  static void* Main(void* arg) {
    static_cast<ReadOpener*>(arg)->Run();
    return nullptr;
  }

  void Run() {
    pthread_setname_np(pthread_self(), "psb-read-opener");
    // This thread only: no_new_privs and Landlock apply to the calling thread, and capset to
    // the calling thread's credentials (every set emptied: the command holds none either).
    int rc = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : -errno;
    if (rc == 0) {
      __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct none[2] = {};
      if (syscall(SYS_capset, &hdr, none) != 0) rc = -errno;
    }
    if (rc == 0) rc = ApplyLandlockInChild(plan_);
    std::unique_lock<std::mutex> g(mu_);
    setup_ = rc;
    cv_.notify_all();
    if (rc != 0) return;
    for (;;) {
      cv_.wait(g, [this] { return asked_ || stop_; });
      if (stop_) return;
      const nargs::FdName proc(fd_);
      const int f = open(proc, flags_);
      result_ = f >= 0 ? f : -errno;
      asked_ = false;
      cv_.notify_all();
    }
  }

  LandlockPlan plan_;
  std::mutex mu_;
  std::condition_variable cv_;
  pthread_t thread_{};
  bool started_ = false, stop_ = false, asked_ = false;
  int setup_ = 1;  // 1: under way; 0: confined; -errno: failed
  int fd_ = -1, flags_ = 0, result_ = 0;
};

int StartReadOpener(const LandlockPlan& plan, std::shared_ptr<ReadOpener>* out) noexcept {
  if (plan.abi <= 0) return -ENOSYS;
  std::shared_ptr<ReadOpener> o(new (std::nothrow) ReadOpener());
  if (!o) return -ENOMEM;
  const int rc = o->Start(plan);
  if (rc != 0) return rc;
  *out = std::move(o);
  return 0;
}

namespace {

using nargs::EffectiveCapsCleared;
using nargs::Fd;
using notify::ArgInt;
using notify::SeccompNotif;
using later::AnswerWithFd;
using later::kAnsweredLater;

constexpr int kMaxLinks = 40;  // the kernel's MAXSYMLINKS
constexpr int kWriteOpenFlags = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC;
static_assert(O_PATH == 010000000, "seccomp_table.h's kOpenPath");

#ifdef __NR_open
constexpr int kNrOpen = __NR_open;
#else
constexpr int kNrOpen = -1;
#endif

// One call's state: the caller's thread group, read when a path reaches /proc.
struct Ctx {
  int listener;
  const SeccompNotif& n;
  const ReadRules& r;
  pid_t tgid = 0;
  // The caller's process id, read while it waits in the call (-ESRCH when the call is gone).
  pid_t Tgid() {
    if (tgid != 0) return tgid;
    // Most opens come from a process's main thread, whose id is the process's: a process pidfd
    // opens only for a thread-group leader (EINVAL otherwise), at a fraction of the cost of
    // reading /proc/<tid>/status, which the other threads need.
    pid_t t = 0;
    const long pfd = syscall(__NR_pidfd_open, n.pid, 0);
    if (pfd >= 0) {
      close(static_cast<int>(pfd));
      t = static_cast<pid_t>(n.pid);
    } else {
      t = static_cast<pid_t>(notify::ThreadGroup(n.pid));
    }
    if (t <= 0 || !notify::IdValid(listener, n.id)) return tgid = -ESRCH;
    return tgid = t;
  }
};

bool OnProc(int fd) {
  struct statfs sfs;
  return fstatfs(fd, &sfs) == 0 && sfs.f_type == PROC_SUPER_MAGIC;
}

bool OnPipefs(int fd) {
  struct statfs sfs;
  return fstatfs(fd, &sfs) == 0 && sfs.f_type == 0x50495045;  // PIPEFS_MAGIC
}

bool AllDigits(const std::string& s) {
  if (s.empty() || s.size() > 10) return false;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
  }
  return true;
}

// Whether process or thread `id` (a /proc/<id> directory's number) belongs to the sandbox.
bool MemberId(Ctx* c, pid_t id) {
  const pid_t me = c->Tgid();
  if (me <= 0) return false;
  if (id == me) return true;
  const pid_t tg = static_cast<pid_t>(notify::ThreadGroup(static_cast<uint32_t>(id)));
  if (tg <= 0) return false;
  if (tg == me) return true;  // a thread of the caller's own process
  return ProcessIsMember(tg, c->r.members) == 1;
}

// Step 3 for an object on procfs: 0 when the command may open it, else the errno to answer.
int JudgeProc(Ctx* c, int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_dev != c->r.proc_dev) return -EACCES;
  std::string p = nargs::PathOf(fd, st);
  const std::string deleted = " (deleted)";
  if (p.size() > deleted.size() && p.compare(p.size() - deleted.size(), deleted.size(), deleted) == 0) {
    p.resize(p.size() - deleted.size());  // a process that has exited: judged by its number
  }
  if (p == "/proc") return 0;
  if (p.compare(0, 6, "/proc/") != 0) return -EACCES;  // a bind mount of a part of it: unknown
  std::vector<std::string> parts;
  size_t at = 6;
  while (at <= p.size()) {
    size_t slash = p.find('/', at);
    if (slash == std::string::npos) slash = p.size();
    parts.push_back(p.substr(at, slash - at));
    at = slash + 1;
  }
  if (!AllDigits(parts[0])) return 0;  // not a process's: system-wide files
  if (parts.size() >= 2 && parts[1] == "net") return -EACCES;
  if (parts.size() >= 4 && parts[1] == "task" && parts[3] == "net") return -EACCES;
  const long id = strtol(parts[0].c_str(), nullptr, 10);
  if (id <= 0 || id > INT32_MAX) return -ENOENT;
  return MemberId(c, static_cast<pid_t>(id)) ? 0 : -ENOENT;
}

bool IsProcRoot(const ReadRules& r, int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && st.st_dev == r.proc_dev && st.st_ino == 1;  // PROC_ROOT_INO
}

int OpenRoot(Fd* cur) {
  cur->Reset(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  return cur->fd < 0 ? -errno : 0;
}

// Step 2: resolves `path` from base (-1: absolute) as the kernel would for an open with
// `follow_last` (no O_NOFOLLOW), with /proc's links taken as the command's. *out gets the
// object (O_PATH).
int Resolve(Ctx* c, int base, const std::string& path, bool follow_last, Fd* out) {
  if (path.empty()) return -ENOENT;
  Fd cur;
  // The canonical path of cur, kept only for the names of deny-read directories (HiddenLookup).
  std::string where;
  const bool names = c->r.names.enabled;
  if (path[0] == '/') {
    if (int e = OpenRoot(&cur)) return e;
    where = "/";
  } else {
    cur.Reset(fcntl(base, F_DUPFD_CLOEXEC, 0));
    if (cur.fd < 0) return -errno;
    struct stat bs;
    if (names) where = fstat(cur.fd, &bs) == 0 ? nargs::PathOf(cur.fd, bs) : "?";  // "?": fail closed
  }
  std::vector<std::string> todo;
  nargs::PushPath(path, &todo);
  // A trailing slash: the last component must be a directory, and a link there is followed.
  bool slash = path.back() == '/';
  if (todo.empty()) {  // "/" or "///"
    out->Reset(cur.Release());
    return 0;
  }
  int links = 0;
  while (!todo.empty()) {
    const std::string name = todo.back();
    todo.pop_back();
    const bool last = todo.empty();
    if (names && HiddenLookup(c->r.names, where, name)) return -ENOENT;
    Fd next(openat(cur.fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (next.fd < 0) return -errno;
    struct stat st;
    if (fstat(next.fd, &st) != 0) return -errno;
    if (!S_ISLNK(st.st_mode) || (last && !follow_last && !slash)) {
      if (last) {
        if (slash && !S_ISDIR(st.st_mode)) return -ENOTDIR;
        out->Reset(next.Release());
        return 0;
      }
      if (names) StepPath(&where, name);
      cur = std::move(next);
      continue;
    }
    if (++links > kMaxLinks) return -ELOOP;
    if (st.st_dev == c->r.proc_dev && IsProcRoot(c->r, cur.fd)) {
      // /proc's own links, the command's: self and thread-self name the caller.
      if (name == "self" || name == "thread-self") {
        const pid_t me = c->Tgid();
        if (me <= 0) return -ESRCH;
        std::string to = std::to_string(me);
        if (name == "thread-self") to += "/task/" + std::to_string(c->n.pid);
        nargs::PushPath(to, &todo);
        continue;
      }
    } else if (OnProc(next.fd)) {
      // A magic link (fd/N, cwd, root, exe, ns/...): a member's only, followed by the kernel.
      if (int e = JudgeProc(c, cur.fd)) return e;
      Fd to(openat(cur.fd, name.c_str(), O_PATH | O_CLOEXEC));
      if (to.fd < 0) return -errno;
      struct stat ts;
      if (names) where = fstat(to.fd, &ts) == 0 ? nargs::PathOf(to.fd, ts) : "?";
      if (last) {
        if (slash) {
          if (fstat(to.fd, &ts) != 0) return -errno;
          if (!S_ISDIR(ts.st_mode)) return -ENOTDIR;
        }
        out->Reset(to.Release());
        return 0;
      }
      cur = std::move(to);
      continue;
    }
    // An ordinary link (and /proc/mounts, /proc/net): read, and go on from its directory.
    std::string target;
    if (int e = nargs::ReadLinkOf(next.fd, &target)) return e;
    if (target[0] == '/') {
      if (int e = OpenRoot(&cur)) return e;
      where = "/";
    }
    if (last && target.back() == '/') slash = true;
    nargs::PushPath(target, &todo);
    if (todo.empty()) {  // a link to "/""
      out->Reset(cur.Release());
      return 0;
    }
  }
  out->Reset(cur.Release());
  return 0;
}

// Steps 3 and 4: a new fd of ours for the command, or -errno (kAnsweredLater: a FIFO's waiter
// answers, later::WaitForWriter: it never waits for a writer here).
int OpenResolved(Ctx* c, Fd* obj, int flags, Fd* out) {
  struct stat st;
  if (fstat(obj->fd, &st) != 0) return -errno;
  const bool proc = OnProc(obj->fd);
  if (proc) {
    if (int e = JudgeProc(c, obj->fd)) return e;
  }
  if ((flags & O_DIRECTORY) && !S_ISDIR(st.st_mode)) return -ENOTDIR;
  if (S_ISLNK(st.st_mode)) return -ELOOP;  // O_NOFOLLOW on a link
  // Never our controlling terminal by accident; the rest are the command's own flags.
  int f = (flags & ~(O_NOFOLLOW | O_CLOEXEC | O_CREAT | O_EXCL | O_TRUNC)) | O_NOCTTY | O_CLOEXEC;
  if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(5, 0)) return -ENXIO;  // /dev/tty: the host's here
  // A named FIFO only: an anonymous pipe (/dev/fd/N of bash's <(...)) never waits for a partner.
  const bool fifo = S_ISFIFO(st.st_mode) && (flags & O_NONBLOCK) == 0 && !OnPipefs(obj->fd);
  if (fifo) f |= O_NONBLOCK;  // never wait here for a writer
  int fd;
  if (proc) {
    const nargs::FdName p(obj->fd);
    fd = open(p, f);
    if (fd < 0) fd = -errno;
  } else {
    if (!c->r.opener) return -EACCES;
    fd = c->r.opener->Open(obj->fd, f);
  }
  if (fd < 0) return fd;
  if (fifo && later::WaitForWriter(c->r.fifo_waiters, c->listener, c->n.id, fd, (flags & O_CLOEXEC) != 0)) return kAnsweredLater;
  // No waiter could be started: the fd as it is, made blocking (a read before a writer came
  // sees end-of-file).
  if (fifo) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  out->Reset(fd);
  return 0;
}

}  // namespace

bool IsProcRootDir(const ReadRules& rules, const struct stat& st) noexcept {
  return rules.enabled && S_ISDIR(st.st_mode) && st.st_dev == rules.proc_dev && st.st_ino == 1;
}

long FilterProcListing(int listener, const SeccompNotif& n, const ReadRules& rules, char* buf, long len) noexcept {
  Ctx c{listener, n, rules};
  long out = 0;
  for (long at = 0; at < len;) {
    uint16_t reclen;
    memcpy(&reclen, buf + at + 16, 2);  // struct linux_dirent64: ino, off, reclen, type, name
    if (reclen < 20 || at + reclen > len) return out;
    const char* name = buf + at + 19;
    const std::string nm(name, strnlen(name, reclen - 19));
    bool keep = true;
    if (AllDigits(nm)) {
      // The root lists thread-group leaders only: a process id.
      const long id = strtol(nm.c_str(), nullptr, 10);
      const pid_t me = c.Tgid();
      keep = me > 0 && id > 0 && id <= INT32_MAX && (id == me || ProcessIsMember(static_cast<pid_t>(id), rules.members) == 1);
    }
    if (keep) {
      if (out != at) memmove(buf + out, buf + at, reclen);
      out += reclen;
    }
    at += reclen;
  }
  return out;
}

bool IsReadCall(const SeccompNotif& n) noexcept {
  const int nr = n.data.nr;
  int flags;
  if (nr == __NR_openat) flags = ArgInt(n, 2);
  else if (kNrOpen >= 0 && nr == kNrOpen) flags = ArgInt(n, 1);
  else return false;
  return (flags & (kWriteOpenFlags | O_PATH)) == 0;
}

void HandleRead(int listener, const SeccompNotif& n, const ReadRules& r) noexcept {
  const bool at = n.data.nr == __NR_openat;
  const int flags = ArgInt(n, at ? 2 : 1);
  const int dirfd = at ? ArgInt(n, 0) : AT_FDCWD;
  std::string path;
  // Step 1: the copies.
  if (int e = nargs::ReadString(n.pid, n.data.args[at ? 1 : 0], &path, PATH_MAX, -ENAMETOOLONG)) {
    notify::Respond(listener, n.id, e);
    return;
  }
  if (path.empty()) {
    notify::Respond(listener, n.id, -ENOENT);
    return;
  }
  Fd base;
  if (path[0] != '/') {
    int e;
    if (dirfd == AT_FDCWD) {
      e = nargs::StartAt(n, -1, AT_FDCWD, path, &base);
    } else {
      Fd pidfd;
      if (task::Way() != task::Access::kProcfs) pidfd.Reset(notify::PidfdFor(listener, n));
      e = (task::Way() != task::Access::kProcfs && pidfd.fd < 0) ? -EACCES : nargs::GetFd(pidfd.fd, n.pid, dirfd, &base);
    }
    if (e != 0) {
      notify::Respond(listener, n.id, e);
      return;
    }
  }
  if (!notify::IdValid(listener, n.id)) return;
  Ctx c{listener, n, r};
  Fd give;
  int rc;
  {
    // Steps 2-4, for the command's credentials.
    EffectiveCapsCleared lowered;
    if (!lowered.ok()) {
      rc = -EPERM;
    } else {
      Fd obj;
      rc = Resolve(&c, base.fd, path, (flags & O_NOFOLLOW) == 0, &obj);
      if (rc == 0) rc = OpenResolved(&c, &obj, flags, &give);
    }
  }
  if (rc == kAnsweredLater) return;
  if (rc == 0) {
    AnswerWithFd(listener, n.id, give.fd, (flags & O_CLOEXEC) != 0);
    return;
  }
  notify::Respond(listener, n.id, rc);
}

}  // namespace psb
