// Host-side tree walks (tree_walk.h).
// Tests: test/linux/host-safety.test.ts (HS-11 hostile temp trees removed, HS-12/13
// limits.tmpBytes).
#include "tree_walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <napi.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <unordered_set>
#include <utility>
#include <vector>

namespace psb {
namespace {

struct Entry {
  std::string name;
  ino_t ino;
};

// One directory on the way down. Only the deepest one has an fd open; the names of the others
// are kept (a batch at a time) so that coming back up needs no new listing.
struct Level {
  dev_t dev;
  ino_t ino;
  std::string name;  // in the level above
  std::vector<Entry> entries;
  size_t next = 0;
  bool more = false;  // the listing stopped at `limit` names
};

using Skip = std::set<std::pair<dev_t, ino_t>>;

// Lists up to `limit` names of directory `fd` (not . and ..) into `lv`, leaving out `skip`'s.
bool List(int fd, size_t limit, const Skip* skip, Level* lv) {
  lv->entries.clear();
  lv->next = 0;
  lv->more = false;
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (d < 0) return false;
  DIR* dir = fdopendir(d);
  if (dir == nullptr) {
    close(d);
    return false;
  }
  rewinddir(dir);  // the dup shares the offset: always from the start
  errno = 0;
  while (struct dirent* e = readdir(dir)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (skip != nullptr && skip->count({lv->dev, e->d_ino}) > 0) continue;
    if (lv->entries.size() >= limit) {
      lv->more = true;
      break;
    }
    lv->entries.push_back({e->d_name, e->d_ino});
  }
  bool ok = errno == 0 || lv->more;
  closedir(dir);
  return ok;
}

// Gives directory `name` in `dirfd` mode 0700 without following a symlink: an O_PATH fd needs no
// permission on the directory itself, and chmod through /proc/self/fd/N changes the inode that fd
// holds. O_NOFOLLOW|O_DIRECTORY refuse a symlink, and fstat checks it is a directory, so the mode
// of whatever a symlink points to (a host file) is never touched.
void MakeOwnerAccessible(int dirfd, const char* name) {
  int p = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (p < 0) return;
  struct stat st;
  if (fstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
    char link[40];
    snprintf(link, sizeof link, "/proc/self/fd/%d", p);
    (void)chmod(link, 0700);
  }
  close(p);
}

// Opens directory `name` in `dirfd` for listing, never through a symlink, and checks it is the
// inode fstatat saw. With `fix`, a directory the uid cannot read is made 0700 first, and one it
// cannot write or search gets u+rwx (to remove what is in it). Returns the fd or -errno.
int OpenDir(int dirfd, const char* name, const struct stat& seen, bool fix) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES && fix) {
    MakeOwnerAccessible(dirfd, name);
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) return -errno;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_dev != seen.st_dev || st.st_ino != seen.st_ino) {
    close(fd);
    return -ESTALE;
  }
  if (fix && (st.st_mode & 0700) != 0700) (void)fchmod(fd, (st.st_mode & 07777) | 0700);
  return fd;
}

// The parent of directory `fd`, checked to be the directory `up` we came down from (nothing
// should move the tree: the command is gone, or, while measuring, the next walk starts again).
int OpenParent(int fd, const Level& up) {
  int p = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (p < 0) return -errno;
  struct stat st;
  if (fstat(p, &st) != 0 || st.st_dev != up.dev || st.st_ino != up.ino) {
    close(p);
    return -ESTALE;
  }
  return p;
}

std::string PathOf(const std::vector<Level>& stack, const std::string& last) {
  std::string p;
  for (size_t i = 1; i < stack.size(); ++i) p += stack[i].name + "/";
  p += last;
  if (p.size() > 200) p = "..." + p.substr(p.size() - 200);
  return p;
}

constexpr size_t kBatch = 4096;

#ifndef STATX_ATTR_MOUNT_ROOT
#define STATX_ATTR_MOUNT_ROOT 0x00002000
#endif

// Whether directory `name` in `dirfd` is a mount point. A bind mount of the same filesystem has
// the same st_dev, and walking into one would remove (or count) the contents of its source.
// Kernels before 5.8 do not say: then only a different st_dev stops the walk.
bool IsMountRoot(int dirfd, const char* name) {
  struct statx stx;
  if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, 0, &stx) != 0) return false;
  return (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

}  // namespace

