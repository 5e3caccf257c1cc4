//! The record spank_gputokens.so's prolog writes for the node agent, one file per job
//! (`<jobs_dir>/<jobid>`), both halves of its format: [`text`] (the plugin) and [`parse`] (the agent).
//!
//! ```text
//! gpus=6,7
//! uuids=GPU-1f0c...,GPU-77aa...
//! uid=1001
//! sluid=sEKNKTV3WPV500
//! ```
//!
//! `gpus` are Slurm's indices; `uuids`, in the same order, only when NVML could name them (a MIG
//! slice's is its own `MIG-…` UUID); `uid` the job owner's; `sluid` the job's SLUID where Slurm has
//! one (25.11+), by which Slurm 26.05 names the job's cgroup.

/// The file's text: the GPUs, their UUIDs when known, the job owner's uid (the agent takes a
/// process's word for its job only from a process of that uid) and the job's SLUID (the agent maps a
/// cgroup named by it to the job).
pub fn text(gpus: &[String], uuids: Option<&[String]>, uid: Option<u32>, sluid: Option<&str>) -> String {
    let mut text = format!("gpus={}\n", gpus.join(","));
    if let Some(uuids) = uuids.filter(|u| !u.is_empty()) {
        text.push_str(&format!("uuids={}\n", uuids.join(",")));
    }
    if let Some(uid) = uid {
        text.push_str(&format!("uid={uid}\n"));
    }
    if let Some(sluid) = sluid {
        text.push_str(&format!("sluid={sluid}\n"));
    }
    text
}

/// One job's GPUs on this node, as its prolog recorded them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    pub job: String,
    /// Slurm's GPU indices.
    pub gpus: Vec<u32>,
    /// The same GPUs' UUIDs, in the same order; empty when NVML could not name them.
    pub uuids: Vec<String>,
    /// The job owner's uid (None from an older plugin).
    pub uid: Option<u32>,
    /// The job's SLUID (None before Slurm 25.11, or from an older plugin).
    pub sluid: Option<String>,
}

/// A record's text; None when it names no GPU (or is not a record at all).
pub fn parse(job: &str, text: &str) -> Option<JobRecord> {
    let value = |key: &str| text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=')).map(str::trim);
    let list = |key: &str| -> Vec<&str> {
        value(key).map(|l| l.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()).unwrap_or_default()
    };
    let gpus = list("gpus").into_iter().map(|g| g.parse().ok()).collect::<Option<Vec<u32>>>()?;
    if gpus.is_empty() {
        return None;
    }
    let uuids: Vec<String> = list("uuids").into_iter().map(str::to_owned).collect();
    // UUIDs that do not pair up with the indices say nothing reliable.
    let uuids = if uuids.len() == gpus.len() { uuids } else { Vec::new() };
    let uid = value("uid").and_then(|u| u.parse().ok());
    let sluid = value("sluid").and_then(crate::slurm::sluid::parse);
    Some(JobRecord { job: job.to_owned(), gpus, uuids, uid, sluid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_plugin_writes() {
        let r = parse("42", "gpus=6,7\nuuids=GPU-a,GPU-b\n").unwrap();
        assert_eq!(
            r,
            JobRecord {
                job: "42".into(),
                gpus: vec![6, 7],
                uuids: vec!["GPU-a".into(), "GPU-b".into()],
                uid: None,
                sluid: None
            }
        );
        assert_eq!(parse("42", "gpus=3\n").unwrap().uuids, Vec::<String>::new());
        assert_eq!(parse("42", "gpus=3\nuid=1001\n").unwrap().uid, Some(1001));
        let with_sluid = parse("42", "gpus=3\nuid=1001\nsluid=s359M8A2NFAK00\n").unwrap();
        assert_eq!(with_sluid.sluid.as_deref(), Some("s359M8A2NFAK00"));
        assert_eq!(parse("42", "gpus=3\nsluid=../job_7\n").unwrap().sluid, None, "not a SLUID");
        assert_eq!(parse("42", "gpus=3,4\nuuids=GPU-a\n").unwrap().uuids, Vec::<String>::new(), "unpaired");
        assert_eq!(parse("42", "gpus=\n"), None);
        assert_eq!(parse("42", "gpus=a,1\n"), None);
        assert_eq!(parse("42", ""), None);
    }

    #[test]
    fn uuids_only_when_known() {
        let gpus = ["6".to_string(), "7".to_string()];
        assert_eq!(text(&gpus, None, None, None), "gpus=6,7\n");
        assert_eq!(text(&gpus, Some(&[]), None, None), "gpus=6,7\n");
        let uuids = ["GPU-a".to_string(), "GPU-b".to_string()];
        assert_eq!(text(&gpus, Some(&uuids), None, None), "gpus=6,7\nuuids=GPU-a,GPU-b\n");
        assert_eq!(text(&gpus, None, Some(1001), None), "gpus=6,7\nuid=1001\n");
        assert_eq!(text(&gpus, None, Some(1001), Some("sEKNKTV3WPV500")), "gpus=6,7\nuid=1001\nsluid=sEKNKTV3WPV500\n");
    }
}
