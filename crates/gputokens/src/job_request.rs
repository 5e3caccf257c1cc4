//! A job as the submit decision reads it: the fields of Slurm's job description (`job_desc_msg_t`)
//! that the rules look at, typed. Where Slurm writes "not given" as a sentinel number (NO_VAL,
//! NO_VAL16) this has None; `--time=UNLIMITED` (Slurm's INFINITE) is [`TimeLimit::Unlimited`]; nice
//! is the signed value `--nice` takes (Slurm stores NICE_OFFSET + nice). The job_submit plugin
//! converts in one place (`ffi::read_job`), so no Slurm sentinel reaches the rules.

use crate::gpu_request::{GpuRequest, RequestError, TresPer};
use crate::job_shape::{array_task_count, JobShape};
use crate::stranding::Held;

/// The amount per GPU of a `cpus_per_tres`/`mem_per_tres` list (`gres/gpu:8`, `gres:gpu:a6000:8`;
/// 22.05 writes `gres:`, later releases `gres/`).
fn per_gpu_amount(list: &str) -> Option<u64> {
    list.split([';', ','])
        .filter(|entry| entry.trim_start_matches("gres").trim_start_matches([':', '/']).starts_with("gpu"))
        .find_map(|entry| entry.rsplit(':').next()?.trim().parse().ok())
}

/// A time limit the job (or an update) gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeLimit {
    Minutes(u32),
    /// `--time=UNLIMITED`: the partition's MaxTime applies.
    Unlimited,
}

impl TimeLimit {
    /// None for UNLIMITED.
    pub fn seconds(self) -> Option<u64> {
        match self {
            TimeLimit::Minutes(m) => Some(m as u64 * 60),
            TimeLimit::Unlimited => None,
        }
    }
}

/// The fields of a job description (at submission) or of an update (`scontrol update`, which holds
/// only the fields it changes) that the decision reads. None = not given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobRequest {
    /// In an update: the job it changes (the number that `scontrol update jobid=` starts with: a job,
    /// an array job or a heterogeneous job); None at submission.
    pub job_id: Option<u32>,
    /// The job's owner; None when not set (e.g. in most update requests): the submitter.
    pub user_id: Option<u32>,
    /// `--nice`, signed.
    pub nice: Option<i32>,
    pub tres_per_job: Option<String>,
    pub tres_per_node: Option<String>,
    pub tres_per_task: Option<String>,
    pub tres_per_socket: Option<String>,
    pub time_limit: Option<TimeLimit>,
    /// A comma list; None = the default partition.
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub min_nodes: Option<u32>,
    pub num_tasks: Option<u32>,
    pub ntasks_per_node: Option<u16>,
    pub sockets_per_node: Option<u16>,
    /// `--array`, e.g. `0-99%4`.
    pub array_inx: Option<String>,
    /// `--gpu-tokens-estimate` (the SPANK plugin puts `GPUTOKENS_ESTIMATE=1` in the job's SPANK environment).
    pub wants_estimate: bool,
    /// `sbatch --test-only` (the SPANK plugin puts `GPUTOKENS_QUOTE=1` there): the job is quoted.
    /// It only asks for words: a real job carrying the variable is judged as any other.
    pub wants_quote: bool,
    /// A batch job (it has a script): None where the request does not say (an update).
    pub batch: Option<bool>,
    /// What it asks for beside its GPUs, which `[prices] stranded` counts: `--mincpus`-style
    /// totals and counts per task, node and GPU, memory, and `--exclusive`.
    pub cpus: CpuRequest,
}

/// The CPUs and memory a job description asks for (None = not given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuRequest {
    /// `min_cpus`: the CPUs of the whole job.
    pub min_cpus: Option<u32>,
    pub cpus_per_task: Option<u16>,
    /// `pn_min_cpus`: CPUs on each node.
    pub cpus_per_node: Option<u16>,
    /// `--cpus-per-gpu` (`cpus_per_tres`, e.g. `gres/gpu:8`).
    pub cpus_per_tres: Option<String>,
    pub memory: Option<Memory>,
    /// `--mem-per-gpu` (`mem_per_tres`, e.g. `gres/gpu:4096`, MB).
    pub mem_per_tres: Option<String>,
    /// `--exclusive`: whole nodes, every CPU on them.
    pub exclusive: bool,
}

