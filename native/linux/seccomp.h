// seccomp-bpf filter for sandboxed commands: generated from a rule table, installed in the child.
//
// Usage (see spawn_linux.cc):
//
//   std::vector<sock_filter> insns;                       // parent, before fork/clone
//   SeccompConfig cfg; cfg.net = SeccompNet::kNone; cfg.isolated = true;
//   if (int rc = BuildSeccompFilter(cfg, &insns)) return Status::Sys(..., -rc);
//   sock_fprog prog{static_cast<unsigned short>(insns.size()), insns.data()};
//   ... fork/clone ...
//   // child: caps dropped, PR_SET_NO_NEW_PRIVS set, Landlock applied; seccomp goes last
//   if (int rc = InstallSeccompInChild(&prog)) { write(errno_pipe, ...); _exit(...); }
//   execve(...);
//
// Threading: BuildSeccompFilter and SeccompSupported run in the parent, on any thread; they share
// no state. InstallSeccompInChild runs in the child between clone and execve: it makes raw
// syscalls only (raw_syscall.h: no allocation, no locks, no errno), so it is safe in a child
// cloned from multithreaded Node, CLONE_VM included. The
// filter is installed without SECCOMP_FILTER_FLAG_TSYNC because that child is single-threaded.
//
// What the filter is. The sandbox's real walls are the namespaces, the mount tree and Landlock;
// seccomp removes kernel attack surface and the paths around those walls. It is a deny list with a
// default of ALLOW: build tools, compilers, runtimes and test suites use hundreds of syscalls,
// new ones appear with every kernel and libc, and an allow list breaks them in ways that are hard
// to diagnose. Everything listed here is either not needed by development work or is a known
// bypass (ids from reference/threats.md):
//   - architecture check first: a foreign AUDIT_ARCH (i386 via int 0x80, arm32 compat) and, on
//     x86_64, any number with the x32 bit are killed, so no rule can be dodged through another
//     syscall table (NET-08, PROC-14);
//   - io_uring (NET-07, PROC-11): it opens and connects sockets and files without the syscalls
//     filtered here;
//   - ptrace, process_vm_*, pidfd_getfd, process_madvise (PROC-04, PROC-05);
//   - user namespaces and the mount API: unshare, setns, namespace flags on clone, clone3 (gets
//     ENOSYS so libc falls back to clone, whose flags a filter can read), mount and the fs*/
//     *_mount/open_tree family, pivot_root, chroot (PROC-08, PROC-09, PROC-10, FS-24);
//   - TIOCSTI and TIOCLINUX, compared on the low 32 bits of the request, because the kernel's
//     ioctl takes an unsigned int and ignores the high word (PROC-01, PROC-02, PROC-03);
//   - other kernel attack surface no build needs: bpf, perf_event_open, userfaultfd, keyrings,
//     kexec, modules, swap, reboot, acct, quotas, syslog, clock setting, fanotify, file handles,
//     iopl/ioperm/modify_ldt, uselib, vhangup, and personality changes other than PER_LINUX,
//     PER_LINUX32 and the 0xffffffff query (PROC-15);
//   - sockets by network mode (NET-01..NET-17); see SeccompNet below;
//   - host safety: prlimit64, setpriority, ioprio_set, sched_setscheduler/setparam/setattr/
//     setaffinity, migrate_pages and move_pages only on the caller itself (pid/who 0; PRIO_PGRP
//     and IOPRIO_WHO_PGRP with 0 for its own group; *_USER never), so no limit, priority or
//     placement of init or the host can be changed. A thread naming its own tid (glibc's
//     pthread_setaffinity_np, pthread_setschedparam) gets EPERM too;
//   - in Landlock mode, where no ipc namespace exists, SysV IPC and POSIX message queues, which
//     would be shared with the host (PROC-16);
//   - in Landlock mode, file attribute flags (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, file_setattr:
//     chattr's append-only, nodump, project ids), which Landlock does not govern either (FS-14);
//     the other metadata calls go to the supervisor (notify_metadata);
//   - in both modes, the ioctls that change a file or directory for good from a read-only fd
//     (FS_IOC_ENABLE_VERITY, FS_IOC_SET_ENCRYPTION_POLICY) and the fscrypt key ioctls (keyring
//     operations on the file system's keyring), on the low 32 bits (FS-14, PROC-15);
//   - in both modes, fcntl F_SETLEASE and F_SETDELEG (cmd on its low 32 bits): a lease on any
//     file the uid owns holds up host writers. Locks (flock, POSIX, OFD) are allowed and bounded
//     by teardown instead; seccomp_table.h says why.
// Denials return EPERM, except clone3 (ENOSYS).
// Left allowed on purpose: socketpair(AF_UNIX) stream IPC, send*/recv* on connected sockets and
// setsockopt/getsockopt (asyncio, libuv, Chromium and Bun need them); memfd_create + execveat
// (PROC-12: the sandbox limits what code can reach, not which code runs); pidfd_open, kill and
// pidfd_send_signal (the pid namespace, Landlock's signal scope or, below ABI 6, the signal
// supervisor bounds them, PROC-06); kcmp;
// seccomp and landlock_* (they can only add restrictions). Inherited sockets (NET-12) are the fd
// sweep's job, not this filter's.
// Tests: see seccomp.cc.
#ifndef PSB_NATIVE_LINUX_SECCOMP_H_
#define PSB_NATIVE_LINUX_SECCOMP_H_

