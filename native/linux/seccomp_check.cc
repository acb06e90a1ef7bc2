// SeccompSelfCheck (seccomp.h): every program BuildSeccompFilter makes, run through a small
// classic-BPF interpreter and compared with the rule table evaluated directly. The builder lays
// the rules out as a binary search with long jumps; this check is what says that the layout
// still means exactly what the table says, for every syscall number, not only for the calls the
// sandbox tests happen to make.
// Tests: test/native/addon.test.ts (native.seccompSelfCheck over every config).
#include <stdio.h>
#include <string.h>

#include <vector>

#include "seccomp.h"
#include "seccomp_table.h"

namespace psb {
namespace {

constexpr uint32_t kI386 = 0x40000003u;  // AUDIT_ARCH_I386: a foreign table on x86_64

// Runs `prog` on `d` as the kernel would (only the instructions the builder emits are known;
// anything else, or a jump out of the program, is a verdict of its own that never matches).
uint32_t Interpret(const std::vector<sock_filter>& prog, const SeccompData& d) {
  uint32_t a = 0;
  const unsigned char* raw = reinterpret_cast<const unsigned char*>(&d);
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const sock_filter& f = prog[pc];
    switch (f.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        if (f.k + 4 > sizeof d || f.k % 4 != 0) return 0xdead0001u;
        memcpy(&a, raw + f.k, 4);
        break;
      case BPF_ALU | BPF_AND | BPF_K: a &= f.k; break;
      case BPF_JMP | BPF_JA: pc += f.k; break;
      case BPF_JMP | BPF_JEQ | BPF_K: pc += a == f.k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGE | BPF_K: pc += a >= f.k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGT | BPF_K: pc += a > f.k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JSET | BPF_K: pc += (a & f.k) != 0 ? f.jt : f.jf; break;
      case BPF_RET | BPF_K: return f.k;
      default: return 0xdead0002u;
    }
  }
  return 0xdead0003u;  // ran off the end
}

bool TestHolds(const ArgTest& t, const SeccompData& d) {
  const uint32_t v = static_cast<uint32_t>(d.args[t.arg]) & t.mask;  // low word only, as the kernel's ioctl
  if (t.op == Op::kAnyBit) return v != 0;
  for (int i = 0; i < t.count; ++i) {
    if (v == t.values[i]) return true;
  }
  return false;
}

// What the table (and the fixed checks in front of it) say for `d`, written as plainly as
// possible: no layout, no jumps.
uint32_t Expected(const SeccompConfig& cfg, const SeccompData& d) {
  const uint32_t nr = static_cast<uint32_t>(d.nr);
  if (d.arch != PSB_AUDIT_ARCH) return kKill;
#if defined(__x86_64__)
  if (nr & kX32SyscallBit) return nr == 0xffffffffu ? kEnosys : kKill;
#endif
  const uint8_t net = NetBit(cfg.net);
  const uint8_t mode = cfg.isolated ? kIsolated : kLandlock;
  auto low = [&](int i) { return static_cast<uint32_t>(d.args[i]); };
  if (cfg.unix_stream_sockets && net != kNetFull && nr == static_cast<uint32_t>(__NR_socket) && low(0) == AF_UNIX &&
      ((low(1) & kSockTypeMask) == SOCK_STREAM || (low(1) & kSockTypeMask) == SOCK_SEQPACKET)) {
    return kAllow;
  }
  if (cfg.notify_connect && nr == static_cast<uint32_t>(__NR_connect)) {
    return (low(2) & 0xfffffff0u) != 0 ? kSeccompRetUserNotif : kAllow;
  }
  auto action = [&cfg](uint32_t x) { return ResolveAction(cfg, x); };
  for (const Rule& r : kRules) {
    if (!Applies(r, net, mode) || static_cast<uint32_t>(r.nr) != nr) continue;
    for (const Clause& c : r.clauses) {
      int n = ClauseTestCount(c);
      if (n == 0) continue;
      bool all = true;
      for (int i = 0; i < n && all; ++i) all = TestHolds(c.tests[i], d);
      if (all) return action(c.action);
    }
    return action(r.otherwise);
  }
  return kAllow;
}

}  // namespace

