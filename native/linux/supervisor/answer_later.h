// Answers the path and read supervisors give with an fd, and the FIFO opens they leave to a
// short-lived thread of their own (supervise_paths.cc, supervise_reads.cc). A named FIFO's
// blocking open waits for a partner (a reader for a writer, a writer for a reader); the
// supervisor's thread must never wait so (every other call of the sandbox would wait too), and the
// command must still get the kernel's meaning: a writer waits for a reader, a reader for a writer.
//
// Threading: each waiter is a detached host thread with every signal blocked that holds only
// copies of its own (a dup of the listener, its fds, the notification's id): nothing of the
// sandbox's supervisor, which may be freed meanwhile, and it never calls into Node. It ends when
// its partner came (it answers) or when the call is gone (SECCOMP_IOCTL_NOTIF_ID_VALID fails: the
// command was killed or interrupted; it closes its fds and answers nothing), checked at least
// every kPollMs, so no waiter outlives the command's call by more than that.
//
// Limits: each is a host thread, so their number is bounded twice. A sandbox has a Share of its
// own (kMaxWaitersPerSandbox at once), which its supervisor makes and passes to both classes: a
// command that parks writers on FIFOs nobody reads exhausts its own share, never another
// sandbox's. kMaxWaiters bounds all sandboxes of the host together, and is several shares wide,
// so one sandbox alone never takes it. Past either, a call is not waited for (see each Wait*).
// Tests: see answer_later.cc.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <memory>

namespace psb {
namespace later {

constexpr int kPollMs = 250;
constexpr int kMaxWaiters = 512;
constexpr int kMaxWaitersPerSandbox = 64;

// One sandbox's count of running waiters. Each waiter holds a reference: the supervisor that made
// it may be freed (the command gone) while its waiters still notice that.
struct Share {
  std::atomic<int> waiters{0};
};

// A new share, or null without memory (then no waiter is started for that sandbox).
std::shared_ptr<Share> NewShare() noexcept;

// A supervisor step's answer when a waiter took the call over (it answers, not the caller).
constexpr int kAnsweredLater = 1;

// Gives our fd to the command (SECCOMP_IOCTL_NOTIF_ADDFD) with the answer: SECCOMP_ADDFD_FLAG_SEND
// does both at once (5.14+); before it, the fd number ADDFD returns is sent as the call's result.
// A call that is gone (ENOENT: the command was killed) gets nothing. fd stays the caller's.
void AnswerWithFd(int listener, uint64_t id, int fd, bool cloexec);

// Read side: fd (ours, taken) is a named FIFO opened O_RDONLY|O_NONBLOCK. A waiter answers with it,
// made blocking, once the first writer has written or come and gone (POLLIN or POLLHUP: a reader
// opened before any writer sees no POLLHUP until one has left). True when a waiter took it; false
// (fd still the caller's): none could be started (the share or the host's limit is reached).
bool WaitForWriter(const std::shared_ptr<Share>& share, int listener, uint64_t id, int fd, bool cloexec);

// Write side: obj (ours, taken) is the pinned FIFO (O_PATH) the supervisor judged writable; flags
// the command's open flags (O_WRONLY, no O_NONBLOCK), with which a non-blocking open found no
// reader (ENXIO). A waiter reopens obj (/proc/self/fd/N: nothing is resolved again) with flags
// and O_NONBLOCK until a reader is there, with this thread's effective capabilities cleared (the
// command's own permission check), and answers with the fd made blocking, or with the open's
// errno. True when a waiter took it; false (obj still the caller's): none could be started.
bool WaitForReader(const std::shared_ptr<Share>& share, int listener, uint64_t id, int obj, int flags, bool cloexec);

// A detached thread with every signal blocked (no signal is ever delivered to the supervision's
// threads: Node's handlers run on its own). 0 or an errno. Used for the waiters here and for the
// supervision's own thread (supervisor.cc).
int StartSignalFreeThread(void* (*fn)(void*), void* arg, size_t stack_size);

}  // namespace later
}  // namespace psb
