// The Linux addon's entry points, one per native.<name> (lib/native.ts LinuxNative), each named
// <Name>Js and registered in binding_linux.cc's table; the files that hold them say what they
// cover. Modules with entry points of their own register them with Register<Module>.
// Tests: see binding_linux.cc.
#pragma once

#include <napi.h>

namespace psb {

// binding_linux.cc
Napi::Value SpawnJs(const Napi::CallbackInfo& info);
Napi::Value ListenLoopbackJs(const Napi::CallbackInfo& info);
Napi::Value AdmitProxyPeerJs(const Napi::CallbackInfo& info);
Napi::Value DropQueuedConnectionsJs(const Napi::CallbackInfo& info);
Napi::Value CloseOnPoolJs(const Napi::CallbackInfo& info);
Napi::Value DirWatchOpenJs(const Napi::CallbackInfo& info);
Napi::Value DirWatchAddJs(const Napi::CallbackInfo& info);
Napi::Value DirWatchRemoveJs(const Napi::CallbackInfo& info);
Napi::Value DirWatchPollJs(const Napi::CallbackInfo& info);
// Closes fd on libuv's thread pool (binding_linux.cc).
void CloseOnPool(Napi::Env env, int fd);

// spare_binding.cc
Napi::Value PrepareSpareJs(const Napi::CallbackInfo& info);
Napi::Value SpawnSpareJs(const Napi::CallbackInfo& info);
Napi::Value DiscardSpareJs(const Napi::CallbackInfo& info);
Napi::Value DiscardSpareAsyncJs(const Napi::CallbackInfo& info);

// placeholder_ops.cc
Napi::Value LockPlaceholderJs(const Napi::CallbackInfo& info);
Napi::Value ReleasePlaceholderJs(const Napi::CallbackInfo& info);
Napi::Value RemoveLookalikeJs(const Napi::CallbackInfo& info);

// changes_binding.cc
Napi::Value XattrJs(const Napi::CallbackInfo& info);
Napi::Value CloseChangesJournalJs(const Napi::CallbackInfo& info);
Napi::Value MkfifoJs(const Napi::CallbackInfo& info);

// host_probe.cc
Napi::Value ProbeJs(const Napi::CallbackInfo& info);
Napi::Value CgroupDelegatedJs(const Napi::CallbackInfo& info);
Napi::Value UidTaskCountJs(const Napi::CallbackInfo& info);
Napi::Value SeccompSelfCheckJs(const Napi::CallbackInfo& info);
Napi::Value TestPosixLockJs(const Napi::CallbackInfo& info);
Napi::Value TestSkipPathChecksJs(const Napi::CallbackInfo& info);

// exit_watch.h: KillJs, SetRefJs.

}  // namespace psb
