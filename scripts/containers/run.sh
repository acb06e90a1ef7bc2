#!/usr/bin/env bash
# npm run test:containers: the Linux suites inside containers as a user of Docker or Podman runs
# them (docs/hosts.md): Docker's default seccomp profile refuses user namespaces, so the sandbox
# runs in Landlock mode there. Each row is one container; the rows:
#
#   docker:root    a default Docker container (default seccomp profile, no --privileged, no added
#                  capabilities, --network none), as root in it
#   docker:user    the same as uid 1000 (psbtest in the image)
#   exec-server    deploy/exec-server's image: the Codex CLI on this host drives the exec-server in
#                  a container over an authenticated WebSocket (scripts/containers/exec-server.sh)
#   podman:rootless rootless Podman (podman, uidmap, slirp4netns, fuse-overlayfs) run by psbtest
#
#   npm run test:containers                              # docker:root docker:user exec-server
#   npm run test:containers -- docker:user podman:rootless   # some rows
#
# Installs nothing: needs root, Debian's docker.io and mmdebstrap (and podman, uidmap, slirp4netns,
# fuse-overlayfs for the podman row), and Debian's mirror for the first image build (cached:
# image.sh). Starts Debian's dockerd on a socket of its own (no iptables, no bridge: the containers
# get no network but loopback; its own data and exec roots), stops it at the end, failure or not.
# This host's node binary and this tree (built) are mounted read-only into each container.
#
# Prints `containers: <engine> <user> <pass|fail> N passed, N failed, N skipped` per row and the
# times, then `N passed, N failed` over all rows; exits non-zero on any failure (a row that did not
# report counts as failed). PSB_CONTAINERS_SUITES replaces the suites run in the suite rows.
# PSB_SUPERVISION set here (e.g. PSB_SUPERVISION=thread: Landlock mode's supervision as threads of
# the host, not the default process of its own) is passed on to the suites in every row, and to the exec-server's container.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
ROWS=${*:-docker:root docker:user exec-server}
# The suites that check modes, carve-outs, deny-read (its names too), /proc and limits (what Landlock mode must hold in a container).
SUITES=${PSB_CONTAINERS_SUITES:-test/linux/modes.test.ts test/linux/threats-fs.test.ts test/linux/threats-proc.test.ts test/linux/threats-rob.test.ts test/linux/kernel-matrix.test.ts test/linux/landlock-holes.test.ts test/linux/process-cap-no-cgroup.test.ts test/linux/landlock-exec-written.test.ts test/linux/landlock-denyread-stat.test.ts}
WORKERS=${PSB_CONTAINERS_WORKERS:-2}
STATE=${PSB_CONTAINERS_STATE:-/var/lib/process-sandbox/docker}
RUN=/run/process-sandbox-docker
LOGS=${PSB_CONTAINERS_LOGS:-/var/tmp/psb-containers}
export DOCKER_HOST=unix://$RUN/docker.sock
# Debian's client (docker.io), not whichever `docker` comes first in PATH.
DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=$(command -v docker || echo docker)
export PSB_DOCKER=$DOCKER
# The one host setting the rows pass on (-e for docker and podman; exec-server.sh's test reads it).
ENV_ARGS=()
[ -n "${PSB_SUPERVISION:-}" ] && ENV_ARGS=(-e "PSB_SUPERVISION=$PSB_SUPERVISION") && echo "containers: PSB_SUPERVISION=$PSB_SUPERVISION in every row"
start=$(date +%s)

[ "$(id -u)" = 0 ] || { echo "containers: needs root (dockerd, mmdebstrap)"; exit 1; }
missing=""
command -v dockerd >/dev/null || missing="$missing docker.io"
command -v mmdebstrap >/dev/null || missing="$missing mmdebstrap"
if [[ " $ROWS " == *" podman:"* ]]; then
  for t in podman:podman newuidmap:uidmap slirp4netns:slirp4netns fuse-overlayfs:fuse-overlayfs; do
    command -v "${t%%:*}" >/dev/null || missing="$missing ${t#*:}"
  done
