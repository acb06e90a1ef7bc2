#!/usr/bin/env bash
# Builds (or reuses) the kernel matrix's guest: a Debian 12 root file system with systemd as init
# and Debian's 6.1 kernel, as an ext4 disk image plus the kernel and initrd to boot it with.
#
#   scripts/kernel-matrix/build-image.sh        # prints the image directory
#
# Cached in $PSB_MATRIX_CACHE (default /var/cache/process-sandbox/kernel-matrix), keyed by a hash
# of this script and guest/*: any change to what goes into the image makes a new one. Needs root
# (mmdebstrap's root mode, ownership in the image) and Debian's mirror.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd -P)
CACHE=${PSB_MATRIX_CACHE:-/var/cache/process-sandbox/kernel-matrix}
MIRROR=${PSB_MATRIX_MIRROR:-http://deb.debian.org/debian}
KERNEL_PKG=${PSB_MATRIX_KERNEL:-linux-image-cloud-amd64}
KEY=$( (cat "$0" "$HERE"/guest/*; echo "$MIRROR $KERNEL_PKG") | sha256sum | cut -c1-16)
OUT="$CACHE/image-$KEY"
if [ -f "$OUT/ready" ]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9 # one build at a time; a second caller then finds the image ready
if [ -f "$OUT/ready" ]; then
  echo "$OUT"
  exit 0
fi
rm -rf "$CACHE"/build.* # left by an interrupted build
TMP=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
ROOTFS="$TMP/rootfs"
# systemd as init (systemd-sysv), logind and a user bus (pam_systemd, dbus-user-session) so that a
# login gets session-N.scope and user@.service; python3 for the suites' fixtures; nothing else.
PKGS=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,procps,python3,"$KERNEL_PKG"
echo "kernel-matrix: building the guest image in $OUT (mmdebstrap, $MIRROR)" >&2
mmdebstrap --variant=apt --include="$PKGS" --aptopt='Acquire::Retries "3"' \
  --customize-hook="cp -r '$HERE/guest/.' \"\$1/opt/psb-guest/\"" \
  --setup-hook='mkdir -p "$1/opt/psb-guest"' \
  --customize-hook='chroot "$1" bash /opt/psb-guest/setup.sh' \
  bookworm "$ROOTFS" "$MIRROR" >&2
mkdir -p "$TMP/out"
cp -L "$ROOTFS"/boot/vmlinuz-* "$TMP/out/vmlinuz"
cp -L "$ROOTFS"/boot/initrd.img-* "$TMP/out/initrd.img"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
mkfs.ext4 -q -L psbroot -d "$ROOTFS" "$TMP/out/rootfs.ext4" 3G >&2
touch "$TMP/out/ready"
rm -rf "$OUT"
mv "$TMP/out" "$OUT"
# Images of earlier inputs are never used again.
find "$CACHE" -mindepth 1 -maxdepth 1 -name 'image-*' ! -path "$OUT" -exec rm -rf {} +
echo "$OUT"
