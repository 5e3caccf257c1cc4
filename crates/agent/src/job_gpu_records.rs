//! The per-job GPU records of spank_gputokens.so (written by plugins/spank/src/record.rs): each job's
//! prolog writes `<jobs_dir>/<jobid>` (`gpus=6,7` and, when NVML named them, `uuids=GPU-…,GPU-…`) and
//! its epilog removes it. `uid=` names the job's owner and, on Slurm 25.11+, `sluid=` the job's SLUID
//! (26.05 names job cgroups by it). They say which job holds a GPU even when the agent cannot see the job's
//! processes (another PID namespace, a container); a record that is gone is a job that has ended.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gputokens::file_stamp::Stamp;
pub use gputokens::gpu_record::{parse, JobRecord};

use crate::source::GpuSample;

/// Every record in `dir`, in job order. A missing directory is no records (no plugin on this node);
/// the plugin's temporary files (`.<job>.<pid>.tmp`), other names and records that vanish while read
/// (the job ended) are skipped.
pub fn read_dir(dir: &Path) -> Vec<JobRecord> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut records: Vec<JobRecord> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            parse(&name, &std::fs::read_to_string(entry.path()).ok()?)
        })
        .collect();
    records.sort_by(|a, b| (a.job.len(), &a.job).cmp(&(b.job.len(), &b.job)));
    records
}

/// [`read_dir`], again only when the directory changed: the plugin writes a record under a temporary
/// name and renames it into place, and removes it, so each change moves the directory's mtime.
#[derive(Debug, Default)]
pub struct RecordCache {
    stamp: Option<Stamp>,
    records: Vec<JobRecord>,
}

/// A change within the same tick of the file system's clock as the one before leaves the mtime as it
/// was: a directory changed this recently is read again next time (git's "racy" entries, the same way).
const SETTLED: Duration = Duration::from_secs(2);

impl RecordCache {
    pub fn read(&mut self, dir: &Path) -> &[JobRecord] {
        let stamp = Stamp::read(dir).ok();
        if stamp.is_none() || stamp != self.stamp {
            self.records = read_dir(dir);
            self.stamp = stamp.filter(|s| s.age().is_some_and(|age| age >= SETTLED));
        }
        &self.records
    }
}

/// The jobs recorded as holding each GPU of the sample and each MIG device of one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// By the GPU's index in the sample; a GPU in MIG mode holds the jobs of all its MIG devices.
    pub gpus: BTreeMap<u32, Vec<String>>,
    /// By the MIG device's UUID.
    pub slices: BTreeMap<String, Vec<String>>,
}

