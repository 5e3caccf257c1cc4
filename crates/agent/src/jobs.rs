//! Which Slurm job a process belongs to. slurmstepd puts every job's processes in a cgroup of Slurm's
//! own hierarchy, which only root can make:
//! - cgroup v1: `/slurm[_<node>]/uid_<uid>/job_<id>/…`;
//! - cgroup v2: `/system.slice/[<node>_]slurmstepd.scope/job_<id>/…`, and from Slurm 26.05 by default
//!   (`CgroupJobIdPaths=no`) `…/slurmstepd.scope/<SLUID>/…`, the job named by its SLUID
//!   (`sEKNKTV3WPV500`), which spank_gputokens.so records beside the job's GPUs on the node.
//!
//! A `job_<id>` anywhere else (a user's own delegated cgroup) is nobody's word. A process outside
//! Slurm's hierarchy (Slurm without cgroups, ssh into the node with `pam_slurm_adopt` off) may carry
//! `SLURM_JOB_ID` in its environment, which it sets itself: that is taken only for a job that
//! spank_gputokens.so recorded on this node as the process owner's, and never for a process that Slurm's
//! hierarchy places.
//!
//! A process with a /proc entry here that names no job this way (outside Slurm: ssh without
//! `pam_slurm_adopt`, cron, a user's services), or whose claim is refused, is nobody's: never the job
//! that holds its GPU, which would then pay for another user's work (the audit's N2). Only a process
//! without a /proc entry here (another PID namespace, a container) goes to the job holding its GPU
//! alone: what runs there out of the agent's sight is that job's.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::job_gpu_records::JobRecord;
use gputokens::slurm::sluid::is_sluid;

/// Each GPU process's job, read once while NVML keeps listing the process: a process does not change
/// jobs (slurmstepd moves a task into the job's cgroup before it runs the program), and reading the
/// cgroup or environ of every process every sample cost more than all the rest of a sample. A PID
/// comes back only after the kernel has handed out the others up to pid_max, so a process that left
/// the list and a new one with its PID are never confused between two samples.
#[derive(Debug, Default)]
pub struct JobCache {
    known: HashMap<u32, Process>,
}

/// What this host's /proc says of a GPU process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Process {
    /// No /proc entry here: another PID namespace (a container the agent is not in), or gone.
    Unseen,
    /// Its entry, and the job it claims (None: no Slurm cgroup, no `SLURM_JOB_ID`).
    Seen(Option<Claim>),
}

/// Where a process's job was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// slurmstepd put the process in the cgroup of the job with this ID: Slurm's word.
    Cgroup,
    /// slurmstepd put the process in the cgroup of the job with this SLUID (Slurm 26.05's default
    /// naming): Slurm's word, once the SLUID is known here.
    CgroupSluid,
    /// Slurm's hierarchy holds the process, under a uid that is not its own: not Slurm's doing, and
    /// its environment is not asked either.
    ForeignCgroup,
    /// `SLURM_JOB_ID` in its environment: the process's own word, which any user can set.
    Environ,
}

/// A process's job as read from /proc (an ID, or a SLUID for [`Source::CgroupSluid`]), and the
/// process's (real) uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub job: String,
    pub source: Source,
    pub uid: Option<u32>,
}

/// What spank_gputokens.so recorded on this node, as the mapping needs it: each recorded job's
/// owner (None from an older plugin that wrote no uid), and the job of each recorded SLUID.
#[derive(Debug, Default)]
pub struct Recorded<'a> {
    owners: HashMap<&'a str, Option<u32>>,
    jobs_by_sluid: HashMap<&'a str, &'a str>,
}

impl<'a> Recorded<'a> {
    pub fn of(records: &'a [JobRecord]) -> Self {
        Recorded {
            owners: records.iter().map(|r| (r.job.as_str(), r.uid)).collect(),
            jobs_by_sluid: records.iter().filter_map(|r| Some((r.sluid.as_deref()?, r.job.as_str()))).collect(),
        }
    }

    /// `Some(owner)` when the job is recorded here.
    fn owner(&self, job: &str) -> Option<Option<u32>> {
        self.owners.get(job).copied()
    }
}

