//! GPU shares in Slurm TRES strings, e.g. sacct's AllocTRES `cpu=8,gres/gpu:a6000=2,gres/gpu=2,node=1`.
//! Whole GPUs, `gres/shard` and `gres/mps` are all counted in milli-GPUs, so a shard is charged as its
//! fraction of the GPU's price.

use std::collections::BTreeMap;

/// Milli-GPUs per GPU.
pub const MILLI: u64 = 1000;

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
    /// Per type; the untyped total is the sum of the typed ones and only counts when no type is listed.
    fn by_type(&self, untyped_as: &str) -> BTreeMap<String, u64> {
        if !self.typed.is_empty() {
            return self.typed.clone();
        }
        let mut only = BTreeMap::new();
        if self.untyped > 0 {
            only.insert(untyped_as.to_string(), self.untyped);
        }
        only
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
                *milli.entry(gpu_type).or_default() += (n * MILLI).div_ceil(per_gpu);
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
        match gpu_type {
            None => counts.untyped += count,
            Some(t) => *counts.typed.entry(t.to_lowercase()).or_default() += count,
        }
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

    #[test]
    fn malformed_entries_are_named() {
        assert_eq!(parse_alloc_tres("gres/gpu:a6000=x").unwrap_err().entry, "gres/gpu:a6000=x");
        assert!(parse_alloc_tres("cpu").is_err());
    }
}
