#!/bin/bash
# Runs the tests, as root on Debian 12. The suites, by what they need:
#   demo       tests/demo.sh as the README gives it (its own one-node cluster), what it prints, and its stop
#   unit       nothing but this machine: every crate's unit tests and the integration tests of the real
#              binaries, as root and as the non-root users alice, bob and carol (`cargo test --workspace`)
#   dates      the unit suite's test binaries under libfaketime at a month's and a year's turn, the 29th of
#              February and a daylight-saving change (tests/dated-runs.sh)
#   cluster    a real one-node Slurm cluster (tests/cluster/, started and stopped here): the test target
#              `cluster` (crates/accountd/tests/cluster/), and the `#[ignore]`d tests that need munged
#              in the other crates
#   multinode  the multi-node cluster (tests/multinode/: two controllers, three nodes, each test its own):
#              the test target `multinode`
#   packages   the .deb packages as an admin installs them (the test target `packages`), and on the
#              host's release the RPMs (`rpms`)
#   browser    the status page in headless Chromium (the test target `browser`; the host's release:
#              the others have no browser)
# A test's suite is its test target (crates/accountd/tests/TARGET/), never a filter on its name.
#
#   bash tests/run.sh                              every suite on every Slurm release (what CI runs):
#                                                  one build, then the releases side by side
#   bash tests/run.sh --slurm RELEASE [SUITE...]   one release (22.05 is the host's own; 24.11 and 26.05
#                                                  run in their Debian root filesystems, tests/slurm-releases/);
#                                                  every suite that applies there unless SUITEs are named
#   bash tests/run.sh up                           build and start the host's cluster configured as the
#                                                  tests expect, and leave it up (tests/cluster/down.sh stops it);
#                                                  another release's: `bash tests/run.sh --inside RELEASE up` in a
#                                                  shell of `tests/slurm-releases/enter.sh RELEASE`, after a build
#
# Everything is built once, on the host (target/): the other releases' suites run the host's binaries
# and test binaries and build only the two plugins against their own Slurm headers (target/slurm-RELEASE).
# Each release's output goes to target/test-logs/RELEASE.log when they run side by side; unit and dates
# then run once the first release is done, into target/test-logs/clusterless.log. In each release the
# multinode suite runs beside the cluster suite (target/test-logs/multinode-RELEASE.log, then appended).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tests/slurm-releases/lib.sh
REPO=$(pwd)
LAB=${GPUTOKENS_LAB:-/tmp/gputokens-cluster}
TARGET=$REPO/target                    # the host's build, also inside the root filesystems (same path)
MANIFEST=$TARGET/debug/test-binaries.tsv
ALL_SUITES="demo unit dates cluster browser multinode packages"
# The suites that need no cluster: run on the host, with its release's settings.
CLUSTERLESS="unit dates"

# suites_for RELEASE: the suites that mean something there, in the order they run.
suites_for() {
  if [[ $1 == "$HOST_RELEASE" ]]; then echo "$ALL_SUITES"; else echo "cluster multinode packages"; fi
}

# build_rpms: the RPMs for RHEL-family sites, built from a source tarball against this host's Slurm
# headers (--nodeps: Debian has no Slurm RPM), in a target directory of their own (target/rpm/target:
# rpmbuild builds the tarball's tree, whose paths are not this one's). Prints their directory.
build_rpms() {
  local built
  built=$(bash packaging/build-rpms.sh --profile debug --nodeps) || return
  dirname "$(head -n 1 <<<"$built")"
}

