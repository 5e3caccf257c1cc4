#!/bin/bash
# capture.sh — record what this cluster's Slurm prints for the parsers' unit tests:
# crates/gputokens/tests/data/squeue-RELEASE.json (`squeue --json` with four running GPU jobs of
# different request forms, one pending GPU job and one CPU job) and sacct-RELEASE.txt (their records,
# as accountd reads them). Run as root on a cluster started by tests/run.sh up (or through
# `tests/slurm-releases/enter.sh RELEASE bash -c 'bash tests/run.sh up && bash tests/slurm-releases/capture.sh'`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
release=$(scontrol --version | awk '{print $2}' | cut -d. -f1,2)
data=crates/gputokens/tests/data
submit() { runuser -u "$1" -- sbatch --parsable --output=/dev/null --chdir=/tmp "${@:2}"; }

scancel -u alice; scancel -u bob
since=$(date +%Y-%m-%dT%H:%M:%S)
jobs=(
  "$(submit alice --gres=gpu:a6000:1 --wrap 'sleep 300')"
  "$(submit bob --gpus=rtx3090:2 --wrap 'sleep 300')"
  "$(submit alice --gpus-per-node=rtx2080:1 --wrap 'sleep 300')"
  "$(submit bob --gres=gpu:1 --wrap 'sleep 300')"
  "$(submit alice --gres=gpu:a6000:2 --time=30 --wrap 'sleep 300')"
  "$(submit bob --wrap 'sleep 300')"
)
for _ in $(seq 50); do
  running=$(squeue -h -t R -u alice,bob | wc -l)
  (( running >= 4 )) && break        # the CPU job waits: every job asks for all of the node's memory
  sleep 0.2
done
# Only these six jobs (22.05's squeue --json ignores -j and lists every job finished in MinJobAge);
# each job's record is kept as squeue printed it.
squeue --json | perl -MJSON::PP -0777 -e '
  my %keep = map { $_ => 1 } split /,/, shift;
  my $doc = decode_json(<STDIN>);
  $doc->{jobs} = [grep { $keep{ref $_->{job_id} ? $_->{job_id}{number} : $_->{job_id}} } @{$doc->{jobs}}];
  print JSON::PP->new->pretty->canonical->encode($doc)' "$(IFS=,; echo "${jobs[*]}")" > "$data/squeue-$release.json"
sleep 3   # let the running jobs be charged for some time
scancel "${jobs[@]}"
sleep 3
SLURM_TIME_FORMAT=%s sacct -X -D -P -a -S "$since" -j "$(IFS=,; echo "${jobs[*]}")" \
  -o JobIDRaw,User,AllocTRES,ElapsedRaw,Start,State,NodeList > "$data/sacct-$release.txt"
echo "wrote $data/squeue-$release.json and $data/sacct-$release.txt (jobs ${jobs[*]})"
