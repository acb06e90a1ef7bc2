// native.lockPlaceholder / releasePlaceholder / removeLookalike: the host-side life of the
// placeholders isolated mode binds over missing protected names (lib/platform/linux.ts
// claimPlaceholders). Tests: test/linux/plan-safety.test.ts, test/linux/host-safety.test.ts,
// test/linux/protected-names-content.test.ts.
#include <errno.h>
#include <fcntl.h>
#include <napi.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "binding_linux.h"
#include "syscall_numbers.h"

namespace psb {
namespace {

// The parent directory of `path` (O_PATH), opened without following a symlink anywhere on the
// way, and its last component; -errno on failure (-ELOOP: a link on the way). Placeholder paths
// are canonical (the policy's paths were resolved with realpath), so a link on the way now is a
// command's doing: it can replace a directory it may write (ws/tools) with a link to anywhere,
// and a removal by path would then delete the entry of the same name there, outside the sandbox.
// Removals go through this fd (fstatat/unlinkat), so the name is looked up only where planned.
int OpenParentNoFollow(const std::string& path, std::string* name) {
  size_t slash = path.find_last_of('/');
  if (path.empty() || path[0] != '/' || slash + 1 >= path.size()) return -EINVAL;
  *name = path.substr(slash + 1);
  std::string parent = slash == 0 ? "/" : path.substr(0, slash);
  struct {
    uint64_t flags, mode, resolve;
  } how = {O_PATH | O_DIRECTORY | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */ | 0x02 /* RESOLVE_NO_MAGICLINKS */};
  long fd = syscall(__NR_openat2, AT_FDCWD, parent.c_str(), &how, sizeof how);
  return fd < 0 ? -errno : static_cast<int>(fd);
}

// unlinkat(dir, name) for a placeholder made inside another placeholder directory. Init makes
// them with its capabilities in the sandbox's user namespace, so a run that relies on a directory
// another run made on the way (.claude for .claude/commands) can make its own inside that run's
// empty 0555 directory; an unprivileged host then has no write permission there to remove them,
// and they were left behind for good. Only when the parent itself looks like one of ours (a 0555
// directory the host owns) is it made writable for the one removal and put back: a run that binds
// it keeps its read-only mount throughout, so no command can create in it meanwhile.
int UnlinkInPlaceholder(int dir, const std::string& name, int flags) {
  if (unlinkat(dir, name.c_str(), flags) == 0) return 0;
  const int e = errno;
  struct stat p;
  if (e != EACCES || fstat(dir, &p) != 0 || !S_ISDIR(p.st_mode) || (p.st_mode & 07777) != 0555 || p.st_uid != geteuid()) return -e;
  // dir is O_PATH (no fchmod): its /proc/self/fd link names the same directory (the JS thread's table).
  const std::string self = "/proc/self/fd/" + std::to_string(dir);
  if (chmod(self.c_str(), 0755) != 0) return -e;
  const int r = unlinkat(dir, name.c_str(), flags) == 0 ? 0 : -errno;
  chmod(self.c_str(), 0555);
  return r;
}

}  // namespace

// native.lockPlaceholder(path) -> fd (holding a shared flock) or -errno.
// Placeholders for missing protected paths live on the host while runs use them; every run that
// relies on one holds a shared lock on it, across processes, so that no run removes it from under
// another (which would detach that run's bind and let it create the path for real).
Napi::Value LockPlaceholderJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "Usage: native.lockPlaceholder(path)");
  std::string path = info[0].As<Napi::String>().Utf8Value();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return Napi::Number::New(env, -errno);
  // Never a blocking flock on the JS thread: the placeholder is visible inside the sandbox, so a
  // command can flock(LOCK_EX) it and hold it for as long as it runs. A host run that releases a
  // placeholder holds LOCK_EX only for an fstat+rmdir, so a few short retries ride that out; a
  // lock still held after them is someone else's, and the caller fails the spawn (-EWOULDBLOCK)
  // instead of freezing the event loop.
  constexpr int kTries = 10;
  const struct timespec kPause = {0, 2 * 1000 * 1000};  // 2 ms: at most ~20 ms in all
  int r = -1;
  for (int i = 0; i < kTries; ++i) {
    r = flock(fd, LOCK_SH | LOCK_NB);
    if (r == 0 || errno != EWOULDBLOCK) break;
    if (i + 1 < kTries) nanosleep(&kPause, nullptr);
  }
  if (r < 0) {
    int e = errno;
    close(fd);
    return Napi::Number::New(env, -e);
  }
  return Napi::Number::New(env, fd);
}

// native.releasePlaceholder(fd, path, remove) -> true when it removed the placeholder. Removal
// happens only if no other run holds it (LOCK_EX succeeds) and `path`, looked up without
// following a link on the way (OpenParentNoFollow), is still the same inode.
// The fd is unlocked and closed either way: after a removal on the thread pool (CloseOnPool),
// otherwise at once (a shared lock kept a moment longer would make another run's release fail
// and leave the placeholder behind).
Napi::Value ReleasePlaceholderJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsNumber() || !info[1].IsString() || !info[2].IsBoolean()) {
    throw Napi::TypeError::New(env, "Usage: native.releasePlaceholder(fd, path, remove)");
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  std::string path = info[1].As<Napi::String>().Utf8Value();
  bool removed = false;
  if (info[2].As<Napi::Boolean>().Value() && flock(fd, LOCK_EX | LOCK_NB) == 0) {
    std::string name;
    int dir = OpenParentNoFollow(path, &name);
    struct stat a, b;
    if (dir >= 0 && fstat(fd, &a) == 0 && fstatat(dir, name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev) {
      removed = UnlinkInPlaceholder(dir, name, S_ISDIR(b.st_mode) ? AT_REMOVEDIR : 0) == 0;
    }
    if (dir >= 0) close(dir);
  }
  // Unlocked before the close: the lock belongs to the open file, and a copy of this fd in
  // another table (a supervision's serving task still emptying the copy of the host's table it
  // was cloned with, a child between fork and exec) would otherwise keep it held after the close,
  // and another run's release would then fail and leave the placeholder behind.
  flock(fd, LOCK_UN);
  if (removed) CloseOnPool(env, fd);
  else close(fd);
  return Napi::Boolean::New(env, removed);
}

// native.removeLookalike(path) -> 0, or -errno: removes what is at `path` only while it still
// looks like a placeholder (an empty 0555 directory: rmdir takes only an empty one; an empty 0444
// regular file), looked up without following a link on the way (OpenParentNoFollow). For a
// lookalike whose lock a command holds (lib/platform/linux.ts claimPlaceholders): the command
// can also swap what is on the way between the host's look and its removal.
Napi::Value RemoveLookalikeJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "Usage: native.removeLookalike(path)");
  std::string path = info[0].As<Napi::String>().Utf8Value();
  std::string name;
  int dir = OpenParentNoFollow(path, &name);
  if (dir < 0) return Napi::Number::New(env, dir);
  struct stat st;
  int r = 0;
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    r = -errno;
  } else if (S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0555) {
    r = unlinkat(dir, name.c_str(), AT_REMOVEDIR) == 0 ? 0 : -errno;
  } else if (S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0444 && st.st_size == 0) {
    r = unlinkat(dir, name.c_str(), 0) == 0 ? 0 : -errno;
  } else {
    r = -EEXIST;  // no longer a lookalike: left alone
  }
  close(dir);
  return Napi::Number::New(env, r);
}

}  // namespace psb