#include <linux/filter.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace psb {

// Which sockets the command may create.
enum class SeccompNet : uint8_t {
  // socket() of every family fails with EPERM, AF_UNIX included: a pathname unix socket of a host
  // daemon cannot be filtered by path here (NET-10), nor an abstract one in Landlock mode (NET-09).
  // socketpair(AF_UNIX) works for SOCK_STREAM and SOCK_SEQPACKET, which cannot address a peer by
  // name; SOCK_DGRAM pairs are refused, as sendmsg() on one can name any host socket (NET-11).
  // bind() and listen() fail: a socketpair socket could otherwise take an abstract name in the
  // network namespace all such sandboxes share, which other sandboxes see and collide with.
  kNone,
  // Like kNone, but the proxy must be reachable over TCP.
  //   isolated: socket(AF_INET/AF_INET6) of type SOCK_STREAM or SOCK_DGRAM; the net namespace
  //             holds only lo, where the proxy listener lives. Netlink is refused (glibc's
  //             getaddrinfo copes).
  //   Landlock: socket(AF_INET/AF_INET6, SOCK_STREAM, 0 or IPPROTO_TCP) only, since Landlock's
  //             TCP rules cover neither UDP (NET-03), raw sockets nor MPTCP/SCTP; listen() fails,
  //             as listen() without bind() autobinds a port that BIND_TCP does not see (NET-13);
  //             sends with MSG_FASTOPEN fail, as they connect without a connect() call. (On 6.18,
  //             Landlock ABI 7, an MPTCP connect and a MSG_FASTOPEN sendto both reached a port
  //             that CONNECT_TCP denied.) With notify_connect, connect() is supervised by the
  //             host (supervise_connect.cc) and Landlock allows no TCP port at all.
  kProxy,
  // The host network: no socket rules. io_uring stays denied.
  kFull,
};

