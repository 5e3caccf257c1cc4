//! What the job's prolog records for the node agent, one file per job (`<jobs_dir>/<jobid>`) in the
//! format of [`gputokens::gpu_record`], written atomically (temp file + rename), removed by its
//! epilog: which GPUs the job holds on this node, where the prolog's environment says.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The prolog's environment variables that may hold the job's GPUs on this node, best first (22.05
/// sets all three in the prolog of batch and salloc jobs alike; `CUDA_VISIBLE_DEVICES` is the same
/// list there).
pub const GPU_VARS: [&str; 2] = ["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"];

/// GPU indices from the values of [`GPU_VARS`] (the first that is a list of indices); None when
/// the job has none.
pub fn gpus(values: &[Option<String>]) -> Option<Vec<String>> {
    let indices = |v: &&str| v.split(',').all(|s| !s.trim().is_empty() && s.trim().bytes().all(|b| b.is_ascii_digit()));
    let value = values.iter().flatten().map(|v| v.trim()).find(|v| !v.is_empty() && indices(v))?;
    let list: Vec<String> = value.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    (!list.is_empty()).then_some(list)
}

/// The GPUs' UUIDs where the prolog's environment names them itself: `CUDA_VISIBLE_DEVICES` as a
/// list of UUIDs (`GPU-…`, or a MIG device's `MIG-…`), one per GPU of `gpus`; None otherwise (then
/// NVML names them by index).
pub fn uuids_named(gpus: &[String], visible: Option<&str>) -> Option<Vec<String>> {
    let named: Vec<String> = visible?.split(',').map(|s| s.trim().to_string()).collect();
    let uuid = |s: &String| {
        (s.starts_with("GPU-") || s.starts_with("MIG-"))
            && s.len() <= 96
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'/')
    };
    (named.len() == gpus.len() && named.iter().all(uuid)).then_some(named)
}

/// The job's SLUID in the prolog's environment value `SLURM_JOB_SLUID`, when it is one.
pub fn sluid(value: Option<String>) -> Option<String> {
    gputokens::slurm::sluid::parse(&value?)
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
    fn only_a_sluid_goes_into_the_record() {
        assert_eq!(sluid(Some("sEKNKTV3WPV500".into())).as_deref(), Some("sEKNKTV3WPV500"));
        assert_eq!(sluid(Some("x\nuid=0".into())), None, "only a SLUID goes into the record");
    }

    #[test]
    fn picks_the_first_set_list() {
        assert_eq!(gpus(&[None, Some("".into()), Some("6,7".into())]), Some(vec!["6".into(), "7".into()]));
        assert_eq!(gpus(&[Some("NoDevFiles".into())]), None);
        assert_eq!(gpus(&[None]), None);
        // CUDA_VISIBLE_DEVICES of MIG devices names UUIDs, not indices.
        assert_eq!(gpus(&[None, Some("MIG-5c4f".into())]), None);
        assert_eq!(gpus(&[Some("0".into()), Some("MIG-5c4f".into())]), Some(vec!["0".into()]));
    }

    #[test]
    fn uuids_the_environment_names_pair_with_the_indices() {
        let gpus = ["3".to_string(), "4".to_string()];
        let named = uuids_named(&gpus, Some("MIG-aa11,GPU-bb22")).unwrap();
        assert_eq!(named, ["MIG-aa11", "GPU-bb22"]);
        assert_eq!(uuids_named(&gpus, Some("3,4")), None, "indices name nothing");
        assert_eq!(uuids_named(&gpus, Some("MIG-aa11")), None, "one short");
        assert_eq!(uuids_named(&gpus, Some("MIG-aa11,MIG-x\nuid=0")), None, "only a UUID's characters");
        assert_eq!(uuids_named(&gpus, None), None);
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
    fn removal_is_quiet_when_there_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 7, "gpus=0\n").unwrap();
        assert!(remove(dir.path(), 7).unwrap());
        assert!(!dir.path().join("7").exists());
        assert!(!remove(dir.path(), 7).unwrap(), "already gone");
        assert!(!remove(&dir.path().join("missing"), 7).unwrap(), "no jobs dir at all");
    }
}
