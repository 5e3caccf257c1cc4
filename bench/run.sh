#!/bin/bash
# bench/run.sh — every benchmark of bench/ that runs without a Slurm cluster or root, and a table of
# their headline figures beside the previous release's (bench/baseline.tsv):
#
#   bash bench/run.sh           # figure | this checkout | previous release | ratio (this / previous)
#   bash bench/run.sh --save    # the same, then these figures become the baseline (rewrites baseline.tsv)
#   BENCH_KEEP=DIR bash bench/run.sh   # also keeps each benchmark's output in DIR
#   BENCH_FROM=DIR bash bench/run.sh   # runs nothing: the table of the outputs kept in DIR
#                                        (e.g. a checkout of an older release, whose outputs agree)
#
# Runs charging (cargo bench -p ledger), decision.sh, scale.sh, agent.sh and web.sh with their own
# defaults; the environment changes them as it does for each (BENCH_RECORDS and BENCH_ROUNDS for
# charging, RUNS, USERS, ...), and baseline.tsv keeps the commit and the command of each figure.
# Each benchmark's output is shown as it runs (stderr), the table comes last (stdout).
#
# Not run here:
#   admission.sh  needs root and the test cluster:  bash tests/run.sh up && bash bench/admission.sh
#   sbalance.sh   needs root and the test cluster:  bash tests/run.sh up && bash bench/sbalance.sh
#   proptest.sh   the property tests for a million cases, a test rather than a figure: bash bench/proptest.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
baseline=bench/baseline.tsv
out=$(mktemp -d /tmp/gputokens-bench-run.XXXXXX)
trap 'rm -rf "$out"' EXIT
declare -A command

