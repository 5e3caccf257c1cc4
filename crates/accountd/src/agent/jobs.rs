//! Which Slurm job a process belongs to. slurmd puts every job's processes in a cgroup whose path has a
//! `job_<id>` component (cgroup v1 and v2 alike); a process outside (e.g. started by ssh into the node
//! with `pam_slurm_adopt` off) may still carry `SLURM_JOB_ID` in its environment.

use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Each GPU process's job, read once while NVML keeps listing the process: a process does not change
/// jobs (slurmstepd moves a task into the job's cgroup before it runs the program), and reading the
/// cgroup or environ of every process every sample cost more than all the rest of a sample. A PID
/// comes back only after the kernel has handed out the others up to pid_max, so a process that left
/// the list and a new one with its PID are never confused between two samples.
#[derive(Debug, Default)]
pub struct JobCache {
    known: HashMap<u32, Option<Claim>>,
}

/// Where a process's job ID was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// slurmstepd put the process in the job's cgroup: Slurm's word.
    Cgroup,
    /// `SLURM_JOB_ID` in its environment: the process's own word, which any user can set.
    Environ,
}

/// A process's job as read from /proc.
pub type Claim = (String, Source);

/// The job a GPU process is counted for: its cgroup's; else, where spank_gputokens.so recorded the
/// jobs holding its GPU (`holders`), its environment's job only if that job holds the GPU, and
/// otherwise the GPU's sole holder. A user cannot pass their GPU work off as another user's job.
pub fn job_for_process(claim: Option<Claim>, holders: Option<&[String]>) -> Option<String> {
    let sole_holder = || match holders {
        Some([job]) => Some(job.clone()),
        _ => None,
    };
    match (claim, holders) {
        (Some((job, Source::Cgroup)), _) => Some(job),
        (Some((job, Source::Environ)), Some(held)) if !held.is_empty() && !held.contains(&job) => sole_holder(),
        (Some((job, Source::Environ)), _) => Some(job),
        (None, _) => sole_holder(),
    }
}

impl JobCache {
    /// [`job_of_pid`], read once while the process is listed.
    pub fn job_of(&mut self, proc_root: &Path, pid: u32) -> Option<Claim> {
        self.known.entry(pid).or_insert_with(|| job_of_pid(proc_root, pid)).clone()
    }

    /// Forgets the processes not in `listed` (ended, or no longer on a GPU).
    pub fn retain(&mut self, listed: &HashSet<u32>) {
        self.known.retain(|pid, _| listed.contains(pid));
    }
}

/// The job of `pid`, read from `<proc_root>/<pid>/cgroup`, else from `SLURM_JOB_ID` in its environ.
/// `None` when neither says (or the process is gone, or its environ is not readable).
pub fn job_of_pid(proc_root: &Path, pid: u32) -> Option<Claim> {
    let dir = proc_root.join(pid.to_string());
    if let Some(job) = std::fs::read_to_string(dir.join("cgroup")).ok().as_deref().and_then(job_from_cgroup) {
        return Some((job, Source::Cgroup));
    }
    std::fs::read(dir.join("environ")).ok().as_deref().and_then(job_from_environ).map(|job| (job, Source::Environ))
}

/// The job id in a `/proc/<pid>/cgroup` text: lines `hierarchy:controllers:path`.
pub fn job_from_cgroup(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .flat_map(|path| path.split('/'))
        .find_map(|part| part.strip_prefix("job_").filter(|id| is_job_id(id)))
        .map(str::to_owned)
}

/// `SLURM_JOB_ID` in a NUL-separated `/proc/<pid>/environ`.
pub fn job_from_environ(environ: &[u8]) -> Option<String> {
    environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(b"SLURM_JOB_ID="))
        .and_then(|id| std::str::from_utf8(id).ok())
        .filter(|id| is_job_id(id))
        .map(str::to_owned)
}

fn is_job_id(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_v1_and_v2() {
        let v1 = "12:pids:/slurm/uid_1000/job_4242/step_0/task_0\n4:memory:/slurm/uid_1000/job_4242/step_0\n";
        assert_eq!(job_from_cgroup(v1).as_deref(), Some("4242"));
        let v2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n";
        assert_eq!(job_from_cgroup(v2).as_deref(), Some("77"));
        assert_eq!(job_from_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"), None);
        assert_eq!(job_from_cgroup("0::/job_x/job_\n"), None);
        assert_eq!(job_from_cgroup(""), None);
    }

    #[test]
    fn an_environment_cannot_claim_another_users_gpu_job() {
        let held = |jobs: &[&str]| jobs.iter().map(|j| j.to_string()).collect::<Vec<_>>();
        let env = |j: &str| Some((j.to_string(), Source::Environ));
        let cgroup = |j: &str| Some((j.to_string(), Source::Cgroup));
        // alice's process on her own GPU (job 5) says it is bob's job 9: counted for job 5.
        assert_eq!(job_for_process(env("9"), Some(&held(&["5"]))).as_deref(), Some("5"));
        // On a shared GPU it cannot be placed: counted for no job.
        assert_eq!(job_for_process(env("9"), Some(&held(&["5", "6"]))), None);
        assert_eq!(job_for_process(env("5"), Some(&held(&["5", "6"]))).as_deref(), Some("5"));
        // Without records the environment is all there is.
        assert_eq!(job_for_process(env("9"), None).as_deref(), Some("9"));
        assert_eq!(job_for_process(env("9"), Some(&[])).as_deref(), Some("9"));
        // The cgroup is Slurm's word.
        assert_eq!(job_for_process(cgroup("9"), Some(&held(&["5"]))).as_deref(), Some("9"));
        assert_eq!(job_for_process(None, Some(&held(&["5"]))).as_deref(), Some("5"));
    }

    #[test]
    fn environ() {
        assert_eq!(job_from_environ(b"HOME=/root\0SLURM_JOB_ID=12\0X=1\0").as_deref(), Some("12"));
        assert_eq!(job_from_environ(b"SLURM_JOB_IDX=12\0SLURM_JOB_ID=\0"), None);
        assert_eq!(job_from_environ(b""), None);
    }

    fn fake_proc(pid: u32, cgroup: &str, environ: &[u8]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(pid.to_string());
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cgroup"), cgroup).unwrap();
        std::fs::write(dir.join("environ"), environ).unwrap();
        root
    }

    #[test]
    fn cgroup_wins_over_environ() {
        let root = fake_proc(7, "0::/system.slice/slurmstepd.scope/job_5/step_0\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), Some(("5".into(), Source::Cgroup)));
    }

    #[test]
    fn a_process_is_read_once_while_listed() {
        let root = fake_proc(7, "0::/system.slice/slurmstepd.scope/job_5/step_0\n", b"");
        let mut cache = JobCache::default();
        assert_eq!(cache.job_of(root.path(), 7), Some(("5".into(), Source::Cgroup)));
        std::fs::write(root.path().join("7/cgroup"), "0::/system.slice/slurmstepd.scope/job_6/step_0\n").unwrap();
        cache.retain(&HashSet::from([7]));
        assert_eq!(cache.job_of(root.path(), 7), Some(("5".into(), Source::Cgroup)), "still listed: not read again");
        // The process left the list; a process listed later under its PID is read afresh.
        cache.retain(&HashSet::new());
        assert_eq!(cache.job_of(root.path(), 7), Some(("6".into(), Source::Cgroup)));
    }

    #[test]
    fn environ_is_the_fallback() {
        let root = fake_proc(7, "0::/user.slice\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), Some(("6".into(), Source::Environ)));
        assert_eq!(job_of_pid(root.path(), 8), None, "no such process");
    }
}
