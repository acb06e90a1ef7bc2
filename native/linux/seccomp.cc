// See seccomp.h for what the filter does and why. The rule table is in seccomp_table.h; this file
// turns the rows selected for a SeccompConfig into classic BPF, and installs and probes it.
// Tests: test/linux/seccomp.test.ts, test/linux/host-safety.test.ts, test/linux/old-kernel.test.ts,
// test/linux/unix-sockets.test.ts, test/linux/threats-net.test.ts (network off),
// test/unit/int80-outcomes.test.ts, test/native/addon.test.ts (seccompSelfCheck).
#include "seccomp.h"
#include "supervisor/task_access.h"

#include <errno.h>
#include <linux/audit.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <algorithm>
#include <memory>
#include <mutex>
#include <new>

#include "raw_syscall.h"
#include "syscall_numbers.h"

#include "seccomp_table.h"

namespace psb {
namespace {

// ---- Code generation ------------------------------------------------------------------------

constexpr uint32_t kNrOffset = offsetof(SeccompData, nr);
constexpr uint32_t kArchOffset = offsetof(SeccompData, arch);

// Little-endian: the low word of args[i] comes first.
constexpr uint32_t ArgLowOffset(uint8_t arg) {
  return static_cast<uint32_t>(offsetof(SeccompData, args)) + 8u * arg;
}

sock_filter Stmt(uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  return sock_filter{code, jt, jf, k};
}

// Instructions one test emits: load, optional AND, then one jump per value (kIn) or one JSET.
int TestLength(const ArgTest& t) {
  if (t.op == Op::kAnyBit) return 2;
  return 1 + (t.mask != kAll ? 1 : 0) + t.count;
}

int ClauseLength(const Clause& c) {
  int len = 1;  // the RET
  for (int i = 0; i < ClauseTestCount(c); ++i) len += TestLength(c.tests[i]);
  return len;
}

// Emits one rule body, entered with the syscall number matched; every path ends in a RET.
// Layout per clause: tests (each either falls through to the next test or jumps to the clause's
// end), RET action; after the last clause, RET otherwise. All jumps are forward and short.
int EmitBody(const Rule& r, const SeccompConfig& cfg, std::vector<sock_filter>* out) {
  auto action = [&cfg](uint32_t a) { return ResolveAction(cfg, a); };
  for (const Clause& c : r.clauses) {
    int ntests = ClauseTestCount(c);
    if (ntests == 0) continue;
    // Instructions left until this clause's RET (exclusive), used to compute the fail target,
    // which is the instruction right after that RET.
    int remaining = ClauseLength(c);  // counts the RET itself
    for (int i = 0; i < ntests; ++i) {
      const ArgTest& t = c.tests[i];
      if (t.arg > 5 || (t.op == Op::kIn && (t.count < 1 || t.count > kMaxValues))) return -EINVAL;
      out->push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLowOffset(t.arg)));
      --remaining;
      if (t.op == Op::kAnyBit) {
        int fail = remaining - 1;  // skips every later instruction of the clause, RET included
        if (fail > 255) return -E2BIG;
        out->push_back(Jump(BPF_JMP | BPF_JSET | BPF_K, t.mask, 0, static_cast<uint8_t>(fail)));
        --remaining;
        continue;
      }
      if (t.mask != kAll) {
        out->push_back(Stmt(BPF_ALU | BPF_AND | BPF_K, t.mask));
        --remaining;
      }
      for (int v = 0; v < t.count; ++v) {
        int after = remaining - 1;  // instructions after this jump, up to and including the RET
        bool last = v == t.count - 1;
        // A match jumps past the remaining value compares of this test to the next test.
        int on_match = last ? 0 : t.count - 1 - v;
        int on_miss = last ? after : 0;  // `after` skips everything through the RET
        if (on_match > 255 || on_miss > 255) return -E2BIG;
        out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, t.values[v], static_cast<uint8_t>(on_match),
                            static_cast<uint8_t>(on_miss)));
        --remaining;
      }
    }
    out->push_back(Stmt(BPF_RET | BPF_K, action(c.action)));
  }
  out->push_back(Stmt(BPF_RET | BPF_K, action(r.otherwise)));
  return 0;
}

