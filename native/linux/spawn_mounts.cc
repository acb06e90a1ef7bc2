// Isolated mode's mount tree, run by init in the new mount namespace: the MountOp steps planned in
// TS (lib/platform/linux.ts), the minimal /dev, the fresh /proc and the masks over /proc/1.
// Tests: test/linux/threats-fs.test.ts, test/linux/modes.test.ts, test/linux/plan-swap.test.ts,
// test/linux/protected-names-content.test.ts, test/linux/proc-masked.test.ts,
// test/linux/caches.test.ts, test/linux/host-safety.test.ts (tmpfs sizes),
// test/changes/stage-isolated.test.ts (overlays).
#include <sys/mount.h>
#include <sys/stat.h>

#include "spawn_internal.h"

namespace psb {
namespace spawn_internal {
namespace {

struct MountAttr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
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
constexpr int kProcMaskTableSize = sizeof kProcMasks / sizeof kProcMasks[0];

long SetAttrInChild(const char* path, unsigned flags, uint64_t set, uint64_t clr) {
  MountAttr attr = {set, clr, 0, 0};
  return Sys(__NR_mount_setattr, AT_FDCWD, path, flags, &attr, sizeof attr);
}

long BindInChild(const char* path) {
  return Sys(__NR_mount, path, path, 0, MS_BIND | MS_REC, 0);
}

// Re-binds writable root `path` read-write without following a symlink anywhere in it. The root
// was canonical when it was planned (and, on an exec-server with a floor, judged as such); a
// command already writing above it may since have swapped a directory on the way for a link to
// anywhere its uid (or a root server) can write. mount(path, path, MS_BIND) and mount_setattr by
// path would follow that link and open the target read-write; instead the object is pinned with
// openat2(RESOLVE_NO_SYMLINKS) (ELOOP if anything on the way is a link now: the spawn fails, no
// grant moves), cloned as a detached tree, made writable while detached, and mounted back onto
// the pinned object itself, so no path is resolved twice.
long BindRwPinnedInChild(const char* path) {
  struct {
    uint64_t flags, mode, resolve;
  } how = {O_PATH | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */ | 0x02 /* RESOLVE_NO_MAGICLINKS */};
  long at = Sys(__NR_openat2, AT_FDCWD, path, &how, sizeof how);
  if (at < 0) return at;
  MountAttr attr = {0, kMountAttrRdonly, 0, 0};
  // The root of a mount already (`/` itself, /home on its own file system): that mount, this
  // namespace's private copy, is made writable in place; a bind stacked on `/` would never be
  // seen (lookups start below it). mount_setattr refuses anything but a mount's root (EINVAL):
  // then the pinned directory gets a writable clone of its own.
  long r = Sys(__NR_mount_setattr, at, "", kAtEmptyPath | kAtRecursive, &attr, sizeof attr);
  if (r == -EPERM) r = Sys(__NR_mount_setattr, at, "", kAtEmptyPath, &attr, sizeof attr);
  if (r != -EINVAL) {
    Sys(__NR_close, at);
    return r;
  }
  long tree = Sys(__NR_open_tree, at, "", kOpenTreeClone | kOpenTreeCloexec | kAtRecursive | kAtEmptyPath);
  if (tree < 0) {
    Sys(__NR_close, at);
    return tree;
  }
  r = Sys(__NR_mount_setattr, tree, "", kAtEmptyPath | kAtRecursive, &attr, sizeof attr);
  // A submount that was read-only on the host is locked read-only; keep it so and open only the
  // root's own mount.
  if (r == -EPERM) r = Sys(__NR_mount_setattr, tree, "", kAtEmptyPath, &attr, sizeof attr);
  if (r == 0) r = Sys(__NR_move_mount, tree, "", at, "", kMoveMountFEmptyPath | kMoveMountTEmptyPath);
  Sys(__NR_close, tree);
  Sys(__NR_close, at);
  return r;
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
  *AppendDecimalInChild(buf, v) = 0;
  return WriteFileInChild(path, buf);
}

// The fresh procfs, before the command can see it: host identity of /proc/1 hidden (kProcMasks),
// the per-user-namespace quotas lowered, then /proc/sys read-only (a command mapped to uid 0
// passes sysctl's owner check for the host's global sysctls without holding any capability).
long SetUpProcInChild(ChildArgs* a) {
  const LinuxSpawnPlan& p = *a->plan;
  for (int i = 0; !a->hide_init && i < kProcMaskTableSize; ++i) {
    long r = MaskWithInChild(a, a->ndeny + i, kProcMasks[i].path);
    if (r < 0 && !(r == -ENOENT && kProcMasks[i].optional)) return r;
  }
  // These limits belong to the sandbox's own user namespace; init holds CAP_SYS_RESOURCE there.
  // Every level of the user-namespace chain is checked, so the sandbox can take at most this many
  // of the host uid's inotify instances and watches.
  if (p.inotify_instances >= 0) {
    long r = WriteNumberInChild("/proc/sys/user/max_inotify_instances", static_cast<uint64_t>(p.inotify_instances));
    if (r < 0) FailInChild(a, kStageQuota, 0, r);
  }
  if (p.inotify_watches >= 0) {
    long r = WriteNumberInChild("/proc/sys/user/max_inotify_watches", static_cast<uint64_t>(p.inotify_watches));
    if (r < 0) FailInChild(a, kStageQuota, 1, r);
  }
  long r = BindInChild("/proc/sys");
  if (r < 0) return r;
  return SetAttrInChild("/proc/sys", kAtRecursive, kMountAttrRdonly, 0);
}

}  // namespace

const int kProcMaskCount = kProcMaskTableSize;

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

// Whether `path` is gone (no entry by that name, or a directory on the way is gone): a step
// marked kVanishOk then has nothing left to act on. A dangling symlink put in its place is not
// gone (mount would follow it elsewhere): that still fails the step.
bool VanishedInChild(const char* path) {
  struct stat st;
  return Sys(__NR_newfstatat, AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == -ENOENT;
}

// A placeholder holds a missing protected (or deny-read) name so that the command cannot create
// it. When init itself cannot create the name (EACCES: a directory another user owns, whose owner
// is not mapped into the sandbox's user namespace, so init's capabilities do not apply to it, as
// with a root host and a workspace an unprivileged user owns; EROFS: a read-only mount), the command cannot
// either: it runs with init's uid, gid and groups, no capabilities, under Landlock and seccomp,
// in this same mount tree. There is then nothing to hold, and the step is skipped instead of
// failing the spawn. (Whoever owns the directory can still create the name from outside; so
// could they with a placeholder, by removing it on the host.)
bool UncreatableInChild(long r) { return r == -EACCES || r == -EROFS; }

// A read-only file holding `data`, put over the existing file at `path`: the sandbox's own view
// of it (a repository's .git/info/exclude that also names the run's placeholders, planMounts in
// lib/platform/linux/plan.ts). The file is made in a tmpfs mounted over /proc for a moment, as
// the masks' are (kProc comes later), and cloned detached: nothing is written on the host.
static long ViewFileInChild(const char* path, const char* data) {
  long r = Sys(__NR_mount, "tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=1m,nr_inodes=4");
  if (r < 0) return r;
  long fd = Sys(__NR_openat, AT_FDCWD, "/proc/view", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
  r = fd < 0 ? fd : 0;
  if (fd >= 0) {
    size_t len = 0;
    while (data[len] != 0) ++len;
    for (size_t off = 0; off < len && r == 0;) {
      long w = Sys(__NR_write, fd, data + off, len - off);
      if (w <= 0) r = w < 0 ? w : -EIO;
      else off += static_cast<size_t>(w);
    }
    if (r == 0) r = Sys(__NR_fchmod, fd, 0444);  // exact, whatever the umask
    Sys(__NR_close, fd);
  }
  long tree = r < 0 ? r : Sys(__NR_open_tree, AT_FDCWD, "/proc/view", kOpenTreeClone | kOpenTreeCloexec);
  long u = Sys(__NR_umount2, "/proc", MNT_DETACH);
  if (tree < 0) return tree;
  r = u < 0 ? u : Sys(__NR_move_mount, tree, "", AT_FDCWD, path, kMoveMountFEmptyPath);
  Sys(__NR_close, tree);
  if (r < 0) return r;
  return SetAttrInChild(path, 0, kMountAttrRdonly, 0);
}

// MountOp.arg of Pin and BindRo steps: the path may vanish between planning and now (VANISH_OK
// in lib/platform/linux/plan.ts, which explains why skipping these, and only these, is safe).
constexpr int kVanishOk = 1;

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
      return BindRwPinnedInChild(path);
    case MountOpKind::kGhostDir:
      // Exact modes regardless of the umask: 0555/0444 is how hosts recognise a placeholder
      // (lib/platform/linux.ts) to remove it later.
      r = Sys(__NR_mkdirat, AT_FDCWD, path, 0555);
      a->ghost_unheld = UncreatableInChild(r);
      if (a->ghost_unheld) return 0;
      if (r < 0 && r != -EEXIST) return r;
      if (r == 0) Sys(__NR_fchmodat, AT_FDCWD, path, 0555);
      [[fallthrough]];
    case MountOpKind::kBindRo:
      r = BindInChild(path);
      if (r == -ENOENT && op.kind == MountOpKind::kBindRo && op.arg == kVanishOk && VanishedInChild(path)) return 0;
      if (r < 0) return r;
      return SetAttrInChild(path, kAtRecursive, kMountAttrRdonly, 0);
    case MountOpKind::kGhostFile: {
      long fd = Sys(__NR_openat, AT_FDCWD, path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0444);
      a->ghost_unheld = UncreatableInChild(fd);
      if (a->ghost_unheld) return 0;
      if (fd < 0 && fd != -EEXIST) return fd;
      if (fd >= 0) {
        Sys(__NR_fchmod, fd, 0444);  // only a file we created
        Sys(__NR_close, fd);
      }
      r = BindInChild(path);
      if (r < 0) return r;
      return SetAttrInChild(path, kAtRecursive, kMountAttrRdonly, 0);
    }
    case MountOpKind::kViewFile:
      return ViewFileInChild(path, a->mount_data[i]);
    case MountOpKind::kPin:
      r = BindInChild(path);
      if (r == -ENOENT && op.arg == kVanishOk && VanishedInChild(path)) return 0;
      return r;
    case MountOpKind::kMaskDir:
      // The deny-read placeholder just before it was uncreatable: the name does not exist and
      // cannot be made, so there is nothing to mask.
      if (a->ghost_unheld && i > 0 && a->plan->mounts[i - 1].kind == MountOpKind::kGhostDir && a->plan->mounts[i - 1].path == op.path) return 0;
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
      // A refusal fails the spawn (EMOUNT_SETUP naming /proc): no fallback. An empty /proc in its
      // place ran commands that silently lacked /proc/self (rootless containers, where the probe
      // now steers auto mode to Landlock mode before this point).
      r = Sys(__NR_mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              a->hide_init ? "hidepid=ptraceable" : nullptr);
      if (r < 0) return r;
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
    case MountOpKind::kOverlay: {
      // A private writable view of a host cache: its lower layer is a clone of the host's
      // directory, its upper and work dirs live in a tmpfs of this namespace, so whatever the
      // command writes there never reaches the host's cache (lib/platform/linux-caches.ts).
      r = Sys(__NR_mount, "overlay", path, "overlay", MS_NOSUID | MS_NODEV, a->mount_data[i]);
      if (r == 0) return 0;
      // Where the kernel refuses the overlay (the host's cache on a filesystem overlayfs cannot
      // use as a lower layer), the cache stays private but cold: the tmpfs below is the cache,
      // emptied of the layer dirs; the host's copy is let go. Still nothing reaches the host.
      char sub[4096];
      size_t n = 0;
      while (path[n] != 0 && n < sizeof sub - 4) {
        sub[n] = path[n];
        ++n;
      }
      if (path[n] != 0) return r;
      sub[n] = '/';
      sub[n + 1] = '.';
      sub[n + 3] = 0;
      static const char kLayers[3] = {'l', 'u', 'w'};
      for (char c : kLayers) {
        sub[n + 2] = c;
        if (c == 'l') {
          long u = Sys(__NR_umount2, sub, MNT_DETACH);
          if (u < 0) return r;  // the host's copy would stay reachable in the cache: fail instead
        }
        Sys(__NR_unlinkat, AT_FDCWD, sub, AT_REMOVEDIR);
      }
      return 0;
    }
    case MountOpKind::kStageOverlay:
      // changes: 'stage' (lib/changes/overlay.ts): every write of the command to this writable
      // root lands in the upper dir, on the host outside its view. Mounted before `/` turns
      // read-only: overlayfs keeps a private clone of the upper dir's mount, which that does not
      // reach, and the root's later writable bind opens this mount. No fallback: a refusal
      // fails the spawn, since writing to the real root instead would be the unstaged run.
      return Sys(__NR_mount, "overlay", path, "overlay", MS_NOSUID | MS_NODEV, a->mount_data[i]);
  }
  return -EINVAL;
}
}  // namespace spawn_internal
}  // namespace psb
