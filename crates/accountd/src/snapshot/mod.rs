//! The balance snapshot the job_submit plugin reads inside slurmctld: written from the ledger, the
//! prices and the last Slurm view, readable by slurmctld's user (`access`).

pub mod access;

use gputokens::policy::BucketRules;
use gputokens::pools::{PoolMode, PoolStanding};
use gputokens::snapshot;
use gputokens::time::local_date;

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
    add_pools(res, view, now, &mut snap)?;
    let text = snapshot::render(&snap);
    // As root: readable by slurmctld's group, or the plugin could not read it.
    access::write(&res.config.paths.snapshot, &text, &res.config.slurm_user).map_err(AccountdError::Failed)?;
    res.metrics.snapshot_written.set(now);
    Ok(accounts.len())
}

/// With pools on: each pool with its coordinators, what members spent of it this month, and each
/// user's accounts.
fn add_pools(res: &Resources, view: &SlurmView, now: i64, snap: &mut snapshot::Snapshot) -> AccountdResult<()> {
    snap.pool_mode = res.config.accounts.mode;
    if snap.pool_mode == PoolMode::User {
        return Ok(());
    }
    let pools = res.ledger.pools()?;
    res.metrics.set_pools(&pools);
    for pool in pools {
        let standing = PoolStanding {
            balance: pool.balance,
            rules: BucketRules { cap: None, ..pool.rules },
            user_limit: pool.user_limit,
            coordinators: view.accounts.coordinators_of(&pool.account),
            spent: Default::default(),
        };
        snap.pools.insert(pool.account, standing);
    }
    let month = local_date(now).format("%Y-%m").to_string();
    for spent in res.ledger.member_spending(&month)? {
        if let Some(pool) = snap.pools.get_mut(&spent.account) {
            pool.spent.insert(spent.user, spent.spent);
        }
    }
    snap.spent_month = Some(month);
    snap.user_accounts = view.accounts.accounts_by_user().into_iter().collect();
    Ok(())
}
