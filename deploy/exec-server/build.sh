#!/usr/bin/env bash
# Builds the exec-server image (Dockerfile beside this file) from this tree as built here
# (npm run build): node from PATH, dist/, the addon, package.json and the runtime dependencies
# (ws, node-forge, node-gyp-build). The base image is scripts/containers/image.sh's, which it
# builds when missing (needs root and mmdebstrap the first time). Uses $DOCKER_HOST.
#
#   deploy/exec-server/build.sh [TAG]     # prints the tag (default process-sandbox-exec-server:local)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
TAG=${1:-process-sandbox-exec-server:local}
DOCKER=${PSB_DOCKER:-docker}
BASE=$(PSB_DOCKER=$DOCKER bash "$ROOT/scripts/containers/image.sh")
( cd "$ROOT" && ls build/Release/*.node >/dev/null 2>&1 && [ -f dist/cli.js ] ) || { echo "exec-server image: build first (npm run build)" >&2; exit 1; }
CTX=$(mktemp -d /var/tmp/psb-exec-server-ctx.XXXXXX)
trap 'rm -rf "$CTX"' EXIT
cp "$HERE/Dockerfile" "$CTX/"
cp "$(command -v node)" "$CTX/node"
P=$CTX/process-sandbox
mkdir -p "$P/build/Release" "$P/node_modules"
cp -a "$ROOT/package.json" "$ROOT/dist" "$P/"
cp "$ROOT"/build/Release/*.node "$P/build/Release/"
for dep in $(node -p 'Object.keys(require(process.argv[1]).dependencies).filter((d) => d !== "node-addon-api").join(" ")' "$ROOT/package.json"); do
  cp -a "$ROOT/node_modules/$dep" "$P/node_modules/"
done
# --network none: the build runs nothing that needs one (and the test daemon has no bridge).
"$DOCKER" build --network none --build-arg BASE="$BASE" -t "$TAG" "$CTX" >&2
echo "$TAG"
