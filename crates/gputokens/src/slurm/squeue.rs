//! Jobs from `squeue --json` (22.05's OpenAPI 0.0.38 and the later shapes, where states are
//! lists and times are `{"set": true, "number": N}`). GPUs come from `gres_detail` (one entry per
//! node, e.g. `gpu:a6000:2(IDX:0,2)`), since 22.05 leaves them out of `tres_alloc_str` unless
//! AccountingStorageTRES lists them; `tres_alloc_str` is the fallback.

mod job;
mod slim;

pub use job::{alloc_from_gres_detail, gpu_indices, QueueJob, RunningJob};

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
    Ok(queue(json)?.into_iter().filter(holds_gpus).collect())
}

/// Whether `job` holds GPUs now: running (or suspended, its GPUs still its own) with GPUs allocated.
pub fn holds_gpus(job: &QueueJob) -> bool {
    matches!(job.state.as_str(), "RUNNING" | "SUSPENDED") && !job.alloc.is_empty()
}

/// Every job squeue lists.
pub fn queue(json: &str) -> Result<Vec<QueueJob>, SqueueError> {
    let doc: slim::Document = serde_json::from_str(json)?;
    let jobs = doc.jobs.ok_or(SqueueError::NoJobs)?;
    Ok(jobs.into_iter().filter_map(|job| job.0).collect())
}
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::job::queue_job;
    use super::*;
    use crate::tres::Sharing;

    #[test]
    fn gres_detail_forms() {
        let milli = |detail: &[&str]| alloc_from_gres_detail(detail.iter().copied()).milli_by_type("gpu", SHARDS_8);
        let g = milli(&["gpu:rtx2080:1(IDX:1),gpu:rtx3090:0(IDX:),gpu:a6000:2(IDX:6,7)"]);
        assert_eq!(g, BTreeMap::from([("a6000".into(), 2000), ("rtx2080".into(), 1000)]));
        let g = milli(&["gpu:2(IDX:0-1)", "gpu:A6000:1(IDX:3)"]);
        let each = BTreeMap::from([("a6000".into(), 1000), ("gpu".into(), 2000)]);
        assert_eq!(g, each, "an untyped node's GPUs beside a typed one's: all three");
        assert_eq!(milli(&["shard:a6000:2(2/8,0/8)"]), BTreeMap::from([("a6000".into(), 250)]));
    }

    const SHARDS_8: Sharing = Sharing { shards_per_gpu: 8, mps_per_gpu: 100 };

    #[test]
    fn parses_2205_and_later_shapes() {
        let old = r#"{"jobs":[
            {"job_id":7,"user_name":"alice","job_state":"RUNNING","start_time":1000,"nodes":"n1","partition":"gpu",
             "gres_detail":["gpu:a6000:1(IDX:6)"],"tres_alloc_str":"cpu=1,node=1","comment":"sweep 7"},
            {"job_id":8,"user_name":"bob","job_state":"PENDING","start_time":0,"gres_detail":[]},
            {"job_id":9,"user_name":"bob","job_state":"RUNNING","start_time":1000,"gres_detail":[],
             "tres_alloc_str":"cpu=1,node=1"}]}"#;
        let jobs = running_gpu_jobs(old).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].job_id, "7");
        assert_eq!(jobs[0].gpu_time(1030, SHARDS_8).elapsed, 30);
        assert_eq!(jobs[0].comment, "sweep 7");
        let new = r#"{"jobs":[{"job_id":7,"user_name":"alice","job_state":["RUNNING"],
            "comment":{"administrator":"","job":"sweep 8","system":""},
            "start_time":{"set":true,"infinite":false,"number":1000},
            "gres_detail":[],"tres_alloc_str":"cpu=1,gres/gpu:rtx3090=2,gres/gpu=2,node=1"}]}"#;
        let jobs = running_gpu_jobs(new).unwrap();
        assert_eq!(jobs[0].gpu_time(1030, SHARDS_8).milli_gpus, BTreeMap::from([("rtx3090".into(), 2000)]));
        assert_eq!(jobs[0].start_time, 1000);
        assert_eq!(jobs[0].comment, "sweep 8", "the user's comment, not the admin's or the system's");
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

    /// Each release gives every job's owner uid and submit time (a plain number on 22.05, a
    /// `{"set", "number"}` object later): the job_submit plugin matches its admissions by them.
    #[test]
    fn every_release_gives_each_jobs_uid_and_submit_time() {
        for (release, sample) in SAMPLES {
            let jobs = queue(sample).unwrap();
            let tree: Value = serde_json::from_str(sample).unwrap();
            for (job, raw) in jobs.iter().zip(tree["jobs"].as_array().unwrap()) {
                assert_eq!(job.user_id.map(i64::from), raw["user_id"].as_i64(), "{release}");
                let submitted = raw["submit_time"].as_i64().or_else(|| raw["submit_time"]["number"].as_i64());
                assert_eq!(Some(job.submit_time), submitted, "{release}");
                assert!(job.submit_time > 1_700_000_000, "{release}: {}", job.submit_time);
            }
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
