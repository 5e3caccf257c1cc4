#!/bin/bash
# bench/admission.sh — what job_submit_gputokens.so costs slurmctld, on the test cluster
# (tests/cluster/up.sh). Run as root: `bash bench/admission.sh`.
#
# The design's admission target: the plugin adds at most 10 µs to the median time slurmctld logs for
# each submission (`_slurm_rpc_submit_batch_job: JobId=N InitPrio=P usec=N`, logged at info level in
# 22.05) and keeps sbatch throughput at 0.97× or more of slurmctld without it.
#
# For each configuration, without the plugin (JobSubmitPlugins line removed) and with it, slurmctld
# is restarted (tests/cluster/up.sh, which keeps every other setting), WARMUP jobs are submitted and
# cancelled, then the user submits jobs back to back with sbatch; the usec= values of those jobs are
# read from slurmctld's log and their sbatch rate measured. ROUNDS rounds run the two in turns
# (without-with, with-without, ...), so drift hits both alike. The jobs are held GPU jobs (the plugin's full decision,
# never run) and cancelled after each round. At the end the configuration is restored as it was,
# the plugin included, also on failure or Ctrl-C.
#
# The whole run holds the cluster tests' lock (/tmp/gputokens-cluster-tests.lock), so no cluster test
# runs meanwhile; anything else that restarts slurmctld (tests/run.sh up) spoils the run, which then
# stops with an error.
#
# Environment:
#   N=300                      jobs per configuration (split across the rounds)
#   ROUNDS=10                  rounds; each runs both configurations (N/ROUNDS jobs each)
#   WARMUP=20                  jobs submitted and cancelled after each restart, not counted
#   BENCH_USER=alice           who submits
#   BENCH_SBATCH_ARGS="..."    the jobs (default: --hold --gres=gpu:rtx2080:1 --output=/dev/null --wrap true)
#   JOBSUBMIT_PLUGIN_SO=PATH   plugin to measure (e.g. target/release/libjob_submit_gputokens.so);
#                              default: the one installed in PluginDir
#   GPUTOKENS_LAB              the cluster's lab dir (default /tmp/gputokens-cluster)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${N:-300}
ROUNDS=${ROUNDS:-10}
WARMUP=${WARMUP:-20}
BENCH_USER=${BENCH_USER:-alice}
read -r -a JOB_ARGS <<<"${BENCH_SBATCH_ARGS:---hold --gres=gpu:rtx2080:1 --output=/dev/null --wrap true}"
LAB=${GPUTOKENS_LAB:-/tmp/gputokens-cluster}
LOCK=/tmp/gputokens-cluster-tests.lock
CTLD_LOG=$LAB/log/slurmctld.log
SLURM_CONF=/etc/slurm/slurm.conf
SPANK_LINE=/etc/slurm/plugstack.conf.d/gputokens.conf

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root"
(( N >= ROUNDS && ROUNDS >= 1 )) || die "N must be at least ROUNDS (N=$N ROUNDS=$ROUNDS)"
scontrol ping 2>/dev/null | grep -q 'is UP' || die "slurmctld is not up: start the cluster (bash tests/run.sh up)"
PLUGIN_DIR=$(scontrol show config | sed -n 's/^PluginDir *= *//p')
[[ -d $PLUGIN_DIR ]] || die "cannot find the Slurm PluginDir"
INSTALLED=$PLUGIN_DIR/job_submit_gputokens.so

exec 9>"$LOCK"
say "waiting for the cluster tests' lock $LOCK"
flock 9

# ---- the configuration as it is now, to restore -----------------------------------------------------
WORK=$(mktemp -d /tmp/gputokens-bench.XXXXXX)
had_plugin=0
if grep -qx 'JobSubmitPlugins=gputokens' "$SLURM_CONF"; then had_plugin=1; fi
[[ -f $INSTALLED ]] && cp "$INSTALLED" "$WORK/installed.so"
spank_so="" spank_args=""
if [[ -f $SPANK_LINE ]]; then
  # The plugin line, after the comments the packaged file (gputokens-slurm-plugins) has.
  read -r _ spank_so spank_args < <(grep -E -m1 '^[[:space:]]*(optional|required)[[:space:]]' "$SPANK_LINE") || true
