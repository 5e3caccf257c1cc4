# lib.sh — the multi-node test cluster's layout and helpers (sourced by up.sh, down.sh and mn.sh).
# shellcheck shell=bash
#
# Every host is a set of namespaces of its own: network (its own address on a bridge that lives in a
# namespace of its own, the "switch"), UTS (its hostname), mount (its own /etc/hosts, /etc/slurm,
# /run/munge and $MN/here) and PID (its first process a reaper; killing it kills the whole host).
# Hosts: ctl1 (primary slurmctld, slurmdbd, accountd), ctl2 (backup slurmctld; the primary and
# slurmdbd where up.sh's GPUTOKENS_MN_SLURM_HOST=ctl2 puts them there), node1..node3 (slurmd
# and `gputokens-agent`, each with its own munged and fake NVML), login1 (where users log in: munged
# and the site's files, no daemon of Slurm's or gputokens'). Nothing here touches the host's own
# network: the addresses exist only inside these namespaces.

MN=${GPUTOKENS_MN:-/tmp/gputokens-mn}
MN_SUBNET=10.78.0
CONTROLLERS=(ctl1 ctl2)
NODES=(node1 node2 node3)
LOGINS=(login1)
HOSTS=("${CONTROLLERS[@]}" "${NODES[@]}" "${LOGINS[@]}")
# Two clusters (up.sh's GPUTOKENS_MN_CLUSTERS=2, kept in $MN/clusters for mn.sh and down.sh): a
# second Slurm cluster on the same slurmdbd and ledger, ctlb (its slurmctld and accountd) and node4,
# with an /etc/slurm of its own.
MN_CLUSTER_B=gtmnb
CLUSTER_B_HOSTS=(ctlb node4)
# set_clusters N: the hosts of N clusters (1 or 2).
set_clusters() {
  HOSTS=("${CONTROLLERS[@]}" "${NODES[@]}" "${LOGINS[@]}")
  if [[ $1 == 2 ]]; then HOSTS+=("${CLUSTER_B_HOSTS[@]}"); fi
}
set_clusters "$(cat "$MN/clusters" 2>/dev/null || echo 1)"
# The host slurmdbd runs on: ctl1, or where up.sh's GPUTOKENS_MN_SLURM_HOST put it (slurmdbd.conf).
dbd_host() { sed -n 's/^DbdHost=//p' "$MN/etc/slurm/slurmdbd.conf" 2>/dev/null | grep . || echo ctl1; }
SWITCH=gtmn-switch                       # the network namespace holding the bridge
MN_CLUSTER=gtmn
MN_DB=gtmn_acct
MN_ACCOUNT=lab
SLURM_USER=slurm
DBPASS=gputokens-test
HTTP_PORT=9817                           # accountd's listener on ctl1 (and ctl2 in a pair)
MN_LEDGER_DB=gtmn_ledger                 # GPUTOKENS_MN_PAIR: the ledger's database and user
MN_LEDGER_PASS=gputokens-ledger-test
# The site's own MariaDB (its slurmdbd's, and a pair's ledger), apart from tests/cluster's: the
# multi-node tests run beside the one-node cluster's, and restart theirs (mn.sh restart-mariadb).
# It outlives each up.sh's $MN; every host sees its socket's directory where Slurm's and MariaDB's
# clients look by default (/run/mysqld, /run/mariadbd in sid's MariaDB 11.8).
MN_MARIADB=${GPUTOKENS_MN_MARIADB:-/tmp/gputokens-mn-mariadb}
MN_DB_SOCKET=$MN_MARIADB/run/mysqld.sock
_SCRIPT=${0##*/}
_T0=$(date +%s.%N)

elapsed() { awk -v a="$_T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
say() { printf '[%6ss] %s\n' "$(elapsed)" "$*"; }
die() { printf '[%6ss] %s: ERROR: %s\n' "$(elapsed)" "$_SCRIPT" "$*" >&2; exit 1; }

# addr HOST: the host's address.
addr() {
  case $1 in
    ctl1) echo "$MN_SUBNET.2" ;;
    ctl2) echo "$MN_SUBNET.3" ;;
    ctlb) echo "$MN_SUBNET.4" ;;
    node[1-9]) echo "$MN_SUBNET.1${1#node}" ;;
    login1) echo "$MN_SUBNET.20" ;;
    *) die "no such host: $1" ;;
  esac
}

# The GPUs of each node (gres.conf types) and their fake NVML names.
node_gres() {
  case $1 in
    node1) echo "gpu:rtx2080:2,gpu:rtx3090:1" ;;
    node2) echo "gpu:rtx3090:2" ;;
    node3) echo "gpu:a6000:2,gpu:rtx3090:1" ;;
    node4) echo "gpu:a6000:1,gpu:rtx3090:1" ;;
  esac
}
# etc_of HOST: the directory HOST sees as /etc/slurm (its cluster's).
etc_of() {
  case $1 in
    ctlb|node4) echo "$MN/etc-b/slurm" ;;
    *) echo "$MN/etc/slurm" ;;
  esac
}
# node_gpu_types NODE: one type per GPU, in device order (gres.conf File= order, NVML index order).
node_gpu_types() { node_gres "$1" | tr ',' '\n' | awk -F: '{ for (i = 0; i < $3; i++) print $2 }'; }

