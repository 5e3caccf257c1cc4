#!/bin/bash
# check.sh — CI smoke check of the cluster started by tests/cluster/up.sh (run as root).
# As user alice: sbatch --gres=gpu:a6000:1 --wrap 'sleep 1'; wait (<= 60 s) for it to finish; assert that
# sacct reports it COMPLETED with gres/gpu:a6000=1 in AllocTRES.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

fail() { die "CHECK FAILED: $*"; }
TIMEOUT=${CHECK_TIMEOUT:-60}
USER_=${TEST_USERS[0]}

say "check: slurmctld answers"
timeout -k 2 "$T_PROBE" scontrol ping 2>/dev/null | grep -q 'is UP' || fail "slurmctld is not up (run tests/cluster/up.sh)"
id -u "$USER_" >/dev/null 2>&1 || fail "user $USER_ does not exist (run tests/cluster/up.sh)"

# sbatch from a directory the user can write (slurm-%j.out lands there)
dir="$LAB/jobs"
[[ -d $dir ]] || dir=/tmp
cd "$dir"
say "check: as $USER_ in $dir: sbatch --gres=gpu:a6000:1 --wrap 'sleep 1'"
out=$(bounded "$T_CALL" runuser -u "$USER_" -- sbatch --parsable --gres=gpu:a6000:1 --wrap 'sleep 1' 2>&1) \
  || fail "sbatch failed: $out"
jobid=${out%%;*}
[[ $jobid =~ ^[0-9]+$ ]] || fail "unexpected sbatch output: $out"
say "check: job $jobid submitted, waiting up to ${TIMEOUT}s for it to finish"

state=""
end=$(( $(now_ms) + TIMEOUT * 1000 ))
while (( $(now_ms) < end )); do
  state=$(timeout -k 2 "$T_PROBE" sacct -j "$jobid" -X -n -P -o State 2>/dev/null | head -n1 || true)
  case $state in
    ""|PENDING|RUNNING|REQUEUED|RESIZING|SUSPENDED|COMPLETING) sleep 0.5 ;;
    *) break ;;
  esac
done
row=$(timeout -k 2 "$T_PROBE" sacct -j "$jobid" -X -n -P -o User,State,AllocTRES 2>/dev/null | head -n1 || true)
IFS='|' read -r juser state tres <<<"$row"
say "check: sacct says user=$juser state=$state AllocTRES=$tres"

[[ $state == COMPLETED ]] || fail "job $jobid state is '${state:-<none>}', expected COMPLETED
$(scontrol show job "$jobid" 2>&1 | head -n 30)
$(cat "$dir/slurm-$jobid.out" 2>/dev/null)"
[[ $juser == "$USER_" ]] || fail "job $jobid ran as '$juser', expected $USER_"
[[ ,$tres, == *,gres/gpu:a6000=1,* ]] || fail "AllocTRES of job $jobid lacks gres/gpu:a6000=1: '$tres'"
rm -f "$dir/slurm-$jobid.out"
say "check: OK (job $jobid COMPLETED as $juser with gres/gpu:a6000=1)"
