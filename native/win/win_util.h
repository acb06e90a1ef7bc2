// Small helpers shared by the Windows mechanism files: UTF-8 <-> UTF-16, Status from a Win32
// error, and wine detection. All noexcept; no Napi types.
// Tests: see win_util.cc.
#pragma once

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <string>

#include "../status.h"

namespace psb::win {

std::wstring Widen(const std::string& utf8) noexcept;
std::string Narrow(const std::wstring& wide) noexcept;

// Status::Sys with the message "<api> failed, error <n>[: <what>]", as STYLE.md rule 6 asks.
// `err` must be the GetLastError() value captured straight after the failing call.
Status WinError(ErrorCode code, const char* api, DWORD err, const std::string& what = {}) noexcept;

// `bytes` random bytes (RtlGenRandom) as lower-case hex, for object names nobody can predict.
Status RandomHex(size_t bytes, ErrorCode code, std::wstring* out) noexcept;

// The wine version string when running under wine ("8.0"), else empty. Detected through
// ntdll!wine_get_version, so it never calls an API that wine stubs out.
std::string WineVersion() noexcept;

}  // namespace psb::win
