#!/usr/bin/env bash
# The guest's boot-time entry (psb-matrix.service, as root): mount the project disk the host made
# for this run and hand over to its scripts/kernel-matrix/in-guest.sh; then power off, whatever
# happened. Results go to the port the host reads them from: psb.out= on the kernel command line
# (the arm64 guest's virtio console, /dev/hvc0, whose driver udev loads after boot), else the
# second serial port.
OUT=$(sed -n 's/.*psb\.out=\([^ ]*\).*/\1/p' /proc/cmdline)
OUT=${OUT:-/dev/ttyS1}
for _ in $(seq 60); do [ -c "$OUT" ] && break; sleep 1; done
exec >"$OUT" 2>&1
mkdir -p /opt/psb-src
if mount -o ro /dev/vdb /opt/psb-src; then
  bash /opt/psb-src/scripts/kernel-matrix/in-guest.sh
  echo "kernel-matrix-guest: done rc=$?"
else
  echo "kernel-matrix-guest: done rc=99 (no project disk)"
fi
sync
systemctl --force --force poweroff
