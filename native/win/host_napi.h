// Node-API symbols resolved from the host process at load time (mingw builds; the MSVC build
// through node-gyp gets the same effect from node-gyp's win_delay_load_hook).
//
// An import library made from node_api.def binds every napi_* call to a DLL named NODE.EXE, so
// the addon fails to load ("The specified module could not be found") in any host whose
// executable has another name: every Electron app, pkg/nexe/SEA binaries, a renamed node.exe.
// Instead, we compile with NAPI_EXTERN=__declspec(dllimport), so each call goes through a pointer
// named __imp_<function>; cmake/gen-host-napi.cmake defines those pointers (host_napi_table.c),
// and DllMain (host_napi.cc) fills them with GetProcAddress on the module that exports Node-API:
// the process image (node.exe, electron.exe), else libnode.dll / node.dll for embedders.
// Runs under the loader lock: only GetModuleHandleW and GetProcAddress, which load nothing.
// Tests: see host_napi.cc.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PsbNapiSlot {
  const char* name;
  void** slot;
} PsbNapiSlot;

extern const PsbNapiSlot psb_napi_slots[];
extern const unsigned psb_napi_slot_count;

#ifdef __cplusplus
}
#endif
