#!/bin/bash
# The demo on a local test cluster: starts real Slurm (tests/cluster/up.sh) and accountd, charges
# the seed's worked example, runs a real GPU job as alice and charges it from sacct, then shows
# balances as root and as alice, and ends with alice's status page link and statement. Run as root on Debian 12: `bash tests/demo.sh`;
# `bash tests/demo.sh stop` stops accountd and the cluster.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
DEMO=${GPUTOKENS_DEMO:-/tmp/gputokens-demo}
CONF=$DEMO/gputokens.toml
export GPUTOKENS_CONF=$CONF
ACCOUNTD=$ROOT/target/debug/accountd
SBALANCE=$ROOT/target/debug/sbalance
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }

stop_accountd() {
  if [[ -s $DEMO/accountd.pid ]] && kill "$(cat "$DEMO/accountd.pid")" 2>/dev/null; then echo "stopped accountd"; fi
  rm -f "$DEMO/accountd.pid"
}
if [[ ${1:-} == stop ]]; then
  stop_accountd
  bash tests/cluster/down.sh
  exit 0
fi

# The demo changes this host (README, "Demo and tests"): never on a real site's Slurm host. A site's
# gputokens.toml is the sign of one; the tests' and the demo's own start with "# Written by tests/".
if [[ -e /etc/slurm/gputokens.toml ]] && ! head -n 1 /etc/slurm/gputokens.toml | grep -q '^# Written by tests/' \
  && [[ -z ${GPUTOKENS_DEMO_ON_THIS_HOST:-} ]]; then
  echo "tests/demo.sh: /etc/slurm/gputokens.toml is not one the tests wrote: this looks like a real site's" \
    "Slurm host. The demo rewrites that file, installs Slurm, MUNGE and MariaDB packages, creates a MUNGE key" \
    "and a database, and adds users. Run it on a scratch machine (or set GPUTOKENS_DEMO_ON_THIS_HOST=1)." >&2
  exit 2
fi
echo "tests/demo.sh: this changes the host: Slurm, MUNGE and MariaDB packages, /etc/slurm/gputokens.toml," \
  "a MUNGE key if there is none, a database, /etc/hosts, and the users alice, bob, carol and 120 test users."

step "Install packages and build"
bash tests/cluster/install.sh
cargo build --workspace --locked -q

step "Start the Slurm test cluster (munge, MariaDB, slurmdbd, slurmctld, slurmd with 8 fake GPUs)"
# slurmctld loads the job_submit plugin and sbatch the SPANK plugin; both read /etc/slurm/gputokens.toml:
# the snapshot path becomes a link to the demo accountd's snapshot below, the socket is its socket.
LAB=${GPUTOKENS_LAB:-/tmp/gputokens-cluster}
install -d -m 755 "$LAB/snapshot"
printf '# Written by tests/demo.sh: read by job_submit_gputokens.so (slurmctld) and spank_gputokens.so (sbatch).\n[paths]\nsnapshot = "%s"\nsocket = "%s"\n' \
  "$LAB/snapshot/balances.snapshot" "$DEMO/run/accountd.sock" > /etc/slurm/gputokens.toml
JOBSUBMIT_PLUGIN_SO=$ROOT/target/debug/libjob_submit_gputokens.so SPANK_PLUGIN_SO=$ROOT/target/debug/libspank_gputokens.so \
  SPANK_PLUGIN_ARGS="jobs_dir=$LAB/gpu-jobs" bash tests/cluster/up.sh

step "Configure gputokens (seed prices; a fresh ledger in $DEMO)"
stop_accountd
rm -rf "$DEMO" && install -d -m 755 "$DEMO"
sed -e "s|/var/lib/gputokens|$DEMO/lib|" -e "s|/run/gputokens|$DEMO/run|" -e 's/^daily = 1/daily = 0/' \
  -e 's/^first_lookback = .*/first_lookback = "1m"/' -e 's/^charge = "1h"/charge = "15s"/' \
  -e "s|^jobs_dir = .*|jobs_dir = \"$LAB/gpu-jobs\"|" -e 's/^allow_http = false/allow_http = true/' \
  -e 's/^enforce = false/enforce = true/' -e 's/^dry_run = true/dry_run = false/' -e 's/^drain = false/drain = true/' \
  -e 's/^a6000 = 4$/a6000 = 4\na100 = 7/' \
  slurm-conf/gputokens.toml > "$CONF"
echo "a100 = 7: the test cluster also has two MIG slices of an A100 (a100_3g.20gb), each priced 3/7 of it, 3 tokens per hour;"
echo "daily = 0 for the demo, so the worked example comes out at exactly 46; accountd charges every 15 s;"
echo "slurm_user = slurm, the SlurmUser the test cluster's slurmctld runs as; jobs_dir where its SPANK plugin records;"
echo "allow_http = true: the demo has no TLS proxy in front of the status page;"
echo "enforce = true, preemption dry_run = false, drain = true: the demo enforces from the start (a new site starts in shadow mode)"
show "$ACCOUNTD" config check --slurm
"$ACCOUNTD" serve 2> "$DEMO/accountd.log" &
echo $! > "$DEMO/accountd.pid"
for _ in $(seq 50); do [[ -S $DEMO/run/accountd.sock ]] && break; sleep 0.1; done
ln -sfn "$DEMO/lib/balances.snapshot" "$LAB/snapshot/balances.snapshot"   # slurmctld's plugin follows these balances

