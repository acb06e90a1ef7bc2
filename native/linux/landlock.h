// Landlock: ABI probe (parent) and rule application (child).
//
//   LandlockPlan plan;                          // parent: built from the TS plan, owns strings
//   plan.AddPath("/work/proj", LandlockPlan::WriteAccess(abi));
//   plan.Finalize(abi);                         // parent: builds the pointer arrays the child reads
//   ... clone ...
//   int err = ApplyLandlockInChild(plan);       // child: raw syscalls only; 0 or -errno
//
// Rules are attached to inodes, not mounts, so building them in the child after the mount tree is
// final covers bind mounts and our own tmpfs mounts alike. The ruleset handles the best access set
// the kernel's ABI offers (we never claim rights the kernel cannot check); the enforcement report
// states the ABI that ran.
// Tests: see landlock.cc.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

namespace psb {

// Our own copies of the UAPI constants: build hosts may have headers older than the running kernel.
namespace landlock {
constexpr uint64_t kFsExecute = 1ULL << 0;
constexpr uint64_t kFsWriteFile = 1ULL << 1;
constexpr uint64_t kFsReadFile = 1ULL << 2;
constexpr uint64_t kFsReadDir = 1ULL << 3;
constexpr uint64_t kFsRemoveDir = 1ULL << 4;
constexpr uint64_t kFsRemoveFile = 1ULL << 5;
constexpr uint64_t kFsMakeChar = 1ULL << 6;
constexpr uint64_t kFsMakeDir = 1ULL << 7;
constexpr uint64_t kFsMakeReg = 1ULL << 8;
constexpr uint64_t kFsMakeSock = 1ULL << 9;
constexpr uint64_t kFsMakeFifo = 1ULL << 10;
constexpr uint64_t kFsMakeBlock = 1ULL << 11;
constexpr uint64_t kFsMakeSym = 1ULL << 12;
constexpr uint64_t kFsRefer = 1ULL << 13;     // ABI 2
constexpr uint64_t kFsTruncate = 1ULL << 14;  // ABI 3
constexpr uint64_t kFsIoctlDev = 1ULL << 15;  // ABI 5
constexpr uint64_t kNetBindTcp = 1ULL << 0;     // ABI 4
constexpr uint64_t kNetConnectTcp = 1ULL << 1;  // ABI 4
constexpr uint64_t kScopeAbstractUnix = 1ULL << 0;  // ABI 6
constexpr uint64_t kScopeSignal = 1ULL << 1;        // ABI 6
constexpr uint32_t kRulePathBeneath = 1;
constexpr uint32_t kRuleNetPort = 2;
constexpr uint32_t kCreateRulesetVersion = 1U << 0;
}  // namespace landlock

// Highest Landlock ABI of the running kernel, 0 when Landlock is unavailable or disabled.
int LandlockAbi() noexcept;

// Every filesystem right the given ABI can handle.
uint64_t LandlockHandledFs(int abi) noexcept;
uint64_t LandlockReadAccess(int abi) noexcept;   // read files, list dirs, execute
uint64_t LandlockWriteAccess(int abi) noexcept;  // everything handled

struct LandlockPlan {
  int abi = 0;
  uint64_t handled_fs = 0;
  uint64_t handled_net = 0;
  uint64_t scoped = 0;
  std::vector<std::string> paths;
  std::vector<uint64_t> path_access;
  // Per path: kPathExact opens it without following any symlink, and a path that is gone or no
  // longer what it was (ENOENT, ENOTDIR, ELOOP: a link put in its place) gets no rule instead of
  // failing the spawn. The rules that carve deny-read paths out of a readable root use it: each
  // names one entry beside a denied path, and following a link swapped in there could move the
  // grant onto the denied path itself.
  std::vector<uint8_t> path_flags;
  static constexpr uint8_t kPathExact = 1;
  // A prepared sandbox (spawn_spare.cc) does not check that the path still names the inode its
  // rule was made for: the entries of the host's temp dir, carved only to keep other runs'
  // TMPDIRs out (lib/platform/linux/plan.ts tmpShield), which others create and remove all the
  // time. Its rule on an older inode grants nothing a fresh plan would withhold (linux/spare.ts).
  static constexpr uint8_t kPathVolatile = 2;
  std::vector<uint16_t> connect_ports;  // TCP connect allowed to these ports (when net handled)
  // Landlock mode: the terminals on fds 0-2 (already placed when the rules are built) get device
  // rights by inode, through the fd itself: the command can reopen its own terminal by name
  // (ttyname(), /dev/pts/N), and no other terminal of the host's shared devpts is granted.
  bool stdio_terminals = false;

  void AddPath(const std::string& path, uint64_t access, uint8_t flags = 0) {
    paths.push_back(path);
    path_access.push_back(access);
    path_flags.push_back(flags);
  }
  // Builds c_paths; call once, after the last AddPath and before clone.
  void Finalize() {
    c_paths.clear();
    for (const std::string& p : paths) c_paths.push_back(p.c_str());
  }
  std::vector<const char*> c_paths;
  // A prepared-ahead sandbox (spawn_spare.cc) checks, when it is used, that every path still
  // names what its rule was made from. When set (2 entries per path), ApplyLandlockInChild
  // records there the device and inode each rule was added for, 0/0 for a path it skipped.
  uint64_t* identities = nullptr;
};

// Child side. Requires no_new_privs (or CAP_SYS_ADMIN). A path that does not exist is skipped:
// nothing beneath it can be granted, which is the safe direction.
int ApplyLandlockInChild(const LandlockPlan& plan) noexcept;

}  // namespace psb