// One rule of the table as emitted: its syscall number and its body (ending in RET).
struct Leaf {
  uint32_t nr;
  std::vector<sock_filter> body;
};

// What a group compares: numbers [lo, hi] that share one body. A body that is a lone RET
// (lone_ret) jumps to a RET the group shares; any other body follows its JEQ inline (lo == hi).
struct Item {
  uint32_t lo, hi;
  const Leaf* leaf;
  bool lone_ret;
};

// At most this many items are compared one after the other; more are split by a search.
constexpr size_t kGroupItems = 12;

// A group: a chain of tests over items[lo, hi) that ends in RET ALLOW (a number the table does
// not name is allowed; see seccomp.h for why this is a deny list), followed by the RETs its lone
// bodies share. A range of numbers costs two jumps, a lone number one.
int EmitGroup(const std::vector<Item>& items, size_t lo, size_t hi, std::vector<sock_filter>* out) {
  std::vector<uint32_t> rets;  // the shared RETs' values, in order after the RET ALLOW
  for (size_t i = lo; i < hi; ++i) {
    if (!items[i].lone_ret) continue;
    uint32_t k = items[i].leaf->body[0].k;
    if (std::find(rets.begin(), rets.end(), k) == rets.end()) rets.push_back(k);
  }
  // Jumps to a shared RET are patched once the chain's length is known.
  std::vector<std::pair<size_t, uint32_t>> patches;  // (instruction, RET value); jt or jf by kind
  for (size_t i = lo; i < hi; ++i) {
    const Item& it = items[i];
    if (!it.lone_ret) {
      const auto& body = it.leaf->body;
      out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, it.lo, 0, static_cast<uint8_t>(body.size())));
      out->insert(out->end(), body.begin(), body.end());
    } else if (it.lo == it.hi) {
      patches.emplace_back(out->size(), it.leaf->body[0].k);
      out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, it.lo, 0, 0));  // jt: the shared RET
    } else {
      // lo <= nr <= hi: JGE lo (else skip the next test), then JGT hi (else the shared RET).
      out->push_back(Jump(BPF_JMP | BPF_JGE | BPF_K, it.lo, 0, 1));
      patches.emplace_back(out->size(), it.leaf->body[0].k);
      out->push_back(Jump(BPF_JMP | BPF_JGT | BPF_K, it.hi, 0, 0));  // jf: the shared RET
    }
  }
  out->push_back(Stmt(BPF_RET | BPF_K, kAllow));
  const size_t rets_at = out->size();
  for (uint32_t k : rets) out->push_back(Stmt(BPF_RET | BPF_K, k));
  for (const auto& [at, k] : patches) {
    size_t target = rets_at + static_cast<size_t>(std::find(rets.begin(), rets.end(), k) - rets.begin());
    size_t off = target - at - 1;
    if (off > 255) return -E2BIG;
    sock_filter& j = (*out)[at];
    if (BPF_OP(j.code) == BPF_JEQ) j.jt = static_cast<uint8_t>(off);
    else j.jf = static_cast<uint8_t>(off);
  }
  return 0;
}

// A binary search over items[lo, hi) (sorted, disjoint), with nr in the accumulator.
//
// Why a search and not a chain of `if (nr == N)`: a sandboxed command runs the program on every
// syscall the kernel's cache does not already know to be allowed, and at install time the kernel
// builds that cache by emulating the program once per syscall number (seccomp_cache_prepare).
// A chain of ~150 rules made both walk ~250 instructions; a search takes about log2 of that.
// Install time itself goes mostly to the JIT, which is linear in the program's length: hence the
// shared RETs and ranges of EmitGroup, which keep the program shorter than the chain was.
//
// A split at pivot P is `JGE P` whose true branch skips the left half. When the left half is
// beyond an 8-bit jump, `JGE P (true: next, false: skip 1) ; JA over the left half` instead
// (JA carries a 32-bit offset).
int EmitSearch(const std::vector<Item>& items, size_t lo, size_t hi, std::vector<sock_filter>* out) {
  if (hi - lo <= kGroupItems) return EmitGroup(items, lo, hi, out);
  const size_t mid = lo + (hi - lo) / 2;
  const size_t at = out->size();
  out->push_back(Jump(BPF_JMP | BPF_JGE | BPF_K, items[mid].lo, 0, 0));
  std::vector<sock_filter> left;
  if (int rc = EmitSearch(items, lo, mid, &left)) return rc;
  if (left.size() <= 255) {
    (*out)[at].jt = static_cast<uint8_t>(left.size());
  } else {
    (*out)[at].jf = 1;
    out->push_back(Stmt(BPF_JMP | BPF_JA, static_cast<uint32_t>(left.size())));
  }
  out->insert(out->end(), left.begin(), left.end());
  return EmitSearch(items, mid, hi, out);
}

