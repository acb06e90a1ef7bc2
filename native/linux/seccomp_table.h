// The seccomp rule table (see seccomp.h for what the filter does and why): the kernel ABI
// constants, the syscall rows and their argument tests. Included by seccomp.cc, which turns
// the rows into classic BPF, and by seccomp_check.cc, which checks those programs against
// this table. Everything here has internal linkage.
// Tests: see seccomp.cc and seccomp_check.cc.
#ifndef PSB_NATIVE_LINUX_SECCOMP_TABLE_H_
#define PSB_NATIVE_LINUX_SECCOMP_TABLE_H_

#include <errno.h>
#include <linux/audit.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "syscall_numbers.h"

#if defined(__x86_64__)
#define PSB_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define PSB_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "seccomp filter: unsupported architecture (x86_64 and aarch64 only)"
#endif

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "seccomp filter: the argument offsets below assume a little-endian seccomp_data"
#endif

namespace psb {
namespace {

// Kernel ABI from <linux/seccomp.h>, spelled out here because this directory's own seccomp.h
// shadows that header whenever native/ is on the include path.
constexpr uint32_t kSeccompRetKillProcess = 0x80000000u;
constexpr uint32_t kSeccompRetErrno = 0x00050000u;
constexpr uint32_t kSeccompRetAllow = 0x7fff0000u;
constexpr uint32_t kSeccompRetUserNotif = 0x7fc00000u;
constexpr uint32_t kSeccompRetTrace = 0x7ff00000u;
constexpr unsigned kSeccompFilterFlagNewListener = 1u << 3;
// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (5.19): once the supervisor has received a notification,
// only a fatal signal interrupts the waiting call.
constexpr unsigned kSeccompFilterFlagWaitKillableRecv = 1u << 5;
constexpr uint32_t kSeccompRetData = 0x0000ffffu;
constexpr unsigned kSeccompModeFilter = 2;       // prctl(PR_SET_SECCOMP, ...)
constexpr unsigned kSeccompSetModeFilter = 1;    // seccomp(2) operations
constexpr unsigned kSeccompGetActionAvail = 2;

struct SeccompData {  // struct seccomp_data
  int32_t nr;
  uint32_t arch;
  uint64_t instruction_pointer;
  uint64_t args[6];
};
static_assert(sizeof(SeccompData) == 64, "struct seccomp_data layout");

// A row whose syscall this architecture lacks carries kSkip and is left out of the program.
constexpr int kSkip = -1;

// Syscalls that exist on x86_64 only.
#ifdef __NR_iopl
constexpr int kNrIopl = __NR_iopl;
#else
constexpr int kNrIopl = kSkip;
#endif
#ifdef __NR_ioperm
constexpr int kNrIoperm = __NR_ioperm;
#else
constexpr int kNrIoperm = kSkip;
#endif
#ifdef __NR_modify_ldt
constexpr int kNrModifyLdt = __NR_modify_ldt;
#else
constexpr int kNrModifyLdt = kSkip;
#endif
#ifdef __NR_uselib
constexpr int kNrUselib = __NR_uselib;
#else
constexpr int kNrUselib = kSkip;
#endif

#ifdef __NR_open
constexpr int kNrOpen = __NR_open;
constexpr int kNrCreat = __NR_creat;
constexpr int kNrChmod = __NR_chmod;
constexpr int kNrMknod = __NR_mknod;
constexpr int kNrChown = __NR_chown;
constexpr int kNrLchown = __NR_lchown;
constexpr int kNrUtime = __NR_utime;
constexpr int kNrUtimes = __NR_utimes;
constexpr int kNrFutimesat = __NR_futimesat;
constexpr int kNrInotifyInit = __NR_inotify_init;
constexpr int kNrRename = __NR_rename;
constexpr int kNrUnlink = __NR_unlink;
constexpr int kNrRmdir = __NR_rmdir;
constexpr int kNrMkdir = __NR_mkdir;
constexpr int kNrLink = __NR_link;
constexpr int kNrSymlink = __NR_symlink;
constexpr int kNrGetdents = __NR_getdents;
#else
constexpr int kNrOpen = kSkip;
constexpr int kNrCreat = kSkip;
constexpr int kNrChmod = kSkip;
constexpr int kNrMknod = kSkip;
constexpr int kNrChown = kSkip;
constexpr int kNrLchown = kSkip;
constexpr int kNrUtime = kSkip;
constexpr int kNrUtimes = kSkip;
constexpr int kNrFutimesat = kSkip;
constexpr int kNrInotifyInit = kSkip;
constexpr int kNrRename = kSkip;
constexpr int kNrUnlink = kSkip;
constexpr int kNrRmdir = kSkip;
constexpr int kNrMkdir = kSkip;
constexpr int kNrLink = kSkip;
constexpr int kNrSymlink = kSkip;
constexpr int kNrGetdents = kSkip;
#endif
#ifdef __NR_fork
constexpr int kNrFork = __NR_fork;  // x86_64 only: aarch64 forks through clone
constexpr int kNrVfork = __NR_vfork;
#else
constexpr int kNrFork = kSkip;
constexpr int kNrVfork = kSkip;
#endif
#ifdef __NR_stat
constexpr int kNrStat = __NR_stat, kNrLstat = __NR_lstat, kNrAccess = __NR_access, kNrReadlink = __NR_readlink;
#else
constexpr int kNrStat = kSkip, kNrLstat = kSkip, kNrAccess = kSkip, kNrReadlink = kSkip;
#endif
#ifdef __NR_renameat
constexpr int kNrRenameat = __NR_renameat;  // not on aarch64 (renameat2 only)
#else
constexpr int kNrRenameat = kSkip;
#endif

// x86_64 marks x32 syscalls with this bit in the number; x32 has its own table, so every rule
// below would be sidestepped by it.
constexpr uint32_t kX32SyscallBit = 0x40000000u;

// Every namespace flag clone(2) understands; CLONE_NEWTIME only matters for clone3/unshare, but
// bit 0x80 is never part of a valid exit signal, so testing it costs nothing.
constexpr uint32_t kCloneNewTime = 0x00000080u;
constexpr uint32_t kCloneNamespaceFlags = 0x00020000u /* CLONE_NEWNS */ |
                                          0x02000000u /* CLONE_NEWCGROUP */ |
                                          0x04000000u /* CLONE_NEWUTS */ |
                                          0x08000000u /* CLONE_NEWIPC */ |
                                          0x10000000u /* CLONE_NEWUSER */ |
                                          0x20000000u /* CLONE_NEWPID */ |
                                          0x40000000u /* CLONE_NEWNET */ | kCloneNewTime;
// CLONE_UNTRACED: a child the tracer cannot follow. Only the kernel's own threads need it; under
// the traced process cap (spawn_trace.cc) it would make a child the count never sees. Refused in
// every mode.
constexpr uint32_t kCloneUntraced = 0x00800000u;

constexpr uint32_t kPerLinux = 0x0000u;
constexpr uint32_t kPerLinux32 = 0x0008u;
constexpr uint32_t kPersonalityQuery = 0xffffffffu;

// socket(2) type argument: the low nibble is the type, the rest are SOCK_CLOEXEC/SOCK_NONBLOCK.
constexpr uint32_t kSockTypeMask = 0xfu;

// send*(2) flag that makes a TCP send connect first (TCP Fast Open).
constexpr uint32_t kMsgFastOpen = 0x20000000u;

constexpr uint32_t kAllow = kSeccompRetAllow;
constexpr uint32_t kEperm = kSeccompRetErrno | (EPERM & kSeccompRetData);
constexpr uint32_t kEnosys = kSeccompRetErrno | (ENOSYS & kSeccompRetData);
constexpr uint32_t kKill = kSeccompRetKillProcess;
// A table action: USER_NOTIF when the config has the metadata supervisor, else ALLOW (the plan
// then lists the gap). Never a real return value (SECCOMP_RET_TRAP's range, unused here).
constexpr uint32_t kSupervise = 0x00030000u;
// Another table action: USER_NOTIF when the config has the path supervisor (read-only carve-outs
// inside writable roots, supervise_paths.cc), else ALLOW. Never a real return value either.
constexpr uint32_t kSupervisePaths = 0x00030001u;
// The same for directory listings: USER_NOTIF when the config asks the supervisor to judge them
// (SeccompConfig::notify_listdir: deny-read paths under readable roots in Landlock mode, isolated
// mode's placeholders), else ALLOW.
constexpr uint32_t kSuperviseList = 0x00030002u;
// The same for the signal supervisor (SeccompConfig::notify_signals, supervise_signals.cc):
// USER_NOTIF when the config has it, else ALLOW (Landlock's signal scope, ABI 6+, holds then).
constexpr uint32_t kSuperviseSignals = 0x00030003u;
// The same for read-only opens (SeccompConfig::notify_reads, /proc privacy, supervise_reads.cc):
// USER_NOTIF when the config asks for it, else ALLOW.
constexpr uint32_t kSuperviseReads = 0x00030004u;
// With /proc privacy (notify_reads) EPERM, else ALLOW: what would show the host's tables by
// another way than /proc (netlink's socket diagnostics, `ss`).
constexpr uint32_t kPrivacyDeny = 0x00030005u;
// Process creation (clone, fork, vfork) with the traced process cap (SeccompConfig::trace_forks,
// spawn_trace.cc): SECCOMP_RET_TRACE, so that init counts it before it happens; else ALLOW.
// Without a tracer RET_TRACE fails the call (ENOSYS): a process that escaped the trace cannot fork.
constexpr uint32_t kTraceForks = 0x00030006u;
// Calls that tell whether a name exists (the stat family, statfs, access, readlink,
// getxattr/listxattr on a path): USER_NOTIF when the config asks the stat class to answer them
// (SeccompConfig::notify_stats: deny-read paths under readable roots in Landlock mode,
// supervise_stats.cc), else ALLOW.
constexpr uint32_t kSuperviseStats = 0x00030007u;
// fcntl(2) commands that name a process to receive SIGIO/SIGURG (and F_SETSIG's signal) later.
constexpr uint32_t kFSetOwn = 8u;
constexpr uint32_t kFSetOwnEx = 15u;

// File attribute flag ioctls (chattr): _IOW('f', 2, long), its 32-bit spelling _IOW('f', 2, int)
// (some file systems take it natively too) and _IOW('X', 32, struct fsxattr).
constexpr uint32_t kFsIocSetflags = 0x40086602u;
constexpr uint32_t kFsIoc32Setflags = 0x40046602u;
constexpr uint32_t kFsIocFssetxattr = 0x401c5820u;
// Other metadata an owner may change through a fd opened read-only, outside the writable roots
// too (FS-14): the inode generation (FS_IOC_SETVERSION _IOW('v', 2, long), ext4's own
// _IOW('f', 4, long), and their int spellings), ext4's block-map-to-extents conversion
// (EXT4_IOC_MIGRATE _IO('f', 9)), FAT's attribute byte (FAT_IOCTL_SET_ATTRIBUTES _IOW('r', 0x11,
// __u32): read-only, hidden, system), and btrfs's subvolume flags and received UUID
// (BTRFS_IOC_SUBVOL_SETFLAGS _IOW(0x94, 26, __u64), BTRFS_IOC_SET_RECEIVED_SUBVOL
// _IOWR(0x94, 37, 200 bytes)).
constexpr uint32_t kFsIocSetversion = 0x40087602u;
constexpr uint32_t kFsIoc32Setversion = 0x40047602u;
constexpr uint32_t kExt4IocSetversion = 0x40086604u;
constexpr uint32_t kExt4Ioc32Setversion = 0x40046604u;
constexpr uint32_t kExt4IocMigrate = 0x00006609u;
constexpr uint32_t kFatIoctlSetAttributes = 0x40047211u;
constexpr uint32_t kBtrfsIocSubvolSetflags = 0x4008941au;
constexpr uint32_t kBtrfsIocSetReceivedSubvol = 0xc0c89425u;
// Changes for good that need no write access to the file, both modes (FS-14): fs-verity
// (FS_IOC_ENABLE_VERITY _IOW('f', 133, struct fsverity_enable_arg)) makes a file the uid owns
// immutable for the rest of its life, from an fd opened read-only (the kernel wants exactly that);
// an encryption policy (FS_IOC_SET_ENCRYPTION_POLICY _IOR('f', 19, struct fscrypt_policy_v1); v2
// policies use the same number, the version is the struct's first byte, and there is no _EX
// setter) binds an empty directory the uid owns to a key for good. The fscrypt key ioctls
// (FS_IOC_ADD_ENCRYPTION_KEY _IOWR('f', 23, 80 bytes), FS_IOC_REMOVE_ENCRYPTION_KEY and its
// _ALL_USERS form _IOWR('f', 24/25, 64 bytes)) change no file, but are keyring operations on the
// file system's keyring, charged to and keyed by the host uid: removing the uid's claim on a key
// locks the host user's unlocked encrypted directories. Keyring syscalls are refused (PROC-15);
// so are these. The read-only siblings (the GET_* policy, key status, verity digest and metadata
// reads) stay allowed. In isolated mode the read-only mounts already stop the first two outside
// the writable roots (EROFS); inside them nothing a build does needs them.
constexpr uint32_t kFsIocEnableVerity = 0x40806685u;
constexpr uint32_t kFsIocSetEncryptionPolicy = 0x800c6613u;
constexpr uint32_t kFsIocAddEncryptionKey = 0xc0506617u;
constexpr uint32_t kFsIocRemoveEncryptionKey = 0xc0406618u;
constexpr uint32_t kFsIocRemoveEncryptionKeyAllUsers = 0xc0406619u;

// fcntl(2) commands (the kernel's cmd is an unsigned int: the low word is exact). A lease
// (F_SETLEASE) or a delegation (F_SETDELEG, Linux 6.19+: the same lease machinery, directories
// too) on a file the uid owns, readable is enough, makes every host open for writing (F_RDLCK) or
// at all (F_WRLCK) wait for up to /proc/sys/fs/lease-break-time, again after every re-take; an
// O_NONBLOCK open fails EWOULDBLOCK. The kernel asks only for ownership, not a write-open, and
// neither read-only mounts nor Landlock govern it; no build needs it. Refused in both modes,
// F_UNLCK too (there is nothing to release). F_GETLEASE, F_GETDELEG stay allowed.
//
// Locks are not refused (flock, F_SETLK/F_SETLKW, F_OFD_SETLK/F_OFD_SETLKW; lockf is fcntl). The
// kernel lets a read-only fd take a flock (shared or exclusive) and POSIX/OFD read locks, on
// read-only mounts too, so a run can hold such a lock on any host file it can read and stall host
// tools that lock it (sqlite writers, cargo, pip) for as long as the run lives. That is bounded,
// not refused: every lock dies with the fd that holds it, and teardown kills every process of
// the run (the pid namespace; Landlock mode's subreaper init) before the exit is reported. (An fd
// outlives the run only in a host process that accepts one over a unix socket, which network
// 'none' without unixSockets cannot reach.) Why not refuse: a filter cannot see what an fd
// names, and the rule a supervisor could judge by fd ("lock only
// through an fd open for writing, or under a writable root") is not enforceable for POSIX locks:
// they belong to the calling process, so a supervisor can only judge and answer CONTINUE, and
// the kernel then looks the fd up again: another thread (or a CLONE_FILES sibling) that dup2()s
// a host file's fd over the judged one in between gets its lock. flock and OFD locks belong to
// the open file, so a supervisor could take them itself on the very file it judged, but then it
// must also emulate blocking waits and their interruption by signals. And every lock would pay
// a round trip: 23.5 us per supervised call here, while sqlite made 13,013 lock calls for 1,000
// one-row write transactions and 1,000 reads that take 0.16 s on tmpfs unsandboxed (13,013 x
// 23.5 us is 0.31 s more: about 3x). Isolated mode has no supervisor at all. Refusing read-only locks outright would break reading any sqlite database
// and `flock(1)`, which opens its lock file read-only.
constexpr uint32_t kFSetLease = 1024u;   // F_LINUX_SPECIFIC_BASE + 0
constexpr uint32_t kFSetDeleg = 1040u;   // F_LINUX_SPECIFIC_BASE + 16
#ifdef __NR_fcntl64
constexpr int kNrFcntl64 = __NR_fcntl64;  // 32-bit tables only; the arch check kills those here
#else
constexpr int kNrFcntl64 = kSkip;
#endif

// ---- The rule table -------------------------------------------------------------------------

// When a row applies: a set of network modes and a set of isolation modes; both must match.
enum : uint8_t { kNetNone = 1, kNetProxy = 2, kNetFull = 4, kAnyNet = 7 };
enum : uint8_t { kIsolated = 1, kLandlock = 2, kAnyMode = 3 };

// Tests read only the low 32 bits of an argument. Every argument tested below is an int or
// unsigned int in the kernel (clone's flags go through lower_32_bits()), so the low word is exactly
// what the kernel acts on; a 64-bit compare would let `TIOCSTI | 1 << 32` through (PROC-02).
enum class Op : uint8_t {
  kUnused,
  kIn,      // (low 32 bits of arg & mask) equals one of values[0..count)
  kAnyBit,  // (low 32 bits of arg & mask) != 0
};

constexpr int kMaxValues = 8;

struct ArgTest {
  Op op;
  uint8_t arg;
  uint32_t mask;
  uint8_t count;
  uint32_t values[kMaxValues];
};

constexpr ArgTest In(uint8_t arg, uint32_t mask, uint32_t a) {
  return ArgTest{Op::kIn, arg, mask, 1, {a}};
}
constexpr ArgTest In(uint8_t arg, uint32_t mask, uint32_t a, uint32_t b) {
  return ArgTest{Op::kIn, arg, mask, 2, {a, b}};
}
constexpr ArgTest In(uint8_t arg, uint32_t mask, uint32_t a, uint32_t b, uint32_t c) {
  return ArgTest{Op::kIn, arg, mask, 3, {a, b, c}};
}
// Up to kMaxValues values (a longer list leaves count 0, which the generator refuses).
constexpr ArgTest InList(uint8_t arg, uint32_t mask, std::initializer_list<uint32_t> vs) {
  ArgTest t{Op::kIn, arg, mask, 0, {}};
  if (vs.size() > kMaxValues) return t;
  for (uint32_t v : vs) t.values[t.count++] = v;
  return t;
}
constexpr ArgTest AnyBit(uint8_t arg, uint32_t mask) {
  return ArgTest{Op::kAnyBit, arg, mask, 0, {}};
}

constexpr uint32_t kAll = 0xffffffffu;
constexpr uint32_t kSetIdBits = 06000;                // S_ISUID | S_ISGID
constexpr uint32_t kCreateFlags = 0100 | 020000000;   // O_CREAT | __O_TMPFILE
// An open that can change a file or a directory's entries: O_WRONLY | O_RDWR | O_CREAT | O_TRUNC
// (O_TMPFILE needs O_WRONLY or O_RDWR). A read-only open never has any of these bits.
constexpr uint32_t kWriteOpenFlags = 01 | 02 | 0100 | 01000;
// O_PATH (x86_64 and arm64, the architectures this filter is built for): such an open reads
// nothing and checks no access; anything later read through the fd is a new open.
constexpr uint32_t kOpenPath = 010000000;
constexpr uint32_t kNetlinkSockDiag = 4;  // NETLINK_SOCK_DIAG (NETLINK_INET_DIAG)
constexpr int kMaxTests = 3;

// A clause matches when all of its tests pass (an empty clause never matches).
struct Clause {
  ArgTest tests[kMaxTests];
  uint32_t action;
};

constexpr int kMaxClauses = 3;

// One syscall's rule: the first matching clause decides, else `otherwise`. A row without clauses
// is an unconditional `otherwise`. For one config at most one row per syscall may apply.
struct Rule {
  int nr;
  uint8_t nets;
  uint8_t modes;
  uint32_t otherwise;
  Clause clauses[kMaxClauses];
};

constexpr Rule Deny(int nr, uint8_t nets = kAnyNet, uint8_t modes = kAnyMode) {
  return Rule{nr, nets, modes, kEperm, {}};
}
constexpr Rule When(int nr, uint8_t nets, uint8_t modes, uint32_t otherwise, Clause a,
                    Clause b = Clause{}, Clause c = Clause{}) {
  return Rule{nr, nets, modes, otherwise, {a, b, c}};
}

constexpr Rule kRules[] = {
    // NET-07, PROC-11: io_uring performs socket, connect, open... without those syscalls.
    Deny(__NR_io_uring_setup),
    Deny(__NR_io_uring_enter),
    Deny(__NR_io_uring_register),

    // PROC-04, PROC-05: other processes' memory and fds.
    Deny(__NR_ptrace),
    Deny(__NR_process_vm_readv),
    Deny(__NR_process_vm_writev),
    Deny(__NR_pidfd_getfd),
    Deny(__NR_process_madvise),

    // PROC-08, PROC-09, PROC-10: namespaces, the old and new mount API, chroot.
    Deny(__NR_unshare),
    Deny(__NR_setns),
    When(__NR_clone, kAnyNet, kAnyMode, kTraceForks, Clause{{AnyBit(0, kCloneNamespaceFlags | kCloneUntraced)}, kEperm}),
    Rule{kNrFork, kAnyNet, kAnyMode, kTraceForks, {}},
    Rule{kNrVfork, kAnyNet, kAnyMode, kTraceForks, {}},
    // clone_args lives in memory a filter cannot read: make libc fall back to clone().
    Rule{__NR_clone3, kAnyNet, kAnyMode, kEnosys, {}},
    Deny(__NR_mount),
    Deny(__NR_umount2),
    Deny(__NR_pivot_root),
    Deny(__NR_chroot),
    Deny(__NR_fsopen),
    Deny(__NR_fsconfig),
    Deny(__NR_fsmount),
    Deny(__NR_fspick),
    Deny(__NR_move_mount),
    Deny(__NR_open_tree),
    Deny(__NR_open_tree_attr),
    Deny(__NR_mount_setattr),

    // PROC-01, PROC-02, PROC-03: terminal injection. The kernel's ioctl() takes an unsigned int
    // request, so the low 32 bits are what it acts on; In() compares exactly those.
    // Both modes: fs-verity, encryption policies and fscrypt keys (FS-14, PROC-15; see above).
    When(__NR_ioctl, kAnyNet, kIsolated, kAllow,
         Clause{{InList(1, kAll, {TIOCSTI, TIOCLINUX, kFsIocEnableVerity, kFsIocSetEncryptionPolicy, kFsIocAddEncryptionKey,
                                  kFsIocRemoveEncryptionKey, kFsIocRemoveEncryptionKeyAllUsers})},
                kEperm}),
    // Landlock mode adds the file attribute flags (FS-14): Landlock governs none of them.
    When(__NR_ioctl, kAnyNet, kLandlock, kAllow,
         Clause{{InList(1, kAll, {TIOCSTI, TIOCLINUX, kFsIocSetflags, kFsIoc32Setflags, kFsIocFssetxattr, kFsIocSetversion,
                                  kFsIoc32Setversion, kExt4IocSetversion})},
                kEperm},
         Clause{{InList(1, kAll, {kExt4Ioc32Setversion, kExt4IocMigrate, kFatIoctlSetAttributes, kBtrfsIocSubvolSetflags,
                                  kBtrfsIocSetReceivedSubvol, kFsIocEnableVerity, kFsIocSetEncryptionPolicy})},
                kEperm},
         Clause{{InList(1, kAll, {kFsIocAddEncryptionKey, kFsIocRemoveEncryptionKey, kFsIocRemoveEncryptionKeyAllUsers})},
                kEperm}),
    // Leases and delegations on host files (see kFSetLease above), both modes.
    When(__NR_fcntl, kAnyNet, kIsolated, kAllow, Clause{{In(1, kAll, kFSetLease, kFSetDeleg)}, kEperm}),
    When(kNrFcntl64, kAnyNet, kIsolated, kAllow, Clause{{In(1, kAll, kFSetLease, kFSetDeleg)}, kEperm}),
    // Landlock mode: F_SETOWN/F_SETOWN_EX name the process that later gets SIGIO/SIGURG, a signal
    // to anyone by pid; the signal supervisor judges them (kSuperviseSignals) where Landlock has
    // no signal scope.
    When(__NR_fcntl, kAnyNet, kLandlock, kAllow, Clause{{In(1, kAll, kFSetLease, kFSetDeleg)}, kEperm},
         Clause{{In(1, kAll, kFSetOwn, kFSetOwnEx)}, kSuperviseSignals}),
    When(kNrFcntl64, kAnyNet, kLandlock, kAllow, Clause{{In(1, kAll, kFSetLease, kFSetDeleg)}, kEperm},
         Clause{{In(1, kAll, kFSetOwn, kFSetOwnEx)}, kSuperviseSignals}),
    Deny(__NR_file_setattr, kAnyNet, kLandlock),

    // PROC-15: kernel attack surface no build or test needs.
    Deny(__NR_bpf),
    Deny(__NR_perf_event_open),
    Deny(__NR_userfaultfd),
    Deny(__NR_add_key),
    Deny(__NR_request_key),
    Deny(__NR_keyctl),
    Deny(__NR_kexec_load),
    Deny(__NR_kexec_file_load),
    Deny(__NR_init_module),
    Deny(__NR_finit_module),
    Deny(__NR_delete_module),
    Deny(__NR_swapon),
    Deny(__NR_swapoff),
    Deny(__NR_reboot),
    Deny(__NR_acct),
    Deny(__NR_quotactl),
    Deny(__NR_quotactl_fd),
    Deny(__NR_lookup_dcookie),
    Deny(__NR_nfsservctl),
    Deny(__NR_vhangup),
    Deny(__NR_syslog),
    Deny(__NR_name_to_handle_at),
    Deny(__NR_open_by_handle_at),
    Deny(__NR_fanotify_init),
    Deny(__NR_settimeofday),
    Deny(__NR_clock_settime),
    Deny(__NR_adjtimex),
    Deny(__NR_clock_adjtime),
    Deny(kNrIopl),
    Deny(kNrIoperm),
    Deny(kNrModifyLdt),
    Deny(kNrUselib),
    // READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE and the other flags only weaken the process; allow the
    // query and the two plain personalities that runtimes set.
    When(__NR_personality, kAnyNet, kAnyMode, kEperm,
         Clause{{In(0, kAll, kPerLinux, kPerLinux32, kPersonalityQuery)}, kAllow}),

    // Host safety: resource limits, priorities, scheduling and I/O priority of other processes.
    // In Landlock mode the Node host is visible and has the command's uid, and in both modes init
    // (which shares the host's address space) does: prlimit(host, RLIMIT_NOFILE, 0) or
    // RLIMIT_CPU 1 s would kill the host, a lowered init limit defeats teardown, and nice/ioprio/
    // affinity starve it. The kernel allows all of these for the same uid, and neither Landlock
    // nor the pid namespace stops them. Only the caller itself may be named: pid/who 0 (glibc's
    // setrlimit, nice and friends pass 0). PRIO_PGRP/IOPRIO_WHO_PGRP with 0 is the caller's own
    // group (setsid made it the sandbox's); PRIO_USER/IOPRIO_WHO_USER reach every process of the
    // uid and are refused. All these arguments are ints in the kernel: the low word is exact.
    When(__NR_prlimit64, kAnyNet, kAnyMode, kEperm, Clause{{In(0, kAll, 0)}, kAllow}),
    When(__NR_setpriority, kAnyNet, kAnyMode, kEperm,
         Clause{{In(0, kAll, 0 /* PRIO_PROCESS */, 1 /* PRIO_PGRP */), In(1, kAll, 0)}, kAllow}),
    When(__NR_ioprio_set, kAnyNet, kAnyMode, kEperm,
         Clause{{In(0, kAll, 1 /* IOPRIO_WHO_PROCESS */, 2 /* IOPRIO_WHO_PGRP */), In(1, kAll, 0)}, kAllow}),
    When(__NR_sched_setscheduler, kAnyNet, kAnyMode, kEperm, Clause{{In(0, kAll, 0)}, kAllow}),
    When(__NR_sched_setparam, kAnyNet, kAnyMode, kEperm, Clause{{In(0, kAll, 0)}, kAllow}),
    When(__NR_sched_setattr, kAnyNet, kAnyMode, kEperm, Clause{{In(0, kAll, 0)}, kAllow}),
    When(__NR_sched_setaffinity, kAnyNet, kAnyMode, kEperm, Clause{{In(0, kAll, 0)}, kAllow}),
    // Moving another process's pages between NUMA nodes (same uid suffices): self only.
    When(__NR_migrate_pages, kAnyNet, kAnyMode, kEperm, Clause{{In(0, kAll, 0)}, kAllow}),
    When(__NR_move_pages, kAnyNet, kAnyMode, kEperm, Clause{{In(0, kAll, 0)}, kAllow}),

    // FS-25: no setuid/setgid file may be made inside (it would be honoured outside later, and as
    // root it would be setuid-root). Modes are unsigned ints, tested on their low word. openat2's
    // mode sits in memory a filter cannot read: ENOSYS makes callers fall back to openat.
    // FS-14 in Landlock mode: the other modes, and every chown, utime and xattr change, go to the
    // metadata supervisor, which carries them out inside the writable roots only (kSupervise).
    When(kNrChmod, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(1, kSetIdBits)}, kEperm}),
    When(__NR_fchmod, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(1, kSetIdBits)}, kEperm}),
    When(__NR_fchmodat, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(2, kSetIdBits)}, kEperm}),
    When(__NR_fchmodat2, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(2, kSetIdBits)}, kEperm}),
    When(kNrChmod, kAnyNet, kLandlock, kSupervise, Clause{{AnyBit(1, kSetIdBits)}, kEperm}),
    When(__NR_fchmod, kAnyNet, kLandlock, kSupervise, Clause{{AnyBit(1, kSetIdBits)}, kEperm}),
    When(__NR_fchmodat, kAnyNet, kLandlock, kSupervise, Clause{{AnyBit(2, kSetIdBits)}, kEperm}),
    When(__NR_fchmodat2, kAnyNet, kLandlock, kSupervise, Clause{{AnyBit(2, kSetIdBits)}, kEperm}),
    Rule{kNrChown, kAnyNet, kLandlock, kSupervise, {}},
    Rule{kNrLchown, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_fchown, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_fchownat, kAnyNet, kLandlock, kSupervise, {}},
    Rule{kNrUtime, kAnyNet, kLandlock, kSupervise, {}},
    Rule{kNrUtimes, kAnyNet, kLandlock, kSupervise, {}},
    Rule{kNrFutimesat, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_utimensat, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_setxattr, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_lsetxattr, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_fsetxattr, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_setxattrat, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_removexattr, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_lremovexattr, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_fremovexattr, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_removexattrat, kAnyNet, kLandlock, kSupervise, {}},
    // Without a user namespace the uid's inotify limits are the host's: the supervisor counts
    // the sandbox's instances and watches against its share (ROB-12).
    Rule{kNrInotifyInit, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_inotify_init1, kAnyNet, kLandlock, kSupervise, {}},
    Rule{__NR_inotify_add_watch, kAnyNet, kLandlock, kSupervise, {}},
    // Landlock's list right on a directory covers every directory below it, so a deny-read
    // directory under a listable one could be listed: the supervisor refuses listings of those
    // (supervise_metadata.cc, kListDir). Isolated mode: the names of its placeholders are left
    // out of the listings of the directories that hold them (supervise_metadata.cc, HideRules).
    Rule{__NR_getdents64, kAnyNet, kAnyMode, kSuperviseList, {}},
    Rule{kNrGetdents, kAnyNet, kAnyMode, kSuperviseList, {}},
    // Landlock does not check a lookup, a stat, access or readlink: the names inside a deny-read
    // directory could be guessed and their sizes and times read. The stat class answers these
    // as for a missing name there (supervise_stats.cc).
    Rule{kNrStat, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{kNrLstat, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_newfstatat, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_statx, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{kNrAccess, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_faccessat, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_faccessat2, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{kNrReadlink, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_readlinkat, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_getxattr, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_lgetxattr, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_listxattr, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_llistxattr, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_getxattrat, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_listxattrat, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_statfs, kAnyNet, kLandlock, kSuperviseStats, {}},
    Rule{__NR_file_getattr, kAnyNet, kLandlock, kSuperviseStats, {}},
    When(kNrCreat, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(1, kSetIdBits)}, kEperm}),
    When(kNrOpen, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(1, kCreateFlags), AnyBit(2, kSetIdBits)}, kEperm}),
    When(__NR_openat, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(2, kCreateFlags), AnyBit(3, kSetIdBits)}, kEperm}),
    Rule{__NR_openat2, kAnyNet, kAnyMode, kEnosys, {}},
    When(kNrMknod, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(1, kSetIdBits)}, kEperm}),
    When(__NR_mknodat, kAnyNet, kIsolated, kAllow, Clause{{AnyBit(2, kSetIdBits)}, kEperm}),
    // Read-only carve-outs inside writable roots in Landlock mode (a Landlock right on a
    // directory covers everything below it): every call that can create, replace, remove or write
    // a name goes to the path supervisor (supervise_paths.cc), which carries it out on a pinned
    // parent directory unless it touches a carve-out. Opens only when their flags (a register)
    // ask for writing, creating or truncating: read-only opens stay in the kernel, unsupervised.
    // openat2 (flags in memory) is ENOSYS above in both modes; libc falls back to openat.
    When(kNrCreat, kAnyNet, kLandlock, kSupervisePaths, Clause{{AnyBit(1, kSetIdBits)}, kEperm}),
    // With /proc privacy (notify_reads) the read-only ones go to the read supervisor instead
    // (supervise_reads.cc): a filter cannot see which file a path names.
    // O_PATH opens stay the kernel's: they open nothing (and SECCOMP_IOCTL_NOTIF_ADDFD cannot
    // hand an O_PATH fd over); every read through one (openat on it, /proc/self/fd/N) comes here.
    When(kNrOpen, kAnyNet, kLandlock, kSuperviseReads, Clause{{AnyBit(1, kCreateFlags), AnyBit(2, kSetIdBits)}, kEperm},
         Clause{{AnyBit(1, kWriteOpenFlags)}, kSupervisePaths}, Clause{{AnyBit(1, kOpenPath)}, kAllow}),
    When(__NR_openat, kAnyNet, kLandlock, kSuperviseReads, Clause{{AnyBit(2, kCreateFlags), AnyBit(3, kSetIdBits)}, kEperm},
         Clause{{AnyBit(2, kWriteOpenFlags)}, kSupervisePaths}, Clause{{AnyBit(2, kOpenPath)}, kAllow}),
    When(kNrMknod, kAnyNet, kLandlock, kSupervisePaths, Clause{{AnyBit(1, kSetIdBits)}, kEperm}),
    When(__NR_mknodat, kAnyNet, kLandlock, kSupervisePaths, Clause{{AnyBit(2, kSetIdBits)}, kEperm}),
    Rule{kNrRename, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{kNrRenameat, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{__NR_renameat2, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{kNrUnlink, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{__NR_unlinkat, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{kNrRmdir, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{kNrMkdir, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{__NR_mkdirat, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{kNrLink, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{__NR_linkat, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{kNrSymlink, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{__NR_symlinkat, kAnyNet, kLandlock, kSupervisePaths, {}},
    Rule{__NR_truncate, kAnyNet, kLandlock, kSupervisePaths, {}},

    // NET-01..NET-06, NET-09, NET-10, NET-17: socket creation by network mode.
    Deny(__NR_socket, kNetNone),
    When(__NR_socket, kNetProxy, kIsolated, kEperm,
         Clause{{In(0, kAll, AF_INET, AF_INET6), In(1, kSockTypeMask, SOCK_STREAM, SOCK_DGRAM)},
                kAllow}),
    // Landlock's TCP rule for the proxy's port opens it on every address, and connect()
    // addresses are out of BPF's reach: the connect supervisor (3b below) closes that for IPv4
    // where the kernel allows; else it is a listed gap. The proxy is at 127.0.0.1, so IPv6 is
    // refused outright either way: that closes the port on ::1 and on every IPv6 host.
    When(__NR_socket, kNetProxy, kLandlock, kEperm,
         Clause{{In(0, kAll, AF_INET), In(1, kSockTypeMask, SOCK_STREAM), In(2, kAll, 0, IPPROTO_TCP)},
                kAllow}),
    // With the network full, Landlock mode shares the host's network namespace: with /proc
    // privacy, netlink's socket diagnostics (NETLINK_SOCK_DIAG, what `ss` reads instead of
    // /proc/net) are refused too. (With 'none' and 'proxy' no netlink socket is made at all.)
    When(__NR_socket, kNetFull, kLandlock, kAllow, Clause{{In(0, kAll, AF_NETLINK), In(2, kAll, kNetlinkSockDiag)}, kPrivacyDeny}),
    // NET-11: a SOCK_DGRAM pair could sendmsg() to any host datagram socket by name.
    When(__NR_socketpair, kNetNone | kNetProxy, kAnyMode, kEperm,
         Clause{{In(0, kAll, AF_UNIX), In(1, kSockTypeMask, SOCK_STREAM, SOCK_SEQPACKET)}, kAllow}),
    // NET-09 across sandboxes: every network: 'none' sandbox shares one empty network namespace,
    // where abstract unix names are a shared board. A socketpair socket can still bind() one
    // (visible in /proc/net/unix, EADDRINUSE for another sandbox): a channel between sandboxes
    // with different read rights. With socket() refused, no socket here ever needs a name.
    Deny(__NR_bind, kNetNone),
    // Landlock mode with carve-outs: bind() of a unix socket makes a socket file, inside a carve-out
    // too (MAKE_SOCK is part of a writable root's rights); the path supervisor binds instead.
    Rule{__NR_bind, kNetProxy | kNetFull, kLandlock, kSupervisePaths, {}},
    Deny(__NR_listen, kNetNone),
    // NET-13: listen() autobinds a port that Landlock's BIND_TCP never sees.
    Deny(__NR_listen, kNetProxy, kLandlock),
    // TCP Fast Open connects from inside sendto/sendmsg, not through connect().
    When(__NR_sendto, kNetProxy, kLandlock, kAllow, Clause{{AnyBit(3, kMsgFastOpen)}, kEperm}),
    When(__NR_sendmsg, kNetProxy, kLandlock, kAllow, Clause{{AnyBit(2, kMsgFastOpen)}, kEperm}),
    When(__NR_sendmmsg, kNetProxy, kLandlock, kAllow, Clause{{AnyBit(3, kMsgFastOpen)}, kEperm}),

    // PROC-06 in Landlock mode below ABI 6 (no signal scope): every call that signals another
    // process by pid, thread id, process group or pidfd goes to the signal supervisor, which
    // signals members of the sandbox only (supervise_signals.cc).
    Rule{__NR_kill, kAnyNet, kLandlock, kSuperviseSignals, {}},
    Rule{__NR_tkill, kAnyNet, kLandlock, kSuperviseSignals, {}},
    Rule{__NR_tgkill, kAnyNet, kLandlock, kSuperviseSignals, {}},
    Rule{__NR_rt_sigqueueinfo, kAnyNet, kLandlock, kSuperviseSignals, {}},
    Rule{__NR_rt_tgsigqueueinfo, kAnyNet, kLandlock, kSuperviseSignals, {}},
    Rule{__NR_pidfd_send_signal, kAnyNet, kLandlock, kSuperviseSignals, {}},

    // PROC-16: without an ipc namespace, SysV IPC and POSIX message queues are the host's.
    Deny(__NR_shmget, kAnyNet, kLandlock),
    Deny(__NR_shmat, kAnyNet, kLandlock),
    Deny(__NR_shmctl, kAnyNet, kLandlock),
    Deny(__NR_shmdt, kAnyNet, kLandlock),
    Deny(__NR_msgget, kAnyNet, kLandlock),
    Deny(__NR_msgsnd, kAnyNet, kLandlock),
    Deny(__NR_msgrcv, kAnyNet, kLandlock),
    Deny(__NR_msgctl, kAnyNet, kLandlock),
    Deny(__NR_semget, kAnyNet, kLandlock),
    Deny(__NR_semop, kAnyNet, kLandlock),
    Deny(__NR_semtimedop, kAnyNet, kLandlock),
    Deny(__NR_semctl, kAnyNet, kLandlock),
    Deny(__NR_mq_open, kAnyNet, kLandlock),
    Deny(__NR_mq_unlink, kAnyNet, kLandlock),
    Deny(__NR_mq_timedsend, kAnyNet, kLandlock),
    Deny(__NR_mq_timedreceive, kAnyNet, kLandlock),
    Deny(__NR_mq_notify, kAnyNet, kLandlock),
    Deny(__NR_mq_getsetattr, kAnyNet, kLandlock),
};

// ---- What the table means: shared by the builder and the check ----------------------------

inline uint8_t NetBit(SeccompNet net) {
  switch (net) {
    case SeccompNet::kNone: return kNetNone;
    case SeccompNet::kProxy: return kNetProxy;
    case SeccompNet::kFull: return kNetFull;
  }
  return 0;
}

inline bool Applies(const Rule& r, uint8_t net, uint8_t mode) {
  return r.nr != kSkip && (r.nets & net) != 0 && (r.modes & mode) != 0;
}

// Every SeccompConfig has a key below this (BuildSeccompFilter's cache, the self-check's sweep).
constexpr unsigned kSeccompConfigs = 4096;

// A table action as this config makes it: the placeholder actions (kSupervise...) become a real
// return value, USER_NOTIF/TRACE/EPERM when the config has the mechanism, else ALLOW.
inline uint32_t ResolveAction(const SeccompConfig& cfg, uint32_t a) {
  auto on = [a](bool yes, uint32_t when) { return yes ? when : kAllow; };
  switch (a) {
    case kSupervise: return on(cfg.notify_metadata, kSeccompRetUserNotif);
    case kSupervisePaths: return on(cfg.notify_paths, kSeccompRetUserNotif);
    case kSuperviseList: return on(cfg.notify_listdir, kSeccompRetUserNotif);
    case kSuperviseSignals: return on(cfg.notify_signals, kSeccompRetUserNotif);
    case kSuperviseReads: return on(cfg.notify_reads, kSeccompRetUserNotif);
    case kPrivacyDeny: return on(cfg.notify_reads, kEperm);
    case kTraceForks: return on(cfg.trace_forks, kSeccompRetTrace);
    case kSuperviseStats: return on(cfg.notify_stats, kSeccompRetUserNotif);
    default: return a;
  }
}

inline int ClauseTestCount(const Clause& c) {
  int n = 0;
  while (n < kMaxTests && c.tests[n].op != Op::kUnused) ++n;
  return n;
}

}  // namespace
}  // namespace psb

#endif  // PSB_NATIVE_LINUX_SECCOMP_TABLE_H_
