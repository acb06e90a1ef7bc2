// RAII owners for every Windows handle type the addon touches. One owner per handle; no manual
// CloseHandle before return. Copy is deleted; move transfers ownership.
//
//   ScopedHandle job(CreateJobObjectW(nullptr, nullptr));
//   if (!job.valid()) return Status::Sys(..., GetLastError());
//   ... job.get() ...            // closed when `job` goes out of scope
//
// Not thread-safe: an owner is used from one thread at a time.
// Tests: none directly; every Windows test (test/win32/*.wine.js) goes through it.
#pragma once

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <new>
#include <utility>

namespace psb::win {

template <typename Traits>
class ScopedGeneric {
 public:
  using Handle = typename Traits::Handle;

  ScopedGeneric() noexcept : h_(Traits::Null()) {}
  explicit ScopedGeneric(Handle h) noexcept : h_(h) {}
  ~ScopedGeneric() { Reset(); }
  ScopedGeneric(const ScopedGeneric&) = delete;
  ScopedGeneric& operator=(const ScopedGeneric&) = delete;
  ScopedGeneric(ScopedGeneric&& other) noexcept : h_(other.Release()) {}
  ScopedGeneric& operator=(ScopedGeneric&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }

  bool valid() const noexcept { return Traits::IsValid(h_); }
  Handle get() const noexcept { return h_; }
  // For out-parameters: closes the current handle and returns the slot to fill.
  Handle* Receive() noexcept {
    Reset();
    return &h_;
  }
  Handle Release() noexcept { return std::exchange(h_, Traits::Null()); }
  void Reset(Handle h = Traits::Null()) noexcept {
    if (Traits::IsValid(h_)) Traits::Close(h_);
    h_ = h;
  }

 private:
  Handle h_;
};

struct HandleTraits {
  using Handle = HANDLE;
  static Handle Null() noexcept { return nullptr; }
  static bool IsValid(Handle h) noexcept { return h != nullptr && h != INVALID_HANDLE_VALUE; }
  static void Close(Handle h) noexcept { ::CloseHandle(h); }
};

struct DesktopTraits {
  using Handle = HDESK;
  static Handle Null() noexcept { return nullptr; }
  static bool IsValid(Handle h) noexcept { return h != nullptr; }
  static void Close(Handle h) noexcept { ::CloseDesktop(h); }
};

// Memory returned by ConvertStringSidToSidW, ConvertSidToStringSidW, SetEntriesInAclW,
// GetNamedSecurityInfoW (the security descriptor), ...: released with LocalFree.
template <typename T>
struct LocalTraits {
  using Handle = T;
  static Handle Null() noexcept { return nullptr; }
  static bool IsValid(Handle h) noexcept { return h != nullptr; }
  static void Close(Handle h) noexcept { ::LocalFree(reinterpret_cast<HLOCAL>(h)); }
};

using ScopedHandle = ScopedGeneric<HandleTraits>;
using ScopedDesktop = ScopedGeneric<DesktopTraits>;
template <typename T>
using ScopedLocal = ScopedGeneric<LocalTraits<T>>;

// A PROC_THREAD_ATTRIBUTE_LIST with its storage; DeleteProcThreadAttributeList on destruction.
class ScopedAttributeList {
 public:
  ScopedAttributeList() = default;
  ~ScopedAttributeList() {
    if (initialized_) ::DeleteProcThreadAttributeList(get());
    delete[] storage_;
  }
  ScopedAttributeList(const ScopedAttributeList&) = delete;
  ScopedAttributeList& operator=(const ScopedAttributeList&) = delete;

  // Returns the Win32 error (0 on success).
  DWORD Init(DWORD count) noexcept {
    SIZE_T size = 0;
    ::InitializeProcThreadAttributeList(nullptr, count, 0, &size);
    storage_ = new (std::nothrow) unsigned char[size];
    if (storage_ == nullptr) return ERROR_NOT_ENOUGH_MEMORY;
    if (!::InitializeProcThreadAttributeList(get(), count, 0, &size)) return ::GetLastError();
    initialized_ = true;
    return 0;
  }
  LPPROC_THREAD_ATTRIBUTE_LIST get() const noexcept {
    return reinterpret_cast<LPPROC_THREAD_ATTRIBUTE_LIST>(storage_);
  }

 private:
  unsigned char* storage_ = nullptr;
  bool initialized_ = false;
};

}  // namespace psb::win
