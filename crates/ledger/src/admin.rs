//! What admins do to balances beyond appending a grant or an adjustment: refunding a job's charges,
//! and importing the balances of the system gputokens replaced.

use std::collections::BTreeMap;

use crate::db::{params, OptionalExtension, Transaction};

use gputokens::entry::{Entry, EntryKind};
use gputokens::time::local_date;
use gputokens::tokens::Tokens;

use super::accounts::{check_user_name, insert_entry, Applied, NewEntry};
use super::{Ledger, LedgerError};
use crate::journal::Journaled;

/// What each balance paid for job `job_id` in all, by holder: job_payments for the runs whose
/// payments were kept (a pool paid for the job), job_charges for the others (their user paid).
pub(crate) fn job_payers(tx: &Transaction<'_>, job_id: &str) -> Result<Vec<(String, i64)>, LedgerError> {
    let mut stmt = tx.prepare_cached(
        "SELECT holder, charged FROM job_payments WHERE job_id = ?1
         UNION ALL
         SELECT user, charged + energy_charged FROM job_charges c
         WHERE job_id = ?1 AND NOT EXISTS (SELECT 1 FROM job_payments p
                                           WHERE p.job_id = ?1 AND p.run_start IN (c.segment_start, -1))",
    )?;
    let rows = stmt.query_map([job_id], |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)))?;
    let mut paid: BTreeMap<String, i64> = BTreeMap::new();
    for row in rows {
        let (holder, charged) = row?;
        let sum = paid.entry(holder).or_default();
        *sum = sum.saturating_add(charged);
    }
    Ok(paid.into_iter().collect())
}

