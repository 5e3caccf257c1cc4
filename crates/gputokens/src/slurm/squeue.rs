//! Jobs from `squeue --json` (22.05's OpenAPI 0.0.38 and the later shapes, where states are
//! lists and times are `{"set": true, "number": N}`). GPUs come from `gres_detail` (one entry per
//! node, e.g. `gpu:a6000:2(IDX:0,2)`), since 22.05 leaves them out of `tres_alloc_str` unless
//! AccountingStorageTRES lists them; `tres_alloc_str` is the fallback.

use serde_json::Value;

use crate::gpu_time::UsageRecord;
mod slim;
use crate::gpu_request::{GpuRequest, TresPer};
use crate::job_shape::{array_task_count, JobShape};
use crate::tres::{parse_alloc_tres, GpuAllocation, Sharing};

/// A job as squeue reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueJob {
    pub job_id: String,
    pub user: String,
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
    pub partition: String,
    /// GPUs, shards and MPS units held (running jobs).
    pub alloc: GpuAllocation,
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
            segment_start: self.start_time,
            sluid: self.sluid.clone(),
            milli_gpus: self.alloc.milli_by_type(super::sacct::UNTYPED, sharing),
            elapsed: self.run_seconds(now),
            weight_permille: 1000,
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

#[derive(Debug, thiserror::Error)]
pub enum SqueueError {
    #[error("squeue --json output is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("squeue --json output has no \"jobs\" list")]
    NoJobs,
}

/// Jobs that hold GPUs: RUNNING, and SUSPENDED (they keep their GPUs, and what they ran before
/// the suspension is theirs to pay).
pub fn running_gpu_jobs(json: &str) -> Result<Vec<RunningJob>, SqueueError> {
    let holds = |j: &QueueJob| matches!(j.state.as_str(), "RUNNING" | "SUSPENDED") && !j.alloc.is_empty();
    Ok(queue(json)?.into_iter().filter(holds).collect())
}

/// Every job squeue lists.
pub fn queue(json: &str) -> Result<Vec<QueueJob>, SqueueError> {
    let doc: slim::Document = serde_json::from_str(json)?;
    let jobs = doc.jobs.ok_or(SqueueError::NoJobs)?;
    Ok(jobs.into_iter().filter_map(|job| job.0).collect())
}

