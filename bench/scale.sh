#!/bin/bash
# A big site through release builds: USERS users (100,000) in the ledger, PENDING (50,000) queued and
# RUNNING (10,000) running GPU jobs in `squeue --json`, one ended job per user in sacct
# (bench/scale_data.py writes them in Slurm 22.05's formats). Measures, with GNU time:
#   `accountd tick`               a whole cycle: charge (sacct + squeue) and check
#   `accountd tick --skip-charge` the check cycle alone: replenish, squeue, snapshot, preemption
# each run's wall time and peak RSS. Then the job_submit plugin's submit latency while accountd's
# 100,000-user snapshot is rewritten under it (plugins/job-submit/benches/reload.rs).
# Slurm's commands are stand-ins in a [slurm] bin_dir that print the generated files: no cluster.
# ACCOUNTS (0) Slurm accounts with a token pool each ([accounts] mode = "account"): each user in two.
# LEDGER_URL: the ledger on that MariaDB server instead of SQLite (a URL naming no database, e.g.
# mysql://root@localhost/?socket=/run/mysqld/mysqld.sock): database gputokens_scale, made anew.
#   bash bench/scale.sh            USERS=… PENDING=… RUNNING=… ACCOUNTS=… RUNS=3 to change the site
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
USERS=${USERS:-100000} PENDING=${PENDING:-50000} RUNNING=${RUNNING:-10000} RUNS=${RUNS:-3} ACCOUNTS=${ACCOUNTS:-0}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -q -p accountd --bin accountd
ACCOUNTD=$(realpath "$TARGET/release/accountd")
work=$(mktemp -d /tmp/gputokens-scale.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT
now=$(date +%s)
python3 bench/scale_data.py "$work" "$USERS" "$PENDING" "$RUNNING" "$now" "$ACCOUNTS"
echo "site: $USERS users, $PENDING pending + $RUNNING running GPU jobs, $ACCOUNTS accounts with pools; squeue --json $(du -h "$work/squeue.json" | cut -f1), sacct $(wc -l < "$work/sacct.txt") rows"

mkdir -p "$work/bin"
stand_in() { printf '#!/bin/sh\n%s\n' "$2" > "$work/bin/$1"; chmod 755 "$work/bin/$1"; }
stand_in squeue "case \"\$*\" in *--json*) exec cat '$work/squeue.json';; esac"
stand_in sacct "exec cat '$work/sacct.txt'"
stand_in sinfo "i=0; while [ \$i -lt 500 ]; do printf 'gpu%04d|gpu:rtx2080:4,gpu:rtx3090:2,gpu:a6000:2\\n' \$i; i=\$((i+1)); done"
stand_in scontrol "case \"\$*\" in *'show partition'*) echo 'PartitionName=gpu Nodes=gpu[0000-0499] TRES=cpu=8000,gres/gpu=4000';; esac; exit 0"
stand_in scancel "exit 0"
stand_in sacctmgr "case \"\$*\" in *withcoord*) exec cat '$work/coords.txt';; *assoc*) exec cat '$work/assoc.txt';; *DefaultAccount*) exec cat '$work/defaults.txt';; esac; exit 0"

cat > "$work/gputokens.toml" <<EOF
[prices]
rtx2080 = 0.5
rtx3090 = 1
a6000 = 4
[slurm]
bin_dir = "$work/bin"
first_lookback = "1d"
[http]
listen = "127.0.0.1:0"
[paths]
ledger = "$work/lib/ledger.sqlite"
snapshot = "$work/lib/balances.snapshot"
socket = "$work/run/accountd.sock"
EOF
if [[ -n ${LEDGER_URL:-} ]]; then
  mariadb -e "DROP DATABASE IF EXISTS gputokens_scale; CREATE DATABASE gputokens_scale"
  base=${LEDGER_URL%%\?*} query=${LEDGER_URL#"$base"}
  printf '[ledger]\nurl = "%s"\n' "${base%/}/gputokens_scale$query" >> "$work/gputokens.toml"
  echo "ledger: MariaDB, database gputokens_scale"
fi
export GPUTOKENS_CONF=$work/gputokens.toml

# The site is set up through Slurm stand-ins that show nothing (so nothing is charged): the ledger,
# and with ACCOUNTS its pools, made by a serve.
mkdir -p "$work/empty-bin"
for tool in squeue sacct sinfo scontrol scancel sacctmgr; do printf '#!/bin/sh\nexit 0\n' > "$work/empty-bin/$tool"; chmod 755 "$work/empty-bin/$tool"; done
sed "s|bin_dir = \"$work/bin\"|bin_dir = \"$work/empty-bin\"|" "$work/gputokens.toml" > "$work/setup.toml"
if (( ACCOUNTS > 0 )); then
  printf '[accounts]\nmode = "account"\n' | tee -a "$work/gputokens.toml" >> "$work/setup.toml"
  GPUTOKENS_CONF=$work/setup.toml "$ACCOUNTD" serve > "$work/setup-serve.log" 2>&1 &
  serve=$!
  for _ in $(seq 100); do [[ -S $work/run/accountd.sock ]] && break; sleep 0.1; done
  GPUTOKENS_CONF=$work/setup.toml "$ACCOUNTD" admin account import "$work/pools.toml"
  kill "$serve"; wait "$serve" || true
else
  GPUTOKENS_CONF=$work/setup.toml "$ACCOUNTD" tick --skip-charge > "$work/setup-tick.log" 2>&1
fi
# A site that began charging a day ago: its first cycle charges the jobs that ended since (a
# ledger's first cycle leaves out what ended before it began, and these ended before this script).
if [[ -n ${LEDGER_URL:-} ]]; then
  mariadb gputokens_scale -e "REPLACE INTO meta (\`key\`, value) VALUES ('charging_since', '$((now - 86400))')"
else
  python3 - "$work/lib/ledger.sqlite" $((now - 86400)) <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('charging_since', ?)", (sys.argv[2],))
db.commit()
PY
fi

measure() { # label, accountd args...
  local label=$1; shift
  /usr/bin/time -f '%e %M' "$ACCOUNTD" "$@" > "$work/out" 2> "$work/time" || { cat "$work/out" "$work/time" >&2; exit 1; }
  read -r secs kb < <(tail -1 "$work/time")
  printf '%-13s %6.2f s  %5d MB peak RSS   %s\n' "$label" "$secs" $((kb / 1024)) "$(tr '\n' ' ' < "$work/out" | cut -c1-150)"
}
for run in $(seq "$RUNS"); do
  # The first run meets every user and charges every ended job (a new site's first cycle); later
  # ones re-read the same rows and charge only the running jobs' progress, as a site's cycles do.
  measure "tick #$run" tick
  measure "check #$run" tick --skip-charge
done
echo "snapshot: $(du -h "$work/lib/balances.snapshot" | cut -f1), $(grep -c '^user ' "$work/lib/balances.snapshot") users, $(grep -c '^pool ' "$work/lib/balances.snapshot" || true) pools"

[[ -n ${LEDGER_URL:-} && -z ${KEEP:-} ]] && mariadb -e "DROP DATABASE gputokens_scale"
echo "job_submit decision time, $USERS users in the snapshot, quiet and while it is rewritten every 0.5 s:"
BENCH_USERS=$USERS cargo bench --locked -q -p job-submit-gputokens --bench reload | grep '^job_submit'
