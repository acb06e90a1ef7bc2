#!/usr/bin/env bash
# The guest's boot-time entry (psb-matrix.service, as root): mount the project disk the host made
# for this run and hand over to its scripts/kernel-matrix/in-guest.sh; then power off, whatever
# happened (the host reads the results from the second serial port).
mkdir -p /opt/psb-src
if mount -o ro /dev/vdb /opt/psb-src; then
  bash /opt/psb-src/scripts/kernel-matrix/in-guest.sh
  echo "kernel-matrix-guest: done rc=$?"
else
  echo "kernel-matrix-guest: done rc=99 (no project disk)"
fi
sync
systemctl --force --force poweroff
