//! A job as the submit decision reads it: the fields of Slurm's job description (`job_desc_msg_t`)
//! that the rules look at, typed. Where Slurm writes "not given" as a sentinel number (NO_VAL,
//! NO_VAL16) this has None; `--time=UNLIMITED` (Slurm's INFINITE) is [`TimeLimit::Unlimited`]; nice
//! is the signed value `--nice` takes (Slurm stores NICE_OFFSET + nice). The job_submit plugin
//! converts in one place (`ffi::read_job`), so no Slurm sentinel reaches the rules.

use crate::gpu_request::{GpuRequest, RequestError, TresPer};
use crate::job_shape::{array_task_count, JobShape};

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
