//! GPU time a job held, as read from Slurm (sacct, squeue) and charged by the ledger.

use std::collections::BTreeMap;

/// GPU time held by one run segment of one job, up to now (running) or to its end (finished).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRecord {
    pub job_id: String,
    pub user: String,
    /// The Slurm account the job ran under (sacct's Account); None where the source does not say.
    pub account: Option<String>,
    /// Unix start of this run segment (a requeued job has several).
    pub segment_start: i64,
    /// The run's SLUID (Slurm 25.11+: each run of a requeued job has its own); the ledger keys the
    /// run's charges by it, else by `segment_start`.
    pub sluid: Option<String>,
    /// Milli-GPUs held per lower-case GPU type (1000 = one GPU; shards and MPS are fractions).
    pub milli_gpus: BTreeMap<String, u64>,
    /// Seconds held so far.
    pub elapsed: u64,
    /// Nodes the run holds (AllocTRES `node=`; 1 where Slurm does not say): each is sampled apart.
    pub nodes: u32,
    /// Share of the price charged, in permille: 1000 charges the allocation; less with
    /// `charge_basis = "measured"` (see [`crate::pricing::weighted_price`]).
    pub weight_permille: u32,
    /// CPUs and memory the run holds, which `[prices] stranded` weighs against its nodes'.
    pub held: crate::stranding::Held,
    /// Where `[prices] stranded` prices the run by the GPUs it leaves idle rather than by its own:
    /// why, and by how much (accountd sets it before charging).
    pub stranding: Option<crate::stranding::Stranding>,
    /// A borrowed run (`[lending]`): reclaimed (charged nothing) or finished (at the site's
    /// discount); accountd sets it before charging.
    pub lent: Option<crate::lending::Lent>,
}
