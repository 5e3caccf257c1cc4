# lib.sh — helpers shared by up.sh, down.sh and check.sh (sourced, never executed).
# shellcheck shell=bash

LAB=${GPUTOKENS_LAB:-/tmp/gputokens-cluster}
CLUSTER=gputokens          # slurm.conf ClusterName
ACCOUNT=gputokens          # Slurm account that root and every test user belong to
TEST_USERS=(alice bob carol)  # non-root users created by up.sh (the demo, check.sh, the multinode tests)
# The cluster tests' users: each test takes a set of its own, in turn (crates/accountd/tests/support/cluster.rs
# `serial()`), so no test sees another's jobs or charges. Set N is TEST_USERS with N in three digits:
# alice001 bob001 carol001 … alice120 bob120 carol120; up.sh makes them like TEST_USERS. At least as many
# sets as cluster tests (cluster.rs checks it), so that no two tests of one run share a set.
TEST_USER_SETS=120
SET_USERS=()
for (( _set = 1; _set <= TEST_USER_SETS; _set++ )); do
  for _user in "${TEST_USERS[@]}"; do
    printf -v _user '%s%03d' "$_user" "$_set"
    SET_USERS+=("$_user")
  done
done
unset _set _user
SLURM_USER=slurm           # slurmctld's and slurmdbd's SlurmUser (Debian's packages create it), as on a site
DBNAME=slurm_acct_db
DBUSER=slurm
DBPASS=gputokens-test      # loopback-only test database
SLURM_ETC=/etc/slurm
HOST=$(hostname -s)
_SCRIPT=${0##*/}
_T0=$(date +%s.%N)

# some_of NAME...: the names, or for more than 6 the first 3, … and the count (for say).
some_of() {
  if (( $# <= 6 )); then echo "$*"; else echo "$1 $2 $3 … ${!#} ($# in all)"; fi
}

elapsed() { awk -v a="$_T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
say() { printf '[%6ss] %s\n' "$(elapsed)" "$*"; }
die() { printf '[%6ss] %s: ERROR: %s\n' "$(elapsed)" "$_SCRIPT" "$*" >&2; exit 1; }

# Every call that can hang runs under a deadline, so a daemon that does not answer fails the run in
# seconds with its log, never waits out CI's limit: T_PROBE for one readiness probe (munge -n,
# SELECT 1, sacctmgr list, scontrol ping), T_CALL for one administrative call (sacctmgr add, SQL).
T_PROBE=${GPUTOKENS_T_PROBE:-5}
T_CALL=${GPUTOKENS_T_CALL:-30}

# now_ms: milliseconds since the epoch (bash 5's EPOCHREALTIME, no fork).
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $(( 10#$t / 1000 )); }

# waitfor SECONDS CMD...: run CMD every 0.1 s until it succeeds; 1 once SECONDS have passed, however
# long each try took (bound a try that can hang with `bounded`).
waitfor() {
  local end=$(( $(now_ms) + $1 * 1000 )); shift
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    (( $(now_ms) < end )) || return 1
    sleep 0.1
  done
}

# bounded SECONDS CMD...: run CMD, killed after SECONDS (SIGKILL 5 s later if it ignores SIGTERM);
# a command that ran out of time is named on stderr and returns 124.
bounded() {
  local limit=$1 rc=0; shift
  timeout --kill-after=5 "$limit" "$@" || rc=$?
  if (( rc == 124 || rc == 137 )); then
    printf '%s: %s did not finish within %ss\n' "$_SCRIPT" "$*" "$limit" >&2
    return 124
  fi
  return "$rc"
}

# proc_is PID EXE: PID is a live (non-zombie) process whose argv[0] basename is EXE.
proc_is() {
  local p=$1 exe=$2 stat argv0=""
  [[ $p =~ ^[1-9][0-9]*$ ]] || return 1
  stat=$(cat "/proc/$p/stat" 2>/dev/null) || return 1
  stat=${stat##*) }                       # the fields after "(comm) "
  case ${stat%% *} in Z|X|x) return 1 ;; esac
  IFS= read -r -d '' argv0 2>/dev/null < "/proc/$p/cmdline" || true
  [[ ${argv0##*/} == "$exe" ]]
}

# our_pid NAME EXE: print the PID recorded in $LAB/pids/NAME.pid if that process is still EXE.
our_pid() {
  local f="$LAB/pids/$1.pid" p
  [[ -s $f ]] || return 1
  p=$(<"$f")
  proc_is "$p" "$2" || return 1
  printf '%s\n' "$p"
}

# stop_daemon NAME EXE: SIGTERM the process in $LAB/pids/NAME.pid (only if it is still EXE),
# SIGKILL after 10 s, then remove the pidfile. Never touches anything else.
stop_daemon() {
  local name=$1 exe=$2 f="$LAB/pids/$1.pid" p i
  [[ -e $f ]] || return 0
  p=$(<"$f")
  if proc_is "$p" "$exe"; then
    kill -TERM "$p" 2>/dev/null || true
    for (( i = 0; i < 100; i++ )); do proc_is "$p" "$exe" || break; sleep 0.1; done
    if proc_is "$p" "$exe"; then
      say "$name (pid $p) ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "$p" 2>/dev/null || true
      for (( i = 0; i < 50; i++ )); do proc_is "$p" "$exe" || break; sleep 0.1; done
      proc_is "$p" "$exe" && die "$name (pid $p) survived SIGKILL"
    fi
    say "stopped $name (pid $p)"
  else
    say "$name: pidfile was stale (pid ${p:-none} is not $exe), removed"
  fi
  rm -f "$f"
}

mariadb_ok() { timeout -k 2 "$T_PROBE" mariadb -e 'SELECT 1' >/dev/null 2>&1; }

# start_mariadb: start mariadbd (system datadir, as user mysql) detached; record its PID.
start_mariadb() {
  local p log="$LAB/log/mariadbd.log"
  mkdir -p "$LAB/log" "$LAB/pids"
  # its socket's directory: /run/mysqld up to Debian 13, /run/mariadbd in sid's MariaDB 11.8
  install -d -o mysql -g root -m 755 /run/mysqld /run/mariadbd
  setsid /usr/sbin/mariadbd --user=mysql </dev/null >>"$log" 2>&1 &
  p=$!
  echo "$p" > "$LAB/pids/mariadbd.pid"     # recorded at once so down.sh can stop it even if it hangs
  waitfor 60 mariadb_ok || die "mariadbd did not answer within 60 s; tail of $log:
$(tail -n 20 "$log")"
  if ! proc_is "$p" mariadbd; then         # setsid had to fork: take the PID mariadbd wrote itself
    p=$(cat /run/mysqld/mysqld.pid /run/mariadbd/mysqld.pid 2>/dev/null | head -n1 || true)
    proc_is "$p" mariadbd || die "cannot determine the PID of the mariadbd just started"
    echo "$p" > "$LAB/pids/mariadbd.pid"
  fi
}
