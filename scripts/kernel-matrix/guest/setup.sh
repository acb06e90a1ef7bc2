#!/usr/bin/env bash
# Runs once in the image's chroot at build time (build-image.sh): the test user, the boot-time
# matrix service, and a quiet, fast boot.
set -euo pipefail
echo psb-matrix > /etc/hostname
printf 'LABEL=psbroot / ext4 rw,noatime 0 1\n' > /etc/fstab
useradd --create-home --shell /bin/bash psbtest
passwd -d root >/dev/null
install -m 0644 /opt/psb-guest/psb-matrix.service /etc/systemd/system/psb-matrix.service
systemctl enable psb-matrix.service
# Nothing the matrix needs: timers, networking waits, a getty on the result port (ttyS1, or hvc0 on arm64).
systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
  systemd-networkd-wait-online.service serial-getty@ttyS1.service serial-getty@hvc0.service man-db.timer dpkg-db-backup.timer >/dev/null 2>&1 || true