run() { # NAME COMMAND: runs the command line, its output shown and kept in $out/NAME (and BENCH_KEEP)
  command[$1]=$2
  if [[ -n ${BENCH_FROM:-} ]]; then
    cp "$BENCH_FROM/$1" "$out/$1" 2> /dev/null || : > "$out/$1"
    return
  fi
  echo "== $2" >&2
  # A benchmark that fails leaves its figures out (named below); the others still run.
  bash -c "$2" 2>&1 | tee "$out/$1" >&2 || echo "bench/run.sh: failed: $2" >&2
  if [[ -n ${BENCH_KEEP:-} ]]; then mkdir -p "$BENCH_KEEP" && cp "$out/$1" "$BENCH_KEEP/$1"; fi
}
figure() { # NAME FIGURE UNIT VALUE: one headline figure of benchmark NAME (none: not in its output)
  [[ -n $4 ]] || { echo "bench/run.sh: no '$2' in the output of: ${command[$1]}" >&2; return; }
  printf '%s\t%s\t%s\t%s\n' "$2" "$4" "$3" "${command[$1]}" >> "$out/figures"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# Rust durations as {:?} prints them (981ns, 1.062µs, 2.3ms, 1.5s) in µs, one per line.
us() { sed -E 's/([0-9.]+)(ns|µs|ms|s)$/\1 \2/' | awk '{ print $1 * ($2 == "ns" ? 0.001 : $2 == "ms" ? 1000 : $2 == "s" ? 1e6 : 1) }'; }

run charging "BENCH_RECORDS=${BENCH_RECORDS:-1000000} BENCH_ROUNDS=${BENCH_ROUNDS:-3} cargo bench --locked -q -p ledger --bench charging"
figure charging "charging: ledger / raw SQLite INSERT rate" "x" \
  "$(sed -n 's/^charge \/ raw INSERT rate, median of [0-9]* rounds: \([0-9.]*\).*/\1/p' "$out/charging")"
figure charging "charging: the same by time on the CPU" "x" \
  "$(sed -n 's/^by time on the CPU, median of [0-9]* rounds: \([0-9.]*\)/\1/p' "$out/charging")"

run decision "RUNS=${RUNS:-3} bash bench/decision.sh"
for so in job_submit spank; do
  figure decision "lib${so}_gputokens.so" "bytes" "$(sed -n "s/^lib${so}_gputokens.so: \([0-9]*\) bytes.*/\1/p" "$out/decision")"
done
timing() { # LINE median|p99: the median over the runs of the decision lines holding LINE
  grep -F "$1" "$out/decision" | sed -n "s/.*$2 \([^ ,)]*\).*/\1/p" | us | median
}
figure decision "decision median, 2,000 users" "µs" "$(timing 'job_submit median' median)"
figure decision "decision p99, 2,000 users" "µs" "$(timing 'job_submit median' p99)"
figure decision "decision p99, pools: -A a pool" "µs" "$(timing 'pools, -A' p99)"
figure decision "decision p99, pools: the default account's" "µs" "$(timing 'pools, no -A' p99)"
figure decision "decision median, pools: refused at the floor" "µs" "$(timing 'pools, refused' median)"

run scale "RUNS=${RUNS:-3} bash bench/scale.sh"
figure scale "scale: first tick" "s" "$(awk '$1 == "tick" && $2 == "#1" { print $3 }' "$out/scale")"
figure scale "scale: first tick, peak RSS" "MB" "$(awk '$1 == "tick" && $2 == "#1" { print $5 }' "$out/scale")"
figure scale "scale: later ticks (median)" "s" "$(awk '$1 == "tick" && $2 != "#1" { print $3 }' "$out/scale" | median)"
figure scale "scale: check cycle (median)" "s" "$(awk '$1 == "check" { print $3 }' "$out/scale" | median)"
figure scale "scale: check cycle, peak RSS" "MB" "$(awk '$1 == "check" { print $5 }' "$out/scale" | sort -g | tail -1)"
figure scale "scale: submit p99, quiet" "µs" "$(sed -n 's/^job_submit quiet: .* p99 \([^,]*\),.*/\1/p' "$out/scale" | us)"
figure scale "scale: submit p99, during reloads" "µs" \
  "$(sed -n 's/^job_submit during reloads: .* p99 \([^,]*\),.*/\1/p' "$out/scale" | us)"

run agent "cargo build --release --locked -q -p accountd -p gputokens-agent -p fake-nvml && bash bench/agent.sh"
figure agent "agent: CPU per sample" "ms" "$(sed -n 's/^CPU per sample: \([0-9.]*\) ms.*/\1/p' "$out/agent")"
figure agent "agent: peak resident" "MB" "$(sed -n 's/^resident: peak \([0-9.]*\) MB.*/\1/p' "$out/agent")"

run web "bash bench/web.sh"
figure web "web: admins' view (median)" "ms" "$(sed -n 's/^admin view.* \([0-9.]*\) ms (runs.*/\1/p' "$out/web")"
figure web "web: a user's view (median)" "ms" "$(sed -n 's/^user view.* \([0-9.]*\) ms (runs.*/\1/p' "$out/web")"

# The table: each figure beside the baseline's of the same name.
base_commit=$(awk -F'\t' '!/^#/ { print $4; exit }' "$baseline" 2> /dev/null || true)
echo
echo "| figure | this checkout ($(git rev-parse --short HEAD)$([[ -z $(git status --porcelain --untracked-files=no) ]] || echo ', changed')) | previous release (${base_commit:-none}) | ratio |"
echo "|---|---|---|---|"
while IFS=$'\t' read -r name value unit _; do
  base=$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$baseline" 2> /dev/null || true)
  ratio=$(awk -v v="$value" -v b="$base" 'BEGIN { if (b + 0 != 0) printf "%.2f", v / b; else print "-" }')
  echo "| $name | $value $unit | ${base:+$base $unit} | $ratio |"
done < "$out/figures"

if [[ ${1:-} == --save ]]; then
  commit=$(git rev-parse --short HEAD)$([[ -z $(git status --porcelain --untracked-files=no) ]] || echo '+changes')
  {
    printf '# figure\tvalue\tunit\tcommit\tcommand (bash bench/run.sh --save, %s)\n' "$(date -u +%F)"
    awk -F'\t' -v OFS='\t' -v c="$commit" '{ print $1, $2, $3, c, $4 }' "$out/figures"
  } > "$baseline"
  echo "saved as the baseline: $baseline ($commit)"
fi