/// The job a GPU process is counted for:
/// - its Slurm cgroup's job (a SLUID through the records), unless that job is recorded with another
///   owner than the process's;
/// - for a process outside Slurm's hierarchy, its environment's job, only if spank_gputokens.so
///   recorded that job on this node for the process's owner (a record of an older plugin without a
///   uid only if that job holds the process's GPU);
/// - for a process without a /proc entry here (another PID namespace), the sole job recorded as
///   holding its GPU (`holders`);
/// - else none: a process here that names no job, or whose claim is refused, is nobody's.
///
/// A user cannot pass their GPU work, idle GPUs or faults off as another user's job.
pub fn job_for_process(process: Process, holders: Option<&[String]>, recorded: &Recorded) -> Option<String> {
    let claim = match process {
        Process::Unseen => {
            return match holders {
                Some([job]) => Some(job.clone()),
                _ => None,
            }
        }
        Process::Seen(claim) => claim?,
    };
    let owner_is_process = |job: &str| match recorded.owner(job) {
        Some(Some(owner)) => claim.uid == Some(owner),
        _ => true,
    };
    match claim.source {
        Source::Cgroup if owner_is_process(&claim.job) => Some(claim.job),
        Source::CgroupSluid => match recorded.jobs_by_sluid.get(claim.job.as_str()) {
            Some(&job) if owner_is_process(job) => Some(job.to_owned()),
            _ => None,
        },
        Source::Environ => {
            let holds_its_gpu = holders.is_some_and(|held| held.contains(&claim.job));
            match recorded.owner(&claim.job) {
                Some(Some(owner)) if claim.uid == Some(owner) => Some(claim.job),
                Some(None) if holds_its_gpu => Some(claim.job),
                _ => None,
            }
        }
        Source::Cgroup | Source::ForeignCgroup => None,
    }
}

impl JobCache {
    /// [`job_of_pid`], read once while the process is listed.
    pub fn job_of(&mut self, proc_root: &Path, pid: u32) -> Process {
        self.known.entry(pid).or_insert_with(|| job_of_pid(proc_root, pid)).clone()
    }

    /// Forgets the processes not in `listed` (ended, or no longer on a GPU).
    pub fn retain(&mut self, listed: &HashSet<u32>) {
        self.known.retain(|pid, _| listed.contains(pid));
    }
}

/// The job of `pid`, read from `<proc_root>/<pid>/cgroup` (Slurm's hierarchy; under cgroup v1 also
/// the process owner's uid), else, for a process outside it, from `SLURM_JOB_ID` in its environ.
/// [`Process::Unseen`] when `<proc_root>/<pid>` does not exist; no claim when neither says (or its
/// environ is not readable).
pub fn job_of_pid(proc_root: &Path, pid: u32) -> Process {
    let dir = proc_root.join(pid.to_string());
    if std::fs::symlink_metadata(&dir).is_err() {
        return Process::Unseen;
    }
    Process::Seen(claim_of(&dir))
}

/// The job a process's /proc directory `dir` names.
fn claim_of(dir: &Path) -> Option<Claim> {
    let uid = std::fs::read_to_string(dir.join("status")).ok().as_deref().and_then(real_uid);
    let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok();
    if let Some(SlurmCgroup { job, path_uid }) = cgroup.as_deref().and_then(job_from_cgroup) {
        // A v1 path names its owner: a process of another uid there was not put there by Slurm.
        let (job, source) = match job {
            _ if path_uid.is_some() && path_uid != uid => (String::new(), Source::ForeignCgroup),
            CgroupJob::Id(id) => (id, Source::Cgroup),
            CgroupJob::Sluid(sluid) => (sluid, Source::CgroupSluid),
        };
        return Some(Claim { job, source, uid });
    }
    let job = std::fs::read(dir.join("environ")).ok().as_deref().and_then(job_from_environ)?;
    Some(Claim { job, source: Source::Environ, uid })
}

/// How Slurm's hierarchy names a job's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupJob {
    /// `job_<id>`.
    Id(String),
    /// The job's SLUID (Slurm 26.05's cgroup v2 default).
    Sluid(String),
}

