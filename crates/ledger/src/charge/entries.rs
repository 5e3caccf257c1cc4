//! Charge entries written many rows per statement. Each is known by its id when it is made, one
//! past the newest entry (entries are never deleted), given with the row, so the same balance's
//! next charge links to it (`prev_id`) before it is written; each insert checks the id SQLite gave
//! its last row. Whatever else appends entries in the same transaction (a user's initial grant)
//! does so between the pending ones being written and the next id being read again
//! ([`Entries::around`]).

use std::borrow::Cow;
use std::fmt::Write;
use std::ops::Range;

use crate::db::Null;
use crate::db::{Dialect, Statement, Transaction};

use super::super::LedgerError;

/// Entries per insert statement (the last few of a chunk one by one). Few: SQLite copies each bound
/// string into its connection's small allocations while they last (the statements a cycle holds
/// take some), and from malloc after; eight measured the fewest instructions per entry in the
/// charging benchmark (one: 12 % more, four: 2 %, sixteen: 3 %).
const ROWS: usize = 8;
/// On MariaDB each statement is a round trip to the server: many more rows each.
const MARIA_ROWS: usize = 1024;
/// Parameters of a row: user, amount, reason, job, GPU type, GPU-seconds, previous entry, member,
/// id. The id is given, not left to the database: MariaDB's auto-increment skips the ids of
/// rolled-back inserts, where the links need the ids predicted.
const PARAMS: usize = 9;

/// A charge entry.
pub(super) struct Charge<'r> {
    pub payer: Cow<'r, str>,
    pub amount: i64,
    pub job_id: &'r str,
    pub gpu_type: &'r str,
    pub gpu_seconds: i64,
    pub prev_id: Option<i64>,
    pub member: Option<&'r str>,
}

pub(super) struct Entries<'tx, 'r> {
    tx: &'tx Transaction<'tx>,
    now: i64,
    insert_one: Statement<'tx>,
    insert_many: Statement<'tx>,
    /// Rows of `insert_many`.
    rows: usize,
    next_id: i64,
    pending: Vec<(i64, Charge<'r>, Range<usize>)>,
    /// The pending entries' reasons, one after another.
    reasons: String,
}

impl<'tx, 'r> Entries<'tx, 'r> {
    /// Statements for entries stamped `now` (parameter 1 of each).
    pub fn prepare(tx: &'tx Transaction<'tx>, now: i64) -> Result<Self, LedgerError> {
        let insert_one = tx.prepare(&insert_sql(1))?;
        let rows = match tx.dialect() {
            Dialect::Sqlite => ROWS,
            Dialect::MariaDb => MARIA_ROWS,
        };
        let insert_many = tx.prepare(&insert_sql(rows))?;
        let mut entries =
            Entries { tx, now, insert_one, insert_many, rows, next_id: 0, pending: Vec::new(), reasons: String::new() };
        entries.read_next_id()?;
        Ok(entries)
    }

    /// Adds a charge entry whose reason `reason` writes; returns its id.
    pub fn add(&mut self, charge: Charge<'r>, reason: impl FnOnce(&mut String)) -> Result<i64, LedgerError> {
        let id = self.next_id;
        self.next_id =
            id.checked_add(1).ok_or_else(|| LedgerError::Damaged("the ledger has no entry id left".into()))?;
        let from = self.reasons.len();
        reason(&mut self.reasons);
        self.pending.push((id, charge, from..self.reasons.len()));
        if self.pending.len() == self.rows {
            bind(&mut self.insert_many, self.now, &self.pending, &self.reasons)?;
            self.insert_many.raw_execute()?;
            self.insert_many.clear_bindings();
            self.check_last(id)?;
            self.pending.clear();
            self.reasons.clear();
        }
        Ok(id)
    }

    /// Writes the entries not written yet.
    pub fn write_pending(&mut self) -> Result<(), LedgerError> {
        if self.tx.dialect() == Dialect::MariaDb && self.pending.len() > 1 {
            // In a few statements of fixed sizes: each statement is a round trip.
            for entries in crate::db::sized_slices(&self.pending) {
                let mut insert = self.tx.prepare_cached(&insert_sql(entries.len()))?;
                bind(&mut insert, self.now, entries, &self.reasons)?;
                insert.raw_execute()?;
            }
            if let Some(&(id, ..)) = self.pending.last() {
                self.check_last(id)?;
            }
            self.pending.clear();
            self.reasons.clear();
            return Ok(());
        }
        for entry in &self.pending {
            bind(&mut self.insert_one, self.now, std::slice::from_ref(entry), &self.reasons)?;
            self.insert_one.raw_execute()?;
            self.insert_one.clear_bindings();
        }
        if let Some(&(id, ..)) = self.pending.last() {
            self.check_last(id)?;
        }
        self.pending.clear();
        self.reasons.clear();
        Ok(())
    }

