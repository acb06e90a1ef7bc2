// Spawning on Windows (spawn_win.h).
// Tests: test/win32/spawn.wine.js, test/win32/batch.wine.js, test/win32/console.wine.js,
// test/win32/job.wine.js, test/win32/public-api.wine.js.
#include "spawn_win.h"

#include <algorithm>
#include <atomic>

#include "restricted_token.h"
#include "win_util.h"

namespace psb::win {

namespace {

std::atomic<unsigned> g_pipe_serial{0};

// One stdio pipe: an overlapped server end for the parent (Node's libuv adopts it) and a
// synchronous, inheritable client end for the child. Same shape libuv uses for its own children.
Status CreateStdioPipe(bool child_reads, ScopedHandle* parent_end, ScopedHandle* child_end) noexcept {
  // Unpredictable name: nobody can create it first (FILE_FLAG_FIRST_PIPE_INSTANCE would then fail).
  std::wstring name, rnd;
  Status s = RandomHex(8, ErrorCode::kESPAWN, &rnd);
  if (!s.ok()) return s;
  try {
    name = L"\\\\.\\pipe\\process-sandbox-" + std::to_wstring(::GetCurrentProcessId()) + L"-" +
           std::to_wstring(g_pipe_serial.fetch_add(1)) + L"-" + rnd;
  } catch (...) {
    return WinError(ErrorCode::kESPAWN, "CreateNamedPipeW", ERROR_NOT_ENOUGH_MEMORY);
  }
  const DWORD open_mode = (child_reads ? PIPE_ACCESS_OUTBOUND : PIPE_ACCESS_INBOUND) | FILE_FLAG_OVERLAPPED |
                          FILE_FLAG_FIRST_PIPE_INSTANCE | WRITE_DAC;
  parent_end->Reset(::CreateNamedPipeW(name.c_str(), open_mode,
                                       PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT |
                                           PIPE_REJECT_REMOTE_CLIENTS,
                                       1, 65536, 65536, 0, nullptr));
  if (!parent_end->valid()) return WinError(ErrorCode::kESPAWN, "CreateNamedPipeW", ::GetLastError());

  SECURITY_ATTRIBUTES sa{sizeof(sa), nullptr, TRUE};
  const DWORD access = child_reads ? (GENERIC_READ | FILE_WRITE_ATTRIBUTES) : (GENERIC_WRITE | FILE_READ_ATTRIBUTES);
  child_end->Reset(::CreateFileW(name.c_str(), access, 0, &sa, OPEN_EXISTING, 0, nullptr));
  if (!child_end->valid()) return WinError(ErrorCode::kESPAWN, "CreateFileW", ::GetLastError(), "stdio pipe");

  // The client is already connected; ConnectNamedPipe just confirms it (ERROR_PIPE_CONNECTED).
  OVERLAPPED ov{};
  ScopedHandle ev(::CreateEventW(nullptr, TRUE, FALSE, nullptr));
  ov.hEvent = ev.get();
  if (!::ConnectNamedPipe(parent_end->get(), &ov)) {
    DWORD err = ::GetLastError();
    if (err == ERROR_IO_PENDING) {
      DWORD ignored = 0;
      if (!::GetOverlappedResult(parent_end->get(), &ov, &ignored, TRUE)) err = ::GetLastError();
      else err = ERROR_PIPE_CONNECTED;
    }
    if (err != ERROR_PIPE_CONNECTED) return WinError(ErrorCode::kESPAWN, "ConnectNamedPipe", err);
  }
  return Status::Ok();
}

Status OpenNulInheritable(ScopedHandle* out) noexcept {
  SECURITY_ATTRIBUTES sa{sizeof(sa), nullptr, TRUE};
  out->Reset(::CreateFileW(L"NUL", GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, &sa,
                           OPEN_EXISTING, 0, nullptr));
  if (!out->valid()) return WinError(ErrorCode::kESPAWN, "CreateFileW", ::GetLastError(), "NUL");
  return Status::Ok();
}

// A console handle (the user's terminal). GetFileType alone is not enough: NUL is FILE_TYPE_CHAR
// too, and only a console answers GetConsoleMode.
bool IsConsoleHandle(HANDLE h) noexcept {
  DWORD mode = 0;
  return ::GetFileType(h) == FILE_TYPE_CHAR && ::GetConsoleMode(h, &mode) != FALSE;
}

Status DuplicateInheritable(HANDLE h, ScopedHandle* out) noexcept {
  HANDLE self = ::GetCurrentProcess();
  if (!::DuplicateHandle(self, h, self, out->Receive(), 0, TRUE, DUPLICATE_SAME_ACCESS)) {
    return WinError(ErrorCode::kESPAWN, "DuplicateHandle", ::GetLastError(), "stdio handle");
  }
  return Status::Ok();
}

bool IsDirectory(const std::wstring& path, DWORD* err) noexcept {
  DWORD attrs = ::GetFileAttributesW(path.c_str());
  if (attrs == INVALID_FILE_ATTRIBUTES) {
    *err = ::GetLastError();
    return false;
  }
  *err = 0;
  return (attrs & FILE_ATTRIBUTE_DIRECTORY) != 0;
}

Status CheckPaths(const SpawnOptions& o) noexcept {
  DWORD err = 0;
  if (!IsDirectory(o.cwd, &err)) {
    if (err == 0) err = ERROR_DIRECTORY;
    return Status::Sys(ErrorCode::kEINVALID_ARGUMENT,
                       "cwd '" + Narrow(o.cwd) + "' is not an existing directory (GetFileAttributesW, error " +
                           std::to_string(err) + ")",
                       "GetFileAttributesW", static_cast<int>(err));
  }
  bool app_is_dir = IsDirectory(o.application, &err);
  if (err == ERROR_FILE_NOT_FOUND || err == ERROR_PATH_NOT_FOUND || err == ERROR_INVALID_NAME) {
    return Status::Sys(ErrorCode::kENOT_FOUND,
                       "executable '" + Narrow(o.application) + "' was not found (GetFileAttributesW, error " +
                           std::to_string(err) + ")",
                       "GetFileAttributesW", static_cast<int>(err));
  }
  if (app_is_dir) {
    return Status::Sys(ErrorCode::kENOT_EXECUTABLE, "'" + Narrow(o.application) + "' is a directory",
                       "GetFileAttributesW", ERROR_ACCESS_DENIED);
  }
  return Status::Ok();
}

Status CreateProcessError(const SpawnOptions& o, const char* api, DWORD err) noexcept {
  std::string what = Narrow(o.application);
  switch (err) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
      return WinError(ErrorCode::kENOT_FOUND, api, err, what);
    case ERROR_BAD_EXE_FORMAT:
    case ERROR_EXE_MACHINE_TYPE_MISMATCH:
    case ERROR_ACCESS_DENIED:
      return WinError(ErrorCode::kENOT_EXECUTABLE, api, err, what);
    case ERROR_DIRECTORY:
      return WinError(ErrorCode::kEINVALID_ARGUMENT, api, err, "cwd '" + Narrow(o.cwd) + "'");
    default:
      return WinError(ErrorCode::kESPAWN, api, err, what);
  }
}

}  // namespace

