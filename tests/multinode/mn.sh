#!/bin/bash
# mn.sh — operate the multi-node test cluster that up.sh started (see lib.sh). Run as root.
#
#   mn.sh in HOST CMD...        run CMD inside HOST (e.g. `mn.sh in ctl1 runuser -u alice -- sbatch ...`)
#   mn.sh start DAEMON HOST     DAEMON: munged slurmdbd slurmctld slurmd accountd agent (gputokens-agent)
#   mn.sh stop DAEMON HOST      SIGTERM, waiting until it is gone; `kill` sends SIGKILL instead
#   mn.sh pids HOST COMM        root-namespace PIDs of COMM in HOST
#   mn.sh cut HOST | heal HOST  unplug / plug HOST's network cable (its processes keep running)
#   mn.sh kill-host HOST        the host is lost: cable out, every process in it killed at once
#   mn.sh boot HOST             power a lost host on again: munged, then its Slurm daemons as its services
#                               would start: slurmdbd first where it runs (a slurmctld without it exits)
#   mn.sh restart-mariadb       stop and start the site's MariaDB (lib.sh: MN_MARIADB)
#   mn.sh boot-all              used by up.sh
# With a second cluster (GPUTOKENS_MN_CLUSTERS=2), ctlb and node4 are its hosts.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"
ACCOUNTD=${GPUTOKENS_MN_ACCOUNTD:-/usr/bin/accountd}
AGENT=${GPUTOKENS_MN_AGENT:-/usr/bin/gputokens-agent}

# boot HOST: its first process (PID 1 of a new PID namespace) binds the host's own files over the
# shared ones, then reaps orphans forever. nsenter rather than `ip netns exec`, which remounts /sys.
# A host whose first process ends while it boots is booted once more, saying how it ended (seen once
# in CI, cause unknown: node3's first process was gone before its munged started); each such boot is
# also noted in $BOOT_RETRIES, which outlives the site, as a passing test shows none of up.sh's output.
BOOT_RETRIES=${GPUTOKENS_MN_BOOT_RETRIES:-/tmp/gputokens-mn-boot-retries.log}
BOOT_FAILURE=""
boot() {
  local h=$1
  host_up "$h" && die "$h is already up"
  boot_once "$h" && return 0
  say "$BOOT_FAILURE; booting $h once more"
  echo "$(date -Is) $BOOT_FAILURE" >> "$BOOT_RETRIES"
  boot_once "$h" || die "$h went down again as it booted ($BOOT_FAILURE): $(tail -n 20 "$MN/hosts/$h/log/boot.out")"
}

# boot_once HOST: boots it; 1, with BOOT_FAILURE saying how, when its first process ended before its
# munged answered. (Called in a condition, where errexit does not hold: each step dies itself.)
boot_once() {
  local h=$1 p init rc
  rm -f "$MN/hosts/$h/run/booted"
  setsid nsenter --net="/run/netns/$(netns "$h")" unshare --uts --pid --mount --fork --kill-child --mount-proc \
    sh -c "hostname $h && mount --bind $MN/etc/hosts /etc/hosts && mount --bind $(etc_of "$h") /etc/slurm \
      && mount --bind $MN/hosts/$h $MN/here && mount --bind $MN/hosts/$h/munge /run/munge \
      && mount --bind $MN_MARIADB/run /run/mysqld && mount --bind $MN_MARIADB/run /run/mariadbd \
      && touch $MN/here/run/booted && exec sh -c 'while :; do sleep 1; done'" \
    </dev/null >>"$MN/hosts/$h/log/boot.out" 2>&1 &
  p=$!
  echo "$p" > "$MN/hosts/$h/unshare.pid" || die "cannot write $MN/hosts/$h/unshare.pid"
  for _ in $(seq 100); do
    init=$(ps -o pid= --ppid "$p" | tr -d ' ' || true)
    if [[ -n $init && -e $MN/hosts/$h/run/booted ]]; then
      echo "$init" > "$MN/hosts/$h/init.pid" || die "cannot write $MN/hosts/$h/init.pid"
      ip -n "$(netns "$h")" link set eth0 up || die "$h: its link did not come up"
      start_munged "$h" && return 0
      host_up "$h" && die "munged on $h did not start or does not answer: $(tail -n 5 "$MN/hosts/$h/munge/munged.log")"
      # Its first process is gone, and unshare with it (else it is killed).
      waitfor 5 eval '! alive "$p"' || kill -9 "$p" 2>/dev/null || true
    fi
    if ! alive "$p"; then
      rc=0
      wait "$p" || rc=$?
      rm -f "$MN/hosts/$h/init.pid"
      BOOT_FAILURE="$h: its first process ended as it booted (unshare $p ended with status $rc)"
      return 1
    fi
    sleep 0.05
  done
  die "$h did not boot: $(cat "$MN/hosts/$h/log/boot.out")"
}

