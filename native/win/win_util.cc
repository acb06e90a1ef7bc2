// Windows helpers (win_util.h).
// Tests: none directly; used by every Windows mechanism (test/win32/*.wine.js).
#include "win_util.h"

namespace psb::win {

std::wstring Widen(const std::string& utf8) noexcept {
  try {
    if (utf8.empty()) return std::wstring();
    int n = ::MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()), nullptr, 0);
    std::wstring out(static_cast<size_t>(n), L'\0');
    ::MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()), out.data(), n);
    return out;
  } catch (...) {
    return std::wstring();
  }
}

std::string Narrow(const std::wstring& wide) noexcept {
  try {
    if (wide.empty()) return std::string();
    int n = ::WideCharToMultiByte(CP_UTF8, 0, wide.data(), static_cast<int>(wide.size()), nullptr, 0,
                                  nullptr, nullptr);
    std::string out(static_cast<size_t>(n), '\0');
    ::WideCharToMultiByte(CP_UTF8, 0, wide.data(), static_cast<int>(wide.size()), out.data(), n,
                          nullptr, nullptr);
    return out;
  } catch (...) {
    return std::string();
  }
}

Status WinError(ErrorCode code, const char* api, DWORD err, const std::string& what) noexcept {
  try {
    std::string msg = std::string(api) + " failed, error " + std::to_string(err);
    if (!what.empty()) msg += ": " + what;
    return Status::Sys(code, std::move(msg), api, static_cast<int>(err));
  } catch (...) {
    return Status();
  }
}

Status RandomHex(size_t bytes, ErrorCode code, std::wstring* out) noexcept {
  // RtlGenRandom (advapi32!SystemFunction036) is what rand_s uses; no bcrypt dependency.
  unsigned char buf[32];
  if (bytes > sizeof(buf)) bytes = sizeof(buf);
  HMODULE advapi = ::GetModuleHandleW(L"advapi32.dll");
  using GenRandom = BOOLEAN(WINAPI*)(PVOID, ULONG);
  auto fn = advapi != nullptr ? reinterpret_cast<GenRandom>(reinterpret_cast<void*>(
                                    ::GetProcAddress(advapi, "SystemFunction036")))
                              : nullptr;
  if (fn == nullptr || !fn(buf, static_cast<ULONG>(bytes))) return WinError(code, "RtlGenRandom", ERROR_GEN_FAILURE);
  static const wchar_t kHex[] = L"0123456789abcdef";
  try {
    out->clear();
    for (size_t i = 0; i < bytes; ++i) {
      out->push_back(kHex[buf[i] >> 4]);
      out->push_back(kHex[buf[i] & 15]);
    }
  } catch (...) {
    return WinError(code, "RtlGenRandom", ERROR_NOT_ENOUGH_MEMORY);
  }
  return Status::Ok();
}

std::string WineVersion() noexcept {
  HMODULE ntdll = ::GetModuleHandleW(L"ntdll.dll");
  if (ntdll == nullptr) return std::string();
  using WineGetVersion = const char*(__cdecl*)();
  auto fn = reinterpret_cast<WineGetVersion>(
      reinterpret_cast<void*>(::GetProcAddress(ntdll, "wine_get_version")));
  if (fn == nullptr) return std::string();
  const char* v = fn();
  return v != nullptr ? std::string(v) : std::string("unknown");
}

}  // namespace psb::win
