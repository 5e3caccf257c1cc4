//! Reading entries back: a user's history with the balance after each entry, and what users were
//! charged per GPU type since a day.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use rusqlite::params;
use serde::Serialize;

use gputokens::entry::EntryKind;
use gputokens::tokens::Tokens;

use super::{Ledger, LedgerError};

/// A stored entry, with the user's balance right after it.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub id: i64,
    pub user: String,
    pub kind: EntryKind,
    pub amount: Tokens,
    pub balance_after: Tokens,
    pub at: i64,
    pub actor: String,
    pub reason: String,
    /// Charges have none: their job_charges row keeps them from being recorded twice.
    pub key: Option<String>,
    pub job_id: Option<String>,
    pub gpu_type: Option<String>,
}

impl Ledger {
    /// Every entry of `user`, oldest first, with the running balance.
    pub fn history(&self, user: &str) -> Result<Vec<Entry>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "{USER_CHAIN})
             SELECT e.id, e.user, e.kind, e.amount, e.at, e.actor, e.reason, e.key, e.job_id, e.gpu_type
             FROM chain CROSS JOIN entries e ON e.id = chain.id ORDER BY e.id"
        ))?;
        let mut balance = Tokens::ZERO;
        let entries: Vec<Entry> = stmt
            .query_map(params![user], entry_row)?
            .map(|e| {
                e.map(|mut e| {
                    balance = balance + e.amount;
                    e.balance_after = balance;
                    e
                })
            })
            .collect::<Result<_, _>>()?;
        if entries.is_empty() {
            return Err(LedgerError::UnknownUser(user.to_string()));
        }
        Ok(entries)
    }

    /// The newest `limit` entries of `user`, oldest first, with the balance after each: read down the
    /// user's chain from the newest, so the cost is `limit` lookups however long the history.
    pub fn recent(&self, user: &str, limit: usize) -> Result<Vec<Entry>, LedgerError> {
        let Some(account) = self.account(user)? else { return Err(LedgerError::UnknownUser(user.to_string())) };
        let mut stmt = self.conn.prepare_cached(&format!(
            "{USER_CHAIN} LIMIT ?2)
             SELECT e.id, e.user, e.kind, e.amount, e.at, e.actor, e.reason, e.key, e.job_id, e.gpu_type
             FROM chain CROSS JOIN entries e ON e.id = chain.id ORDER BY e.id DESC"
        ))?;
        let mut balance = account.balance;
        let mut entries: Vec<Entry> = stmt
            .query_map(params![user, limit as i64], entry_row)?
            .map(|e| {
                e.map(|mut e| {
                    // Newest first: the balance after an entry is the one after the next, less it.
                    e.balance_after = balance;
                    balance = balance - e.amount;
                    e
                })
            })
            .collect::<Result<_, _>>()?;
        entries.reverse();
        Ok(entries)
    }

    /// Tokens charged to `user` per GPU type on `first_day` (a local date) and the days after it
    /// (refunds are not subtracted: usage is usage).
    pub fn used_since_day(&self, user: &str, first_day: NaiveDate) -> Result<BTreeMap<String, Tokens>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT gpu_type, SUM(charged) FROM usage_days WHERE user = ?1 AND day >= ?2
             GROUP BY gpu_type ORDER BY gpu_type",
        )?;
        let used = stmt
            .query_map(params![user, first_day.to_string()], |r| {
                Ok((r.get::<_, String>(0)?, Tokens::from_micro(r.get(1)?)))
            })?
            .collect::<Result<_, _>>()?;
        Ok(used)
    }

    /// Tokens charged to all users per GPU type on `first_day` and the days after it.
    pub fn used_by_type_since(&self, first_day: NaiveDate) -> Result<BTreeMap<String, Tokens>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT gpu_type, SUM(charged) FROM usage_days WHERE day >= ?1 GROUP BY gpu_type ORDER BY gpu_type",
        )?;
        let used = stmt
            .query_map([first_day.to_string()], |r| Ok((r.get::<_, String>(0)?, Tokens::from_micro(r.get(1)?))))?
            .collect::<Result<_, _>>()?;
        Ok(used)
    }

    pub(crate) fn entries_by_id(&self, ids: &[i64]) -> Result<Vec<Entry>, LedgerError> {
        let mut out = Vec::new();
        for id in ids {
            let user: String = self.conn.query_row("SELECT user FROM entries WHERE id = ?1", [id], |r| r.get(0))?;
            out.extend(self.history(&user)?.into_iter().filter(|e| e.id == *id));
        }
        Ok(out)
    }
}

/// An entry as `SELECT id, user, kind, amount, at, actor, reason, key, job_id, gpu_type` reads it;
/// `balance_after` is left for the caller.
fn entry_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    Ok(Entry {
        id: r.get(0)?,
        user: r.get(1)?,
        kind: EntryKind::parse(&r.get::<_, String>(2)?),
        amount: Tokens::from_micro(r.get(3)?),
        balance_after: Tokens::ZERO,
        at: r.get(4)?,
        actor: r.get(5)?,
        reason: r.get(6)?,
        key: r.get(7)?,
        job_id: r.get(8)?,
        gpu_type: r.get(9)?,
    })
}

/// A user's entries as the recursive table `chain(id)`, walked down `prev_id` from the newest; `?1`
/// is the user. Close it with `)`, or with `LIMIT n)` to stop the walk after n entries.
pub(crate) const USER_CHAIN: &str = "WITH RECURSIVE chain(id) AS (
        SELECT last_entry FROM users WHERE name = ?1 AND last_entry IS NOT NULL
        UNION ALL
        SELECT e.prev_id FROM chain CROSS JOIN entries e ON e.id = chain.id WHERE e.prev_id IS NOT NULL";
