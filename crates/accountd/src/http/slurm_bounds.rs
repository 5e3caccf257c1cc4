//! What Slurm says that bounds an agent's report: how many GPUs the node has (its `Gres` as sinfo
//! shows it; each MIG slice Slurm knows counts as one) and how many each job holds (its allocated
//! TRES as squeue shows them). A node's report may speak for no more GPUs than Slurm gave the
//! node, and a job's energy there for no more than its own GPUs could draw.

/// GPUs in a node's generic resources as sinfo's `%G` shows them, e.g.
/// `gpu:a6000:2(S:0-1),shard:a6000:8(S:0-1)` → 2, `gpu:4` → 4, `(null)` → 0. Shards and MPS
/// share the node's GPUs and add none.
pub fn node_gpus(gres: &str) -> u32 {
    top_level(gres)
        .iter()
        .filter_map(|entry| {
            let fields: Vec<&str> = entry.trim().split(':').collect();
            (fields.first() == Some(&"gpu")).then(|| match fields.as_slice() {
                [_] => 1,
                // `gpu:N`, `gpu:TYPE:N`; a type alone (`gpu:a6000`) is one.
                [.., last] => last.parse::<u32>().unwrap_or(1),
                [] => 0,
            })
        })
        .fold(0u32, u32::saturating_add)
}

/// The GPUs a job holds in all, from its allocated TRES as squeue's `tres-alloc` shows them
/// (`cpu=2,mem=1G,node=1,billing=2,gres/gpu=2,gres/gpu:a6000=2` → 2); shards count as one GPU each
/// at most. None when they name no GPU count (AccountingStorageTRES without `gres/gpu`, or MPS,
/// whose count is a share of a GPU): then only the node's count bounds the job.
pub fn job_gpus(tres_alloc: &str) -> Option<u32> {
    let mut gpus = None::<u32>;
    let mut shards = 0u32;
    for entry in tres_alloc.split(',') {
        let Some((name, count)) = entry.trim().split_once('=') else { continue };
        let Ok(count) = count.trim().parse::<u32>() else { continue };
        match name.trim() {
            "gres/gpu" => gpus = Some(count),
            "gres/shard" => shards = count,
            n if n == "gres/mps" || n.starts_with("gres/mps:") => return None,
            _ => {}
        }
    }
    match (gpus, shards) {
        (None, 0) => None,
        (gpus, shards) => Some(gpus.unwrap_or(0).saturating_add(shards)),
    }
}

/// The comma-separated entries of `text` outside parentheses, the parenthesized parts left out.
fn top_level(text: &str) -> Vec<String> {
    let (mut entries, mut current, mut depth) = (Vec::new(), String::new(), 0u32);
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => entries.push(std::mem::take(&mut current)),
            c if depth == 0 => current.push(c),
            _ => {}
        }
    }
    entries.push(current);
    entries.retain(|e| !e.trim().is_empty());
    entries
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
        assert_eq!(node_gpus("gpu"), 1);
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