struct SeccompConfig {
  SeccompNet net = SeccompNet::kNone;
  // true: isolated mode (user+mnt+pid+ipc(+net) namespaces back us up).
  // false: Landlock mode (no namespaces) -> stricter filter.
  bool isolated = true;
  // network.unixSockets: socket(AF_UNIX, SOCK_STREAM|SOCK_SEQPACKET) is allowed whatever `net`
  // says (checked before the table). The filter cannot see the path a socket connects to, so the
  // planner reports that every visible pathname socket becomes connectable.
  bool unix_stream_sockets = false;
  // Landlock mode, kProxy: connect() calls with an addrlen of 16 or more (anything that can name
  // an AF_INET address) stop in SECCOMP_RET_USER_NOTIF for the host's connect supervisor
  // (supervise_connect.cc). Shorter ones are decided by the kernel at once: no INET address fits
  // (EINVAL), and unix-socket programs with short names pay no round trip. Install with
  // InstallSeccompInChild(prog, true).
  bool notify_connect = false;
  // Landlock mode: chmod/chown/utime/xattr calls (set-id modes aside, refused here) stop in
  // SECCOMP_RET_USER_NOTIF for the host's metadata supervisor (supervise_metadata.cc), which
  // carries them out inside the writable roots only. Landlock has no right for any of them.
  // Without it (no supervisor on this kernel) they run unchecked, a gap the plan lists. The same
  // supervisor counts inotify_init* and inotify_add_watch against the sandbox's share of the
  // uid's inotify limits (no user namespace holds them in this mode).
  bool notify_metadata = false;
  // Landlock mode with read-only carve-outs inside writable roots (needs notify_metadata: same
  // listener): opens for writing, creating or truncating, and every rename, unlink, rmdir, link,
  // symlink, mkdir, mknod and truncate stop in SECCOMP_RET_USER_NOTIF for the host's path
  // supervisor (supervise_paths.cc), which carries them out unless they touch a carve-out.
  bool notify_paths = false;
  // Landlock mode with deny-read paths under readable roots (needs notify_metadata): getdents64
  // and getdents stop too, and the supervisor refuses listings of denied directories (Landlock's
  // list right on a directory reaches every directory below it). Isolated mode with placeholders
  // (alone: no other class is supervised there): the supervisor leaves the placeholders' names
  // out of the listings of the directories that hold them (supervise_metadata.cc, HideRules).
  bool notify_listdir = false;
  // Landlock mode without signal scoping (ABI < 6): kill, tkill, tgkill, rt_sigqueueinfo,
  // rt_tgsigqueueinfo, pidfd_send_signal and fcntl F_SETOWN/F_SETOWN_EX stop in
  // SECCOMP_RET_USER_NOTIF for the host's signal supervisor (supervise_signals.cc), which
  // signals members of the sandbox only.
  bool notify_signals = false;
  // Landlock mode with /proc privacy (needs notify_metadata).
  // Read-only open and openat stop too, for the read supervisor
  // (supervise_reads.cc), which hides other processes' /proc entries and /proc/net.
  bool notify_reads = false;
  // Landlock mode with deny-read paths under readable roots (needs notify_metadata): the stat
  // family, statfs, access, readlink and getxattr/listxattr on a path stop too, for the stat class
  // (supervise_stats.cc), which answers as for a missing name inside a denied directory.
  bool notify_stats = false;
  // Root without a pids cgroup (either mode): clone, fork and vfork stop in SECCOMP_RET_TRACE
  // for init, the tree's tracer, which counts the sandbox's tasks and fails creations past the
  // cap with EAGAIN (spawn_trace.cc). Without a tracer the kernel fails them (ENOSYS).
  bool trace_forks = false;
};

// Parent side (may allocate). Replaces *out with the BPF program for cfg.
// Returns 0 or -errno (-EINVAL on a bad config or a null out).
int BuildSeccompFilter(const SeccompConfig& cfg, std::vector<sock_filter>* out) noexcept;

// Child side, after fork, before execve: raw syscalls only. Requires no_new_privs already set
// (returns -EPERM otherwise, rather than relying on a CAP_SYS_ADMIN the command must not keep).
// Returns 0 or -errno from seccomp(2) (prctl(2) on kernels without the seccomp syscall).
// new_listener: SECCOMP_FILTER_FLAG_NEW_LISTENER; returns the listener fd (CLOEXEC) or -errno.
int InstallSeccompInChild(const sock_fprog* prog, bool new_listener = false) noexcept;

// Parent side probe. Returns 0 when filter mode and the actions the filter uses
// (KILL_PROCESS, ERRNO) are available; otherwise -errno: -EINVAL when the kernel lacks
// CONFIG_SECCOMP(_FILTER) or SECCOMP_GET_ACTION_AVAIL (older than 4.14), -EOPNOTSUPP when an
// action is missing or the seccomp syscall itself is absent.
int SeccompSupported() noexcept;

// Parent side probe for the connect supervisor: 0 when SECCOMP_RET_USER_NOTIF, a new listener
// (tried for real in a short-lived child: a listener already in this process's filter chain makes
// it EBUSY), SECCOMP_IOCTL_NOTIF_ADDFD (Linux 5.9) and a way to read the command's memory and
// take its fds (task_access.h: -EPERM when neither works) are all there; else -errno.
int ConnectSupervisorSupported() noexcept;

// Test hook (seccomp_check.cc): runs every program BuildSeccompFilter can build through a cBPF
// interpreter, over every syscall number up to 1023 (and the x32, -1 and foreign-arch cases)
// with argument values drawn from the rule table, and compares each verdict with the rule
// table's meaning, evaluated directly. Returns the number of mismatches (0: every program says
// what the table says); *cases gets how many inputs were tried, *configs how many configs could
// be built, *first the first mismatch.
int SeccompSelfCheck(long* cases, int* configs, char* first, size_t first_len) noexcept;

}  // namespace psb

#endif  // PSB_NATIVE_LINUX_SECCOMP_H_
