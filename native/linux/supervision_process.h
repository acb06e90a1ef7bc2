// Landlock mode's supervision in a process of its own (supervision_process.cc has the design).
// The host starts it (lib/platform/linux/supervision-process.ts) and attaches to it; its
// Landlock-mode spawns then go to it. Tests: see supervision_process.cc.
#pragma once

#include <stdint.h>

#include <memory>
#include <string>
#include <vector>

#include <napi.h>

#include "../status.h"

namespace psb {

// The process's side: its main loop (native.serveSupervision(fd)).
Napi::Value ServeSupervisionJs(const Napi::CallbackInfo& info);
// The host's side: the channel, waiting for the process, whether it runs, and a spawn through it.
Napi::Value SupervisionSocketpairJs(const Napi::CallbackInfo& info);
Napi::Value SupervisionAttachJs(const Napi::CallbackInfo& info);
Napi::Value SupervisionProcessJs(const Napi::CallbackInfo& info);
Napi::Value SpawnInSupervisionProcessJs(const Napi::CallbackInfo& info);
Napi::Value TestPlanWireJs(const Napi::CallbackInfo& info);
// AdmitProxyPeer (supervise_connect.h) asked of the process, whose connect classes registered
// the peers of the sandboxes it supervises. False when none runs.
bool AdmitProxyPeerInSupervisionProcess(uint16_t proxy_port, uint16_t peer_port, bool supervised) noexcept;
// changes::CloseByDir (changes_journal.h) asked of the process, where the journals of the
// sandboxes it made are open. 0 when none runs (or it has no such journal).
int CloseJournalInSupervisionProcess(const std::string& dir) noexcept;

// Sandboxes prepared ahead there (spare_binding.cc routes a spare made with `inProcess` here):
// the plan as sent (on the JS thread); the preparation (off it: it waits for the process); the
// go (null when the spare could not be used: it is gone, the caller starts afresh); a discard.
// The preparation is sent (its id chosen here, NextSpareIdInSupervisionProcess), then its end is
// awaited; the go may be sent as soon as it is sent (the process serves them in that order).
void SpareToWire(Napi::Env env, const Napi::Object& plan, std::string* data, std::vector<int>* fds);
struct SupervisionReply;
int32_t NextSpareIdInSupervisionProcess() noexcept;
// Null (with *err) when it could not be sent.
std::shared_ptr<SupervisionReply> SendPrepareToSupervisionProcess(std::string data, std::vector<int> fds, int32_t id, Status* err) noexcept;
Status AwaitPrepareInSupervisionProcess(const std::shared_ptr<SupervisionReply>& sent) noexcept;
Napi::Value SpawnSpareInSupervisionProcess(Napi::Env env, int32_t id, const Napi::Object& go, const Napi::Function& on_exit);
void DiscardSpareInSupervisionProcess(int32_t id) noexcept;

}  // namespace psb
