#!/bin/bash
# The design's target for the node agent: at most 1 ms of CPU per sample of 8 GPUs x 64 processes,
# and at most 15 MB resident. Runs `gputokens-agent` (release build) against the fake libnvidia-ml.so
# scripted with 8 GPUs and 64 GPU processes (real `sleep` processes, so the agent reads their /proc
# entries as it would a job's), with a job record per GPU in jobs_dir, posting every sample to a
# private `accountd serve`. After a warm-up it reads the agent's CPU time (utime + stime from
# /proc/PID/stat) and counts its samples (one debug line each) over DURATION seconds, then prints the
# CPU per sample and the agent's peak and current resident set (VmHWM, VmRSS).
#
#   cargo build --release -p accountd -p gputokens-agent -p fake-nvml && bash bench/agent.sh   # INTERVAL=100ms DURATION=30
#
# SHAPE says how the GPUs are used (the same 64 processes in each):
#   whole   one job per GPU (default)
#   shared  four jobs on each GPU (gres/shard, MPS): two processes each, each job measured by its own
#   mig     each GPU in MIG mode with GPM, seven 1g.10gb MIG devices, one job on each: 56 jobs, GPM's
#           figure for each MIG device between two samples
#
# The fake library reads its state file once (FAKE_NVML_STATE_ONCE), so the numbers are the agent's
# (nvml-wrapper, mapping, /metrics export, the HTTP post), not the fake's. A real driver's NVML calls
# cost more than the fake's, which answer from memory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
INTERVAL=${INTERVAL:-100ms}
DURATION=${DURATION:-30}
WARMUP=${WARMUP:-3}
GPUS=8
PROCS_PER_GPU=8
PROFILE=${PROFILE:-release}
SHAPE=${SHAPE:-whole}
case $SHAPE in whole|shared|mig) ;; *) echo "SHAPE must be whole, shared or mig, not '$SHAPE'" >&2; exit 2 ;; esac
BIN=$PWD/target/$PROFILE
NVML=$BIN/libnvidia_ml.so
[[ -x $BIN/accountd && -x $BIN/gputokens-agent && -f $NVML ]] || { echo "build first: cargo build --$PROFILE -p accountd -p gputokens-agent -p fake-nvml" >&2; exit 1; }

DIR=$(mktemp -d /tmp/gputokens-bench-agent.XXXXXX)
SLEEPERS=()
cleanup() {
  [[ -n ${AGENT:-} ]] && kill "$AGENT" 2>/dev/null
  [[ -n ${SERVE:-} ]] && kill "$SERVE" 2>/dev/null
  ((${#SLEEPERS[@]})) && kill "${SLEEPERS[@]}" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
HTTP_PORT=$(free_port)
AGENT_PORT=$(free_port)
cat > "$DIR/gputokens.toml" <<CONF
[prices]
a6000 = 4
[paths]
ledger = "$DIR/lib/ledger.sqlite"
snapshot = "$DIR/lib/balances.snapshot"
socket = "$DIR/run/accountd.sock"
[http]
listen = "127.0.0.1:$HTTP_PORT"
[preemption]
enabled = false
[slurm]
# accountd is this script's alone: it must not read the cluster's jobs (stubs below).
bin_dir = "$DIR/no-slurm"
[agent]
report_to = "http://127.0.0.1:$HTTP_PORT"
interval = "$INTERVAL"
nvml_library = "$NVML"
jobs_dir = "$DIR/jobs"
listen = "127.0.0.1:$AGENT_PORT"
CONF

# 64 real processes for NVML to name, and the jobs as the SPANK prolog records them (SHAPE).
SLICES=7
mkdir -p "$DIR/jobs"
{
  echo 'driver_version = "550.54.15"'
  for ((g = 0; g < GPUS; g++)); do
    uuid=$(printf 'GPU-bench%04d-0000-0000-0000-000000000000' "$g")
    printf '\n[[gpu]]\nuuid = "%s"\nname = "NVIDIA H100 80GB HBM3"\nutil_gpu = %d\nutil_mem = 30\n' "$uuid" $((40 + g))
    printf 'mem_used = 8589934592\nmem_total = 85899345920\ntemp = 60\npower_mw = 250000\necc_uncorrected = 0\n'
    printf 'energy_mj = %d\n' $((1000000000 + g))
    case $SHAPE in
      whole) printf 'gpus=%d\nuuids=%s\n' "$g" "$uuid" > "$DIR/jobs/$((1000 + g))" ;;
      shared) for ((j = 0; j < 4; j++)); do printf 'gpus=%d\nuuids=%s\n' "$g" "$uuid" > "$DIR/jobs/$((1000 + g * 4 + j))"; done ;;
      mig)
        printf 'mig_mode = true\ngpm = true\n'
        for ((m = 0; m < SLICES; m++)); do
          mig=$(printf 'MIG-bench%04d-%04d-0000-0000-000000000000' "$g" "$m")
          printf '[[gpu.mig]]\nuuid = "%s"\nprofile = "1g.10gb"\ngpu_instance = %d\n' "$mig" $((m + 7))
          printf 'mem_used = 1073741824\nmem_total = 10737418240\ngpm_sm_util = %d.5\n' $((10 + m))
          printf 'gpus=%d\nuuids=%s\n' $((g * SLICES + m)) "$mig" > "$DIR/jobs/$((1000 + g * SLICES + m))"
        done ;;
    esac
  done
  for ((g = 0; g < GPUS; g++)); do
    for ((p = 0; p < PROCS_PER_GPU; p++)); do
      job=$((1000 + g))
      case $SHAPE in shared) job=$((1000 + g * 4 + p / 2)) ;; mig) job=$((1000 + g * SLICES + p % SLICES)) ;; esac
      SLURM_JOB_ID=$job sleep 3600 &
      SLEEPERS+=($!)
      printf '\n[[process]]\npid = %d\ngpu = %d\nused_memory = 1073741824\nsm_util = %d\n' $! "$g" $((10 + p))
      [[ $SHAPE != mig ]] || printf 'mig = %d\n' $((p % SLICES))
    done
  done
} > "$DIR/state.toml"

