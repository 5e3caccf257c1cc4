//! `sinfo -N`'s view of the nodes: each one's CPUs, memory and GPUs (`[prices] stranded`).

use std::collections::HashMap;

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
}
