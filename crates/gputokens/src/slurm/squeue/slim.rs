//! `squeue --json` read job by job: each job's object keeps only the keys [`super::queue_job`]
//! looks at and becomes a [`QueueJob`] at once. squeue prints some 130 keys per job (about 3 KB);
//! a big site's 60,000 jobs as a whole JSON tree took over 1 GB in accountd (bench/scale.sh).
//! Skipped values are checked, not stored.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::job::{queue_job, QueueJob};

/// The keys `queue_job` reads.
const READ_KEYS: [&str; 31] = [
    "account",
    "array_task_string",
    "batch_flag",
    "comment",
    "gres_detail",
    "job_id",
    "job_state",
    "node_count",
    "nodes",
    "partition",
    "pre_sus_time",
    "priority",
    "qos",
    "requeue",
    "restart_cnt",
    "sockets_per_node",
    "start_time",
    "state_reason",
    "step_id",
    "submit_time",
    "suspend_time",
    "tasks",
    "time_limit",
    "tres_alloc_str",
    "tres_per_job",
    "tres_per_node",
    "tres_per_socket",
    "tres_per_task",
    "tres_req_str",
    "user_id",
    "user_name",
];

/// The document: its `jobs` list (None when there is none); `meta`, `errors` and the rest skipped.
#[derive(Deserialize)]
pub(super) struct Document {
    pub jobs: Option<Vec<Job>>,
}

/// One job: None when it is not one `queue_job` can read (no ID or user).
pub(super) struct Job(pub Option<QueueJob>);

impl<'de> Deserialize<'de> for Job {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Job, D::Error> {
        deserializer.deserialize_map(KeptKeys)
    }
}

struct KeptKeys;

impl<'de> Visitor<'de> for KeptKeys {
    type Value = Job;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a job object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Job, A::Error> {
        let mut kept = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if READ_KEYS.contains(&key.as_str()) {
                kept.insert(key, map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Job(queue_job(&Value::Object(kept))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_jobs_past_keys_it_does_not_keep() {
        let doc: Document = serde_json::from_str(
            r#"{"meta": {"x": 1}, "jobs": [{"job_id": 7, "command": "big", "job_state": "RUNNING",
                "job_resources": {"nodes": "vm"}, "user_name": "alice", "gres_detail": ["gpu:a6000:1(IDX:0)"]},
                {"job_id": 8, "command": "no user"}]}"#,
        )
        .unwrap();
        let jobs = doc.jobs.unwrap();
        let job = jobs[0].0.as_ref().unwrap();
        assert_eq!((job.job_id.as_str(), job.user.as_str(), job.gpu_indices.as_slice()), ("7", "alice", &[0][..]));
        assert!(jobs[1].0.is_none());
    }

    #[test]
    fn no_jobs_list_is_none_and_broken_json_an_error() {
        assert!(serde_json::from_str::<Document>(r#"{"meta": {}}"#).unwrap().jobs.is_none());
        assert!(serde_json::from_str::<Document>(r#"{"jobs": [{"job_id": 7,}]}"#).is_err());
        assert!(serde_json::from_str::<Document>(r#"{"jobs": [{"job_id": 7, "command": [1, }]}"#).is_err());
    }
}
