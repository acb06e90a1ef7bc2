// Linux spawner: one entry point for both sandbox modes and for plain (unsandboxed) launches.
//
//   LinuxSpawnPlan plan;               // binding_linux.cc fills it from the TS plan (plain data)
//   LinuxSpawnResult res;
//   Status s = SpawnLinux(plan, &res); // parent; blocks until the command has exec'd or failed
//   ... watch res.pidfd; on readable: CollectExit(res, &code, &signal)
//
// Threading: SpawnLinux runs on the JS thread, or in Landlock mode with a supervision on the
// supervision's thread, confined by the policy's outer envelope, while the JS thread waits
// (supervisor/supervision_envelope.h SpawnWhereSupervised). Everything the child needs is
// allocated before clone. Child-side functions carry the InChild suffix and make raw syscalls only (raw_syscall.h).
//
// Shapes:
//   kPlain / kLandlock: clone(CLONE_VM|CLONE_VFORK) straight into the command: no page-table copy,
//     the parent thread sleeps until execve. The command calls setsid; teardown is by group.
//   kIsolated: clone(CLONE_VM|NEWUSER|NEWNS|NEWPID|NEWIPC|NEWUTS[|NEWNET]) into a small init that
//     shares the caller's address space (no page-table copy, no copy-on-write faults in Node for
//     as long as the sandbox lives) and touches only its own stack and TLS block once the command
//     has exec'd. init maps its own uid/gid, builds the mount tree, then clone(CLONE_VM|CLONE_VFORK)s the command, reaps,
//     forwards TERM/INT/HUP/QUIT/USR1/USR2 to the command's group and reports the command's wait
//     status over a pipe. init's exit tears down every process left in the pid namespace.
// Tests: see spawn_linux.cc.
#pragma once

#include <linux/filter.h>
#include <stdint.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "../status.h"
#include "landlock.h"