// Leaves (sorted by nr) as items: neighbouring numbers whose body is the same lone RET merge.
std::vector<Item> MergeRanges(const std::vector<Leaf>& leaves) {
  std::vector<Item> items;
  for (const Leaf& l : leaves) {
    const bool lone = l.body.size() == 1;
    if (lone && !items.empty()) {
      Item& last = items.back();
      if (last.lone_ret && last.hi + 1 == l.nr && last.leaf->body[0].k == l.body[0].k) {
        last.hi = l.nr;
        continue;
      }
    }
    items.push_back(Item{l.nr, l.nr, &l, lone});
  }
  return items;
}

int BuildSeccompFilterUncached(const SeccompConfig& cfg, std::vector<sock_filter>* out) noexcept {
  out->clear();
  const uint8_t net = NetBit(cfg.net);
  if (net == 0) return -EINVAL;
  const uint8_t mode = cfg.isolated ? kIsolated : kLandlock;

  // Two rows for one syscall would leave the second unreachable: a table bug, caught here.
  constexpr size_t kRuleCount = sizeof(kRules) / sizeof(kRules[0]);
  for (size_t i = 0; i < kRuleCount; ++i) {
    if (!Applies(kRules[i], net, mode)) continue;
    for (size_t j = i + 1; j < kRuleCount; ++j) {
      if (Applies(kRules[j], net, mode) && kRules[j].nr == kRules[i].nr) return -EINVAL;
    }
  }

  out->reserve(8 + kRuleCount * 6);
  // 1. Architecture: anything but the native table is killed before a number is interpreted.
  out->push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kArchOffset));
  out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, PSB_AUDIT_ARCH, 1, 0));
  out->push_back(Stmt(BPF_RET | BPF_K, kKill));
  out->push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kNrOffset));
#if defined(__x86_64__)
  // 2. x32: numbers with the x32 bit are another table. Number -1 (a tracer's "skip") is the one
  //    value with that bit that is not x32; it gets the kernel's own answer, ENOSYS.
  out->push_back(Jump(BPF_JMP | BPF_JSET | BPF_K, kX32SyscallBit, 0, 3));
  out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffffu, 1, 0));
  out->push_back(Stmt(BPF_RET | BPF_K, kKill));
  out->push_back(Stmt(BPF_RET | BPF_K, kEnosys));
