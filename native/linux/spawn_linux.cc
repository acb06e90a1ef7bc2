#include "spawn_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "raw_syscall.h"
#include "seccomp.h"
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
namespace {

constexpr unsigned kOpenTreeClone = 1;
constexpr unsigned kOpenTreeCloexec = O_CLOEXEC;
constexpr unsigned kAtRecursive = 0x8000;
constexpr unsigned kMoveMountFEmptyPath = 0x00000004;
constexpr uint64_t kMountAttrRdonly = 0x00000001;
constexpr int kSecbitsLockAll = 0x3f | (1 << 6) | (1 << 7);  // NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (+locks), NO_CAP_AMBIENT_RAISE (+lock)

struct MountAttr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};

struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

struct CapHeader {
  uint32_t version;
  int pid;
};
struct CapData {
  uint32_t effective, permitted, inheritable;
};

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
};

enum NoteBits : int32_t {
  kNoteProcMasked = 1,  // a fresh /proc could not be mounted; an empty one masks it
  kNoteNoDevpts = 2,    // /dev/pts could not be mounted
  kNoteHostSys = 4,     // a namespace sysfs could not be mounted; the host's /sys stays (read-only)
};

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
  int tmpl_sys_fd;  // -1, or a detached sysfs of the shared network namespace to clone onto /sys
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
  // The command will be Landlocked: the fresh procfs hides init instead of masking its files.
  bool hide_init;
  const char* shm_data;
};

// /proc/1 is init, and init shares the host's memory: its cmdline and environ are the host's (API
// keys on a command line), and raising its oom_score_adj raises the host's too (the kernel copies
// the value to every process sharing the mm). The fresh procfs gets these covered by empty files
// on a read-only mount: cmdline reads as empty (ps still works), the others refuse open() (mode
// 000), and chmod gives EROFS. (environ and mem are also refused by ptrace_may_access's capability
// check, as init holds capabilities the command lacks; the mask does not depend on that.)
// Other files of init that a same-uid process may write without any capability, and that act on
// the shared mm or the host's session: clear_refs (page flags of the host's memory),
// coredump_filter (the host's mm flags), autogroup (the nice value of the host's session's
// scheduling group). Landlock also refuses these writes; the masks hold without it.
struct ProcMask {
  const char* path;
  bool readable;
  bool optional;  // absent on some kernels (CONFIG_SCHED_AUTOGROUP)
};
const ProcMask kProcMasks[] = {
    {"/proc/1/cmdline", true, false},          {"/proc/1/task/1/cmdline", true, false},
    {"/proc/1/environ", false, false},         {"/proc/1/task/1/environ", false, false},
    {"/proc/1/oom_score_adj", false, false},   {"/proc/1/task/1/oom_score_adj", false, false},
    {"/proc/1/oom_adj", false, false},         {"/proc/1/task/1/oom_adj", false, false},
    {"/proc/1/clear_refs", false, true},       {"/proc/1/task/1/clear_refs", false, true},
    {"/proc/1/coredump_filter", false, true},  {"/proc/1/autogroup", false, true},
};
constexpr int kProcMaskCount = sizeof kProcMasks / sizeof kProcMasks[0];

// Landlock mode's init: "the parent died" (its PDEATHSIG) and "kill the sandbox" (from SignalTree).
// Real-time signals nothing else sends it; both start the same teardown.
constexpr int kParentDiedSignal = 36;  // SIGRTMIN + 2 (glibc keeps 32 and 33 for itself)
constexpr int kKillTreeSignal = 37;

struct ChildArgs;
void SetUpNamespacesInChild(ChildArgs* a);
[[noreturn]] void LaunchAndWaitInChild(ChildArgs* a);

// ---- child-side helpers: raw syscalls only ------------------------------------------------

[[noreturn]] void ExitInChild(int code) {
  for (;;) Sys(__NR_exit_group, code);
}

[[noreturn]] void FailInChild(const ChildArgs* a, int32_t stage, int32_t index, long err) {
  ChildReport r = {stage, index, static_cast<int32_t>(-err)};
  Sys(__NR_write, a->err_fd, &r, sizeof r);
  ExitInChild(125);
}

void ResetSignalsInChild() {
  KernelSigaction dfl = {nullptr /* SIG_DFL */, 0, nullptr, 0};
  for (int sig = 1; sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    Sys(__NR_rt_sigaction, sig, &dfl, 0, 8);
  }
}

