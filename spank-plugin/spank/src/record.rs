//! What slurmstepd records for the node agent: which GPUs a job holds on this node, one file per job
//! (`<jobs_dir>/<jobid>`, contents `gpus=6,7\n`), written atomically (temp file + rename).

use std::io::Write;
use std::path::{Path, PathBuf};

/// GPU indices from `SLURM_STEP_GPUS`/`SLURM_JOB_GPUS`/`CUDA_VISIBLE_DEVICES` (the first set one);
/// None when the job has none.
pub fn gpus(values: &[Option<String>]) -> Option<Vec<String>> {
    let value = values.iter().flatten().map(|v| v.trim()).find(|v| !v.is_empty() && *v != "NoDevFiles")?;
    let list: Vec<String> = value.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    (!list.is_empty()).then_some(list)
}

/// Writes `gpus=...` for `job` into `dir` (created 0755 if missing); returns the file.
pub fn write(dir: &Path, job: u32, gpus: &[String]) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)?;
    let path = dir.join(job.to_string());
    let tmp = dir.join(format!(".{job}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(format!("gpus={}\n", gpus.join(",")).as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| path)
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
        let path = write(&jobs, 42, &["6".into(), "7".into()]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "gpus=6,7\n");
        write(&jobs, 42, &["1".into()]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "gpus=1\n");
        assert_eq!(std::fs::read_dir(&jobs).unwrap().count(), 1, "no temp file left");
    }
}