# Slurm as far as accountd's report gate asks it: node benchnode at 127.0.0.1, running the recorded
# jobs (alice's). accountd is this script's alone: it reads no real cluster.
mkdir -p "$DIR/no-slurm"
cat > "$DIR/no-slurm/slurm-stub" <<STUB
#!/bin/sh
case "\$(basename "\$0") \$*" in
  "sinfo "*) echo "benchnode|127.0.0.1|localhost" ;;
  "squeue "*"-w benchnode"*) ls "$DIR/jobs" ;;
  "squeue "*"-j "*) echo alice ;;
  *) echo "no Slurm here (bench stub): \$0 \$*" >&2; exit 1 ;;
esac
STUB
chmod 755 "$DIR/no-slurm/slurm-stub"
for name in sinfo squeue; do ln -s slurm-stub "$DIR/no-slurm/$name"; done

"$BIN/accountd" --config "$DIR/gputokens.toml" serve 2> "$DIR/serve.log" &
SERVE=$!
for _ in $(seq 100); do [[ -S $DIR/run/accountd.sock ]] && break; sleep 0.1; done
[[ -S $DIR/run/accountd.sock ]] || { echo "accountd did not start:" >&2; cat "$DIR/serve.log" >&2; exit 1; }

GPUTOKENS_LOG=gputokens_agent=debug FAKE_NVML_STATE="$DIR/state.toml" FAKE_NVML_STATE_ONCE=1 \
  "$BIN/gputokens-agent" --config "$DIR/gputokens.toml" --node benchnode 2> "$DIR/agent.log" &
AGENT=$!

TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$AGENT/stat"; }
samples() { grep -c "reported $GPUS GPUs and $((GPUS * PROCS_PER_GPU)) GPU processes" "$DIR/agent.log" || true; }
sleep "$WARMUP"
kill -0 "$AGENT" 2>/dev/null || { echo "the agent exited:" >&2; cat "$DIR/agent.log" >&2; exit 1; }
[[ $(samples) -gt 0 ]] || { echo "the agent reported nothing:" >&2; cat "$DIR/agent.log" >&2; exit 1; }
c0=$(cpu_ticks); s0=$(samples)
sleep "$DURATION"
c1=$(cpu_ticks); s1=$(samples)
failures=$(grep -c -E "failed|not delivered" "$DIR/agent.log" || true)
hwm_kb=$(awk '/^VmHWM/ { print $2 }' "/proc/$AGENT/status")
rss_kb=$(awk '/^VmRSS/ { print $2 }' "/proc/$AGENT/status")

n=$((s1 - s0))
((n > 0)) || { echo "no samples in $DURATION s" >&2; exit 1; }
cpu_ms=$(awk -v c=$((c1 - c0)) -v t="$TICKS" -v n="$n" 'BEGIN { printf "%.3f", c * 1000 / t / n }')
echo "agent ($SHAPE): $GPUS GPUs x $((GPUS * PROCS_PER_GPU)) processes, $(ls "$DIR/jobs" | wc -l) jobs, every $INTERVAL, each sample posted to accountd"
echo "samples measured: $n in ${DURATION}s (after ${WARMUP}s of warm-up); failed samples or posts: $failures"
echo "CPU per sample: $cpu_ms ms ($((c1 - c0)) ticks of 1/$TICKS s, user + system) (target <= 1 ms):" \
  "$(awk -v v="$cpu_ms" 'BEGIN { print (v <= 1) ? "met" : "missed" }')"
echo "resident: peak $((hwm_kb / 1024)).$(((hwm_kb % 1024) * 10 / 1024)) MB, now $((rss_kb / 1024)).$(((rss_kb % 1024) * 10 / 1024)) MB (target <= 15 MB):" \
  "$(awk -v v="$hwm_kb" 'BEGIN { print (v <= 15 * 1024) ? "met" : "missed" }')"
