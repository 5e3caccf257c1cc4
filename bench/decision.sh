#!/bin/bash
# The job_submit plugin's in-process decision time: 2,000 submissions through the exported
# `job_submit` of a release build, with 2,000 users in the balance snapshot (Slurm's functions are
# stand-ins; no slurmctld). Prints the median and p99 of each run, and the sizes of both plugins'
# release .so files. Then the same with pools ([accounts] mode = "account"): BENCH_USERS (100,000)
# users in BENCH_ACCOUNTS (10,000) pools. The benchmark is plugins/job-submit/benches/decision.rs,
# one process per run. `RUNS=3 bash bench/decision.sh`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${RUNS:-3}
cargo build --release --locked -q -p job-submit-gputokens -p spank-gputokens
stripped=$(mktemp)
trap 'rm -f "$stripped"' EXIT
for so in target/release/libjob_submit_gputokens.so target/release/libspank_gputokens.so; do
  strip -o "$stripped" "$so"
  echo "$(basename "$so"): $(stat -c %s "$so") bytes ($(stat -c %s "$stripped") stripped)"
done
for part in plain pools; do
  for _ in $(seq "$RUNS"); do
    cargo bench --locked -q -p job-submit-gputokens --bench decision -- "$part" | grep '^job_submit'
  done
done