# start_munged HOST: 1 unless it answers within 10 s.
start_munged() {
  in_host "$1" runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid \
    --log-file=/run/munge/munged.log --seed-file=/run/munge/munged.seed || return 1
  waitfor 10 munge_ok "$1"
}

munge_ok() { in_host "$1" sh -c 'munge -n | unmunge' >/dev/null 2>&1; }

start() {
  local what=$1 h=$2
  case $what in
    munged) start_munged "$h" || die "munged on $h did not start or does not answer: $(tail -n 5 "$MN/hosts/$h/munge/munged.log")" ;;
    slurmdbd|slurmctld|slurmd) daemon_in "$h" "$what" "/usr/sbin/$what" -D ;;
    accountd)
      # Started once its socket is there: a command right after would find none (the restore
      # test's `admin history` did, on a loaded machine).
      daemon_in "$h" accountd "$ACCOUNTD" serve
      waitfor 30 test -S "$MN/hosts/$h/gputokens/accountd.sock" \
        || die "accountd on $h made no socket: $(tail -n 20 "$MN/hosts/$h/log/accountd.out")" ;;
    agent) daemon_in "$h" agent "$AGENT" ;;
    *) die "start: no such daemon: $what" ;;
  esac
}

comm_of() { case $1 in agent) echo gputokens-agent ;; *) echo "$1" ;; esac; }

# signal_daemon SIGNAL DAEMON HOST: signal it and wait (up to 15 s) until it is gone.
signal_daemon() {
  local sig=$1 what=$2 h=$3 pids
  pids=$(pids_in "$h" "$(comm_of "$what")")
  [[ -n $pids ]] || return 0
  # shellcheck disable=SC2086
  kill "-$sig" $pids 2>/dev/null || true
  gone() { [[ -z $(pids_in "$h" "$(comm_of "$what")") ]]; }
  waitfor 15 gone || die "$what on $h survived SIG$sig"
}

kill_host() {
  local h=$1
  ip -n "$(netns "$h")" link set eth0 down
  kill -9 "$(cat "$MN/hosts/$h/unshare.pid")" 2>/dev/null || true
  gone() { ! host_up "$h"; }
  waitfor 10 gone || die "$h is still up"
  rm -f "$MN/hosts/$h/init.pid"
}

case ${1:-} in
  in) shift; h=${1:?host}; shift; in_host "$h" "$@" ;;
  start) start "${2:?daemon}" "${3:?host}" ;;
  stop) signal_daemon TERM "${2:?daemon}" "${3:?host}" ;;
  kill) signal_daemon KILL "${2:?daemon}" "${3:?host}" ;;
  pids) pids_in "${2:?host}" "${3:?comm}" ;;
  cut) ip -n "$(netns "${2:?host}")" link set eth0 down ;;
  heal) ip -n "$(netns "${2:?host}")" link set eth0 up ;;
  kill-host) kill_host "${2:?host}" ;;
  boot)
    boot "${2:?host}"
    if [[ $2 == "$(dbd_host)" ]]; then
      start slurmdbd "$2"
      waitfor 30 in_host "$2" bash -c "exec 3<>/dev/tcp/$2/6819" || die "slurmdbd on $2 does not listen"
    fi
    case $2 in node*) start slurmd "$2" ;; ctl*) start slurmctld "$2" ;; esac ;;
  restart-mariadb) stop_mn_mariadb && start_mn_mariadb ;;   # the site's, which every slurmdbd here uses
  boot-all) for h in "${HOSTS[@]}"; do boot "$h"; done ;;
  *) sed -n 2,14p "$0"; exit 1 ;;
esac
