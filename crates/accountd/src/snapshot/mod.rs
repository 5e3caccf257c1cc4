//! The balance snapshot the job_submit plugin reads inside slurmctld: written from the ledger, the
//! prices and the last Slurm view, readable by slurmctld's user (`access`).

pub mod access;
pub mod publisher;

use std::collections::HashMap;

use gputokens::policy::BucketRules;
use gputokens::pools::{PoolMode, PoolStanding};
use gputokens::snapshot;
use gputokens::time::local_date;
use gputokens::Tokens;

use crate::error::{AccountdError, AccountdResult};
use crate::resources::Resources;
use crate::slurm_view::SlurmView;

/// What a snapshot was written from.
#[derive(Debug, Default)]
pub struct Published {
    /// The users it lists (0 where another accountd leads and writes it).
    pub users: usize,
    /// Every user's balance it was written with, and the newest entry of the ledger read before
    /// them (a balance moves only with an entry: none newer, none moved since); None where it was
    /// not written here.
    pub balances: Option<(HashMap<String, Tokens>, i64)>,
}

/// Writes the balance snapshot for the job_submit plugin.
pub fn publish(res: &Resources, view: &SlurmView, now: i64) -> AccountdResult<Published> {
    let newest_entry = res.ledger.newest_entry()?;
    let accounts = res.ledger.accounts()?;
    if res.config.http.per_user_metrics {
        res.metrics.set_balances(&accounts);
    }
    let mut snap = snapshot::Snapshot::new(now, *res.ledger.rules());
    snap.borrow_limit = res.config.borrowing.limit;
    snap.balances = accounts.iter().map(|a| (a.user.clone(), a.balance)).collect();
    snap.sharing = res.config.sharing;
    snap.prices = res.config.prices.clone();
    snap.node_shapes = view.node_shapes.clone();
    snap.partitions = view.partitions.clone();
    snap.default_accounts = view.default_accounts.clone();
    snap.queue = view.queue.clone();
    let pools = add_pools(res, view, now, &mut snap)?;
    let text = snapshot::render(&snap);
    // As root: readable by slurmctld's group, or the plugin could not read it.
    access::write(&res.config.paths.snapshot, &text, &res.config.slurm_user).map_err(AccountdError::Failed)?;
    res.metrics.snapshot_written.set(now);
    if let Some(settings) = &res.config.ondemand {
        write_ondemand(settings, &accounts, &pools, view, now);
    }
    Ok(Published { users: accounts.len(), balances: Some((snap.balances, newest_entry)) })
}

/// The OnDemand balance file from what the snapshot was made of; a failure is logged (the dashboard
/// keeps the last file), never the cycle's.
fn write_ondemand(
    settings: &gputokens::config::OnDemand,
    accounts: &[ledger::Account],
    pools: &[ledger::Pool],
    view: &SlurmView,
    now: i64,
) {
    let users: Vec<(&str, gputokens::Tokens)> = accounts.iter().map(|a| (a.user.as_str(), a.balance)).collect();
    let pools: Vec<crate::ondemand::PoolBalance> = pools
        .iter()
        .map(|p| crate::ondemand::PoolBalance {
            account: &p.account,
            balance: p.balance,
            members: view.accounts.members.get(&p.account).into_iter().flatten().map(String::as_str).collect(),
        })
        .collect();
    let text = crate::ondemand::render(settings, now, &users, &pools);
    crate::ondemand::write_later(settings, text);
}

/// With pools on: each pool with its coordinators, what members spent of it this month, and each
/// user's accounts. Returns the pools (none when pools are off).
fn add_pools(
    res: &Resources,
    view: &SlurmView,
    now: i64,
    snap: &mut snapshot::Snapshot,
) -> AccountdResult<Vec<ledger::Pool>> {
    snap.pool_mode = res.config.accounts.mode;
    if snap.pool_mode == PoolMode::User {
        return Ok(Vec::new());
    }
    let pools = res.ledger.pools()?;
    res.metrics.set_pools(&pools);
    for pool in &pools {
        let standing = PoolStanding {
            balance: pool.balance,
            rules: BucketRules { cap: None, ..pool.rules },
            user_limit: pool.user_limit,
            coordinators: view.accounts.coordinators_of(&pool.account),
            spent: Default::default(),
            parent: pool.parent.clone(),
            lends: pool.lends,
            window: pool.window,
        };
        snap.pools.insert(pool.account.clone(), standing);
    }
    let month = local_date(now).format("%Y-%m").to_string();
    for spent in res.ledger.member_spending(&month)? {
        if let Some(pool) = snap.pools.get_mut(&spent.account) {
            pool.spent.insert(spent.user, spent.spent);
        }
    }
    snap.spent_month = Some(month);
    snap.user_accounts = view.accounts.accounts_by_user().into_iter().collect();
    Ok(pools)
}
