// Internals of the Linux spawner (spawn_linux.h), shared by its stages:
//   spawn_linux.cc    parent side: prepares everything, clones, reads the errno pipe
//   spawn_init.cc     init: fd sweep, namespace setup sequence, the command's launch and wait loop
//   spawn_mounts.cc   isolated mode's mount tree (MountOp steps, /dev, /proc and its masks)
//   spawn_netns.cc    network namespaces: the shared empty one, lo, the proxy listener
//   spawn_command.cc  the command's own setup between clone and execve
//   spawn_trace.cc    Landlock mode's traced process cap: init as the tree's tracer
// Child-side functions carry the InChild suffix and make raw syscalls only (raw_syscall.h).
// Tests: see spawn_linux.cc and the stage files above.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "raw_syscall.h"
#include "spawn_linux.h"
#include "syscall_numbers.h"

// Constants our build headers may lack (glibc 2.36 headers cannot include <linux/mount.h>).
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif

namespace psb {
namespace spawn_internal {

constexpr unsigned kOpenTreeClone = 1;
constexpr unsigned kOpenTreeCloexec = O_CLOEXEC;
constexpr unsigned kAtRecursive = 0x8000;
constexpr unsigned kMoveMountFEmptyPath = 0x00000004;
constexpr unsigned kMoveMountTEmptyPath = 0x00000040;
constexpr unsigned kAtEmptyPath = 0x1000;
constexpr uint64_t kMountAttrRdonly = 0x00000001;

// What a child writes to the errno pipe. stage 0 is a note (not an error).
struct ChildReport {
  int32_t stage;
  int32_t index;
  int32_t err;
};

enum Stage : int32_t {
  kNote = 0,
  kStagePdeath = 1,
  kStageUidMap,
  kStageMount,
  kStageLoopback,
  kStageCommandClone,
  kStageSetsid,
  kStageStdio,
  kStageCloseFds,
  kStageChdir,
  kStageRlimit,
  kStageCaps,
  kStageNoNewPrivs,
  kStageLandlock,
  kStageSeccomp,
  kStageExec,
  kStageProxyListener,
  kStageJoinNamespace,
  kStageOomScore,
  kStageCgroup,
  kStageMaskFs,
  kStageQuota,
  kStageTrace,
};

enum NoteBits : int32_t {
  kNoteUnused1 = 1,     // was: a fresh /proc could not be mounted (now a spawn failure)
  kNoteNoDevpts = 2,    // /dev/pts could not be mounted
  kNoteHostSys = 4,     // a namespace sysfs could not be mounted; the host's /sys stays (read-only)
};
// A note's index: 0 carries NoteBits; kNoteParked says a prepared-ahead command waits for its go.
constexpr int32_t kNoteParked = 1;

// A prepared-ahead command's stdio arrives with its go (spawn_spare.cc); at most this many fds,
// and every fd the command keeps while parked is numbered at or above it.
constexpr int kSpareMaxStdio = 8;

constexpr size_t kMaxSlots = 64;

struct ChildArgs {
  const LinuxSpawnPlan* plan;
  int fd_channel;  // init -> parent: the pty master, then the proxy listener (SCM_RIGHTS); -1 when unused
  int pty_slave;   // isolated + pty: the slave init opened, placed at fds 0-2 of the command; -1 otherwise
  char* const* argv;
  char* const* envp;
  const int* stdio_fds;
  int nstdio;
  const int* keep_fds;  // init: fds to keep open, sorted ascending
  int nkeep;
  int err_fd;
  int status_fd;
  pid_t parent_pid;
  sock_fprog fprog;
  void* cmd_stack_top;
  char uid_map[48];
  char gid_map[48];
  int slots[kMaxSlots];
  const char* const* mount_paths;
  const char* const* mount_data;
  int32_t notes;
  // Shared-netns path (network: none): stage0 joins the template namespaces, then clones init.
  int tmpl_user_fd;
  int tmpl_net_fd;
  int tmpl_sys_fd;  // -1, or a detached sysfs of the template's network namespace to clone onto /sys
  bool tmpl_loopback;  // the template's lo is up already (a proxy template): init leaves it
  int init_flags;
  void* init_stack_top;
  void* init_tls;
  pid_t init_pid;   // written by stage0: init's pid or -errno
  int init_pidfd;   // written by the kernel through CLONE_PIDFD
  // Isolated: detached clones of empty files in a tmpfs only init ever saw (see
  // PrepareMasksInChild), one per mask: deny-read files first, then kProcMasks.
  int* mask_fds;
  int nmasks;
  int ndeny;      // mask_fds[0..ndeny) for kMaskFile, in order; the rest for kProcMasks
  int next_mask;  // next deny-read mask
  // The last placeholder step found its name uncreatable (UncreatableInChild): nothing was made
  // or bound, and the deny-read mask right after it has nothing to mask.
  bool ghost_unheld;
  // The command will be Landlocked: the fresh procfs hides init instead of masking its files.
  bool hide_init;
  const char* shm_data;
  // Prepared ahead (spawn_spare.cc): the command parks after seccomp on this socket (its end;
  // -1 otherwise) until the go brings its stdio; argv, envp, the file and the cwd are read from
  // plan and argv/envp only then, and spare_umask becomes its umask.
  int spare_ctrl;
  unsigned spare_umask;
  // Isolated and prepared ahead: init parks on spare_init_ctrl (from the parent) after the mount
  // tree but the deferred steps (`deferred[i]`: the placeholders, made on the host only when the
  // sandbox is used), runs them at the go and passes the go on to the command over spare_relay.
  // For every step with check_ids[i], init records in mount_ids[2i..] the device and inode the
  // step's path named when it ran (0/0: missing), which the go compares with the host's view.
  int spare_init_ctrl;
  int spare_relay;
  void* helper_stack_top;  // the command's maker (HelperInChild): a part of init's stack mapping
  pid_t spare_cmd_pid;     // written by clone (CLONE_PARENT_SETTID)
  const uint8_t* deferred;
  const uint8_t* check_ids;
  uint64_t* mount_ids;
  // The traced process cap (plan.trace_process_cap): the command waits on trace_go (a futex
  // word) until init has seized it: 1 go on, 2 init could not (trace_err: -errno).
  uint32_t trace_go;
  int32_t trace_err;
};

// Entries of spawn_mounts.cc's /proc/1 mask table (one prepared mask file each).
extern const int kProcMaskCount;

// Landlock mode's init: "the parent died" (its PDEATHSIG) and "kill the sandbox" (from SignalTree).
// Real-time signals nothing else sends it; both start the same teardown.
constexpr int kParentDiedSignal = 36;  // SIGRTMIN + 2 (glibc keeps 32 and 33 for itself)
constexpr int kKillTreeSignal = 37;

// The traced process cap (spawn_trace.cc), init's side. StartTracedCommandInChild seizes the
// command (cloned sharing memory but not as a vfork child, waiting on a->trace_go), lets it go and
// waits until it has exec'd: 0, or 1 when it exited first (*status), or -errno (it was killed).
// OnTraceStopInChild handles one ptrace stop of the tree; TraceCount is init's whole state.
// WaitTracedInChild is init's wait4(-1, WNOHANG) while tracing: it keeps the count of exits.
constexpr int kTraceZombies = 4096;
struct TraceCount {
  int32_t cap;
  int32_t tasks;     // the tree's live tasks (threads too)
  int32_t inflight;  // creations let through whose outcome has not been seen yet
  int32_t zombies;   // exited processes their parent has not reaped yet: zombie_*[0..zombies)
  pid_t zombie_pids[kTraceZombies];     // their pids
  int64_t zombie_starts[kTraceZombies]; // and start times (field 22 of /proc/<pid>/stat)
};
long StartTracedCommandInChild(ChildArgs* a, pid_t cmd, TraceCount* c, int* status);
void OnTraceStopInChild(TraceCount* c, pid_t tid, int status);
long WaitTracedInChild(TraceCount* c, int* status);

// ---- child-side helpers shared by the stages: raw syscalls only ---------------------------

// Appends v in decimal at out (no snprintf after clone); returns the end (not terminated).
inline char* AppendDecimalInChild(char* out, uint64_t v) {
  char rev[20];
  int n = 0;
  do {
    rev[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  while (n > 0) *out++ = rev[--n];
  return out;
}

// Appends the string s at out; returns the end (not terminated).
inline char* AppendInChild(char* out, const char* s) {
  while (*s) *out++ = *s++;
  return out;
}

[[noreturn]] inline void ExitInChild(int code) {
  for (;;) Sys(__NR_exit_group, code);
}

[[noreturn]] inline void FailInChild(const ChildArgs* a, int32_t stage, int32_t index, long err) {
  ChildReport r = {stage, index, static_cast<int32_t>(-err)};
  Sys(__NR_write, a->err_fd, &r, sizeof r);
  ExitInChild(125);
}

struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

inline void ResetSignalsInChild() {
  KernelSigaction dfl = {nullptr /* SIG_DFL */, 0, nullptr, 0};
  for (int sig = 1; sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    Sys(__NR_rt_sigaction, sig, &dfl, 0, 8);
  }
}

inline long WriteFileInChild(const char* path, const char* text) {
  long fd = Sys(__NR_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  long n = Sys(__NR_write, fd, text, strlen(text));
  Sys(__NR_close, fd);
  return n < 0 ? n : 0;
}

// One byte plus `count` fds (SCM_RIGHTS). Raw syscalls only: the child side uses it, and so does
// the parent's go (spawn_spare.cc).
inline long SendFdsInChild(int sock, char byte, const int* fds, int count) {
  alignas(struct cmsghdr) char ctrl[CMSG_SPACE(sizeof(int) * kSpareMaxStdio)];
  if (count < 0 || count > kSpareMaxStdio) return -EINVAL;
  memset(ctrl, 0, sizeof ctrl);
  struct iovec iov = {&byte, 1};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = ctrl;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  }
  long r;
  do {
    r = Sys(__NR_sendmsg, sock, &msg, MSG_NOSIGNAL);
  } while (r == -EINTR);
  return r;
}

// Sends one byte, plus `fd` as SCM_RIGHTS when fd >= 0.
inline long SendFdInChild(int sock, int fd, char byte) { return SendFdsInChild(sock, byte, &fd, fd >= 0 ? 1 : 0); }

// Receives one byte and up to `max` (<= kSpareMaxStdio) fds, CLOEXEC, retrying EINTR. Returns
// recvmsg's result (1, 0 at EOF, or -errno); *count is how many fds came. A message whose fds did
// not fit is refused whole (-EMSGSIZE, nothing kept). Raw syscalls only.
inline long RecvFdsInChild(int sock, char* byte, int* fds, int max, int* count, int flags = 0) {
  alignas(struct cmsghdr) char ctrl[CMSG_SPACE(sizeof(int) * kSpareMaxStdio)];
  *count = 0;
  struct iovec iov = {byte, 1};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * kSpareMaxStdio);
  long n;
  do {
    n = Sys(__NR_recvmsg, sock, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n == -EINTR);
  if (n <= 0) return n;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  int got = 0;
  int all[kSpareMaxStdio];
  if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
    got = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    memcpy(all, CMSG_DATA(c), sizeof(int) * got);
  }
  if (got > max || (msg.msg_flags & MSG_CTRUNC) != 0) {
    for (int i = 0; i < got; ++i) Sys(__NR_close, all[i]);
    return -EMSGSIZE;
  }
  memcpy(fds, all, sizeof(int) * got);
  *count = got;
  return n;
}

// ---- the stages' entry points ------------------------------------------------------------

// spawn_mounts.cc: init's private mask files, then mount step `i` of plan.mounts.
long PrepareMasksInChild(ChildArgs* a);
long RunMountOpInChild(ChildArgs* a, size_t i);

// spawn_netns.cc
long LoopbackUpInChild();
long CreateProxyListenerInChild(ChildArgs* a, uint16_t port);
int Stage0InChild(void* argp);
bool GetNetTemplate(int* user_fd, int* net_fd, int* sys_fd);
// A template's namespaces (user, net) and its detached read-only sysfs (-1 if none).
struct NetTemplate {
  int user_fd = -1;
  int net_fd = -1;
  int sys_fd = -1;
};
// Parent side: makes one (lo up when `loopback`); false when this host cannot.
bool MakeNetTemplate(bool loopback, NetTemplate* out);
// Parent side: a single-use template with lo up for a sandbox with a proxy, made ahead; false
// when none is ready (the caller then makes the namespace in clone as before). Either way the
// pool starts making the next ones on threads of its own.
bool TakeProxyTemplate(NetTemplate* out);
// Closes our copies of a taken template's fds (init holds the namespaces from then on).
void ReleaseTemplate(NetTemplate* t);

// spawn_command.cc: the command, from clone(CLONE_VM|CLONE_VFORK) to execve.
int CommandInChild(void* argp);

// spawn_init.cc: init of both sandbox modes.
int InitInChild(void* argp);

// ---- parent-side helpers ------------------------------------------------------------------

// spawn_linux.cc, shared with spawn_spare.cc.
Status ReportToStatus(const LinuxSpawnPlan& plan, const ChildReport& r);
void KillAndReap(int pidfd);

// Child stacks come from a small pool (spawn_linux.cc): a fresh mapping per spawn cost an mmap, a
// munmap (a TLB shootdown across the host's threads) and first-touch faults. A stack goes back
// only once nothing runs on it: the destructor runs after the child exec'd or was reaped, and
// init's stack returns through ReleaseInitStack after init was reaped.
void* TakeStack(size_t size);
void GiveStack(void* base, size_t size);

struct Stack {
  void* base = MAP_FAILED;
  size_t size = 0;
  bool Allocate(size_t n) {
    size = n;
    base = TakeStack(n);
    return base != MAP_FAILED;
  }
  void* top() const { return static_cast<char*>(base) + size; }
  ~Stack() {
    if (base != MAP_FAILED) GiveStack(base, size);
  }
};

// What a launch keeps until its command has exec'd (ChildArgs points into it): on SpawnLinux's
// stack for a spawn, in the LinuxSpare for a sandbox prepared ahead.
struct Launch {
  bool spare = false;  // park the command (and isolated init) instead of exec'ing
  ChildArgs args;
  std::vector<char*> argv, envp;
  std::vector<int> staged, keep, mask_fds;
  std::vector<const char*> mpaths, mdata;
  std::vector<uint8_t> deferred, check_ids;
  std::vector<uint64_t> mount_ids, landlock_ids;
  Stack init_stack, cmd_stack;
  int ctrl = -1;   // spare: our end of the go socket (the command's peer, or init's when isolated)
  int err_r = -1;  // spare: the errno pipe, read again at the go
  ~Launch() {
    for (int fd : {ctrl, err_r}) {
      if (fd >= 0) close(fd);
    }
  }
};

// spawn_linux.cc: the launch of SpawnLinux and PrepareSpare. With L->spare it returns once the
// command is parked; *out then holds the sandbox, and L the errno pipe and the go socket.
Status LaunchLinux(LinuxSpawnPlan& plan, Launch* L, LinuxSpawnResult* out) noexcept;

struct FdList {
  std::vector<int> fds;
  int Add(int fd) {
    if (fd >= 0) fds.push_back(fd);
    return fd;
  }
  void Release(int fd) { fds.erase(std::remove(fds.begin(), fds.end(), fd), fds.end()); }
  ~FdList() {
    for (int fd : fds) close(fd);
  }
};

// Parent side: receives one byte and, if one came with it, an fd (CLOEXEC). Returns the number of
// bytes read (1, or <= 0 on EOF/error); *fd is -1 when no fd was passed.
ssize_t RecvFd(int sock, char* byte, int* fd, int flags);

}  // namespace spawn_internal
}  // namespace psb