void RemoveTree(const char* parent, const char* name, TreeRemoval* out) {
  auto fail = [out](int e, const std::string& where) {
    if (out->first_errno == 0) {
      out->first_errno = e;
      out->first_path = where;
    }
    out->left++;
  };
  int top = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (top < 0) return fail(errno, "");
  // The common case: the command left its TMPDIR empty.
  struct stat st;
  if (unlinkat(top, name, AT_REMOVEDIR) == 0 || errno == ENOENT || fstatat(top, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    close(top);
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(top, name, 0) != 0 && errno != ENOENT) fail(errno, "");
    close(top);
    return;
  }
  int fd = OpenDir(top, name, st, true);
  if (fd < 0) {
    fail(-fd, "");
    close(top);
    return;
  }
  Skip skip;  // what could not be removed: left out of later listings, so the walk ends
  std::vector<Level> stack;
  stack.push_back({st.st_dev, st.st_ino, name, {}, 0, false});
  if (!List(fd, kBatch, &skip, &stack.back())) fail(errno, "");
  while (!stack.empty()) {
    Level& lv = stack.back();
    if (lv.next < lv.entries.size()) {
      const Entry e = lv.entries[lv.next++];
      const dev_t dev = lv.dev;
      struct stat cst;
      if (fstatat(fd, e.name.c_str(), &cst, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) {
          fail(errno, PathOf(stack, e.name));
          skip.insert({dev, e.ino});
        }
        continue;
      }
      // Symlinks, files, fifos, sockets: the name goes; nothing it points to is touched.
      if (!S_ISDIR(cst.st_mode)) {
        if (unlinkat(fd, e.name.c_str(), 0) != 0 && errno != ENOENT) {
          fail(errno, PathOf(stack, e.name));
          skip.insert({dev, e.ino});
        }
        continue;
      }
      if (unlinkat(fd, e.name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) continue;
      int child = cst.st_dev != dev || IsMountRoot(fd, e.name.c_str()) ? -EXDEV : OpenDir(fd, e.name.c_str(), cst, true);
      if (child < 0) {
        fail(-child, PathOf(stack, e.name));
        skip.insert({dev, e.ino});
        continue;
      }
      close(fd);
      fd = child;
      stack.push_back({cst.st_dev, cst.st_ino, e.name, {}, 0, false});
      if (!List(fd, kBatch, &skip, &stack.back())) fail(errno, PathOf(stack, ""));
      continue;
    }
    if (lv.more && List(fd, kBatch, &skip, &lv) && !lv.entries.empty()) continue;
    // Everything below this directory is done: go up and remove it.
    Level done = std::move(stack.back());
    stack.pop_back();
    int up = stack.empty() ? top : OpenParent(fd, stack.back());
    close(fd);
    fd = -1;
    if (up < 0) {
      fail(-up, PathOf(stack, done.name));
      break;
    }
    fd = up;
    if (unlinkat(fd, done.name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      fail(errno, stack.empty() ? "" : PathOf(stack, done.name));
      if (!stack.empty()) skip.insert({stack.back().dev, done.ino});
    }
  }
  if (fd >= 0 && fd != top) close(fd);
  close(top);
}

// Measuring gives an unreadable directory u+rwx, as removal does: the tree is this run's own
// TMPDIR, and a command that made part of it unreadable (chmod 000, the top included) would
// otherwise hide what it holds from the check. Only directories below the host's own dir are
// touched, never through a symlink (MakeOwnerAccessible, OpenDir).
void MeasureTree(const char* path, uint64_t max_inodes, uint64_t max_bytes, TreeUsage* out) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES) {
    std::string p(path);
    size_t slash = p.find_last_of('/');
    if (slash != std::string::npos && slash + 1 < p.size()) {
      std::string parent = slash == 0 ? "/" : p.substr(0, slash);
      int pfd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (pfd >= 0) {
        MakeOwnerAccessible(pfd, p.c_str() + slash + 1);
        fd = openat(pfd, p.c_str() + slash + 1, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(pfd);
      }
    }
  }
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0) close(fd);
    out->unlisted++;
    return;
  }
  out->bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  out->inodes = 1;
  // A file with several links is counted once.
  std::unordered_set<ino_t> linked;
  auto over = [&] { return out->inodes > max_inodes || out->bytes > max_bytes; };
  std::vector<Level> stack;
  stack.push_back({st.st_dev, st.st_ino, "", {}, 0, false});
  // Measuring never lists more names than the limit has room for: past it the run is over.
  auto room = [&] { return static_cast<size_t>(max_inodes - out->inodes + 1); };
  if (!List(fd, room(), nullptr, &stack.back())) out->unlisted++;
  while (!stack.empty() && !over()) {
    Level& lv = stack.back();
    if (lv.next < lv.entries.size()) {
      const Entry e = lv.entries[lv.next++];
      struct stat cst;
      if (fstatat(fd, e.name.c_str(), &cst, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
      if (!S_ISDIR(cst.st_mode) && cst.st_nlink > 1 && !linked.insert(cst.st_ino).second) continue;
      out->inodes++;
      out->bytes += static_cast<uint64_t>(cst.st_blocks) * 512;
      if (!S_ISDIR(cst.st_mode) || cst.st_dev != lv.dev || IsMountRoot(fd, e.name.c_str())) continue;
      int child = OpenDir(fd, e.name.c_str(), cst, true);
      if (child < 0) {
        out->unlisted++;
        continue;
      }
      close(fd);
      fd = child;
      stack.push_back({cst.st_dev, cst.st_ino, e.name, {}, 0, false});
      if (!List(fd, room(), nullptr, &stack.back())) out->unlisted++;
      continue;
    }
    if (lv.more) {
      // More names than the limit has room for: over, whatever they hold.
      out->inodes = max_inodes + 1;
      break;
    }
    stack.pop_back();
    if (stack.empty()) break;
    int up = OpenParent(fd, stack.back());
    close(fd);
    fd = up;
    if (up < 0) {
      out->cut_short = true;
      break;
    }
  }
  if (fd >= 0) close(fd);
}

namespace {

Napi::Object RemovalObject(Napi::Env env, const TreeRemoval& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("left", Napi::Number::New(env, static_cast<double>(r.left)));
  o.Set("errno", Napi::Number::New(env, r.first_errno));
  o.Set("error", Napi::String::New(env, r.first_errno ? strerror(r.first_errno) : ""));
  o.Set("path", Napi::String::New(env, r.first_path));
  return o;
}

// native.removeTree(parent, name) -> { left, errno, error, path }; never throws for the tree.
Napi::Value RemoveTreeJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsString() || !info[1].IsString()) throw Napi::TypeError::New(env, "Usage: native.removeTree(parent, name)");
  std::string parent = info[0].As<Napi::String>().Utf8Value();
  std::string name = info[1].As<Napi::String>().Utf8Value();
  TreeRemoval r;
  RemoveTree(parent.c_str(), name.c_str(), &r);
  return RemovalObject(env, r);
}