fi
[ -z "$missing" ] || { echo "containers: missing packages:$missing (apt-get install -y --no-install-recommends$missing)"; exit 1; }
( cd "$ROOT" && ls build/Release/*.node >/dev/null 2>&1 && [ -f dist/index.js ] ) ||
  { echo "containers: build first (npm run build)"; exit 1; }

mkdir -p "$RUN" "$STATE" && rm -rf "$LOGS" && mkdir -p "$LOGS/results" && chmod 0777 "$LOGS/results"
# One run at a time: the daemon's socket and state are shared.
exec 8>"$RUN/lock"
flock -n 8 || { echo "containers: another test:containers run holds $RUN/lock"; exit 1; }

DOCKERD_PID=""
stop_dockerd() {
  [ -n "$DOCKERD_PID" ] || return 0
  # Containers still running (an interrupted row) first, then the daemon by its pid; it stops its
  # own containerd. SIGKILL only if it has not gone after 30 s.
  "$DOCKER" ps -q 2>/dev/null | xargs -r "$DOCKER" kill >/dev/null 2>&1
  kill "$DOCKERD_PID" 2>/dev/null
  for _ in $(seq 30); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 1; done
  kill -0 "$DOCKERD_PID" 2>/dev/null && { echo "containers: dockerd $DOCKERD_PID did not stop; killing it" >&2; kill -9 "$DOCKERD_PID"; }
  DOCKERD_PID=""
}
cleanup() {
  stop_dockerd
  [ -n "${PODMAN_HOME:-}" ] && rm -rf "$PODMAN_HOME"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_dockerd() {
  # A daemon left by a run that was killed outright: stop it by its pid file first.
  if [ -s "$RUN/dockerd.pid" ] && kill -0 "$(cat "$RUN/dockerd.pid")" 2>/dev/null &&
    [[ "$(tr '\0' ' ' < "/proc/$(cat "$RUN/dockerd.pid")/cmdline")" == *"$RUN/docker.sock"* ]]; then
    DOCKERD_PID=$(cat "$RUN/dockerd.pid") && stop_dockerd
  fi
  # No iptables rules, no docker0 bridge: nothing on this host's network changes.
  dockerd --iptables=false --ip6tables=false --bridge=none \
    --data-root "$STATE" --exec-root "$RUN/exec" -H "$DOCKER_HOST" -p "$RUN/dockerd.pid" \
    >"$LOGS/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 60); do
    "$DOCKER" version >/dev/null 2>&1 && return 0
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 1
  done
  echo "containers: dockerd did not answer on $DOCKER_HOST; its log:" >&2
  tail -20 "$LOGS/dockerd.log" | sed 's/^/  | /' >&2
  return 1
}

summary() { # json -> "N passed, N failed, N skipped" (a suite that failed to load counts as failed)
  node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
let f = r.numFailedTests; if (r.numFailedTestSuites && !f) f = r.numFailedTestSuites;
console.log(`${r.numPassedTests} passed, ${f} failed, ${r.numPendingTests + (r.numTodoTests || 0)} skipped`);
' "$1" 2>/dev/null || echo "0 passed, 1 failed, 0 skipped"
}

failed_tests() { # json -> the failed tests' names, one a line
  node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
for (const f of r.testResults) {
  if (f.status === "failed" && !f.assertionResults.some((a) => a.status === "failed")) console.log(`${f.name.replace(/.*\/test\//, "test/")}: ${(f.message || "").split("\n")[0]}`);
  for (const a of f.assertionResults) if (a.status === "failed") console.log(`${f.name.replace(/.*\/test\//, "test/")}: ${a.fullName}`);
}' "$1" 2>/dev/null
}

lines=()
report() { # engine user rc json [detail]
  local s verdict=pass
  s=$(summary "$4")
  [ "$3" = 0 ] && [[ "$s" == *" 0 failed"* ]] || verdict=fail
  local l="containers: $1 $2 $verdict $s${5:+ ($5)}"
  echo "$l"
  lines+=("$l")
  if [ "$verdict" = fail ]; then
    failed_tests "$4" | head -60 | sed 's/^/  | failed: /'
    [ -s "$4" ] || echo "  | no results: see $LOGS/$1-$2.log"
  fi
}

# The suites' syscall probe (test/fixtures/try_syscall.c), compiled here: the image has no compiler.
mkdir -p "$LOGS/bin"
cc -O2 -o "$LOGS/bin/try_syscall" "$ROOT/test/fixtures/try_syscall.c" ||
  { echo "containers: cannot compile test/fixtures/try_syscall.c (cc: build-essential)"; exit 1; }
# The project, node and the probe, read-only; the results directory, writable. Nothing else.
MOUNTS=(-v "$(command -v node)":/usr/local/bin/node:ro -v "$ROOT":/psb-src:ro -v "$LOGS/bin":/psb-bin:ro
  -v "$LOGS/results":/psb-results)

suite_row() { # engine user
  local t0 rc json=$LOGS/results/$1-$2.json user_args=()
  t0=$(date +%s)
  [ "$2" = root ] || user_args=(--user 1000:1000)
  # Default: the engine's default seccomp profile and capabilities, no --privileged, no network.
  "$DOCKER" run --rm --network none "${user_args[@]}" -e PSB_TEST_WORKERS="$WORKERS" "${ENV_ARGS[@]}" "${MOUNTS[@]}" \
    "$IMAGE" bash /psb-src/scripts/containers/in-container.sh "$1-$2" $SUITES >"$LOGS/$1-$2.log" 2>&1
  rc=$?
  grep -a '^containers-inside: ' "$LOGS/$1-$2.log" | sed 's/^/  /'
  report "$1" "$2" "$rc" "$json"
  echo "containers: $1 $2 took $(( $(date +%s) - t0 )) s"
}

podman_row() {
  # Rootless: psbtest's own Podman (its subuid/subgid range maps the container's users), its own
  # storage under a fresh HOME; the image is the same tarball, imported into that storage.
  local u=psbtest t0 rc json=$LOGS/results/podman-rootless.json tar envs=""
  [ ${#ENV_ARGS[@]} = 0 ] || envs=$(printf '%q ' "${ENV_ARGS[@]}")
  t0=$(date +%s)
  id "$u" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$u"
  grep -q "^$u:" /etc/subuid || usermod --add-subuids 200000-265535 "$u"
  grep -q "^$u:" /etc/subgid || usermod --add-subgids 200000-265535 "$u"
  tar=$(bash "$HERE/image.sh" --tarball) || { report podman rootless 1 /nonexistent "the image tarball could not be built"; return; }
  PODMAN_HOME=$(mktemp -d /var/tmp/psb-podman-home.XXXXXX) && chown "$u": "$PODMAN_HOME"
  # The project copy psbtest can read (this tree may sit under a directory only root enters).
  local src=$PODMAN_HOME/src
  mkdir -p "$src" && tar -C "$ROOT" --exclude=./.git --exclude=./node_modules/@openai --exclude=./node_modules/better-sqlite3 --exclude=./.win -cf - . | tar -C "$src" -xf -
  cp "$(command -v node)" "$PODMAN_HOME/node" && chmod 0755 "$PODMAN_HOME/node" && cp -r "$LOGS/bin" "$PODMAN_HOME/bin"
  chown -R "$u": "$PODMAN_HOME" && chmod 0777 "$LOGS/results"
  runuser -u "$u" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$PODMAN_HOME" XDG_RUNTIME_DIR="$PODMAN_HOME/run" \
    bash -c "mkdir -p \$XDG_RUNTIME_DIR && chmod 0700 \$XDG_RUNTIME_DIR && cd \$HOME &&
      podman import '$tar' psb-deb12:podman >/dev/null &&
      podman run --rm --network none -e PSB_TEST_WORKERS=$WORKERS $envs-v \$HOME/node:/usr/local/bin/node:ro \
        -v $src:/psb-src:ro -v \$HOME/bin:/psb-bin:ro -v $LOGS/results:/psb-results psb-deb12:podman \
        bash /psb-src/scripts/containers/in-container.sh podman-rootless $SUITES" >"$LOGS/podman-rootless.log" 2>&1
  rc=$?
  # Rootless Podman leaves a pause process holding its user namespace: stop it by its pid file.
  [ -s "$PODMAN_HOME/run/libpod/tmp/pause.pid" ] && kill "$(cat "$PODMAN_HOME/run/libpod/tmp/pause.pid")" 2>/dev/null
  grep -a '^containers-inside: ' "$LOGS/podman-rootless.log" | sed 's/^/  /'
  [ -s "$json" ] || tail -15 "$LOGS/podman-rootless.log" | sed 's/^/  | /'
  report podman rootless "$rc" "$json" "run by $u; root in the container"
  echo "containers: podman rootless took $(( $(date +%s) - t0 )) s"
}

IMAGE=""
need_docker() {
  [ -n "$IMAGE" ] && return 0
  local t0; t0=$(date +%s)
  start_dockerd || return 1
  IMAGE=$(bash "$HERE/image.sh") || { echo "containers: the image could not be built" >&2; return 1; }
  echo "containers: dockerd and image $IMAGE ready in $(( $(date +%s) - t0 )) s"
}

for row in $ROWS; do
  case "$row" in
    docker:root | docker:user)
      if need_docker; then suite_row docker "${row#docker:}"; else report docker "${row#docker:}" 1 /nonexistent "dockerd or image failed"; fi ;;
    exec-server)
      if need_docker; then
        t0=$(date +%s)
        LOGS=$LOGS IMAGE=$IMAGE bash "$HERE/exec-server.sh" >"$LOGS/exec-server.log" 2>&1
        rc=$?
        grep -a '^containers-exec-server: ' "$LOGS/exec-server.log" | sed 's/^/  /'
        [ -s "$LOGS/results/exec-server.json" ] || tail -25 "$LOGS/exec-server.log" | sed 's/^/  | /'
        report docker exec-server "$rc" "$LOGS/results/exec-server.json" "Codex CLI -> ws -> exec-server container"
        echo "containers: docker exec-server took $(( $(date +%s) - t0 )) s"
      else report docker exec-server 1 /nonexistent "dockerd or image failed"; fi ;;
    podman:rootless) podman_row ;;
    *) echo "containers: unknown row '$row' (docker:root docker:user exec-server podman:rootless)"; lines+=("containers: $row fail 0 passed, 1 failed, 0 skipped") ;;
  esac
done
stop_dockerd
echo "${lines[@]/#/$'\n'}" | node -e '
let p = 0, f = 0;
for (const l of require("fs").readFileSync(0, "utf8").split("\n")) {
  const m = / (pass|fail) (\d+) passed, (\d+) failed/.exec(l);
  if (m) { p += +m[2]; f += +m[3]; if (m[1] === "fail" && +m[3] === 0) f += 1; }
}
console.log(`${p} passed, ${f} failed`);
process.exit(f ? 1 : 0);
'
status=$?
echo "containers: total $(( $(date +%s) - start )) s (logs: $LOGS)"
exit $status