/// A job cgroup of Slurm's hierarchy, with the uid a cgroup v1 path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmCgroup {
    pub job: CgroupJob,
    pub path_uid: Option<u32>,
}

impl SlurmCgroup {
    /// The job's ID where the cgroup is named by it (a SLUID's job is found in the SPANK records).
    pub fn job_id(&self) -> Option<&str> {
        match &self.job {
            CgroupJob::Id(id) => Some(id),
            CgroupJob::Sluid(_) => None,
        }
    }
}

/// The job in a `/proc/<pid>/cgroup` text (lines `hierarchy:controllers:path`), from Slurm's own
/// hierarchy only.
pub fn job_from_cgroup(text: &str) -> Option<SlurmCgroup> {
    text.lines().filter_map(|line| line.splitn(3, ':').nth(2)).find_map(slurm_job_path)
}

/// `/slurm[_<node>]/uid_<uid>/job_<id>/…` (v1), or `/system.slice/[<node>_]slurmstepd.scope/job_<id>/…`
/// and `/system.slice/[<node>_]slurmstepd.scope/<SLUID>/…` (v2: right under system.slice, where no
/// user can make a cgroup; a user's delegated cgroups live under user.slice).
fn slurm_job_path(path: &str) -> Option<SlurmCgroup> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let job_id = |part: &str| part.strip_prefix("job_").filter(|id| is_job_id(id)).map(str::to_owned);
    match parts.as_slice() {
        ["system.slice", scope, below, ..] if *scope == "slurmstepd.scope" || scope.ends_with("_slurmstepd.scope") => {
            let job = match job_id(below) {
                Some(id) => CgroupJob::Id(id),
                None if is_sluid(below) => CgroupJob::Sluid(below.to_string()),
                None => return None,
            };
            Some(SlurmCgroup { job, path_uid: None })
        }
        [top, uid, job, ..] if *top == "slurm" || top.starts_with("slurm_") => {
            let uid = uid.strip_prefix("uid_").filter(|u| is_job_id(u))?.parse().ok()?;
            Some(SlurmCgroup { job: CgroupJob::Id(job_id(job)?), path_uid: Some(uid) })
        }
        _ => None,
    }
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

    fn id(job: &str, path_uid: Option<u32>) -> Option<SlurmCgroup> {
        Some(SlurmCgroup { job: CgroupJob::Id(job.into()), path_uid })
    }

    #[test]
    fn only_slurms_own_cgroup_paths_name_a_job() {
        let v1 = "12:pids:/slurm/uid_1000/job_4242/step_0/task_0\n4:memory:/slurm/uid_1000/job_4242/step_0\n";
        assert_eq!(job_from_cgroup(v1), id("4242", Some(1000)));
        let v1_node = "4:memory:/slurm_gpu01/uid_1001/job_9/step_batch\n";
        assert_eq!(job_from_cgroup(v1_node), id("9", Some(1001)));
        let v2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n";
        assert_eq!(job_from_cgroup(v2), id("77", None));
        // As Slurm 24.11 and 26.05 (CgroupJobIdPaths=yes) wrote it on the test cluster, v1 lines before.
        let v2_node = "4:memory:/\n1:cpu:/\n0::/system.slice/vm_slurmstepd.scope/job_1/step_batch/user/task_special\n";
        assert_eq!(job_from_cgroup(v2_node), id("1", None));
        // Slurm 26.05's default: the job's SLUID.
        let sluid = "4:memory:/\n0::/system.slice/vm_slurmstepd.scope/s359M8A2NFAK00/step_batch/user/task_special\n";
        let named = SlurmCgroup { job: CgroupJob::Sluid("s359M8A2NFAK00".into()), path_uid: None };
        assert_eq!(job_from_cgroup(sluid), Some(named));
        // A user's own (delegated) cgroups, whatever they are called, and Slurm's cgroups of no job.
        for forged in [
            "0::/user.slice/user-1001.slice/user@1001.service/app.slice/job_77/x\n",
            "0::/user.slice/user-1001.slice/user@1001.service/app.slice/x_slurmstepd.scope/job_77\n",
            "0::/user.slice/user-1001.slice/user@1001.service/slurmstepd.scope/sEKNKTV3WPV500\n",
            "0::/user.slice/user-1001.slice/job_77\n",
            "4:memory:/slurm/job_77\n",
            "4:memory:/users/slurm/uid_1001/job_77\n",
            "0::/user.slice/slurmstepd.scope.fake/job_77\n",
            "0::/system.slice/vm_slurmstepd.scope/slurmd\n",
            "0::/system.slice/vm_slurmstepd.scope/system\n",
            "0::/system.slice/slurmstepd.scope/job_x\n",
            "0::/system.slice/slurmstepd.scope/sEKNKTV3WPV5O0\n",
            "0::/system.slice/slurmstepd.scope/seknktv3wpv500\n",
            "0::/job_x/job_\n",
            "",
        ] {
            assert_eq!(job_from_cgroup(forged), None, "{forged:?}");
        }
    }

    fn env(job: &str, uid: u32) -> Process {
        Process::Seen(Some(Claim { job: job.into(), source: Source::Environ, uid: Some(uid) }))
    }

    fn record(job: &str, uid: Option<u32>, sluid: Option<&str>) -> JobRecord {
        JobRecord { job: job.into(), gpus: vec![0], uuids: vec![], uid, sluid: sluid.map(str::to_owned) }
    }

    fn held(jobs: &[&str]) -> Vec<String> {
        jobs.iter().map(|j| j.to_string()).collect()
    }

    #[test]
    fn an_environment_names_only_a_job_recorded_here_for_its_owner() {
        // Job 5 is alice's (1001), job 9 bob's (1002), job 3 from an older plugin (no uid).
        let records = [record("5", Some(1001), None), record("9", Some(1002), None), record("3", None, None)];
        let recorded = Recorded::of(&records);
        // alice's process on her own GPU (job 5) says it is bob's job 9: refused, so nobody's (never
        // the GPU's sole holder's: with another user's process, that job would pay for their work).
        assert_eq!(job_for_process(env("9", 1001), Some(&held(&["5"])), &recorded), None);
        // Her own job, even on a GPU she shares or a GPU not recorded: hers.
        assert_eq!(job_for_process(env("5", 1001), Some(&held(&["5", "6"])), &recorded).as_deref(), Some("5"));
        assert_eq!(job_for_process(env("5", 1001), None, &recorded).as_deref(), Some("5"));
        // A job not recorded here at all: her word is not taken.
        assert_eq!(job_for_process(env("42", 1001), None, &recorded), None);
        assert_eq!(job_for_process(env("42", 1001), Some(&held(&["5", "6"])), &recorded), None);
        // An older record without a uid: only if that job holds the process's GPU.
        assert_eq!(job_for_process(env("3", 1001), Some(&held(&["3", "6"])), &recorded).as_deref(), Some("3"));
        assert_eq!(job_for_process(env("3", 1001), Some(&held(&["6"])), &recorded), None);
        // Nothing at all: nobody's.
        assert_eq!(job_for_process(Process::Seen(None), Some(&held(&["5"])), &recorded), None);
    }

    #[test]
    fn a_slurm_cgroup_names_the_job_unless_the_job_is_recorded_for_another_owner() {
        let records =
            [record("5", Some(1001), Some("s359M8A2NFAK00")), record("9", Some(1002), None), record("3", None, None)];
        let recorded = Recorded::of(&records);
        let cgroup = |job: &str, source, uid| Process::Seen(Some(Claim { job: job.into(), source, uid: Some(uid) }));
        // By ID: Slurm's word, for a job not recorded here too (a CPU job's process on a GPU).
        assert_eq!(job_for_process(cgroup("9", Source::Cgroup, 1002), None, &recorded).as_deref(), Some("9"));
        assert_eq!(job_for_process(cgroup("7", Source::Cgroup, 1001), None, &recorded).as_deref(), Some("7"));
        assert_eq!(job_for_process(cgroup("3", Source::Cgroup, 1001), None, &recorded).as_deref(), Some("3"));
        // alice's process in bob's job's cgroup (only root can put it there): not bob's, also where
        // his job holds the GPU alone.
        assert_eq!(job_for_process(cgroup("9", Source::Cgroup, 1001), Some(&held(&["5", "9"])), &recorded), None);
        assert_eq!(job_for_process(cgroup("9", Source::Cgroup, 1001), Some(&held(&["9"])), &recorded), None);
        // By SLUID: the job recorded with it, for its owner's processes.
        let sluid = |uid| cgroup("s359M8A2NFAK00", Source::CgroupSluid, uid);
        assert_eq!(job_for_process(sluid(1001), Some(&held(&["5", "9"])), &recorded).as_deref(), Some("5"));
        assert_eq!(job_for_process(sluid(1002), Some(&held(&["5", "9"])), &recorded), None);
        // A SLUID not recorded here: not guessed, and nobody's, also on a GPU one job holds alone
        // (another job of the node, its GPUs not recorded, is not that job).
        let unknown = cgroup("s0000000000000", Source::CgroupSluid, 1001);
        assert_eq!(job_for_process(unknown.clone(), Some(&held(&["5", "9"])), &recorded), None);
        assert_eq!(job_for_process(unknown, Some(&held(&["9"])), &recorded), None);
        // A v1 cgroup of another uid: neither the cgroup nor the environment speaks.
        let foreign = Process::Seen(Some(Claim { job: String::new(), source: Source::ForeignCgroup, uid: Some(1001) }));
        assert_eq!(job_for_process(foreign.clone(), Some(&held(&["5", "9"])), &recorded), None);
        assert_eq!(job_for_process(foreign, Some(&held(&["9"])), &recorded), None);
    }

    /// The audit's N2: only a process the agent cannot see here (another PID namespace) is the job's
    /// that holds its GPU alone; bob's process outside Slurm on alice's GPU is nobody's.
    #[test]
    fn only_a_process_out_of_sight_goes_to_the_gpus_sole_holder() {
        let records = [record("5", Some(1001), None)];
        let recorded = Recorded::of(&records);
        assert_eq!(job_for_process(Process::Unseen, Some(&held(&["5"])), &recorded).as_deref(), Some("5"));
        assert_eq!(job_for_process(Process::Unseen, Some(&held(&["5", "6"])), &recorded), None, "no sole holder");
        assert_eq!(job_for_process(Process::Unseen, Some(&[]), &recorded), None);
        assert_eq!(job_for_process(Process::Unseen, None, &recorded), None);
        // bob (1002) outside Slurm, claiming nothing or alice's job, on the GPU her job 5 holds alone.
        assert_eq!(job_for_process(Process::Seen(None), Some(&held(&["5"])), &recorded), None);
        assert_eq!(job_for_process(env("5", 1002), Some(&held(&["5"])), &recorded), None);
        assert_eq!(job_for_process(env("77", 1002), Some(&held(&["5"])), &recorded), None);
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

    fn claim(job: &str, source: Source, uid: u32) -> Process {
        Process::Seen(Some(Claim { job: job.into(), source, uid: Some(uid) }))
    }

    #[test]
    fn cgroup_wins_over_environ_and_a_v1_path_must_name_the_owner() {
        let root = fake_proc(7, 1001, "0::/system.slice/slurmstepd.scope/job_5/step_0\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), claim("5", Source::Cgroup, 1001));
        let root =
            fake_proc(7, 1001, "0::/system.slice/n1_slurmstepd.scope/sEKNKTV3WPV500/step_0\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), claim("sEKNKTV3WPV500", Source::CgroupSluid, 1001));
        let root = fake_proc(7, 1001, "4:memory:/slurm/uid_1001/job_5/step_0\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), claim("5", Source::Cgroup, 1001));
        let root = fake_proc(7, 1001, "4:memory:/slurm/uid_1002/job_5/step_0\n", b"SLURM_JOB_ID=6\0");
        assert_eq!(job_of_pid(root.path(), 7), claim("", Source::ForeignCgroup, 1001), "another uid's job cgroup");
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
        assert_eq!(job_of_pid(root.path(), 8), Process::Unseen, "no such process here");
        let root = fake_proc(7, 1001, "0::/user.slice/user-1001.slice/session-4.scope\n", b"HOME=/home/bob\0");
        assert_eq!(job_of_pid(root.path(), 7), Process::Seen(None), "here, and claiming no job");
    }
}
