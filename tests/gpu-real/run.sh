#!/bin/bash
# Issue 37 on a real NVIDIA GPU, without Slurm (never in CI): jobs side by side on one GPU, as gres/shard
# or MPS give them, through the real agent and a real `accountd serve`.
#
#   BIN=<dir with accountd> OUT=<results dir> bash tests/gpu-real/run.sh            # as root, GPU 0
#   DRY=1 BIN=target/debug NVML=target/debug/libnvidia_ml.so OUT=/tmp/x bash tests/gpu-real/run.sh
#
# The job records are written as spank_gputokens.so's prolog writes them (`<jobs_dir>/<job>`: gpus=,
# uuids=, uid=); alice's job process goes into a job cgroup as slurmstepd makes it under cgroup v2
# (system.slice/slurmstepd.scope/job_<id>/…) where that hierarchy is writable, else it carries
# SLURM_JOB_ID. On GPU 0, phases of P seconds:
#   1. alice's job 4242 runs bf16 matrix products alone;
#   2. bob's job 4243 holds 4 GiB and idles beside it; a process of bob's claims alice's job with
#      SLURM_JOB_ID=4242 and holds 2 GiB; job 4244 (bob's) is recorded on the GPU with no process;
#   3. alice's job and 4244 end (records removed): bob's job holds the GPU alone.
# The agent (2 s interval) reports to accountd serve (token auth; [slurm] bin_dir holds stubs of
# sinfo and squeue that know node gpu1 and the three jobs); both /metrics, nvidia-smi (compute apps,
# pmon, power) and accountd's ledger are read at the end of each phase, NVML's energy counter
# (nvidia-ml-py) before and after; the jobs' energy in the ledger is held to the counter's rise
# while jobs were on the GPU. MIG state is listed, read-only; where a GPU has MIG enabled (never
# changed here), phase 4 runs alice's job 4245 on its first MIG device. summary.txt puts them side by side
# with issue 37's checks; the exit status is 1 when one fails. DRY=1 runs the same against the fake
# libnvidia-ml, sleeps standing in for the GPU work and the script scripting what NVML says.
# Everything goes under OUT (7 small files); work files under W (default /tmp/gpu-real-w). P=<seconds>
# sets the phases' length (default 25: the whole run takes about 90 s); CGROUP=0 maps alice's job by
# SLURM_JOB_ID only; SAMEUID=1 runs every job as root (what happens where uid 1001 cannot run torch).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "${BIN:?BIN=<dir with the accountd binary>}" && pwd)
O=${OUT:?OUT=<dir for results>}; mkdir -p "$O"; O=$(cd "$O" && pwd)
PY=${PY:-python3}
NVML=${NVML:-libnvidia-ml.so.1}
P=${P:-25}
W=${W:-/tmp/gpu-real-w}
SRV=127.0.0.1:19827 AGT=127.0.0.1:19828
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

START=$SECONDS
log() { echo "[$(date +%T) +$((SECONDS - START))s] $*" | tee -a "$O/steps.txt"; }
fail() { log "FAILED: $*"; FAILED=1; }
FAILED=
smi() { [ -n "${DRY:-}" ] || timeout 15 nvidia-smi "$@"; }
fetch() { $PY -c 'import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1],timeout=5).read().decode())' "$1" 2>&1; }
as() { local u=$1; shift; exec setpriv --reuid="$u" --regid="$u" --clear-groups env HOME="$W/h$u" "$@"; }
export -f as; export W

PIDS=()
CG=
cleanup() {
  local p; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ -n "$CG" ]; then local d=$CG; while [ "$d" != "$CGROOT" ]; do rmdir "$d" 2>/dev/null; d=$(dirname "$d"); done; fi
}
trap cleanup EXIT

rm -rf "$W"; mkdir -p "$W/jobs" "$W/h1001" "$W/h1002" "$W/snap" "$W/slurm" "$W/lib" "$W/run"
chmod 755 "$W" "$W/jobs"; chown 1001:1001 "$W/h1001"; chown 1002:1002 "$W/h1002"
: > "$O/steps.txt"; : > "$O/smi.txt"; : > "$O/agent-metrics.txt"; : > "$O/accountd-metrics.txt"

