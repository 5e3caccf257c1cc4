//! Running Slurm's commands: always argv, never a shell; a failure says which command and why.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gputokens::config::SlurmTools;
use gputokens::slurm::associations::{AccountTree, ASSOC_FORMAT, COORD_FORMAT};
use gputokens::slurm::sacct;
use gputokens::slurm::squeue::{self, QueueJob};

use crate::command::RunError;

/// A Slurm command that failed, or whose output cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The program cannot be started (not installed, not executable).
    #[error("cannot run {}: {source}", program.display())]
    Spawn { program: PathBuf, source: std::io::Error },
    /// It ran past its timeout, or could not be waited for.
    #[error("{command}: {source}")]
    Run { command: String, source: RunError },
    #[error("{command} failed ({status}): {stderr}")]
    Exit { command: String, status: ExitStatus, stderr: String },
    #[error("{name} printed non-UTF-8 output: {source}")]
    NotUtf8 { name: String, source: std::string::FromUtf8Error },
    #[error("sacct: {0}")]
    Sacct(#[from] sacct::SacctError),
    #[error(transparent)]
    Squeue(#[from] squeue::SqueueError),
    #[error(transparent)]
    Partitions(#[from] gputokens::slurm::partitions::PartitionError),
    /// The failure of a read shared within a cycle ([`QueueOnce`]), told to each part that asks.
    #[error(transparent)]
    Shared(Arc<SlurmError>),
}

/// A node name or job ID refused before it reaches a Slurm command.
#[derive(Debug, thiserror::Error)]
pub enum NotASlurmName {
    #[error("'{}' is not a single Slurm node name", gputokens::free_text::printable(.0))]
    Node(String),
    #[error("'{}' is not a plain Slurm job ID", gputokens::free_text::printable(.0))]
    Job(String),
}

#[derive(Clone)]
pub struct Slurm {
    bin_dir: Option<PathBuf>,
    sacct_timeout: Duration,
    command_timeout: Duration,
    /// This sacct refused the SLUID column (before Slurm 25.11).
    sacct_lacks_sluid: Arc<AtomicBool>,
    /// What this cluster's job IDs are prefixed with in the ledger (`CLUSTER:`, `[clusters]`).
    job_prefix: Option<Arc<str>>,
}

impl Slurm {
    pub fn new(tools: &SlurmTools) -> Slurm {
        Slurm {
            bin_dir: tools.bin_dir.clone(),
            sacct_timeout: tools.sacct_timeout,
            command_timeout: tools.command_timeout,
            sacct_lacks_sluid: Arc::default(),
            job_prefix: None,
        }
    }

    /// Slurm's commands as `config` says to run them, on this host's cluster.
    pub fn of(config: &gputokens::config::Config) -> Slurm {
        Slurm { job_prefix: config.clusters.job_prefix().map(Arc::from), ..Slurm::new(&config.slurm) }
    }

    /// The ledger's key of this cluster's job `id`: the ID itself, or `CLUSTER:ID` on a cluster
    /// that shares the ledger with the one that had it first (Slurm's job IDs are per cluster).
    pub fn job_key(&self, id: &str) -> String {
        match &self.job_prefix {
            Some(prefix) => format!("{prefix}{id}"),
            None => id.to_string(),
        }
    }

    /// The job ID Slurm knows the job by whose ledger key is `key`: only this cluster's jobs
    /// reach its scontrol, and only as plain job IDs ([`job_id_arg`]).
    pub fn job_arg<'k>(&self, key: &'k str) -> Result<&'k str, NotASlurmName> {
        let id = match &self.job_prefix {
            Some(prefix) => key.strip_prefix(&**prefix).ok_or_else(|| NotASlurmName::Job(key.to_string()))?,
            None => key,
        };
        job_id_arg(id)
    }

    /// `parsed` (sacct's records) keyed as the ledger keys this cluster's jobs.
    pub fn key_records(&self, parsed: &mut sacct::Parsed) {
        if self.job_prefix.is_none() {
            return;
        }
        for record in parsed.records.iter_mut().chain(parsed.active.iter_mut()) {
            record.job_id = self.job_key(&record.job_id);
        }
        parsed.nodes = std::mem::take(&mut parsed.nodes).into_iter().map(|(id, n)| (self.job_key(&id), n)).collect();
        parsed.ends =
            std::mem::take(&mut parsed.ends).into_iter().map(|((id, at), e)| ((self.job_key(&id), at), e)).collect();
    }

    /// sacct waits on slurmdbd, which may take long on a big site; the others answer from slurmctld.
    fn timeout(&self, name: &str) -> Duration {
        if name == "sacct" {
            self.sacct_timeout
        } else {
            self.command_timeout
        }
    }

    fn program(&self, name: &str) -> PathBuf {
        self.bin_dir.as_ref().map(|d| d.join(name)).unwrap_or_else(|| PathBuf::from(name))
    }

    /// Runs `name args...` and returns its stdout; one that runs past its timeout (`[slurm]
    /// sacct_timeout`, `command_timeout`) is killed and is an error.
    pub fn run(&self, name: &str, args: &[&str]) -> Result<String, SlurmError> {
        let program = self.program(name);
        let mut command = Command::new(&program);
        command.args(args).envs(slurm_env(name));
        let command_line = || format!("{name} {}", args.join(" "));
        let out = crate::command::run(command, self.timeout(name)).map_err(|e| match e {
            RunError::Spawn(source) => SlurmError::Spawn { program: program.clone(), source },
            source => SlurmError::Run { command: command_line(), source },
        })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(SlurmError::Exit { command: command_line(), status: out.status, stderr });
        }
        String::from_utf8(out.stdout).map_err(|source| SlurmError::NotUtf8 { name: name.to_string(), source })
    }

    /// Allocation rows (one per run segment) of every job active between `since` and `until`, with
    /// each run's SLUID where this sacct has the column (Slurm 25.11+). An sacct that does not know
    /// it refuses the column before it asks slurmdbd; it is then asked without it, and not asked for
    /// it again by this `Slurm` (a cycle: a Slurm upgraded under a running accountd is seen at once).
    pub fn sacct(&self, since: i64, until: i64) -> Result<String, SlurmError> {
        let (s, e) = (gputokens::time::local_text_not_after(since), gputokens::time::local_text_not_before(until));
        let read = |fields| self.run("sacct", &["-X", "-D", "-a", "-P", "-S", &s, "-E", &e, "-o", fields]);
        if !self.sacct_lacks_sluid.load(Ordering::Relaxed) {
            match read(sacct::FIELDS_WITH_SLUID) {
                Err(SlurmError::Exit { stderr, .. }) if stderr.contains("\"SLUID\"") => {
                    self.sacct_lacks_sluid.store(true, Ordering::Relaxed)
                }
                done => return done,
            }
        }
        read(sacct::FIELDS)
    }

    /// Every job, those of hidden partitions too (`--all`): a job there holds GPUs and tokens alike.
    pub fn squeue_json(&self) -> Result<String, SlurmError> {
        self.run("squeue", &["--all", "--json"])
    }

    /// GPU types per node, from `sinfo -N -o %N|%G` (e.g. `gpu:rtx2080:4,gpu:a6000:2(S:0)`), nodes
    /// of hidden partitions too (`--all`).
    pub fn node_gpu_types(&self) -> Result<HashMap<String, BTreeSet<String>>, SlurmError> {
        let text = self.run("sinfo", &["--all", "-h", "-N", "-o", "%N|%G"])?;
        let mut types: HashMap<String, BTreeSet<String>> = HashMap::new();
        for line in text.lines() {
            let Some((node, gres)) = line.split_once('|') else { continue };
            let found = gputokens::slurm::squeue::alloc_from_gres_detail(std::iter::once(gres));
            types.entry(node.trim().to_string()).or_default().extend(found.gpus.typed.into_keys());
        }
        Ok(types)
    }

    /// Each node's CPUs, memory and GPUs (`sinfo -N -o %N|%c|%m|%G`), nodes of hidden partitions too.
    pub fn node_shapes(&self) -> Result<HashMap<String, gputokens::stranding::NodeShape>, SlurmError> {
        Ok(gputokens::slurm::sinfo::node_shapes(&self.run("sinfo", &["--all", "-h", "-N", "-o", "%N|%c|%m|%G"])?))
    }

    /// Slurm's accounts, their members and coordinators (sacctmgr).
    pub fn account_tree(&self) -> Result<AccountTree, SlurmError> {
        let assoc = self.run("sacctmgr", &["-n", "-P", "show", "assoc", ASSOC_FORMAT])?;
        let coords = self.run("sacctmgr", &["-n", "-P", "show", "account", "withcoord", COORD_FORMAT])?;
        Ok(AccountTree::parse(&assoc, &coords))
    }

    /// Expands a hostlist such as `n[1-3],m1` through `scontrol show hostnames`.
    pub fn hostnames(&self, hostlist: &str) -> Result<Vec<String>, SlurmError> {
        if !hostlist.contains('[') {
            return Ok(hostlist.split(',').filter(|h| !h.is_empty()).map(str::to_string).collect());
        }
        Ok(self.run("scontrol", &["show", "hostnames", hostlist])?.lines().map(str::to_string).collect())
    }
}