netns() { echo "gtmn-$1"; }
init_pid() { cat "$MN/hosts/$1/init.pid" 2>/dev/null; }
# alive PID: running; a zombie is not (an init killed with its host waits there for a reaper: PID 1
# of the PID namespace the tests run in, which may not reap, a test binary run by `enter.sh RELEASE`).
alive() { local s; s=$(ps -o stat= -p "$1") && [[ $s != Z* ]]; }
host_up() { local p; p=$(init_pid "$1") && [[ -n $p ]] && alive "$p"; }

# in_host HOST CMD...: run CMD inside every namespace of HOST (in the foreground). -r and -w: in the
# host's root directory too, else entering its mount namespace leaves a release's root filesystem
# (tests/slurm-releases/) for the machine's own, and its binaries.
in_host() {
  local h=$1 p; shift
  p=$(init_pid "$h") || die "$h is not up"
  nsenter -t "$p" -n -u -m -p -r -w -- "$@"
}

# daemon_in HOST NAME CMD...: start CMD detached inside HOST, output to HOST's log/NAME.out.
daemon_in() {
  local h=$1 name=$2 p; shift 2
  p=$(init_pid "$h") || die "$h is not up"
  setsid nsenter -t "$p" -n -u -m -p -r -w -- "$@" </dev/null >>"$MN/hosts/$h/log/$name.out" 2>&1 &
}

# pids_in HOST COMM: root-namespace PIDs of the processes named COMM running in HOST.
pids_in() {
  local p init ns
  init=$(init_pid "$1") || return 0
  ns=$(readlink "/proc/$init/ns/pid" 2>/dev/null) || return 0
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/pid" 2>/dev/null) == "$ns" && $(cat "$p/comm" 2>/dev/null) == "$2" ]] && echo "${p#/proc/}"
  done
  return 0
}

# waitfor SECONDS CMD...: run CMD every 0.2 s until it succeeds; 1 once SECONDS have passed.
waitfor() {
  local end=$(( SECONDS + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < end )) || return 1
    sleep 0.2
  done
}

# mn_sql ARGS...: the mariadb client on the site's own MariaDB, as root.
mn_sql() { timeout 30 mariadb --socket="$MN_DB_SOCKET" "$@"; }
mn_mariadb_ok() { timeout 5 mariadb --socket="$MN_DB_SOCKET" -e 'SELECT 1' >/dev/null 2>&1; }

# start_mn_mariadb: the site's MariaDB, made on first use (slurmdbd's user with it); no TCP port, so
# it never meets tests/cluster's.
start_mn_mariadb() {
  mn_mariadb_ok && return 0
  local p log=$MN_MARIADB/mariadbd.log
  install -d -o mysql -g mysql -m 755 "$MN_MARIADB" "$MN_MARIADB/run"
  if [[ ! -d $MN_MARIADB/data/mysql ]]; then
    rm -rf "$MN_MARIADB/data"
    mariadb-install-db --user=mysql --datadir="$MN_MARIADB/data" --auth-root-authentication-method=socket \
      --skip-test-db > "$MN_MARIADB/install.log" 2>&1 || die "mariadb-install-db failed: $(tail -n 20 "$MN_MARIADB/install.log")"
  fi
  setsid /usr/sbin/mariadbd --user=mysql --datadir="$MN_MARIADB/data" --socket="$MN_DB_SOCKET" \
    --pid-file="$MN_MARIADB/run/mysqld.pid" --skip-networking --log-error="$log" </dev/null >>"$log" 2>&1 &
  p=$!
  waitfor 60 mn_mariadb_ok || die "the multi-node site's mariadbd did not answer within 60 s: $(tail -n 20 "$log")"
  mn_sql -e "CREATE USER IF NOT EXISTS '$SLURM_USER'@'localhost' IDENTIFIED BY '$DBPASS';
    ALTER USER '$SLURM_USER'@'localhost' IDENTIFIED BY '$DBPASS';" || die "cannot make slurmdbd's user"
  say "started the site's mariadbd (pid $p, socket $MN_DB_SOCKET)"
}

# stop_mn_mariadb: stops the site's MariaDB (its data stays for the next start).
stop_mn_mariadb() {
  local p
  p=$(cat "$MN_MARIADB/run/mysqld.pid" 2>/dev/null || true)
  # Its pid file may outlive it (a killed run), and another process may have that pid since.
  [[ -n $p && $(cat "/proc/$p/comm" 2>/dev/null) == mariadbd ]] || p=""
  [[ -n $p ]] && kill "$p" 2>/dev/null || true
  gone_mariadb() { ! mn_mariadb_ok && { [[ -z $p ]] || ! kill -0 "$p" 2>/dev/null; }; }
  waitfor 60 gone_mariadb || die "the site's mariadbd (pid $p) did not stop within 60 s"
}
