//! The periodic work: the charge cycle (finished and running jobs from Slurm into the ledger) and the
//! check cycle (replenishment, the snapshot, utilization from Prometheus, preemption), each followed
//! by notifications. `accountd serve` runs them on a schedule (`serve`), `accountd tick` once.
//! What a cycle keeps from one run to the next is its own ([`CycleState`]).

pub mod charge;
pub mod check;
pub mod cluster_rules;
pub mod expiries;
pub mod holds;
pub mod lending;
pub mod lock;
pub mod notify;
pub mod preemption;
pub mod refunds;
pub mod rejected_records;
pub mod serve;
pub mod shadow;
pub mod slurm_clock;

use std::borrow::Cow;
use std::collections::HashMap;
use std::thread::JoinHandle;

use gputokens::Tokens;

use crate::error::AccountdResult;
use crate::resources::Resources;
use crate::slurm_view::SlurmView;
use crate::utilization::Tracker;
use rejected_records::RejectedRecords;

/// The cycles' state beside the shared resources (their own ledger connection under `serve`).
pub struct CycleState {
    pub res: Resources,
    /// Partitions, default accounts and queue commitments for the snapshot.
    pub slurm_view: SlurmView,
    /// Preemptions waiting out their grace on threads of their own; joined before the process exits.
    pub preemptions: Vec<JoinHandle<()>>,
    /// Job records that could not be charged, logged once each.
    pub rejected_records: RejectedRecords,
    /// Idle-job detection when utilization comes from Prometheus.
    pub utilization: Tracker,
    /// How far replenishment and expiry may go (the last bound and when it was reached).
    pub clock: slurm_clock::ClockWitness,
    /// Every user's balance as this check cycle's snapshot was written with, and the ledger's
    /// newest entry then (holds and preemption weigh these while no entry was added since); None
    /// outside a check cycle, or where the snapshot was not written here.
    pub balances_read: Option<(HashMap<String, Tokens>, i64)>,
}

impl CycleState {
    pub fn new(res: Resources) -> CycleState {
        CycleState {
            res,
            slurm_view: SlurmView::default(),
            preemptions: Vec::new(),
            rejected_records: RejectedRecords::default(),
            utilization: Tracker::default(),
            clock: slurm_clock::ClockWitness::default(),
            balances_read: None,
        }
    }

    /// The balances of `names` the ledger has: those this check cycle's snapshot was written with
    /// where no entry was added since (in `accountd serve` a request may grant meanwhile), else
    /// read from the ledger.
    pub fn balances_of(&self, names: &[&str]) -> AccountdResult<Cow<'_, HashMap<String, Tokens>>> {
        if let Some((read, newest_then)) = &self.balances_read {
            if self.res.ledger.newest_entry()? == *newest_then {
                return Ok(Cow::Borrowed(read));
            }
        }
        Ok(Cow::Owned(self.res.ledger.balances_of(names)?))
    }

    /// Waits for preemptions still in their grace period.
    pub fn finish_preemptions(&mut self) {
        for handle in self.preemptions.drain(..) {
            let _ = handle.join();
        }
    }
}