# ---- the host's build: every binary, test binary and package input, once ---------------------------
build_host() {
  bash tests/cluster/install.sh
  # Libraries, plugins, binaries and test binaries in one go: one feature resolution, so `cargo test`
  # builds nothing more.
  cargo build --workspace --lib --bins --tests --locked
  # sbalance as the README installs it, linked statically from the same build; the tests run it as
  # the users do.
  bash packaging/static-sbalance.sh >/dev/null
  # The test binaries, and where they are (the other releases run them from here: no cargo there).
  cargo test --workspace --locked --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name = m["target"]["name"] + ("" if m["target"]["kind"] != ["lib"] else "-lib")
        print(m["package_id"].split("#")[0].rsplit("/", 1)[-1].split("@")[0], name, m["executable"], sep="\t")
' | sort -u > "$MANIFEST.new"
  [[ -s $MANIFEST.new ]] || { echo "tests/run.sh: cargo test --no-run listed no test binaries" >&2; exit 1; }
  mv "$MANIFEST.new" "$MANIFEST"
}

# ---- one release, inside its root filesystem (or on the host for the host's release) ---------------
# test_binary NAME: the path of the test binary NAME (the test target's name; a library's is CRATE-lib).
test_binary() { awk -F'\t' -v n="$1" '$2 == n { print $3 }' "$MANIFEST"; }

# The plugins for this Slurm, the packages installed as an admin would, the cluster up.
prepare_release() {
  local release=$1 debs built_debs
  bash tests/cluster/install.sh
  # The plugins depend on this machine's Slurm headers: built here (target/ on the host's release,
  # target/slurm-RELEASE in a root filesystem); the rest of the packages comes from the host's build.
  built_debs=$(bash packaging/build-debs.sh --profile debug --binaries "$TARGET")
  mapfile -t debs <<<"$built_debs"
  # --force-confold keeps the test config written below, --force-confmiss restores a plugstack file
  # up.sh removed in its other mode. up.sh loads the packaged plugins and writes SPANK_PLUGIN_ARGS into
  # their plugstack file; the tests run /usr/bin/accountd and sbalance.
  # On the host, in turn with the scripts that install packages beside it (tests/cluster/install.sh).
  local in_turn=()
  [[ $release == "$HOST_RELEASE" ]] && in_turn=(flock -w 1200 /tmp/gputokens-apt.lock)
  "${in_turn[@]}" dpkg -i --force-confold --force-confmiss "${debs[@]}" >/dev/null
  release_settings

  # The job_submit plugin runs inside the test cluster's slurmctld and reads /etc/slurm/gputokens.toml
  # once at start: point it at the snapshot the admission tests write (crates/accountd/tests/cluster/admission.rs).
  # While there is none, on_error = "accept" lets every job through, so the other cluster tests are unaffected.
  install -d -m 755 "$LAB/snapshot"
  # The plugin's controller status file goes beside it (the default `controller_status`), written by
  # the SlurmUser: the admission tests wait on it for the plugin to have read a new snapshot.
  install -d -m 755 -o slurm "$LAB/snapshot/controllers"
  # spank_gputokens.so (sbatch/srun) reads the same file for accountd's socket: the SPANK tests
  # (crates/accountd/tests/cluster/spank.rs) link that path to the socket of an accountd they start; while there is
  # none, sbatch shows one "balance unknown" line. Each job's prolog records its GPUs under gpu-jobs/, named
  # by UUID through fake-nvml's library in crates/fake-nvml/ (without its state file beside it, which the
  # tests write, it answers "driver not loaded" and records carry no UUIDs).
  printf '# Written by tests/run.sh for the test cluster: read by job_submit_gputokens.so in slurmctld\n# and spank_gputokens.so in sbatch/srun.\n[paths]\nsnapshot = "%s"\nsocket = "%s"\n' \
    "$LAB/snapshot/balances.snapshot" "$LAB/snapshot/accountd.sock" > /etc/slurm/gputokens.toml
  install -D -m 755 "$TARGET/debug/libnvidia_ml.so" "$LAB/fake-nvml/libnvidia-ml.so.1"
  bash tests/cluster/up.sh
}

