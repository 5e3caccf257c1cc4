//! GPU shares in Slurm TRES strings, e.g. sacct's AllocTRES `cpu=8,gres/gpu:a6000=2,gres/gpu=2,node=1`.
//! Whole GPUs, `gres/shard` and `gres/mps` are all counted in milli-GPUs, so a shard is charged as its
//! fraction of the GPU's price.

use std::collections::BTreeMap;

/// Milli-GPUs per GPU.
pub const MILLI: u64 = 1000;

/// The nodes of an allocation (`node=N` in a TRES string); 1 where it does not say.
pub fn node_count(tres: &str) -> u32 {
    tres.split(',')
        .find_map(|entry| entry.trim().strip_prefix("node=")?.trim().parse::<u32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// `milli` milli-GPUs as an exact decimal number of GPUs (`2`, `0.25`), for messages and reasons.
pub fn gpu_count(milli: u64) -> crate::tokens::Tokens {
    let micro = i64::try_from(milli).unwrap_or(i64::MAX).saturating_mul((crate::tokens::MICRO as u64 / MILLI) as i64);
    crate::tokens::Tokens::from_micro(micro)
}

/// How many shards and MPS units make one GPU (gres.conf `Name=shard Count=` per GPU; MPS is 100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharing {
    pub shards_per_gpu: u64,
    pub mps_per_gpu: u64,
}

impl Default for Sharing {
    fn default() -> Self {
        Sharing { shards_per_gpu: 1, mps_per_gpu: 100 }
    }
}

/// Counts of one GRES (gpu, shard or mps): per type, plus the untyped total Slurm lists beside them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub typed: BTreeMap<String, u64>,
    pub untyped: u64,
}

impl Counts {
    /// Per type; what the untyped total holds beyond the typed ones goes under `untyped_as` (a
    /// type AccountingStorageTRES does not list is recorded only in the total: a job of
    /// `gpu:a100:1,gpu:a100_1g.5gb:1` with only the slice's type listed is `gres/gpu=2,
    /// gres/gpu:a100_1g.5gb=1`, and its A100 is the remainder).
    pub fn by_type(&self, untyped_as: &str) -> BTreeMap<String, u64> {
        let mut counts = self.typed.clone();
        let typed = self.typed.values().fold(0u64, |sum, n| sum.saturating_add(*n));
        let rest = self.untyped.saturating_sub(typed);
        if rest > 0 {
            let slot = counts.entry(untyped_as.to_string()).or_default();
            *slot = slot.saturating_add(rest);
        }
        counts
    }

    fn is_empty(&self) -> bool {
        self.typed.is_empty() && self.untyped == 0
    }
}

/// The GPU resources of one allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuAllocation {
    pub gpus: Counts,
    pub shards: Counts,
    pub mps: Counts,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad TRES entry '{entry}': {reason}")]
pub struct TresError {
    pub entry: String,
    pub reason: &'static str,
}

impl GpuAllocation {
    /// Milli-GPUs per type to charge, shards and MPS as their fraction of a GPU (rounded up: a
    /// share is never free). Untyped counts go under `untyped_as`.
    pub fn milli_by_type(&self, untyped_as: &str, sharing: Sharing) -> BTreeMap<String, u64> {
        let mut milli: BTreeMap<String, u64> = BTreeMap::new();
        let parts =
            [(&self.gpus, 1), (&self.shards, sharing.shards_per_gpu.max(1)), (&self.mps, sharing.mps_per_gpu.max(1))];
        for (counts, per_gpu) in parts {
            for (gpu_type, n) in counts.by_type(untyped_as) {
                // Saturating: an absurd count stays absurd (and is refused when priced), never wraps small.
                let slot = milli.entry(gpu_type).or_default();
                *slot = slot.saturating_add(n.saturating_mul(MILLI).div_ceil(per_gpu));
            }
        }
        milli
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty() && self.shards.is_empty() && self.mps.is_empty()
    }