    /// The last entry written got `id`, as its charges' links expect.
    fn check_last(&self, id: i64) -> Result<(), LedgerError> {
        if self.tx.dialect() == Dialect::MariaDb {
            // The id was given with the row; a duplicate would have failed the insert.
            self.tx.inserted_with_id(id);
            return Ok(());
        }
        match self.tx.last_insert_rowid() {
            written if written == id => Ok(()),
            written => Err(LedgerError::Damaged(format!("a charge entry expected as {id} was written as {written}"))),
        }
    }

    /// Writes the pending entries, then lets `append` add the one entry it may (a user's initial
    /// grant, whose id it returns) in the same transaction.
    pub fn around(
        &mut self,
        append: impl FnOnce() -> Result<Option<i64>, LedgerError>,
    ) -> Result<Option<i64>, LedgerError> {
        self.write_pending()?;
        let added = append()?;
        if let Some(id) = added {
            if id != self.next_id {
                return Err(LedgerError::Damaged(format!("an entry expected as {} was written as {id}", self.next_id)));
            }
            self.next_id = id + 1;
        }
        Ok(added)
    }

    /// Writes the pending entries, then gives the next `n` ids to the caller, who writes entries
    /// with them in the same transaction (users new to the ledger, their initial balances).
    pub fn reserve(&mut self, n: usize) -> Result<std::ops::Range<i64>, LedgerError> {
        self.write_pending()?;
        let first = self.next_id;
        self.next_id = i64::try_from(n)
            .ok()
            .and_then(|n| first.checked_add(n))
            .ok_or_else(|| LedgerError::Damaged("the ledger has no entry id left".into()))?;
        Ok(first..self.next_id)
    }

    fn read_next_id(&mut self) -> Result<(), LedgerError> {
        let newest: Option<i64> = self.tx.prepare_cached("SELECT MAX(id) FROM entries")?.query_row((), |r| r.get(0))?;
        self.next_id = newest
            .unwrap_or(0)
            .checked_add(1)
            .ok_or_else(|| LedgerError::Damaged("the ledger has no entry id left".into()))?;
        Ok(())
    }
}

/// An insert of `rows` charge entries, [`PARAMS`] parameters each after `now` (?1).
fn insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT OR FAIL INTO entries (id, user, kind, amount, at, actor, reason, job_id, gpu_type, gpu_seconds, prev_id, member) VALUES ",
    );
    for row in 0..rows {
        let p = |k: usize| 1 + row * PARAMS + k;
        let sep = if row == 0 { "" } else { ", " };
        let _ = write!(
            sql,
            "{sep}(?{}, ?{}, 'charge', ?{}, ?1, 'gputokens', ?{}, ?{}, ?{}, ?{}, ?{}, ?{})",
            p(9),
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6),
            p(7),
            p(8)
        );
    }
    sql
}

/// Binds entries stamped `now` to an insert of as many rows.
fn bind(
    insert: &mut Statement<'_>,
    now: i64,
    entries: &[(i64, Charge<'_>, Range<usize>)],
    reasons: &str,
) -> Result<(), LedgerError> {
    insert.raw_bind_parameter(1, now)?;
    for (n, (id, charge, reason)) in entries.iter().enumerate() {
        let p = 1 + n * PARAMS;
        insert.raw_bind_parameter(p + 1, charge.payer.as_ref())?;
        insert.raw_bind_parameter(p + 2, charge.amount)?;
        insert.raw_bind_parameter(p + 3, &reasons[reason.clone()])?;
        insert.raw_bind_parameter(p + 4, charge.job_id)?;
        insert.raw_bind_parameter(p + 5, charge.gpu_type)?;
        insert.raw_bind_parameter(p + 6, charge.gpu_seconds)?;
        insert.raw_bind_parameter(p + 7, charge.prev_id)?;
        match charge.member {
            Some(member) => insert.raw_bind_parameter(p + 8, member)?,
            None => insert.raw_bind_parameter(p + 8, Null)?,
        }
        insert.raw_bind_parameter(p + 9, *id)?;
    }
    Ok(())
}
