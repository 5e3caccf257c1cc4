//! What Slurm says that bounds an agent's report: how many GPUs the node has (its `Gres` as sinfo
//! shows it; each MIG slice Slurm knows counts as one) and how many each job holds (its allocated
//! TRES as squeue shows them). A node's report may speak for no more GPUs than Slurm gave the
//! node, and a job's energy there for no more than its own GPUs could draw.

/// GPUs in a node's generic resources as sinfo's `%G` shows them, e.g.
/// `gpu:a6000:2(S:0-1),shard:a6000:8(S:0-1)` → 2, `gpu:4` → 4, `(null)` → 0. Shards and MPS
/// share the node's GPUs and add none.
pub fn node_gpus(gres: &str) -> u32 {
    let gpus = gputokens::slurm::squeue::alloc_from_gres_detail(std::iter::once(gres)).gpus.untyped;
    u32::try_from(gpus).unwrap_or(u32::MAX)
}

/// The GPUs a job holds in all, from its allocated TRES as squeue's `tres-alloc` shows them
/// (`cpu=2,mem=1G,node=1,billing=2,gres/gpu=2,gres/gpu:a6000=2` → 2); shards count as one GPU each
/// at most. None when they name no GPU count (AccountingStorageTRES without `gres/gpu`, or MPS,
/// whose count is a share of a GPU): then only the node's count bounds the job.
pub fn job_gpus(tres_alloc: &str) -> Option<u32> {
    let alloc = gputokens::tres::parse_alloc_tres(tres_alloc).ok()?;
    let total = |c: &gputokens::tres::Counts| c.typed.values().sum::<u64>().max(c.untyped);
    let (gpus, shards) = (total(&alloc.gpus), total(&alloc.shards));
    if total(&alloc.mps) > 0 || gpus.saturating_add(shards) == 0 {
        return None;
    }
    Some(u32::try_from(gpus.saturating_add(shards)).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_gpus_are_its_gpu_gres_slices_included() {
        assert_eq!(node_gpus("gpu:rtx2080:4,gpu:rtx3090:2,gpu:a6000:2,gpu:a100_3g.20gb:2"), 10);
        assert_eq!(node_gpus("gpu:a6000:2(S:0-1),shard:a6000:8(S:0-1)"), 2);
        assert_eq!(node_gpus("gpu:2(S:0,1),mps:200"), 2);
        assert_eq!(node_gpus("gpu:01001:1"), 1, "a numeric type name is a name");
        assert_eq!(node_gpus("(null)"), 0);
        assert_eq!(node_gpus(""), 0);
        assert_eq!(node_gpus("gpu:a100:4294967295,gpu:a100:9"), u32::MAX, "saturates");
    }

    #[test]
    fn a_jobs_gpus_come_from_its_allocated_tres() {
        assert_eq!(job_gpus("cpu=2,mem=1G,node=1,billing=2,gres/gpu=2,gres/gpu:a6000=2"), Some(2));
        assert_eq!(job_gpus("cpu=1,gres/gpu:a6000=1,gres/gpu=1"), Some(1));
        assert_eq!(job_gpus("cpu=1,gres/shard=3"), Some(3));
        assert_eq!(job_gpus("cpu=1,gres/gpu=1,gres/shard=2"), Some(3));
        assert_eq!(job_gpus("cpu=1,gres/mps=50"), None);
        assert_eq!(job_gpus("cpu=1,mem=100M,node=1"), None);
        assert_eq!(job_gpus(""), None);
    }
}