    /// Adds `count` of GRES `name` (`gpu`, `shard` or `mps`); other names are ignored.
    pub fn add(&mut self, name: &str, gpu_type: Option<&str>, count: u64) {
        let counts = match name {
            "gpu" => &mut self.gpus,
            "shard" => &mut self.shards,
            "mps" => &mut self.mps,
            _ => return,
        };
        let slot = match gpu_type {
            None => &mut counts.untyped,
            Some(t) => counts.typed.entry(t.to_lowercase()).or_default(),
        };
        *slot = slot.saturating_add(count);
    }
}

/// Parses an allocation TRES list (`key=value,...`), keeping `gres/gpu`, `gres/shard` and `gres/mps`.
pub fn parse_alloc_tres(tres: &str) -> Result<GpuAllocation, TresError> {
    let mut alloc = GpuAllocation::default();
    for entry in tres.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(TresError { entry: entry.into(), reason: "expected name=value" });
        };
        let Some(gres) = name.strip_prefix("gres/") else { continue };
        let (kind, gpu_type) = match gres.split_once(':') {
            Some((kind, t)) if !t.is_empty() => (kind, Some(t)),
            Some(_) => continue,
            None => (gres, None),
        };
        if !matches!(kind, "gpu" | "shard" | "mps") {
            continue; // e.g. gres/gpumem
        }
        let count: u64 =
            value.parse().map_err(|_| TresError { entry: entry.into(), reason: "GPU count is not a whole number" })?;
        alloc.add(kind, gpu_type, count);
    }
    Ok(alloc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(tres: &str) -> BTreeMap<String, u64> {
        parse_alloc_tres(tres).unwrap().milli_by_type("gpu", Sharing { shards_per_gpu: 8, mps_per_gpu: 100 })
    }

    /// The audit's N11: a mixed-type job whose one type AccountingStorageTRES does not list is
    /// charged for that GPU too, as an untyped one (the highest price), not for the listed one only.
    #[test]
    fn gpus_of_a_type_not_listed_are_the_untyped_remainder() {
        let milli = |tres: &str| parse_alloc_tres(tres).unwrap().milli_by_type("gpu", Sharing::default());
        let mixed = milli("cpu=1,gres/gpu=2,gres/gpu:a100_1g.5gb=1");
        assert_eq!(mixed, BTreeMap::from([("a100_1g.5gb".into(), 1000), ("gpu".into(), 1000)]));
        let listed = milli("cpu=1,gres/gpu=2,gres/gpu:a100=1,gres/gpu:a100_1g.5gb=1");
        assert_eq!(listed, BTreeMap::from([("a100".into(), 1000), ("a100_1g.5gb".into(), 1000)]));
        assert_eq!(milli("gres/gpu=2,gres/gpu:a6000=2"), BTreeMap::from([("a6000".into(), 2000)]));
        assert_eq!(milli("gres/gpu=3"), BTreeMap::from([("gpu".into(), 3000)]));
    }

    #[test]
    fn typed_and_untyped_are_not_double_counted() {
        assert_eq!(
            milli("billing=1,cpu=1,gres/gpu:a6000=1,gres/gpu=1,mem=500M,node=1"),
            BTreeMap::from([("a6000".into(), 1000)])
        );
    }

    #[test]
    fn several_types_in_one_allocation() {
        assert_eq!(
            milli("gres/gpu:rtx2080=2,gres/gpu:A6000=1,gres/gpu=3"),
            BTreeMap::from([("a6000".into(), 1000), ("rtx2080".into(), 2000)])
        );
    }

    #[test]
    fn untyped_only_uses_the_given_name() {
        let a = parse_alloc_tres("cpu=2,gres/gpu=2").unwrap();
        assert_eq!(a.milli_by_type("rtx3090", Sharing::default()), BTreeMap::from([("rtx3090".into(), 2000)]));
    }

    #[test]
    fn shards_and_mps_are_fractions_of_a_gpu() {
        assert_eq!(milli("gres/shard:a6000=2,gres/shard=2"), BTreeMap::from([("a6000".into(), 250)]));
        assert_eq!(milli("gres/mps:rtx3090=50,gres/mps=50"), BTreeMap::from([("rtx3090".into(), 500)]));
        assert_eq!(milli("gres/shard=3"), BTreeMap::from([("gpu".into(), 375)]));
        // 1 of 3 shards is a third of a GPU, rounded up.
        let a = parse_alloc_tres("gres/shard:a6000=1").unwrap();
        assert_eq!(a.milli_by_type("gpu", Sharing { shards_per_gpu: 3, mps_per_gpu: 100 })["a6000"], 334);
    }

    #[test]
    fn cpu_only_and_empty_have_no_gpus() {
        assert!(parse_alloc_tres("cpu=4,mem=1G,node=1").unwrap().is_empty());
        assert!(parse_alloc_tres("").unwrap().is_empty());
        assert!(parse_alloc_tres("gres/gpumem=10G").unwrap().is_empty());
    }

    /// Regression: a count above u64::MAX / 1000 overflowed
    /// (a panic in debug builds, a small wrapped count in release builds).
    #[test]
    fn huge_counts_saturate_instead_of_wrapping() {
        let huge = format!("gres/gpu:a6000={}", u64::MAX / 999);
        assert_eq!(milli(&huge)["a6000"], u64::MAX);
        let twice = format!("gres/gpu:a6000={m},gres/gpu:A6000={m}", m = u64::MAX);
        assert_eq!(milli(&twice)["a6000"], u64::MAX);
        assert!(parse_alloc_tres("gres/gpu=18446744073709551616").is_err(), "beyond u64: a bad entry");
        assert_eq!(gpu_count(250).to_string(), "0.25");
        assert_eq!(gpu_count(u64::MAX), crate::tokens::Tokens::MAX);
    }

    #[test]
    fn malformed_entries_are_named() {
        assert_eq!(parse_alloc_tres("gres/gpu:a6000=x").unwrap_err().entry, "gres/gpu:a6000=x");
        assert!(parse_alloc_tres("cpu").is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn count() -> impl Strategy<Value = u64> {
            prop_oneof![0..64u64, any::<u64>()]
        }

        fn sharing() -> impl Strategy<Value = Sharing> {
            (0..=16u64, prop_oneof![Just(100u64), any::<u64>()])
                .prop_map(|(shards_per_gpu, mps_per_gpu)| Sharing { shards_per_gpu, mps_per_gpu })
        }

        proptest! {
            #[test]
            fn any_text_parses_or_is_a_named_error(text in "\\PC*") {
                if let Err(e) = parse_alloc_tres(&text) {
                    prop_assert!(text.contains(&e.entry));
                }
            }

            #[test]
            fn tres_like_text_never_panics(text in "((gres/(gpu|shard|mps|gpumem)(:[a-zA-Z0-9]{0,6})?|cpu|node)=[0-9kKmMgG]{0,22},?){0,6}") {
                if let Ok(alloc) = parse_alloc_tres(&text) {
                    let _ = alloc.milli_by_type("any", Sharing::default());
                }
            }

            /// Typed counts are read exactly; more of anything never gives fewer milli-GPUs.
            #[test]
            fn any_counts_give_monotone_milli_gpus(gpus in count(), shards in count(), mps in count(), more in count(), s in sharing()) {
                let text = |g: u64| format!("cpu=4,gres/gpu:a6000={g},gres/shard:a6000={shards},gres/mps:a6000={mps},gres/gpu={g}");
                let alloc = parse_alloc_tres(&text(gpus)).unwrap();
                prop_assert_eq!(alloc.gpus.typed["a6000"], gpus);
                let base = alloc.milli_by_type("any", s).get("a6000").copied().unwrap_or(0);
                let bigger = parse_alloc_tres(&text(gpus.saturating_add(more))).unwrap();
                let after = bigger.milli_by_type("any", s).get("a6000").copied().unwrap_or(0);
                prop_assert!(after >= base);
                if let Some(exact) = gpus.checked_mul(MILLI) {
                    prop_assert!(base >= exact);
                }
            }
        }
    }
}
