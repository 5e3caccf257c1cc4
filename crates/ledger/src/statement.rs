//! Monthly statements from the ledger: the opening and closing balances as SQLite sums them, and the
//! month's entries fed to [`gputokens::statement`], which lines them up and refuses a statement whose
//! lines do not add up to the closing balance. Both reads share one snapshot of the ledger, so a
//! charge cycle writing on another connection in between cannot unbalance it.

use std::collections::BTreeMap;

use rusqlite::{params, Transaction, TransactionBehavior};

use gputokens::statement::{Month, MonthEntry, Statement, StatementBuilder};
use gputokens::time::local_date;
use gputokens::tokens::Tokens;

use super::history::USER_CHAIN;
use super::{EntryKind, Ledger, LedgerError};

/// The columns [`month_entry`] reads, after any leading ones.
const ENTRY_COLUMNS: &str = "e.kind, e.amount, e.at, e.actor, e.reason, e.key, e.job_id, e.gpu_type, e.gpu_seconds";

/// When the statement is drawn up, and whether its month is still running.
#[derive(Debug, Clone, Copy)]
pub struct Issue {
    pub at: i64,
    pub partial: bool,
}

impl Ledger {
    /// `user`'s statement for `month`. An error when the ledger has no entry of theirs before the
    /// month's end: a user gputokens never saw, or saw only later, has nothing to state.
    pub fn statement(&self, user: &str, month: Month, issue: Issue) -> Result<Statement, LedgerError> {
        let (start, end) = month.bounds();
        let tx = self.read_snapshot()?;
        let Some(first_seen) = self.account(user)?.map(|a| a.first_seen) else {
            return Err(LedgerError::UnknownUser(user.to_string()));
        };
        // SQLite's SUM of integers fails on overflow rather than rounding: exact or an error.
        let (opening, closing, before_end): (i64, i64, i64) = tx
            .prepare_cached(&format!(
                "{USER_CHAIN})
             SELECT COALESCE(SUM(CASE WHEN e.at < ?2 THEN e.amount END), 0),
                    COALESCE(SUM(CASE WHEN e.at < ?3 THEN e.amount END), 0),
                    COUNT(CASE WHEN e.at < ?3 THEN 1 END)
             FROM chain CROSS JOIN entries e ON e.id = chain.id"
            ))?
            .query_row(params![user, start, end], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        if before_end == 0 {
            return Err(LedgerError::NotYetSeen {
                user: user.to_string(),
                month: month.to_string(),
                first_seen: local_date(first_seen).to_string(),
            });
        }
        let mut builder = StatementBuilder::new(user, month, Tokens::from_micro(opening));
        let mut stmt = tx.prepare_cached(&format!(
            "{USER_CHAIN})
             SELECT {ENTRY_COLUMNS} FROM chain CROSS JOIN entries e ON e.id = chain.id
             WHERE e.at >= ?2 AND e.at < ?3 ORDER BY e.id"
        ))?;
        let mut rows = stmt.query(params![user, start, end])?;
        while let Some(row) = rows.next()? {
            builder.add(&month_entry(row, 0)?)?;
        }
        Ok(builder.finish(Tokens::from_micro(closing), issue.at, issue.partial)?)
    }

    /// The statement of every user with entries before the month's end, by name: two passes over
    /// the entries table rather than one walk per user.
    pub fn statements(&self, month: Month, issue: Issue) -> Result<Vec<Statement>, LedgerError> {
        let (start, end) = month.bounds();
        let tx = self.read_snapshot()?;
        let mut users: BTreeMap<String, (StatementBuilder, Tokens)> = BTreeMap::new();
        {
            let mut stmt = tx.prepare_cached(
                "SELECT user, COALESCE(SUM(CASE WHEN at < ?1 THEN amount END), 0), SUM(amount)
                 FROM entries WHERE at < ?2 GROUP BY user",
            )?;
            let mut rows = stmt.query(params![start, end])?;
            while let Some(row) = rows.next()? {
                let user: String = row.get(0)?;
                let opening = Tokens::from_micro(row.get(1)?);
                let builder = StatementBuilder::new(&user, month, opening);
                users.insert(user, (builder, Tokens::from_micro(row.get(2)?)));
            }
        }
        let mut stmt = tx.prepare_cached(&format!(
            "SELECT e.user, {ENTRY_COLUMNS} FROM entries e WHERE e.at >= ?1 AND e.at < ?2 ORDER BY e.id"
        ))?;
        let mut rows = stmt.query(params![start, end])?;
        while let Some(row) = rows.next()? {
            let user: String = row.get(0)?;
            // The same snapshot summed this entry's user above; were it missing, the balances of 0
            // would not add up and the statement would be refused.
            let (builder, _) = users
                .entry(user)
                .or_insert_with_key(|user| (StatementBuilder::new(user, month, Tokens::ZERO), Tokens::ZERO));
            builder.add(&month_entry(row, 1)?)?;
        }
        users.into_values().map(|(builder, closing)| Ok(builder.finish(closing, issue.at, issue.partial)?)).collect()
    }

    /// A read transaction: every query in it sees the ledger as it was at the first one.
    fn read_snapshot(&self) -> Result<Transaction<'_>, LedgerError> {
        Ok(Transaction::new_unchecked(&self.conn, TransactionBehavior::Deferred)?)
    }
}

/// The [`ENTRY_COLUMNS`] of `row`, starting at column `first`.
fn month_entry(row: &rusqlite::Row<'_>, first: usize) -> Result<MonthEntry, LedgerError> {
    let gpu_seconds: Option<i64> = row.get(first + 8)?;
    Ok(MonthEntry {
        kind: EntryKind::parse(&row.get::<_, String>(first)?),
        amount: Tokens::from_micro(row.get(first + 1)?),
        at: row.get(first + 2)?,
        actor: row.get(first + 3)?,
        reason: row.get(first + 4)?,
        key: row.get(first + 5)?,
        job_id: row.get(first + 6)?,
        gpu_type: row.get(first + 7)?,
        // Written from a u64 that fit an i64: a negative count is a damaged ledger.
        gpu_seconds: gpu_seconds
            .map(|s| u64::try_from(s).map_err(|_| LedgerError::Damaged(format!("negative GPU-seconds {s}"))))
            .transpose()?,
    })
}

#[cfg(test)]
mod tests;
