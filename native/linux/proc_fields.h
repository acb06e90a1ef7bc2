// Reading a field of a small /proc file (stat, status, fdinfo) for host-side code: the
// supervisors' threads and the addon's entry points. Not for code between fork and exec or in
// the sandbox's init (those parse /proc with raw syscalls of their own): these use libc.
// None of them allocates; each reads at most the buffer it is given, which is enough for the
// fields asked for (they are near the start of each file).
// Tests: see proc_fields.cc.
#pragma once

#include <stddef.h>
#include <sys/types.h>

namespace psb {
namespace procfs {

// Reads the start of the file at `path` into buf (at most size - 1 bytes), NUL-terminated.
// False when it cannot be opened or read, or is empty (the task is gone).
bool ReadSmall(const char* path, char* buf, size_t size);

// The fields of /proc/<pid>/stat after the command name, up to tty_nr.
struct StatFields {
  char state = 0;
  long ppid = 0;
  long pgrp = 0;
  long session = 0;
  unsigned long tty_nr = 0;
};

// Reads /proc/<pid>/stat into *out: the number of fields after the command name it could parse,
// in the order of StatFields (0 when the file cannot be read). The name is skipped up to the
// last ')': it may hold anything else, spaces and parentheses included.
int ReadStat(long pid, StatFields* out);

// The number (base 8 or 10, as strtol reads it) on the line "key:" of text (a status or fdinfo
// file's contents), or `missing` when no line starts with that key.
long KeyNumber(const char* text, const char* key, int base, long missing);

// The calling process's umask, without changing it (umask(2) can only set it: another thread
// could create a file in between). -1 when it cannot be read.
int Umask();

}  // namespace procfs
}  // namespace psb