/// What each balance paid for the run of job `job_id` that started at `run_start`, by holder:
/// job_payments where they were kept for it, else its job_charges (its user paid it all). None
/// for a job whose payments were summed for all its runs (kept before schema 15).
pub(crate) fn run_payers(
    tx: &Transaction<'_>,
    job_id: &str,
    run_start: i64,
) -> Result<Option<Vec<(String, i64)>>, LedgerError> {
    // A job with payments from before (a run of it may have been kept partly there) goes by them.
    let summed: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM job_payments WHERE job_id = ?1 AND run_start = -1)",
        [job_id],
        |r| r.get(0),
    )?;
    if summed {
        return Ok(None);
    }
    let kept: Vec<(String, i64)> = tx
        .prepare_cached(
            "SELECT holder, charged FROM job_payments WHERE job_id = ?1 AND run_start = ?2 ORDER BY holder",
        )?
        .query_map(params![job_id, run_start], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    if !kept.is_empty() {
        return Ok(Some(kept));
    }
    let charged: Vec<(String, i64)> = tx
        .prepare_cached(
            "SELECT user, SUM(charged + energy_charged) FROM job_charges WHERE job_id = ?1 AND segment_start = ?2
             GROUP BY user ORDER BY user",
        )?
        .query_map(params![job_id, run_start], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(Some(charged))
}

/// What `holder` has had back of job `job_id` so far, by an admin or automatically: refunds are
/// keyed `refund:JOB:...`, found by that prefix in the key index.
pub(crate) fn refunded_to(tx: &Transaction<'_>, job_id: &str, holder: &str) -> Result<i64, LedgerError> {
    Ok(tx.query_row(
        "SELECT COALESCE(SUM(e.amount), 0) FROM entry_keys k JOIN entries e ON e.id = k.entry_id
         WHERE k.key >= ?1 AND k.key < ?2 AND e.kind = 'refund' AND e.user = ?3",
        params![format!("refund:{job_id}:"), format!("refund:{job_id};"), holder],
        |r| r.get(0),
    )?)
}

/// Takes `refunded` micro-tokens off what the members of `account` (its balance `holder`) spent of
/// it for job `job_id`: each charge entry names its member and month; the newest are taken first,
/// each at most what it charged.
fn lower_spending_by_refund(
    tx: &Transaction<'_>,
    job_id: &str,
    holder: &str,
    account: &str,
    refunded: i64,
) -> Result<(), LedgerError> {
    let mut charges = tx.prepare_cached(
        "SELECT member, at, -amount FROM entries
         WHERE job_id = ?1 AND user = ?2 AND kind = 'charge' AND member IS NOT NULL ORDER BY id DESC",
    )?;
    let rows: Vec<(String, i64, i64)> = charges
        .query_map(params![job_id, holder], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut left = refunded;
    for (member, at, charged) in rows {
        if left <= 0 {
            break;
        }
        let taken = charged.min(left);
        super::pools::lower_member_spending(tx, account, &member, taken, at)?;
        left -= taken;
    }
    Ok(())
}

impl Ledger {
    /// Refunds what job `job_id` was charged and not yet refunded.
    pub fn refund_job(&mut self, job_id: &str, actor: &str, reason: &str, now: i64) -> Result<Vec<Entry>, LedgerError> {
        let tx = self.conn.transaction()?;
        let mut ids = Vec::new();
        for (user, charged) in job_payers(&tx, job_id)? {
            let owed = charged - refunded_to(&tx, job_id, &user)?;
            if owed <= 0 {
                continue;
            }
            let mut entry = NewEntry::new(
                &user,
                EntryKind::Refund,
                Tokens::from_micro(owed),
                now,
                actor,
                reason,
                format!("refund:{job_id}:{user}:{charged}"),
            )
            .journaled(Journaled::AsItsKind);
            entry.job_id = Some(job_id.to_string());
            if insert_entry(&tx, &entry)? == Applied::Added {
                ids.push(tx.last_insert_rowid());
                super::expiries::undraw(&tx, &user, job_id, owed, now)?;
                // A pool's refund lowers what its members spent of it (their per-user limit), in
                // the months the pool was charged, newest first.
                if let Some(account) = gputokens::pools::account_of(&user) {
                    lower_spending_by_refund(&tx, job_id, &user, account, owed)?;
                }
            }
        }
        tx.commit()?;
        if ids.is_empty() {
            return Err(LedgerError::NothingToRefund(job_id.to_string()));
        }
        self.entries_by_id(&ids)
    }

    /// Imports the original system's state (user → balance) for users new to the ledger. All or
    /// nothing: a user the ledger already knows (other than through the same import) is a conflict.
    /// Returns the entries imported now; users imported before are left as they are.
    pub fn import(
        &mut self,
        balances: &BTreeMap<String, Tokens>,
        actor: &str,
        now: i64,
    ) -> Result<Vec<Entry>, LedgerError> {
        let tx = self.conn.transaction()?;
        let mut conflicts = Vec::new();
        let mut fresh = Vec::new();
        for (user, balance) in balances {
            check_user_name(user)?;
            let key = format!("import:{user}");
            let imported: Option<i64> = tx
                .query_row(
                    "SELECT e.amount FROM entry_keys k JOIN entries e ON e.id = k.entry_id WHERE k.key = ?1",
                    [&key],
                    |r| r.get(0),
                )
                .optional()?;
            let known: Option<i64> =
                tx.query_row("SELECT balance FROM users WHERE name = ?1", [user], |r| r.get(0)).optional()?;
            match (imported, known) {
                (Some(_), _) => {}
                (None, Some(current)) => conflicts
                    .push(format!("{user} is already in the ledger with balance {}", Tokens::from_micro(current))),
                (None, None) => fresh.push((user, *balance, key)),
            }
        }
        if !conflicts.is_empty() {
            return Err(LedgerError::ImportConflict(conflicts));
        }
        let mut ids = Vec::with_capacity(fresh.len());
        for (user, balance, key) in &fresh {
            tx.execute(
                "INSERT INTO users (name, first_seen, balance, replenished_through) VALUES (?1, ?2, 0, ?3)",
                params![user, now, local_date(now).to_string()],
            )?;
            let entry = NewEntry::new(
                user,
                EntryKind::Import,
                *balance,
                now,
                actor,
                "imported from the original state file",
                key.clone(),
            )
            .journaled(Journaled::AsItsKind);
            insert_entry(&tx, &entry)?;
            ids.push(tx.last_insert_rowid());
        }
        tx.commit()?;
        self.entries_by_id(&ids)
    }
}
