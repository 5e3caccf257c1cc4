#!/usr/bin/env bash
# The property tests for a million cases each (the unit tests run proptest's default 256): the TRES
# and gres parsers on any text, costs monotone in GPUs, time, shape and price, the admission rules on
# any amounts, and random job descriptions through job_submit_gputokens.so's exported job_submit and
# job_modify (no panic, every allocation freed). Release build, as slurmctld runs the plugin.
#
#   bash bench/proptest.sh                      # 1,000,000 cases
#   PROPTEST_CASES=20000 bash bench/proptest.sh # shorter
#
# A failure prints the minimal failing input and is saved under proptest-regressions/ beside the
# source file, so the plain unit tests replay it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."

export PROPTEST_CASES="${PROPTEST_CASES:-1000000}"
# Shrinking a failure found late in a long run can take long: cap it.
export PROPTEST_MAX_SHRINK_ITERS="${PROPTEST_MAX_SHRINK_ITERS:-100000}"
threads="${THREADS:-$(nproc)}"

echo "PROPTEST_CASES=$PROPTEST_CASES, $threads test threads, $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
# Built first, so the times below are the runs alone.
cargo test --release --locked -q --no-run -p gputokens -p job-submit-gputokens --lib
for package in gputokens job-submit-gputokens; do
    started=$(date +%s)
    cargo test --release --locked -q -p "$package" --lib properties -- --test-threads="$threads"
    echo "$package: $(( $(date +%s) - started )) s"
done