/// `--mem` (per node; 0 = all of it) or `--mem-per-cpu`, in MB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    PerNode(u64),
    PerCpu(u64),
}

impl JobRequest {
    /// The GPU counts of the `tres_per_*` fields.
    pub fn gpus(&self) -> Result<GpuRequest, RequestError> {
        GpuRequest::parse(&TresPer {
            job: self.tres_per_job.as_deref(),
            node: self.tres_per_node.as_deref(),
            task: self.tres_per_task.as_deref(),
            socket: self.tres_per_socket.as_deref(),
        })
    }

    /// `--time` in seconds; None when not given or UNLIMITED (the partition's limit applies).
    pub fn time_limit_secs(&self) -> Option<u64> {
        self.time_limit.and_then(TimeLimit::seconds)
    }

    /// Nodes, when a positive number is given (0 counts as not given).
    pub fn nodes(&self) -> Option<u64> {
        self.min_nodes.filter(|&n| n > 0).map(u64::from)
    }

    /// Tasks, when given: `--ntasks`, else `--ntasks-per-node` × `nodes`.
    pub fn tasks(&self, nodes: u64) -> Option<u64> {
        let per_node = || self.ntasks_per_node.filter(|&t| t > 0).map(|t| t as u64 * nodes);
        self.num_tasks.filter(|&n| n > 0).map(u64::from).or_else(per_node)
    }

    /// Sockets per node, when a positive number is given.
    pub fn sockets_per_node(&self) -> Option<u64> {
        self.sockets_per_node.filter(|&s| s > 0).map(u64::from)
    }

    /// The shape of a new job: what is not given counts once.
    pub fn shape(&self) -> JobShape {
        let nodes = self.nodes().unwrap_or(1);
        JobShape {
            nodes,
            tasks: self.tasks(nodes).unwrap_or(1),
            sockets_per_node: self.sockets_per_node().unwrap_or(1),
            array_tasks: self.array_inx.as_deref().and_then(array_task_count).unwrap_or(1),
        }
    }

    /// What one array task of the job holds beside its `gpus` (whole GPUs, of one task) on all its
    /// nodes, where the description says: CPUs, and memory in MB. `u64::MAX` stands for all of its
    /// nodes' (`--exclusive`, `--mem=0`). sbatch fills `min_cpus` itself (its tasks × CPUs per task),
    /// so what it says is read as asked.
    pub fn held(&self, gpus: u64) -> Held {
        let c = &self.cpus;
        let shape = self.shape();
        let nodes = shape.nodes;
        let per_gpu = |text: &Option<String>| text.as_deref().and_then(per_gpu_amount).map(|n| n.saturating_mul(gpus));
        let cpus = [
            c.min_cpus.filter(|&n| n > 0).map(u64::from),
            c.cpus_per_task.filter(|&n| n > 0).map(|n| u64::from(n).saturating_mul(shape.tasks)),
            c.cpus_per_node.filter(|&n| n > 0).map(|n| u64::from(n).saturating_mul(nodes)),
            per_gpu(&c.cpus_per_tres),
        ]
        .into_iter()
        .flatten()
        .max();
        // --exclusive: all of its nodes, whatever else it says.
        if c.exclusive {
            return Held { cpus: Some(u64::MAX), mem_mb: Some(u64::MAX) };
        }
        let mem_mb = match c.memory {
            Some(Memory::PerNode(0)) => Some(u64::MAX),
            Some(Memory::PerNode(mb)) => Some(mb.saturating_mul(nodes)),
            Some(Memory::PerCpu(mb)) => Some(mb.saturating_mul(cpus.filter(|&n| n != u64::MAX).unwrap_or(shape.tasks))),
            None => per_gpu(&c.mem_per_tres),
        };
        Held { cpus, mem_mb }
    }

