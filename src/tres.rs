//! GPU counts in Slurm TRES strings, e.g. sacct's AllocTRES `cpu=8,gres/gpu:a6000=2,gres/gpu=2,node=1`.

use std::collections::BTreeMap;

/// GPUs of one allocation: typed counts, plus the untyped total Slurm lists beside them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuAllocation {
    pub typed: BTreeMap<String, u64>,
    pub untyped: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad TRES entry '{entry}': {reason}")]
pub struct TresError {
    pub entry: String,
    pub reason: &'static str,
}

impl GpuAllocation {
    /// GPUs per type to charge. Typed entries win; the untyped `gres/gpu=N` is their sum and is only
    /// used when no type is listed, under the name `untyped_as`.
    pub fn by_type(&self, untyped_as: &str) -> BTreeMap<String, u64> {
        if !self.typed.is_empty() {
            return self.typed.clone();
        }
        let mut only = BTreeMap::new();
        if self.untyped > 0 {
            only.insert(untyped_as.to_string(), self.untyped);
        }
        only
    }

    pub fn is_empty(&self) -> bool {
        self.typed.is_empty() && self.untyped == 0
    }
}

/// Parses an allocation TRES list (`key=value,...`), keeping only `gres/gpu` entries.
pub fn parse_alloc_tres(tres: &str) -> Result<GpuAllocation, TresError> {
    let mut alloc = GpuAllocation::default();
    for entry in tres.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(TresError { entry: entry.into(), reason: "expected name=value" });
        };
        let Some(rest) = name.strip_prefix("gres/gpu") else { continue };
        let gpu_type = match rest.strip_prefix(':') {
            None if rest.is_empty() => None,
            Some(t) if !t.is_empty() => Some(t.to_lowercase()),
            _ => continue, // e.g. gres/gpumem: not a GPU count
        };
        let count: u64 =
            value.parse().map_err(|_| TresError { entry: entry.into(), reason: "GPU count is not a whole number" })?;
        match gpu_type {
            None => alloc.untyped = count,
            Some(t) => *alloc.typed.entry(t).or_default() += count,
        }
    }
    Ok(alloc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_and_untyped_are_not_double_counted() {
        let a = parse_alloc_tres("billing=1,cpu=1,gres/gpu:a6000=1,gres/gpu=1,mem=500M,node=1").unwrap();
        assert_eq!(a.by_type("gpu"), BTreeMap::from([("a6000".to_string(), 1)]));
        assert_eq!(a.untyped, 1);
    }

    #[test]
    fn several_types_in_one_allocation() {
        let a = parse_alloc_tres("gres/gpu:rtx2080=2,gres/gpu:A6000=1,gres/gpu=3").unwrap();
        assert_eq!(a.by_type("gpu"), BTreeMap::from([("a6000".into(), 1), ("rtx2080".into(), 2)]));
    }

    #[test]
    fn untyped_only_uses_the_given_name() {
        let a = parse_alloc_tres("cpu=2,gres/gpu=2").unwrap();
        assert_eq!(a.by_type("rtx3090"), BTreeMap::from([("rtx3090".into(), 2)]));
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
