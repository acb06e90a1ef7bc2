#!/usr/bin/env bash
# The exec-server row of test:containers (run.sh starts dockerd and sets DOCKER_HOST, PSB_DOCKER,
# LOGS): builds deploy/exec-server's image from this tree, then runs
# test/containers/exec-server.test.ts on this host (it drives the container with the Codex CLI).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
log() { echo "containers-exec-server: $*"; }
t0=$(date +%s)
TAG=$(bash "$ROOT/deploy/exec-server/build.sh" process-sandbox-exec-server:test) || { log "the image build failed"; exit 1; }
log "image $TAG built in $(( $(date +%s) - t0 )) s; token layout ${PSB_CONTAINERS_TOKEN_LAYOUT:-plain}"
cd "$ROOT" || exit 1
exec env CI=1 NO_COLOR=1 TERM=dumb PSB_SKIP_BUILD=1 PSB_CONTAINERS_EXEC_IMAGE="$TAG" \
  node node_modules/vitest/vitest.mjs run --reporter=default --reporter=json \
  --outputFile.json="$LOGS/results/exec-server.json" test/containers/exec-server.test.ts