fn queue_job(job: &Value) -> Option<QueueJob> {
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
        account: text("account"),
        qos: text("qos"),
        state_reason: text("state_reason"),
        start_time: job.get("start_time").and_then(number).unwrap_or(0),
        // 26.05: `"step_id": {"job_id": …, "sluid": "s…", "step_id": "entire"}`.
        sluid: job.pointer("/step_id/sluid").and_then(Value::as_str).and_then(super::sluid::parse),
        run_before_suspend: job.get("pre_sus_time").and_then(number).map_or(0, |n| n.max(0) as u64),
        suspend_time: job.get("suspend_time").and_then(number).unwrap_or(0),
        nodes: text("nodes"),
        partition: text("partition"),
        alloc,
        request,
        gpu_indices: gres_detail.first().map(|d| gpu_indices(d)).unwrap_or_default(),
        requeueable: flag("batch_flag") && flag("requeue"),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn gres_detail_forms() {
        let milli = |detail: &[&str]| alloc_from_gres_detail(detail.iter().copied()).milli_by_type("gpu", SHARDS_8);
        let g = milli(&["gpu:rtx2080:1(IDX:1),gpu:rtx3090:0(IDX:),gpu:a6000:2(IDX:6,7)"]);
        assert_eq!(g, BTreeMap::from([("a6000".into(), 2000), ("rtx2080".into(), 1000)]));
        let g = milli(&["gpu:2(IDX:0-1)", "gpu:A6000:1(IDX:3)"]);
        assert_eq!(g, BTreeMap::from([("a6000".into(), 1000)]), "typed entries win over untyped");
        assert_eq!(milli(&["shard:a6000:2(2/8,0/8)"]), BTreeMap::from([("a6000".into(), 250)]));
    }

    const SHARDS_8: Sharing = Sharing { shards_per_gpu: 8, mps_per_gpu: 100 };

    #[test]
    fn parses_2205_and_later_shapes() {
        let old = r#"{"jobs":[
            {"job_id":7,"user_name":"alice","job_state":"RUNNING","start_time":1000,"nodes":"n1","partition":"gpu",
             "gres_detail":["gpu:a6000:1(IDX:6)"],"tres_alloc_str":"cpu=1,node=1"},
            {"job_id":8,"user_name":"bob","job_state":"PENDING","start_time":0,"gres_detail":[]},
            {"job_id":9,"user_name":"bob","job_state":"RUNNING","start_time":1000,"gres_detail":[],
             "tres_alloc_str":"cpu=1,node=1"}]}"#;
        let jobs = running_gpu_jobs(old).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].job_id, "7");
        assert_eq!(jobs[0].gpu_time(1030, SHARDS_8).elapsed, 30);
        let new = r#"{"jobs":[{"job_id":7,"user_name":"alice","job_state":["RUNNING"],
            "start_time":{"set":true,"infinite":false,"number":1000},
            "gres_detail":[],"tres_alloc_str":"cpu=1,gres/gpu:rtx3090=2,gres/gpu=2,node=1"}]}"#;
        let jobs = running_gpu_jobs(new).unwrap();
        assert_eq!(jobs[0].gpu_time(1030, SHARDS_8).milli_gpus, BTreeMap::from([("rtx3090".into(), 2000)]));
        assert_eq!(jobs[0].start_time, 1000);
    }

    /// As 22.05 showed job 92 on the test cluster: run 3 s, suspended at 1795444371, resumed at
    /// 1795444377.
    #[test]
    fn suspended_time_is_not_run_time() {
        let job = |state: &str, suspend_time: i64, pre_sus_time: i64| {
            let json = format!(
                r#"{{"jobs":[{{"job_id":92,"user_name":"alice","job_state":"{state}","start_time":1795444368,
                "suspend_time":{suspend_time},"pre_sus_time":{pre_sus_time},"gres_detail":["gpu:a6000:1(IDX:0)"]}}]}}"#
            );
            running_gpu_jobs(&json).unwrap().remove(0)
        };
        let suspended = job("SUSPENDED", 1_795_444_371, 3);
        assert_eq!(suspended.gpu_time(1_795_444_377, SHARDS_8).elapsed, 3, "suspended: what ran before");
        let resumed = job("RUNNING", 1_795_444_377, 3);
        assert_eq!(resumed.run_seconds(1_795_444_381), 7, "3 s before, 4 s since the resume");
        let never = job("RUNNING", 0, 0);
        assert_eq!(never.run_seconds(1_795_444_381), 13);
        let earlier_run = job("RUNNING", 1_795_440_000, 50);
        assert_eq!(earlier_run.run_seconds(1_795_444_381), 13, "a suspension of an earlier run of a requeued job");
        assert_eq!(never.run_seconds(1_795_444_000), 0, "a clock behind the start counts nothing");
    }

    #[test]
    fn pending_requests_and_indices() {
        let json = r#"{"jobs":[{"job_id":11,"user_name":"bob","job_state":"PENDING","state_reason":"Resources",
            "tres_per_node":"gres:gpu:a6000:1","batch_flag":true,"requeue":true,"account":"lab","qos":"normal"}]}"#;
        let jobs = queue(json).unwrap();
        assert_eq!(jobs[0].state_reason, "Resources");
        assert_eq!(jobs[0].request.counts[0].gpu_type.as_deref(), Some("a6000"));
        assert!(jobs[0].requeueable);
        assert_eq!(gpu_indices("gpu:rtx2080:1(IDX:1),gpu:a6000:3(IDX:4-5,7)"), [1, 4, 5, 7]);
        assert!(gpu_indices("gpu:rtx3090:0(IDX:)").is_empty());
    }

    /// What each release's squeue printed for the same six jobs (tests/slurm-releases/capture.sh):
    /// four running, asking for GPUs four ways (`--gres` typed, `--gpus` typed, `--gpus-per-node`,
    /// `--gres` untyped), a pending GPU job with a 30-minute limit, a pending CPU-only job.
    pub(crate) const SAMPLES: [(&str, &str); 3] = [
        ("22.05", include_str!("../../tests/data/squeue-22.05.json")),
        ("24.11", include_str!("../../tests/data/squeue-24.11.json")),
        ("26.05", include_str!("../../tests/data/squeue-26.05.json")),
    ];

    /// The slim reader keeps every key `queue_job` reads: on each release's real output it gives
    /// what the whole JSON tree gives.
    #[test]
    fn the_slim_reader_reads_what_the_whole_tree_gives() {
        for (release, sample) in SAMPLES {
            let tree: Value = serde_json::from_str(sample).unwrap();
            let whole: Vec<QueueJob> = tree["jobs"].as_array().unwrap().iter().filter_map(queue_job).collect();
            assert_eq!(queue(sample).unwrap(), whole, "{release}");
            assert_eq!(whole.len(), 6, "{release}");
        }
    }

    #[test]
    fn every_release_reads_the_same() {
        for (release, sample) in SAMPLES {
            let held: Vec<_> = running_gpu_jobs(sample)
                .unwrap_or_else(|e| panic!("{release}: {e}"))
                .iter()
                .map(|j| (j.user.clone(), j.gpu_time(0, SHARDS_8).milli_gpus, j.gpu_indices.clone(), j.time_limit))
                .collect();
            let gpus = |t: &str, n| BTreeMap::from([(t.to_string(), n)]);
            assert_eq!(
                held,
                [
                    ("alice".into(), gpus("a6000", 1000), vec![6], None),
                    ("bob".into(), gpus("rtx3090", 2000), vec![4, 5], None),
                    ("alice".into(), gpus("rtx2080", 1000), vec![0], None),
                    ("bob".into(), gpus("rtx2080", 1000), vec![1], None),
                ],
                "{release}"
            );
            let pending: Vec<_> = queue(sample).unwrap().into_iter().filter(|j| j.state == "PENDING").collect();
            let asked: Vec<_> =
                pending.iter().flat_map(|j| &j.request.counts).map(|c| (c.gpu_type.as_deref(), c.count)).collect();
            assert_eq!(asked, [(Some("a6000"), 2)], "{release}");
            let limits: Vec<_> = pending.iter().map(|j| (j.user.as_str(), j.time_limit, j.requeueable)).collect();
            assert_eq!(limits, [("alice", Some(1800), true), ("bob", None, true)], "{release}");
            assert!(pending.iter().all(|j| j.state_reason == "Resources" || j.state_reason == "Priority"), "{release}");
        }
    }

    /// 26.05's squeue names each job's current run by its SLUID; the earlier releases do not.
    #[test]
    fn a_run_carries_its_sluid_where_squeue_gives_one() {
        for (release, sample) in SAMPLES {
            let sluids: Vec<Option<String>> = queue(sample).unwrap().into_iter().map(|j| j.sluid).collect();
            match release {
                "26.05" => {
                    assert!(
                        sluids.iter().all(|s| s.as_deref().is_some_and(super::super::sluid::is_sluid)),
                        "{sluids:?}"
                    );
                    assert_eq!(sluids[0].as_deref(), Some("s285M84TTMSX00"));
                }
                _ => assert!(sluids.iter().all(Option::is_none), "{release}: {sluids:?}"),
            }
        }
        let running = running_gpu_jobs(SAMPLES[2].1).unwrap();
        assert_eq!(running[0].gpu_time(0, SHARDS_8).sluid, running[0].sluid);
    }
}
