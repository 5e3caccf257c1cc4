"""summary.txt of tests/gpu-real/run.sh: what the agent and accountd saw per job beside nvidia-smi, and
the checks of issue 37 on a shared GPU. Reads the snapshots run.sh left in SNAP; exits 1 when a check
fails (or its figure is missing), so the run fails loudly with the table still written."""
import os, re, sqlite3, sys

SNAP, OUT = sys.argv[1], sys.argv[2]
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')


def read(name):
    try:
        with open(os.path.join(SNAP, name)) as f:
            return f.read()
    except OSError:
        return ""


def metrics(name):
    """{(metric, frozenset(labels)): value} of a /metrics snapshot."""
    out = {}
    for line in read(name).splitlines():
        m = LINE.match(line.strip())
        if not m or line.startswith("#"):
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        try:
            out[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return out


def get(ms, name, **labels):
    want = set(labels.items())
    for (n, ls), v in ms.items():
        if n == name and want <= set(ls):
            return v
    return None


def env(name):
    return dict(l.split("=", 1) for l in read(name).split() if "=" in l)


def apps(phase):
    """pid -> MiB from nvidia-smi --query-compute-apps (or, DRY, the fake's state)."""
    out = {}
    for line in read(f"apps-{phase}.csv").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            out[parts[0]] = float(re.sub(r"[^0-9.]", "", parts[1]) or 0)
    return out


def pmon(phase):
    """pid -> SM % from nvidia-smi pmon -s um."""
    cols, out = [], {}
    for line in read(f"pmon-{phase}.txt").splitlines():
        if line.startswith("# gpu") or line.startswith("#gpu"):
            cols = line.lstrip("#").split()
        elif cols and not line.startswith("#"):
            vals = line.split()
            row = dict(zip(cols, vals))
            if row.get("pid", "-").isdigit():
                out[row["pid"]] = row.get("sm", "-")
    return out


def fmt(v, unit=""):
    if v is None:
        return "-"
    return f"{v:.0f}{unit}" if abs(v - round(v)) < 0.05 or abs(v) >= 100 else f"{v:.1f}{unit}"


pids = env("pids.env")
info = env("info.env")
owner = {"4242": ("alice", pids.get("A_PID")), "4243": ("bob", pids.get("B_PID")), "4244": ("bob", None),
         "4245": ("alice", pids.get("M_PID"))}
what = {"4242": "alice busy", "4243": "bob idle", "4244": "bob, processes unseen", "4245": "alice busy on a MIG device"}
rows, checks = [], []


def check(ok, text):
    checks.append(("PASS" if ok else "FAIL") + ": " + text)


MIB = 1 << 20
header = ("phase", "job", "what", "agent %", "accountd %", "measured", "idle", "agent MiB", "smi MiB (own)", "pmon SM (own)")
for phase in ("1", "2", "3", "4"):
    ag, ac, ap, pm = metrics(f"agent-{phase}.txt"), metrics(f"accountd-{phase}.txt"), apps(phase), pmon(phase)
    for job in ("4242", "4243", "4244", "4245"):
        if get(ag, "gputokens_agent_job_gpus", job=job) is None and get(ac, "gputokens_job_gpu_memory_bytes", job=job) is None:
            continue
        user, pid = owner[job]
        mem = get(ag, "gputokens_agent_job_gpu_memory_bytes", job=job)
        rows.append((phase, job, what[job],
                     fmt(get(ag, "gputokens_agent_job_gpu_utilization_percent", job=job)),
                     fmt(get(ac, "gputokens_job_gpu_utilization_percent", job=job)),
                     fmt(get(ac, "gputokens_job_gpu_measured", job=job)),
                     fmt(get(ac, "gputokens_job_idle", job=job)),
                     fmt(mem / MIB if mem is not None else None),
                     fmt(ap.get(pid)) if pid else "-",
                     pm.get(pid, "-") if pid else "-"))
    r = pids.get("R_PID")
    if phase == "2" and r:
        rows.append((phase, "-", "bob's process claiming 4242", "-", "-", "-", "-", "(none)", fmt(ap.get(r)), pm.get(r, "-")))

ag2, ac2, ac3, ap2 = metrics("agent-2.txt"), metrics("accountd-2.txt"), metrics("accountd-3.txt"), apps("2")
u = lambda ms, job: get(ms, "gputokens_job_gpu_utilization_percent", job=job)
busy, idle = u(ac2, "4242"), u(ac2, "4243")
check(busy is not None and busy >= 50, f"alice's busy job reads busy beside bob's: {fmt(busy)} % (>= 50)")
check(idle is not None and idle < 5, f"bob's idle job reads idle beside alice's busy one: {fmt(idle)} % (< 5), not the GPU's")
check(get(ac2, "gputokens_job_idle", job="4243") == 1, "bob's job is flagged idle after idle_window")
check(get(ac2, "gputokens_job_idle", job="4242") == 0, "alice's job is not flagged idle")
check(get(ac2, "gputokens_job_gpu_measured", job="4244") == 0 and u(ac2, "4244") is None
      and get(ac2, "gputokens_job_idle", job="4244") == 0, "job 4244 (no processes in sight on the shared GPU) is unmeasured, not idle")
a_mem = get(ag2, "gputokens_agent_job_gpu_memory_bytes", job="4242")
b_mem = get(ag2, "gputokens_agent_job_gpu_memory_bytes", job="4243")
own = lambda k: ap2.get(pids.get(k) or "", 0.0)
if not pids.get("R_PID"):
    checks.append("SKIP: the claimant (alice and bob ran as one uid: see steps.txt)")
elif ap2 and pids.get("R_PID") in ap2:
    ok = a_mem is not None and b_mem is not None and abs(a_mem / MIB - own("A_PID")) <= 2 and abs(b_mem / MIB - own("B_PID")) <= 2
    check(ok, f"the claimant's {fmt(own('R_PID'))} MiB went to neither job: 4242 {fmt((a_mem or 0) / MIB)} MiB "
              f"(alice's process {fmt(own('A_PID'))}), 4243 {fmt((b_mem or 0) / MIB)} MiB (bob's {fmt(own('B_PID'))})")
else:
    check(False, "the claimant's memory: nvidia-smi did not list the claimant's process")
alone = u(ac3, "4243")
check(alone is not None and alone < 5 and get(ac3, "gputokens_job_idle", job="4243") == 1,
      f"bob's job alone on the GPU (its whole utilization): {fmt(alone)} %, still idle")

# Energy: the agent's counter (its first and last sample) beside nvidia-ml-py's, read around the run.
e0, e1 = (get(metrics(f"agent-{p}.txt"), "gputokens_agent_gpu_energy_joules", gpu="0") for p in ("0", "3"))
energy = env("energy.env")
seconds = float(energy.get("SECONDS_RUN", "0") or 0)
ref = None
try:
    ref = (float(energy["AFTER"]) - float(energy["BEFORE"])) / 1000
except (KeyError, ValueError):
    pass
agent_delta = e1 - e0 if e0 is not None and e1 is not None else None
check(agent_delta is not None and agent_delta > 0, f"the agent's energy counter rose: {fmt(agent_delta)} J")
srv = get(ac3, "gputokens_gpu_energy_joules", gpu="0")
check(srv is not None and e1 is not None and abs(srv - e1) <= max(1.0, 0.1 * (agent_delta or 0)),
      f"accountd shows the agent's energy reading: {fmt(srv)} J")

ledger = {}
try:
    db = sqlite3.connect(f"file:{os.path.join(SNAP, 'ledger.sqlite')}?mode=ro", uri=True)
    for job, samples, util_sum, idle_samples in db.execute(
            "SELECT job_id, samples, util_sum, idle_samples FROM job_utilization ORDER BY job_id"):
        ledger[job] = (samples, util_sum, idle_samples)
except Exception as e:  # the table, or the copy, is missing: the checks below say so
    ledger["error"] = str(e)
# Energy per job: the ledger's sum against accountd's readings of the counter from just before the
# first job to its last report; on the shared GPU (phase 2) alice's busy job gets most of it.
jobs_energy = None
try:
    jobs_energy = {job: joules for job, joules in db.execute("SELECT job_id, SUM(joules) FROM job_energy GROUP BY job_id")}
except Exception as e:
    ledger["energy error"] = str(e)
try:
    gpu_rise = float(energy["JOBS_TO"]) - float(energy["JOBS_FROM"])
except (KeyError, ValueError):
    gpu_rise = None
summed = sum(jobs_energy.values()) if jobs_energy else None
# A step is split by the mean of its jobs' parts at its two ends: of the step in which alice's job
# began (the GPU had no job before it), half is nobody's. At most half of one 2 s report interval at
# the GPU's highest power read is short, besides 3 %.
top_power = max((get(m, "gputokens_agent_gpu_power_watts", gpu="0") or 0) for m in (metrics("agent-1.txt"), ag2))
first_half_step = 0.5 * 2 * top_power
check(summed is not None and gpu_rise is not None and gpu_rise > 0
      and -0.03 * gpu_rise <= gpu_rise - summed <= 0.03 * gpu_rise + first_half_step,
      f"the jobs' energy in the ledger adds up to the GPU's rise while they ran: {fmt(summed)} J of {fmt(gpu_rise)} J "
      f"(within 3 %, and half the first step: {fmt(first_half_step)} J)")
ac1 = metrics("accountd-1.txt")
phase2 = {job: (get(ac2, "gputokens_job_gpu_energy_joules_total", job=job) or 0)
          - (get(ac1, "gputokens_job_gpu_energy_joules_total", job=job) or 0) for job in ("4242", "4243", "4244")}
check(phase2["4242"] > 0.5 * sum(phase2.values()),
      "on the shared GPU alice's busy job got most of its energy: "
      + ", ".join(f"{job} {fmt(joules)} J" for job, joules in phase2.items()))

s4 = ledger.get("4244")
check(s4 is not None and abs(s4[1] / max(s4[0], 1) - 100) < 0.01 and s4[2] == 0,
      "the ledger counts unmeasured 4244 as its allocation (100 %) and never idle")
s3, s2 = ledger.get("4243"), ledger.get("4242")
check(s3 is not None and s3[2] > 0 and s2 is not None and s2[2] == 0, "idle samples in the ledger: bob's job, not alice's")

# MIG (phase 4, where a GPU has MIG enabled): the job on a MIG device is found by the device's UUID,
# its memory is its process's there, its utilization GPM's (a busy process) or none (no GPM: an
# A100), never the GPU's figure; no energy (NVML counts it per GPU only).
if info.get("MIG_UUID"):
    ag4, ac4, ap4 = metrics("agent-4.txt"), metrics("accountd-4.txt"), apps("4")
    mig = f"MIG device {info['MIG_UUID']} of GPU {info.get('MIG_GPU', '?')}"
    check(get(ag4, "gputokens_agent_job_gpus", job="4245") == 1, f"the agent finds alice's job 4245 on {mig}")
    m_mem, m_pid = get(ag4, "gputokens_agent_job_gpu_memory_bytes", job="4245"), pids.get("M_PID") or ""
    if m_pid in ap4:
        check(m_mem is not None and abs(m_mem / MIB - ap4[m_pid]) <= 2,
              f"4245's memory is its process's on the MIG device: {fmt((m_mem or 0) / MIB)} MiB (nvidia-smi {fmt(ap4[m_pid])})")
    else:
        checks.append("SKIP: 4245's memory (nvidia-smi did not list its process)")
    m_util, m_measured = get(ag4, "gputokens_agent_job_gpu_utilization_percent", job="4245"), get(ac4, "gputokens_job_gpu_measured", job="4245")
    check((m_measured == 1 and m_util is not None and m_util >= 50) or (m_measured in (0, None) and m_util is None),
          f"4245 is measured by GPM and busy ({fmt(m_util)} %) or unmeasured (no GPM): never the GPU's figure")
    check(get(ac4, "gputokens_job_idle", job="4245") in (0, None), "4245 is not flagged idle")
    check(not (jobs_energy or {}).get("4245"), "no energy for the job on a MIG device (NVML counts it per GPU)")
else:
    checks.append("SKIP: MIG (no GPU here has MIG enabled; this check never changes a GPU's MIG mode)")

width = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
table = "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, width)) for r in [header] + rows)
gpu_lines = []
for phase in ("1", "2", "3"):
    ag = metrics(f"agent-{phase}.txt")
    gpu_lines.append(f"phase {phase}: agent GPU 0 {fmt(get(ag, 'gputokens_agent_gpu_utilization_percent', gpu='0'))} %, "
                     f"{fmt(get(ag, 'gputokens_agent_gpu_power_watts', gpu='0'))} W; nvidia-smi: "
                     + (read(f"gpu-{phase}.csv").strip().replace("\n", " | ") or "-"))
reference = "the fake's counter" if info.get("DRY") else "nvidia-ml-py"
energy_line = (f"energy over the run ({seconds:.0f} s): agent {fmt(agent_delta)} J, accountd's last {fmt(srv)} J total; "
               f"{reference} {fmt(ref)} J" + (f" (mean {ref / seconds:.0f} W)" if ref and seconds else "")
               + (f"; {energy['NOTE']}" if energy.get("NOTE") else ""))
lines = [f"issue 37 real-GPU check: {info.get('GPU', '?').replace('_', ' ')}  ({'DRY: fake libnvidia-ml' if info.get('DRY') else 'real libnvidia-ml'}; "
         f"alice's job mapped by {info.get('MAPPING', '?')})", "",
         *[c for c in checks if c.startswith("FAIL")], "", table, "", *gpu_lines, "",
         energy_line,
         "ledger energy (job: joules): " + "; ".join(f"{j}: {v}" for j, v in sorted((jobs_energy or {}).items())),
         "ledger (job: samples, mean %, idle samples): "
         + "; ".join(f"{j}: {v[0]}, {v[1] / max(v[0], 1):.1f}, {v[2]}" if isinstance(v, tuple) else f"{j}: {v}" for j, v in ledger.items()),
         "MIG: " + read("mig.txt").strip().replace("\n", " | "), "", *checks]
with open(os.path.join(OUT, "summary.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if any(c.startswith("FAIL") for c in checks) else 0)
