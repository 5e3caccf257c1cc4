//! Which Slurm job a process belongs to. slurmstepd puts every job's processes in a cgroup of Slurm's
//! own hierarchy: `/slurm[_<node>]/uid_<uid>/job_<id>/…` (cgroup v1) or
//! `/system.slice/[<node>_]slurmstepd.scope/job_<id>/…` (cgroup v2), which only root can make. A
//! `job_<id>` anywhere else (a user's own delegated cgroup) is nobody's word. A process outside them
//! (Slurm without cgroups, ssh into the node with `pam_slurm_adopt` off) may carry `SLURM_JOB_ID` in
//! its environment, which it sets itself: that is taken only for a job that spank_gputokens.so
//! recorded on this node as the process owner's.

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

/// A process's job as read from /proc, and the process's (real) uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub job: String,
    pub source: Source,
    pub uid: Option<u32>,
}

/// The job a GPU process is counted for: its Slurm cgroup's; else its environment's job, only if
/// spank_gputokens.so recorded that job on this node for the process's owner (`owner_of`: the
/// recorded job's uid, `Some(None)` for a record of an older plugin without one, which must then
/// hold the process's GPU); else the sole job recorded as holding its GPU (`holders`). A user cannot
/// pass their GPU work, idle GPUs or faults off as another user's job.
pub fn job_for_process(
    claim: Option<Claim>,
    holders: Option<&[String]>,
    owner_of: impl Fn(&str) -> Option<Option<u32>>,
) -> Option<String> {
    let sole_holder = || match holders {
        Some([job]) => Some(job.clone()),
        _ => None,
    };
    let Some(claim) = claim else { return sole_holder() };
    if claim.source == Source::Cgroup {
        return Some(claim.job);
    }
    let holds_its_gpu = holders.is_some_and(|held| held.contains(&claim.job));
    match owner_of(&claim.job) {
        Some(Some(owner)) if claim.uid == Some(owner) => Some(claim.job),
        Some(None) if holds_its_gpu => Some(claim.job),
        _ => sole_holder(),
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

/// The job of `pid`, read from `<proc_root>/<pid>/cgroup` (Slurm's hierarchy; under cgroup v1 also
/// the process owner's uid), else from `SLURM_JOB_ID` in its environ. `None` when neither says (or
/// the process is gone, or its environ is not readable).
pub fn job_of_pid(proc_root: &Path, pid: u32) -> Option<Claim> {
    let dir = proc_root.join(pid.to_string());
    let uid = std::fs::read_to_string(dir.join("status")).ok().as_deref().and_then(real_uid);
    let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok();
    if let Some((job, path_uid)) = cgroup.as_deref().and_then(job_from_cgroup) {
        // A v1 path names its owner: a process of another uid there was not put there by Slurm.
        if path_uid.is_none() || path_uid == uid {
            return Some(Claim { job, source: Source::Cgroup, uid });
        }
    }
    let job = std::fs::read(dir.join("environ")).ok().as_deref().and_then(job_from_environ)?;
    Some(Claim { job, source: Source::Environ, uid })
}

/// The job id in a `/proc/<pid>/cgroup` text (lines `hierarchy:controllers:path`), from Slurm's own
/// hierarchy only, with the uid a cgroup v1 path names.
pub fn job_from_cgroup(text: &str) -> Option<(String, Option<u32>)> {
    text.lines().filter_map(|line| line.splitn(3, ':').nth(2)).find_map(slurm_job_path)
}

/// `/slurm[_<node>]/uid_<uid>/job_<id>/…` or `…/[<node>_]slurmstepd.scope/job_<id>/…`.
fn slurm_job_path(path: &str) -> Option<(String, Option<u32>)> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let job_at = parts.iter().position(|p| p.strip_prefix("job_").is_some_and(is_job_id))?;
    let job = parts[job_at].strip_prefix("job_")?.to_string();
    let parent = job_at.checked_sub(1).map(|i| parts[i])?;
    if parent == "slurmstepd.scope" || parent.ends_with("_slurmstepd.scope") {
        return Some((job, None));
    }
    let uid = parent.strip_prefix("uid_").filter(|u| is_job_id(u))?.parse().ok()?;
    let top = job_at.checked_sub(2).map(|i| parts[i])?;
    (job_at == 2 && (top == "slurm" || top.starts_with("slurm_"))).then_some((job, Some(uid)))
}

/// The real uid in a `/proc/<pid>/status` text.
fn real_uid(status: &str) -> Option<u32> {
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
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
    fn only_slurms_own_cgroup_paths_name_a_job() {
        let v1 = "12:pids:/slurm/uid_1000/job_4242/step_0/task_0\n4:memory:/slurm/uid_1000/job_4242/step_0\n";
        assert_eq!(job_from_cgroup(v1), Some(("4242".into(), Some(1000))));
        let v1_node = "4:memory:/slurm_gpu01/uid_1001/job_9/step_batch\n";
        assert_eq!(job_from_cgroup(v1_node), Some(("9".into(), Some(1001))));
        let v2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n";
        assert_eq!(job_from_cgroup(v2), Some(("77".into(), None)));
        let v2_node = "0::/system.slice/gpu01_slurmstepd.scope/job_78/step_0\n";
        assert_eq!(job_from_cgroup(v2_node), Some(("78".into(), None)));
        // A user's own (delegated) cgroups, whatever they are called.
        for forged in [
            "0::/user.slice/user-1001.slice/user@1001.service/app.slice/job_77/x\n",
            "0::/user.slice/user-1001.slice/job_77\n",
            "4:memory:/slurm/job_77\n",
            "4:memory:/users/slurm/uid_1001/job_77\n",
            "0::/user.slice/slurmstepd.scope.fake/job_77\n",
            "0::/job_x/job_\n",
            "",
        ] {
            assert_eq!(job_from_cgroup(forged), None, "{forged:?}");
        }
    }

    fn env(job: &str, uid: u32) -> Option<Claim> {
        Some(Claim { job: job.into(), source: Source::Environ, uid: Some(uid) })
    }

    #[test]
    fn an_environment_names_only_a_job_recorded_here_for_its_owner() {
        let held = |jobs: &[&str]| jobs.iter().map(|j| j.to_string()).collect::<Vec<_>>();
        // Job 5 is alice's (1001), job 9 bob's (1002), job 3 from an older plugin (no uid).
        let owners = |job: &str| match job {
            "5" => Some(Some(1001)),
            "9" => Some(Some(1002)),
            "3" => Some(None),
            _ => None,
        };
        // alice's process on her own GPU (job 5) says it is bob's job 9: counted for job 5.
        assert_eq!(job_for_process(env("9", 1001), Some(&held(&["5"])), owners).as_deref(), Some("5"));
        // Her own job, even on a GPU she shares or a GPU not recorded: hers.
        assert_eq!(job_for_process(env("5", 1001), Some(&held(&["5", "6"])), owners).as_deref(), Some("5"));
        assert_eq!(job_for_process(env("5", 1001), None, owners).as_deref(), Some("5"));
        // A job not recorded here at all: her word is not taken.
        assert_eq!(job_for_process(env("42", 1001), None, owners), None);
        assert_eq!(job_for_process(env("42", 1001), Some(&held(&["5", "6"])), owners), None);
        // An older record without a uid: only if that job holds the process's GPU.
        assert_eq!(job_for_process(env("3", 1001), Some(&held(&["3", "6"])), owners).as_deref(), Some("3"));
        assert_eq!(job_for_process(env("3", 1001), Some(&held(&["6"])), owners).as_deref(), Some("6"));
        // The cgroup is Slurm's word; nothing at all: the GPU's sole holder.
        let cgroup = Some(Claim { job: "9".into(), source: Source::Cgroup, uid: Some(1001) });
        assert_eq!(job_for_process(cgroup, Some(&held(&["5"])), owners).as_deref(), Some("9"));
        assert_eq!(job_for_process(None, Some(&held(&["5"])), owners).as_deref(), Some("5"));
    }

    #[test]
    fn environ() {
        assert_eq!(job_from_environ(b"HOME=/root\0SLURM_JOB_ID=12\0X=1\0").as_deref(), Some("12"));
        assert_eq!(job_from_environ(b"SLURM_JOB_IDX=12\0SLURM_JOB_ID=\0"), None);
        assert_eq!(job_from_environ(b""), None);
    }

    fn fake_proc(pid: u32, uid: u32, cgroup: &str, environ: &[u8]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(pid.to_string());
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cgroup"), cgroup).unwrap();
        std::fs::write(dir.join("environ"), environ).unwrap();
        std::fs::write(dir.join("status"), format!("Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")).unwrap();
        root
    }

    fn claim(job: &str, source: Source, uid: u32) -> Option<Claim> {
        Some(Claim { job: job.into(), source, uid: Some(uid) })
    }

    #[test]
    fn cgroup_wins_over_environ_and_a_v1_path_must_name_the_owner() {
        let root = fake_proc(7, 1001, "0::/system.slice/slurmstepd.scope/job_5/step_0\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), claim("5", Source::Cgroup, 1001));
        let root = fake_proc(7, 1001, "4:memory:/slurm/uid_1001/job_5/step_0\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), claim("5", Source::Cgroup, 1001));
        let root = fake_proc(7, 1001, "4:memory:/slurm/uid_1002/job_5/step_0\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), claim("6", Source::Environ, 1001), "another uid's job cgroup");
    }

    #[test]
    fn a_process_is_read_once_while_listed() {
        let root = fake_proc(7, 0, "0::/system.slice/slurmstepd.scope/job_5/step_0\n", b"");
        let mut cache = JobCache::default();
        assert_eq!(cache.job_of(root.path(), 7), claim("5", Source::Cgroup, 0));
        std::fs::write(root.path().join("7/cgroup"), "0::/system.slice/slurmstepd.scope/job_6/step_0\n").unwrap();
        cache.retain(&HashSet::from([7]));
        assert_eq!(cache.job_of(root.path(), 7), claim("5", Source::Cgroup, 0), "still listed: not read again");
        // The process left the list; a process listed later under its PID is read afresh.
        cache.retain(&HashSet::new());
        assert_eq!(cache.job_of(root.path(), 7), claim("6", Source::Cgroup, 0));
    }

    #[test]
    fn environ_is_the_fallback() {
        let root = fake_proc(7, 1001, "0::/user.slice\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), claim("6", Source::Environ, 1001));
        assert_eq!(job_of_pid(root.path(), 8), None, "no such process");
    }
}
