//! One job of `squeue --json`, read from its JSON object whatever the release's shape: [`QueueJob`].

use serde_json::Value;

use crate::gpu_request::{GpuRequest, TresPer};
use crate::gpu_time::UsageRecord;
use crate::job_shape::{array_task_count, JobShape};
use crate::tres::{parse_alloc_tres, GpuAllocation, Sharing};

/// A job as squeue reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueJob {
    pub job_id: String,
    pub user: String,
    /// The owner's uid (`user_id`), as the job_submit plugin knows it.
    pub user_id: Option<u32>,
    /// When slurmctld created the job (`submit_time`; 0 when not shown); a requeued job's is when
    /// it was requeued.
    pub submit_time: i64,
    /// How often it was requeued (`restart_cnt`).
    pub restarts: u64,
    pub account: String,
    pub qos: String,
    /// RUNNING, PENDING, ...
    pub state: String,
    /// Why a pending job waits: Resources, Priority, BeginTime, ...
    pub state_reason: String,
    pub start_time: i64,
    /// The current run's SLUID (Slurm 25.11+).
    pub sluid: Option<String>,
    /// Seconds run before the last suspension (`pre_sus_time`).
    pub run_before_suspend: u64,
    /// When the job was last suspended or resumed (`suspend_time`; 0 = never).
    pub suspend_time: i64,
    pub nodes: String,
    /// How many nodes it holds (`node_count`, else one `gres_detail` entry per node, else 1).
    pub node_count: u32,
    pub partition: String,
    /// GPUs, shards and MPS units held (running jobs).
    pub alloc: GpuAllocation,
    /// A job on several nodes: the GPUs of each type it holds on each, in the order of its nodes
    /// (`gres_detail`'s entries); empty for a job on one node.
    pub gpus_by_node: Vec<std::collections::BTreeMap<String, u64>>,
    /// CPUs and memory held (running jobs: `tres_alloc_str`) or asked for (pending: `tres_req_str`).
    pub held: crate::stranding::Held,
    /// GPUs asked for (`tres_per_job`/`_node`/`_task`/`_socket`).
    pub request: GpuRequest,
    /// GPU indices held on the job's (first) node, from `gres_detail`'s `IDX:`.
    pub gpu_indices: Vec<u32>,
    /// A batch job that may be requeued (`scontrol requeue` works on it).
    pub requeueable: bool,
    /// Seconds; None = no limit.
    pub time_limit: Option<u64>,
    /// Nodes, tasks, sockets and (pending arrays) array tasks the request counts are multiplied by.
    pub shape: JobShape,
    /// Its priority (0 while it is held); None where squeue gave none.
    pub priority: Option<i64>,
    /// A pending array's tasks still to start (`array_task_string`, e.g. `3-4` or `3-9%2`); empty
    /// for any other record.
    pub pending_tasks: String,
    /// The job's comment (`--comment`; 23.02+ give `{"job": …}` beside the admin's and system's).
    pub comment: String,
}

/// Running jobs with GPUs: the same record, kept apart by name where only those are meant.
pub type RunningJob = QueueJob;

impl QueueJob {
    /// The GPU time this run segment has held up to `now`, the time squeue was read (what a charge
    /// cycle charges a running job for).
    pub fn gpu_time(&self, now: i64, sharing: Sharing) -> UsageRecord {
        UsageRecord {
            job_id: self.job_id.clone(),
            user: self.user.clone(),
            account: Some(self.account.clone()).filter(|a| !a.is_empty()),
            segment_start: self.start_time,
            sluid: self.sluid.clone(),
            milli_gpus: self.alloc.milli_by_type(crate::slurm::sacct::UNTYPED, sharing),
            elapsed: self.run_seconds(now),
            nodes: self.node_count,
            weight_permille: 1000,
            held: self.held,
            stranding: None,
            lent: None,
        }
    }

    /// Seconds this run segment has run by `now`, suspensions left out as Slurm counts them (and as
    /// sacct's ElapsedRaw does): a suspended job has run `pre_sus_time`; a resumed one that plus
    /// the time since its resume.
    pub fn run_seconds(&self, now: i64) -> u64 {
        let since = |t: i64| now.saturating_sub(t).max(0) as u64;
        // A suspend time before this segment's start belongs to an earlier run of a requeued job.
        if self.suspend_time < self.start_time || self.suspend_time == 0 {
            return since(self.start_time);
        }
        match self.state.as_str() {
            "SUSPENDED" => self.run_before_suspend,
            _ => self.run_before_suspend.saturating_add(since(self.suspend_time)),
        }
    }
}