# --- the machine, read-only
GPU=$(smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1); GPU=${GPU:-fake GPU (DRY)}
UUID=$(smi --query-gpu=uuid --format=csv,noheader -i 0 2>/dev/null | head -1); UUID=${UUID:-GPU-fake-0}
{
  echo "--- uname"; uname -a; id
  echo "--- nvidia-smi -L"; smi -L
  echo "--- gpus"; smi --query-gpu=index,uuid,name,driver_version,mig.mode.current,mig.mode.pending,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu --format=csv
  echo "--- /proc/self/cgroup"; cat /proc/self/cgroup; stat -fc %T /sys/fs/cgroup
  [ -n "${DRY:-}" ] || { echo "--- torch"; $PY -c 'import torch;print(torch.__version__, torch.cuda.get_device_name(0))'; }
  echo "--- nvidia-ml-py"; $PY -c 'import pynvml;print(pynvml.__file__)'
  echo "--- ldd accountd"; ldd "$BIN/accountd"
} > "$O/env.txt" 2>&1
MIG=$(smi --query-gpu=index,mig.mode.current --format=csv,noheader 2>/dev/null)
{
  echo "${MIG:-no MIG reading (DRY or not supported)}"
  if echo "$MIG" | grep -q Enabled; then smi mig -lgi; smi mig -lci; smi -L | grep -i mig; fi
} > "$W/snap/mig.txt" 2>&1
log "GPU 0: $GPU ($UUID); MIG: $(head -1 "$W/snap/mig.txt")"
# A MIG device for phase 4: the first nvidia-smi lists, and its GPU (DRY: the fake's GPU 1, in MIG mode).
MIG_UUID= MIG_GPU=
if [ -n "${DRY:-}" ]; then MIG_UUID=MIG-fake-1-0 MIG_GPU=1; else
  MIG_UUID=$(smi -L 2>/dev/null | sed -n 's/.*(UUID: \(MIG-[^)]*\)).*/\1/p' | head -1)
  [ -n "$MIG_UUID" ] && MIG_GPU=$(smi -L | awk -v u="$MIG_UUID" '/^GPU /{g=$2; sub(":", "", g)} index($0, u){print g; exit}')
fi

# alice is uid 1001, bob 1002, and they need torch too. Where only root can run it, both jobs run as
# root: then nothing tells bob's claim from alice's own, and the claimant is left out (SKIP in summary.txt).
UA=1001 UB=1002
if [ -z "${DRY:-}" ] && ! (as 1001 $PY -c 'import torch') >>"$O/steps.txt" 2>&1; then
  SITE=$($PY -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  if ! (as 1001 $PY -c 'import torch') >>"$O/steps.txt" 2>&1; then
    UA=0 UB=0; mkdir -p "$W/h0"
    log "WARNING: uid 1001 cannot run torch ($PY, $SITE): every job runs as root, the claimant is left out"
  fi
fi
[ -n "${SAMEUID:-}" ] && { UA=0 UB=0; mkdir -p "$W/h0"; log "SAMEUID: every job runs as root, the claimant is left out"; }

# --- the job cgroup, as slurmstepd makes it under cgroup v2 (CGROUP=0: SLURM_JOB_ID only)
CGROOT=
if [ "${CGROUP:-1}" != 0 ]; then
  for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do [ "$(stat -fc %T $d 2>/dev/null)" = cgroup2fs ] && CGROOT=$d && break; done
  [ -n "$CGROOT" ] || { mkdir -p "$W/cg2" && mount -t cgroup2 none "$W/cg2" 2>>"$O/steps.txt" && CGROOT=$W/cg2; }
fi
if [ -n "$CGROOT" ] && mkdir -p "$CGROOT/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0" 2>>"$O/steps.txt" \
   && [ -w "$CGROOT/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0/cgroup.procs" ]; then
  CG=$CGROOT/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0; MAPPING=cgroup
else
  MAPPING=SLURM_JOB_ID
fi
log "alice's job is found by its $MAPPING${CG:+ ($CG)}"

# --- accountd serve, with Slurm stubs that know node gpu1 and its three jobs
cat > "$W/slurm/stub" <<'STUB'
#!/bin/sh
# Slurm as far as accountd asks it about agent reports; anything else is not here.
echo "$(basename "$0") $*" >> "$(dirname "$0")/calls.log"
case "$(basename "$0") $*" in
  "sinfo "*) echo "gpu1|127.0.0.1|localhost" ;;
  "squeue "*"-w gpu1"*) printf '4242\n4243\n4244\n4245\n' ;;
  "squeue "*"-j 4242 "*|"squeue "*"-j 4245 "*) echo alice ;;
  "squeue "*"-j 4243 "*|"squeue "*"-j 4244 "*) echo bob ;;
  *) echo "no Slurm on this machine (stub)" >&2; exit 1 ;;