fi
# up.sh writes the extra slurm.conf lines it was given after this marker; give them back each time.
extra=$(sed -n '/^# --- GPUTOKENS_EXTRA_SLURM_CONF ---$/,$p' "$SLURM_CONF" | tail -n +2)
measured_so=${JOBSUBMIT_PLUGIN_SO:-$WORK/installed.so}
[[ -f $measured_so ]] || die "no plugin to measure: $measured_so (set JOBSUBMIT_PLUGIN_SO)"

# configure PLUGIN_SO|"": slurmctld with that plugin, or without any; everything else unchanged.
configure() {
  local so=$1 out
  # Built plugins (not GPUTOKENS_PLUGINS=installed, which always loads the job_submit plugin).
  if ! out=$(GPUTOKENS_PLUGINS="" JOBSUBMIT_PLUGIN_SO=$so SPANK_PLUGIN_SO=$spank_so SPANK_PLUGIN_ARGS=$spank_args \
             GPUTOKENS_EXTRA_SLURM_CONF=$extra bash "$ROOT/tests/cluster/up.sh" 2>&1); then
    printf '%s\n' "$out" >&2
    die "tests/cluster/up.sh failed"
  fi
  local want=gputokens got
  [[ -n $so ]] || want=""
  got=$(scontrol show config | sed -n 's/^JobSubmitPlugins *= *//p')
  [[ $got == "${want:-(null)}" || ( -z $want && -z $got ) ]] || die "slurmctld runs JobSubmitPlugins='$got', wanted '$want'"
}

restore() {
  local rc=$?
  trap - EXIT INT TERM
  say "restoring the configuration as it was (job_submit plugin $( ((had_plugin)) && echo loaded || echo off))"
  if ((had_plugin)); then configure "$WORK/installed.so"; else configure ""; fi
  rm -rf "$WORK"
  exit "$rc"
}
trap restore EXIT
trap 'exit 130' INT TERM

ctld_pid() { cat "$LAB/run/slurmctld.pid"; }

# submit COUNT OUTFILE: COUNT jobs back to back as BENCH_USER; job IDs to OUTFILE; prints the seconds taken.
submit() {
  local count=$1 out=$2
  # One shell as the user around the loop, so that only sbatch itself is timed; from the lab's jobs/
  # (mode 1777), a working directory the user may use.
  runuser -u "$BENCH_USER" -- bash -c '
    cd "$1" && count=$2 && shift 2 || exit 1
    start=$(date +%s.%N)
    for (( i = 0; i < count; i++ )); do sbatch --parsable "$@" || exit 1; done
    end=$(date +%s.%N)
    echo "seconds $start $end" >&2' _ "$LAB/jobs" "$count" "${JOB_ARGS[@]}" >"$out.raw" 2>"$out.time" \
    || die "sbatch failed: $(cat "$out.time")"
  cut -d';' -f1 "$out.raw" >"$out"
  (( $(wc -l <"$out") == count )) || die "sbatch gave $(wc -l <"$out") job IDs for $count jobs"
  awk '$1 == "seconds" { printf "%.6f\n", $3 - $2 }' "$out.time"
}

cancel() {
  [[ -s $1 ]] || return 0
  xargs -n 200 scancel <"$1"
  local i
  for (( i = 0; i < 300; i++ )); do
    [[ -z $(squeue -h -j "$(paste -sd, "$1")" -t PD,R,CG 2>/dev/null) ]] && return 0
    sleep 0.1
  done
  die "jobs in $1 do not go away"
}

