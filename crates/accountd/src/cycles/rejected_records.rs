//! Job records left out of a charge (see `gputokens::slurm::rejected`): each is logged and counted
//! once per process, however many cycles read it again (sacct's window overlaps the last one by
//! `[slurm] reread`), and every other record is charged.

use std::collections::HashSet;

use gputokens::free_text::printable;
use gputokens::slurm::rejected::{unresolved_uid, Reason, Rejected};
use ledger::{ChargeOutcome, UsageRecord};

use crate::metrics::Metrics;

/// Records remembered as already logged; past this the memory starts afresh (and a record still
/// broken is logged once more).
const REMEMBERED: usize = 10_000;

#[derive(Default)]
pub struct RejectedRecords {
    seen: HashSet<(Reason, String)>,
}

impl RejectedRecords {
    /// Logs and counts the rejections not seen before; returns how many were new.
    pub fn note(&mut self, rejected: &[Rejected], metrics: &Metrics) -> usize {
        let mut new = 0;
        for r in rejected {
            if self.seen.len() >= REMEMBERED {
                self.seen.clear();
            }
            if !self.seen.insert((r.reason, r.detail.clone())) {
                continue;
            }
            new += 1;
            tracing::warn!("{}: not charged ({}): {}", r.origin, r.reason.label(), r.detail);
            metrics.record_skipped(r.reason.label());
        }
        new
    }
}

/// The records the ledger left out because their cost or GPU-seconds are beyond what it can hold
/// (e.g. prices so high that the GPU time is past the 64-bit range).
pub fn uncountable(outcome: &ChargeOutcome) -> impl Iterator<Item = Rejected> + '_ {
    outcome.uncountable.iter().map(|job| Rejected {
        reason: Reason::AbsurdValue,
        origin: format!("job {job}"),
        detail: "its cost or GPU-seconds are more than the ledger can hold".into(),
    })
}

/// Takes out of `records` those that cannot be charged: what `gputokens::slurm::rejected::check`
/// refuses, and users Slurm named by a bare uid this system has no name for.
pub fn sift(records: Vec<UsageRecord>, origin: &str) -> (Vec<UsageRecord>, Vec<Rejected>) {
    let mut rejected = Vec::new();
    let kept = records
        .into_iter()
        .filter(|record| {
            let problem = gputokens::slurm::rejected::check(record).err().or_else(|| {
                unresolved_uid(&record.user, system_has_user).then(|| {
                    (Reason::UnknownUser, format!("user '{}' is a uid with no name on this system", record.user))
                })
            });
            match problem {
                None => true,
                Some((reason, detail)) => {
                    let detail = format!("job {}: {detail}", printable(&record.job_id));
                    rejected.push(Rejected {
                        reason,
                        origin: format!("{origin} job {}", printable(&record.job_id)),
                        detail,
                    });
                    false
                }
            }
        })
        .collect();
    (kept, rejected)
}

/// Whether the system's user database has `name`; an error of the lookup (SSSD down) counts as
/// yes, so a record is never lost for it.
fn system_has_user(name: &str) -> bool {
    !matches!(nix::unistd::User::from_name(name), Ok(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(job: &str, user: &str) -> UsageRecord {
        UsageRecord {
            job_id: job.into(),
            user: user.into(),
            account: None,
            segment_start: 1_795_444_368,
            sluid: None,
            milli_gpus: [("a6000".to_string(), 1000)].into(),
            elapsed: 60,
            nodes: 1,
            weight_permille: 1000,
            held: Default::default(),
            stranding: None,
            lent: None,
        }
    }

    #[test]
    fn bad_records_are_taken_out_one_by_one() {
        let records =
            vec![record("1", "ann@example.org"), record("2", "a b"), record("3", "987654321"), record("4", "root")];
        let (kept, rejected) = sift(records, "squeue");
        let kept: Vec<&str> = kept.iter().map(|r| r.job_id.as_str()).collect();
        assert_eq!(kept, ["1", "4"]);
        let reasons: Vec<Reason> = rejected.iter().map(|r| r.reason).collect();
        assert_eq!(reasons, [Reason::BadUserName, Reason::UnknownUser]);
        assert_eq!(rejected[1].origin, "squeue job 3");
    }

    #[test]
    fn each_rejection_is_counted_once() {
        let metrics = Metrics::new();
        let mut log = RejectedRecords::default();
        let bad = Rejected { reason: Reason::Unparseable, origin: "sacct line 3".into(), detail: "2 fields".into() };
        let moved = Rejected { origin: "sacct line 9".into(), ..bad.clone() };
        assert_eq!(log.note(std::slice::from_ref(&bad), &metrics), 1);
        assert_eq!(log.note(&[moved, bad], &metrics), 0, "the same row re-read, on another line");
        assert!(
            metrics.encode().contains("gputokens_records_skipped_total{reason=\"unparseable\"} 1"),
            "{}",
            metrics.encode()
        );
    }
}