esac
STUB
chmod 755 "$W/slurm/stub"; ln -s stub "$W/slurm/sinfo"; ln -s stub "$W/slurm/squeue"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$W/site-secret"; chmod 600 "$W/site-secret"
cat > "$W/server.toml" <<TOML
[prices]
gpu = 1
[slurm]
bin_dir = "$W/slurm"
[http]
listen = "$SRV"
per_user_metrics = true
[agent]
auth = "token"
token_file = "$W/site-secret"
interval = "2s"
[usage]
idle_threshold_percent = 5
idle_window = "6s"
charge_basis = "measured"
[paths]
ledger = "$W/lib/ledger.sqlite"
snapshot = "$W/lib/balances.snapshot"
socket = "$W/run/accountd.sock"
TOML
GPUTOKENS_LOG=info "$BIN/accountd" --config "$W/server.toml" serve > "$W/serve.log" 2>&1 & PIDS+=($!)
for _ in $(seq 50); do [ -S "$W/run/accountd.sock" ] && break; sleep 0.2; done
[ -S "$W/run/accountd.sock" ] || fail "accountd serve did not start"
"$BIN/accountd" --config "$W/server.toml" admin node-token gpu1 > "$W/node-token" 2>>"$O/steps.txt" || fail "no node token"
chmod 600 "$W/node-token"
cat > "$W/agent.toml" <<TOML
[agent]
report_to = "http://$SRV"
interval = "2s"
nvml_library = "$NVML"
jobs_dir = "$W/jobs"
listen = "$AGT"
# summarize.py reads each job's series from the agent's /metrics too (off by default).
per_job_metrics = true
auth = "token"
token_file = "$W/node-token"
TOML

# --- DRY: what NVML would say about the processes now running (the fake re-reads this file)
T0=$SECONDS
fake_state() {
  [ -n "${DRY:-}" ] || return 0
  local util=$1 p sm mem at
  { printf '[[gpu]]\nuuid = "%s"\nname = "Fake H100"\nutil_gpu = %s\nutil_mem = 10\nmem_used = 8589934592\nmem_total = 85899345920\ntemp = 40\npower_mw = %s\nenergy_mj = %s\necc_uncorrected = 0\n' \
      "$UUID" "$util" $((100000 + 5000 * util)) $((1000000000 + (SECONDS - T0) * 400000))
    # GPU 1 in MIG mode with GPM: two 3g.40gb devices, the first (4245's) busy while its process lives.
    sm=0; [ -n "${M_PID:-}" ] && [ -d "/proc/$M_PID" ] && sm=97
    printf '[[gpu]]\nuuid = "GPU-fake-1"\nname = "Fake H100"\ntemp = 40\npower_mw = 200000\nenergy_mj = %s\nmig_mode = true\ngpm = true\n' \
      $((2000000000 + (SECONDS - T0) * 200000))
    printf '[[gpu.mig]]\nuuid = "MIG-fake-1-0"\nprofile = "3g.40gb"\ngpu_instance = 1\nmem_used = 1184890880\nmem_total = 42949672960\ngpm_sm_util = %s\n' "$sm"
    printf '[[gpu.mig]]\nuuid = "MIG-fake-1-1"\nprofile = "3g.40gb"\ngpu_instance = 2\nmem_used = 0\nmem_total = 42949672960\ngpm_sm_util = 0\n'
    for p in ${A_PID:-} ${B_PID:-} ${R_PID:-} ${M_PID:-}; do
      [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null || continue
      at='gpu = 0'
      case $p in "${A_PID:-}") sm=99 mem=1130 ;; "${B_PID:-}") sm=0 mem=4614 ;; "${M_PID:-}") sm=0 mem=1130 at=$'gpu = 1\nmig = 0' ;; *) sm=0 mem=2566 ;; esac
      printf '[[process]]\npid = %s\n%s\nused_memory = %s\nsm_util = %s\n' "$p" "$at" $((mem << 20)) "$sm"
    done
  } > "$W/fake.tmp" && mv "$W/fake.tmp" "$W/fake.toml"
}
[ -n "${DRY:-}" ] && export FAKE_NVML_STATE=$W/fake.toml && fake_state 0
energy() {
  if [ -n "${DRY:-}" ]; then sed -n 's/^energy_mj = //p' "$W/fake.toml"; else $PY "$HERE/nvml_energy.py"; fi
}
echo "BEFORE=$(energy | tr ' ' _)" > "$W/snap/energy.env"; E_T0=$SECONDS

