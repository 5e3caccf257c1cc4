//! Dated sub-allocations: a pool made inside another (a TA's hours inside a course) by that pool's
//! coordinator, with its own amount, open from a start until an end. It draws on the pool it was
//! made in, so its charges count there too; its own floor is 0 (it never goes into debt) and it
//! has no grants. Jobs name it with `-A` (a Slurm account under the parent's, whose associations
//! say who its members are). Outside its window the job_submit plugin refuses its jobs, and the
//! GPU time charged outside it is charged to the pools it draws on alone.

use crate::db::params;
use gputokens::policy::BucketRules;
use gputokens::time::format_rfc3339;
use gputokens::tokens::Tokens;

use super::journal::Journaled;
use super::pools::{add_pool_audited, Pool};
use super::{Ledger, LedgerError};

/// A sub-allocation to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub account: String,
    /// The pool it is made in.
    pub parent: String,
    pub amount: Tokens,
    /// Unix seconds: open from `starts` until `ends`.
    pub starts: i64,
    pub ends: i64,
}

impl Allocation {
    /// `20 tokens inside course from 2026-12-01T00:00:00+01:00 until 2026-12-15T00:00:00+01:00`.
    pub fn describe(&self) -> String {
        format!(
            "{} tokens inside {} from {} until {}",
            self.amount,
            self.parent,
            format_rfc3339(self.starts),
            format_rfc3339(self.ends)
        )
    }
}

/// Whether a pool is open at `at`: always, unless it is a sub-allocation outside its window.
pub fn is_open(window: Option<(i64, i64)>, at: i64) -> bool {
    window.is_none_or(|(starts, ends)| starts <= at && at < ends)
}

/// What of `due`, for GPU time used from `used.0` until `used.1`, a pool pays, and the seconds of it
/// inside its window: all of it for a pool without one; what fell inside a sub-allocation's window
/// (rounded down); where no time was used, all or nothing by whether it is open at `used.1`.
pub fn share_used(window: Option<(i64, i64)>, (from, to): (i64, i64), due: Tokens) -> (Tokens, u64) {
    let Some((starts, ends)) = window else { return (due, 0) };
    if to <= from {
        return match is_open(window, to) {
            true => (due, 0),
            false => (Tokens::ZERO, 0),
        };
    }
    let inside = (to.min(ends) - from.max(starts)).max(0);
    let share = i128::from(due.micro()) * i128::from(inside) / i128::from(to - from);
    (Tokens::from_micro(i64::try_from(share).unwrap_or(due.micro())), inside as u64)
}

impl Ledger {
    /// Makes the sub-allocation `a` (its amount granted now, as its initial balance), audited as an
    /// entry of the new pool naming who made it. The account must have no pool, the parent one.
    pub fn allocate(&mut self, a: &Allocation, actor: &str, now: i64) -> Result<Pool, LedgerError> {
        if a.amount < Tokens::ZERO {
            return Err(LedgerError::Refused(format!(
                "a sub-allocation's amount must not be negative (got {})",
                a.amount
            )));
        }
        if a.ends <= a.starts {
            return Err(LedgerError::Refused(format!(
                "a sub-allocation must end after it starts ({} is not after {})",
                format_rfc3339(a.ends),
                format_rfc3339(a.starts)
            )));
        }
        if self.pool(&a.account)?.is_some() {
            return Err(LedgerError::PoolExists(a.account.clone()));
        }
        self.refuse_parent(&a.account, &a.parent)?;
        let rules = BucketRules {
            initial: a.amount,
            daily: Tokens::ZERO,
            monthly: Tokens::ZERO,
            cap: None,
            floor: Tokens::ZERO,
        };
        let journaled =
            Journaled::Allocation { parent: a.parent.clone(), amount: a.amount, starts: a.starts, ends: a.ends };
        let reason = format!("sub-allocation created: {}", a.describe());
        let tx = self.conn.transaction()?;
        if !add_pool_audited(&tx, &a.account, (rules, None), actor, now, (reason, journaled))? {
            return Err(LedgerError::PoolExists(a.account.clone()));
        }
        tx.execute(
            "UPDATE pools SET parent = ?2, starts = ?3, ends = ?4 WHERE account = ?1",
            params![a.account, a.parent, a.starts, a.ends],
        )?;
        tx.commit()?;
        self.pool(&a.account)?.ok_or_else(|| LedgerError::UnknownPool(a.account.clone()))
    }
}