Status CheckSpawnPaths(const std::wstring& application, const std::wstring& cwd) noexcept {
  SpawnOptions o;
  try {
    o.application = application;
    o.cwd = cwd;
  } catch (...) {
    return Status::Error(ErrorCode::kESPAWN, "CheckSpawnPaths: out of memory");
  }
  return CheckPaths(o);
}

Status BuildEnvironmentBlock(std::vector<std::pair<std::wstring, std::wstring>> env,
                             std::wstring* out) noexcept {
  try {
    std::stable_sort(env.begin(), env.end(), [](const auto& a, const auto& b) {
      return ::CompareStringOrdinal(a.first.c_str(), static_cast<int>(a.first.size()), b.first.c_str(),
                                    static_cast<int>(b.first.size()), TRUE) == CSTR_LESS_THAN;
    });
    out->clear();
    for (const auto& kv : env) {
      out->append(kv.first);
      out->push_back(L'=');
      out->append(kv.second);
      out->push_back(L'\0');
    }
    if (env.empty()) out->push_back(L'\0');
    out->push_back(L'\0');
  } catch (...) {
    return WinError(ErrorCode::kESPAWN, "BuildEnvironmentBlock", ERROR_NOT_ENOUGH_MEMORY);
  }
  return Status::Ok();
}

