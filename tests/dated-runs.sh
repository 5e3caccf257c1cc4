#!/bin/bash
# The tests that need no cluster, run again at the dates where calendars turn: a month's turn, a
# year's turn, the 29th of February and a daylight-saving change, each in a zone of its own. No test
# may depend on the day it runs; these runs prove it for every time-dependent path the unit suite
# covers (statements, expiring and monthly grants, forecasts, the status page's chart, the clock's
# checks). The clock is set by libfaketime and runs on from there; every process a test starts
# (accountd, sbalance, the stand-in Slurm commands) inherits it.
#
# The test binaries run directly, not through cargo: under a faked clock cargo would see its build as
# older or newer than the sources, and rustdoc hangs under libfaketime.
#
#   bash tests/dated-runs.sh [NAME...]    all dates, or the named ones (month-turn year-turn leap-day dst)
# Needs the host's build (tests/run.sh writes target/debug/test-binaries.tsv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MANIFEST=target/debug/test-binaries.tsv
mkdir -p target/test-logs
[[ -s $MANIFEST ]] || { echo "tests/dated-runs.sh: no $MANIFEST: run tests/run.sh (or its build) first" >&2; exit 2; }
lib=$(compgen -G '/usr/lib/*/faketime/libfaketimeMT.so.1' | head -n 1 || true)
[[ -n $lib ]] || { echo "tests/dated-runs.sh: libfaketime is not installed (bash tests/cluster/install.sh)" >&2; exit 2; }

# NAME|TZ|the start, local time in TZ: ten seconds before the turn, so the first tests run before it
# and the rest (the whole run takes about half a minute) after it.
DATES=(
  "month-turn|UTC|2027-04-30 23:59:50"
  "year-turn|America/New_York|2026-12-31 23:59:50"
  "leap-day|Pacific/Auckland|2028-02-28 23:59:50"
  "dst|Europe/Berlin|2027-03-28 01:59:50"
)
(( $# )) || set -- month-turn year-turn leap-day dst

# libfaketime (0.9.10) names the semaphore and shared memory it makes after the process's pid, and
# leaves them behind when that process is killed or execs. A later process given the same pid (pids
# wrap at pid_max) cannot make its own, cannot open its parent's (root's, mode 0600, when it runs as
# alice) and exits 1 with "sem_open failed and recreation attempts failed": the dated runs' flake of
# stops 53 to 55. Those whose process is gone are removed before each binary runs.
remove_stale_faketime_objects() {
  local f pid
  for f in /dev/shm/sem.faketime_sem_* /dev/shm/faketime_shm_*; do
    [[ -e $f ]] || continue
    pid=${f##*_}
    [[ -d /proc/$pid ]] || rm -f -- "$f" 2>/dev/null || true
  done
}

rc=0
for want in "$@"; do
  found=""
  for d in "${DATES[@]}"; do
    IFS='|' read -r name zone start <<<"$d"
    [[ $name == "$want" ]] || continue
    found=1
    echo "=== dated run $name: $start in $zone ==="
    run_start=$SECONDS failed=0
    while IFS=$'\t' read -r _ target path; do
      # multinode: clusters only. prometheus: a real Prometheus, a Go program that keeps the real
      # clock whatever libfaketime says, so its samples and a faked accountd's queries never meet (a
      # site's share one clock).
      [[ $target == multinode || $target == prometheus ]] && continue
      # DONT_FAKE_MONOTONIC: timeouts and sleeps keep the real monotonic clock (libtest's and tokio's
      # waits on a faked one can hang); NO_CACHE: each call reads the clock anew.
      # An offset from the real clock, not "@TIME" (which each process would start anew at its own
      # start): the test binary and every daemon it starts share one faked clock.
      remove_stale_faketime_objects
      offset=$(( $(TZ=$zone date -d "$start" +%s) - $(date +%s) ))
      if ! TZ=$zone LD_PRELOAD=$lib FAKETIME="$(printf %+d "$offset")" FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_NO_CACHE=1 \
        "$path" -q > "target/test-logs/dated-$name-$target.log" 2>&1; then
        failed=1
        echo "--- $target at $start ($zone): FAILED"
        grep -E '^(test .* FAILED|---- |thread .* panicked)' -A 12 "target/test-logs/dated-$name-$target.log" | head -n 80
      fi
    done < "$MANIFEST"
    (( failed )) && rc=1
    printf '=== dated run %s: %s in %d s\n' "$name" "$( (( failed )) && echo FAILED || echo passed)" $(( SECONDS - run_start ))
  done
  [[ -n $found ]] || { echo "tests/dated-runs.sh: no date '$want' (dates: month-turn year-turn leap-day dst)" >&2; exit 2; }
done
exit "$rc"