# What the tests of a prepared release are told: they run the installed packages' accountd and
# sbalance, and the plugins' own builds where they load them directly (crates/accountd/tests/support/common.rs).
release_settings() {
  export GPUTOKENS_PLUGINS=installed GPUTOKENS_INSTALLED_BIN_DIR=/usr/bin
  GPUTOKENS_PLUGIN_BUILD_DIR=${CARGO_TARGET_DIR:-$TARGET}/debug
  export GPUTOKENS_PLUGIN_BUILD_DIR
  export GPUTOKENS_SBALANCE=$TARGET/debug/static/sbalance
  export SPANK_PLUGIN_ARGS="jobs_dir=$LAB/gpu-jobs nvml_library=$LAB/fake-nvml/libnvidia-ml.so.1"
}

# running_daemons: the daemons of the cluster that is up (and the demo's accountd), as pid:starttime
# (a pid alone may be reused by a later lane's daemon).
running_daemons() {
  local pid
  for pid in $(cat "$LAB"/pids/*.pid "${GPUTOKENS_DEMO:-/tmp/gputokens-demo}/accountd.pid" 2>/dev/null); do
    [[ -r /proc/$pid/stat ]] && echo "$pid:$(awk '{print $22}' "/proc/$pid/stat")"
  done
  true
}

# still_running WHAT DAEMONS...: 1 (and which) when one of DAEMONS (pid:starttime) still runs; a
# zombie waiting for its reaper counts as gone.
still_running() {
  local what=$1 left="" pid start state; shift
  for d in "$@"; do
    pid=${d%%:*} start=${d#*:}
    state=$(awk -v s="$start" '$22 == s { print $3 }' "/proc/$pid/stat" 2>/dev/null || true)
    [[ -n $state && $state != Z ]] && left+=" $pid($(tr '\0' ' ' < "/proc/$pid/cmdline"))"
  done
  if [[ -n $left ]]; then echo "$what left processes running:$left" >&2; return 1; fi
  echo "$what stopped every daemon it started"
}

started=()
stop_cluster() {
  bash tests/cluster/down.sh
  still_running down.sh "${started[@]}"
}

# check_demo FILE: what tests/demo.sh printed holds what the README promises of it.
check_demo() {
  local out=$1 rc=0 want
  local -a wants=(
    'slurm: ok: \[prices\] lists every GPU type of the nodes'      # config check --slurm: MIG slices priced
    '^alice|46|-10|ok|'                                               # the worked example
    'sbatch: error: gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused'
    '^Submitted batch job'                                            # her CPU job at the floor
    'this job was accepted with lower priority (nice +10000)'         # her GPU job in overdraft
    'admins may change balances; you are alice'
    'can cost up to 16 tokens (2 a6000 GPUs for 2:00:00)'
    '^  http://127.0.0.1:9817/web/login?token=[0-9a-f]\{64\}$'
    '^Statement of alice for '
    'closing balance (so far) *-5.4$'
  )
  if grep -n -e '^slurm: problem' -e 'panicked' "$out"; then echo "tests/demo.sh printed the problems above"; rc=1; fi
  for want in "${wants[@]}"; do
    grep -q -e "$want" "$out" || { echo "tests/demo.sh printed nothing matching '$want'"; rc=1; }
  done
  return "$rc"
}

# The test targets that are suites of their own (the cluster suite runs every other binary's
# ignored tests).
OWN_SUITE_TARGETS="multinode packages rpms browser"

# run_binaries ARGS...: every test binary but those of OWN_SUITE_TARGETS with ARGS; 1 when one failed.
run_binaries() {
  local rc=0 name path
  while IFS=$'\t' read -r _ name path; do
    [[ " $OWN_SUITE_TARGETS " == *" $name "* ]] && continue
    "$path" "$@" || rc=1
  done < "$MANIFEST"
  return "$rc"
}

# suite NAME: run one suite against the cluster that is up; prints its time.
suite() {
  local name=$1 start=$SECONDS rc=0
  echo "=== suite $name (Slurm $RELEASE) ==="
  case $name in
    unit) cargo test --workspace --locked --no-fail-fast || rc=$? ;;
    # The unit suite's tests again at the dates where calendars turn, after it (the same tests at
    # once in two processes could meet on what they share).
    dates) bash tests/dated-runs.sh || rc=$? ;;
    demo)
      # The README's first command as a newcomer types it, on a cluster of its own (before the tests'
      # one is up), what it prints checked; then `stop`, which must leave nothing of it running.
      local out=$TARGET/test-logs/demo.out demo_daemons=()
      mkdir -p "$TARGET/test-logs"
      bash tests/demo.sh > "$out" 2>&1 || { rc=$?; echo "tests/demo.sh failed (exit $rc):"; tail -n 60 "$out"; }
      if (( rc == 0 )) && ! check_demo "$out"; then rc=1; cat "$out"; fi
      mapfile -t demo_daemons < <(running_daemons)
      (( ${#demo_daemons[@]} >= 5 )) || { echo "the demo left ${#demo_daemons[@]} daemons up, not Slurm's and accountd"; rc=1; }
      bash tests/demo.sh stop || rc=1
      still_running "tests/demo.sh stop" "${demo_daemons[@]}" || rc=1 ;;
    cluster)
      # Every ignored test is a test that needs something: those of the other suites are theirs.
      # In a new order each run (any cluster test must pass after any other): libtest's shuffle,
      # which stable test binaries take under RUSTC_BOOTSTRAP (set for them alone, never for cargo,
      # whose builds it would change). GPUTOKENS_SHUFFLE_SEED=N repeats an order; =off keeps theirs.
      # Each test's time is printed beside its result (--report-time, as unstable as the shuffle).
      local seed=${GPUTOKENS_SHUFFLE_SEED:-$(( (RANDOM << 15) | RANDOM ))} order=(-Z unstable-options --report-time)
      if [[ $seed != off ]]; then
        order+=(--shuffle-seed "$seed")
        echo "cluster tests in shuffled order, seed $seed (GPUTOKENS_SHUFFLE_SEED=$seed bash tests/run.sh ... repeats it)"
      fi
      (export RUSTC_BOOTSTRAP=1; run_binaries "${order[@]}" --ignored) || rc=$? ;;
    multinode)
      GPUTOKENS_MN_FAKE_NVML=$TARGET/debug/libnvidia_ml.so RUSTC_BOOTSTRAP=1 "$(test_binary multinode)" --ignored \
        --test-threads=1 -Z unstable-options --report-time || rc=$?
      bash tests/multinode/down.sh --all || true ;;
    packages)
      "$(test_binary packages)" --ignored || rc=$?
      if [[ $RELEASE == "$HOST_RELEASE" ]]; then
        # Built beside the suites when all releases run (GPUTOKENS_RPMS_BUILD: its log, then a line
        # `rpms DIR` or `failed`), else here.
        local rpms=""
        if [[ -n ${GPUTOKENS_RPMS_BUILD:-} ]]; then
          while ! grep -q '^\(rpms \|failed\)' "$GPUTOKENS_RPMS_BUILD.status" 2>/dev/null; do sleep 2; done
          rpms=$(sed -n 's/^rpms //p' "$GPUTOKENS_RPMS_BUILD.status")
          [[ -n $rpms ]] || { echo "the RPM build failed:"; tail -n 40 "$GPUTOKENS_RPMS_BUILD"; }
        else
          rpms=$(build_rpms) || true
        fi
        if [[ -n $rpms ]]; then
          GPUTOKENS_RPMS=$rpms "$(test_binary rpms)" --ignored || rc=$?
        else
          rc=1
        fi
      else
        echo "skipped: the RPM tests (the rpms target) run on the host's Slurm $HOST_RELEASE only (rpmbuild and rpmlint)"
      fi ;;
    browser) "$(test_binary browser)" --ignored || rc=$? ;;
    *) echo "tests/run.sh: no suite '$name' (suites: $ALL_SUITES)" >&2; return 2 ;;
  esac
  printf '=== suite %s (Slurm %s): %s in %d s\n' "$name" "$RELEASE" "$( (( rc )) && echo FAILED || echo passed)" $(( SECONDS - start ))
  echo "suite $name $RELEASE $(( SECONDS - start )) $rc" >> "$TIMES"
  return "$rc"
}

# in_release RELEASE up|SUITE...: the release's part, where its Slurm is installed.
in_release() {
  RELEASE=$1; shift
  local installed
  installed=$(dpkg-query -W -f '${Version}' slurmctld 2>/dev/null || true)
  [[ -z $installed || $installed == "$RELEASE".* ]] || { echo "tests/run.sh: this host has Slurm $installed, not $RELEASE" >&2; exit 1; }
  TIMES=${GPUTOKENS_TIMES:-/dev/null}
  local start=$SECONDS rc=0 s
  # The demo brings up a cluster of its own: before the tests' one.
  if [[ ${1:-} == demo ]]; then
    shift; suite demo || rc=1; start=$SECONDS
    (( $# )) || return "$rc"
  fi
  prepare_release "$RELEASE"
  echo "prepare $RELEASE $(( SECONDS - start )) 0" >> "$TIMES"
  # The suites without a cluster, when they run apart (below), wait for the host's packages.
  if [[ -n ${GPUTOKENS_PREPARED:-} && $RELEASE == "$HOST_RELEASE" ]]; then touch "$GPUTOKENS_PREPARED"; fi
  if [[ $1 == up ]]; then exit 0; fi
  mapfile -t started < <(running_daemons)
  trap 'stop_cluster || true' EXIT
  # The multi-node suite beside the others: its clusters (namespaces, a MariaDB of their own) share
  # nothing with the one-node cluster's but its users and MUNGE key, and both suites mostly wait on
  # Slurm (one after the other, the cores were 85 % idle). Its output follows theirs.
  local beside="" beside_pid="" beside_log="$TARGET/test-logs/multinode-$RELEASE.log"
  if [[ " $* " == *" multinode "* && " $* " == *" cluster "* ]]; then
    beside=multinode
    mkdir -p "$TARGET/test-logs"
    suite multinode > "$beside_log" 2>&1 &
    beside_pid=$!
  fi
  for s in "$@"; do
    [[ $s == "$beside" ]] || suite "$s" || rc=1
  done
  if [[ -n $beside_pid ]]; then
    wait "$beside_pid" || rc=1
    cat "$beside_log"
  fi
  trap - EXIT
  stop_cluster || rc=1
  return "$rc"
}

# release RELEASE up|SUITE...: enter the release's root filesystem (unless it is the host's) and run there.
release() {
  local release=$1; shift
  if [[ $release == "$HOST_RELEASE" ]]; then
    in_release "$release" "$@"
  else
    bash tests/slurm-releases/rootfs.sh "$release"
    cargo fetch --locked                              # the root filesystem has no network: the host's crate cache
    bash tests/slurm-releases/enter.sh "$release" bash tests/run.sh --inside "$release" "$@"
  fi
}

case ${1:-} in
  --inside) shift; in_release "$@"; exit ;;
  --slurm)
    release=${2:?--slurm needs a release: $RELEASES}; shift 2
    [[ " $RELEASES " == *" $release "* ]] || { echo "tests/run.sh: no Slurm release '$release' (known: $RELEASES)" >&2; exit 2; }
    (( $# )) || set -- $(suites_for "$release")
    for s in "$@"; do
      [[ $s == up || " $(suites_for "$release") " == *" $s "* ]] \
        || { echo "tests/run.sh: suite '$s' does not run on Slurm $release (there: $(suites_for "$release"))" >&2; exit 2; }
    done
    build_host
    release "$release" "$@"
    exit ;;
  up) build_host; release "$HOST_RELEASE" up; exit ;;    # the host's cluster, as `--slurm 22.05 up`
  "") ;;
  *) echo "usage: tests/run.sh [--slurm RELEASE] [up | SUITE...]   (suites: $ALL_SUITES)" >&2; exit 2 ;;
esac

# ---- every release side by side ----------------------------------------------------------------------
# The host builds first (both cores); then each release prepares and runs its suites in its own
# namespaces (ports, users, MariaDB of its own), mostly waiting on Slurm, so they share the cores well.
# The root filesystems may still be downloading: each release waits for its own.
LOGS=$TARGET/test-logs
mkdir -p "$LOGS"
export GPUTOKENS_TIMES=$LOGS/times
: > "$GPUTOKENS_TIMES"
start=$SECONDS
build_host
echo "build host $(( SECONDS - start )) 0" >> "$GPUTOKENS_TIMES"
touch "$LOGS/built"                                   # .ci/run starts clippy beside the suites
# The RPM build (CPU) beside the suites (mostly waiting on Slurm); the host's packages suite waits for it.
export GPUTOKENS_RPMS_BUILD=$LOGS/rpm-build.log
rm -f "$GPUTOKENS_RPMS_BUILD.status"
(
  start=$SECONDS
  if dir=$(build_rpms 2>"$GPUTOKENS_RPMS_BUILD"); then echo "rpms $dir"; else echo failed; fi > "$GPUTOKENS_RPMS_BUILD.status"
  echo "build rpms $(( SECONDS - start )) 0" >> "$GPUTOKENS_TIMES"
) &
# The host's release runs the most suites, so its chain ends last: the suites that need no cluster run
# after whichever release ends first instead. As many suites share the cores as before, and the
# longest chain is shorter by theirs. (Beside the cluster suites, a fourth load, they made the tests'
# load races lose.)
pids=() status=()
export GPUTOKENS_PREPARED=$LOGS/prepared-$HOST_RELEASE
rm -f "$GPUTOKENS_PREPARED"
for r in $RELEASES; do
  suites=()
  for s in $(suites_for "$r"); do [[ " $CLUSTERLESS " == *" $s "* ]] || suites+=("$s"); done
  release "$r" "${suites[@]}" > "$LOGS/$r.log" 2>&1 &
  pids+=("$!")
  [[ $r == "$HOST_RELEASE" ]] && host_pid=$!
  echo "tests/run.sh: Slurm $r started (log: $LOGS/$r.log)"
done
wait -n -p first "${pids[@]}" && status[first]=0 || status[first]=$?
# With the host's release prepared (its packages installed; it may have ended without), and its settings.
clusterless() {
  RELEASE=$HOST_RELEASE TIMES=$GPUTOKENS_TIMES
  while [[ ! -e $GPUTOKENS_PREPARED ]] && kill -0 "$host_pid" 2>/dev/null; do sleep 2; done
  release_settings
  local rc=0 s
  for s in $CLUSTERLESS; do suite "$s" || rc=1; done
  return "$rc"
}
clusterless > "$LOGS/clusterless.log" 2>&1 &
clusterless_pid=$!
echo "tests/run.sh: $CLUSTERLESS started (log: $LOGS/clusterless.log)"
rc=0 i=0
for r in $RELEASES clusterless; do
  pid=${pids[$i]:-$clusterless_pid} log=$LOGS/$r.log what="Slurm $r"
  [[ $r == clusterless ]] && what="$CLUSTERLESS (no cluster)"
  i=$(( i + 1 ))
  if [[ -z ${status[pid]:-} ]]; then wait "$pid" && status[pid]=0 || status[pid]=$?; fi
  echo "===================== $what: $( (( status[pid] )) && echo "FAILED (exit ${status[pid]})" || echo passed) ====================="
  cat "$log"
  (( status[pid] == 0 )) || rc=1
done
echo "=== times (s) ==="
column -t "$GPUTOKENS_TIMES" 2>/dev/null || cat "$GPUTOKENS_TIMES"
# The failures, together at the end, where a reader of the CI log looks first.
grep -h -E '^(test .* FAILED|---- .* stdout ----|tests/run.sh: |--- .*: FAILED)' "$LOGS"/*.log || true
exit "$rc"
