// See host_napi.h. The DLL entry point of the mingw build of the addon.
// Tests: test/win32/host-rename.wine.js (a host not named node.exe loads the addon).
#include "host_napi.h"

#include <windows.h>

namespace {

// The module whose exports provide Node-API: the first of the process image and the usual
// embedder DLLs that exports napi_module_register (present in every Node-API version).
HMODULE FindNapiHost() noexcept {
  const wchar_t* const names[] = {nullptr, L"libnode.dll", L"node.dll"};
  for (const wchar_t* name : names) {
    HMODULE m = ::GetModuleHandleW(name);
    if (m != nullptr && ::GetProcAddress(m, "napi_module_register") != nullptr) return m;
  }
  return nullptr;
}

bool ResolveHostNapi() noexcept {
  HMODULE host = FindNapiHost();
  if (host == nullptr) return false;
  for (unsigned i = 0; i < psb_napi_slot_count; ++i) {
    FARPROC p = ::GetProcAddress(host, psb_napi_slots[i].name);
    // Missing in an older runtime: the slot keeps its stub (napi_generic_failure).
    if (p != nullptr) *psb_napi_slots[i].slot = reinterpret_cast<void*>(p);
  }
  return true;
}

}  // namespace

extern "C" BOOL WINAPI DllMain(HINSTANCE, DWORD reason, LPVOID) {
  if (reason == DLL_PROCESS_ATTACH) {
    // No Node-API host in this process (loaded by something that is not Node): refuse to load
    // (LoadLibrary fails with ERROR_DLL_INIT_FAILED) rather than run with dangling calls.
    if (!ResolveHostNapi()) {
      ::SetLastError(ERROR_PROC_NOT_FOUND);
      return FALSE;
    }
  }
  return TRUE;
}
