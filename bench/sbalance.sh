#!/bin/bash
# The design's target for `sbalance -u X`: at most 0.5x the wall time of `sshare -u X -P` (the Slurm
# command it stands beside). Runs both N times as a non-root user against the test cluster and a
# private accountd, alternating, and prints the median and p90 wall time of each and their ratio.
#
#   bash tests/run.sh up && bash bench/sbalance.sh          # N=200 BENCH_USER=alice by default
#
# Run as root from the repository root after building sbalance as the README installs it, linked
# statically (SBALANCE= names another build, e.g. target/release/sbalance):
#   cargo build --release --workspace && bash packaging/static-sbalance.sh --release
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${N:-200}
BENCH_USER=${BENCH_USER:-alice}
BIN=$PWD/target/release
SBALANCE=${SBALANCE:-$PWD/target/release/static/sbalance}
[[ -x $BIN/accountd ]] || { echo "build first: cargo build --release -p accountd" >&2; exit 1; }
[[ -x $SBALANCE ]] || { echo "no $SBALANCE: build the static sbalance first (see the top of this script)" >&2; exit 1; }
sshare -V >/dev/null || { echo "sshare not found: is Slurm installed?" >&2; exit 1; }

DIR=$(mktemp -d /tmp/gputokens-bench-sbalance.XXXXXX)
chmod 755 "$DIR"
cleanup() { [[ -n ${SERVE:-} ]] && kill "$SERVE" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
cat > "$DIR/gputokens.toml" <<CONF
[prices]
rtx2080 = 0.5
rtx3090 = 1
a6000 = 4
[paths]
ledger = "$DIR/lib/ledger.sqlite"
snapshot = "$DIR/lib/balances.snapshot"
socket = "$DIR/run/accountd.sock"
[preemption]
enabled = false
[http]
listen = "off"
[slurm]
# The ledger is this script's alone: accountd must not charge the cluster's jobs (its first cycle
# would, and would keep the socket busy meanwhile).
bin_dir = "$DIR/no-slurm"
CONF
"$BIN/accountd" --config "$DIR/gputokens.toml" serve 2> "$DIR/serve.log" &
SERVE=$!
for _ in $(seq 100); do [[ -S $DIR/run/accountd.sock ]] && break; sleep 0.1; done
[[ -S $DIR/run/accountd.sock ]] || { echo "accountd did not start:" >&2; cat "$DIR/serve.log" >&2; exit 1; }
# Some history, so the answer is not of an empty ledger.
for i in $(seq 50); do "$BIN/accountd" --config "$DIR/gputokens.toml" admin adjust "$BENCH_USER" -0.1 --reason "bench $i" >/dev/null; done

# Timed as installed (a fresh copy, as install(1) makes): the linker's output in target/ ran
# measurably slower here than the same bytes copied.
install -m 755 "$SBALANCE" "$DIR/sbalance"
# Timed inside one shell of the user's, so that runuser's own start-up is not in the numbers.
install -d -o "$BENCH_USER" -m 755 "$DIR/out"
runuser -u "$BENCH_USER" -- env N="$N" U="$BENCH_USER" SBALANCE="$DIR/sbalance" CONF="$DIR/gputokens.toml" \
  OUT="$DIR/out" bash -c '
    # $EPOCHREALTIME (bash 5) reads the clock without starting a process of its own.
    time_us() { local t0=${EPOCHREALTIME/./} t1; "$@" >/dev/null; t1=${EPOCHREALTIME/./}; echo $(( t1 - t0 )); }
    for _ in $(seq "$N"); do
      time_us "$SBALANCE" --config "$CONF" -u "$U" -P >> "$OUT/sbalance.us"
      time_us sshare -u "$U" -P >> "$OUT/sshare.us"
    done'
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { printf "%d %d\n", v[int((NR + 1) / 2)], v[int(NR * 0.9)] }'; }
read -r sb_med sb_p90 < <(stats "$DIR/out/sbalance.us")
read -r ss_med ss_p90 < <(stats "$DIR/out/sshare.us")
printf '%-26s %8s %8s\n' "command (as $BENCH_USER)" median_us p90_us
printf '%-26s %8d %8d\n' "sbalance -u $BENCH_USER -P" "$sb_med" "$sb_p90"
printf '%-26s %8d %8d\n' "sshare -u $BENCH_USER -P" "$ss_med" "$ss_p90"
ratio=$(awk -v a="$sb_med" -v b="$ss_med" 'BEGIN { printf "%.2f", a / b }')
verdict=$(awk -v r="$ratio" 'BEGIN { print (r <= 0.5) ? "met" : "missed" }')
echo "sbalance / sshare median: $ratio (target <= 0.5): $verdict"
echo "($N calls each of $SBALANCE and sshare, alternating, timed with \$EPOCHREALTIME around each call: fork and exec included for both)"
