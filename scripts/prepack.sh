#!/usr/bin/env bash
# npm pack / npm publish ("prepack"): build the prebuilt addons the tarball ships, then check that
# every expected one exists and is what it claims to be (better-sqlite3's "assert every expected
# file" step). dist/ is built by "prepare", which npm runs right after this hook.
#
#   linux-x64   glibc  prebuildify (node-gyp) with the host compiler
#   linux-arm64 glibc  prebuildify --arch arm64 with Debian's aarch64-linux-gnu cross g++
#   win32-x64          scripts/build-win.sh (cmake-js + mingw-w64)
#
# linux-x64 musl is not built: Debian's musl-tools has no C++ compiler or libstdc++ for musl, so
# it cannot be produced cleanly here (musl hosts compile from source at install; see README).
#
# The Linux builds run in scratch copies of the package, so the tree's build/ (what development
# and the tests load first) is never replaced by a cross-compiled binary. Builds run in parallel.
#
# PSB_PREBUILD_TARGETS=linux-x64,win32-x64 narrows the set (default: all three). linux-arm64
# without its cross compiler is skipped with a SKIPPING line (arm64 installs then compile the
# addon); scripts/build-win.sh installs its own toolchain. A pack that built nothing fails.
#
# prebuilds/ is emptied first: the tarball ships only what this run built and checked (a narrowed
# pack once shipped a Windows binary left there by an earlier run).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGETS=${PSB_PREBUILD_TARGETS:-linux-x64,linux-arm64,win32-x64}
export JOBS=${PSB_BUILD_JOBS:-1}

rm -rf prebuilds

if [ "$(uname -s)" != Linux ]; then
  # Not the release host: ship what this machine can build (its own platform).
  echo "prepack: not on Linux; building only this host's prebuild" >&2
  exec npx prebuildify --napi --strip --tag-libc
fi

# node-gyp needs Node's headers; use the ones installed beside node when npm has none configured
# (without them node-gyp would try to download headers).
PREFIX=$(cd "$(dirname "$(command -v node)")/.." && pwd)
if [ -z "${npm_config_nodedir:-}" ] && [ -f "$PREFIX/include/node/node_api.h" ]; then
  export npm_config_nodedir=$PREFIX
fi

LOGS=$(mktemp -d "${TMPDIR:-/tmp}/psb-prepack.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT

scratch() { # a copy of the build inputs with the tree's node_modules (node-addon-api copied: gyp writes beside it)
  local d=$LOGS/src-$1
  mkdir -p "$d/node_modules"
  cp -r package.json binding.gyp native "$d/"
  for e in node_modules/* node_modules/.bin; do
    [ -e "$e" ] || continue
    if [ "$(basename "$e")" = node-addon-api ]; then cp -r "$e" "$d/node_modules/"; else ln -s "$ROOT/$e" "$d/node_modules/"; fi
  done
  echo "$d"
}

build_linux() { # $1 = x64 | arm64
  local arch=$1 d
  d=$(scratch "linux-$arch")
  rm -rf "prebuilds/linux-$arch"
  if [ "$arch" = x64 ]; then
    (cd "$d" && npx prebuildify --napi --strip --tag-libc --out "$ROOT")
  else
    (cd "$d" && CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++ LINK=aarch64-linux-gnu-g++ AR=aarch64-linux-gnu-ar \
      npx prebuildify --napi --strip --strip-bin aarch64-linux-gnu-strip --tag-libc --arch arm64 --out "$ROOT")
  fi
}

pids=()
names=()
for t in ${TARGETS//,/ }; do
  if [ "$t" = linux-arm64 ] && ! command -v aarch64-linux-gnu-g++ >/dev/null; then
    echo "prepack: SKIPPING linux-arm64: aarch64-linux-gnu-g++ is missing (apt-get install g++-aarch64-linux-gnu); the tarball carries no linux-arm64 prebuild, so arm64 installs compile the addon" >&2
    continue
  fi
  case "$t" in
    linux-x64) build_linux x64 >"$LOGS/$t.log" 2>&1 & ;;
    linux-arm64) build_linux arm64 >"$LOGS/$t.log" 2>&1 & ;;
    win32-x64) bash scripts/build-win.sh >"$LOGS/$t.log" 2>&1 & ;;
    *) echo "prepack: unknown target $t (known: linux-x64, linux-arm64, win32-x64)" >&2; exit 1 ;;
  esac
  pids+=($!)
  names+=("$t")
done
status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "prepack: building ${names[$i]} failed:" >&2
    tail -40 "$LOGS/${names[$i]}.log" >&2
    status=1
  fi
done
[ $status -eq 0 ] || exit 1
[ ${#names[@]} -gt 0 ] || { echo "prepack: no prebuild was built (targets: $TARGETS): nothing to ship" >&2; exit 1; }

# Every expected file exists and is a binary for its platform.
check() { # $1 dir, $2 file pattern, $3 the objdump that reads it, $4 the format it must report
  local f fmt glibc=""
  f=$(ls prebuilds/"$1"/$2 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "prepack: no prebuilds/$1/$2 was produced" >&2; return 1; }
  fmt=$("$3" -f "$f" 2>/dev/null | sed -n 's/.*file format //p')
  [ "$fmt" = "$4" ] || { echo "prepack: $f has format '$fmt', expected $4" >&2; return 1; }
  case "$1" in linux-*) glibc=$("$3" -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 || true) ;; esac
  echo "prepack: $f ($fmt, $(stat -c %s "$f") bytes${glibc:+, needs $glibc})"
}
for t in "${names[@]}"; do
  case "$t" in
    linux-x64) check linux-x64 '*.glibc.node' objdump elf64-x86-64 ;;
    linux-arm64) check linux-arm64 '*.glibc.node' aarch64-linux-gnu-objdump elf64-littleaarch64 ;;
    win32-x64) check win32-x64 '*.node' x86_64-w64-mingw32-objdump pei-x86-64 ;;
  esac
done
echo "prepack: the tarball ships prebuilds for: ${names[*]}"