#endif

  // 3a. network.unixSockets: unix stream/seqpacket sockets are allowed before the table's socket
  //     row. Anything else falls through with nr reloaded into the accumulator.
  if (cfg.unix_stream_sockets && net != kNetFull) {
    out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(__NR_socket), 0, 8));  // -> table
    out->push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLowOffset(0)));
    out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 5));  // -> reload
    out->push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLowOffset(1)));
    out->push_back(Stmt(BPF_ALU | BPF_AND | BPF_K, kSockTypeMask));
    out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, SOCK_STREAM, 1, 0));     // -> allow
    out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, SOCK_SEQPACKET, 0, 1));  // -> allow / reload
    out->push_back(Stmt(BPF_RET | BPF_K, kAllow));
    out->push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kNrOffset));
  }
  // 3b. The connect supervisor (Landlock mode, proxy): connect() with addrlen >= 16 goes to the
  //     host. BPF cannot read the sockaddr; the addrlen (an int in the kernel, its low word) is
  //     all it sees. Below 16 no sockaddr_in fits: the kernel answers EINVAL for an INET socket,
  //     and AF_UNSPEC or a short unix name need no supervision. Every path ends in a RET, so the
  //     accumulator still holds nr when the table below runs.
  if (cfg.notify_connect) {
    if (net != kNetProxy || mode != kLandlock) {
      out->clear();
      return -EINVAL;
    }
    out->push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(__NR_connect), 0, 4));
    out->push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLowOffset(2)));
    out->push_back(Jump(BPF_JMP | BPF_JSET | BPF_K, 0xfffffff0u, 1, 0));
    out->push_back(Stmt(BPF_RET | BPF_K, kAllow));
    out->push_back(Stmt(BPF_RET | BPF_K, kSeccompRetUserNotif));
  }
  if (cfg.notify_metadata && mode != kLandlock) {
    out->clear();
    return -EINVAL;
  }
  // The path and listing supervision share the metadata supervisor's listener and kernel
  // requirements; isolated mode supervises listings alone (its placeholders' names).
  if ((cfg.notify_paths || (cfg.notify_listdir && mode == kLandlock) || cfg.notify_stats) && !cfg.notify_metadata) {
    out->clear();
    return -EINVAL;
  }
  // Read-only opens share the metadata supervisor's listener too, in Landlock mode only.
  if (cfg.notify_reads && (mode != kLandlock || !cfg.notify_metadata)) {
    out->clear();
    return -EINVAL;
  }
  if (cfg.notify_signals && mode != kLandlock) {
    out->clear();
    return -EINVAL;
  }
  // 3. Rules, as a binary search over their syscall numbers (EmitSearch). Every body ends in
  //    RET, so the accumulator holds nr at every comparison.
  std::vector<Leaf> leaves;
  for (size_t i = 0; i < kRuleCount; ++i) {
    const Rule& r = kRules[i];
    if (!Applies(r, net, mode)) continue;
    Leaf leaf{static_cast<uint32_t>(r.nr), {}};
    if (int rc = EmitBody(r, cfg, &leaf.body)) {
      out->clear();
      return rc;
    }
    if (leaf.body.size() > 255) {
      out->clear();
      return -E2BIG;
    }
    leaves.push_back(std::move(leaf));
  }
  std::sort(leaves.begin(), leaves.end(), [](const Leaf& a, const Leaf& b) { return a.nr < b.nr; });
  const std::vector<Item> items = MergeRanges(leaves);
  if (int rc = EmitSearch(items, 0, items.size(), out)) {
    out->clear();
    return rc;
  }
  if (out->size() > BPF_MAXINSNS) {
    out->clear();
    return -E2BIG;
  }
  return 0;
}
}  // namespace

int BuildSeccompFilter(const SeccompConfig& cfg, std::vector<sock_filter>* out) noexcept {
  if (out == nullptr) return -EINVAL;
  // The program depends on the config alone (a few bits), and building it checks the table for
  // duplicates and sorts it: built once per config, then copied.
  const unsigned key = static_cast<unsigned>(cfg.net) | (cfg.isolated ? 4u : 0u) | (cfg.unix_stream_sockets ? 8u : 0u) |
                       (cfg.notify_connect ? 16u : 0u) | (cfg.notify_metadata ? 32u : 0u) | (cfg.notify_paths ? 64u : 0u) |
                       (cfg.notify_listdir ? 128u : 0u) | (cfg.notify_signals ? 256u : 0u) | (cfg.notify_reads ? 512u : 0u) |
                       (cfg.trace_forks ? 1024u : 0u) | (cfg.notify_stats ? 2048u : 0u);
  static std::mutex mu;
  static std::vector<sock_filter> built[kSeccompConfigs];
  static int result[kSeccompConfigs];
  static bool done[kSeccompConfigs];
  if (key >= kSeccompConfigs) return -EINVAL;
  std::lock_guard<std::mutex> lock(mu);
  if (!done[key]) {
    result[key] = BuildSeccompFilterUncached(cfg, &built[key]);
    done[key] = true;
  }
  if (result[key] != 0) {
    out->clear();
    return result[key];
  }
  *out = built[key];
  return 0;
}

