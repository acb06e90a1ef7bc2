// The host-side calls of the changes feature (lib/changes): closing a recorded run's journal, and
// the two file operations Node's fs lacks that revert and the staged layer need. Tests:
// test/changes/*.test.ts.
#include <errno.h>
#include <napi.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <string>

#include "binding_linux.h"
#include "supervision_process.h"
#include "supervisor/changes_journal.h"

namespace psb {

// native.xattr(path, name[, value]) -> without value: the attribute's value (a string), or
// -errno (-ENODATA: none); with value: sets it, 0 or -errno. Never follows a final symlink.
// Node's fs has no xattr call; changes: 'stage' reads overlayfs's user.overlay.opaque marks and
// checks that a layer dir's file system takes user xattrs (lib/changes/overlay.ts).
Napi::Value XattrJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsString() || (info.Length() > 2 && !info[2].IsString())) {
    throw Napi::TypeError::New(env, "Usage: native.xattr(path, name[, value])");
  }
  std::string p = info[0].As<Napi::String>().Utf8Value(), name = info[1].As<Napi::String>().Utf8Value();
  if (info.Length() > 2) {
    std::string v = info[2].As<Napi::String>().Utf8Value();
    return Napi::Number::New(env, lsetxattr(p.c_str(), name.c_str(), v.data(), v.size(), 0) == 0 ? 0 : -errno);
  }
  char v[256];
  ssize_t n = lgetxattr(p.c_str(), name.c_str(), v, sizeof v);
  if (n < 0) return Napi::Number::New(env, -errno);
  return Napi::String::New(env, v, static_cast<size_t>(n));
}

// native.closeChangesJournal(dir): after the sandbox ended, waits for a journaled call in progress
// and refuses every later one (changes_journal.h). 1 closed, 0 none registered, -1 incomplete.
Napi::Value CloseChangesJournalJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "Usage: native.closeChangesJournal(dir)");
  const std::string dir = info[0].As<Napi::String>().Utf8Value();
  int r = changes::CloseByDir(dir);
  // A sandbox made by the supervision process (the default): its journal is open there.
  if (r == 0) r = CloseJournalInSupervisionProcess(dir);
  return Napi::Number::New(env, r);
}

// native.mkfifo(path, mode): 0 or -errno. Revert puts back a FIFO a recorded command removed
// (lib/changes/journal.ts); Node has no mkfifo.
Napi::Value MkfifoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "Usage: native.mkfifo(path, mode)");
  const std::string p = info[0].As<Napi::String>().Utf8Value();
  const int rc = mkfifo(p.c_str(), static_cast<mode_t>(info[1].As<Napi::Number>().Uint32Value() & 07777));
  return Napi::Number::New(env, rc == 0 ? 0 : -errno);
}

}  // namespace psb
