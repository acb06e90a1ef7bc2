// Landlock mode's `changes: 'record'`: the path and metadata supervisors already carry out every
// write-open, create, rename, removal, link, truncate and chmod of the command themselves
// (supervise_paths.cc, metadata_supervisor.cc). With a journal, each such call on a name inside
// the recorded roots first saves what it is about to change (a regular file's bytes, a symlink's
// target, a directory's mode, or that nothing was there), carries the call out, and appends the
// record after the call succeeded. The host lists and reverts the changes from the journal
// (lib/changes/journal.ts, which documents the format; this file writes the same lines).
//
// Every step of one call runs under the journal's lock, the call itself included, so a record
// never describes a state another call changed in between, and Close() (the host, when the
// sandbox ended) waits for a call in progress: after it, every call fails (EIO), never unrecorded.
// The journal file and files/ are opened once, on the host's thread before the supervisor thread
// starts (O_CLOEXEC: the command never has them): a supervisor thread with an fd table of its own
// gets copies. CloseByDir closes the host's; a later call (on either copy) is refused under the
// lock first, so a number the host reuses is never written to.
//
// Kernel features: FICLONE (a reflink, where the file system has it), else copy_file_range, else
// read and write. Nothing else beyond what the supervisors need.
// Tests: see changes_journal.cc.
#pragma once

#include <stdint.h>
#include <sys/stat.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace psb {
namespace changes {

class Journal {
 public:
  // dir: the journal directory (made by the host, 0700, with files/ and journal in it). roots:
  // canonical paths whose changes are recorded (the policy's writable roots; not the private
  // TMPDIR). max_bytes: bound on the saved copies' bytes (0: none).
  // Opens dir/journal (append) and dir/files; null with errno set when they cannot be opened.
  // exclude: paths below the roots that are not recorded (the run's private TMPDIR).
  static std::shared_ptr<Journal> Open(const std::string& dir, std::vector<std::string> roots, std::vector<std::string> exclude,
                                       uint64_t max_bytes);
  Journal(int journal_fd, int files_fd, std::vector<std::string> roots, std::vector<std::string> exclude, uint64_t max_bytes);

  // Whether `path` (canonical, absolute) is recorded.
  bool Records(const std::string& path) const;

  // One supervised call: hold it from before the change until after it.
  class Step {
   public:
    explicit Step(Journal* j);
    ~Step();
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;
    // Before the call changes the name `name` in the pinned directory dirfd (its path `path`):
    // records what is there now unless a record covers it already. 0 or -errno (-ENOSPC past
    // max_bytes, -EIO once closed, -ENAMETOOLONG for a path the kernel could not give).
    int Before(const std::string& path, int dirfd, const char* name);
    // Before a chmod of the object pinned by fd.
    int Mode(const std::string& path, const struct stat& st);
    // Before a rename from -> to that was judged; renames that leave or enter the recorded roots
    // are recorded as a removal or a create.
    int Rename(const std::string& from, int from_dir, const char* from_name, const std::string& to, int to_dir, const char* to_name);
    // After the call: with rc == 0 the records are appended (one write) and kept; otherwise the
    // copies made for it are removed. Returns 0, or -EIO when the journal could not be written.
    int Done(long rc);

   private:
    int Save(const std::string& path, int dirfd, const char* name, const struct stat& st);
    Journal* j_;
    std::unique_lock<std::mutex> lock_;
    std::string lines_;
    std::vector<std::string> seen_add_;
    std::vector<std::string> copies_;
    uint64_t bytes_ = 0;
    bool rename_ = false;
    std::string from_, to_;
    bool dir_rename_ = false;
  };

 private:
  friend class Step;
  friend int CloseByDir(const std::string& dir);
  void MoveSeen(const std::string& from, const std::string& to, bool is_dir);

 public:
  // The journal file and the copies' directory, as opened by the host before the supervision
  // started (the supervision's own task keeps its copies of them: supervisor.cc Confine).
  std::vector<int> Fds() const { return {journal_fd_, files_fd_}; }

 private:
  std::mutex mu_;
  int journal_fd_, files_fd_;  // closed by CloseByDir (host side)
  const std::vector<std::string> roots_, exclude_;
  const uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  uint64_t next_copy_ = 0;
  bool closed_ = false;
  bool broken_ = false;  // a record could not be written: every later call fails
  // Paths whose current object an earlier record resets on revert (see journal.ts).
  std::unordered_set<std::string> seen_;
};

// The journal of a run, by directory, held until the host closes it (binding_linux.cc
// closeChangesJournal), so that what Close reports outlives the supervisor thread.
void Register(const std::shared_ptr<Journal>& j, const std::string& dir);
// Closes the journal kept in dir: waits for a call in progress, then every later call fails
// (EIO). Returns 1 when closed, 0 when no journal is registered for dir, -1 when a record could
// not be written during the run (the journal is incomplete).
int CloseByDir(const std::string& dir);

}  // namespace changes
}  // namespace psb