pub(super) fn queue_job(job: &Value) -> Option<QueueJob> {
    let text = |key: &str| job.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let state = match job.get("job_state")? {
        Value::String(s) => s.clone(),
        Value::Array(list) => list.first().and_then(Value::as_str).unwrap_or_default().to_string(),
        _ => String::new(),
    };
    let gres_detail: Vec<&str> = job
        .get("gres_detail")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let tres = |key: &str| job.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
    let request = GpuRequest::parse(&TresPer {
        job: tres("tres_per_job"),
        node: tres("tres_per_node"),
        task: tres("tres_per_task"),
        socket: tres("tres_per_socket"),
    })
    .unwrap_or_default();
    let alloc = Some(alloc_from_gres_detail(gres_detail.iter().copied()))
        .filter(|a| !a.is_empty())
        .or_else(|| parse_alloc_tres(job.get("tres_alloc_str").and_then(Value::as_str)?).ok())
        .unwrap_or_default();
    let flag = |key: &str| job.get(key).and_then(Value::as_bool).unwrap_or(false);
    let count = |key: &str| job.get(key).and_then(number).filter(|n| *n > 0).map_or(1, |n| n as u64);
    Some(QueueJob {
        job_id: number(job.get("job_id")?)?.to_string(),
        user: job.get("user_name").and_then(Value::as_str)?.to_string(),
        user_id: job.get("user_id").and_then(number).and_then(|n| u32::try_from(n).ok()),
        submit_time: job.get("submit_time").and_then(number).unwrap_or(0),
        restarts: job.get("restart_cnt").and_then(number).map_or(0, |n| n.max(0) as u64),
        account: text("account"),
        qos: text("qos"),
        state_reason: text("state_reason"),
        start_time: job.get("start_time").and_then(number).unwrap_or(0),
        // 26.05: `"step_id": {"job_id": …, "sluid": "s…", "step_id": "entire"}`.
        sluid: job.pointer("/step_id/sluid").and_then(Value::as_str).and_then(crate::slurm::sluid::parse),
        run_before_suspend: job.get("pre_sus_time").and_then(number).map_or(0, |n| n.max(0) as u64),
        suspend_time: job.get("suspend_time").and_then(number).unwrap_or(0),
        nodes: text("nodes"),
        node_count: job
            .get("node_count")
            .and_then(number)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
            .unwrap_or(gres_detail.len().max(1) as u32),
        partition: text("partition"),
        alloc,
        gpus_by_node: match gres_detail.len() {
            0 | 1 => Vec::new(),
            _ => gres_detail.iter().map(|d| alloc_from_gres_detail(std::iter::once(*d)).gpus.typed).collect(),
        },
        // What a running job holds; what a pending one asks for (`tres_req_str`).
        held: ["tres_alloc_str", "tres_req_str"]
            .iter()
            .find_map(|key| job.get(*key).and_then(Value::as_str).filter(|t| !t.is_empty()))
            .map(crate::stranding::Held::from_tres)
            .unwrap_or_default(),
        request,
        gpu_indices: gres_detail.first().map(|d| gpu_indices(d)).unwrap_or_default(),
        requeueable: flag("batch_flag") && flag("requeue"),
        priority: job.get("priority").and_then(number),
        pending_tasks: text("array_task_string"),
        comment: match job.get("comment") {
            Some(Value::Object(o)) => o.get("job").and_then(Value::as_str).unwrap_or_default().to_string(),
            _ => text("comment"),
        },
        time_limit: job.get("time_limit").and_then(minutes).map(|m| m.saturating_mul(60)),
        shape: JobShape {
            nodes: count("node_count"),
            tasks: count("tasks"),
            sockets_per_node: count("sockets_per_node"),
            // A pending array is one record for all its tasks; a running task is a record of its own.
            array_tasks: array_task_count(&text("array_task_string")).filter(|_| state == "PENDING").unwrap_or(1),
        },
        state,
    })
}

/// A time limit in minutes: a plain number, or 23.02+'s `{"set", "infinite", "number"}`; None for
/// none or infinite (22.05 prints null for both).
fn minutes(v: &Value) -> Option<u64> {
    if let Value::Object(o) = v {
        if o.get("infinite").and_then(Value::as_bool) == Some(true) {
            return None;
        }
    }
    number(v).filter(|m| *m > 0 && *m < u32::MAX as i64 - 1).map(|m| m as u64)
}

/// GPU indices in one node's `gres_detail`, e.g. `gpu:a6000:2(IDX:0-1,3)` → 0, 1, 3.
pub fn gpu_indices(detail: &str) -> Vec<u32> {
    let mut indices = Vec::new();
    for entry in split_outside_parens(detail).into_iter().filter(|e| e.starts_with("gpu:")) {
        let Some(list) = entry.split("(IDX:").nth(1).map(|l| l.trim_end_matches(')')) else { continue };
        for part in list.split(',').filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => {
                    if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                        indices.extend(a..=b);
                    }
                }
                None => indices.extend(part.parse::<u32>().ok()),
            }
        }
    }
    indices
}

/// A plain number, or 23.02+'s `{"set": true, "number": N}`.
fn number(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => o.get("number")?.as_i64(),
        _ => None,
    }
}

/// Sums `gpu:TYPE:N(IDX:..)`, `gpu:N(IDX:..)`, `shard:TYPE:N(..)` and `mps:..` entries over all
/// nodes (also the form of sinfo's `%G`).
pub fn alloc_from_gres_detail<'a>(per_node: impl Iterator<Item = &'a str>) -> GpuAllocation {
    let mut alloc = GpuAllocation::default();
    for node in per_node {
        for entry in split_outside_parens(node) {
            let spec = entry.split('(').next().unwrap_or_default();
            let parts: Vec<&str> = spec.split(':').collect();
            let (name, gpu_type, count) = match parts.as_slice() {
                [name, count] => (*name, None, *count),
                [name, gpu_type, count, ..] => (*name, Some(*gpu_type), *count),
                _ => continue,
            };
            if let Ok(n) = count.parse::<u64>() {
                if n > 0 {
                    alloc.add(name, gpu_type, n);
                }
            }
        }
    }
    // Each entry here is GPUs of its own (a node whose GRES has no type beside one that has), where
    // a TRES string's untyped count is the total of the typed ones and the rest.
    for counts in [&mut alloc.gpus, &mut alloc.shards, &mut alloc.mps] {
        counts.untyped = counts.typed.values().fold(counts.untyped, |sum, n| sum.saturating_add(*n));
    }
    alloc
}

fn split_outside_parens(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}
