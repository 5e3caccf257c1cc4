//! Slurm's SLUIDs (25.11+): one per job run, `s` and 13 characters of Crockford's base32
//! (`sEKNKTV3WPV500`). A requeued job keeps its JobId and gets a new SLUID; 26.05 names job cgroups
//! by it; sacct, squeue --json and the prolog's `SLURM_JOB_SLUID` carry it.

/// Whether `text` is a SLUID as Slurm writes it (capitals; no I, L, O or U).
pub fn is_sluid(text: &str) -> bool {
    text.len() == 14
        && text.starts_with('s')
        && text.bytes().skip(1).all(|b| b.is_ascii_digit() || (b.is_ascii_uppercase() && !b"ILOU".contains(&b)))
}

/// `text` as a SLUID, when it is one: what sacct, squeue and the prolog's environment give is read
/// through here, and anything else is no SLUID at all.
pub fn parse(text: &str) -> Option<String> {
    is_sluid(text).then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_slurm_writes_and_nothing_else() {
        // Seen on the 26.05 test cluster (cgroup directory, squeue --json, SLURM_JOB_SLUID).
        for seen in ["s359M8A2NFAK00", "sFADM8A2GBYT00", "sEKNKTV3WPV500"] {
            assert!(is_sluid(seen), "{seen}");
        }
        for not in [
            "",
            "s",
            "S359M8A2NFAK00",
            "s359m8a2nfak00",
            "s359M8A2NFAK0",
            "s359M8A2NFAK000",
            "sO59M8A2NFAK00",
            "job_12",
            "s359M8A2NFAK0/",
        ] {
            assert!(!is_sluid(not), "{not}");
        }
    }
}
