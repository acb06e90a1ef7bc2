// Why Landlock mode cannot count forks in its seccomp user-notification supervisor (root without a
// pids cgroup, e.g. in a default container: docs/security.md), and what would not have the flaw.
//
// A process with a SIGCHLD handler without SA_RESTART (as dash, Debian's /bin/sh, has) forks a
// child that exits at once and forks again at once, n times; the second fork races the first
// child's SIGCHLD. Modes: 0 no filter; 1 fork/vfork/clone stop in SECCOMP_RET_TRACE and a ptrace
// tracer continues them; 2 they stop in SECCOMP_RET_USER_NOTIF (with WAIT_KILLABLE_RECV) and a
// supervisor continues them. `delay` is how long the tracer/supervisor takes to get to each one
// (a loaded host). Run as root: cc -O2 -o /tmp/forkstop bench/fork-stop-signals.c &&
// /tmp/forkstop 2 3000 && /tmp/forkstop 2 1000 300 && /tmp/forkstop 1 1000 300 && /tmp/forkstop 0 3000
// Seen (6.18, 2 CPUs, load 10): mode 2: 26 EINTR in 3000, 664 in 1000 with delay 300; mode 1:
// none (a ptrace stop is not withdrawn by a signal; the fork restarts as usual); per fork
// (fork + exit + wait) the modes were within the noise of each other (130-190 us).
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile int got;
static void onchld(int s) { (void)s; got++; }
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

int main(int argc, char** argv) {
  int mode = atoi(argv[1]);  // 0: no filter, 1: RET_TRACE on clone/fork/vfork
  int n = atoi(argv[2]);
  int delay = argc > 3 ? atoi(argv[3]) : 0;  // us the tracer waits in each seccomp stop
  int go[2], lfd[2];
  pipe(go);
  pipe(lfd);
  pid_t c = fork();
  if (c == 0) {
    char b;
    read(go[0], &b, 1);
    struct sigaction sa = {0};
    sa.sa_handler = onchld;  // no SA_RESTART, as dash
    sigaction(SIGCHLD, &sa, 0);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (mode == 2) {
      struct sock_filter f[] = {
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 3, 0),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fork, 2, 0),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_vfork, 1, 0),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
      };
      struct sock_fprog p = {sizeof f / sizeof f[0], f};
      int l = syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &p);
      if (l < 0) { perror("seccomp"); _exit(1); }
      write(lfd[1], &l, sizeof l);
    }
    if (mode == 1) {
      struct sock_filter f[] = {
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 3, 0),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fork, 2, 0),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_vfork, 1, 0),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE),
      };
      struct sock_fprog p = {sizeof f / sizeof f[0], f};
      if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p)) { perror("seccomp"); _exit(1); }
    }
    int eintr = 0, other = 0;
    double t = now();
    for (int i = 0; i < n; i++) {
      pid_t a = fork();
      if (a == 0) _exit(0);
      pid_t b = fork();  // the first child's SIGCHLD races this one
      if (b == 0) _exit(0);
      if (b < 0) { if (errno == EINTR) eintr++; else other++; }
      while (waitpid(a, 0, 0) < 0 && errno == EINTR) {}
      if (b > 0) while (waitpid(b, 0, 0) < 0 && errno == EINTR) {}
    }
    printf("mode %d delay %d: %d EINTR, %d other, %d SIGCHLD, %.1f us per fork\n", mode, delay, eintr, other, got, (now() - t) / (2.0 * n) * 1e6);
    fflush(stdout);
    _exit(0);
  }
  if (mode == 1) {
    if (ptrace(PTRACE_SEIZE, c, 0, PTRACE_O_TRACESECCOMP | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE | PTRACE_O_EXITKILL)) { perror("seize"); return 1; }
  }
  write(go[1], "g", 1);
  if (mode == 2) {
    int l = -1;
    read(lfd[0], &l, sizeof l);
    int pfd = syscall(__NR_pidfd_open, c, 0);
    int lis = syscall(__NR_pidfd_getfd, pfd, l, 0);
    if (lis < 0) { perror("getfd"); return 1; }
    for (;;) {
      struct pollfd pf = {lis, POLLIN, 0};
      if (poll(&pf, 1, 200) == 0) { if (waitpid(c, 0, WNOHANG) == c) break; continue; }
      if (pf.revents & POLLHUP) break;
      if (delay) usleep(delay);  // the supervisor is slow to take it (a loaded host)
      struct seccomp_notif req; memset(&req, 0, sizeof req);
      if (ioctl(lis, SECCOMP_IOCTL_NOTIF_RECV, &req)) continue;
      struct seccomp_notif_resp r; memset(&r, 0, sizeof r);
      r.id = req.id; r.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
      ioctl(lis, SECCOMP_IOCTL_NOTIF_SEND, &r);
    }
    waitpid(c, 0, 0);
    return 0;
  }
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, __WALL);
    if (p < 0) break;
    if (WIFEXITED(st) || WIFSIGNALED(st)) { if (p == c) break; continue; }
    if (!WIFSTOPPED(st)) continue;
    int ev = (unsigned)st >> 16;
    if (ev == PTRACE_EVENT_SECCOMP) {
      if (delay) usleep(delay);
      ptrace(PTRACE_CONT, p, 0, 0);
    } else if (ev) {
      ptrace(PTRACE_CONT, p, 0, 0);  // fork/vfork/clone events, a new tracee's first stop
    } else {
      ptrace(PTRACE_CONT, p, 0, (void*)(long)WSTOPSIG(st));  // deliver the signal
    }
  }
  return 0;
}