namespace psb {

enum class LinuxMode : uint8_t { kPlain, kIsolated, kLandlock };

// One step of the isolated mode's mount tree, executed in order by init. Planned in TS
// (lib/platform/linux/index.ts); native only executes.
enum class MountOpKind : uint8_t {
  kTmpClone,     // open_tree(path, CLONE|RECURSIVE) into slot `arg` (before /tmp is covered)
  kTmpfs,        // mount a tmpfs at path, options `data`
  kMkdir,        // mkdir(path, 0755); EEXIST is fine
  kMkfile,       // create an empty file at path; EEXIST is fine
  kMoveSlot,     // move_mount slot `arg` onto path
  kReadOnlyAll,  // mount_setattr("/", AT_RECURSIVE, +RDONLY)
  kBindRw,       // bind path onto itself, then clear RDONLY (recursively when allowed)
  kBindRo,       // bind path onto itself, then set RDONLY recursively (arg 1: skipped if gone)
  kPin,          // bind path onto itself, flags unchanged (renaming/removing it gives EBUSY; arg 1: skipped if gone)
  kGhostDir,     // mkdir(path, 0555) for a protected path that does not exist yet
  kGhostFile,    // create an empty 0444 file for a protected path that does not exist yet
  kMaskDir,      // tmpfs mode=000, read-only, over a deny-read directory
  kMaskFile,     // an empty mode-000 file of init's private tmpfs, bound read-only over a deny-read
                 // file: open() fails with EACCES, chmod with EROFS
  kProc,         // fresh procfs at /proc (its /proc/1 identity files masked, /proc/sys read-only),
                 // or an empty read-only tmpfs if that is impossible
  kDev,          // minimal /dev
  kSetReadOnly,  // mount_setattr(path, 0, +RDONLY) on an existing mount point
  kClearReadOnly,  // mount_setattr(path, 0, -RDONLY) on an existing mount point (not recursive)
  kSys,            // read-only sysfs of the command's own network namespace at /sys (kept if impossible)
  kOverlay,        // overlayfs at path, options `data` (lowerdir/upperdir/workdir planned in TS): a
                   // tool cache whose host copy is the read-only lower layer (lib/platform/linux/caches.ts)
  kViewFile,       // a read-only file holding `data`, made in a tmpfs of init's, bound over the existing
                   // file at path: the sandbox's own view of it (a repository's .git/info/exclude)
  kStageOverlay,   // overlayfs over a writable root, options `data`: the root is the lower layer, the
                   // upper and work dirs are the host's layer dir (changes: 'stage'); never a fallback
  // Values are part of the TS contract (lib/platform/linux/mounts.ts MountKind): append only.
};

struct MountOp {
  MountOpKind kind;
  std::string path;
  std::string data;
  int arg = 0;
};

struct LinuxSpawnPlan {
  LinuxMode mode = LinuxMode::kPlain;
  std::string file;                 // absolute path
  std::vector<std::string> argv;    // argv[0] included
  std::vector<std::string> envp;    // "K=V"
  std::string cwd;
  std::vector<int> stdio;           // stdio[i] = host fd to place at child fd i (-1: /dev/null)
  bool new_net = true;              // isolated: unshare the network
  // isolated, no proxy: join the process-wide empty network namespace instead of creating one.
  bool share_netns = true;
  std::vector<MountOp> mounts;      // isolated only
  int tmp_slots = 0;
  bool landlock = false;            // apply plan.landlock in the command
  LandlockPlan landlock_plan;
  // Landlock mode: the policy's outer envelope (plan.landlock.envelope), the supervision's
  // (supervisor/supervision_envelope.h); abi 0 when the plan has none.
  LandlockPlan envelope_plan;
  bool seccomp = false;
  std::vector<sock_filter> seccomp_filter;
  // Landlock mode: the filter notifies connect() (SeccompConfig::notify_connect). The command
  // installs it with a new listener, sends the listener to the parent over the fd channel and
  // closes its own copy before execve (a command holding it could answer its own connects).
  bool seccomp_listener = false;
  bool drop_caps = true;            // empty all capability sets + bounding set, lock securebits
  bool setsid = true;
  bool ctty = false;                // after setsid + stdio: TIOCSCTTY on fd 0 (a pty slave)
  // Isolated + pty: init allocates the terminal in the sandbox's own devpts (so ttyname works
  // inside), its slave becomes fds 0-2, and the master goes to the parent. 0 = no such pty.
  uint16_t pty_cols = 0, pty_rows = 0;
  // Isolated mode with a managed proxy: init creates a TCP listener on 127.0.0.1:proxy_port inside
  // the command's network namespace and hands it to the parent (SCM_RIGHTS). 0 = none.
  uint16_t proxy_port = 0;
  // Resource limits for the command (0 = leave unchanged).
  uint64_t rlimit_nproc = 0, rlimit_as = 0, rlimit_nofile = 0;
  // Landlock mode as root without a pids cgroup (RLIMIT_NPROC does not bind uid 0): init traces
  // the tree and fails task creation past this many tasks with EAGAIN (spawn_trace.cc). 0 = off.
  uint32_t trace_process_cap = 0;
  // Per-uid kernel quotas the command could exhaust for every process of its uid (0 = unchanged).
  uint64_t rlimit_sigpending = 0, rlimit_msgqueue = 0;
  // Isolated: init lowers these in the sandbox's own user namespace (/proc/sys/user/*), -1 = keep
  // (0 is a share too: the many-th concurrent sandbox may get none, lib/platform/linux-quotas.ts).
  int64_t inotify_instances = -1, inotify_watches = -1;
  // Isolated: tmpfs options of the private /dev/shm (e.g. "mode=1777,size=268435456").
  std::string shm_data = "mode=1777";
  // Open cgroup.procs (or v1 `tasks`) files of this sandbox's cgroups: the command writes "0" to
  // each before execve, so it and everything it forks are counted there and init is not (init
  // shares the host's memory: a memory cgroup's OOM killer must never pick it). Owned by the
  // caller; the child only writes them.
  std::vector<int> cgroup_fds;
};

struct LinuxSpawnResult {
  pid_t pid = -1;        // host pid of the command (plain/landlock) or of init (isolated)
  int pidfd = -1;        // owned by the caller after success
  int status_fd = -1;    // isolated: read end of init's status pipe; owned by the caller
  LinuxMode mode = LinuxMode::kPlain;
  // Isolated: init shares the caller's address space (CLONE_VM) and runs on this mapping. The
  // caller unmaps it (ReleaseInitStack) only after init has been reaped.
  void* init_stack = nullptr;
  size_t init_stack_size = 0;
  int pty_master_fd = -1;      // isolated + pty_cols: the master of the in-namespace pty
  int proxy_listener_fd = -1;  // isolated + proxy_port: the listener from inside the namespace
  int seccomp_listener_fd = -1;  // plan.seccomp_listener: the filter's notification fd
  bool shared_netns = false;   // isolated: init joined the shared empty network namespace
};

// A TCP listener on 127.0.0.1:<ephemeral> in the caller's namespace (Landlock mode's proxy port).
// Returns the fd (CLOEXEC) or -errno; *port receives the port.
int ListenLoopback(uint16_t* port) noexcept;

void ReleaseInitStack(LinuxSpawnResult* res) noexcept;

// Parent side. On failure nothing is left running and every fd is closed.
Status SpawnLinux(LinuxSpawnPlan& plan, LinuxSpawnResult* out) noexcept;

// After pidfd became readable: reaps, and returns the process's exit code or signal (for isolated
// mode that is init's, used only when init died without reporting). False if it has not exited.
bool CollectExit(const LinuxSpawnResult& res, int* code, int* signal) noexcept;

// Isolated mode: after status_fd became readable. True with the command's status once init has
// reported it (every process of the sandbox is dead by then); *eof when init died without a report.
bool ReadCommandStatus(const LinuxSpawnResult& res, int* code, int* signal, bool* eof) noexcept;

// Signals the sandboxed tree. Isolated: SIGKILL kills init (and so the namespace); other signals go
// to init, which forwards them to the command's group. Plain/Landlock: the command's group.
int SignalTree(const LinuxSpawnResult& res, int sig) noexcept;
// What SignalTree sends to a sandbox's init (its pidfd) for sig, in both sandbox modes.
int InitSignalFor(LinuxMode mode, int sig) noexcept;

// Landlock mode, prepared ahead (spawn_spare.cc): a sandbox set up completely, whose command
// waits for its argv, envp, cwd and stdio. PrepareSpare blocks until the command is parked; run it
// on a thread that lives as long as the process, or at least as long as init (init's
// parent-death signal follows the thread that cloned it: a supervision thread outlives init). The spare is used by GoSpare or discarded (DiscardSpare), never both, once.
struct LinuxSpare;
struct SpareGo {
  std::string file;
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  std::string cwd;
  std::vector<int> stdio;  // host fds, -1 for /dev/null; none may be a terminal (the caller checks)
  unsigned umask = 022;
  // A spare with a terminal inside the sandbox: its size, set before the command starts.
  uint16_t pty_cols = 0, pty_rows = 0;
};
Status PrepareSpare(LinuxSpawnPlan&& plan, LinuxSpare** out) noexcept;
// Consumes the spare. *used is false when it was not used because a path one of its Landlock rules
// was made from names another inode now (or too many stdio fds): the caller spawns afresh.
Status GoSpare(LinuxSpare* spare, SpareGo& go, LinuxSpawnResult* out, bool* used) noexcept;
void DiscardSpare(LinuxSpare* spare) noexcept;
int SparePidfd(const LinuxSpare* spare) noexcept;  // its init's (the spare keeps it)

// Probes used by probe(): can this process create the namespaces isolated mode needs?
// Returns 0 or -errno from the attempt; *procfs gets 0 or -errno from mounting a fresh procfs in
// them (-ECHILD when the namespaces themselves failed).
int ProbeUserNamespaces(bool with_net, int* procfs = nullptr) noexcept;
// Can init trace the command (the traced process cap, spawn_trace.cc)? Tried for real: a child
// sharing our memory, seized as init seizes the command. 0 or -errno (a container's seccomp
// profile, Yama's ptrace_scope 2 or 3, a host process that is not dumpable).
int ProcessTracingSupported() noexcept;

}  // namespace psb
