//! Prices that count what a job strands (`[prices] stranded`): a GPU job holding more of its nodes'
//! CPUs or memory than its GPUs' share leaves the nodes' other GPUs idle, and pays for them. Such a
//! job is counted as the larger of its own GPUs and its share of its nodes' CPUs (or memory) times
//! the nodes' GPUs, as Slurm's `PriorityFlags=MAX_TRES` bills a job by its largest resource; the
//! GPUs beyond its own are the nodes' others, each type at its price (their mean). Off by default.
//!
//! The job's charge stays on the GPU types it held, each at its price scaled by the same factor
//! (what it strands over what its own GPUs cost), so the history, the usage per type and exactly-
//! once charging keep one row per type held; the entry's reason says which part priced it.
//!
//! Here: what is counted and what a charge says. The price itself is `stranded_price`'s; the
//! nodes' shapes are read from sinfo by `slurm::sinfo`.

use std::collections::BTreeMap;
use std::fmt;

use crate::tokens::Tokens;
use crate::tres::MILLI;

/// The CPUs and memory a job holds (its TRES string's `cpu=` and `mem=`); None where it does not
/// say (memory is absent where slurm.conf does not allocate it, e.g. `CR_Core`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub cpus: Option<u64>,
    pub mem_mb: Option<u64>,
}

impl Held {
    /// From a TRES string such as `billing=16,cpu=16,gres/gpu=1,mem=8000M,node=1`.
    pub fn from_tres(tres: &str) -> Held {
        let value = |key: &str| tres.split(',').find_map(|e| e.trim().strip_prefix(key)?.strip_prefix('='));
        Held {
            cpus: value("cpu").and_then(|v| v.parse().ok()).filter(|n| *n > 0),
            mem_mb: value("mem").and_then(megabytes).filter(|n| *n > 0),
        }
    }
}

/// A TRES memory amount (`8000M`, `1.50G`, `2T`, `512K`; a bare number is MB) in whole MB.
fn megabytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, per_unit) = match text.chars().last()? {
        'K' | 'k' => (&text[..text.len() - 1], 1.0 / 1024.0),
        'M' | 'm' => (&text[..text.len() - 1], 1.0),
        'G' | 'g' => (&text[..text.len() - 1], 1024.0),
        'T' | 't' => (&text[..text.len() - 1], 1024.0 * 1024.0),
        _ => (text, 1.0),
    };
    let mb = number.parse::<f64>().ok()? * per_unit;
    (mb.is_finite() && mb >= 0.0 && mb < u64::MAX as f64).then(|| mb.round() as u64)
}

/// A node's CPUs, memory (MB) and GPUs (milli-GPUs per type), as sinfo gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeShape {
    pub cpus: u64,
    pub mem_mb: u64,
    pub milli_gpus: BTreeMap<String, u64>,
}

impl NodeShape {
    /// Its GPUs, whole.
    pub fn gpus(&self) -> u64 {
        self.milli_gpus.values().fold(0u64, |sum, &m| sum.saturating_add(m)) / MILLI
    }
}

/// What a job's share of its nodes is measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Cpus,
    Memory,
}

impl Part {
    /// Its name in `[prices] stranded`.
    pub fn name(self) -> &'static str {
        match self {
            Part::Cpus => "cpus",
            Part::Memory => "memory",
        }
    }

    pub fn parse(name: &str) -> Option<Part> {
        match name {
            "cpus" => Some(Part::Cpus),
            "memory" => Some(Part::Memory),
            _ => None,
        }
    }
}

/// Why a job is priced above its own GPUs: its share of its nodes' CPUs or memory stands for more
/// GPUs than it holds, and the GPUs it leaves idle cost `surcharge` on each of its own GPU-hours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stranding {
    pub by: Part,
    /// CPUs, or MB of memory, held of the `of` on its nodes with GPUs.
    pub held: u64,
    pub of: u64,
    /// The job's nodes: a name, or how many.
    pub nodes: String,
    /// The nodes' GPUs, whole; how many the share stands for, and how many beyond its own it
    /// leaves idle (milli-GPUs).
    pub node_gpus: u64,
    pub share_milli: u64,
    pub idle_milli: u64,
    /// Tokens an hour for the GPUs it leaves idle (at the mean price of the nodes' others), and that
    /// on each GPU-hour of its own: added to every type's price, whatever `charge_basis` weighs, so
    /// the idle GPUs are paid in full and a GPU type priced 0 strands at their price too.
    pub idle_per_hour: Tokens,
    pub surcharge: Tokens,
}

impl Stranding {
    /// `price` (one of the job's GPU types, per GPU-hour, as weighed) with the surcharge.
    pub fn surcharged(&self, price: Tokens) -> Option<Tokens> {
        price.checked_add(self.surcharge)
    }
}

impl fmt::Display for Stranding {
    /// `priced by its CPUs: 16 of the 16 on vm stand for 8 of its 8 GPUs, so 11/GPU-hour is added for the 7 it leaves idle`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, unit) = match self.by {
            Part::Cpus => ("CPUs", ""),
            Part::Memory => ("memory", " MB"),
        };
        write!(
            f,
            "priced by its {what}: {}{unit} of the {}{unit} on {} stand for {} of its {} GPUs, so {}/GPU-hour is added \
             for the {} it leaves idle",
            self.held,
            self.of,
            self.nodes,
            crate::tres::gpu_count(self.share_milli),
            self.node_gpus,
            self.surcharge,
            crate::tres::gpu_count(self.idle_milli),
        )
    }
}

/// The part of a charge of `amount` (negative, as entries hold it) paid for GPUs the job left idle,
/// from its entry's `reason` (`... at 12/GPU-hour; priced by ..., so 11/GPU-hour is added for ...`,
/// as the ledger and [`Stranding`]'s `Display` write it); zero for any other charge.
pub fn beyond_own_gpus(amount: Tokens, reason: &str) -> Tokens {
    let priced = || -> Option<(i128, i128)> {
        let (head, tail) = reason.split_once("; priced by its ")?;
        let (_, price) = head.rsplit_once(" at ")?;
        let (_, added) = tail.rsplit_once(", so ")?;
        let (surcharge, _) = added.split_once("/GPU-hour is added for ")?;
        let micro = |t: &str| t.parse::<Tokens>().ok().map(|t| i128::from(t.micro()));
        Some((micro(price.strip_suffix("/GPU-hour")?)?, micro(surcharge)?))
    };
    match priced() {
        Some((price, surcharge)) if price > 0 && (0..=price).contains(&surcharge) => {
            let paid = -i128::from(amount.micro());
            Tokens::from_micro(i64::try_from(paid * surcharge / price).unwrap_or(0))
        }
        _ => Tokens::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_and_memory_are_read_from_tres() {
        assert_eq!(
            Held::from_tres("billing=16,cpu=16,gres/gpu=1,mem=8000M,node=1"),
            Held { cpus: Some(16), mem_mb: Some(8000) }
        );
        assert_eq!(Held::from_tres("cpu=2,mem=1.50G").mem_mb, Some(1536));
        assert_eq!(Held::from_tres("cpu=2,mem=2T").mem_mb, Some(2 * 1024 * 1024));
        assert_eq!(Held::from_tres("cpu=2,mem=512K").mem_mb, Some(1), "half a MB rounds to the nearest");
        assert_eq!(Held::from_tres("gres/gpu=1,node=1"), Held::default());
        assert_eq!(Held::from_tres("cpu=x,mem=lots").cpus, None);
    }
}