/// `squeue --json` read at most once per check cycle, by whichever part asks first (the snapshot's
/// queue commitments, the preemption check): both then see the same queue.
pub struct QueueOnce<'s> {
    slurm: &'s Slurm,
    read: Option<Result<Vec<QueueJob>, Arc<SlurmError>>>,
    /// When the read began and when squeue had answered (unix milliseconds, the wall clock,
    /// whatever `--now` says).
    read_ms: Option<i64>,
    read_end_ms: Option<i64>,
}

impl<'s> QueueOnce<'s> {
    pub fn new(slurm: &'s Slurm) -> QueueOnce<'s> {
        QueueOnce { slurm, read: None, read_ms: None, read_end_ms: None }
    }

    pub fn jobs(&mut self) -> Result<&[QueueJob], SlurmError> {
        let (slurm, read_ms, read_end_ms) = (self.slurm, &mut self.read_ms, &mut self.read_end_ms);
        let read = self.read.get_or_insert_with(|| {
            *read_ms = Some(gputokens::time::now_ms());
            let jobs = read_queue(slurm).map_err(Arc::new);
            *read_end_ms = Some(gputokens::time::now_ms());
            jobs
        });
        read.as_deref().map_err(|e| SlurmError::Shared(e.clone()))
    }

    /// When squeue was read (unix milliseconds, taken before it ran); None before `jobs`.
    pub fn read_ms(&self) -> Option<i64> {
        self.read_ms
    }

    /// When squeue had answered (unix milliseconds); None before `jobs`.
    pub fn read_end_ms(&self) -> Option<i64> {
        self.read_end_ms
    }
}

/// The queue, each job keyed as the ledger keys it ([`Slurm::job_key`]).
fn read_queue(slurm: &Slurm) -> Result<Vec<QueueJob>, SlurmError> {
    let mut jobs = squeue::queue(&slurm.squeue_json()?)?;
    if slurm.job_prefix.is_some() {
        for job in &mut jobs {
            job.job_id = slurm.job_key(&job.job_id);
        }
    }
    Ok(jobs)
}

/// sacct and squeue print times as unix seconds: one instant per job start however the local
/// clock was set back (the repeated hour of a DST change), the same from both.
fn slurm_env(name: &str) -> Vec<(&'static str, &'static str)> {
    let mut env = Vec::new();
    if matches!(name, "sacct" | "squeue") {
        env.push(("SLURM_TIME_FORMAT", "%s"));
        // An array's task list whole: libslurm cuts it at 64 characters ("1,3,5,...") otherwise,
        // and a cut list can be neither counted nor held.
        env.push(("SLURM_BITSTR_LEN", "0"));
    }
    env
}

/// Longest node name taken (Slurm's own limit is larger than any real host name).
const MAX_NODE_NAME: usize = 64;

/// `node` as one argument naming one Slurm node: `[A-Za-z0-9._-]`, not starting with `-` (never an
/// option), never a hostlist (`n[1-3]`, `a,b`) or `ALL`. Names from agent reports and squeue pass
/// through here before they reach scontrol.
pub fn node_name_arg(node: &str) -> Result<&str, NotASlurmName> {
    let ok = !node.is_empty()
        && node.len() <= MAX_NODE_NAME
        && !node.starts_with('-')
        && !node.eq_ignore_ascii_case("all")
        && node.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(node)
    } else {
        Err(NotASlurmName::Node(node.to_string()))
    }
}

