#!/usr/bin/env python3
"""Generates a big site for bench/scale.sh, in the installed Slurm's own formats.

Every job is a copy of a real job that Slurm 22.05 printed (crates/gputokens/tests/data/
squeue-22.05.json, recorded by tests/slurm-releases/capture.sh) with its ID, user, GPUs and times
changed, so the reader sees every field a site's squeue prints. Writes into OUT_DIR:
  squeue.json   `squeue --json`: RUNNING and PENDING GPU jobs
  sacct.txt     `sacct -X -D -a -P -o <accountd's fields>`: one ended GPU job per user, and the running jobs
  users.txt     the user names, one per line
With ACCOUNTS > 0, also Slurm accounts a00000…: each user in two of them (the first is the
account of the user's jobs and their default), each account's first member its coordinator:
  assoc.txt     `sacctmgr -n -P show assoc format=Account,ParentName,User`
  coords.txt    `sacctmgr -n -P show account withcoord format=Account,Coordinators`
  defaults.txt  `sacctmgr -n -P show user format=User,DefaultAccount`
  pools.toml    `accountd admin account import`: a pool for every account

usage: scale_data.py OUT_DIR USERS PENDING RUNNING NOW [ACCOUNTS]
"""
import copy
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "crates", "gputokens", "tests", "data", "squeue-22.05.json")
TYPES = [("rtx2080", 4), ("rtx3090", 2), ("a6000", 2)]
NODES_PER_RACK = 500


def user(i):
    return f"u{i:06d}"


def account_of(i, accounts):
    return f"a{i % accounts:05d}" if accounts else "gputokens"


def node(i):
    return f"gpu{i % NODES_PER_RACK:04d}"


def main():
    out, users, pending, running, now = sys.argv[1], *map(int, sys.argv[2:6])
    accounts = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    sample = json.load(open(SAMPLE))
    running_template = next(j for j in sample["jobs"] if j["job_state"] == "RUNNING" and j["tres_per_node"])
    pending_template = next(j for j in sample["jobs"] if j["job_state"] == "PENDING" and j["tres_per_node"])

    jobs = []
    sacct = []
    job_id = 1_000_000
    for n in range(running):
        job_id += 1
        gpu, _ = TYPES[n % len(TYPES)]
        count = 1 + n % 2
        j = copy.deepcopy(running_template)
        name = user(n % users)
        j.update(job_id=job_id, user_name=name, account=account_of(n % users, accounts), user_id=100_000 + n % users, nodes=node(n),
                 batch_host=node(n), start_time=now - 600 - n % 3600, submit_time=now - 7200,
                 tres_per_node=f"gres:gpu:{gpu}:{count}",
                 tres_req_str=f"cpu=1,mem=8000M,node=1,billing=1,gres/gpu={count},gres/gpu:{gpu}={count}",
                 tres_alloc_str=f"cpu=1,node=1,billing=1,gres/gpu={count},gres/gpu:{gpu}={count}",
                 gres_detail=[f"gpu:{gpu}:{count}(IDX:0-{count - 1})"])
        jobs.append(j)
        sacct.append(f"{job_id}|{name}|{account_of(n % users, accounts)}|billing=1,cpu=1,gres/gpu:{gpu}={count},gres/gpu={count},node=1|"
                     f"{now - j['start_time']}|{j['start_time']}|RUNNING|{node(n)}")
    for n in range(pending):
        job_id += 1
        gpu, _ = TYPES[(n // 7) % len(TYPES)]
        count = 1 + n % 4
        j = copy.deepcopy(pending_template)
        name = user((n * 7919) % users)
        j.update(job_id=job_id, user_name=name, account=account_of((n * 7919) % users, accounts), user_id=100_000 + (n * 7919) % users, submit_time=now - n % 7200,
                 tres_per_node=f"gres:gpu:{gpu}:{count}",
                 tres_req_str=f"cpu=1,mem=8000M,node=1,billing=1,gres/gpu={count},gres/gpu:{gpu}={count}")
        jobs.append(j)
    for n in range(users):
        job_id += 1
        gpu, _ = TYPES[n % len(TYPES)]
        elapsed = 60 + n % 7200
        # Every 100th user ran 8 a6000 for 4 h (128 tokens): in debt, a debtor for preemption to weigh.
        gpu, count, elapsed = ("a6000", 8, 4 * 3600) if n % 100 == 0 else (gpu, 1, elapsed)
        sacct.append(f"{job_id}|{user(n)}|{account_of(n, accounts)}|billing=1,cpu=1,gres/gpu:{gpu}={count},gres/gpu={count},node=1|{elapsed}|"
                     f"{now - 1800 - elapsed}|COMPLETED|{node(n)}")

    sample["jobs"] = jobs
    with open(os.path.join(out, "squeue.json"), "w") as f:
        json.dump(sample, f, indent=2)
    with open(os.path.join(out, "sacct.txt"), "w") as f:
        f.write("JobIDRaw|User|Account|AllocTRES|ElapsedRaw|Start|State|NodeList\n")
        f.write("\n".join(sacct) + "\n")
    with open(os.path.join(out, "users.txt"), "w") as f:
        f.write("\n".join(user(n) for n in range(users)) + "\n")
    if accounts:
        write_accounts(out, users, accounts)


def write_accounts(out, users, accounts):
    with open(os.path.join(out, "assoc.txt"), "w") as f:
        f.write("".join(f"a{a:05d}|root|\n" for a in range(accounts)))
        for n in range(users):
            f.write(f"{account_of(n, accounts)}||{user(n)}\n{account_of(n + 1, accounts)}||{user(n)}\n")
    with open(os.path.join(out, "coords.txt"), "w") as f:
        f.write("".join(f"a{a:05d}|{user(a)}\n" for a in range(accounts)))
    with open(os.path.join(out, "defaults.txt"), "w") as f:
        f.write("".join(f"{user(n)}|{account_of(n, accounts)}\n" for n in range(users)))
    with open(os.path.join(out, "pools.toml"), "w") as f:
        f.write("".join(f"[a{a:05d}]\ninitial = 1000\nmonthly = 100\nuser_limit = 50\n" for a in range(accounts)))


if __name__ == "__main__":
    main()
