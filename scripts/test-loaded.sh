#!/usr/bin/env bash
# npm run test:loaded: the whole suite (npm test) with every CPU kept busy by plain busy loops, as
# the host of a real agent often is. The suite must pass like this: a sandboxed spawn that only
# works on an idle machine (a race between planning and the mount, an fd counted while a sandbox
# is still being prepared) is a defect, not a flake. The burners run at the suite's own priority
# and stop when it ends, however it ends.
set -uo pipefail
cd "$(dirname "$0")/.."
n=$(nproc)
pids=()
for _ in $(seq "$n"); do
  sh -c 'while :; do :; done' &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
echo "== $n busy loops beside the suite (load average before: $(cut -d' ' -f1-3 /proc/loadavg)) =="
bash scripts/test-all.sh "$@"
rc=$?
echo "== load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) =="
exit $rc
