#!/usr/bin/env bash
# Inside the guest, as root from psb-matrix.service: set up this boot's configuration, run the
# chosen suites as root (a transient system service) and as psbtest from a login session (su -l:
# pam_systemd puts it in session-N.scope; the suites run in a scope of its user manager, under
# user@.service), and write one result line per row to stdout (the host's second serial port).
#
# The configuration comes from the kernel command line (psb.config=NAME); the suites and options
# from /opt/psb-src/.kernel-matrix/env, written by the host (run.sh).
set -uo pipefail
SRC=/opt/psb-src
CONFIG=$(sed -n 's/.*psb\.config=\([^ ]*\).*/\1/p' /proc/cmdline)
# shellcheck disable=SC1091
. "$SRC/.kernel-matrix/env" # WORKERS, USERS, SUITES_<user>, PSB_SUPERVISION (the host's, or empty)
RES=/var/tmp/psb-results
mkdir -p "$RES" && chmod 0777 "$RES"
log() { echo "kernel-matrix-guest: $*"; }
log "config=$CONFIG kernel=$(uname -r) cgroup=$(stat -fc %T /sys/fs/cgroup) lsm=$(cat /sys/kernel/security/lsm 2>/dev/null) systemd=$(systemctl --version | head -1)"
install -m 0755 "$SRC/.kernel-matrix/node" /usr/local/bin/node

# What each configuration changes, and what the unit running the suites delegates.
DELEGATE=yes
case "$CONFIG" in
  v2-systemd | no-landlock | v5.10 | v6.12 | arm64) ;;
  no-userns) sysctl -qw kernel.unprivileged_userns_clone=0 ;;
  no-memcg-delegation) DELEGATE=pids ;;
  apparmor-userns) ;; # two phases, set up below (aa_phase)
  *) log "unknown config '$CONFIG'"; exit 2 ;;
esac
export PSB_MATRIX_CONFIG=$CONFIG PSB_MATRIX_DELEGATE=$DELEGATE
# A process killed by a core-dumping signal (a crash in the addon, an abort in node) is logged by
# the kernel, so a runner worker that "exited unexpectedly" says why in the failed row's dmesg.
sysctl -qw kernel.print-fatal-signals=1 2>/dev/null || true

# One tree per user, outside /tmp (the sandbox hides the host /tmp).
for u in $USERS; do
  dst=/var/tmp/psb-$u
  rm -rf "$dst" && mkdir -p "$dst" && cp -a "$SRC/." "$dst/"
  [ "$u" = root ] || chown -R "$u": "$dst"
  chmod 0755 "$dst"
done

VITEST="node node_modules/vitest/vitest.mjs run --reporter=default --reporter=json"
ENVS="CI=1 NO_COLOR=1 TERM=dumb PSB_SKIP_BUILD=1 PSB_TEST_WORKERS=$WORKERS PSB_MATRIX_CONFIG=$CONFIG PSB_MATRIX_DELEGATE=$DELEGATE"
# The host's PSB_SUPERVISION, and where Landlock mode's supervision then ran for one command (root's).
if [ -n "${PSB_SUPERVISION:-}" ]; then
  ENVS="$ENVS PSB_SUPERVISION=$PSB_SUPERVISION"
  log "PSB_SUPERVISION=$PSB_SUPERVISION: supervision: $(cd "$SRC" && PSB_SUPERVISION=$PSB_SUPERVISION node -e '
require("./dist/index.js").run("true", [], { policy: { mode: "landlock" } })
  .then((r) => console.log(r.enforcement.mechanisms.supervision), (e) => console.log(`${e.code}: ${e.message}`));
' 2>&1)"
fi
LABEL=$CONFIG # the row's name in the result lines (apparmor-userns: one per phase)

summary() { # json file -> "N passed, N failed, N skipped" (suites that failed to load count as failed)
  node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
let f = r.numFailedTests; if (r.numFailedTestSuites && !f) f = r.numFailedTestSuites;
console.log(`${r.numPassedTests} passed, ${f} failed, ${r.numPendingTests + (r.numTodoTests || 0)} skipped`);
' "$1" 2>/dev/null || echo "0 passed, 1 failed, 0 skipped"
}

