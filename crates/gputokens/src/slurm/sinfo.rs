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

/// Whole GPUs of each type that no running job holds on nodes taking jobs, from sinfo's
/// `%N|%G|%t|%C` (`text`, [`NODE_STATES_ARGS`]) and the queue. A job on one such node takes its GPUs
/// from it; one on several nodes (`n[1-2]`) from the total.
pub fn free_gpus(text: &str, jobs: &[QueueJob]) -> BTreeMap<String, u64> {
    let mut per_node: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
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
    let mut spread: BTreeMap<String, u64> = BTreeMap::new();
    for job in jobs.iter().filter(|j| j.state == "RUNNING") {
        let held = job.alloc.gpus.typed.iter().map(|(t, n)| (t.clone(), *n));
        match per_node.get_mut(job.nodes.as_str()) {
            Some(node) => held.for_each(|(t, n)| {
                let left = node.entry(t).or_default();
                *left = left.saturating_sub(n);
            }),
            None if job.node_count > 1 => held.for_each(|(t, n)| *spread.entry(t).or_default() += n),
            None => {}
        }
    }
    let mut free: BTreeMap<String, u64> = BTreeMap::new();
    for (gpu_type, n) in per_node.into_values().flatten() {
        *free.entry(gpu_type).or_default() += n;
    }
    for (gpu_type, n) in spread {
        if let Some(left) = free.get_mut(&gpu_type) {
            *left = left.saturating_sub(n);
        }
    }
    free
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
        let free = free_gpus(sinfo, &jobs);
        // vm: 4 rtx2080 and 1 a6000 left; n4 powered down but starts for a job: 2; n2 draining, n3
        // not responding, n5 with every CPU taken and n6 in a maintenance reservation: none.
        assert_eq!(free, BTreeMap::from([("a6000".to_string(), 3), ("rtx2080".to_string(), 4)]));
    }
}
