//! The most a job can cost where the site prices what a job strands (`[prices] stranded`): before it
//! runs its nodes are not known, so its share is weighed against each node shape that has the GPUs
//! it asks for, and the worst one counts (an estimate is a maximum, never a prediction). The charge
//! itself prices the nodes the job ran on (`stranded_price`).

use std::collections::BTreeMap;

use crate::pricing::PriceTable;
use crate::stranded_price::stranding;
use crate::stranding::{Held, NodeShape, Stranding};

/// Milli-GPUs by GPU type (None = any type), as `estimate::MilliByType`.
type MilliByType = BTreeMap<Option<String>, u64>;

/// What one array task of a job holds beside its GPUs, on how many nodes, and the node shapes
/// (with GPUs) it may run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strands {
    held: Held,
    nodes: u64,
    shapes: Vec<NodeShape>,
}

impl Strands {
    /// None where nothing can strand: the job says no CPUs or memory, or no node has GPUs.
    pub fn new(held: Held, nodes: u64, shapes: &[NodeShape]) -> Option<Strands> {
        let shapes: Vec<NodeShape> = shapes.iter().filter(|s| s.gpus() > 0).cloned().collect();
        let says = held.cpus.is_some() || held.mem_mb.is_some();
        (says && !shapes.is_empty()).then(|| Strands { held, nodes: nodes.max(1), shapes })
    }

    /// The worst the site's rule makes of one array task asking for `per_task` (milli-GPUs by type;
    /// None: any type) on any node shape that has those types: the largest surcharge, or None where
    /// its own GPUs price it on every one.
    pub fn worst(&self, per_task: &MilliByType, prices: &PriceTable) -> Option<Stranding> {
        self.shapes
            .iter()
            .filter_map(|shape| {
                let own = on_shape(per_task, shape, prices)?;
                // As many nodes of the shape as it asks for, or as its CPUs and memory need, as one.
                let nodes = self.nodes_of(shape);
                let names = match nodes {
                    1 => "a node it may run on".to_string(),
                    n => format!("{n} nodes it may run on"),
                };
                let all = NodeShape {
                    cpus: shape.cpus.saturating_mul(nodes),
                    mem_mb: shape.mem_mb.saturating_mul(nodes),
                    milli_gpus: shape.milli_gpus.iter().map(|(t, m)| (t.clone(), m.saturating_mul(nodes))).collect(),
                };
                stranding(&own, self.held, &[&all], &names, prices, prices.stranded())
            })
            .max_by_key(|s| s.surcharge)
    }

    /// Nodes of `shape` the job takes: those it asks for, or more where its CPUs or memory do not fit
    /// on fewer (all of a node counts as one).
    fn nodes_of(&self, shape: &NodeShape) -> u64 {
        let fit = |held: Option<u64>, per_node: u64| match held {
            Some(held) if held != u64::MAX && per_node > 0 => held.div_ceil(per_node),
            _ => 1,
        };
        self.nodes.max(fit(self.held.cpus, shape.cpus)).max(fit(self.held.mem_mb, shape.mem_mb))
    }

    /// [`Strands::worst`] for the same GPUs all of `gpu_type`: what a quote and `retry_after` weigh
    /// another type by.
    pub fn worst_on(&self, gpu_type: &str, milli: u64, prices: &PriceTable) -> Option<Stranding> {
        self.worst(&BTreeMap::from([(Some(gpu_type.to_string()), milli)]), prices)
    }
}