row() { # user rc json
  local s; s=$(summary "$3")
  local verdict=pass
  [ "$2" = 0 ] && [[ "$s" == *" 0 failed"* ]] || verdict=fail
  # A failed row says what the kernel saw (an OOM kill, a crash) and how much memory was left: a
  # runner that printed nothing else is otherwise a mystery once the guest is gone.
  if [ "$verdict" = fail ]; then
    log "$1: rc=$2 json=$([ -s "$3" ] && echo present || echo missing)"
    dmesg 2>/dev/null | grep -E 'Out of memory|oom-kill|oom_reaper|Killed process|segfault|general protection|traps:|BUG:|blocked for more than|(node|MainThread|worker|libuv)[^ ]*: potentially unexpected fatal signal|Code: ' |
      tail -20 | sed 's/^/kernel-matrix-guest: dmesg: /'
    free -m | sed 's/^/kernel-matrix-guest: free: /'
    # Which file each result came from, and the files that did not finish (a worker that died).
    [ -s "$3" ] && node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
for (const f of r.testResults) {
  const by = (s) => f.assertionResults.filter((a) => a.status === s).length;
  console.log(`kernel-matrix-guest: file ${f.name.replace(/.*\/test\//, "test/")} ${f.status}: ${by("passed")} passed, ${by("failed")} failed, ${by("pending") + by("skipped")} skipped${f.message ? " (" + f.message.split("\n")[0].slice(0, 200) + ")" : ""}`);
}' "$3" 2>/dev/null
  fi
  printf '\nkernel-matrix: %s %s %s %s\n' "$LABEL" "$1" "$verdict" "$s"
}

