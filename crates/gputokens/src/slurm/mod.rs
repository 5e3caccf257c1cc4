//! Reading what Slurm's commands print.

pub mod associations;
pub mod hostlist;
pub mod partitions;
pub mod rejected;
pub mod sacct;
pub mod sinfo;
pub mod sluid;
pub mod squeue;

/// The number Slurm gives the job whose ledger key is `key`: the key itself (`41`), or the part
/// after its cluster (`new:41`, a job of a cluster that shares the ledger, `[clusters]`).
pub fn job_number(key: &str) -> Option<u32> {
    let id = key.rsplit_once(':').map_or(key, |(_, id)| id);
    id.bytes().all(|b| b.is_ascii_digit()).then(|| id.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_jobs_number_with_or_without_its_cluster() {
        assert_eq!(super::job_number("41"), Some(41));
        assert_eq!(super::job_number("new:41"), Some(41));
        for not in ["", "new:", "41_3", "+41", "new:4x", "99999999999"] {
            assert_eq!(super::job_number(not), None, "{not:?}");
        }
    }
}