/// Who holds what: a recorded UUID finds its GPU, or its MIG device (and that device's GPU),
/// whatever the numbering; a GPU recorded without one is found by index.
pub fn holders(records: &[JobRecord], gpus: &[GpuSample]) -> Held {
    let mut held = Held::default();
    let add = |jobs: &mut Vec<String>, job: &String| {
        if !jobs.contains(job) {
            jobs.push(job.clone());
        }
    };
    for record in records {
        for (i, &index) in record.gpus.iter().enumerate() {
            let uuid = record.uuids.get(i);
            let slice_of = uuid.and_then(|u| gpus.iter().find(|g| g.mig.iter().any(|m| &m.uuid == u)));
            if let (Some(gpu), Some(uuid)) = (slice_of, uuid) {
                add(held.slices.entry(uuid.clone()).or_default(), &record.job);
                add(held.gpus.entry(gpu.index).or_default(), &record.job);
                continue;
            }
            // A MIG device not in the sample names no GPU: its index is Slurm's, which counts MIG
            // devices, not NVML's.
            if uuid.is_some_and(|u| u.starts_with("MIG-")) {
                continue;
            }
            let by_uuid = uuid.and_then(|uuid| gpus.iter().find(|g| g.uuid.as_deref() == Some(uuid)));
            let gpu = by_uuid.map(|g| g.index).unwrap_or(index);
            add(held.gpus.entry(gpu).or_default(), &record.job);
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, uuid: &str) -> GpuSample {
        GpuSample { uuid: Some(uuid.into()), ..GpuSample::empty(index) }
    }

    #[test]
    fn reads_records_and_skips_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("100"), "gpus=1\n").unwrap();
        std::fs::write(dir.path().join("99"), "gpus=0\nuuids=GPU-z\n").unwrap();
        std::fs::write(dir.path().join(".101.77.tmp"), "gpus=2\n").unwrap();
        std::fs::write(dir.path().join("notes"), "gpus=3\n").unwrap();
        std::fs::write(dir.path().join("102"), "garbage\n").unwrap();
        let records = read_dir(dir.path());
        let jobs: Vec<&str> = records.iter().map(|r| r.job.as_str()).collect();
        assert_eq!(jobs, ["99", "100"]);
        std::fs::remove_file(dir.path().join("99")).unwrap();
        assert_eq!(read_dir(dir.path()).len(), 1, "an ended job's record no longer counts");
        assert!(read_dir(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn uuids_win_over_indices() {
        let gpus = [gpu(0, "GPU-a"), gpu(1, "GPU-b"), gpu(2, "GPU-c")];
        let records = [
            // Slurm's index 0 is NVML's GPU 2: the UUID says so.
            JobRecord { job: "7".into(), gpus: vec![0], uuids: vec!["GPU-c".into()], uid: None, sluid: None },
            JobRecord { job: "8".into(), gpus: vec![1], uuids: vec![], uid: Some(1001), sluid: None },
            // A UUID the sample lacks (a lost GPU not yet named): the index.
            JobRecord { job: "9".into(), gpus: vec![0], uuids: vec!["GPU-gone".into()], uid: None, sluid: None },
        ];
        let held = holders(&records, &gpus).gpus;
        assert_eq!(held.get(&2), Some(&vec!["7".to_string()]));
        assert_eq!(held.get(&1), Some(&vec!["8".to_string()]));
        assert_eq!(held.get(&0), Some(&vec!["9".to_string()]));
        assert_eq!(held.len(), 3);
    }

    /// A job recorded on a MIG device holds that device and, for its faults, its GPU.
    #[test]
    fn a_mig_uuid_finds_its_slice_and_its_gpu() {
        let mut a100 = gpu(1, "GPU-a100");
        a100.mig = ["MIG-x", "MIG-y"]
            .map(|uuid| gputokens_node_report::MigSample {
                uuid: uuid.into(),
                profile: Some("3g.20gb".into()),
                memory_used_bytes: None,
                memory_total_bytes: None,
                sm_utilization_percent: None,
                jobs: vec![],
            })
            .to_vec();
        let gpus = [gpu(0, "GPU-a"), a100];
        let record = |job: &str, index: u32, uuid: &str| JobRecord {
            job: job.into(),
            gpus: vec![index],
            uuids: vec![uuid.into()],
            uid: None,
            sluid: None,
        };
        let held = holders(&[record("7", 1, "MIG-x"), record("8", 2, "MIG-y"), record("9", 0, "GPU-a")], &gpus);
        assert_eq!(held.slices.get("MIG-x"), Some(&vec!["7".to_string()]));
        assert_eq!(held.slices.get("MIG-y"), Some(&vec!["8".to_string()]));
        assert_eq!(held.gpus.get(&1), Some(&vec!["7".to_string(), "8".to_string()]));
        assert_eq!(held.gpus.get(&0), Some(&vec!["9".to_string()]));
        assert_eq!(held.gpus.len(), 2);
        // A MIG UUID the sample lacks: its index (Slurm's) is no NVML GPU's.
        let held = holders(&[record("10", 0, "MIG-gone")], &gpus);
        assert_eq!(held, Held::default());
    }

    #[test]
    fn the_cache_reads_a_settled_directory_once_and_a_changed_one_again() {
        let dir = tempfile::tempdir().unwrap();
        let put = |job: &str, gpus: &str| {
            let tmp = dir.path().join(format!(".{job}.1.tmp"));
            std::fs::write(&tmp, format!("gpus={gpus}\n")).unwrap();
            std::fs::rename(&tmp, dir.path().join(job)).unwrap();
        };
        let settle = || {
            let past = std::time::SystemTime::now() - Duration::from_secs(10);
            std::fs::File::open(dir.path()).unwrap().set_modified(past).unwrap();
        };
        let mut cache = RecordCache::default();
        put("1000", "0");
        settle();
        assert_eq!(cache.read(dir.path()).len(), 1);
        // Rewritten in place (the plugin never does): the settled directory is not read again.
        std::fs::write(dir.path().join("1000"), "gpus=5\n").unwrap();
        assert_eq!(cache.read(dir.path())[0].gpus, [0]);
        // A record renamed into place changes the directory, and so does a second within the same
        // clock tick: a directory changed this recently is read every time.
        put("1001", "1");
        assert_eq!(cache.read(dir.path()).len(), 2);
        put("1002", "2");
        assert_eq!(cache.read(dir.path()).len(), 3);
        std::fs::remove_file(dir.path().join("1001")).unwrap();
        assert_eq!(cache.read(dir.path()).len(), 2);
        assert!(cache.read(&dir.path().join("missing")).is_empty());
    }
}