step "The worked example: alice starts at 100, is charged 8×rtx2080×5h + 4×rtx3090×10h + 2×a6000×3h, gets the monthly 30"
cat > "$DEMO/last-month.sacct" <<'SACCT'
JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
9001|alice|billing=8,cpu=8,gres/gpu:rtx2080=8,gres/gpu=8,node=1|18000|2026-11-30T08:00:00|COMPLETED
9002|alice|billing=4,cpu=4,gres/gpu:rtx3090=4,gres/gpu=4,node=1|36000|2026-11-30T08:00:00|COMPLETED
9003|alice|billing=2,cpu=2,gres/gpu:a6000=2,gres/gpu=2,node=1|10800|2026-11-30T08:00:00|COMPLETED
SACCT
# The evening before the 1st of this month and five past midnight on it (--now may not run ahead of the clock).
first=$(date +%Y-%m-01)
eve=$(date -d "$first - 1 day" +%Y-%m-%d)
show "$ACCOUNTD" charge --sacct-file "$DEMO/last-month.sacct" --now "${eve}T20:00:00"
show "$ACCOUNTD" tick --skip-charge --now "${first}T00:05:00"
show "$SBALANCE" -u alice -P

step "Replaying the same records and the same day changes nothing"
show "$ACCOUNTD" charge --sacct-file "$DEMO/last-month.sacct" --now "${first}T01:00:00"
show "$ACCOUNTD" tick --skip-charge --now "${first}T02:00:00"
show "$SBALANCE" -u alice -P

step "bob runs a real job on an a6000 for 3 s; one accountd cycle charges it from slurmdbd's record"
cd "${GPUTOKENS_LAB:-/tmp/gputokens-cluster}/jobs"
job=$(runuser -u bob -- sbatch --parsable --output=/dev/null --gres=gpu:a6000:1 --wrap 'sleep 3')
echo "submitted job $job as bob"
for _ in $(seq 120); do
  state=$(sacct -j "$job" -X -n -P -o State)
  [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED* ]] && break
  sleep 0.5
done
show sacct -j "$job" -X -P -o JobID,User,AllocTRES,ElapsedRaw,State
show "$ACCOUNTD" tick
cd "$ROOT"

step "bob asks what a job can cost: sbatch shows his balance (SPANK) and the most the job can cost (job_submit)"
sleep 1   # the job_submit plugin sees the snapshot the tick wrote within a second
cd "$LAB/jobs"
printf '$ runuser -u bob -- sbatch --gpu-tokens-estimate --gres=gpu:a6000:2 --time=2:00:00 --hold --wrap "sleep 1"\n'
held=$(runuser -u bob -- sbatch --parsable --output=/dev/null --gpu-tokens-estimate --gres=gpu:a6000:2 --time=2:00:00 --hold --wrap 'sleep 1')
scancel "$held"
cd "$ROOT"

step "Balances as root (an admin sees everyone)"
show "$SBALANCE" -a

step "As alice: she sees only herself, and cannot grant herself tokens"
printf '$ runuser -u alice -- sbalance -a\n'; runuser -u alice -- "$SBALANCE" --config "$CONF" -a
printf '$ runuser -u alice -- accountd admin grant alice 1000 --reason x\n'
runuser -u alice -- "$ACCOUNTD" --config "$CONF" admin grant alice 1000 --reason x || echo "(exit $?)"

step "alice overspends to -10.4: slurmctld's job_submit plugin refuses her GPU jobs, not her CPU jobs"
balance=$("$SBALANCE" -u alice -P -n -o Balance)
show "$ACCOUNTD" admin adjust alice "$(awk -v b="$balance" 'BEGIN { printf "%.6f", -10.4 - b }')" --reason "demo: overspent"
sleep 1   # the plugin sees the new snapshot within a second
cd "$LAB/jobs"
printf '$ runuser -u alice -- sbatch --gres=gpu:a6000:1 --wrap "sleep 1"\n'
runuser -u alice -- sbatch --output=/dev/null --gres=gpu:a6000:1 --wrap 'sleep 1' || echo "(exit $?)"
printf '$ runuser -u alice -- sbatch --wrap "sleep 1"\n'
runuser -u alice -- sbatch --output=/dev/null --wrap 'sleep 1'
cd "$ROOT"

step "An admin grants 5 tokens: she is in overdraft (-5.4), accepted at a lower priority"
show "$ACCOUNTD" admin grant alice 5 --reason "demo: course credit"
sleep 1
cd "$LAB/jobs"
printf '$ runuser -u alice -- sbatch --gres=gpu:a6000:1 --wrap "sleep 1"\n'
runuser -u alice -- sbatch --output=/dev/null --gres=gpu:a6000:1 --wrap 'sleep 1'
cd "$ROOT"

step "alice's ledger history: the admin's view, and hers (her newest entries)"
show "$ACCOUNTD" admin history alice
printf '$ runuser -u alice -- sbalance --history 4\n'; runuser -u alice -- "$SBALANCE" --config "$CONF" --history 4

cat <<EOT

The cluster and accountd are still running. Try:
  GPUTOKENS_CONF=$CONF $SBALANCE -a
  runuser -u alice -- sbatch --gres=gpu:rtx3090:1 --wrap 'sleep 10'
Stop everything with: bash tests/demo.sh stop
EOT

step "alice's status page (a login link only she can use, once, within 5 minutes) and her statement"
printf '$ runuser -u alice -- sbalance --web\n'; runuser -u alice -- "$SBALANCE" --config "$CONF" --web
month=$(date +%Y-%m)
printf '$ runuser -u alice -- sbalance --statement %s\n' "$month"
runuser -u alice -- "$SBALANCE" --config "$CONF" --statement "$month"
