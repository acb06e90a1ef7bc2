// Landlock mode's path supervisor: read-only carve-outs inside writable roots (.git/hooks,
// .git/config, .codex, nested repositories' hooks and config, `protect` entries). A Landlock
// right on a directory covers everything below it, so Landlock alone cannot keep a carve-out
// read-only inside a writable root. The command's seccomp filter (SeccompConfig::notify_paths)
// stops every call that can create, replace, remove or write a name, and the host carries each
// one out itself, on a parent directory it pinned, unless the call touches a carve-out. See
// supervise_paths.cc for the rules and why they hold.
//
// Threading: HandlePaths runs on the sandbox's supervisor worker thread, never on the host's
// loop (a path walk the command makes slow stalls only that sandbox's calls). The first call
// gives that thread a file-system context of its own (unshare(CLONE_FS)) with umask 0, so that the
// command's umask, not the host's, applies to what it creates. It clears that thread's effective
// capabilities and leaves them cleared for the next call (nargs::LowerThreadCaps; the supervisor
// gives them back before a class that uses them). A named FIFO opened write-only with no reader
// is handed to a short-lived thread that waits for a reader and answers the call (answer_later.h).
// Tests: see supervise_paths.cc.
#pragma once

#include <stdint.h>

#include <memory>
#include <string>
#include <vector>

#include "answer_later.h"
#include "changes_journal.h"
#include "notify_abi.h"

namespace psb {

struct PathRules {
  bool enabled = false;
  // Canonical absolute paths the command may write below (the plan's writable roots, TMPDIR).
  std::vector<std::string> writable;
  // Canonical paths of the carve-outs that exist (a symlinked one: the link's target too).
  // Nothing at or below one is created, written, removed or renamed, unless a writable root
  // lies deeper than the carve-out on the way (the most specific rule wins, as in isolated mode).
  std::vector<std::string> carveouts;
  // Carve-outs that did not exist at the start: neither they nor any missing directory on the
  // way to them may be created (isolated mode holds them with an empty read-only placeholder).
  std::vector<std::string> held;
  struct Id {
    uint64_t dev, ino;
    bool operator==(const Id& o) const { return dev == o.dev && ino == o.ino; }
  };
  // The existing carve-outs themselves, by object: no name of one is opened for writing,
  // truncated or linked (a hard link made before the run included).
  std::vector<Id> carveout_ids;
  // Objects whose names are fixed for the run: the carve-outs, every directory (or symlink) on
  // the way from a writable root to one, and the writable roots themselves. None of them is
  // removed, renamed or replaced (isolated mode binds each onto itself: EBUSY).
  std::vector<Id> pinned;
  // The writable roots themselves: where a directory's path is too long to read (past PATH_MAX),
  // its location is found by walking up its parents to one of these or a carve-out.
  std::vector<Id> root_ids;
  // Character devices outside the writable roots that the command's Landlock rules let it open
  // for writing (/dev/null, /dev/zero, /dev/full); /dev/tty and its stdio terminals are handled
  // apart (their meaning depends on who opens them).
  std::vector<Id> devices;
  // The terminals on the command's fds 0-2 when it was spawned: the ones its Landlock rules grant
  // (landlock.h stdio_terminals). Fixed at spawn (RecordStdioTerminals), never read from the
  // command's fd table later: an O_PATH fd of any device can be put on fd 0-2 without a right to
  // open it. Each is held (O_PATH, which keeps no terminal open) and a write-open of one opens
  // the held object, never the name's: a pty index freed during the run goes to the next
  // terminal made, with the same device and inode numbers, and the held one then fails (EIO).
  // /dev/tty reaches the controlling terminal only when it is one of these.
  struct Terminal {
    Id id;
    uint64_t rdev;
    std::shared_ptr<const int> held;  // closed with the last copy of the rules
  };
  std::vector<Terminal> terminals;
  // bind(): whether an AF_INET/AF_INET6 bind is the command's to make (network 'full'); else
  // it is refused as Landlock refuses it (EACCES). Unix sockets are bound like any create.
  bool inet_bind = false;
  // A sandbox prepared ahead, at its go: the serving task rebuilds the rules (RebuildPathRules)
  // before it answers any call, off the spawn's path. Not on the plan's wire (set after it).
  bool rebuild_at_serve = false;
  // What the rules were built from (BuildPathRules' arguments): a sandbox prepared ahead
  // rebuilds them when it is used, so that they describe the tree as the command starts.
  std::vector<std::string> carveouts_in, present_only_in, devices_in;
  // The sandbox's share of FIFO waiters (answer_later.h), set by its supervisor; null: none.
  std::shared_ptr<later::Share> fifo_waiters;
  // changes: 'record' (changes_journal.h): every call on a recorded name is journaled before it
  // is carried out; null: none.
  std::shared_ptr<changes::Journal> journal;
};

// Builds the rules on the host before the command starts: looks up every carve-out (and the
// directories on the way to it) once and records their objects. `carveouts` and `present_only`
// are the planner's readOnly and presentOnly lists; `devices` the device files Landlock grants.
PathRules BuildPathRules(const std::vector<std::string>& writable, const std::vector<std::string>& carveouts,
                         const std::vector<std::string>& present_only, const std::vector<std::string>& devices);

// Records the terminals among the host fds the command gets as fds 0-2 (stdio[i], -1: /dev/null):
// character devices that answer TCGETS, as the command's Landlock rule picks them. Called on the
// host before the spawn; a sandbox prepared ahead gets no stdio terminal (its caller checks).
void RecordStdioTerminals(PathRules* r, const std::vector<int>& stdio);
// A sandbox prepared ahead, once it is used (by its serving task, before the first answer: the
// command's calls wait until then): the rules built again from what they were built from, for
// the tree as it is now (a carve-out made or removed since); the policy's bind right and the
// journal are kept.
void RebuildPathRules(PathRules* paths);

// Tests only (native.testSkipPathChecks, refused unless PSB_TEST_HOOKS=1): checks of the write
// judgement (MayWrite) to skip in this process, to show that the kernel still refuses what a
// check disabled by mistake would let through (Landlock mode's supervision envelope,
// supervision_envelope.h; test/linux/supervisor-envelope.test.ts).
constexpr unsigned kSkipTerminalCheck = 1;  // any character device counts as a held terminal
constexpr unsigned kSkipWritableCheck = 2;  // any path counts as inside a writable root
// Not a check: the serving task's setup fails (as an fd table it cannot empty would), so a test
// sees the sandbox torn down (supervisor.cc Serve).
constexpr unsigned kFailServingSetup = 4;
void SetPathCheckSkips(unsigned skips) noexcept;
unsigned PathCheckSkips() noexcept;

// Whether syscall nr is one the path supervisor answers.
bool IsPathCall(int nr) noexcept;

// Answers notification n when it is a path call (returns true); false for any other call.
// own_thread: the caller is a thread of the supervisor's own (never the host's loop thread),
// which this may give a file-system context of its own. Without one the call fails (EAGAIN).
bool HandlePaths(int listener, const notify::SeccompNotif& n, const PathRules& rules, bool own_thread) noexcept;

}  // namespace psb
