#!/usr/bin/env bash
# Builds (or reuses) one of the kernel matrix's guests: a Debian root file system with systemd as
# init, as an ext4 disk image plus the kernel and initrd to boot it with.
#
#   scripts/kernel-matrix/build-image.sh [IMAGE]     # prints the image directory
#
#   bookworm-amd64        Debian 12, its 6.1 kernel (the default)
#   bookworm-amd64-apparmor  the same with Debian's apparmor (apparmor_parser, aa-exec) for the
#                         apparmor-userns row; an image of its own, so the other 6.1 rows boot
#                         without AppArmor's userspace as before
#   bookworm-amd64-k5.10  Debian 12 with Debian 11's 5.10 kernel in place of 6.1 (a bullseye
#                         userland cannot load the addon built here: glibc 2.31 < 2.34)
#   trixie-amd64          Debian 13: kernel 6.12, systemd 257
#   bookworm-arm64        Debian 12 arm64 (6.1), Debian's arm64 nodejs (18), no compiler
#
# Cached in $PSB_MATRIX_CACHE (default /var/cache/process-sandbox/kernel-matrix), keyed by a hash
# of this script and guest/*: any change to what goes into an image makes a new one. Needs root
# (mmdebstrap's root mode, ownership in the image) and Debian's mirror; the arm64 image also
# qemu-user-static with binfmt_misc (mmdebstrap runs arm64 maintainer scripts through it).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd -P)
NAME=${1:-bookworm-amd64}
CACHE=${PSB_MATRIX_CACHE:-/var/cache/process-sandbox/kernel-matrix}
MIRROR=${PSB_MATRIX_MIRROR:-http://deb.debian.org/debian}
# systemd as init (systemd-sysv), logind and a user bus (pam_systemd, dbus-user-session) so that a
# login gets session-N.scope and user@.service; python3 for the suites' fixtures; passwd for useradd
# (no longer essential in Debian 13); nothing else.
PKGS=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,procps,python3,passwd
SUITE=bookworm ARCH=amd64 SOURCES=()
case "$NAME" in
  bookworm-amd64) PKGS+=,${PSB_MATRIX_KERNEL:-linux-image-cloud-amd64} ;;
  bookworm-amd64-apparmor) PKGS+=,${PSB_MATRIX_KERNEL:-linux-image-cloud-amd64},apparmor ;;
  bookworm-amd64-k5.10)
    # The kernel package alone comes from bullseye (apt's pkg/release); everything else is bookworm.
    SOURCES=("deb $MIRROR bookworm main" "deb $MIRROR bullseye main")
    PKGS+=,linux-image-cloud-amd64/bullseye ;;
  trixie-amd64) SUITE=trixie PKGS+=,linux-image-cloud-amd64 ;;
  bookworm-arm64)
    # nodejs: what a Debian arm64 user has (the guest checks that the prebuild loads in it).
    ARCH=arm64 PKGS+=,linux-image-cloud-arm64,nodejs ;;
  *) echo "kernel-matrix: unknown image '$NAME'" >&2; exit 2 ;;
esac
[ ${#SOURCES[@]} -gt 0 ] || SOURCES=("$MIRROR")
KEY=$( (cat "$0" "$HERE"/guest/*; echo "$NAME $MIRROR $PKGS") | sha256sum | cut -c1-16)
OUT="$CACHE/$NAME-$KEY"
if [ -f "$OUT/ready" ]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/lock-$NAME"
flock 9 # one build of an image at a time; a second caller then finds it ready
if [ -f "$OUT/ready" ]; then
  echo "$OUT"
  exit 0
fi
# Left by an interrupted build: mmdebstrap's mounts in its chroot first, so rm stays on this disk.
findmnt -rn -o TARGET | grep "^$CACHE/build-$NAME\\." | sort -r | while read -r m; do umount -l "$m"; done || true
rm -rf "$CACHE/build-$NAME".*
TMP=$(mktemp -d "$CACHE/build-$NAME.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
ROOTFS="$TMP/rootfs"
echo "kernel-matrix: building the guest image $NAME in $OUT (mmdebstrap, $MIRROR)" >&2
if [ "$ARCH" = arm64 ]; then
  # The image's maintainer scripts run through qemu-aarch64-static: binfmt_misc must know it (a
  # fresh machine may not even have binfmt_misc mounted).
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64 >&2
fi
mmdebstrap --variant=apt --architectures="$ARCH" --include="$PKGS" --aptopt='Acquire::Retries "3"' \
  --customize-hook="cp -r '$HERE/guest/.' \"\$1/opt/psb-guest/\"" \
  --setup-hook='mkdir -p "$1/opt/psb-guest"' \
  --customize-hook='chroot "$1" bash /opt/psb-guest/setup.sh' \
  "$SUITE" "$ROOTFS" "${SOURCES[@]}" >&2
mkdir -p "$TMP/out"
# One kernel per image; vmlinuz and initrd.img are what the host boots (-kernel, -initrd).
[ "$(find "$ROOTFS"/boot -name 'vmlinuz-*' | wc -l)" = 1 ] || { echo "kernel-matrix: $NAME: not exactly one kernel in /boot" >&2; exit 1; }
cp -L "$ROOTFS"/boot/vmlinuz-* "$TMP/out/vmlinuz"
cp -L "$ROOTFS"/boot/initrd.img-* "$TMP/out/initrd.img"
basename "$ROOTFS"/boot/vmlinuz-* | sed 's/^vmlinuz-//' > "$TMP/out/kernel-release"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
mkfs.ext4 -q -L psbroot -d "$ROOTFS" "$TMP/out/rootfs.ext4" 3G >&2
touch "$TMP/out/ready"
rm -rf "$OUT"
mv "$TMP/out" "$OUT"
# Images of this name from earlier inputs are never used again (NAME-<key> exactly: one name is
# a prefix of another).
for d in "$CACHE/$NAME"-*; do
  if [[ "${d#"$CACHE/$NAME"-}" =~ ^[0-9a-f]{16}$ ]] && [ "$d" != "$OUT" ]; then rm -rf "$d"; fi
done
echo "$OUT"
