//! `sinfo -N`'s view of the nodes: each one's CPUs, memory and GPUs (`[prices] stranded`), and the
//! GPUs no job holds (what a quote offers).

use std::collections::{BTreeMap, HashMap};

use super::squeue::QueueJob;
use crate::stranding::NodeShape;

/// Each node's shape from `sinfo -N -h -o '%N|%c|%m|%G'` (a node in several partitions is listed
/// once for each; GRES such as `gpu:rtx2080:4,gpu:a6000:2(S:0),shard:8`, shards and MPS left out).
pub fn node_shapes(sinfo: &str) -> HashMap<String, NodeShape> {
    let mut shapes = HashMap::new();
    for line in sinfo.lines() {
        let mut fields = line.split('|').map(str::trim);
        let (Some(node), Some(cpus), Some(mem), Some(gres)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (Ok(cpus), Ok(mem_mb)) = (cpus.parse::<u64>(), mem.trim_end_matches('+').parse::<u64>()) else { continue };
        let mut gpus = super::squeue::alloc_from_gres_detail(std::iter::once(gres));
        (gpus.shards, gpus.mps) = Default::default();
        let milli_gpus = gpus.milli_by_type(super::sacct::UNTYPED, Default::default());
        shapes.insert(node.to_string(), NodeShape { cpus, mem_mb, milli_gpus });
    }
    shapes
}

/// The arguments of the sinfo that [`free_gpus`] reads.
pub const NODE_STATES_ARGS: [&str; 5] = ["--all", "-h", "-N", "-o", "%N|%G|%t|%C"];

/// Whether a node in this sinfo `%t` state, with these `%C` CPUs (allocated/idle/other/total),
/// takes a new job now: idle or mixed with a CPU idle; not draining, down, not responding (`*`),
/// in a maintenance reservation (`$`), about to reboot (`@`, `^`) or to power down (`%`, `!`).
/// Powered down (`~`), powering up (`#`) or planned for a pending job (`-`) counts, as Slurm starts it.
fn takes_jobs(state: &str, cpus: &str) -> bool {
    let idle_cpus = cpus.split('/').nth(1).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    idle_cpus > 0
        && !state.contains(['*', '$', '@', '^', '%', '!'])
        && matches!(state.trim_end_matches(['~', '#', '-']), "idle" | "mix")
}

/// GPUs of each type, by GPU type.
pub type GpusByType = BTreeMap<String, u64>;

/// Whole GPUs no running job holds on nodes taking jobs: in all, and in each partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeGpus {
    pub total: GpusByType,
    /// Each partition of `partition_nodes` with its nodes' free GPUs (none free: an empty map).
    pub by_partition: BTreeMap<String, GpusByType>,
}