GPUTOKENS_LOG=info "$BIN/gputokens-agent" --config "$W/agent.toml" --node gpu1 > "$W/agent.log" 2>&1 & PIDS+=($!); AGENT=$!
sleep 3
snap() {  # the end of phase $1: both /metrics, nvidia-smi, the ledger
  local ph=$1
  fetch "http://$AGT/metrics" | grep -v '^#' | grep -E 'job_|gpu_utilization|gpu_energy|gpu_power|gpu_memory_used|failures' > "$W/snap/agent-$ph.txt"
  fetch "http://$SRV/metrics" | grep -v '^#' | grep -E 'gputokens_(job_|gpu_utilization|gpu_energy|idle_jobs|agent_)' > "$W/snap/accountd-$ph.txt"
  { echo "=== phase $ph"; cat "$W/snap/agent-$ph.txt"; } >> "$O/agent-metrics.txt"
  { echo "=== phase $ph"; cat "$W/snap/accountd-$ph.txt"; } >> "$O/accountd-metrics.txt"
  [ "$ph" = 0 ] && return
  if [ -n "${DRY:-}" ]; then
    sed -n '/^\[\[process\]\]/,$p' "$W/fake.toml" | awk -F' = ' '/^pid/{p=$2} /^used_memory/{print p ", " $2/1048576 " MiB"}' > "$W/snap/apps-$ph.csv"
    : > "$W/snap/pmon-$ph.txt"; : > "$W/snap/gpu-$ph.csv"
  else
    smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$W/snap/apps-$ph.csv" 2>&1
    smi pmon -c 1 -s um > "$W/snap/pmon-$ph.txt" 2>&1
    smi --query-gpu=utilization.gpu,memory.used,power.draw,temperature.gpu --format=csv,noheader > "$W/snap/gpu-$ph.csv" 2>&1
  fi
  { echo "=== phase $ph: compute apps"; cat "$W/snap/apps-$ph.csv"; echo "--- pmon -s um"; cat "$W/snap/pmon-$ph.txt"
    echo "--- utilization, memory, power, temperature"; cat "$W/snap/gpu-$ph.csv"; } >> "$O/smi.txt"
}
watch_for() { local until=$((SECONDS + $1)); while (( SECONDS < until )); do fake_state "$2"; sleep 2; done; }
snap 0
kill -0 "$AGENT" 2>/dev/null || fail "the agent is not running: $(tail -3 "$W/agent.log")"

work() {  # uid, seconds, busy|idle, GiB: the job's process (DRY: a sleep)
  if [ -n "${DRY:-}" ]; then as "$1" sleep "$2"; elif [ "$3" = busy ]; then as "$1" $PY "$HERE/busy.py" "$2"; else as "$1" $PY "$HERE/idle.py" "$2" "$4"; fi
}
export -f work; export DRY PY HERE

# accountd's reading of GPU 0's counter (its latest report's): the jobs' energy is counted from here.
gpu_energy() { fetch "http://$SRV/metrics" | sed -n 's/^gputokens_gpu_energy_joules{.*gpu="0".*} //p' | head -1; }
echo "JOBS_FROM=$(gpu_energy)" >> "$W/snap/energy.env"

log "phase 1: alice's job 4242 busy alone on GPU 0"
printf 'gpus=0\nuuids=%s\nuid=%s\n' "$UUID" "$UA" > "$W/jobs/4242"
if [ -n "$CG" ]; then
  bash -c "echo \$\$ > '$CG/cgroup.procs' && exec env -u SLURM_JOB_ID bash -c 'work $UA $((3 * P)) busy'" 2>>"$W/work.log" & A_PID=$!
else
  SLURM_JOB_ID=4242 bash -c "work $UA $((3 * P)) busy" 2>>"$W/work.log" & A_PID=$!
fi
PIDS+=("$A_PID")
watch_for "$P" 100; snap 1
kill -0 "$A_PID" 2>/dev/null || fail "alice's busy process ended early: $(tail -3 "$W/work.log")"

log "phase 2: bob's job 4243 idles beside it; bob's process claims 4242; job 4244 has no process in sight"
printf 'gpus=0\nuuids=%s\nuid=%s\n' "$UUID" "$UB" > "$W/jobs/4243"
printf 'gpus=0\nuuids=%s\nuid=%s\n' "$UUID" "$UB" > "$W/jobs/4244"
SLURM_JOB_ID=4243 bash -c "work $UB $((3 * P)) idle 4" 2>>"$W/work.log" & B_PID=$!; PIDS+=("$B_PID")
R_PID=
if [ "$UA" != "$UB" ]; then
  SLURM_JOB_ID=4242 bash -c "work $UB $((3 * P)) idle 2" 2>>"$W/work.log" & R_PID=$!; PIDS+=("$R_PID")