class RemoveWorker : public Napi::AsyncWorker {
 public:
  RemoveWorker(Napi::Function cb, std::string parent, std::string name)
      : Napi::AsyncWorker(cb, "psb:removeTree"), parent_(std::move(parent)), name_(std::move(name)) {}
  void Execute() override {
    RemoveTree(parent_.c_str(), name_.c_str(), &r_);
    // A second pass for what the first left (a listing that moved under it).
    if (r_.left > 0) {
      r_ = TreeRemoval();
      RemoveTree(parent_.c_str(), name_.c_str(), &r_);
    }
  }
  void OnOK() override { Callback().Call({RemovalObject(Env(), r_)}); }

 private:
  std::string parent_;
  std::string name_;
  TreeRemoval r_;
};

// native.removeTreeAsync(parent, name, done(result)): removeTree (two passes) on the thread pool.
Napi::Value RemoveTreeAsyncJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsString() || !info[1].IsString() || !info[2].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.removeTreeAsync(parent, name, done)");
  }
  (new RemoveWorker(info[2].As<Napi::Function>(), info[0].As<Napi::String>().Utf8Value(), info[1].As<Napi::String>().Utf8Value()))->Queue();
  return env.Undefined();
}

class MeasureWorker : public Napi::AsyncWorker {
 public:
  MeasureWorker(Napi::Function cb, std::string path, uint64_t max_inodes, uint64_t max_bytes)
      : Napi::AsyncWorker(cb, "psb:measureTree"), path_(std::move(path)), max_inodes_(max_inodes), max_bytes_(max_bytes) {}
  void Execute() override { MeasureTree(path_.c_str(), max_inodes_, max_bytes_, &usage_); }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("bytes", Napi::Number::New(env, static_cast<double>(usage_.bytes)));
    o.Set("inodes", Napi::Number::New(env, static_cast<double>(usage_.inodes)));
    o.Set("unlisted", Napi::Number::New(env, static_cast<double>(usage_.unlisted)));
    o.Set("cutShort", Napi::Boolean::New(env, usage_.cut_short));
    Callback().Call({o});
  }

 private:
  std::string path_;
  uint64_t max_inodes_;
  uint64_t max_bytes_;
  TreeUsage usage_;
};

// native.measureTree(path, maxInodes, maxBytes, done({ bytes, inodes, unlisted, cutShort })), on
// the thread pool.
Napi::Value MeasureTreeJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 4 || !info[0].IsString() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsFunction()) {
    throw Napi::TypeError::New(env, "Usage: native.measureTree(path, maxInodes, maxBytes, done)");
  }
  auto n = [](const Napi::Value& v) {
    double d = v.As<Napi::Number>().DoubleValue();
    return d <= 0 ? 0 : d >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(d);
  };
  (new MeasureWorker(info[3].As<Napi::Function>(), info[0].As<Napi::String>().Utf8Value(), n(info[1]), n(info[2])))->Queue();
  return env.Undefined();
}

}  // namespace

void RegisterTreeWalk(Napi::Env env, Napi::Object exports) {
  exports.Set("removeTree", Napi::Function::New(env, RemoveTreeJs, "removeTree"));
  exports.Set("removeTreeAsync", Napi::Function::New(env, RemoveTreeAsyncJs, "removeTreeAsync"));
  exports.Set("measureTree", Napi::Function::New(env, MeasureTreeJs, "measureTree"));
}

}  // namespace psb
