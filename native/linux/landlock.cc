// Landlock rules (landlock.h).
// Tests: test/linux/threats-fs.test.ts, test/linux/modes.test.ts, test/linux/kernel-matrix.test.ts,
// test/linux/landlock-deny-read.test.ts, test/linux/landlock-tmp-private.test.ts,
// test/linux/landlock-terminals.test.ts, test/linux/signals.test.ts (the signal scope).
#include "landlock.h"

#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/ioctl.h>

#include "raw_syscall.h"
#include "syscall_numbers.h"

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

namespace psb {

namespace {

struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

struct PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

struct NetPortAttr {
  uint64_t allowed_access;
  uint64_t port;
};

}  // namespace

int LandlockAbi() noexcept {
  long v = Sys(__NR_landlock_create_ruleset, 0, 0, landlock::kCreateRulesetVersion);
  if (v < 0) return 0;
  // PSB_LANDLOCK_ABI_MAX=N (tests, docs/development.md): use at most ABI N, as on an older kernel
  // (the report and the gaps follow). Parent side only: read once, never after clone.
  static const long cap = [] {
    const char* e = getenv("PSB_LANDLOCK_ABI_MAX");
    return e != nullptr && *e >= '1' && *e <= '9' ? strtol(e, nullptr, 10) : 0;
  }();
  if (cap > 0 && v > cap) v = cap;
  return static_cast<int>(v);
}

uint64_t LandlockHandledFs(int abi) noexcept {
  if (abi <= 0) return 0;
  uint64_t fs = (landlock::kFsMakeSym << 1) - 1;  // ABI 1: bits 0..12
  if (abi >= 2) fs |= landlock::kFsRefer;
  if (abi >= 3) fs |= landlock::kFsTruncate;
  if (abi >= 5) fs |= landlock::kFsIoctlDev;
  return fs;
}

uint64_t LandlockReadAccess(int abi) noexcept {
  return (landlock::kFsExecute | landlock::kFsReadFile | landlock::kFsReadDir) &
         LandlockHandledFs(abi);
}

uint64_t LandlockWriteAccess(int abi) noexcept { return LandlockHandledFs(abi); }

int ApplyLandlockInChild(const LandlockPlan& plan) noexcept {
  if (plan.abi <= 0) return -ENOSYS;
  RulesetAttr attr = {plan.handled_fs, plan.handled_net, plan.scoped};
  // The attribute struct grew with the ABI; older kernels reject a larger size with E2BIG.
  unsigned long size = plan.abi >= 6 ? 24 : (plan.abi >= 4 ? 16 : 8);
  long ruleset = Sys(__NR_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0) return static_cast<int>(ruleset);
  int fd = static_cast<int>(ruleset);
  for (size_t i = 0; i < plan.c_paths.size(); ++i) {
    // A writable root (a rule that may create and remove entries, unlike a device rule, whose
    // names such as /dev/ptmx are links on purpose) is opened without following any symlink. Its path was canonical
    // when planned (and, on an exec-server with a floor, judged as such); a command already
    // writing above it may since have swapped a directory on the way for a link, and following
    // it would hand the grant to the link's target. ELOOP then fails the spawn: no grant moves.
    // Read rules still follow links: the fixed platform reads include some on purpose (/lib64
    // on merged-/usr hosts). A read root swapped for a link in that window moves a read grant;
    // docs/security.md lists it.
    long pfd;
    const bool exact = i < plan.path_flags.size() && (plan.path_flags[i] & LandlockPlan::kPathExact) != 0;
    if (exact || (plan.path_access[i] & (landlock::kFsMakeDir | landlock::kFsRemoveFile)) != 0) {
      struct {
        uint64_t flags, mode, resolve;
      } how = {O_PATH | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */ | 0x02 /* RESOLVE_NO_MAGICLINKS */};
      pfd = Sys(__NR_openat2, AT_FDCWD, plan.c_paths[i], &how, sizeof how);
    } else {
      pfd = Sys(__NR_openat, AT_FDCWD, plan.c_paths[i], O_PATH | O_CLOEXEC);
    }
    // Unreachable (missing, or under a deny-read mask): nothing beneath it is granted, which is
    // the safe direction.
    if (plan.identities != nullptr) plan.identities[2 * i] = plan.identities[2 * i + 1] = 0;
    if (pfd == -ENOENT || pfd == -ENOTDIR || pfd == -EACCES || (exact && pfd == -ELOOP)) continue;
    if (pfd < 0) {
      Sys(__NR_close, fd);
      return static_cast<int>(pfd);
    }
    if (plan.identities != nullptr) {
      struct stat st;
      if (Sys(__NR_fstat, pfd, &st) < 0) {
        Sys(__NR_close, pfd);
        Sys(__NR_close, fd);
        return -EIO;
      }
      plan.identities[2 * i] = st.st_dev;
      plan.identities[2 * i + 1] = st.st_ino;
    }
    PathBeneathAttr pb = {plan.path_access[i] & plan.handled_fs, static_cast<int32_t>(pfd)};
    long r = Sys(__NR_landlock_add_rule, fd, landlock::kRulePathBeneath, &pb, 0);
    if (r == -EINVAL) {
      // A non-directory only takes file rights; retry with those.
      pb.allowed_access &= landlock::kFsExecute | landlock::kFsWriteFile | landlock::kFsReadFile |
                           landlock::kFsTruncate | landlock::kFsIoctlDev;
      r = Sys(__NR_landlock_add_rule, fd, landlock::kRulePathBeneath, &pb, 0);
    }
    Sys(__NR_close, pfd);
    if (r < 0) {
      Sys(__NR_close, fd);
      return static_cast<int>(r);
    }
  }
  if (plan.stdio_terminals) {
    // A rule takes any fd of a mountable file system, so the inherited terminal is named by the
    // fd, never by a path another session's terminal could take. Only character devices that
    // answer TCGETS (terminals) qualify; pipes, files and sockets on stdio need no rule.
    constexpr uint64_t kTerminal = landlock::kFsReadFile | landlock::kFsWriteFile | landlock::kFsIoctlDev;
    for (int sfd = 0; sfd < 3; ++sfd) {
      struct stat st;
      if (Sys(__NR_fstat, sfd, &st) < 0 || !S_ISCHR(st.st_mode)) continue;
      char termios_buf[128];  // the kernel's struct termios is smaller
      if (Sys(__NR_ioctl, sfd, TCGETS, termios_buf) < 0) continue;
      PathBeneathAttr pb = {kTerminal & plan.handled_fs, sfd};
      long r = Sys(__NR_landlock_add_rule, fd, landlock::kRulePathBeneath, &pb, 0);
      // EBADFD: a terminal of an internal mount (none in practice); it stays usable by fd.
      if (r < 0 && r != -EBADFD) {
        Sys(__NR_close, fd);
        return static_cast<int>(r);
      }
    }
  }
  if (plan.handled_net & landlock::kNetConnectTcp) {
    for (uint16_t port : plan.connect_ports) {
      NetPortAttr np = {landlock::kNetConnectTcp, port};
      long r = Sys(__NR_landlock_add_rule, fd, landlock::kRuleNetPort, &np, 0);
      if (r < 0) {
        Sys(__NR_close, fd);
        return static_cast<int>(r);
      }
    }
  }
  long r = Sys(__NR_landlock_restrict_self, fd, 0);
  Sys(__NR_close, fd);
  return r < 0 ? static_cast<int>(r) : 0;
}

}  // namespace psb
