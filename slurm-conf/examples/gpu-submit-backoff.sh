#!/bin/bash
# Submit a GPU job the way a workflow tool should under gputokens: when the job_submit plugin refuses
# it, read the refusal's code and retry_after (the tail `[gputokens code=... retry_after=TYPE:SECONDS,...]`
# of sbatch's message, docs/workflows.md), wait that long for the job's GPU type, and try again;
# CPU jobs are never held back by it. Anything else that goes wrong is sbatch's own failure.
#
#   gpu-submit-backoff.sh [--type TYPE] [--max-wait SECONDS] [--tries N] [--once] -- SBATCH-ARGS...
#
# --type       the GPU type whose retry_after counts (else `*`, else the longest any type gives)
# --max-wait   the longest one wait (default 3600): a workflow tool polls rather than sleeps for days
# --tries      how many submissions in all (default 10)
# --once       submit once (a real submission: accepted, the job is queued); when refused, say how
#              long to wait and stop there (exit 75, EX_TEMPFAIL), for a tool that waits itself
#
# Exit: sbatch's exit status once it submitted or failed for another reason; 75 when still refused
# after --tries (or with --once); 64 on a usage error.
set -u

type=""
max_wait=3600
tries=10
once=false
while (($#)); do
  case $1 in
    --type) type=${2:?--type needs a GPU type}; shift 2 ;;
    --max-wait) max_wait=${2:?--max-wait needs seconds}; shift 2 ;;
    --tries) tries=${2:?--tries needs a number}; shift 2 ;;
    --once) once=true; shift ;;
    --) shift; break ;;
    *) echo "gpu-submit-backoff.sh: unknown option $1 (put sbatch's arguments after --)" >&2; exit 64 ;;
  esac
done
(($#)) || { echo "gpu-submit-backoff.sh: no sbatch arguments (after --)" >&2; exit 64; }
[[ $max_wait =~ ^[0-9]+$ && $tries =~ ^[1-9][0-9]*$ ]] || { echo "gpu-submit-backoff.sh: --max-wait and --tries take whole numbers" >&2; exit 64; }

# The seconds to wait from a refusal's tail: the type's own, else every type's (`*`), else the
# longest given; nothing when the tail has no retry_after (waiting does not help).
retry_after() {
  local tail=$1 list entry best=""
  list=$(sed -n 's/.*\[gputokens code=[a-z_]* retry_after=\([^] ]*\)\].*/\1/p' <<<"$tail" | tail -n 1)
  [[ -n $list ]] || return 1
  IFS=, read -ra entries <<<"$list"
  for entry in "${entries[@]}"; do
    [[ -n $type && ${entry%:*} == "$type" ]] && { echo "${entry##*:}"; return 0; }
  done
  for entry in "${entries[@]}"; do
    [[ ${entry%:*} == "*" ]] && { echo "${entry##*:}"; return 0; }
  done
  for entry in "${entries[@]}"; do
    ((${entry##*:} > ${best:-0})) && best=${entry##*:}
  done
  echo "${best:-0}"
}

for ((try = 1; try <= tries; try++)); do
  err=$(mktemp)
  sbatch "$@" 2>"$err"
  rc=$?
  message=$(cat "$err"); rm -f "$err"
  [[ -n $message ]] && printf '%s\n' "$message" >&2
  code=$(sed -n 's/.*\[gputokens code=\([a-z_]*\).*/\1/p' <<<"$message" | tail -n 1)
  # Submitted (told of a deprioritization, or nothing), or refused for a reason that is not gputokens'.
  if ((rc == 0)) || [[ -z $code ]]; then
    exit "$rc"
  fi
  if ! wait=$(retry_after "$message"); then
    echo "gpu-submit-backoff.sh: refused ($code) and waiting does not help: change the job" >&2
    exit "$rc"
  fi
  ((wait > max_wait)) && wait=$max_wait
  ((wait < 1)) && wait=1
  if $once; then
    echo "gpu-submit-backoff.sh: refused ($code): retry in ${wait}s"
    exit 75
  fi
  ((try < tries)) || break
  echo "gpu-submit-backoff.sh: refused ($code): waiting ${wait}s before try $((try + 1)) of $tries" >&2
  sleep "$wait"
done
echo "gpu-submit-backoff.sh: still refused after $tries tries" >&2
exit 75
