#!/usr/bin/env bash
# Cross-build the Windows addon on Linux: cmake-js + mingw-w64 (-posix) -> a statically linked
# prebuilds/win32-x64/process-sandbox.node that imports only system DLLs: Node-API comes from the
# host process at load time (native/win/host_napi.h), so renamed hosts (Electron) load it.
# Sources come from native/sources.json ("common" + "win"), the list binding.gyp reads too.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v x86_64-w64-mingw32-g++-posix >/dev/null || ! command -v cmake >/dev/null; then
  echo "build-win: installing the mingw-w64 toolchain and cmake (apt)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends g++-mingw-w64-x86-64-posix cmake ninja-build >/dev/null
fi
[ -d node_modules/cmake-js ] && [ -d node_modules/node-api-headers ] && [ -d node_modules/node-addon-api ] \
  || npm ci --no-audit --no-fund --ignore-scripts

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Out of build/: that folder belongs to node-gyp, and node-gyp-build prefers build/Release.
npx cmake-js compile "${generator[@]}" -p 1 -O .win/build -l warn \
  --CDCMAKE_TOOLCHAIN_FILE="$PWD/cmake/mingw-w64-x86_64.cmake"

out=prebuilds/win32-x64/process-sandbox.node
[ -f "$out" ] || { echo "build-win: $out was not produced" >&2; exit 1; }
# Fail if the .node would need a DLL that Windows does not ship (libstdc++, libgcc, winpthread), or
# binds to NODE.EXE by name (it would not load in electron.exe or any renamed host).
bad=$(x86_64-w64-mingw32-objdump -p "$out" | sed -n 's/^\s*DLL Name: //p' \
  | grep -viE '^(kernel32|advapi32|user32|msvcrt|ntdll|api-ms-win-[a-z0-9-]+|ws2_32|bcrypt|userenv)\.dll$' || true)
if [ -n "$bad" ]; then
  echo "build-win: $out imports DLLs it must not: $bad" >&2
  exit 1
fi
echo "build-win: $out ($(stat -c %s "$out") bytes)"
