#!/bin/bash
# down.sh — stop exactly the daemons tests/cluster/up.sh started (PIDs in $LAB/pids/*.pid, each checked
# against /proc/PID/cmdline before it is signalled), newest first: slurmd, slurmctld, slurmdbd, mariadbd,
# munged. SIGTERM, then SIGKILL after 10 s. Idempotent; exits 0 when nothing is up.
#
# Environment:
#   GPUTOKENS_LAB  lab dir (default /tmp/gputokens-cluster)
#   WIPE=1         also drop the accounting database and the lab's state/log/run/dev/jobs dirs
#   KEEP_JOBS=1    do not scancel queued/running jobs first (by default they are cancelled so that no
#                  job processes outlive slurmd)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

[[ $(id -u) == 0 ]] || die "must run as root"
WIPE=${WIPE:-0}

if [[ ! -d $LAB/pids ]]; then
  say "nothing to stop ($LAB/pids does not exist)"
else
  if [[ ${KEEP_JOBS:-0} != 1 ]] && our_pid slurmctld slurmctld >/dev/null && our_pid slurmd slurmd >/dev/null; then
    queue() { timeout -k 2 "$T_PROBE" squeue -h -o "${1:-%i}" 2>/dev/null || true; }
    queue_empty() { [[ -z $(queue) ]]; }
    jobs=$(queue)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      bounded "$T_CALL" scancel $jobs 2>/dev/null || true
      waitfor 10 queue_empty || say "WARNING: jobs still listed: $(queue '%i %T' | tr '\n' ' ')"
      say "cancelled jobs: $(tr '\n' ' ' <<<"$jobs")"
    fi
  fi
  stop_daemon slurmd slurmd
  stop_daemon slurmctld slurmctld
  stop_daemon slurmdbd slurmdbd
fi

if [[ $WIPE == 1 ]]; then
  if ! mariadb_ok && [[ -x /usr/sbin/mariadbd ]]; then
    say "WIPE: starting mariadbd to drop the accounting database"
    start_mariadb
  fi
  if mariadb_ok; then
    bounded "$T_CALL" mariadb -e "DROP DATABASE IF EXISTS $DBNAME; DROP USER IF EXISTS '$DBUSER'@'localhost';"
    say "WIPE: dropped database $DBNAME"
  fi
fi

if [[ -d $LAB/pids ]]; then
  stop_daemon mariadbd mariadbd
  stop_daemon munged munged
fi

if [[ $WIPE == 1 ]]; then
  rm -rf "$LAB/state" "$LAB/log" "$LAB/run" "$LAB/dev" "$LAB/jobs"
  say "WIPE: removed $LAB/{state,log,run,dev,jobs}"
fi
say "down in $(elapsed)s"