    /// Whether (an update) sets a time limit, nodes, tasks or sockets: what a job's GPUs and cost
    /// scale with.
    pub fn sets_shape_or_time(&self) -> bool {
        self.time_limit.is_some()
            || self.min_nodes.is_some()
            || self.num_tasks.is_some()
            || self.ntasks_per_node.is_some()
            || self.sockets_per_node.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_given_counts_once() {
        assert_eq!(JobRequest::default().shape(), JobShape::default());
        let zeros = JobRequest {
            min_nodes: Some(0),
            num_tasks: Some(0),
            ntasks_per_node: Some(0),
            sockets_per_node: Some(0),
            ..Default::default()
        };
        assert_eq!(zeros.shape(), JobShape::default(), "0 is not a count");
        assert!(zeros.sets_shape_or_time(), "but an update that says 0 sets it");
    }

    #[test]
    fn tasks_per_node_scale_with_the_nodes() {
        let job = JobRequest {
            min_nodes: Some(2),
            ntasks_per_node: Some(4),
            sockets_per_node: Some(2),
            array_inx: Some("0-9".into()),
            ..Default::default()
        };
        assert_eq!(job.shape(), JobShape { nodes: 2, tasks: 8, sockets_per_node: 2, array_tasks: 10 });
        let both = JobRequest { num_tasks: Some(3), ..job };
        assert_eq!(both.shape().tasks, 3, "--ntasks wins");
    }

    #[test]
    fn what_a_job_holds_beside_its_gpus() {
        let job = |cpus: CpuRequest| JobRequest { cpus, num_tasks: Some(2), min_nodes: Some(1), ..Default::default() };
        assert_eq!(job(CpuRequest::default()).held(1), Held::default(), "nothing said: nothing counted");
        let per_task = job(CpuRequest { cpus_per_task: Some(8), ..Default::default() });
        assert_eq!(per_task.held(1).cpus, Some(16));
        let most = CpuRequest { min_cpus: Some(20), cpus_per_task: Some(8), ..Default::default() };
        assert_eq!(job(most).held(1).cpus, Some(20), "the largest of what is said");
        let per_gpu = CpuRequest { cpus_per_tres: Some("gres/gpu:12".into()), ..Default::default() };
        assert_eq!(job(per_gpu).held(2).cpus, Some(24));
        let per_gpu_22 = CpuRequest { cpus_per_tres: Some("gres:gpu:a6000:6".into()), ..Default::default() };
        assert_eq!(job(per_gpu_22).held(1).cpus, Some(6), "22.05's spelling, with a type");
        let exclusive = CpuRequest { exclusive: true, cpus_per_task: Some(2), ..Default::default() };
        assert_eq!(job(exclusive).held(1), Held { cpus: Some(u64::MAX), mem_mb: Some(u64::MAX) }, "all of its node");
        let mem = |memory| job(CpuRequest { memory: Some(memory), cpus_per_task: Some(4), ..Default::default() });
        assert_eq!(mem(Memory::PerNode(8000)).held(1).mem_mb, Some(8000));
        assert_eq!(mem(Memory::PerNode(0)).held(1).mem_mb, Some(u64::MAX), "--mem=0: all of it");
        assert_eq!(mem(Memory::PerCpu(1000)).held(1).mem_mb, Some(8000), "8 CPUs");
        let mem_per_gpu = CpuRequest { mem_per_tres: Some("gres/gpu:4096".into()), ..Default::default() };
        assert_eq!(job(mem_per_gpu).held(2).mem_mb, Some(8192));
    }

    #[test]
    fn time_limits() {
        assert_eq!(
            JobRequest { time_limit: Some(TimeLimit::Minutes(90)), ..Default::default() }.time_limit_secs(),
            Some(5400)
        );
        assert_eq!(JobRequest { time_limit: Some(TimeLimit::Unlimited), ..Default::default() }.time_limit_secs(), None);
        assert_eq!(JobRequest::default().time_limit_secs(), None);
        assert!(!JobRequest::default().sets_shape_or_time());
        assert_eq!(TimeLimit::Minutes(u32::MAX).seconds(), Some(u32::MAX as u64 * 60), "no overflow");
    }
}