/// The request's GPUs as types the shape has (an untyped count as its dearest type); None where
/// the shape lacks a type asked for.
fn on_shape(per_task: &MilliByType, shape: &NodeShape, prices: &PriceTable) -> Option<BTreeMap<String, u64>> {
    let mut own = BTreeMap::new();
    for (gpu_type, &milli) in per_task {
        let on_node = match gpu_type {
            Some(t) => shape.milli_gpus.keys().find(|k| k.eq_ignore_ascii_case(t))?,
            None => shape.milli_gpus.keys().max_by_key(|k| prices.applied(k).per_gpu_hour)?,
        };
        *own.entry(on_node.clone()).or_default() += milli;
    }
    Some(own)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stranding::Part;
    use crate::tokens::Tokens;
    use crate::tres::MILLI;

    fn prices() -> PriceTable {
        let p = [("rtx2080", 500_000), ("rtx3090", 1_000_000), ("a6000", 4_000_000)];
        PriceTable::new(p.iter().map(|(t, m)| (t.to_string(), Tokens::from_micro(*m))).collect(), None)
            .with_stranded(vec![Part::Cpus])
    }

    fn shape(cpus: u64, gpus: &[(&str, u64)]) -> NodeShape {
        NodeShape { cpus, mem_mb: 8000, milli_gpus: gpus.iter().map(|(t, n)| (t.to_string(), n * MILLI)).collect() }
    }

    fn asked(gpu_type: Option<&str>, gpus: u64) -> MilliByType {
        BTreeMap::from([(gpu_type.map(str::to_string), gpus * MILLI)])
    }

    #[test]
    fn the_worst_shape_with_the_asked_type_counts() {
        // 8 rtx3090 on 16 CPUs, or 2 rtx3090 and 2 a6000 on 64.
        let shapes = [shape(16, &[("rtx3090", 8)]), shape(64, &[("rtx3090", 2), ("a6000", 2)]), shape(32, &[])];
        let all_16 = Strands::new(Held { cpus: Some(16), mem_mb: None }, 1, &shapes).unwrap();
        let s = all_16.worst(&asked(Some("rtx3090"), 1), &prices()).unwrap();
        // On the first: all 16 CPUs stand for its 8 GPUs, 7 idle rtx3090 (7/h); on the second a
        // quarter, 1 GPU: nothing idle. The first is the worst.
        assert_eq!((s.held, s.of, s.idle_milli, s.surcharge), (16, 16, 7000, Tokens::whole(7)));
        assert_eq!(s.nodes, "a node it may run on");
        // a6000 only on the second: a quarter of it is its own GPU.
        assert_eq!(all_16.worst(&asked(Some("A6000"), 1), &prices()), None);
        // --exclusive: every CPU of the second stands for its 4 GPUs; the other 3 cost 6 an hour.
        let whole = Strands::new(Held { cpus: Some(u64::MAX), mem_mb: None }, 1, &shapes).unwrap();
        let s = whole.worst_on("a6000", MILLI, &prices()).unwrap();
        assert_eq!((s.held, s.of, s.idle_milli, s.surcharge), (64, 64, 3000, Tokens::whole(6)));
        // Any type: the node's dearest; a type no node has: nothing known to strand.
        assert!(whole.worst(&asked(None, 1), &prices()).is_some());
        assert_eq!(whole.worst(&asked(Some("h100"), 1), &prices()), None);
    }

    #[test]
    fn nothing_strands_where_the_job_says_nothing_or_no_node_has_gpus() {
        let shapes = [shape(16, &[("rtx3090", 8)])];
        assert_eq!(Strands::new(Held::default(), 1, &shapes), None);
        assert_eq!(Strands::new(Held { cpus: Some(16), mem_mb: None }, 1, &[shape(16, &[])]), None);
        let two = Strands::new(Held { cpus: Some(16), mem_mb: None }, 2, &shapes).unwrap();
        let s = two.worst(&asked(Some("rtx3090"), 2), &prices()).unwrap();
        assert_eq!((s.held, s.of, s.idle_milli), (16, 32, 6000), "16 of 32 CPUs on two nodes stand for 8 of 16 GPUs");
        assert_eq!(s.nodes, "2 nodes it may run on");
        // 32 CPUs of no node count: on two of the first shape they stand for all 16 GPUs.
        let spread = Strands::new(Held { cpus: Some(32), mem_mb: None }, 1, &shapes).unwrap();
        let s = spread.worst(&asked(Some("rtx3090"), 1), &prices()).unwrap();
        assert_eq!((s.held, s.of, s.node_gpus, s.idle_milli), (32, 32, 16, 15_000));
    }
}