/// `job` as one argument naming one Slurm job: a plain decimal job ID (no array or het-job suffix,
/// no sign, no option).
pub fn job_id_arg(job: &str) -> Result<&str, NotASlurmName> {
    let ok = !job.is_empty() && job.bytes().all(|b| b.is_ascii_digit()) && job.parse::<u32>().is_ok();
    if ok {
        Ok(job)
    } else {
        Err(NotASlurmName::Job(job.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_name_only() {
        for good in ["vm", "gpu01", "node-3.cluster", "a_b"] {
            assert_eq!(node_name_arg(good).unwrap(), good);
        }
        for bad in ["", "-vm", "--help", "n[1-3]", "a,b", "a b", "ALL", "all", "vm\n", "nodename=x", "x;y", "é"] {
            assert!(node_name_arg(bad).is_err(), "{bad:?} accepted");
        }
        assert!(node_name_arg(&"n".repeat(65)).is_err());
    }

    #[test]
    fn plain_job_ids_only() {
        assert_eq!(job_id_arg("12345").unwrap(), "12345");
        for bad in ["", "-1", "+1", "12_3", "12+0", "1 2", "--", "0x10", "4294967296", "123456789012345678901"] {
            assert!(job_id_arg(bad).is_err(), "{bad:?} accepted");
        }
    }
}
