// See answer_later.h.
//
// Why the write side polls a non-blocking open instead of blocking in open() on its thread: a
// FIFO's blocking open returns only when a reader comes or a signal interrupts it, and the host
// (Node) owns signal dispositions; a thread blocked there would outlive a command killed while
// waiting, and the sandbox, for as long as no reader ever came. A non-blocking open succeeds
// exactly when the blocking one would return (a reader holds the FIFO open, or is itself waiting
// in its open: the kernel counts a reader before it waits for a writer, and wakes it when this open
// succeeds), so the command sees the kernel's meaning, at most kPollMs later than a reader came.
// Tests: test/linux/landlock-fifo.test.ts, test/linux/landlock-carveouts.test.ts (fd answers).
#include "answer_later.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <new>

#include "notify_abi.h"
#include "notify_args.h"

namespace psb {
namespace later {
namespace {

constexpr uint32_t kAddfdFlagSend = 2;  // SECCOMP_ADDFD_FLAG_SEND (5.14)

std::atomic<int> g_waiters{0};

struct Wait {
  std::shared_ptr<Share> share;  // the sandbox's count, released when the waiter ends
  int listener;  // a copy of our own: the supervisor may close its listener meanwhile
  int fd;        // read: the FIFO (O_NONBLOCK); write: the pinned object (O_PATH)
  uint64_t id;
  int flags;     // write: the open's flags; -1: read side
  bool cloexec;
};

// Takes one place in the sandbox's share, then one in the host's; false (nothing taken) when
// either is full. The share first: a sandbox at its own limit never touches the host's count.
bool Enter(Share* share) {
  if (share == nullptr) return false;
  if (share->waiters.fetch_add(1, std::memory_order_relaxed) >= kMaxWaitersPerSandbox) {
    share->waiters.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  if (g_waiters.fetch_add(1, std::memory_order_relaxed) >= kMaxWaiters) {
    g_waiters.fetch_sub(1, std::memory_order_relaxed);
    share->waiters.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void Leave(Share* share) {
  g_waiters.fetch_sub(1, std::memory_order_relaxed);
  share->waiters.fetch_sub(1, std::memory_order_relaxed);
}

void MakeBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); }

// The write side's wait: 0 with a new fd in *out once a reader came, -errno, or kGone when the
// call is gone (the command killed or interrupted while it waited).
constexpr int kGone = 1;
int OpenForReader(const Wait& w, int* out) {
  // The thread inherits its creator's credentials (cleared), but says so itself: the open must
  // be checked as the command's, never with the host's capabilities.
  nargs::EffectiveCapsCleared lowered;
  if (!lowered.ok()) return -EPERM;
  const nargs::FdName proc(w.fd);
  for (int delay = 1;; delay = std::min(delay * 2, kPollMs)) {
    const int f = open(proc, w.flags | O_NONBLOCK);
    if (f >= 0) {
      *out = f;
      return 0;
    }
    if (errno != ENXIO) return -errno;
    poll(nullptr, 0, delay);
    if (!notify::IdValid(w.listener, w.id)) return kGone;
  }
}

void* Waiter(void* arg) {
  Wait* w = static_cast<Wait*>(arg);
  pthread_setname_np(pthread_self(), w->flags < 0 ? "psb-fifo-read" : "psb-fifo-write");
  int give = -1, err = 0;
  if (w->flags < 0) {
    for (;;) {
      struct pollfd p = {w->fd, POLLIN, 0};
      const int r = poll(&p, 1, kPollMs);
      if (r > 0 || (r < 0 && errno != EINTR)) {
        give = w->fd;
        break;
      }
      if (!notify::IdValid(w->listener, w->id)) break;
    }
  } else {
    const int r = OpenForReader(*w, &give);
    if (r < 0) err = r;
  }
  // A call that is gone (the command killed while waiting) gets nothing: the fd is closed.
  if (give >= 0 && notify::IdValid(w->listener, w->id)) {
    MakeBlocking(give);
    AnswerWithFd(w->listener, w->id, give, w->cloexec);
  } else if (err < 0) {
    notify::Respond(w->listener, w->id, err);
  }
  if (give >= 0 && give != w->fd) close(give);
  close(w->fd);
  close(w->listener);
  Leave(w->share.get());
  delete w;
  return nullptr;
}

bool Start(const std::shared_ptr<Share>& share, int listener, uint64_t id, int fd, int flags, bool cloexec) {
  if (!Enter(share.get())) return false;
  Wait* w = new (std::nothrow) Wait{share, fcntl(listener, F_DUPFD_CLOEXEC, 0), fd, id, flags, cloexec};
  if (w == nullptr || w->listener < 0) {
    if (w != nullptr) delete w;
    Leave(share.get());
    return false;
  }
  if (StartSignalFreeThread(Waiter, w, 64 * 1024) != 0) {
    close(w->listener);
    delete w;
    Leave(share.get());
    return false;
  }
  return true;
}

// Whether our copy of `fd` must be gone before the command runs again: a regular file open for
// writing that can be executed. ADDFD with SEND wakes the command with the fd while this thread
// still holds the same open file, until its own wake-up; a command that writes such a file, closes
// it and executes it at once (cp of a binary, a linker's output) would meet ETXTBSY if this
// thread is slow to run (a loaded host). Other files lose nothing by our copy's few microseconds
// more (the FIFO opens here are read-only or never regular files).
bool MustDropFirst(int fd) {
  const int fl = fcntl(fd, F_GETFL);
  struct stat st;
  return fl >= 0 && (fl & O_ACCMODE) != O_RDONLY && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0;
}

}  // namespace

int StartSignalFreeThread(void* (*fn)(void*), void* arg, size_t stack_size) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, stack_size);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  const int rc = pthread_create(&t, &attr, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  return rc;
}

void AnswerWithFd(int listener, uint64_t id, int fd, bool cloexec) {
  static std::atomic<bool> no_send{false};
  notify::SeccompNotifAddfd a;
  memset(&a, 0, sizeof a);
  a.id = id;
  a.srcfd = static_cast<uint32_t>(fd);
  a.newfd_flags = cloexec ? O_CLOEXEC : 0;
  if (MustDropFirst(fd)) {
    // Two steps: the fd goes in (the command takes it and keeps waiting), our reference goes
    // (the caller's fd number now names /dev/null, which it closes as before), then the answer.
    static const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int r = ioctl(listener, notify::kNotifAddfd, &a);
    if (r < 0) {
      if (errno != ENOENT) notify::Respond(listener, id, -errno);
      return;
    }
    if (null_fd >= 0) dup3(null_fd, fd, O_CLOEXEC);
    notify::RespondResult(listener, id, r);
    return;
  }
  if (!no_send.load(std::memory_order_relaxed)) {
    a.flags = kAddfdFlagSend;
    if (ioctl(listener, notify::kNotifAddfd, &a) >= 0) return;
    if (errno != EINVAL) {
      if (errno != ENOENT) notify::Respond(listener, id, -errno);
      return;
    }
    no_send.store(true, std::memory_order_relaxed);
    a.flags = 0;
  }
  const int r = ioctl(listener, notify::kNotifAddfd, &a);
  if (r < 0) {
    if (errno != ENOENT) notify::Respond(listener, id, -errno);
    return;
  }
  notify::RespondResult(listener, id, r);
}

std::shared_ptr<Share> NewShare() noexcept {
  return std::shared_ptr<Share>(new (std::nothrow) Share());
}

bool WaitForWriter(const std::shared_ptr<Share>& share, int listener, uint64_t id, int fd, bool cloexec) {
  return Start(share, listener, id, fd, -1, cloexec);
}

bool WaitForReader(const std::shared_ptr<Share>& share, int listener, uint64_t id, int obj, int flags, bool cloexec) {
  return Start(share, listener, id, obj, flags & ~O_NONBLOCK, cloexec);
}

}  // namespace later
}  // namespace psb