fi
watch_for "$P" 100; snap 2
for p in B_PID ${R_PID:+R_PID}; do kill -0 "${!p}" 2>/dev/null || fail "$p ended early: $(tail -3 "$W/work.log")"; done

log "phase 3: alice's job and 4244 end; bob's job holds the GPU alone"
kill "$A_PID" ${R_PID:+"$R_PID"} 2>/dev/null; rm -f "$W/jobs/4242" "$W/jobs/4244"
watch_for "$((P * 3 / 5))" 0; snap 3
echo "AFTER=$(energy | tr ' ' _)" >> "$W/snap/energy.env"; echo "SECONDS_RUN=$((SECONDS - E_T0))" >> "$W/snap/energy.env"

M_PID=
if [ -n "$MIG_UUID" ]; then
  log "phase 4: alice's job 4245 busy on MIG device $MIG_UUID of GPU $MIG_GPU (bob's job still on GPU 0)"
  printf 'gpus=0\nuuids=%s\nuid=%s\n' "$MIG_UUID" "$UA" > "$W/jobs/4245"
  SLURM_JOB_ID=4245 CUDA_VISIBLE_DEVICES=$MIG_UUID bash -c "work $UA $((2 * P)) busy" 2>>"$W/work.log" & M_PID=$!
  PIDS+=("$M_PID")
  watch_for "$P" 0; snap 4
  kill -0 "$M_PID" 2>/dev/null || fail "alice's process on the MIG device ended early: $(tail -3 "$W/work.log")"
  kill "$M_PID" 2>/dev/null; rm -f "$W/jobs/4245"
else
  log "phase 4 left out: no GPU here has MIG enabled (this check never changes a GPU's MIG mode)"
fi
grep -q '^BEFORE=n/a\|^AFTER=n/a' "$W/snap/energy.env" && echo "NOTE=nvidia-ml-py_could_not_read_the_counter" >> "$W/snap/energy.env"
log "agent: $(awk '{print "utime", $14, "stime", $15, "ticks"}' /proc/$AGENT/stat 2>/dev/null) $(grep VmRSS /proc/$AGENT/status 2>/dev/null)"
# The agent stops, so the ledger holds every report up to accountd's last reading of the counter.
kill "$AGENT" 2>/dev/null; wait "$AGENT" 2>/dev/null; sleep 1
echo "JOBS_TO=$(gpu_energy)" >> "$W/snap/energy.env"
printf 'A_PID=%s\nB_PID=%s\nR_PID=%s\nM_PID=%s\n' "$A_PID" "$B_PID" "$R_PID" "$M_PID" > "$W/snap/pids.env"
printf 'GPU=%s\nMAPPING=%s\nDRY=%s\nMIG_UUID=%s\nMIG_GPU=%s\n' "$(echo "$GPU" | tr ' ' _)" "$MAPPING" "${DRY:-}" "$MIG_UUID" "$MIG_GPU" > "$W/snap/info.env"
$PY -c 'import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)' \
  "$W/lib/ledger.sqlite" "$W/snap/ledger.sqlite" 2>>"$O/steps.txt" || fail "cannot copy the ledger"
log "pids: alice $A_PID, bob $B_PID, bob claiming 4242 $R_PID, alice on MIG ${M_PID:--}, agent $AGENT"
cleanup; PIDS=(); CG=

{ for f in agent.log serve.log work.log slurm/calls.log; do echo "=== $f (last 60 lines)"; tail -n 60 "$W/$f" 2>/dev/null; done; } > "$O/logs.txt"
$PY "$HERE/summarize.py" "$W/snap" "$O" > /dev/null 2>>"$O/steps.txt" || FAILED=1
if [ -s "$O/summary.txt" ]; then cat "$O/summary.txt"; else
  fail "summarize.py wrote no summary.txt (steps.txt says why)"
  { echo "summarize.py failed; the snapshots as read:"; for f in "$W"/snap/*.txt "$W"/snap/*.env; do echo "=== $f"; cat "$f"; done; } > "$O/summary.txt" 2>&1
fi
if [ -n "$FAILED" ]; then log "done in $((SECONDS - START)) s: FAILED (see summary.txt and steps.txt)"; else log "done in $((SECONDS - START)) s: all checks passed"; fi
[ -z "$FAILED" ]
