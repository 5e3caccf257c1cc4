//! The price of a job that strands GPUs (`[prices] stranded`, see `stranding`): its share of its
//! nodes' GPUs against its own, each GPU type at its price.

use std::collections::BTreeMap;

use crate::pricing::PriceTable;
use crate::stranding::{Held, NodeShape, Part, Stranding};
use crate::tokens::Tokens;
use crate::tres::MILLI;

/// Tokens an hour for `milli` milli-GPUs at `per_gpu_hour`, exact in micro-token thousandths.
fn per_hour_exact(per_gpu_hour: Tokens, milli: u64) -> i128 {
    i128::from(per_gpu_hour.micro()) * i128::from(milli)
}

/// Exact thousandths of micro-tokens, rounded up to the micro-token.
fn rounded_up(exact: i128) -> Tokens {
    let milli = i128::from(MILLI);
    let micro = exact.div_euclid(milli) + i128::from(exact.rem_euclid(milli) != 0);
    Tokens::from_micro(i64::try_from(micro).unwrap_or(i64::MAX))
}

/// How a job of `milli_gpus` holding `held` on `nodes` (named `names`) is priced where the site
/// counts `parts`: Some where its share of the nodes by one of them stands for more GPUs than its
/// own (the part standing for most), None where its own GPUs price it (or the nodes are unknown).
/// The share is of the nodes with GPUs: CPUs held on a node without any (a job spread onto a CPU
/// node) never dilute it. The GPUs beyond its own are priced at the mean price of the nodes' GPUs
/// it does not hold.
pub fn stranding(
    milli_gpus: &BTreeMap<String, u64>,
    held: Held,
    nodes: &[&NodeShape],
    names: &str,
    prices: &PriceTable,
    parts: &[Part],
) -> Option<Stranding> {
    let own_milli: u64 = milli_gpus.values().sum();
    let with_gpus: Vec<&NodeShape> = nodes.iter().copied().filter(|n| n.gpus() > 0).collect();
    if with_gpus.is_empty() || parts.is_empty() || own_milli == 0 {
        return None;
    }
    let price = |gpu_type: &str| prices.applied(gpu_type).per_gpu_hour;
    let mut node_milli: BTreeMap<&str, u64> = BTreeMap::new();
    for (gpu_type, &m) in with_gpus.iter().flat_map(|n| n.milli_gpus.iter()) {
        let slot = node_milli.entry(gpu_type).or_default();
        *slot = slot.saturating_add(m);
    }
    let all_milli: u64 = node_milli.values().fold(0, |sum, &m| sum.saturating_add(m));
    // The nodes' GPUs the job does not hold, and what they cost an hour.
    let others = node_milli.iter().map(|(t, &m)| (*t, m.saturating_sub(milli_gpus.get(*t).copied().unwrap_or(0))));
    let (others_milli, others_cost) = others.fold((0u64, 0i128), |(n, cost), (t, m)| {
        (n.saturating_add(m), cost.saturating_add(per_hour_exact(price(t), m)))
    });
    let share_of = |part: Part| -> Option<(u64, u64)> {
        let (held, of) = match part {
            Part::Cpus => (held.cpus?, with_gpus.iter().fold(0u64, |sum, n| sum.saturating_add(n.cpus))),
            Part::Memory => (held.mem_mb?, with_gpus.iter().fold(0u64, |sum, n| sum.saturating_add(n.mem_mb))),
        };
        (of > 0).then_some((held.min(of), of))
    };
    let (by, (held, of), share_milli) = parts
        .iter()
        .filter_map(|&part| {
            let (held, of) = share_of(part)?;
            let share = u128::from(all_milli) * u128::from(held) / u128::from(of);
            Some((part, (held, of), u64::try_from(share).ok()?))
        })
        .max_by_key(|(_, _, share)| *share)?;
    let idle_milli = share_milli.saturating_sub(own_milli).min(others_milli);
    let idle = others_cost.checked_mul(i128::from(idle_milli))? / i128::from(others_milli.max(1));
    // Idle GPUs priced 0 cost nothing: nothing to add, nothing to say.
    if idle <= 0 {
        return None;
    }
    // Per GPU-hour of its own (micro-tokens): idle is in micro-token thousandths an hour.
    let surcharge = idle.div_euclid(i128::from(own_milli)) + i128::from(idle.rem_euclid(i128::from(own_milli)) != 0);
    Some(Stranding {
        by,
        held,
        of,
        nodes: names.to_string(),
        node_gpus: all_milli / MILLI,
        share_milli,
        idle_milli,
        idle_per_hour: rounded_up(idle),
        surcharge: Tokens::from_micro(i64::try_from(surcharge).ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stranding::beyond_own_gpus;

    fn prices() -> PriceTable {
        let p = [("rtx2080", 500_000), ("rtx3090", 1_000_000), ("a6000", 4_000_000)];
        PriceTable::new(p.iter().map(|(t, m)| (t.to_string(), Tokens::from_micro(*m))).collect(), None)
    }

    fn gpus(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
        list.iter().map(|(t, n)| (t.to_string(), n * MILLI)).collect()
    }

    /// The test cluster's node: 16 CPUs, 8000 MB, 4 rtx2080, 2 rtx3090 and 2 a6000 (12 tokens/h).
    fn vm() -> NodeShape {
        NodeShape { cpus: 16, mem_mb: 8000, milli_gpus: gpus(&[("rtx2080", 4), ("rtx3090", 2), ("a6000", 2)]) }
    }

    #[test]
    fn a_job_holding_every_cpu_pays_for_every_gpu_of_its_node() {
        let node = vm();
        let held = Held { cpus: Some(16), mem_mb: None };
        let s = stranding(&gpus(&[("rtx3090", 1)]), held, &[&node], "vm", &prices(), &[Part::Cpus]).unwrap();
        assert_eq!((s.by, s.held, s.of, s.node_gpus, s.idle_milli), (Part::Cpus, 16, 16, 8, 7000));
        // The 7 others: 4 rtx2080, 1 rtx3090 and 2 a6000, 11/h; on its one GPU-hour, +11.
        assert_eq!((s.idle_per_hour, s.surcharge), (Tokens::whole(11), Tokens::whole(11)));
        assert_eq!(s.surcharged(Tokens::whole(1)), Some(Tokens::whole(12)));
        assert_eq!(
            s.to_string(),
            "priced by its CPUs: 16 of the 16 on vm stand for 8 of its 8 GPUs, so 11/GPU-hour is added for the 7 it \
             leaves idle"
        );
    }

    #[test]
    fn a_fair_share_of_cpus_is_priced_by_its_gpus() {
        let node = vm();
        // 2 of 16 CPUs and 1000 of 8000 MB: an eighth of the node, as many as its one GPU.
        let held = Held { cpus: Some(2), mem_mb: Some(1000) };
        let parts = [Part::Cpus, Part::Memory];
        assert_eq!(stranding(&gpus(&[("a6000", 1)]), held, &[&node], "vm", &prices(), &parts), None);
        // A cheap GPU beside dear ones is still a GPU: its share of the node's value is no matter.
        assert_eq!(stranding(&gpus(&[("rtx2080", 1)]), held, &[&node], "vm", &prices(), &parts), None);
        // 3 CPUs stand for 1.5 GPUs: half a GPU more, at the mean of the node's other 7 (11.5/7 a GPU-hour).
        let more = Held { cpus: Some(3), mem_mb: None };
        let s = stranding(&gpus(&[("rtx2080", 1)]), more, &[&node], "vm", &prices(), &parts).unwrap();
        assert_eq!((s.share_milli, s.idle_milli, s.surcharge), (1500, 500, Tokens::from_micro(821_429)));
        // Off, or the nodes unknown: never priced by them.
        let all = Held { cpus: Some(16), mem_mb: Some(8000) };
        assert_eq!(stranding(&gpus(&[("rtx2080", 1)]), all, &[&node], "vm", &prices(), &[]), None);
        assert_eq!(stranding(&gpus(&[("rtx2080", 1)]), all, &[], "vm", &prices(), &parts), None);
    }

    #[test]
    fn the_part_standing_for_most_gpus_prices_and_every_type_gets_the_same_surcharge() {
        let node = vm();
        // 4 of 16 CPUs (2 GPUs, its own) but 6000 of 8000 MB (6 GPUs): memory prices it, 4 GPUs
        // more at the mean of the 6 it does not hold (10.5/h for 6): 7/h, 3.5 on each of its 2.
        let held = Held { cpus: Some(4), mem_mb: Some(6000) };
        let own = gpus(&[("rtx2080", 1), ("rtx3090", 1)]);
        let s = stranding(&own, held, &[&node], "vm", &prices(), &[Part::Cpus, Part::Memory]).unwrap();
        assert_eq!((s.by, s.held, s.of, s.share_milli), (Part::Memory, 6000, 8000, 6000));
        assert_eq!((s.idle_per_hour, s.surcharge), (Tokens::whole(7), Tokens::from_micro(3_500_000)));
        assert_eq!(s.surcharged(Tokens::from_micro(500_000)), Some(Tokens::whole(4)));
        assert!(s.to_string().starts_with("priced by its memory: 6000 MB of the 8000 MB on vm"), "{s}");
    }

    #[test]
    fn a_job_on_several_nodes_counts_those_with_gpus() {
        let (a, b) = (vm(), vm());
        // 16 of 32 CPUs: 8 of 16 GPUs; 6 beyond its own 2, at the mean of the 14 others (22/h):
        // 9.428571/h, 4.714286 on each of its 2 GPU-hours.
        let held = Held { cpus: Some(16), mem_mb: None };
        let s = stranding(&gpus(&[("rtx3090", 2)]), held, &[&a, &b], "2 nodes", &prices(), &[Part::Cpus]).unwrap();
        assert_eq!((s.held, s.of, s.node_gpus, s.share_milli), (16, 32, 16, 8000));
        assert_eq!((s.idle_per_hour, s.surcharge), (Tokens::from_micro(9_428_572), Tokens::from_micro(4_714_286)));
        // A CPU node beside the GPU node dilutes nothing: 16 of vm's 16 CPUs (and 200 elsewhere).
        let cpu_node = NodeShape { cpus: 256, mem_mb: 512_000, milli_gpus: BTreeMap::new() };
        let spread = Held { cpus: Some(216), mem_mb: None };
        let s = stranding(&gpus(&[("rtx3090", 1)]), spread, &[&a, &cpu_node], "2 nodes", &prices(), &[Part::Cpus]);
        assert_eq!(s.map(|s| (s.held, s.of, s.surcharge)), Some((16, 16, Tokens::whole(11))));
    }

    /// A GPU priced 0 beside priced ones strands at their price: the surcharge needs no price of
    /// its own to scale.
    #[test]
    fn a_free_gpu_type_strands_at_the_others_price() {
        let mut p = prices();
        p = PriceTable::new(
            p.types().map(|(t, m)| (t.to_string(), m)).chain([("t4".to_string(), Tokens::ZERO)]).collect(),
            None,
        );
        let node = NodeShape { cpus: 16, mem_mb: 8000, milli_gpus: gpus(&[("t4", 1), ("a6000", 2)]) };
        let s =
            stranding(&gpus(&[("t4", 1)]), Held { cpus: Some(16), mem_mb: None }, &[&node], "vm", &p, &[Part::Cpus]);
        assert_eq!(s.map(|s| s.surcharge), Some(Tokens::whole(8)));
    }

    /// A statement tells what of a charge its stranding cost from the reason written with it.
    #[test]
    fn what_a_charge_paid_beyond_its_own_gpus_is_read_back_from_its_reason() {
        let node = vm();
        let held = Held { cpus: Some(16), mem_mb: None };
        let s = stranding(&gpus(&[("rtx3090", 1)]), held, &[&node], "vm", &prices(), &[Part::Cpus]).unwrap();
        let reason = format!("1 × rtx3090 for 3600s at 12/GPU-hour; {s}");
        // 12 charged at 12/h of which 11 added: 11 of it for the GPUs left idle.
        assert_eq!(beyond_own_gpus(Tokens::whole(-12), &reason), Tokens::whole(11));
        assert_eq!(beyond_own_gpus(Tokens::whole(-4), "1 × a6000 for 3600s at 4/GPU-hour"), Tokens::ZERO);
    }
}