/// Whole GPUs of each type that no running job holds on nodes taking jobs, from sinfo's
/// `%N|%G|%t|%C` (`text`, [`NODE_STATES_ARGS`]) and the queue, in all and in each partition of
/// `partition_nodes` (its nodes, expanded). A job takes its GPUs from its node; a job on several
/// nodes (`n[1-2]`) what squeue shows it holds on each (else an even share of them), or, where its
/// node list does not expand, from the total (and then from no partition: a quote may offer a
/// partition's GPUs such a job holds).
pub fn free_gpus(text: &str, jobs: &[QueueJob], partition_nodes: &HashMap<String, Vec<String>>) -> FreeGpus {
    let mut per_node: BTreeMap<&str, GpusByType> = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split('|').map(str::trim);
        let (Some(node), Some(gres), Some(state), Some(cpus)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if takes_jobs(state, cpus) {
            let gpus = super::squeue::alloc_from_gres_detail(std::iter::once(gres)).gpus;
            per_node.insert(node, gpus.by_type(super::sacct::UNTYPED));
        }
    }
    let mut spread = GpusByType::new();
    for job in jobs.iter().filter(|j| j.state == "RUNNING") {
        let held = &job.alloc.gpus.typed;
        let nodes = match per_node.contains_key(job.nodes.as_str()) {
            true => Some(vec![job.nodes.clone()]),
            false => super::hostlist::expand(&job.nodes).filter(|n| n.len() > 1),
        };
        let Some(nodes) = nodes else {
            if job.node_count > 1 {
                held.iter().for_each(|(t, n)| *spread.entry(t.clone()).or_default() += n);
            }
            continue;
        };
        let count = nodes.len() as u64;
        for (i, node) in nodes.iter().enumerate() {
            let Some(left) = per_node.get_mut(node.as_str()) else { continue };
            for (gpu_type, n) in held {
                let on_node = match job.gpus_by_node.len() == nodes.len() {
                    true => job.gpus_by_node[i].get(gpu_type).copied().unwrap_or(0),
                    // An even share from each node, the rest from the first ones.
                    false => n / count + u64::from((i as u64) < n % count),
                };
                let free = left.entry(gpu_type.clone()).or_default();
                *free = free.saturating_sub(on_node);
            }
        }
    }
    let sum = |nodes: &mut dyn Iterator<Item = &GpusByType>| {
        let mut free = GpusByType::new();
        for (gpu_type, n) in nodes.flatten() {
            *free.entry(gpu_type.clone()).or_default() += n;
        }
        free
    };
    let mut total = sum(&mut per_node.values());
    for (gpu_type, n) in spread {
        if let Some(left) = total.get_mut(&gpu_type) {
            *left = left.saturating_sub(n);
        }
    }
    let by_partition = partition_nodes
        .iter()
        .map(|(name, nodes)| (name.clone(), sum(&mut nodes.iter().filter_map(|n| per_node.get(n.as_str())))))
        .collect();
    FreeGpus { total, by_partition }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_shapes_are_read_from_sinfo() {
        let sinfo = "vm|16|8000|gpu:rtx2080:4,gpu:rtx3090:2,gpu:a6000:2(S:0),shard:8\n\
                     vm|16|8000|gpu:rtx2080:4,gpu:rtx3090:2,gpu:a6000:2(S:0),shard:8\n\
                     cpu1|64|256000|(null)\n\
                     broken|x|1|(null)\n";
        let shapes = node_shapes(sinfo);
        assert_eq!(shapes.len(), 2, "{shapes:?}");
        let vm = &shapes["vm"];
        assert_eq!((vm.cpus, vm.mem_mb, vm.gpus()), (16, 8000, 8));
        assert_eq!(vm.milli_gpus["a6000"], 2000, "{vm:?}");
        assert_eq!((shapes["cpu1"].cpus, shapes["cpu1"].gpus()), (64, 0));
    }

    #[test]
    fn free_gpus_are_those_of_nodes_taking_jobs_that_no_running_job_holds() {
        let sinfo = "vm|gpu:rtx2080:4,gpu:a6000:2(S:0)|mix|4/12/0/16\n\
                     n2|gpu:a6000:2|drain|0/16/0/16\n\
                     n3|gpu:a6000:2|idle*|0/16/0/16\n\
                     n4|gpu:a6000:2|idle~|0/16/0/16\n\
                     n5|gpu:a6000:2|mix|16/0/0/16\n\
                     n6|gpu:a6000:2|idle$|0/16/0/16\n";
        let job = |id: &str, state: &str, nodes: &str, detail: &str| {
            let json = format!(
                r#"{{"jobs":[{{"job_id":{id},"user_name":"u","job_state":"{state}","nodes":"{nodes}","node_count":1,"gres_detail":["{detail}"]}}]}}"#
            );
            crate::slurm::squeue::queue(&json).unwrap().remove(0)
        };
        let jobs = [
            job("1", "RUNNING", "vm", "gpu:a6000:1(IDX:4)"),
            job("2", "RUNNING", "n2", "gpu:a6000:2(IDX:0-1)"),
            job("3", "PENDING", "", ""),
        ];
        let free = free_gpus(sinfo, &jobs, &HashMap::new());
        // vm: 4 rtx2080 and 1 a6000 left; n4 powered down but starts for a job: 2; n2 draining, n3
        // not responding, n5 with every CPU taken and n6 in a maintenance reservation: none.
        assert_eq!(free.total, BTreeMap::from([("a6000".to_string(), 3), ("rtx2080".to_string(), 4)]));
    }

    #[test]
    fn each_partition_counts_the_free_gpus_of_its_own_nodes() {
        let sinfo = "n1|gpu:a6000:4|mix|4/12/0/16\n\
                     n2|gpu:a6000:4|mix|4/12/0/16\n\
                     n3|gpu:a6000:4|idle|0/16/0/16\n\
                     n4|gpu:rtx2080:4|drain|0/16/0/16\n";
        let job = |id: &str, nodes: &str, count: u64, detail: &str| {
            let json = format!(
                r#"{{"jobs":[{{"job_id":{id},"user_name":"u","job_state":"RUNNING","nodes":"{nodes}","node_count":{count},"gres_detail":["{detail}"]}}]}}"#
            );
            crate::slurm::squeue::queue(&json).unwrap().remove(0)
        };
        // 3 a6000s on n1 and n2 together (squeue shows 1 on n1, 2 on n2); 1 on n1 alone; 2 on n1 and
        // n3 without a detail per node (an even share: 1 from each).
        let jobs = [
            job("1", "n[1-2]", 2, r#"gpu:a6000:1(IDX:0)","gpu:a6000:2(IDX:0-1)"#),
            job("2", "n1", 1, "gpu:a6000:1(IDX:3)"),
            job("3", "n[1,3]", 2, "gpu:a6000:2(IDX:1-2)"),
        ];
        let partitions = HashMap::from([
            ("big".to_string(), vec!["n1".to_string(), "n2".to_string(), "n3".to_string(), "n4".to_string()]),
            ("first".to_string(), vec!["n1".to_string()]),
            ("second".to_string(), vec!["n2".to_string()]),
            ("old".to_string(), vec!["n4".to_string()]),
        ]);
        let free = free_gpus(sinfo, &jobs, &partitions);
        let a6000 = |n: u64| BTreeMap::from([("a6000".to_string(), n)]);
        // n1: 4 - 1 - 1 - 1; n2: 4 - 2; n3: 4 - 1.
        assert_eq!(free.total, a6000(1 + 2 + 3));
        assert_eq!(free.by_partition["big"], a6000(6));
        assert_eq!(free.by_partition["first"], a6000(1), "{free:?}");
        assert_eq!(free.by_partition["second"], a6000(2));
        assert_eq!(free.by_partition["old"], BTreeMap::new(), "a draining node takes no job");
    }
}