# round LABEL PLUGIN_SO COUNT: restart into that configuration, measure COUNT submissions.
round() {
  local label=$1 so=$2 count=$3 pid from secs
  configure "$so"
  pid=$(ctld_pid)
  submit "$WARMUP" "$WORK/warmup" >/dev/null
  cancel "$WORK/warmup"
  from=$(stat -c %s "$CTLD_LOG")
  secs=$(submit "$count" "$WORK/ids")
  [[ $(ctld_pid) == "$pid" ]] || die "slurmctld was restarted during the run (someone ran up.sh?)"
  cancel "$WORK/ids"
  # The usec= of exactly these jobs, from the log written since.
  tail -c +$((from + 1)) "$CTLD_LOG" | awk -v ids="$WORK/ids" '
    BEGIN { while ((getline id < ids) > 0) want["JobId=" id] = 1 }
    /_slurm_rpc_submit_batch_job: JobId=/ {
      for (i = 1; i <= NF; i++) { if ($i in want) hit = $i; if ($i ~ /^usec=/) usec = substr($i, 6) }
      if (hit != "") print usec; hit = ""
    }' >"$WORK/usec.round"
  cat "$WORK/usec.round" >>"$WORK/usec.$label"
  echo "$count $secs" >>"$WORK/rate.$label"
  local med p90
  read -r med p90 < <(stats "$WORK/usec.round")
  echo "$med $(awk -v n="$count" -v s="$secs" 'BEGIN { print n / s }')" >>"$WORK/rounds.$label"
  say "$label: $count jobs in ${secs}s ($(awk -v n="$count" -v s="$secs" 'BEGIN { printf "%.1f", n / s }') sbatch/s), usec median $med p90 $p90 ($(wc -l <"$WORK/usec.round") found)"
}

# stats FILE: median and p90 (nearest rank) of the numbers in FILE.
stats() {
  sort -n "$1" | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "- -"; exit }
    med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    r = int(0.9 * NR); if (r < 0.9 * NR) r++
    printf "%s %s\n", med, v[r] }'
}
rate() { awk '{ n += $1; s += $2 } END { printf "%.1f\n", n / s }' "$1"; }

say "N=$N ROUNDS=$ROUNDS WARMUP=$WARMUP user=$BENCH_USER jobs: sbatch ${JOB_ARGS[*]}"
say "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs (other work on the machine shows as noise)"
say "plugin measured: $measured_so ($(sha256sum "$measured_so" | cut -c1-12))"
per_round=$(( N / ROUNDS ))
# Every round leaves its cancelled jobs in slurmctld's memory for MinJobAge (300 s), and a longer job
# list slows submissions down: the order alternates (without-with, with-without, ...) so that this
# drift weighs on both configurations alike.
for (( r = 1; r <= ROUNDS; r++ )); do
  count=$per_round
  (( r == ROUNDS )) && count=$(( N - per_round * (ROUNDS - 1) ))
  if (( r % 2 )); then
    round without "" "$count"
    round with "$measured_so" "$count"
  else
    round with "$measured_so" "$count"
    round without "" "$count"
  fi
done

read -r med0 p900 < <(stats "$WORK/usec.without")
read -r med1 p901 < <(stats "$WORK/usec.with")
rate0=$(rate "$WORK/rate.without")
rate1=$(rate "$WORK/rate.with")
n0=$(wc -l <"$WORK/usec.without")
n1=$(wc -l <"$WORK/usec.with")
(( n0 == N && n1 == N )) || say "WARNING: found $n0 and $n1 usec= lines for $N jobs each"
awk -v m0="$med0" -v p0="$p900" -v r0="$rate0" -v n0="$n0" -v m1="$med1" -v p1="$p901" -v r1="$rate1" -v n1="$n1" 'BEGIN {
  printf "%-16s %6s %12s %10s %10s\n", "slurmctld", "jobs", "median_usec", "p90_usec", "sbatch/s"
  printf "%-16s %6d %12s %10s %10s\n", "without plugin", n0, m0, p0, r0
  printf "%-16s %6d %12s %10s %10s\n", "with plugin", n1, m1, p1, r1
  d = m1 - m0; ratio = r1 / r0
  printf "median difference: %+g usec (target <= 10): %s\n", d, (d <= 10 ? "met" : "MISSED")
  printf "throughput ratio: %.3f (target >= 0.97): %s\n", ratio, (ratio >= 0.97 ? "met" : "MISSED")
}'
say "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The same, round by round (the two configurations of a round ran next to each other): how far the
# round-to-round noise reaches, against which the differences above are to be read.
paste "$WORK/rounds.without" "$WORK/rounds.with" | awk '
  { d[NR] = $3 - $1; q[NR] = $4 / $2 }
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    n = NR; md = median(d, n); mq = median(q, n)
    printf "per round (%d pairs): median difference %+g usec (from %+g to %+g), throughput ratio %.3f (from %.3f to %.3f)\n",
      n, md, d[1], d[n], mq, q[1], q[n]
  }'