long WriteFileInChild(const char* path, const char* text) {
  long fd = Sys(__NR_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  long n = Sys(__NR_write, fd, text, strlen(text));
  Sys(__NR_close, fd);
  return n < 0 ? n : 0;
}

long SetAttrInChild(const char* path, unsigned flags, uint64_t set, uint64_t clr) {
  MountAttr attr = {set, clr, 0, 0};
  return Sys(__NR_mount_setattr, AT_FDCWD, path, flags, &attr, sizeof attr);
}

long BindInChild(const char* path) {
  return Sys(__NR_mount, path, path, 0, MS_BIND | MS_REC, 0);
}

// Places prepared mask `i` (an empty file of init's private tmpfs) over `path`, read-only.
long MaskWithInChild(ChildArgs* a, int i, const char* path) {
  if (i < 0 || i >= a->nmasks) return -EINVAL;
  int fd = a->mask_fds[i];
  a->mask_fds[i] = -1;
  if (fd < 0) return -EBADF;
  // The clone is read-only already (PrepareMasksInChild): chmod gives EROFS.
  long r = Sys(__NR_move_mount, fd, "", AT_FDCWD, path, kMoveMountFEmptyPath);
  Sys(__NR_close, fd);
  return r;
}

long CreateFileInChild(const char* path, int mode) {
  long fd = Sys(__NR_openat, AT_FDCWD, path, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd == -EEXIST) return 0;
  if (fd < 0) return fd;
  Sys(__NR_close, fd);
  return 0;
}

long SetupDevInChild(ChildArgs* a) {
  static const char* const kNodes[] = {"/dev/null", "/dev/zero", "/dev/full",
                                       "/dev/random", "/dev/urandom", "/dev/tty"};
  constexpr int kCount = sizeof kNodes / sizeof kNodes[0];
  long fds[kCount];
  for (int i = 0; i < kCount; ++i) {
    fds[i] = Sys(__NR_open_tree, AT_FDCWD, kNodes[i], kOpenTreeClone | kOpenTreeCloexec);
  }
  long r = Sys(__NR_mount, "tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k");
  if (r < 0) return r;
  for (int i = 0; i < kCount; ++i) {
    if (fds[i] < 0) continue;  // the host lacks it (e.g. no /dev/tty): leave it out
    r = CreateFileInChild(kNodes[i], 0666);
    if (r < 0) return r;
    r = Sys(__NR_move_mount, fds[i], "", AT_FDCWD, kNodes[i], kMoveMountFEmptyPath);
    Sys(__NR_close, fds[i]);
    if (r < 0) return r;
  }
  Sys(__NR_mkdirat, AT_FDCWD, "/dev/pts", 0755);
  r = Sys(__NR_mount, "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=620");
  if (r < 0) {
    a->notes |= kNoteNoDevpts;
  } else {
    Sys(__NR_symlinkat, "pts/ptmx", AT_FDCWD, "/dev/ptmx");
  }
  Sys(__NR_mkdirat, AT_FDCWD, "/dev/shm", 01777);
  r = Sys(__NR_mount, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, a->shm_data);
  if (r < 0) return r;
  Sys(__NR_symlinkat, "/proc/self/fd", AT_FDCWD, "/dev/fd");
  Sys(__NR_symlinkat, "/proc/self/fd/0", AT_FDCWD, "/dev/stdin");
  Sys(__NR_symlinkat, "/proc/self/fd/1", AT_FDCWD, "/dev/stdout");
  Sys(__NR_symlinkat, "/proc/self/fd/2", AT_FDCWD, "/dev/stderr");
  // The tmpfs itself becomes read-only: no scratch area besides /dev/shm and the granted roots.
  return SetAttrInChild("/dev", 0, kMountAttrRdonly, 0);
}

// Writes a decimal number to a file (no snprintf after clone).
long WriteNumberInChild(const char* path, uint64_t v) {
  char buf[24];
  int n = 0;
  char rev[24];
  do {
    rev[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  for (int i = 0; i < n; ++i) buf[i] = rev[n - 1 - i];
  buf[n] = 0;
  return WriteFileInChild(path, buf);
}

// The fresh procfs, before the command can see it: host identity of /proc/1 hidden (kProcMasks),
// the per-user-namespace quotas lowered, then /proc/sys read-only (a command mapped to uid 0
// passes sysctl's owner check for the host's global sysctls without holding any capability).
long SetUpProcInChild(ChildArgs* a) {
  const LinuxSpawnPlan& p = *a->plan;
  for (int i = 0; !a->hide_init && i < kProcMaskCount; ++i) {
    long r = MaskWithInChild(a, a->ndeny + i, kProcMasks[i].path);
    if (r < 0 && !(r == -ENOENT && kProcMasks[i].optional)) return r;
  }
  // These limits belong to the sandbox's own user namespace; init holds CAP_SYS_RESOURCE there.
  // Every level of the user-namespace chain is checked, so the sandbox can take at most this many
  // of the host uid's inotify instances and watches.
  if (p.inotify_instances != 0) {
    long r = WriteNumberInChild("/proc/sys/user/max_inotify_instances", p.inotify_instances);
    if (r < 0) FailInChild(a, kStageQuota, 0, r);
  }
  if (p.inotify_watches != 0) {
    long r = WriteNumberInChild("/proc/sys/user/max_inotify_watches", p.inotify_watches);
    if (r < 0) FailInChild(a, kStageQuota, 1, r);
  }
  long r = BindInChild("/proc/sys");
  if (r < 0) return r;
  return SetAttrInChild("/proc/sys", kAtRecursive, kMountAttrRdonly, 0);
}

// The masks' backing files live in a tmpfs that init mounts over /proc for a moment (every host
// has /proc, and nothing else has been mounted there yet), clones one detached mount of per mask,
// and unmounts again: the command can never name the tmpfs. Clones of an attached mount stay
// movable later on every kernel with open_tree(2); cloning a detached one is not.
long PrepareMasksInChild(ChildArgs* a) {
  if (a->nmasks == 0) return 0;
  long r = Sys(__NR_mount, "tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
               "mode=0700,size=4k,nr_inodes=8");
  if (r < 0) return r;
  const int ndeny = a->ndeny;
  static const char* const kFiles[2] = {"/proc/none", "/proc/empty"};
  static const int kModes[2] = {0, 0444};
  for (int f = 0; f < 2 && r == 0; ++f) {
    long fd = Sys(__NR_openat, AT_FDCWD, kFiles[f], O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, kModes[f]);
    if (fd < 0) {
      r = fd;
      break;
    }
    r = Sys(__NR_fchmod, fd, kModes[f]);  // exact, whatever the umask
    Sys(__NR_close, fd);
  }
  // Read-only before cloning: clones keep the mount's flags, which saves a mount_setattr per mask
  // (spawn cost), and no mask is ever attached writable.
  if (r == 0) r = SetAttrInChild("/proc", 0, kMountAttrRdonly, 0);
  for (int i = 0; i < a->nmasks && r == 0; ++i) {
    // Deny-read files refuse open(); so do /proc/1's, except cmdline, which reads as empty.
    const char* src = i >= ndeny && kProcMasks[i - ndeny].readable ? kFiles[1] : kFiles[0];
    long fd = Sys(__NR_open_tree, AT_FDCWD, src, kOpenTreeClone | kOpenTreeCloexec);
    if (fd < 0) r = fd;
    else a->mask_fds[i] = static_cast<int>(fd);
  }
  long u = Sys(__NR_umount2, "/proc", MNT_DETACH);
  return r < 0 ? r : u;
}

long RunMountOpInChild(ChildArgs* a, size_t i) {
  const MountOp& op = a->plan->mounts[i];
  const char* path = a->mount_paths[i];
  long r = 0;
  switch (op.kind) {
    case MountOpKind::kTmpClone: {
      long fd = Sys(__NR_open_tree, AT_FDCWD, path,
                    kOpenTreeClone | kOpenTreeCloexec | kAtRecursive);
      if (fd < 0 && fd != -ENOENT) return fd;
      a->slots[op.arg] = static_cast<int>(fd);
      return 0;
    }
    case MountOpKind::kTmpfs:
      return Sys(__NR_mount, "tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, a->mount_data[i]);
    case MountOpKind::kMkdir:
      r = Sys(__NR_mkdirat, AT_FDCWD, path, 0755);
      return r == -EEXIST ? 0 : r;
    case MountOpKind::kMkfile:
      return CreateFileInChild(path, 0644);
    case MountOpKind::kMoveSlot:
      if (a->slots[op.arg] < 0) return 0;
      return Sys(__NR_move_mount, a->slots[op.arg], "", AT_FDCWD, path, kMoveMountFEmptyPath);
    case MountOpKind::kReadOnlyAll:
      return SetAttrInChild("/", kAtRecursive, kMountAttrRdonly, 0);
    case MountOpKind::kBindRw:
      r = BindInChild(path);
      if (r < 0) return r;
      r = SetAttrInChild(path, kAtRecursive, 0, kMountAttrRdonly);
      // A submount that was read-only on the host is locked read-only; keep it so and open
      // only the root's own mount.
      if (r == -EPERM) r = SetAttrInChild(path, 0, 0, kMountAttrRdonly);
      return r;
    case MountOpKind::kGhostDir:
      // Exact modes regardless of the umask: 0555/0444 is how hosts recognise a placeholder
      // (lib/platform/linux.ts) to remove it later.
      r = Sys(__NR_mkdirat, AT_FDCWD, path, 0555);
      if (r < 0 && r != -EEXIST) return r;
      if (r == 0) Sys(__NR_fchmodat, AT_FDCWD, path, 0555);
      [[fallthrough]];
    case MountOpKind::kBindRo:
      r = BindInChild(path);
      if (r < 0) return r;
      return SetAttrInChild(path, kAtRecursive, kMountAttrRdonly, 0);
    case MountOpKind::kGhostFile: {
      long fd = Sys(__NR_openat, AT_FDCWD, path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0444);
      if (fd < 0 && fd != -EEXIST) return fd;
      if (fd >= 0) {
        Sys(__NR_fchmod, fd, 0444);  // only a file we created
        Sys(__NR_close, fd);
      }
      r = BindInChild(path);
      if (r < 0) return r;
      return SetAttrInChild(path, kAtRecursive, kMountAttrRdonly, 0);
    }
    case MountOpKind::kPin:
      return BindInChild(path);
    case MountOpKind::kMaskDir:
      return Sys(__NR_mount, "tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                 "mode=000,size=4k,nr_inodes=2");
    case MountOpKind::kMaskFile:
      // Not /dev/null: reads would succeed (empty) and writes vanish. A mode-000 file refuses
      // open() outright, as a masked directory does.
      if (a->next_mask >= a->ndeny) return -EINVAL;
      return MaskWithInChild(a, a->next_mask++, path);
    case MountOpKind::kProc:
      // hidepid=ptraceable: /proc/<pid> exists only for processes the viewer may ptrace-read (no
      // gid exemption, unlike hidepid=invisible: the default exempt gid 0 is the host's as root).
      // init is never one for the command: Landlock refuses a sandboxed task any ptrace access
      // to a task outside its domain, and init also holds capabilities (in the sandbox's user
      // namespace) that the command lacks. So /proc/1 (the host's argv, environ, oom files, all
      // acting on the shared mm) does not exist for it, at the cost of one mount option instead
      // of a dozen masks. Without Landlock the masks below are used (and tested) instead.
      r = Sys(__NR_mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              a->hide_init ? "hidepid=ptraceable" : nullptr);
      if (r < 0) {
        a->notes |= kNoteProcMasked;
        return Sys(__NR_mount, "tmpfs", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   "mode=555,size=4k");
      }
      return SetUpProcInChild(a);
    case MountOpKind::kDev:
      return SetupDevInChild(a);
    case MountOpKind::kSetReadOnly:
      return SetAttrInChild(path, 0, kMountAttrRdonly, 0);
    case MountOpKind::kClearReadOnly:
      return SetAttrInChild(path, 0, 0, kMountAttrRdonly);
    case MountOpKind::kSys:
      // The host's /sys/class/net lists the host's interfaces; a sysfs mounted here shows the
      // namespace's own. Where the kernel refuses, the host's stays, read-only.
      if (a->tmpl_sys_fd >= 0) {
        long c = Sys(__NR_open_tree, a->tmpl_sys_fd, "", kOpenTreeClone | kOpenTreeCloexec | 0x1000 /* AT_EMPTY_PATH */);
        r = c < 0 ? c : Sys(__NR_move_mount, c, "", AT_FDCWD, "/sys", kMoveMountFEmptyPath);
        if (c >= 0) Sys(__NR_close, c);
        Sys(__NR_close, a->tmpl_sys_fd);
      } else {
        r = Sys(__NR_mount, "sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, 0);
      }
      if (r < 0) a->notes |= kNoteHostSys;
      return 0;
  }
  return -EINVAL;
}

long LoopbackUpInChild() {
  long s = Sys(__NR_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return s;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  memcpy(ifr.ifr_name, "lo", 3);
  ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
  long r = Sys(__NR_ioctl, s, SIOCSIFFLAGS, &ifr);
  Sys(__NR_close, s);
  return r;
}

// Sends one byte, plus `fd` as SCM_RIGHTS when fd >= 0. Raw syscalls only (child side).
long SendFdInChild(int sock, int fd, char byte) {
  char ctrl[CMSG_SPACE(sizeof(int))];
  memset(ctrl, 0, sizeof ctrl);
  struct iovec iov = {&byte, 1};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return Sys(__NR_sendmsg, sock, &msg, MSG_NOSIGNAL);
}

// The proxy's listener lives inside the command's network namespace, so 127.0.0.1:<port> there
// reaches the parent's proxy and nothing else. init only creates it and passes it out.
long CreateProxyListenerInChild(ChildArgs* a, uint16_t port) {
  long s = Sys(__NR_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return s;
  int one = 1;
  Sys(__NR_setsockopt, s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  long r = Sys(__NR_bind, s, &addr, sizeof addr);
  if (r == 0) r = Sys(__NR_listen, s, 511);
  if (r == 0) r = SendFdInChild(a->fd_channel, static_cast<int>(s), 'L');
  Sys(__NR_close, s);
  Sys(__NR_close, a->fd_channel);
  return r < 0 ? r : 0;
}

long DropCapsInChild() {
  // The bounding set first (needs CAP_SETPCAP), then the securebits lock, then the sets.
  for (int cap = 0; cap < 64; ++cap) {
    long r = Sys(__NR_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0);
    if (r == -EINVAL) break;  // past the kernel's last capability
    if (r == -EPERM) break;   // no CAP_SETPCAP: an unprivileged Landlock-mode launch
    if (r < 0) return r;
  }
  long r = Sys(__NR_prctl, PR_SET_SECUREBITS, kSecbitsLockAll, 0, 0, 0);
  if (r < 0 && r != -EPERM) return r;
  r = Sys(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (r < 0 && r != -EINVAL) return r;
  CapHeader hdr = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
  CapData data[2] = {{0, 0, 0}, {0, 0, 0}};
  return Sys(__NR_capset, &hdr, data);
}

// pty (spawn's `pty` option): fd 0 is the slave the parent opened; make it this new session's
// controlling terminal so job control, ^C and SIGWINCH reach the command. Index 3 under the
// stdio stage tells it apart from the dup3 of fds 0-2.
void SetControllingTerminalInChild(const ChildArgs* a) {
  long r = Sys(__NR_ioctl, 0, TIOCSCTTY, 0);
  if (r < 0) FailInChild(a, kStageStdio, 3, r);
}

// The command: runs after clone(CLONE_VM|CLONE_VFORK), from the parent (plain/Landlock) or from
// init (isolated). Its parent sleeps until execve succeeds or this function exits.
int CommandInChild(void* argp) {
  ChildArgs* a = static_cast<ChildArgs*>(argp);
  const LinuxSpawnPlan& p = *a->plan;
  ResetSignalsInChild();
  long r;
  // Join the sandbox's cgroups first, so that everything the command does is counted there.
  // Writing "0" moves the writer only: we are still a vfork child sharing the host's memory, and
  // a memory cgroup charges an mm to its owner (the host), so init and the host stay outside.
  for (int fd : p.cgroup_fds) {
    r = Sys(__NR_write, fd, "0", 1);
    if (r < 0) FailInChild(a, kStageCgroup, fd, r);
  }
  if (p.mode != LinuxMode::kPlain) {
    // The OOM killer takes the command, never init or the host (init shares the host's mm; a
    // victim's mm dies with every process sharing it). The kernel copies a new oom_score_adj to
    // every process sharing the writer's mm, except when the writer is a vfork child, as we are
    // until execve: only this process (and what it forks later) changes. No procfs (ENOENT) only
    // loses the preference.
    r = WriteFileInChild("/proc/self/oom_score_adj", "1000");
    if (r < 0 && r != -ENOENT) FailInChild(a, kStageOomScore, 0, r);
  }
  if (p.setsid) {
    r = Sys(__NR_setsid);
  } else {
    r = Sys(__NR_setpgid, 0, 0);
  }
  if (r < 0) FailInChild(a, kStageSetsid, 0, r);
  r = Sys(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (r < 0) FailInChild(a, kStagePdeath, 0, r);
  // The parent may have died before PDEATHSIG was armed. (Under init the parent is in another
  // pid namespace layer; init's own exit kills us anyway.)
  if (p.mode == LinuxMode::kPlain && Sys(__NR_getppid) != a->parent_pid) ExitInChild(125);
  for (int i = 0; i < a->nstdio; ++i) {
    r = Sys(__NR_dup3, a->pty_slave >= 0 && i < 3 ? a->pty_slave : a->stdio_fds[i], i, 0);
    if (r < 0) FailInChild(a, kStageStdio, i, r);
  }
  if (p.ctty) SetControllingTerminalInChild(a);
  // Every other fd closes at execve; the errno pipe stays open until then.
  r = Sys(__NR_close_range, a->nstdio, ~0U, CLOSE_RANGE_CLOEXEC);
  if (r < 0) FailInChild(a, kStageCloseFds, 0, r);
  const struct {
    int resource;
    uint64_t value;
  } limits[] = {{RLIMIT_NPROC, p.rlimit_nproc},         {RLIMIT_AS, p.rlimit_as},
                {RLIMIT_NOFILE, p.rlimit_nofile},       {RLIMIT_SIGPENDING, p.rlimit_sigpending},
                {RLIMIT_MSGQUEUE, p.rlimit_msgqueue}};
  if (p.mode != LinuxMode::kPlain) {
    // No core dumps: a seccomp kill must not leave a file (PROC-21).
    struct rlimit64 zero = {0, 0};
    r = Sys(__NR_prlimit64, 0, RLIMIT_CORE, &zero, 0);
    if (r < 0) FailInChild(a, kStageRlimit, RLIMIT_CORE, r);
  }
  for (const auto& l : limits) {
    if (l.value == 0) continue;
    struct rlimit64 rl = {l.value, l.value};
    r = Sys(__NR_prlimit64, 0, l.resource, &rl, 0);
    if (r < 0) FailInChild(a, kStageRlimit, l.resource, r);
  }
  if (p.drop_caps) {
    r = DropCapsInChild();
    if (r < 0) FailInChild(a, kStageCaps, 0, r);
  }
  // After the capability drop: the cwd must be enterable by the sandboxed identity itself (a
  // capability could otherwise walk into a deny-read mask).
  r = Sys(__NR_chdir, p.cwd.c_str());
  if (r < 0) FailInChild(a, kStageChdir, 0, r);
  if (p.landlock || p.seccomp) {
    r = Sys(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (r < 0) FailInChild(a, kStageNoNewPrivs, 0, r);
  }
  if (p.landlock) {
    r = ApplyLandlockInChild(p.landlock_plan);
    if (r < 0) FailInChild(a, kStageLandlock, 0, r);
  }
  if (p.seccomp) {
    r = InstallSeccompInChild(&a->fprog, p.seccomp_listener);
    if (r < 0) FailInChild(a, kStageSeccomp, 0, r);
    if (p.seccomp_listener) {
      // The listener goes to the parent and never stays here: whoever holds it answers this
      // filter's connects. sendmsg without MSG_FASTOPEN passes the filter just installed.
      long listener = r;
      r = SendFdInChild(a->fd_channel, static_cast<int>(listener), 'N');
      Sys(__NR_close, listener);
      if (r < 0) FailInChild(a, kStageSeccomp, 1, r);
    }
  }
  uint64_t empty = 0;
  Sys(__NR_rt_sigprocmask, SIG_SETMASK, &empty, 0, 8);
  r = Sys(__NR_execve, p.file.c_str(), a->argv, a->envp);
  FailInChild(a, kStageExec, 0, r);
}

// init of both sandbox modes. It shares the parent's address space (CLONE_VM) on its own stack and
// TLS block; once the command has exec'd it touches nothing but those (see LaunchAndWaitInChild).
int InitInChild(void* argp) {
  ChildArgs* a = static_cast<ChildArgs*>(argp);
  const LinuxSpawnPlan& p = *a->plan;
  const bool isolated = p.mode == LinuxMode::kIsolated;
  ResetSignalsInChild();  // the signal mask stays fully blocked; signals are taken synchronously
  // Our own name instead of the host thread's (ps, /proc/1/comm and status show it). comm is per
  // task, so this is safe; cmdline is the shared mm's and is masked instead (kProcMasks). Never
  // PR_SET_MM or PR_SET_DUMPABLE here: they change the mm, i.e. the host.
  Sys(__NR_prctl, PR_SET_NAME, "psb-init", 0, 0, 0);
  // Isolated: our death ends the pid namespace, so SIGKILL is all it takes. Landlock: we must
  // outlive the parent long enough to kill the tree, so its death arrives as a signal we wait for.
  long r = Sys(__NR_prctl, PR_SET_PDEATHSIG, isolated ? SIGKILL : kParentDiedSignal, 0, 0, 0);
  if (r < 0) FailInChild(a, kStagePdeath, 0, r);
  if (!isolated) {
    // Orphans anywhere below us (setsid daemons included) are re-parented to us, so teardown can
    // find and kill every one of them without a pid namespace.
    r = Sys(__NR_prctl, PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    if (r < 0) FailInChild(a, kStagePdeath, 1, r);
    if (Sys(__NR_getppid) != a->parent_pid) ExitInChild(125);  // the parent is already gone
  }
  // Drop every inherited fd except the ones we need: init lives as long as the command, and a
  // stray copy of a host pipe or socket would keep it open.
  int next = 0;
  for (int i = 0; i < a->nkeep; ++i) {
    if (a->keep_fds[i] > next) Sys(__NR_close_range, next, a->keep_fds[i] - 1, 0);
    next = a->keep_fds[i] + 1;
  }
  Sys(__NR_close_range, next, ~0U, 0);

  if (isolated) SetUpNamespacesInChild(a);
  LaunchAndWaitInChild(a);
}

// isolated init, pty: a terminal of the sandbox's own devpts instance (mounted by the /dev
// step), so the command's ttyname() names a node that exists inside. The master goes to the
// parent over the fd channel; the slave (from TIOCGPTPEER, no path lookup) is kept for the
// command's fds 0-2.
long OpenPtyInChild(ChildArgs* a) {
  const LinuxSpawnPlan& p = *a->plan;
  long m = Sys(__NR_openat, AT_FDCWD, "/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC, 0);
  if (m < 0) return m;
  int unlock = 0;
  struct winsize ws = {p.pty_rows, p.pty_cols, 0, 0};
  long r = Sys(__NR_ioctl, m, TIOCSPTLCK, &unlock);
  if (r == 0) r = Sys(__NR_ioctl, m, TIOCSWINSZ, &ws);
  long s = r < 0 ? r : Sys(__NR_ioctl, m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (s >= 0) {
    r = SendFdInChild(a->fd_channel, static_cast<int>(m), 'P');
    if (r < 0) Sys(__NR_close, s);
  }
  Sys(__NR_close, m);
  if (s < 0) return s;
  if (r < 0) return r;
  // Above the stdio range: the command's dup3 onto fds 0-2 must never be a no-op dup3(fd, fd).
  long hi = Sys(__NR_fcntl, s, F_DUPFD_CLOEXEC, a->nstdio > 3 ? a->nstdio : 3);
  Sys(__NR_close, s);
  if (hi < 0) return hi;
  a->pty_slave = static_cast<int>(hi);
  return 0;
}

// isolated init: identity maps, the mount tree, the namespace's network pieces.
void SetUpNamespacesInChild(ChildArgs* a) {
  const LinuxSpawnPlan& p = *a->plan;
  long r = WriteFileInChild("/proc/self/setgroups", "deny");
  if (r < 0 && r != -ENOENT) FailInChild(a, kStageUidMap, 0, r);
  r = WriteFileInChild("/proc/self/uid_map", a->uid_map);
  if (r < 0) FailInChild(a, kStageUidMap, 1, r);
  r = WriteFileInChild("/proc/self/gid_map", a->gid_map);
  if (r < 0) FailInChild(a, kStageUidMap, 2, r);

  r = Sys(__NR_mount, 0, "/", 0, MS_REC | MS_PRIVATE, 0);
  if (r < 0) FailInChild(a, kStageMount, -1, r);
  r = PrepareMasksInChild(a);
  if (r < 0) FailInChild(a, kStageMaskFs, 0, r);
  for (size_t i = 0; i < p.mounts.size(); ++i) {
    r = RunMountOpInChild(a, i);
    if (r < 0) FailInChild(a, kStageMount, static_cast<int32_t>(i), r);
  }
  for (size_t s = 0; s < kMaxSlots; ++s) {
    if (a->slots[s] >= 0) Sys(__NR_close, a->slots[s]);
  }
  for (int m = 0; m < a->nmasks; ++m) {
    if (a->mask_fds[m] >= 0) Sys(__NR_close, a->mask_fds[m]);
  }
  // lo is needed only by the proxy's listener: with no network at all, socket() is refused by
  // seccomp anyway, and bringing lo up is a large share of a namespace's setup cost.
  if (p.new_net && p.proxy_port != 0) {
    r = LoopbackUpInChild();
    if (r < 0) FailInChild(a, kStageLoopback, 0, r);
  }
  // Before the listener: that step closes the channel.
  if (p.pty_cols != 0) {
    r = OpenPtyInChild(a);
    if (r < 0) FailInChild(a, kStageStdio, 4, r);
  }
  if (p.proxy_port != 0) {
    r = CreateProxyListenerInChild(a, p.proxy_port);
    if (r < 0) FailInChild(a, kStageProxyListener, 0, r);
  }
  if (a->notes != 0) {
    ChildReport note = {kNote, 0, a->notes};
    Sys(__NR_write, a->err_fd, &note, sizeof note);
  }
}

// Landlock-mode teardown without a pid namespace: kill the command's group and every child we
// have (as subreaper, that is every orphan of the tree), reap, and repeat until none is left.
void KillTreeInChild(pid_t cmd) {
  char path[64];
  char buf[4096];
  long self = Sys(__NR_getpid);
  // "/proc/<pid>/task/<pid>/children": built by hand, no snprintf after clone.
  char num[24];
  int n = 0;
  for (long v = self; v > 0; v /= 10) num[n++] = static_cast<char>('0' + v % 10);
  int len = 0;
  const char* pre = "/proc/";
  for (const char* c = pre; *c; ++c) path[len++] = *c;
  for (int i = n - 1; i >= 0; --i) path[len++] = num[i];
  for (const char* c = "/task/"; *c; ++c) path[len++] = *c;
  for (int i = n - 1; i >= 0; --i) path[len++] = num[i];
  for (const char* c = "/children"; *c; ++c) path[len++] = *c;
  path[len] = 0;
  // Never block on a child we may not have killed (one re-parented to us between reading the
  // list and waiting): poll with WNOHANG, re-reading and re-killing until none is left.
  for (int round = 0;; ++round) {
    Sys(__NR_kill, -cmd, SIGKILL);
    long fd = Sys(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      long got = Sys(__NR_read, fd, buf, sizeof buf - 1);
      Sys(__NR_close, fd);
      long pid = 0;
      for (long i = 0; i < got; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
        } else {
          if (pid > 0) Sys(__NR_kill, pid, SIGKILL);
          pid = 0;
        }
      }
      if (pid > 0) Sys(__NR_kill, pid, SIGKILL);
    }
    long reaped;
    while ((reaped = Sys(__NR_wait4, -1, 0, __WALL | WNOHANG, 0)) > 0) {
    }
    if (reaped == -ECHILD) return;
    // Without /proc/<pid>/task/<pid>/children (CONFIG_PROC_CHILDREN) we cannot find escapees:
    // give up after a while rather than hang the report.
    if (fd < 0 && round > 1000) return;
    struct timespec pause = {0, 1000000};  // 1 ms
    Sys(__NR_nanosleep, &pause, 0);
  }
}

// Both modes: start the command, forward signals, and report its status once nothing of the
// sandbox is left.
[[noreturn]] void LaunchAndWaitInChild(ChildArgs* a) {
  const LinuxSpawnPlan& p = *a->plan;
  const bool isolated = p.mode == LinuxMode::kIsolated;

  // From the moment err_fd closes, the parent may free everything `a` points to: copy what the
  // wait loop needs onto init's own stack first.
  const int status_fd = a->status_fd;
  const bool group = p.setsid;
  pid_t cmd = clone(CommandInChild, a->cmd_stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
  if (cmd < 0) FailInChild(a, kStageCommandClone, 0, -EAGAIN);
  // The command has its own copies now. init keeps only the status pipe, so the command's stdio
  // reaches EOF exactly when the sandbox's last holder of it is gone.
  for (int i = 0; i < a->nstdio; ++i) Sys(__NR_close, a->stdio_fds[i]);
  if (a->pty_slave >= 0) Sys(__NR_close, a->pty_slave);
  for (int fd : p.cgroup_fds) Sys(__NR_close, fd);
  // Landlock mode: the channel carried only the command's seccomp listener (sent before its
  // execve, which has happened now that vfork returned).
  if (!isolated && a->fd_channel >= 0) Sys(__NR_close, a->fd_channel);
  Sys(__NR_close, a->err_fd);  // the parent sees EOF once the command has exec'd (or failed)
  a = nullptr;

  uint64_t set = 0;
  const int kWatched[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH,
                          kParentDiedSignal, kKillTreeSignal};
  for (int sig : kWatched) set |= 1ULL << (sig - 1);
  // Kill and reap everything left (daemons included) before reporting, so that when the parent
  // hears "exited" no process of the sandbox is alive. In isolated mode kill(-1) reaches exactly
  // the namespace; the namespaces' own teardown then happens after the report.
  auto teardown = [&]() {
    if (isolated) {
      Sys(__NR_kill, -1, SIGKILL);
      while (Sys(__NR_wait4, -1, 0, __WALL, 0) != -ECHILD) {
      }
    } else {
      KillTreeInChild(cmd);
    }
  };
  for (;;) {
    siginfo_t si;
    long sig = Sys(__NR_rt_sigtimedwait, &set, &si, 0, 8);
    if (sig == SIGCHLD) {
      for (;;) {
        int st = 0;
        long pid = Sys(__NR_wait4, -1, &st, WNOHANG | __WALL, 0);
        if (pid <= 0) break;
        if (pid == cmd) {
          teardown();
          int32_t status = st;
          Sys(__NR_write, status_fd, &status, sizeof status);
          ExitInChild(0);
        }
      }
    } else if (sig == kParentDiedSignal || sig == kKillTreeSignal) {
      // Killing the sandbox: the command is killed with the rest, and reported as such.
      teardown();
      int32_t status = SIGKILL;  // a wait status for "killed by SIGKILL"
      Sys(__NR_write, status_fd, &status, sizeof status);
      ExitInChild(0);
    } else if (sig > 0) {
      Sys(__NR_kill, group ? -cmd : cmd, sig);
    }
  }
}

// stage0 (network: none): runs with CLONE_VM|CLONE_VFORK|CLONE_FILES, so the parent sleeps until
// it exits and the pidfd it asks for lands in the parent's fd table. It joins the process-wide
// template user namespace (where it holds every capability, as the namespace's owner) and the
// template's empty network namespace, then clones init as the parent's child (CLONE_PARENT) in a
// fresh user namespace nested in the template. init inherits the empty network namespace: no
// per-sandbox network namespace has to be created and torn down, which is most of the cost of a
// sandbox. Sandboxes can share it safely: no interface is up and seccomp refuses socket().
int Stage0InChild(void* argp) {
  ChildArgs* a = static_cast<ChildArgs*>(argp);
  long r = Sys(__NR_setns, a->tmpl_user_fd, CLONE_NEWUSER);
  if (r < 0) FailInChild(a, kStageJoinNamespace, 0, r);
  r = Sys(__NR_setns, a->tmpl_net_fd, CLONE_NEWNET);
  if (r < 0) FailInChild(a, kStageJoinNamespace, 1, r);
  pid_t pid = clone(InitInChild, a->init_stack_top, a->init_flags, a, &a->init_pidfd, a->init_tls, nullptr);
  // glibc's wrapper reports through errno; reading it is harmless (the parent thread sleeps).
  a->init_pid = pid < 0 ? -errno : pid;
  ExitInChild(0);
}

struct TemplateArgs {
  int sock;
  int parent_sock;  // our copy of the parent's end: closed first, or EOF could never come
  char uid_map[48];
  char gid_map[48];
};

// The template: a process in a new user+network namespace that maps its own uid/gid, says so, and
// waits for the parent to open its namespaces before exiting. CLONE_VM, raw syscalls only.
int TemplateInChild(void* argp) {
  TemplateArgs* t = static_cast<TemplateArgs*>(argp);
  Sys(__NR_close, t->parent_sock);
  long r = WriteFileInChild("/proc/self/setgroups", "deny");
  if (r == 0 || r == -ENOENT) r = WriteFileInChild("/proc/self/uid_map", t->uid_map);
  if (r == 0) r = WriteFileInChild("/proc/self/gid_map", t->gid_map);
  // A read-only sysfs of the template's network namespace, as a detached mount: each sandbox
  // clones it onto /sys (only a holder of CAP_SYS_ADMIN over this network namespace may mount
  // one, and a sandbox's init holds it only over its own nested user namespace).
  long mfd = -1;
  if (r == 0) {
    long fsfd = Sys(__NR_fsopen, "sysfs", 1 /* FSOPEN_CLOEXEC */);
    if (fsfd >= 0) {
      if (Sys(__NR_fsconfig, fsfd, 6 /* FSCONFIG_CMD_CREATE */, 0, 0, 0) == 0) {
        mfd = Sys(__NR_fsmount, fsfd, 1 /* FSMOUNT_CLOEXEC */, 0x1 | 0x2 | 0x4 | 0x8 /* RDONLY NOSUID NODEV NOEXEC */);
      }
      Sys(__NR_close, fsfd);
    }
  }
  char ok = r == 0 ? 'Y' : 'N';
  SendFdInChild(t->sock, static_cast<int>(mfd), ok);
  Sys(__NR_read, t->sock, &ok, 1);  // returns at EOF: the parent is done with us
  ExitInChild(0);
}

// ---- parent side ------------------------------------------------------------------------

struct Stack {
  void* base = MAP_FAILED;
  size_t size = 0;
  bool Allocate(size_t n) {
    size = n;
    base = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    return base != MAP_FAILED;
  }
  void* top() const { return static_cast<char*>(base) + size; }
  ~Stack() {
    if (base != MAP_FAILED) munmap(base, size);
  }
};

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
ssize_t RecvFd(int sock, char* byte, int* fd, int flags) {
  char ctrl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {byte, 1};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  *fd = -1;
  struct cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof(int));
  return n;
}

struct NetTemplate {
  std::mutex mu;
  bool tried = false;
  int user_fd = -1;
  int net_fd = -1;
  int sys_fd = -1;  // detached read-only sysfs of the template network namespace, or -1
};
NetTemplate g_net_template;

// Returns true with the template's namespace fds (created on first use, kept for the process's
// lifetime). False when this host cannot make one; callers then create a network namespace per
// sandbox as usual.
bool GetNetTemplate(int* user_fd, int* net_fd, int* sys_fd) {
  std::lock_guard<std::mutex> lock(g_net_template.mu);
  if (!g_net_template.tried) {
    g_net_template.tried = true;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
      TemplateArgs t;
      t.sock = sv[1];
      t.parent_sock = sv[0];
      snprintf(t.uid_map, sizeof t.uid_map, "%u %u 1\n", geteuid(), geteuid());
      snprintf(t.gid_map, sizeof t.gid_map, "%u %u 1\n", getegid(), getegid());
      Stack stack;
      if (stack.Allocate(64 * 1024)) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pid_t pid = clone(TemplateInChild, stack.top(), CLONE_VM | CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS | SIGCHLD, &t);
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        if (pid > 0) {
          char ok = 0;
          ssize_t got = RecvFd(sv[0], &ok, &g_net_template.sys_fd, 0);
          if (got == 1 && ok == 'Y') {
            std::string base = "/proc/" + std::to_string(pid) + "/ns/";
            int u = open((base + "user").c_str(), O_RDONLY | O_CLOEXEC);
            int n = open((base + "net").c_str(), O_RDONLY | O_CLOEXEC);
            if (u >= 0 && n >= 0) {
              g_net_template.user_fd = u;
              g_net_template.net_fd = n;
            } else {
              if (u >= 0) close(u);
              if (n >= 0) close(n);
            }
          }
          close(sv[0]);
          sv[0] = -1;
          int st;
          while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {
          }
        }
      }
      if (sv[0] >= 0) close(sv[0]);
      close(sv[1]);
    }
  }
  *user_fd = g_net_template.user_fd;
  *net_fd = g_net_template.net_fd;
  *sys_fd = g_net_template.sys_fd;
  return *user_fd >= 0;
}

constexpr size_t kInitStackSize = 256 * 1024;
constexpr size_t kInitTlsOffset = 32 * 1024;  // TLS variables live below the TCB (x86_64)

// init shares our address space but must not depend on the TLS block of the thread that spawned
// it (a worker thread may exit while the sandbox lives). On x86_64 it gets its own TCB at the
// bottom of its stack mapping: a copy of ours (stack-protector canary included) with the self
// pointers moved. Elsewhere it keeps the caller's thread pointer (aarch64 keeps the canary in a
// global, not in the TCB).
void* PrepareInitTls(void* stack_base) {
#if defined(__x86_64__)
  uintptr_t* fake = reinterpret_cast<uintptr_t*>(static_cast<char*>(stack_base) + kInitTlsOffset);
  uintptr_t* real;
  __asm__("mov %%fs:0, %0" : "=r"(real));
  memcpy(fake, real, 64);
  fake[0] = reinterpret_cast<uintptr_t>(fake);  // tcb
  fake[2] = reinterpret_cast<uintptr_t>(fake);  // self
  return fake;
#else
  (void)stack_base;
  return nullptr;
#endif
}

const char* StageName(int32_t stage) {
  switch (stage) {
    case kStagePdeath: return "prctl(PR_SET_PDEATHSIG)";
    case kStageUidMap: return "writing uid_map/gid_map";
    case kStageMount: return "mount";
    case kStageLoopback: return "bringing up lo";
    case kStageCommandClone: return "clone(2) of the command";
    case kStageSetsid: return "setsid(2)";
    case kStageStdio: return "dup3(2) of stdio";
    case kStageCloseFds: return "close_range(2)";
    case kStageChdir: return "chdir(2)";
    case kStageRlimit: return "prlimit(2)";
    case kStageCaps: return "dropping capabilities";
    case kStageNoNewPrivs: return "prctl(PR_SET_NO_NEW_PRIVS)";
    case kStageLandlock: return "landlock_restrict_self(2)";
    case kStageSeccomp: return "seccomp(2)";
    case kStageExec: return "execve(2)";
    case kStageProxyListener: return "creating the proxy listener";
    case kStageJoinNamespace: return "setns(2) into the shared network namespace";
    case kStageOomScore: return "writing /proc/self/oom_score_adj";
    case kStageCgroup: return "joining the sandbox's cgroup";
    case kStageMaskFs: return "preparing init's mask files";
    case kStageQuota: return "lowering the user namespace's inotify limits";
    default: return "sandbox setup";
  }
}

const char* MountKindName(MountOpKind k) {
  switch (k) {
    case MountOpKind::kTmpClone: return "clone tree";
    case MountOpKind::kTmpfs: return "tmpfs";
    case MountOpKind::kMkdir: return "mkdir";
    case MountOpKind::kMkfile: return "create";
    case MountOpKind::kMoveSlot: return "move tree";
    case MountOpKind::kReadOnlyAll: return "read-only /";
    case MountOpKind::kBindRw: return "writable bind";
    case MountOpKind::kBindRo: return "read-only bind";
    case MountOpKind::kPin: return "pin";
    case MountOpKind::kGhostDir: return "protect missing dir";
    case MountOpKind::kGhostFile: return "protect missing file";
    case MountOpKind::kMaskDir: return "mask dir";
    case MountOpKind::kMaskFile: return "mask file";
    case MountOpKind::kProc: return "proc";
    case MountOpKind::kDev: return "dev";
    case MountOpKind::kSetReadOnly: return "read-only";
    case MountOpKind::kClearReadOnly: return "writable";
    case MountOpKind::kSys: return "sysfs";
  }
  return "mount";
}

Status ReportToStatus(const LinuxSpawnPlan& plan, const ChildReport& r) {
  int err = r.err;
  std::string errname = strerrorname_np(err) ? strerrorname_np(err) : std::to_string(err);
  if (r.stage == kStageExec) {
    if (err == ENOENT) {
      return Status::Sys(ErrorCode::kENOT_FOUND, "command not found: " + plan.file, "execve", err);
    }
    if (err == EACCES || err == ENOEXEC || err == EPERM || err == EISDIR) {
      return Status::Sys(ErrorCode::kENOT_EXECUTABLE, "not executable: " + plan.file + " (" + errname + ")",
                         "execve", err);
    }
    return Status::Sys(ErrorCode::kESPAWN, "execve(2) failed for " + plan.file + ": " + errname, "execve", err);
  }
  std::string what = StageName(r.stage);
  if (r.stage == kStageStdio && r.index == 3) what = "ioctl(TIOCSCTTY) on the pty slave";
  if (r.stage == kStageStdio && r.index == 4) what = "opening a pty in the sandbox's devpts";
  ErrorCode code = ErrorCode::kESPAWN;
  std::string hint;
  switch (r.stage) {
    case kStageUidMap:
      code = ErrorCode::kENAMESPACE_SETUP;
      hint = "; user namespaces may be restricted (kernel.apparmor_restrict_unprivileged_userns); "
             "use mode 'landlock' with degraded: true";
      break;
    case kStageMount:
      code = ErrorCode::kEMOUNT_SETUP;
      if (r.index >= 0 && static_cast<size_t>(r.index) < plan.mounts.size()) {
        const MountOp& op = plan.mounts[r.index];
        what = std::string("mount step '") + MountKindName(op.kind) + "' on " + op.path;
      } else {
        what = "making / private";
      }
      break;
    case kStageChdir:
      code = ErrorCode::kEINVALID_ARGUMENT;
      what = "chdir(2) to " + plan.cwd + " inside the sandbox";
      hint = "; is the cwd readable under the policy?";
      break;
    case kStageCaps:
    case kStageNoNewPrivs:
      code = ErrorCode::kECAPS_DROP;
      break;
    case kStageLandlock:
      code = ErrorCode::kELANDLOCK_UNSUPPORTED;
      break;
    case kStageSeccomp:
      code = ErrorCode::kESECCOMP_INSTALL;
      hint = "; kernel lacks CONFIG_SECCOMP_FILTER?";
      break;
    default:
      break;
  }
  return Status::Sys(code, what + " failed: " + errname + hint, StageName(r.stage), err);
}

// A sandbox that failed after it was cloned: killed (the whole tree goes with init) and reaped, so
// a failed spawn leaves no process behind.
void KillAndReap(int pidfd) {
  Sys(__NR_pidfd_send_signal, pidfd, SIGKILL, 0, 0);
  siginfo_t si;
  while (waitid(static_cast<idtype_t>(P_PIDFD), pidfd, &si, WEXITED) < 0 && errno == EINTR) {
  }
}

}  // namespace

Status SpawnLinux(LinuxSpawnPlan& plan, LinuxSpawnResult* out) noexcept {
  const bool isolated = plan.mode == LinuxMode::kIsolated;
  // Both sandbox modes run the command under a small init (see LaunchAndWaitInChild); a plain
  // launch is a single vfork-style child.
  const bool uses_init = plan.mode != LinuxMode::kPlain;
  if (plan.tmp_slots > static_cast<int>(kMaxSlots)) {
    return Status::Error(ErrorCode::kEINVALID_ARGUMENT, "too many paths under /tmp to expose");
  }
  FdList owned;
  const int nstdio = static_cast<int>(plan.stdio.size());
  // Every fd the child needs is moved at or above nstdio so that placing stdio cannot clobber it.
  std::vector<int> staged(nstdio, -1);
  for (int i = 0; i < nstdio; ++i) {
    int src = plan.stdio[i];
    int tmp = -1;
    if (src < 0) {
      tmp = open("/dev/null", O_RDWR | O_CLOEXEC);
      if (tmp < 0) return Status::Sys(ErrorCode::kESPAWN, "open(2) /dev/null failed", "open", errno);
      owned.Add(tmp);
      src = tmp;
    }
    staged[i] = owned.Add(fcntl(src, F_DUPFD_CLOEXEC, nstdio));
    if (staged[i] < 0) {
      return Status::Sys(ErrorCode::kEINVALID_ARGUMENT,
                         "stdio fd " + std::to_string(plan.stdio[i]) + " is not open", "fcntl", errno);
    }
  }
  int errp[2], statp[2] = {-1, -1};
  if (pipe2(errp, O_CLOEXEC) < 0) return Status::Sys(ErrorCode::kESPAWN, "pipe2(2) failed", "pipe2", errno);
  owned.Add(errp[0]);
  int err_w = owned.Add(fcntl(errp[1], F_DUPFD_CLOEXEC, nstdio));
  close(errp[1]);
  if (uses_init) {
    if (pipe2(statp, O_CLOEXEC) < 0) return Status::Sys(ErrorCode::kESPAWN, "pipe2(2) failed", "pipe2", errno);
    owned.Add(statp[0]);
    int w = owned.Add(fcntl(statp[1], F_DUPFD_CLOEXEC, nstdio));
    close(statp[1]);
    statp[1] = w;
  }

  int chan[2] = {-1, -1};
  if ((isolated && (plan.proxy_port != 0 || plan.pty_cols != 0)) || (uses_init && plan.seccomp_listener)) {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, chan) < 0) {
      return Status::Sys(ErrorCode::kESPAWN, "socketpair(2) failed", "socketpair", errno);
    }
    owned.Add(chan[0]);
    int w = owned.Add(fcntl(chan[1], F_DUPFD_CLOEXEC, nstdio));
    close(chan[1]);
    chan[1] = w;
  }

  std::vector<char*> argv, envp;
  for (std::string& s : plan.argv) argv.push_back(&s[0]);
  argv.push_back(nullptr);
  for (std::string& s : plan.envp) envp.push_back(&s[0]);
  envp.push_back(nullptr);
  std::vector<const char*> mpaths, mdata;
  for (const MountOp& op : plan.mounts) {
    mpaths.push_back(op.path.c_str());
    mdata.push_back(op.data.c_str());
  }
  plan.landlock_plan.Finalize();

  ChildArgs args;
  memset(&args, 0, sizeof args);
  args.tmpl_user_fd = args.tmpl_net_fd = args.tmpl_sys_fd = -1;
  args.plan = &plan;
  args.argv = argv.data();
  args.envp = envp.data();
  args.stdio_fds = staged.data();
  args.nstdio = nstdio;
  args.err_fd = err_w;
  args.status_fd = statp[1];
  args.fd_channel = chan[1];
  args.pty_slave = -1;
  args.parent_pid = getpid();
  args.fprog.len = static_cast<unsigned short>(plan.seccomp_filter.size());
  args.fprog.filter = plan.seccomp_filter.data();
  args.mount_paths = mpaths.data();
  args.mount_data = mdata.data();
  for (size_t s = 0; s < kMaxSlots; ++s) args.slots[s] = -1;
  args.shm_data = plan.shm_data.c_str();
  std::vector<int> mask_fds;
  if (isolated) {
    size_t n = 0;
    bool proc = false;
    for (const MountOp& op : plan.mounts) {
      if (op.kind == MountOpKind::kMaskFile) ++n;
      if (op.kind == MountOpKind::kProc) proc = true;
    }
    args.ndeny = static_cast<int>(n);
    args.hide_init = plan.landlock;
    if (proc && !args.hide_init) n += kProcMaskCount;
    mask_fds.assign(n, -1);
  }
  args.mask_fds = mask_fds.data();
  args.nmasks = static_cast<int>(mask_fds.size());
  snprintf(args.uid_map, sizeof args.uid_map, "%u %u 1\n", geteuid(), geteuid());
  snprintf(args.gid_map, sizeof args.gid_map, "%u %u 1\n", getegid(), getegid());
  std::vector<int> keep = staged;
  keep.push_back(err_w);
  if (statp[1] >= 0) keep.push_back(statp[1]);
  if (chan[1] >= 0) keep.push_back(chan[1]);
  for (int fd : plan.cgroup_fds) keep.push_back(fd);
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  args.keep_fds = keep.data();
  args.nkeep = static_cast<int>(keep.size());

  Stack init_stack, cmd_stack;
  if (!init_stack.Allocate(uses_init ? kInitStackSize : 128 * 1024) ||
      (uses_init && !cmd_stack.Allocate(128 * 1024))) {
    return Status::Sys(ErrorCode::kESPAWN, "mmap(2) of a child stack failed", "mmap", errno);
  }
  args.cmd_stack_top = uses_init ? cmd_stack.top() : nullptr;

  int flags = CLONE_PIDFD | CLONE_VM | SIGCHLD;
  int (*entry)(void*) = CommandInChild;
  void* tls = nullptr;
  if (uses_init) {
    if (isolated) flags |= CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
    if (isolated && plan.new_net) flags |= CLONE_NEWNET;
    entry = InitInChild;
    tls = PrepareInitTls(init_stack.base);
    if (tls != nullptr) flags |= CLONE_SETTLS;
  } else {
    flags |= CLONE_VFORK;
  }
  // Signals stay blocked across clone: a handler of the parent must never run in the child.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  pid_t pid;
  int clone_errno = 0;
  int tmpl_user = -1, tmpl_net = -1, tmpl_sys = -1;
  const bool shared_net = isolated && plan.new_net && plan.proxy_port == 0 && plan.share_netns &&
                          GetNetTemplate(&tmpl_user, &tmpl_net, &tmpl_sys);
  if (shared_net) {
    args.tmpl_user_fd = tmpl_user;
    args.tmpl_net_fd = tmpl_net;
    args.tmpl_sys_fd = tmpl_sys;
    // init starts from a copy of our fd table: keep the sysfs mount fd through its fd sweep.
    if (tmpl_sys >= 0) {
      keep.push_back(tmpl_sys);
      std::sort(keep.begin(), keep.end());
      args.keep_fds = keep.data();
      args.nkeep = static_cast<int>(keep.size());
    }
    args.init_flags = (flags & ~CLONE_NEWNET) | CLONE_PARENT;
    args.init_stack_top = init_stack.top();
    args.init_tls = tls;
    args.init_pid = -EAGAIN;
    args.init_pidfd = -1;
    Stack stage0_stack;
    pid = -1;
    if (stage0_stack.Allocate(64 * 1024)) {
      pid_t s0 = clone(Stage0InChild, stage0_stack.top(), CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &args);
      if (s0 > 0) {
        int st;
        while (waitpid(s0, &st, __WALL) < 0 && errno == EINTR) {
        }
        pid = args.init_pid;
        pidfd = args.init_pidfd;
        if (pid < 0) clone_errno = -pid;
        if (pid < 0 && WIFEXITED(st) && WEXITSTATUS(st) == 125) clone_errno = 0;  // reported on err pipe
      } else {
        clone_errno = errno;
      }
    } else {
      clone_errno = ENOMEM;
    }
    if (pid < 0 && clone_errno == 0) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      ChildReport rep;
      close(err_w);
      owned.Release(err_w);
      if (read(errp[0], &rep, sizeof rep) == static_cast<ssize_t>(sizeof rep)) return ReportToStatus(plan, rep);
      return Status::Error(ErrorCode::kENAMESPACE_SETUP, "joining the shared network namespace failed");
    }
    out->shared_netns = pid > 0;
  } else {
    pid = clone(entry, init_stack.top(), flags, &args, &pidfd, tls, nullptr);
    clone_errno = errno;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    if (isolated && (clone_errno == EPERM || clone_errno == ENOSPC || clone_errno == EINVAL)) {
      return Status::Sys(ErrorCode::kEUSERNS_UNAVAILABLE,
                         std::string("clone(2) with new user/mount/pid namespaces failed: ") +
                             strerrorname_np(clone_errno) +
                             "; unprivileged user namespaces are unavailable here (check "
                             "kernel.unprivileged_userns_clone, user.max_user_namespaces, AppArmor); "
                             "use mode 'landlock' with degraded: true",
                         "clone", clone_errno);
    }
    return Status::Sys(ErrorCode::kESPAWN, std::string("clone(2) failed: ") + strerrorname_np(clone_errno),
                       "clone", clone_errno);
  }
  owned.Add(pidfd);
  // The child's copies are all it needs; close ours so EOF on the errno pipe means "exec'd".
  for (int fd : staged) {
    owned.Release(fd);
    close(fd);
  }
  owned.Release(err_w);
  close(err_w);
  if (statp[1] >= 0) {
    owned.Release(statp[1]);
    close(statp[1]);
  }
  if (chan[1] >= 0) {
    owned.Release(chan[1]);
    close(chan[1]);
  }

  // Blocks until the command has exec'd (EOF) or reported a failure, as libuv's spawn does.
  ChildReport rep;
  Status failure;
  for (;;) {
    ssize_t n = read(errp[0], &rep, sizeof rep);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof rep)) {
      if (rep.stage == kNote) continue;  // notes are informational (see NoteBits)
      failure = ReportToStatus(plan, rep);
    }
    break;
  }
  if (!failure.ok()) {
    KillAndReap(pidfd);
    return failure;
  }
  owned.Release(pidfd);
  if (uses_init) {
    owned.Release(statp[0]);
    fcntl(statp[0], F_SETFL, O_NONBLOCK);
  }
  // The sandbox hands fds over on the channel before the command starts (they are already
  // queued). One that did not arrive: the sandbox is killed and reaped, and every fd received so
  // far is closed.
  auto handover = [&](int* fd, ErrorCode code, const char* what) -> Status {
    char byte;
    if (RecvFd(chan[0], &byte, fd, MSG_DONTWAIT) == 1 && *fd >= 0) return Status::Ok();
    KillAndReap(pidfd);
    for (int* got : {&out->pty_master_fd, &out->proxy_listener_fd, &out->seccomp_listener_fd}) {
      if (*got >= 0) close(*got);
      *got = -1;
    }
    return Status::Error(code, what);
  };
  if (chan[0] >= 0 && plan.pty_cols != 0) {
    Status st = handover(&out->pty_master_fd, ErrorCode::kESPAWN, "the sandbox did not hand over its pseudo-terminal");
    if (!st.ok()) return st;
  }
  if (chan[0] >= 0 && plan.proxy_port != 0) {
    Status st = handover(&out->proxy_listener_fd, ErrorCode::kEPROXY_START, "the sandbox did not hand over its proxy listener");
    if (!st.ok()) return st;
  }
  if (chan[0] >= 0 && plan.seccomp_listener) {
    // The command sent it before its execve.
    Status st = handover(&out->seccomp_listener_fd, ErrorCode::kESECCOMP_INSTALL, "the sandboxed command did not hand over its seccomp listener");
    if (!st.ok()) return st;
  }
  if (uses_init) {
    out->init_stack = init_stack.base;
    out->init_stack_size = init_stack.size;
    init_stack.base = MAP_FAILED;  // init runs on it until it is reaped
  }
  out->pid = pid;
  out->pidfd = pidfd;
  out->status_fd = uses_init ? statp[0] : -1;
  out->mode = plan.mode;
  return Status::Ok();
}

int ListenLoopback(uint16_t* port) noexcept {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || listen(s, 511) < 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    int e = errno;
    close(s);
    return -e;
  }
  *port = ntohs(addr.sin_port);
  return s;
}

void ReleaseInitStack(LinuxSpawnResult* res) noexcept {
  if (res->init_stack != nullptr) munmap(res->init_stack, res->init_stack_size);
  res->init_stack = nullptr;
}

bool ReadCommandStatus(const LinuxSpawnResult& res, int* code, int* signal, bool* eof) noexcept {
  int32_t st;
  ssize_t n;
  do {
    n = read(res.status_fd, &st, sizeof st);
  } while (n < 0 && errno == EINTR);
  *eof = n == 0;
  if (n != static_cast<ssize_t>(sizeof st)) return false;
  *code = -1;
  *signal = 0;
  if (WIFEXITED(st)) {
    *code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    *signal = WTERMSIG(st);
  }
  return true;
}

bool CollectExit(const LinuxSpawnResult& res, int* code, int* signal) noexcept {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(static_cast<idtype_t>(P_PIDFD), res.pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0) {
    return false;
  }
  memset(&si, 0, sizeof si);
  while (waitid(static_cast<idtype_t>(P_PIDFD), res.pidfd, &si, WEXITED) < 0 && errno == EINTR) {
  }
  *code = -1;
  *signal = 0;
  if (si.si_code == CLD_EXITED) {
    *code = si.si_status;
  } else {
    *signal = si.si_status;
  }
  return true;
}

int SignalTree(const LinuxSpawnResult& res, int sig) noexcept {
  if (res.mode != LinuxMode::kPlain) {
    // To init. Isolated: SIGKILL ends init and with it the pid namespace; other signals are
    // forwarded to the command's group. Landlock: init must stay alive to kill the tree, so
    // SIGKILL becomes its teardown signal.
    if (res.mode == LinuxMode::kLandlock && sig == SIGKILL) sig = kKillTreeSignal;
    long r = Sys(__NR_pidfd_send_signal, res.pidfd, sig, 0, 0);
    return r < 0 ? static_cast<int>(r) : 0;
  }
  if (kill(-res.pid, sig) == 0) return 0;
  long r = Sys(__NR_pidfd_send_signal, res.pidfd, sig, 0, 0);
  return r < 0 ? static_cast<int>(r) : 0;
}

namespace {
struct ProbeArgs {
  char uid_map[48];
  char gid_map[48];
};
int ProbeInChild(void* argp) {
  ProbeArgs* a = static_cast<ProbeArgs*>(argp);
  long r = WriteFileInChild("/proc/self/setgroups", "deny");
  if (r == 0 || r == -ENOENT) r = WriteFileInChild("/proc/self/uid_map", a->uid_map);
  if (r == 0) r = WriteFileInChild("/proc/self/gid_map", a->gid_map);
  if (r == 0) r = Sys(__NR_mount, 0, "/", 0, MS_REC | MS_PRIVATE, 0);
  if (r == 0) r = Sys(__NR_mount, "tmpfs", "/tmp", "tmpfs", 0, "size=4k");
  ExitInChild(r < 0 ? static_cast<int>(-r) : 0);
}
}  // namespace

int ProbeUserNamespaces(bool with_net) noexcept {
  ProbeArgs args;
  snprintf(args.uid_map, sizeof args.uid_map, "%u %u 1\n", geteuid(), geteuid());
  snprintf(args.gid_map, sizeof args.gid_map, "%u %u 1\n", getegid(), getegid());
  Stack stack;
  if (!stack.Allocate(64 * 1024)) return -ENOMEM;
  int flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | SIGCHLD;
  if (with_net) flags |= CLONE_NEWNET;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = clone(ProbeInChild, stack.top(), flags | CLONE_VM | CLONE_VFORK, &args);
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return -e;
  int st = 0;
  while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) return -WEXITSTATUS(st);
  return -ECHILD;
}

}  // namespace psb
