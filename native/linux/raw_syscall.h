// Raw system calls for code that runs in a child between clone and execve.
//
// Why not syscall(3)? It writes errno, which lives in the thread-local block of the thread that
// called clone. With CLONE_VM that block is shared with a live Node thread, so a child must never
// write it. These wrappers return the kernel's result directly: >= 0 on success, -errno on failure.
// They touch no memory besides their arguments, take no locks, and are async-signal-safe.
// Tests: none directly; every sandboxed spawn runs through it (test/linux/*, test/contract/*).
#pragma once

#include <stdint.h>

namespace psb {

#if defined(__x86_64__)
static inline long RawSyscall6(long n, long a, long b, long c, long d, long e, long f) {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ __volatile__("syscall"
                       : "=a"(ret)
                       : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                       : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
static inline long RawSyscall6(long n, long a, long b, long c, long d, long e, long f) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ __volatile__("svc 0"
                       : "+r"(x0)
                       : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                       : "memory");
  return x0;
}
#else
#error "process-sandbox: raw syscalls are implemented for x86_64 and aarch64 only"
#endif

template <typename A = long, typename B = long, typename C = long, typename D = long,
          typename E = long, typename F = long>
static inline long Sys(long n, A a = 0, B b = 0, C c = 0, D d = 0, E e = 0, F f = 0) {
  return RawSyscall6(n, (long)a, (long)b, (long)c, (long)d, (long)e, (long)f);
}

}  // namespace psb