int InstallSeccompInChild(const sock_fprog* prog, bool new_listener) noexcept {
  // Sys() (raw_syscall.h) rather than syscall(3): this child may share its memory, and with it the
  // errno of a live Node thread, with the parent (CLONE_VM).
  if (prog == nullptr || prog->filter == nullptr || prog->len == 0) return -EINVAL;
  long nnp = Sys(__NR_prctl, PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  if (nnp < 0) return static_cast<int>(nnp);
  if (nnp != 1) return -EPERM;
  // A listener exists only through seccomp(2); no prctl fallback (that kernel has no listeners).
  if (new_listener) {
    // The supervisors EMULATE calls (supervise_metadata.cc, supervise_paths.cc): a signal that
    // withdrew a call the supervisor had already carried out would make the kernel restart it
    // (or the caller retry on EINTR), and a mkdir or O_EXCL create done twice fails with EEXIST.
    // WAIT_KILLABLE_RECV keeps the call waiting for the answer once it was received; the signal
    // is handled right after. Kernels before 5.19 refuse the flag (EINVAL): without it, the gap.
    long r = Sys(__NR_seccomp, kSeccompSetModeFilter, kSeccompFilterFlagNewListener | kSeccompFilterFlagWaitKillableRecv, prog);
    if (r != -EINVAL) return static_cast<int>(r);
    return static_cast<int>(Sys(__NR_seccomp, kSeccompSetModeFilter, kSeccompFilterFlagNewListener, prog));
  }
  long r = Sys(__NR_seccomp, kSeccompSetModeFilter, 0, prog);
  if (r != -ENOSYS) return static_cast<int>(r);
  // Kernels 3.5-3.16 have filter mode but no seccomp(2).
  return static_cast<int>(Sys(__NR_prctl, PR_SET_SECCOMP, kSeccompModeFilter, prog, 0, 0));
}

int SeccompSupported() noexcept {
  // EINVAL here means a kernel built without CONFIG_SECCOMP.
  if (syscall(__NR_prctl, PR_GET_SECCOMP, 0, 0, 0, 0) < 0) return -errno;
  const uint32_t actions[] = {kSeccompRetKillProcess, kSeccompRetErrno, kSeccompRetAllow};
  for (uint32_t action : actions) {
    if (syscall(__NR_seccomp, kSeccompGetActionAvail, 0, &action) != 0) {
      int err = errno;
      // No seccomp(2) or no GET_ACTION_AVAIL: too old for KILL_PROCESS.
      return err == ENOSYS ? -EOPNOTSUPP : -err;
    }
  }
  return 0;
}

namespace {
int ProbeListenerInChild(void*) {
  // Raw syscalls only: this child shares the caller's memory (CLONE_VM). An allow-all filter
  // that carries a USER_NOTIF return (never reached) is enough for the kernel to make a listener.
  sock_filter insns[] = {Stmt(BPF_RET | BPF_K, kAllow), Stmt(BPF_RET | BPF_K, kSeccompRetUserNotif)};
  sock_fprog prog = {2, insns};
  long r = Sys(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  if (r == 0) r = Sys(__NR_seccomp, kSeccompSetModeFilter, kSeccompFilterFlagNewListener, &prog);
  for (;;) Sys(__NR_exit_group, r < 0 ? -r : 0);
}
}  // namespace

int ConnectSupervisorSupported() noexcept {
  uint32_t action = kSeccompRetUserNotif;
  if (syscall(__NR_seccomp, kSeccompGetActionAvail, 0, &action) != 0) return errno == EINVAL ? -EOPNOTSUPP : -errno;
  // The supervisors read the command's memory and take its fds: process_vm_readv and
  // pidfd_getfd, or /proc/<tid>/mem and /proc/<tid>/fd/N where a container's seccomp profile
  // refuses those two (task_access.h, tried for real on this process). Neither: EPERM.
  if (task::Way() == task::Access::kNone) return -EPERM;
  // SECCOMP_IOCTL_NOTIF_ADDFD cannot be probed without a notification: it arrived in 5.9.
  struct utsname u;
  int major = 0, minor = 0;
  if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2) return -EOPNOTSUPP;
  if (major < 5 || (major == 5 && minor < 9)) return -EOPNOTSUPP;
  constexpr size_t kStack = 16 * 1024;
  std::unique_ptr<char[]> stack(new (std::nothrow) char[kStack]);
  if (!stack) return -ENOMEM;
  // 16-byte aligned top, as the ABI wants.
  char* top = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(stack.get() + kStack) & ~uintptr_t{15});
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = clone(ProbeListenerInChild, top, CLONE_VM | CLONE_VFORK | SIGCHLD, nullptr);
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return -e;
  int st = 0;
  while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st)) return -ECHILD;
  return -WEXITSTATUS(st);
}

}  // namespace psb
