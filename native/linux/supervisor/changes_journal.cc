// Landlock mode's changes journal (see changes_journal.h; the format is lib/changes/journal.ts's).
// Tests: test/changes/record-landlock.test.ts (test/changes/journal.test.ts checks the format in TS
// only).
#include "changes_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <utility>

#include "notify_args.h"

namespace psb {
namespace changes {
namespace {

using nargs::Fd;
using nargs::Under;

std::string Hex(const std::string& s) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string Oct(unsigned long v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lo", v);
  return buf;
}

// The object: `name` in the pinned directory dirfd, or (name null) dirfd itself.
int StatOf(int dirfd, const char* name, struct stat* st) {
  const int rc = name != nullptr ? fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) : fstat(dirfd, st);
  return rc == 0 ? 0 : -errno;
}

int OpenForCopy(int dirfd, const char* name) {
  int fd;
  if (name != nullptr) {
    fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } else {
    const nargs::FdName proc(dirfd);
    fd = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  }
  return fd >= 0 ? fd : -errno;
}

// Copies src into dst: a reflink where the file system can, else copy_file_range, else read and
// write. Returns the bytes copied or -errno. Reads to the end (the size may have changed).
long long CopyAll(int src, int dst, uint64_t limit) {
  struct stat st;
  if (ioctl(dst, FICLONE, src) == 0) return fstat(dst, &st) == 0 ? static_cast<long long>(st.st_size) : -EIO;
  long long done = 0;
  bool plain = false;
  char buf[65536];
  for (;;) {
    if (limit != 0 && static_cast<uint64_t>(done) > limit) return -ENOSPC;
    ssize_t n;
    if (!plain) {
      n = copy_file_range(src, nullptr, dst, nullptr, 1 << 30, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP || errno == EBADF) && done == 0) {
        plain = true;
        continue;
      }
    } else {
      n = read(src, buf, sizeof buf);
      for (ssize_t off = 0; n > 0 && off < n;) {
        const ssize_t w = write(dst, buf + off, static_cast<size_t>(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -EIO;
        off += w;
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) return done;
    done += n;
  }
}

std::mutex g_registry_mu;
std::map<std::string, std::shared_ptr<Journal>>& Registry() {
  static auto* r = new std::map<std::string, std::shared_ptr<Journal>>();
  return *r;
}

}  // namespace

Journal::Journal(int journal_fd, int files_fd, std::vector<std::string> roots, std::vector<std::string> exclude, uint64_t max_bytes)
    : journal_fd_(journal_fd), files_fd_(files_fd), roots_(std::move(roots)), exclude_(std::move(exclude)), max_bytes_(max_bytes) {}

std::shared_ptr<Journal> Journal::Open(const std::string& dir, std::vector<std::string> roots, std::vector<std::string> exclude,
                                       uint64_t max_bytes) {
  const int j = open((dir + "/journal").c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (j < 0) return nullptr;
  const int f = open((dir + "/files").c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (f < 0) {
    const int e = errno;
    close(j);
    errno = e;
    return nullptr;
  }
  return std::make_shared<Journal>(j, f, std::move(roots), std::move(exclude), max_bytes);
}

bool Journal::Records(const std::string& path) const {
  for (const std::string& x : exclude_) {
    if (Under(path, x)) return false;
  }
  for (const std::string& r : roots_) {
    if (Under(path, r)) return true;
  }
  return false;
}

void Journal::MoveSeen(const std::string& from, const std::string& to, bool is_dir) {
  // Neither name is covered after a rename: undoing it needs the object at `to` as the rename
  // left it, so a later change to `to` (or a new object at `from`) is recorded, never skipped
  // (git's gc.pid.lock -> gc.pid, then unlink gc.pid). Entries below a renamed directory keep
  // their status: moving the directory back does not depend on them.
  seen_.erase(to);
  seen_.erase(from);
  if (!is_dir) return;
  // The directory's entries moved with it: what was known under `to` is gone, and what was known
  // under `from` is now under `to`.
  std::vector<std::string> moved;
  for (auto it = seen_.begin(); it != seen_.end();) {
    const bool under_to = it->size() > to.size() && Under(*it, to);
    const bool under_from = it->size() > from.size() && Under(*it, from);
    if (under_from) moved.push_back(to + it->substr(from.size()));
    it = under_to || under_from ? seen_.erase(it) : std::next(it);
  }
  for (std::string& p : moved) seen_.insert(std::move(p));
}

Journal::Step::Step(Journal* j) : j_(j) {
  if (j_ != nullptr) lock_ = std::unique_lock<std::mutex>(j_->mu_);
}

Journal::Step::~Step() {
  // Not Done(0): the call failed or never ran; its copies are not needed.
  for (const std::string& c : copies_) unlinkat(j_->files_fd_, c.c_str(), 0);
}

int Journal::Step::Save(const std::string& path, int dirfd, const char* name, const struct stat& st) {
  const uint64_t max = j_->max_bytes_;
  const uint64_t used = j_->bytes_ + bytes_;
  if (max != 0 && (used > max || static_cast<uint64_t>(st.st_size) > max - used)) return -ENOSPC;
  Fd src(OpenForCopy(dirfd, name));
  if (src.fd < 0) return src.fd == -ELOOP ? -EAGAIN : src.fd;
  struct stat now;
  if (fstat(src.fd, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) return -EAGAIN;
  const std::string copy = std::to_string(j_->next_copy_++);
  Fd dst(openat(j_->files_fd_, copy.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (dst.fd < 0) return -EIO;
  copies_.push_back(copy);
  const long long got = CopyAll(src.fd, dst.fd, max == 0 ? 0 : max - used);
  if (got < 0) return got == -ENOSPC ? -ENOSPC : -EIO;
  if (max != 0 && static_cast<uint64_t>(got) > max - used) return -ENOSPC;
  bytes_ += static_cast<uint64_t>(got);
  lines_ += "save " + Hex(path) + " " + copy + " " + Oct(st.st_mode & 07777) + "\n";
  return 0;
}

int Journal::Step::Before(const std::string& path, int dirfd, const char* name) {
  if (j_ == nullptr) return 0;
  if (j_->closed_) return -EIO;
  // A location the kernel could not give (deeper than PATH_MAX): whether it is recorded is unknown.
  if (path.empty() || path[0] != '/') return -ENAMETOOLONG;
  if (!j_->Records(path)) return 0;
  struct stat st;
  const int found = StatOf(dirfd, name, &st);
  if (found != 0 && found != -ENOENT) return found;
  // A file with another name shares its bytes with that name: saved each time (journal.ts).
  const bool shared = found == 0 && S_ISREG(st.st_mode) && st.st_nlink > 1;
  if (!shared && j_->seen_.count(path) != 0) return 0;
  for (const std::string& p : seen_add_) {
    if (p == path) return 0;
  }
  if (found == -ENOENT) {
    lines_ += "absent " + Hex(path) + "\n";
  } else if (S_ISREG(st.st_mode)) {
    if (int e = Save(path, dirfd, name, st)) return e;
  } else if (S_ISLNK(st.st_mode)) {
    char buf[PATH_MAX];
    const ssize_t len = readlinkat(dirfd, name != nullptr ? name : "", buf, sizeof buf);
    if (len < 0 || len >= static_cast<ssize_t>(sizeof buf)) return -EIO;
    lines_ += "symlink " + Hex(path) + " " + Hex(std::string(buf, static_cast<size_t>(len))) + "\n";
  } else if (S_ISDIR(st.st_mode)) {
    lines_ += "dir " + Hex(path) + " " + Oct(st.st_mode & 07777) + "\n";
  } else if (S_ISFIFO(st.st_mode)) {
    lines_ += "other " + Hex(path) + " " + Oct(st.st_mode) + " " + std::to_string(st.st_rdev) + "\n";
  } else {
    // A socket or device node made before the run cannot be put back by revert: left alone.
    return -EPERM;
  }
  seen_add_.push_back(path);
  return 0;
}

int Journal::Step::Mode(const std::string& path, const struct stat& st) {
  if (j_ == nullptr) return 0;
  if (j_->closed_) return -EIO;
  if (path.empty() || path[0] != '/') return path.empty() ? 0 : -ENAMETOOLONG;
  if (!j_->Records(path)) return 0;
  const bool shared = S_ISREG(st.st_mode) && st.st_nlink > 1;
  if (!shared && j_->seen_.count(path) != 0) return 0;
  lines_ += "mode " + Hex(path) + " " + Oct(st.st_mode & 07777) + "\n";
  return 0;
}

int Journal::Step::Rename(const std::string& from, int from_dir, const char* from_name, const std::string& to, int to_dir,
                          const char* to_name) {
  if (j_ == nullptr) return 0;
  if (j_->closed_) return -EIO;
  if (from.empty() || from[0] != '/' || to.empty() || to[0] != '/') return -ENAMETOOLONG;
  const bool in_from = j_->Records(from), in_to = j_->Records(to);
  if (in_to) {
    if (int e = Before(to, to_dir, to_name)) return e;
  }
  if (in_from && !in_to) return Before(from, from_dir, from_name);  // leaves the roots: a removal
  if (in_from && in_to) {
    struct stat st;
    rename_ = true;
    from_ = from;
    to_ = to;
    dir_rename_ = StatOf(from_dir, from_name, &st) == 0 && S_ISDIR(st.st_mode);
  }
  return 0;  // (enters the roots: `to` was recorded as what it was, the object is new there)
}

int Journal::Step::Done(long rc) {
  if (j_ == nullptr) return 0;
  if (rc != 0) return 0;  // the destructor removes the copies
  if (rename_) lines_ += "rename " + Hex(from_) + " " + Hex(to_) + "\n";
  if (!lines_.empty()) {
    // One write on an O_APPEND fd: the call's records land whole, or not at all.
    const ssize_t w = write(j_->journal_fd_, lines_.data(), lines_.size());
    if (w != static_cast<ssize_t>(lines_.size())) {
      // The call was carried out and could not be recorded: every later call fails, and the
      // host reports the journal incomplete (closeChangesJournal).
      j_->closed_ = true;
      j_->broken_ = true;
      return -EIO;
    }
  }
  copies_.clear();
  j_->bytes_ += bytes_;
  for (std::string& p : seen_add_) j_->seen_.insert(std::move(p));
  if (rename_) j_->MoveSeen(from_, to_, dir_rename_);
  return 0;
}

void Register(const std::shared_ptr<Journal>& j, const std::string& dir) {
  std::lock_guard<std::mutex> hold(g_registry_mu);
  Registry()[dir] = j;
}

int CloseByDir(const std::string& dir) {
  std::shared_ptr<Journal> j;
  {
    std::lock_guard<std::mutex> hold(g_registry_mu);
    auto& r = Registry();
    auto it = r.find(dir);
    if (it == r.end()) return 0;
    j = std::move(it->second);
    r.erase(it);
  }
  std::lock_guard<std::mutex> hold(j->mu_);
  j->closed_ = true;
  // The host's copies (a supervisor thread with an fd table of its own keeps its copies until it
  // ends; every call there is refused from now on).
  close(j->journal_fd_);
  close(j->files_fd_);
  return j->broken_ ? -1 : 1;
}

}  // namespace changes
}  // namespace psb
