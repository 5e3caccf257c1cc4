//! Reading entries back: a user's history with the balance after each entry, and what users were
//! charged per GPU type since a day.

use std::collections::BTreeMap;

use crate::db::params;
use chrono::NaiveDate;

use gputokens::entry::{Entry, EntryKind};
use gputokens::tokens::Tokens;

use super::{Ledger, LedgerError};

impl Ledger {
    /// Every entry of `user`, oldest first, with the running balance.
    pub fn history(&self, user: &str) -> Result<Vec<Entry>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "{USER_CHAIN})
             SELECT {ENTRY_COLUMNS} FROM chain CROSS JOIN entries e ON e.id = chain.id ORDER BY e.id"
        ))?;
        let mut balance = Tokens::ZERO;
        let mut entries = Vec::new();
        let mut rows = stmt.query(params![user])?;
        while let Some(row) = rows.next()? {
            let mut entry = entry_row(&row)?;
            balance = balance + entry.amount;
            entry.balance_after = balance;
            entries.push(entry);
        }
        if entries.is_empty() {
            return Err(LedgerError::UnknownUser(user.to_string()));
        }
        Ok(entries)
    }

    /// The newest `limit` entries of `user`, oldest first, with the balance after each: read down the
    /// user's chain from the newest, so the cost is `limit` lookups however long the history.
    pub fn recent(&self, user: &str, limit: usize) -> Result<Vec<Entry>, LedgerError> {
        let Some(account) = self.account(user)? else { return Err(LedgerError::UnknownUser(user.to_string())) };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut stmt = self.conn.prepare_cached(&format!(
            "{USER_CHAIN} AND chain.depth < ?2)
             SELECT {ENTRY_COLUMNS} FROM chain CROSS JOIN entries e ON e.id = chain.id ORDER BY e.id DESC"
        ))?;
        let mut balance = account.balance;
        let mut entries = Vec::new();
        let mut rows = stmt.query(params![user, limit as i64])?;
        while let Some(row) = rows.next()? {
            let mut entry = entry_row(&row)?;
            // Newest first: the balance after an entry is the one after the next, less it.
            entry.balance_after = balance;
            balance = balance - entry.amount;
            entries.push(entry);
        }
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
                Ok((r.get::<String>(0)?, Tokens::from_micro(r.get(1)?)))
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
            .query_map([first_day.to_string()], |r| Ok((r.get::<String>(0)?, Tokens::from_micro(r.get(1)?))))?
            .collect::<Result<_, _>>()?;
        Ok(used)
    }

    /// The entry stored under idempotency key `key`, if any (balance_after left at zero).
    pub fn entry_with_key(&self, key: &str) -> Result<Option<Entry>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {ENTRY_COLUMNS} FROM entry_keys k JOIN entries e ON e.id = k.entry_id WHERE k.key = ?1"
        ))?;
        let mut rows = stmt.query([key])?;
        rows.next()?.map(|r| entry_row(&r)).transpose()
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

/// The columns of `entries e` that [`entry_row`] reads.
pub(crate) const ENTRY_COLUMNS: &str =
    "e.id, e.user, e.kind, e.amount, e.at, e.actor, e.reason, e.key, e.job_id, e.gpu_type, e.gpu_seconds";

/// An entry as [`ENTRY_COLUMNS`] read it; `balance_after` is left for the caller.
pub(crate) fn entry_row(row: &crate::db::Row<'_>) -> Result<Entry, LedgerError> {
    let gpu_seconds: Option<i64> = row.get(10)?;
    Ok(Entry {
        id: row.get(0)?,
        user: row.get(1)?,
        kind: EntryKind::parse(&row.get::<String>(2)?),
        amount: Tokens::from_micro(row.get(3)?),
        balance_after: Tokens::ZERO,
        at: row.get(4)?,
        actor: row.get(5)?,
        reason: row.get(6)?,
        key: row.get(7)?,
        job_id: row.get(8)?,
        gpu_type: row.get(9)?,
        // Written from a u64 that fit an i64: a negative count is a damaged ledger.
        gpu_seconds: gpu_seconds
            .map(|s| u64::try_from(s).map_err(|_| LedgerError::Damaged(format!("negative GPU-seconds {s}"))))
            .transpose()?,
    })
}

/// A user's entries as the recursive table `chain(id, depth)`, walked down `prev_id` from the
/// newest (depth 1); `?1` is the user. Close it with `)`, or with `AND chain.depth < n)` to stop
/// the walk after n entries (MariaDB has no LIMIT in a recursive table).
pub(crate) const USER_CHAIN: &str = "WITH RECURSIVE chain(id, depth) AS (
        SELECT last_entry, 1 FROM users WHERE name = ?1 AND last_entry IS NOT NULL
        UNION ALL
        SELECT e.prev_id, chain.depth + 1 FROM chain CROSS JOIN entries e ON e.id = chain.id WHERE e.prev_id IS NOT NULL";
