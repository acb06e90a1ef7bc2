#!/usr/bin/env bash
# npm test: build once, run the whole vitest suite as the current user, and — when that user is
# root — again as an unprivileged user (a sandbox that keeps a capability as root could remount /
# read-write; a sandbox that needs privileges would fail unprivileged). Prints one closing line
# "N passed, N failed, N skipped" over both passes and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
# A sandboxed command gets a private /tmp, so fixtures under the host's /tmp are invisible to it.
# When the checkout itself lives under /tmp, run from a copy elsewhere.
case "$ROOT/" in
  /tmp/*)
    RELOC=$(mktemp -d /var/tmp/psb-run.XXXXXX)
    echo "== the checkout is under /tmp: running from a copy in $RELOC =="
    tar -C "$ROOT" --exclude=./.win --exclude=./.git -cf - . | tar -C "$RELOC" -xf -
    chmod 0755 "$RELOC"
    bash "$RELOC/scripts/test-all.sh" "$@"
    rc=$?
    rm -rf "$RELOC"
    exit $rc
    ;;
esac
UNPRIV_USER=${PSB_TEST_USER:-psbtest}
RESULTS=$(mktemp -d /var/tmp/psb-results.XXXXXX)
chmod 0777 "$RESULTS"

npm run --silent build:native >/dev/null || { echo "native build failed"; exit 1; }
npm run --silent build:ts || { echo "TypeScript build failed"; exit 1; }

status=0
echo "== vitest as $(id -un) (uid $(id -u)) =="
npx vitest run --reporter=default --reporter=json --outputFile.json="$RESULTS/root.json" "$@" || status=1
# The whole suite (no files named): the Landlock-mode suites again with the supervision as
# threads of the host (PSB_SUPERVISION=thread, the opt-out from the default, a process of its own:
# lib/platform/linux/supervision-process.ts), as root and as the unprivileged user. (The lock and
# SQLite tests have a row of their own for it.)
THREAD_SUITES=""
if [ $# -eq 0 ] && [ "${PSB_SKIP_THREAD_PASS:-0}" != 1 ]; then
  for f in supervision-process threats-fs threats-net threats-proc threats-rob landlock-holes landlock-carveouts landlock-deny-read \
    landlock-denyread-stat landlock-denyread-procfs landlock-terminals landlock-fifo connect-supervisor proxy-peers \
    supervisor-envelope supervisor-budget supervisor-access supervisor-thread spare; do THREAD_SUITES+=" test/linux/$f.test.ts"; done
  THREAD_SUITES+=" test/changes/record-landlock.test.ts test/changes/journal.test.ts"
  echo "== vitest as $(id -un), the supervision as threads of the host =="
  PSB_SUPERVISION=thread npx vitest run --reporter=default --reporter=json --outputFile.json="$RESULTS/root-thread.json" $THREAD_SUITES || status=1
fi

if [ "$(id -u)" = 0 ] && [ "${PSB_SKIP_UNPRIVILEGED:-0}" != 1 ]; then
  id "$UNPRIV_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$UNPRIV_USER"
  # The unprivileged user needs a tree it can read and write: a copy outside root's home.
  COPY=$(mktemp -d /var/tmp/psb-unpriv.XXXXXX)
  tar -C "$ROOT" --exclude=./.win --exclude=./.git -cf - . | tar -C "$COPY" -xf -
  chown -R "$UNPRIV_USER": "$COPY"
  chmod 0755 "$COPY"
  echo "== vitest as $UNPRIV_USER (uid $(id -u "$UNPRIV_USER")) in $COPY =="
  runuser -u "$UNPRIV_USER" -- env -i PATH="$PATH" HOME="$(getent passwd "$UNPRIV_USER" | cut -d: -f6)" \
    LANG=C.UTF-8 CI="${CI:-}" bash -c "cd '$COPY' && npx vitest run --reporter=default --reporter=json --outputFile.json='$RESULTS/unpriv.json' $*" || status=1
  if [ -n "$THREAD_SUITES" ]; then
    echo "== vitest as $UNPRIV_USER, the supervision as threads of the host =="
    runuser -u "$UNPRIV_USER" -- env -i PATH="$PATH" HOME="$(getent passwd "$UNPRIV_USER" | cut -d: -f6)" \
      LANG=C.UTF-8 CI="${CI:-}" PSB_SUPERVISION=thread bash -c "cd '$COPY' && npx vitest run --reporter=default --reporter=json --outputFile.json='$RESULTS/unpriv-thread.json' $THREAD_SUITES" || status=1
  fi
  rm -rf "$COPY"
fi

node -e '
const fs = require("fs");
let p = 0, f = 0, s = 0;
const bad = [];
for (const file of fs.readdirSync(process.argv[1])) {
  const r = JSON.parse(fs.readFileSync(process.argv[1] + "/" + file, "utf8"));
  p += r.numPassedTests; f += r.numFailedTests; s += r.numPendingTests + (r.numTodoTests || 0);
  if (r.numFailedTestSuites && !r.numFailedTests) f += r.numFailedTestSuites;
  // Name every failure again at the end: a long run is often read from its tail only.
  const pass = file.replace(/\.json$/, "");
  for (const t of r.testResults || []) {
    const rel = t.name.replace(process.cwd() + "/", "").replace(/^\/var\/tmp\/psb-unpriv\.[^/]+\//, "");
    const failed = (t.assertionResults || []).filter((a) => a.status === "failed");
    for (const a of failed) bad.push(`${pass}: ${rel} > ${a.fullName}`);
    if (t.status === "failed" && !failed.length) bad.push(`${pass}: ${rel}: ${(t.message || "failed").split("\n")[0]}`);
  }
}
for (const line of bad) console.log(`FAILED ${line}`);
if (process.env.PSB_FAILURES_FILE && bad.length)
  fs.appendFileSync(process.env.PSB_FAILURES_FILE, bad.map((l) => `npm test: ${l}\n`).join(""));
console.log(`${p} passed, ${f} failed, ${s} skipped`);
' "$RESULTS" || status=1
rm -rf "$RESULTS"
exit $status
