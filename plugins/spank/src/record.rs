//! What the job's prolog records for the node agent: which GPUs the job holds on this node, one file
//! per job (`<jobs_dir>/<jobid>`), written atomically (temp file + rename), removed by its epilog:
//!
//! ```text
//! gpus=6,7
//! uuids=GPU-1f0c...,GPU-77aa...
//! uid=1001
//! sluid=sEKNKTV3WPV500
//! ```
//!
//! `gpus` are Slurm's indices; `uuids`, in the same order, only when NVML could name them; `uid` the
//! job owner's; `sluid` the job's SLUID where Slurm has one (25.11+: the prolog's `SLURM_JOB_SLUID`),
//! by which Slurm 26.05 names the job's cgroup.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The prolog's environment variables that may hold the job's GPUs on this node, best first (22.05
/// sets all three in the prolog of batch and salloc jobs alike; `CUDA_VISIBLE_DEVICES` is the same
/// list there).
pub const GPU_VARS: [&str; 2] = ["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"];

/// GPU indices from the values of [`GPU_VARS`] (the first set one); None when the job has none.
pub fn gpus(values: &[Option<String>]) -> Option<Vec<String>> {
    let value = values.iter().flatten().map(|v| v.trim()).find(|v| !v.is_empty() && *v != "NoDevFiles")?;
    let list: Vec<String> = value.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    (!list.is_empty()).then_some(list)
}

/// The job's SLUID in the prolog's environment value `SLURM_JOB_SLUID`, when it is one.
pub fn sluid(value: Option<String>) -> Option<String> {
    gputokens::slurm::sluid::parse(&value?)
}

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

/// Writes `text` as the record of `job` in `dir` (created 0755 if missing); returns the file.
pub fn write(dir: &Path, job: u32, text: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)?;
    let path = dir.join(job.to_string());
    let tmp = dir.join(format!(".{job}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = gputokens::snapshot::create_new_private(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| path)
}

/// Removes the record of `job`; false when there was none (a CPU-only job, or another node's).
pub fn remove(dir: &Path, job: u32) -> std::io::Result<bool> {
    match std::fs::remove_file(dir.join(job.to_string())) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_first_set_list() {
        assert_eq!(gpus(&[None, Some("".into()), Some("6,7".into())]), Some(vec!["6".into(), "7".into()]));
        assert_eq!(gpus(&[Some("NoDevFiles".into())]), None);
        assert_eq!(gpus(&[None]), None);
    }

    #[test]
    fn writes_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("a/jobs");
        let path = write(&jobs, 42, "gpus=6,7\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "gpus=6,7\n");
        write(&jobs, 42, "gpus=1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "gpus=1\n");
        assert_eq!(std::fs::read_dir(&jobs).unwrap().count(), 1, "no temp file left");
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
        assert_eq!(sluid(Some("sEKNKTV3WPV500".into())).as_deref(), Some("sEKNKTV3WPV500"));
        assert_eq!(sluid(Some("x\nuid=0".into())), None, "only a SLUID goes into the record");
    }

    #[test]
    fn removal_is_quiet_when_there_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 7, "gpus=0\n").unwrap();
        assert!(remove(dir.path(), 7).unwrap());
        assert!(!dir.path().join("7").exists());
        assert!(!remove(dir.path(), 7).unwrap(), "already gone");
        assert!(!remove(&dir.path().join("missing"), 7).unwrap(), "no jobs dir at all");
    }
}