int SeccompSelfCheck(long* cases, int* configs, char* first, size_t first_len) noexcept {
  // Argument values worth trying: every value and mask the table compares with, each with the
  // high word set too (only the low word may count), plus the usual suspects.
  std::vector<uint64_t> values = {0, 1, 2, 0xffffffffu, 0xffffffffffffffffull, 06000, 04000, 02000, 0100, 020000000, 0x20000000u};
  for (const Rule& r : kRules) {
    for (const Clause& c : r.clauses) {
      for (int i = 0; i < ClauseTestCount(c); ++i) {
        const ArgTest& t = c.tests[i];
        values.push_back(t.mask);
        for (int v = 0; v < t.count; ++v) {
          values.push_back(t.values[v]);
          values.push_back(t.values[v] | 0x100000000ull);
          values.push_back(t.values[v] | 0x40u);
        }
      }
    }
  }
  std::vector<uint32_t> nrs;
  for (uint32_t nr = 0; nr < 1024; ++nr) nrs.push_back(nr);
  for (uint32_t nr : {0x40000000u, 0x40000001u, 0x400000c8u, 0xffffffffu, 0x80000000u, 0x80000001u, 0xfffffffeu}) nrs.push_back(nr);
  long n = 0;
  int mismatches = 0;
  int built = 0;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  auto next = [&]() {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
  };
  for (unsigned key = 0; key < kSeccompConfigs; ++key) {
    SeccompConfig cfg;
    const unsigned net = key & 3;
    if (net > 2) continue;
    cfg.net = static_cast<SeccompNet>(net);
    cfg.isolated = (key & 4) != 0;
    cfg.unix_stream_sockets = (key & 8) != 0;
    cfg.notify_connect = (key & 16) != 0;
    cfg.notify_metadata = (key & 32) != 0;
    cfg.notify_paths = (key & 64) != 0;
    cfg.notify_listdir = (key & 128) != 0;
    cfg.notify_signals = (key & 256) != 0;
    cfg.notify_reads = (key & 512) != 0;
    cfg.trace_forks = (key & 1024) != 0;
    cfg.notify_stats = (key & 2048) != 0;
    std::vector<sock_filter> prog;
    if (BuildSeccompFilter(cfg, &prog) != 0) continue;  // a config the builder refuses
    ++built;
    for (uint32_t nr : nrs) {
      // Numbers the table names get many argument vectors; the rest a few.
      bool named = false;
      for (const Rule& r : kRules) named = named || static_cast<uint32_t>(r.nr) == nr;
      const int rounds = named ? 400 : 3;
      for (int k = 0; k < rounds; ++k) {
        SeccompData d;
        memset(&d, 0, sizeof d);
        d.nr = static_cast<int32_t>(nr);
        d.arch = k == 1 ? kI386 : PSB_AUDIT_ARCH;
        for (auto& arg : d.args) arg = k == 0 ? 0 : values[next() % values.size()];
        ++n;
        const uint32_t got = Interpret(prog, d);
        const uint32_t want = Expected(cfg, d);
        if (got != want && mismatches++ == 0 && first != nullptr && first_len > 0) {
          snprintf(first, first_len, "config %u, nr %u, arch %#x, args %#llx %#llx %#llx %#llx: program %#x, table %#x", key,
                   nr, d.arch, static_cast<unsigned long long>(d.args[0]), static_cast<unsigned long long>(d.args[1]),
                   static_cast<unsigned long long>(d.args[2]), static_cast<unsigned long long>(d.args[3]), got, want);
        }
      }
    }
  }
  if (cases != nullptr) *cases = n;
  if (configs != nullptr) *configs = built;
  return mismatches;
}

}  // namespace psb
