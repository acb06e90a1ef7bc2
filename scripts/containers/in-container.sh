#!/usr/bin/env bash
# Inside a container started by run.sh, as whichever user the container runs as: copy the project
# (mounted read-only at /psb-src) to a tree this user owns, run the given suites with vitest's json
# reporter into /psb-results/<row>.json, and exit with vitest's status. Diagnostics first: what the
# container looks like from inside (uid, capabilities, seccomp mode, what probe() picks).
#
#   in-container.sh ROW SUITE...
set -uo pipefail
ROW=$1
shift
DST=/var/tmp/psb-$(id -u)
log() { echo "containers-inside: $ROW: $*"; }
log "uid=$(id -u) gid=$(id -g) kernel=$(uname -r) $(grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\t ' ' ' | tr '\n' ' ')"
# The sandbox hides nothing the suites need here; the tree goes outside /tmp (isolated mode's
# private /tmp would hide it), as the kernel matrix does.
rm -rf "$DST" && mkdir -p "$DST" || exit 1
tar -C /psb-src --exclude=./.git --exclude=./node_modules/@openai --exclude=./node_modules/typescript \
  --exclude=./prebuilds --exclude=./.win -cf - . | tar -C "$DST" -xf - || exit 1
chmod 0755 "$DST"
cd "$DST" || exit 1
# The syscall probe run.sh compiled, where test/helpers/try-syscall.ts looks for it first (it would
# compile it with cc, which the image does not have).
node -e '
const fs = require("fs"), os = require("os"), path = require("path");
const hash = require("crypto").createHash("sha256").update(fs.readFileSync("test/fixtures/try_syscall.c"))
  .update(`${process.platform}-${process.arch}`).digest("hex").slice(0, 16);
const dir = path.join(os.tmpdir(), "process-sandbox-test-bin");
fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
fs.copyFileSync("/psb-bin/try_syscall", path.join(dir, `try_syscall-${hash}`));
fs.chmodSync(path.join(dir, `try_syscall-${hash}`), 0o755);
' || exit 1
log "probe: $(node -e '
const p = require("./dist/index.js").probe(), f = p.features;
console.log(`defaultMode=${p.defaultMode} isolatedMode=${f.isolatedMode} userNamespacesErrno=${f.userNamespacesErrno} landlockAbi=${f.landlockAbi} connectSupervisor=${f.connectSupervisor} PSB_SUPERVISION=${process.env.PSB_SUPERVISION ?? ""}`);
' 2>&1)"
# Where Landlock mode's supervision ran for one command (by default in a process of its own; PSB_SUPERVISION=thread: the host).
log "supervision: $(node -e '
require("./dist/index.js").run("true", [], { policy: { mode: "landlock" } })
  .then((r) => console.log(r.enforcement.mechanisms.supervision), (e) => console.log(`${e.code}: ${e.message}`));
' 2>&1)"
exec env CI=1 NO_COLOR=1 TERM=dumb PSB_SKIP_BUILD=1 PSB_TEST_WORKERS="${PSB_TEST_WORKERS:-2}" \
  node node_modules/vitest/vitest.mjs run --reporter=default --reporter=json \
  --outputFile.json="/psb-results/$ROW.json" "$@"
