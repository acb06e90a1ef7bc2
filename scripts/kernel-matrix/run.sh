#!/usr/bin/env bash
# npm run test:kernels: the Linux suites in a Debian 12 guest (systemd as init, kernel 6.1, cgroup
# v2 only) under QEMU, one boot per configuration, as root and as an unprivileged user each.
#
#   npm run test:kernels                                  # every configuration
#   npm run test:kernels -- v2-systemd no-userns:psbtest  # some of them; :user[,user] picks rows
#
# Prints `kernel-matrix: <config> <user> <pass|fail> <N passed, N failed, N skipped>` per row, then
# `N passed, N failed` over all rows; exits non-zero on any failure (a row that did not report
# counts as failed). Needs root, qemu-system-x86, mmdebstrap and Debian's mirror for the first
# image build (build-image.sh, cached). Logs: $PSB_MATRIX_LOGS (default /var/tmp/psb-kernel-matrix).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
ALL_CONFIGS="v2-systemd no-userns no-landlock no-memcg-delegation"
CONFIGS=${*:-$ALL_CONFIGS}
USERS=${PSB_MATRIX_USERS:-root psbtest}
# The suites that exercise mode selection, cgroups and limits, the Landlock fallback and basic
# isolation (README "Tested hosts"); TCG runs everything about ten times slower than the host, so
# each configuration runs what it changes: v2-systemd all three; no-userns all three for the user
# (root is not bound by the sysctl); no-landlock the mode suites; no-memcg-delegation the report
# checks. PSB_MATRIX_SUITES runs the given files on every row instead.
KM=test/linux/kernel-matrix.test.ts MODES=test/linux/modes.test.ts ROB=test/linux/threats-rob.test.ts
suites_for() { # config user
  if [ -n "${PSB_MATRIX_SUITES:-}" ]; then echo "$PSB_MATRIX_SUITES"; return; fi
  case "$1:$2" in
    v2-systemd:* | no-userns:psbtest) echo "$KM $MODES $ROB" ;;
    no-landlock:*) echo "$KM $MODES" ;;
    *) echo "$KM" ;;
  esac
}
WORKERS=${PSB_MATRIX_WORKERS:-2}
LOGS=${PSB_MATRIX_LOGS:-/var/tmp/psb-kernel-matrix}
TIMEOUT=${PSB_MATRIX_BOOT_TIMEOUT:-1500}
[ "$(id -u)" = 0 ] || { echo "kernel-matrix: needs root (image build, test users in the guest)"; exit 1; }
start=$(date +%s)

IMAGE=$(bash "$HERE/build-image.sh") || { echo "kernel-matrix: image build failed"; exit 1; }
rm -rf "$LOGS" && mkdir -p "$LOGS"

# The project as built here, on a disk of its own (the guest copies it per user).
( cd "$ROOT" && ls build/Release/*.node >/dev/null 2>&1 && [ -f dist/index.js ] ) ||
  { echo "kernel-matrix: build first (npm run build)"; exit 1; }
STAGE=$(mktemp -d /var/tmp/psb-matrix-stage.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
tar -C "$ROOT" --exclude=./.git --exclude=./.win --exclude=./node_modules/@openai --exclude=./node_modules/typescript \
  --exclude=./prebuilds -cf - . | tar -C "$STAGE" -xf -
mkdir -p "$STAGE/.kernel-matrix"
cp "$(command -v node)" "$STAGE/.kernel-matrix/node"

# KVM when it works (a 20 s boot probe), else TCG.
ACCEL=${PSB_MATRIX_ACCEL:-tcg}
CPU=max

boot() { # config -> results in $LOGS/<config>.results
  local config=$1 extra=""
  [ "$config" = no-landlock ] && extra="lsm=lockdown,capability,yama,apparmor"
  rm -f "$LOGS/project.ext4"
  mkfs.ext4 -q -L psbproj -d "$STAGE" "$LOGS/project.ext4" 2G >/dev/null || { echo "kernel-matrix: project disk failed" >&2; return; }
  timeout "$TIMEOUT" qemu-system-x86_64 -accel "$ACCEL" -cpu "$CPU" -smp 2 -m 3072 -display none -monitor none \
    -no-reboot -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
    -append "root=LABEL=psbroot rw console=ttyS0 quiet systemd.show_status=0 psb.config=$config $extra" \
    -drive "file=$IMAGE/rootfs.ext4,if=virtio,format=raw,snapshot=on" \
    -drive "file=$LOGS/project.ext4,if=virtio,format=raw,readonly=on" \
    -serial "file:$LOGS/$config.console" -serial "file:$LOGS/$config.results" </dev/null
  local rc=$?
  [ $rc = 0 ] || echo "kernel-matrix: $config: qemu exited $rc (124: timed out after ${TIMEOUT}s)" >&2
}

status=0
lines=()
for spec in $CONFIGS; do
  config=${spec%%:*}
  users=$USERS
  [ "$spec" = "$config" ] || users=${spec#*:}
  users=${users//,/ }
  {
    printf 'WORKERS=%q\nUSERS=%q\n' "$WORKERS" "$users"
    for u in $users; do printf 'SUITES_%s=%q\n' "$u" "$(suites_for "$config" "$u")"; done
  } > "$STAGE/.kernel-matrix/env"
  t0=$(date +%s)
  boot "$config"
  for u in $users; do
    l=$( (tr -d '\r' < "$LOGS/$config.results") 2>/dev/null | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -a "^kernel-matrix: $config $u " | tail -1)
    [ -n "$l" ] || l="kernel-matrix: $config $u fail 0 passed, 1 failed, 0 skipped (no result: see $LOGS/$config.results, $LOGS/$config.console)"
    echo "$l"
    lines+=("$l")
    if [[ "$l" != *" pass "* ]]; then
      # CI keeps only what is printed: the guest's diagnostics and the end of what it wrote.
      {
        echo "kernel-matrix: $config $u: the guest's own lines, then the end of its output and console:"
        (tr -d '\r' < "$LOGS/$config.results") 2>/dev/null | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -a '^kernel-matrix-guest: ' | tail -40
        (tr -d '\r' < "$LOGS/$config.results") 2>/dev/null | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -av '^kernel-matrix-guest: ' | tail -25
        (tr -d '\r' < "$LOGS/$config.console") 2>/dev/null | tail -10
      } | sed 's/^/  | /' >&2
    fi
  done
  echo "kernel-matrix: $config took $(( $(date +%s) - t0 )) s" >&2
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