Status Spawn(const SpawnOptions& o, SpawnResult* r) noexcept {
  Status s = CheckPaths(o);
  if (!s.ok()) return s;

  // stdio: the child's ends, all inheritable and listed explicitly.
  ScopedHandle child_ends[3];
  for (int i = 0; i < 3; ++i) {
    switch (o.stdio[i].kind) {
      case StdioChoice::kPipe:
        s = CreateStdioPipe(i == 0, &r->parent_ends[i], &child_ends[i]);
        break;
      case StdioChoice::kHandle:
        if (o.stdio[i].handle != nullptr && o.stdio[i].handle != INVALID_HANDLE_VALUE) {
          // Never hand the user's console to a sandboxed child: with a console input handle it
          // can WriteConsoleInput keystrokes that the user's shell runs after we exit, and read
          // or rewrite the screen buffer. lib/platform/win32.ts forwards consoles through pipes;
          // this is the backstop for callers of the addon itself.
          if (o.sandboxed && IsConsoleHandle(o.stdio[i].handle)) {
            return Status::Error(ErrorCode::kEINVALID_ARGUMENT,
                                 "stdio[" + std::to_string(i) +
                                     "] is a console handle; a sandboxed child must not get the user's console "
                                     "(it could inject keystrokes with WriteConsoleInput): use 'pipe'");
          }
          s = DuplicateInheritable(o.stdio[i].handle, &child_ends[i]);
        } else {
          s = OpenNulInheritable(&child_ends[i]);
        }
        break;
      case StdioChoice::kIgnore:
        s = OpenNulInheritable(&child_ends[i]);
        break;
    }
    if (!s.ok()) return s;
  }

  std::wstring env_block;
  s = BuildEnvironmentBlock(o.env, &env_block);
  if (!s.ok()) return s;

  ScopedHandle token;
  if (o.sandboxed) {
    RestrictedTokenBuilder builder;
    try {
      for (const Sid& cap : o.capability_sids) builder.AddCapabilitySid(cap);
    } catch (...) {
      return WinError(ErrorCode::kETOKEN_CREATE, "CreateRestrictedToken", ERROR_NOT_ENOUGH_MEMORY);
    }
    s = builder.Create(&token);
    if (!s.ok()) return s;
    r->token_restricted = TokenIsRestricted(token.get());
    r->admin_groups_disabled = builder.admin_groups_disabled();
    r->integrity_lowered = builder.integrity_lowered();
    if (o.private_desktop) {
      s = r->desktop.Create(builder.logon_sid());
      if (!s.ok()) return s;
    }
  }
  s = r->job.Create(o.job);
  if (!s.ok()) return s;

  HANDLE inherit[3] = {child_ends[0].get(), child_ends[1].get(), child_ends[2].get()};
  HANDLE job_handle = r->job.get();
  ScopedAttributeList attrs;
  DWORD err = attrs.Init(2);
  if (err != 0) return WinError(ErrorCode::kESPAWN, "InitializeProcThreadAttributeList", err);
  if (!::UpdateProcThreadAttribute(attrs.get(), 0, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, inherit,
                                   sizeof(inherit), nullptr, nullptr)) {
    return WinError(ErrorCode::kESPAWN, "UpdateProcThreadAttribute", ::GetLastError(), "HANDLE_LIST");
  }
#ifndef PROC_THREAD_ATTRIBUTE_JOB_LIST
#define PROC_THREAD_ATTRIBUTE_JOB_LIST ProcThreadAttributeValue(13, FALSE, TRUE, FALSE)
#endif
  // Windows 10+: born inside the job. Older systems and wine fall back to Assign below.
  r->job_via_attribute = ::UpdateProcThreadAttribute(attrs.get(), 0, PROC_THREAD_ATTRIBUTE_JOB_LIST,
                                                     &job_handle, sizeof(job_handle), nullptr,
                                                     nullptr) != FALSE;

  STARTUPINFOEXW si{};
  si.StartupInfo.cb = sizeof(si);
  si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
  si.StartupInfo.hStdInput = child_ends[0].get();
  si.StartupInfo.hStdOutput = child_ends[1].get();
  si.StartupInfo.hStdError = child_ends[2].get();
  si.lpAttributeList = attrs.get();
  if (r->desktop.valid()) si.StartupInfo.lpDesktop = const_cast<LPWSTR>(r->desktop.startup_name().c_str());

  std::wstring cmdline;
  try {
    cmdline = o.command_line;  // CreateProcess*W may write into it
  } catch (...) {
    return WinError(ErrorCode::kESPAWN, "CreateProcessW", ERROR_NOT_ENOUGH_MEMORY);
  }
  DWORD flags = CREATE_UNICODE_ENVIRONMENT | EXTENDED_STARTUPINFO_PRESENT | CREATE_SUSPENDED;
  // A sandboxed child must not share our console (console input injection), so it gets its own
  // hidden one.
  if (o.sandboxed) flags |= CREATE_NO_WINDOW;

  PROCESS_INFORMATION pi{};
  BOOL ok;
  const char* api;
  if (o.sandboxed) {
    api = "CreateProcessAsUserW";
    ok = ::CreateProcessAsUserW(token.get(), o.application.c_str(), cmdline.data(), nullptr, nullptr, TRUE,
                                flags, env_block.data(), o.cwd.c_str(), &si.StartupInfo, &pi);
  } else {
    api = "CreateProcessW";
    ok = ::CreateProcessW(o.application.c_str(), cmdline.data(), nullptr, nullptr, TRUE, flags,
                          env_block.data(), o.cwd.c_str(), &si.StartupInfo, &pi);
  }
  if (!ok) {
    err = ::GetLastError();
    return CreateProcessError(o, api, err);
  }
  r->process.Reset(pi.hProcess);
  ScopedHandle thread(pi.hThread);
  r->pid = pi.dwProcessId;

  if (!r->job.Contains(r->process.get())) {
    r->job_via_attribute = false;
    s = r->job.Assign(r->process.get());
    if (!s.ok()) {
      ::TerminateProcess(r->process.get(), 1);
      return s;
    }
  }
  if (::ResumeThread(thread.get()) == static_cast<DWORD>(-1)) {
    err = ::GetLastError();
    ::TerminateProcess(r->process.get(), 1);
    return WinError(ErrorCode::kESPAWN, "ResumeThread", err);
  }
  return Status::Ok();
}

}  // namespace psb::win
