// How the supervisors (supervise_metadata.cc, supervise_paths.cc, supervise_connect.cc, and
// through notify_args.cc) read the command's memory and take its fds. Host side only.
//
// Why two ways: the natural calls are process_vm_readv (memory) and pidfd_getfd (a dup of the
// command's fd). A container runtime's default seccomp profile (Docker's; Kubernetes'
// RuntimeDefault is built from it) refuses both with EPERM unless the container holds
// CAP_SYS_PTRACE, for root in the container too, while Landlock mode is exactly what runs there
// (no user namespaces). The same profile lets /proc/<tid>/mem be read and /proc/<tid>/fd/N be
// opened. So where those two calls are refused, the supervisors use procfs instead:
//   - memory: pread of /proc/<tid>/mem at the address: a copy at that moment, as
//     process_vm_readv's, under the same permission model (the ptrace attach check, made when the
//     file is opened: opened for each read, so it is made against the task the id names then);
//     one difference: it reads pages the command mapped without read access (FOLL_FORCE), which
//     the kernel's own call would refuse (EFAULT); the command could make them readable itself;
//   - fds: open("/proc/<tid>/fd/N", O_PATH): a new open of the same object (same inode and mount,
//     no new permission check on the object), not the same open file description. Enough where the
//     fd is a path anchor (a dirfd, a metadata call's target, a path naming the command's own fd):
//     the callers act on it through /proc/self/fd/M or *at(fd, "", AT_EMPTY_PATH). Not enough
//     where the description itself matters (a socket, an inotify instance, a directory's
//     position): those callers ask for DupTaskFd and have a procfs way of their own (a listing
//     reopens the directory at its position and puts the reopen in place of the command's fd),
//     or none (see each caller).
// The way is decided once per process, by trying the calls on this process itself (a seccomp
// filter answers the same whatever the target; a ptrace check on oneself always passes), and
// remembered; probe() reports it (supervisorAccess) and the planner turns the supervisors off
// (a listed gap, `degraded` needed) when neither way works. Either way the callers check
// SECCOMP_IOCTL_NOTIF_ID_VALID after their last copy: the task id named the waiting task then,
// so nothing was read from a task that reused its id.
// Tests: see task_access.cc.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace psb {
namespace task {

enum class Access : int { kNone = 0, kPidfd = 1, kProcfs = 2 };

// The way this process uses (decided at the first call, then fixed).
Access Way() noexcept;
// "pidfd", "procfs" or "none" (probe()).
const char* WayName() noexcept;

// Copies len bytes at addr of task tid's memory into buf: the number of bytes copied (fewer at
// an unmapped page), or -errno (-ESRCH: gone; -EPERM/-EACCES: not readable; -EFAULT: nothing
// mapped at addr).
long ReadTaskMemory(uint32_t tid, uint64_t addr, void* buf, size_t len) noexcept;

// Copies len bytes of buf into task tid's memory at addr (process_vm_writev, or a pwrite of
// /proc/<tid>/mem): the number of bytes written, or -errno as ReadTaskMemory. The procfs way
// writes pages the command mapped read-only too (FOLL_FORCE, as a debugger's poke; private pages
// are copied on write, never the file behind them), where the kernel's own copy would fault.
long WriteTaskMemory(uint32_t tid, uint64_t addr, const void* buf, size_t len) noexcept;
// The same through mem, a /proc/<tid>/mem the caller opened for writing earlier (it holds that
// task's memory whatever the id names by now).
long WriteMemFile(int mem, uint64_t addr, const void* buf, size_t len) noexcept;

// A dup of task tid's fd (the same open file description), through pidfd (a pidfd for the task)
// with pidfd_getfd: a new fd of ours or -errno. -EPERM when this process has no pidfd_getfd
// (Way() is kProcfs): only the same description will do for the caller.
int DupTaskFd(int pidfd, uint32_t tid, int fd) noexcept;

// An O_PATH-usable fd for the object behind task tid's fd: DupTaskFd's dup where pidfd_getfd
// works (pidfd may be -1 when Way() is kProcfs), else open("/proc/<tid>/fd/<fd>", O_PATH).
// A new fd of ours or -errno (-EBADF: no such fd).
int TaskFdObject(int pidfd, uint32_t tid, int fd) noexcept;

}  // namespace task
}  // namespace psb
