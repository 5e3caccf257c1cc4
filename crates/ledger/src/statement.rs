//! Monthly statements from the ledger: the opening and closing balances as SQLite sums them, and the
//! month's entries fed to [`gputokens::statement`], which lines them up and refuses a statement whose
//! lines do not add up to the closing balance. Both reads share one snapshot of the ledger, so a
//! charge cycle writing on another connection in between cannot unbalance it.

use std::collections::{BTreeMap, HashMap};

use crate::db::{params, Transaction};

use gputokens::entry::{Entry, EntryKind};
use gputokens::statement::{idle_part, Month, Statement, StatementBuilder, UNTYPED_LINE};
use gputokens::time::local_date;
use gputokens::tokens::Tokens;

use super::history::{entry_row, ENTRY_COLUMNS, USER_CHAIN};
use super::{Ledger, LedgerError};

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
        let mut balance = Tokens::from_micro(opening);
        let mut builder = StatementBuilder::new(user, month, balance);
        let mut stmt = tx.prepare_cached(&format!(
            "{USER_CHAIN})
             SELECT {ENTRY_COLUMNS} FROM chain CROSS JOIN entries e ON e.id = chain.id
             WHERE e.at >= ?2 AND e.at < ?3 ORDER BY e.id"
        ))?;
        let mut rows = stmt.query(params![user, start, end])?;
        let mut idle = IdleShares::default();
        let energy = super::energy::month_energy(&tx, month)?;
        while let Some(row) = rows.next()? {
            let mut entry = entry_row(&row)?;
            balance = balance + entry.amount;
            entry.balance_after = balance;
            builder.add(&entry)?;
            idle.note(self, &mut builder, &entry)?;
            note_energy(&energy, &mut builder, &entry);
        }
        Ok(builder.finish(Tokens::from_micro(closing), issue.at, issue.partial)?)
    }

    /// The statement of every user with entries before the month's end, by name: two passes over
    /// the entries table rather than one walk per user.
    pub fn statements(&self, month: Month, issue: Issue) -> Result<Vec<Statement>, LedgerError> {
        let (start, end) = month.bounds();
        let tx = self.read_snapshot()?;
        let mut users: BTreeMap<String, Draft> = BTreeMap::new();
        {
            let mut stmt = tx.prepare_cached(
                "SELECT user, COALESCE(SUM(CASE WHEN at < ?1 THEN amount END), 0), SUM(amount)
                 FROM entries WHERE at < ?2 GROUP BY user",
            )?;
            let mut rows = stmt.query(params![start, end])?;
            while let Some(row) = rows.next()? {
                let user: String = row.get(0)?;
                let draft = Draft::new(&user, month, Tokens::from_micro(row.get(1)?), Tokens::from_micro(row.get(2)?));
                users.insert(user, draft);
            }
        }
        let mut stmt = tx.prepare_cached(&format!(
            "SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.at >= ?1 AND e.at < ?2 ORDER BY e.id"
        ))?;
        let mut rows = stmt.query(params![start, end])?;
        let mut idle = IdleShares::default();
        let energy = super::energy::month_energy(&tx, month)?;
        while let Some(row) = rows.next()? {
            let mut entry = entry_row(&row)?;
            // The same snapshot summed this entry's user above; were it missing, the balances of 0
            // would not add up and the statement would be refused.
            let draft = users
                .entry(entry.user.clone())
                .or_insert_with_key(|user| Draft::new(user, month, Tokens::ZERO, Tokens::ZERO));
            draft.balance = draft.balance + entry.amount;
            entry.balance_after = draft.balance;
            draft.builder.add(&entry)?;
            idle.note(self, &mut draft.builder, &entry)?;
            note_energy(&energy, &mut draft.builder, &entry);
        }
        users.into_values().map(|draft| Ok(draft.builder.finish(draft.closing, issue.at, issue.partial)?)).collect()
    }

    /// A read transaction: every query in it sees the ledger as it was at the first one.
    fn read_snapshot(&self) -> Result<Transaction<'_>, LedgerError> {
        Ok(self.conn.read_transaction()?)
    }
}

/// Each job's share of idle utilization samples, read once per statement run: a GPU-time charge
/// entry's idle part goes to its GPU type's line.
#[derive(Default)]
struct IdleShares(HashMap<String, Option<(u64, u64)>>);

impl IdleShares {
    fn note(&mut self, ledger: &Ledger, builder: &mut StatementBuilder, entry: &Entry) -> Result<(), LedgerError> {
        let (EntryKind::Charge, Some(job)) = (entry.kind, entry.job_id.as_deref()) else { return Ok(()) };
        // Idle is a share of GPU time; a GPU's energy is what it used, idle or not.
        if entry.is_energy_charge() {
            return Ok(());
        }
        let share = match self.0.get(job) {
            Some(share) => *share,
            None => *self.0.entry(job.to_string()).or_insert(ledger.idle_share(job)?),
        };
        if let Some(share) = share {
            let gpu_type = entry.gpu_type.as_deref().unwrap_or(UNTYPED_LINE);
            builder.add_idle(gpu_type, idle_part(-entry.amount, share));
        }
        Ok(())
    }
}

/// A charge entry's job's energy of the month (`month_energy`) goes to its GPU type's line, once
/// per job and statement: the job's first charge of the month names the line. A job charged to two
/// balances (a pool and its member) shows its energy on both statements.
fn note_energy(month: &HashMap<String, u64>, builder: &mut StatementBuilder, entry: &Entry) {
    let (EntryKind::Charge, Some(job)) = (entry.kind, entry.job_id.as_deref()) else { return };
    if let Some(&joules) = month.get(job) {
        builder.add_energy(job, entry.gpu_type.as_deref().unwrap_or(UNTYPED_LINE), joules);
    }
}

/// One user's statement while [`Ledger::statements`] reads the month's entries.
struct Draft {
    builder: StatementBuilder,
    /// The month's running balance: the opening one plus the entries read so far.
    balance: Tokens,
    /// The balance the ledger holds for the month's end.
    closing: Tokens,
}

impl Draft {
    fn new(user: &str, month: Month, opening: Tokens, closing: Tokens) -> Draft {
        Draft { builder: StatementBuilder::new(user, month, opening), balance: opening, closing }
    }
}

#[cfg(test)]
mod tests;