# arm64: the tree is what an install has (no build/, prebuilds/linux-arm64 only) and the guest has
# no compiler, so the addon can only come from the prebuild. Every row fails unless it loads, in
# the arm64 node that runs the suites and in Debian's own nodejs (18), and is the prebuild.
if [ "$CONFIG" = arm64 ]; then
  why=""
  for c in cc gcc g++ c++ clang make; do command -v "$c" >/dev/null && why="$why a compiler ($c) is installed;"; done
  [ -e "$SRC/build" ] && why="$why the tree has build/;"
  for n in /usr/local/bin/node /usr/bin/node; do
    got=$(cd "$SRC" && "$n" -e '
const file = require("node-gyp-build").resolve(process.cwd());
const p = require("./dist/index.js").probe();
if (!p.addonLoaded) throw new Error("probe: addon not loaded");
console.log(`${process.version} ${process.arch} ${require("path").relative(process.cwd(), file)} defaultMode=${p.defaultMode} landlockAbi=${p.features.landlockAbi}`);
' 2>&1) || why="$why $n could not load it: $(echo "$got" | grep -m1 -i error);"
    log "arm64: $n: $got"
    [[ "$got" == *" arm64 prebuilds/linux-arm64/"* ]] || why="$why $n did not load prebuilds/linux-arm64;"
  done
  if [ -n "$why" ]; then
    log "arm64: the prebuild check failed:$why"
    for u in $USERS; do printf '\nkernel-matrix: %s %s fail 0 passed, 1 failed, 0 skipped (prebuild:%s)\n' "$CONFIG" "$u" "$why"; done
    exit 1
  fi
fi

run_suites() { # user out -> rc; the runner's output on stdout
  local u=$1 out=$2
  if [ "$u" = root ]; then
    # A transient system service, delegated as a service that runs a sandboxing host should be.
    log "root: systemd-run --wait --pipe -p Delegate=$DELEGATE"
    systemd-run --quiet --wait --pipe --collect -p Delegate="$DELEGATE" --working-directory=/var/tmp/psb-root \
      -E PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin -E HOME=/root -E LANG=C.UTF-8 \
      $(for e in $ENVS; do printf -- '-E %s ' "$e"; done) \
      bash -c "echo \"kernel-matrix-guest: root cgroup \$(cat /proc/self/cgroup)\"; $VITEST --outputFile.json=$out $SUITES" 2>&1
  else
    # A login session (pam_systemd: session-N.scope, user@.service started), then the suites in a
    # scope of the user's own manager with the configuration's delegation.
    log "$u: su -l, then systemd-run --user --scope -p Delegate=$DELEGATE"
    su -l "$u" -c "cd /var/tmp/psb-$u && echo \"kernel-matrix-guest: $u login cgroup \$(cat /proc/self/cgroup)\" && \
      env $ENVS systemd-run --user --quiet --scope -p Delegate=$DELEGATE -- \
      bash -c 'echo \"kernel-matrix-guest: $u test cgroup \$(cat /proc/self/cgroup)\"; exec $VITEST --outputFile.json=$out $SUITES'" 2>&1
  fi
}

run_rows() { # the suites once per user, one result line each
  for u in $USERS; do
    out=$RES/$u.json
    rm -f "$out"
    suites_var=SUITES_$u
    SUITES=${!suites_var}
    run_suites "$u" "$out" | tee "$RES/$u.out"
    rc=${PIPESTATUS[0]}
    # Under arm64 emulation (TCG) node itself has crashed: in V8 (a "Fatal error ... Check failed"
    # in its inline caches, no frame of ours), with a segmentation fault at the test runner's
    # start (no result file yet), or in a test worker ("Worker exited unexpectedly"). Such a run
    # says nothing about the sandbox: it is run again, at most twice more, and says so.
    for retry in 1 2; do
      [ "$CONFIG" = arm64 ] || break
      grep -q -E 'Fatal error in|Check failed:|Worker exited unexpectedly' "$RES/$u.out" ||
        { [ "$rc" -ge 128 ] && [ ! -s "$out" ]; } || break
      log "$u: the test runner crashed under emulation (rc=$rc, above); running the suites again ($retry)"
      rm -f "$out"
      run_suites "$u" "$out" | tee "$RES/$u.out"
      rc=${PIPESTATUS[0]}
    done
    rm -f "$RES/$u.out"
    row "$u" "$rc" "$out"
  done
}

# apparmor-userns: Ubuntu's restriction (kernel.apparmor_restrict_unprivileged_userns=1: a user
# namespace can be made, but AppArmor gives it no capabilities) emulated on Debian 12, whose 6.1
# kernel mediates no user namespaces and has no such sysctl. A profile attached to the suites'
# Node (by its path, /usr/local/bin/node; children inherit it) allows everything but
# capabilities. On 6.1 a capability is checked against the profile in every namespace, so the
# denial reaches a bit further than Ubuntu's: the namespace's own setup steps that need one in it
# (CLONE_NEWNS with CLONE_NEWUSER, writing a uid_map) fail, not only its mounts. The user row
# only: Ubuntu does not restrict root (CAP_SYS_ADMIN), and a root denied every capability is not
# a host anyone runs. Phase 1 ("restricted"): that profile. Phase 2 ("profile"): it unloaded and
# what `process-sandbox apparmor-profile` prints for that Node loaded in its place.
AA_EMULATION=/etc/apparmor.d/psb-emulated-userns-restriction
aa_phase() { # restricted | profile: sets LABEL and PSB_MATRIX_APPARMOR; non-zero if it cannot be set up
  local f out
  LABEL=$CONFIG
  [ "$1" = restricted ] || LABEL=$CONFIG/profile
  if [ "$1" = restricted ]; then
    log "apparmor: enabled=$(aa-enabled 2>&1) $(apparmor_parser --version | head -1)"
    cat > "$AA_EMULATION" <<'EOF'
abi <abi/3.0>,
include <tunables/global>

profile psb-emulated-userns-restriction /usr/local/bin/node {
  file,
  /** ix,
  network,
  signal,
  ptrace,
  unix,
  dbus,
  mount,
  umount,
  pivot_root,
  deny capability,
}
EOF
    out=$(apparmor_parser -r "$AA_EMULATION" 2>&1) || { log "apparmor: loading the emulation failed: $out"; return 1; }
  else
    apparmor_parser -R "$AA_EMULATION" 2>&1 | sed 's/^/kernel-matrix-guest: apparmor: /'
    rm -f "$AA_EMULATION"
    out=$(cd "$SRC" && /usr/local/bin/node dist/cli.js apparmor-profile 2>&1) || { log "apparmor: apparmor-profile failed: $out"; return 1; }
    f=/etc/apparmor.d/$(echo "$out" | sed -n 's/^profile \([^ ]*\) .*/\1/p')
    printf '%s\n' "$out" > "$f"
    echo "$out" | grep -v '^#' | sed 's/^/kernel-matrix-guest: apparmor: profile: /'
    out=$(apparmor_parser -r "$f" 2>&1) || { log "apparmor: loading the generated profile failed: $out"; return 1; }
  fi
  export PSB_MATRIX_APPARMOR=$1
  ENVS="$ENVS PSB_MATRIX_APPARMOR=$1"
  aa-status 2>&1 | grep -E 'profiles are|psb-|process-sandbox' | sed 's/^/kernel-matrix-guest: apparmor: /'
  # What each user's Node sees before the suites: its label and the probe's answer.
  for u in $USERS; do
    log "apparmor: $1: $u: $(su -l "$u" -c "cd /var/tmp/psb-$u && node -e '
const p = require(\"./dist/index.js\").probe();
const l = require(\"fs\").readFileSync(\"/proc/self/attr/apparmor/current\", \"utf8\").trim();
console.log(l, \"defaultMode=\" + p.defaultMode, JSON.stringify(p.features));
'" 2>&1 | tr '\n' ' ')"
  done
}

if [ "$CONFIG" = apparmor-userns ]; then
  ENVS0=$ENVS
  for phase in restricted profile; do
    ENVS=$ENVS0
    if aa_phase "$phase"; then
      run_rows
    else
      for u in $USERS; do
        printf '\nkernel-matrix: %s %s fail 0 passed, 1 failed, 0 skipped (AppArmor phase %s not set up)\n' "$LABEL" "$u" "$phase"
      done
    fi
  done
else
  run_rows
fi
