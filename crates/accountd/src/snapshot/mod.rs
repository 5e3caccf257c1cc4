//! The balance snapshot the job_submit plugin reads inside slurmctld: written from the ledger, the
//! prices and the last Slurm view, readable by slurmctld's user (`access`).

pub mod access;

use gputokens::snapshot;

use crate::cycles::slurm_view::SlurmView;
use crate::error::{AccountdError, AccountdResult};
use crate::resources::Resources;

/// Writes the balance snapshot for the job_submit plugin; returns how many users it lists.
pub fn publish(res: &Resources, view: &SlurmView, now: i64) -> AccountdResult<usize> {
    let accounts = res.ledger.accounts()?;
    if res.config.http.per_user_metrics {
        res.metrics.set_balances(&accounts);
    }
    let mut snap = snapshot::Snapshot::new(now, *res.ledger.rules());
    snap.balances = accounts.iter().map(|a| (a.user.clone(), a.balance)).collect();
    snap.sharing = res.config.sharing;
    snap.prices = res.config.prices.clone();
    snap.partitions = view.partitions.clone();
    snap.default_accounts = view.default_accounts.clone();
    snap.queue = view.queue.clone();
    let text = snapshot::render(&snap);
    // As root: readable by slurmctld's group, or the plugin could not read it.
    access::write(&res.config.paths.snapshot, &text, &res.config.slurm_user).map_err(AccountdError::Failed)?;
    res.metrics.snapshot_written.set(now);
    Ok(accounts.len())
}
