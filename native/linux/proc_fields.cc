// Fields of small /proc files (proc_fields.h).
// Tests: none directly; used by the supervisors and spare_binding.cc, so exercised by
// test/linux/signals.test.ts, test/linux/connect-supervisor.test.ts,
// test/linux/supervisor-access.test.ts, test/linux/spare.test.ts and test/srt/wrap-attach.test.ts.
#include "proc_fields.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace psb {
namespace procfs {

bool ReadSmall(const char* path, char* buf, size_t size) {
  const int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) return false;
  const ssize_t n = read(f, buf, size - 1);
  close(f);
  if (n <= 0) return false;
  buf[n] = 0;
  return true;
}

int ReadStat(long pid, StatFields* out) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  if (!ReadSmall(path, buf, sizeof buf)) return 0;
  const char* p = strrchr(buf, ')');  // the command name may hold anything but the last ')'
  if (p == nullptr) return 0;
  const int got = sscanf(p + 1, " %c %ld %ld %ld %lu", &out->state, &out->ppid, &out->pgrp, &out->session, &out->tty_nr);
  return got < 0 ? 0 : got;
}

long KeyNumber(const char* text, const char* key, int base, long missing) {
  const size_t k = strlen(key);
  for (const char* line = text; line != nullptr;) {
    if (strncmp(line, key, k) == 0 && line[k] == ':') return strtol(line + k + 1, nullptr, base);
    line = strchr(line, '\n');
    if (line != nullptr) ++line;
  }
  return missing;
}

int Umask() {
  char buf[2048];
  if (!ReadSmall("/proc/thread-self/status", buf, sizeof buf)) return -1;
  return static_cast<int>(KeyNumber(buf, "Umask", 8, -1));
}

}  // namespace procfs
}  // namespace psb
