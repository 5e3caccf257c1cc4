//! How far each run of the jobs being charged was charged (`job_charges`), kept in memory for a
//! chunk of records and written back at the end of the chunk, in the same transaction as the
//! entries: a record of a job charged before costs no statement of its own, a new run one row of a
//! many-row insert. A new run's row that its first entry charged whole (the run's user paid it) is
//! written from that entry: its job, GPU type, user and amount (`-amount`) are read from it rather
//! than bound again.
//!
//! A chunk is read one of two ways. Carefully: every row of the chunk's jobs, with one query, so
//! what a record finds is what the ledger's rows would say at that point. Or, where a chunk can
//! only hold runs charged by their start (no SLUID in the cycle nor in the ledger), expecting its
//! runs to be new: a new row whose key is taken then fails its insert, and the cycle charges the
//! chunk again, read (see `Cycle::charge_chunk`).

use std::borrow::Cow;
use std::fmt::Write;

use crate::db::Null;
use crate::db::{params, Dialect, Statement, Transaction};

use super::super::{LedgerError, UsageRecord};
use gputokens::tokens::Tokens;
use rustc_hash::FxHashMap as FastMap;

/// Records per chunk: the jobs of one chunk are read with one query of as many parameters as a
/// lookup takes ([`Dialect::in_list`]; a steady cycle re-reads 110,000 runs on MariaDB: 1,024 a
/// query took 1.1 s to 256's 1.3 s).
pub(super) fn chunk_size(dialect: Dialect) -> usize {
    dialect.in_list()
}
/// New rows per insert statement (the rest of a chunk's a few or one at a time): many where the
/// rows are written from their entries (three numbers each), few where their strings are bound
/// (SQLite copies each bound string, into its own small allocations while they last).
const INSERT_ROWS: usize = 4;
const MARIA_INSERT_ROWS: usize = 1024;
const FROM_ENTRY_ROWS: usize = 64;
const FROM_ENTRY_FEW: usize = 8;
/// No next row.
const END: usize = usize::MAX;

/// What a record found for a run and GPU type: how far it had been charged (None: the record adds
/// nothing), and the run's row where the record made it.
pub(super) struct Advanced {
    pub until: Option<Progress>,
    pub new_row: Option<usize>,
}

/// How far a run and GPU type had been charged.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Progress {
    pub seconds: u64,
    pub charged: Tokens,
}

/// One row of `job_charges`.
struct Row<'r> {
    job: &'r str,
    /// The job's next row in `Runs::rows`, or END.
    next: usize,
    /// The run's key; None for `start:<segment_start>`, the key of a run without a SLUID.
    run: Option<Cow<'r, str>>,
    segment_start: i64,
    gpu_type: Cow<'r, str>,
    /// Seconds and micro-tokens charged.
    until: i64,
    charged: i64,
    /// Micro-tokens its run's GPU energy was charged (`energy_charge`): read, never written here.
    energy: i64,
    state: State<'r>,
    /// A new row charged whole by one entry (its user's): the entry it is written from.
    entry: Option<i64>,
    /// Whether the row is as it was made (an entry for all of it can stand for it).
    as_made: bool,
}

enum State<'r> {
    /// As the ledger has it.
    Stored,
    /// Not in the ledger yet: made in this chunk for `user`.
    New { user: &'r str },
    /// Charged further in this chunk (or taken over by a SLUID); stored under `stored_run`.
    Changed { stored_run: Option<String> },
}

impl Row<'_> {
    fn run(&self) -> Cow<'_, str> {
        match &self.run {
            Some(run) => Cow::Borrowed(run),
            None => Cow::Owned(format!("start:{}", self.segment_start)),
        }
    }

    /// Whether the run is keyed `start:<start>` (`start_key`).
    fn keyed_by_start(&self, start: i64, start_key: &str) -> bool {
        match &self.run {
            None => self.segment_start == start,
            Some(run) => run == start_key,
        }
    }

    fn keyed(&self, key: &str) -> bool {
        match &self.run {
            Some(run) => run == key,
            None => key.starts_with("start:") && self.run() == key,
        }
    }
}

/// The statements that read and write `job_charges` for a charge cycle, each prepared the first
/// time the cycle needs it: a statement held takes memory SQLite would otherwise bind values in.
pub(super) struct RunStatements<'tx> {
    tx: &'tx Transaction<'tx>,
    load: Option<Statement<'tx>>,
    insert_one: Option<Statement<'tx>>,
    insert_many: Option<Statement<'tx>>,
    from_entry_one: Option<Statement<'tx>>,
    from_entry_few: Option<Statement<'tx>>,
    from_entry_many: Option<Statement<'tx>>,
    update: Option<Statement<'tx>>,
    rename: Option<Statement<'tx>>,
}

/// `slot`'s statement, prepared from `sql` the first time.
fn prepared<'a, 'tx>(
    tx: &'tx Transaction<'tx>,
    slot: &'a mut Option<Statement<'tx>>,
    sql: impl FnOnce() -> String,
) -> Result<&'a mut Statement<'tx>, LedgerError> {
    if slot.is_none() {
        *slot = Some(tx.prepare(&sql())?);
    }
    Ok(slot.as_mut().expect("prepared above"))
}

/// An insert of `rows` new rows, seven parameters each; a run without a SLUID (NULL) is keyed by
/// its start here.
fn insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT OR FAIL INTO job_charges (job_id, run, segment_start, gpu_type, user, charged_until, charged) VALUES ",
    );
    for row in 0..rows {
        let p = |k: usize| row * 7 + k;
        let sep = if row == 0 { "" } else { ", " };
        let _ = write!(
            sql,
            "{sep}(?{}, coalesce(?{}, 'start:' || ?{}), ?{}, ?{}, ?{}, ?{}, ?{})",
            p(1),
            p(2),
            p(3),
            p(3),
            p(4),
            p(5),
            p(6),
            p(7)
        );
    }
    sql
}

/// An insert of `rows` new rows written from their entries, three parameters each: the entry, the
/// run's start, its seconds.
fn from_entry_sql(rows: usize, dialect: Dialect) -> String {
    let values: Vec<String> = match dialect {
        Dialect::Sqlite => (0..rows).map(|r| format!("(?{}, ?{}, ?{})", r * 3 + 1, r * 3 + 2, r * 3 + 3)).collect(),
        // MariaDB names a VALUES list's columns after its first row's values: the rows are
        // selected under SQLite's names instead.
        Dialect::MariaDb => (0..rows)
            .map(|r| {
                let (a, b, c) = (r * 3 + 1, r * 3 + 2, r * 3 + 3);
                match r {
                    0 => format!("SELECT ?{a} AS column1, ?{b} AS column2, ?{c} AS column3"),
                    _ => format!("SELECT ?{a}, ?{b}, ?{c}"),
                }
            })
            .collect(),
    };
    let (table, joined) = match dialect {
        Dialect::Sqlite => ("VALUES", values.join(", ")),
        Dialect::MariaDb => ("", values.join(" UNION ALL ")),
    };
    format!(
        "INSERT OR FAIL INTO job_charges (job_id, run, segment_start, gpu_type, user, charged_until, charged)
         SELECT e.job_id, 'start:' || v.column2, v.column2, e.gpu_type, e.user, v.column3, -e.amount
         FROM ({table} {joined}) AS v JOIN entries AS e ON e.id = v.column1"
    )
}

impl<'tx> RunStatements<'tx> {
    pub fn new(tx: &'tx Transaction<'tx>) -> Self {
        RunStatements {
            tx,
            load: None,
            insert_one: None,
            insert_many: None,
            from_entry_one: None,
            from_entry_few: None,
            from_entry_many: None,
            update: None,
            rename: None,
        }
    }

    /// The insert of `rows` new rows (1, or INSERT_ROWS).
    fn insert(&mut self, rows: usize) -> Result<&mut Statement<'tx>, LedgerError> {
        let slot = if rows == 1 { &mut self.insert_one } else { &mut self.insert_many };
        prepared(self.tx, slot, || insert_sql(rows))
    }

    /// The insert of `rows` new rows written from their entries (1, FROM_ENTRY_FEW or FROM_ENTRY_ROWS).
    fn insert_from_entry(&mut self, rows: usize) -> Result<&mut Statement<'tx>, LedgerError> {
        let slot = match rows {
            1 => &mut self.from_entry_one,
            FROM_ENTRY_FEW => &mut self.from_entry_few,
            _ => &mut self.from_entry_many,
        };
        prepared(self.tx, slot, || from_entry_sql(rows, self.tx.dialect()))
    }
    fn load(&mut self) -> Result<&mut Statement<'tx>, LedgerError> {
        prepared(self.tx, &mut self.load, || {
            let jobs: Vec<String> = (1..=chunk_size(self.tx.dialect())).map(|i| format!("?{i}")).collect();
            format!(
                "SELECT job_id, run, segment_start, gpu_type, charged_until, charged, energy_charged FROM job_charges WHERE job_id IN ({})",
                jobs.join(", ")
            )
        })
    }

    fn update(&mut self) -> Result<&mut Statement<'tx>, LedgerError> {
        prepared(self.tx, &mut self.update, || {
            "UPDATE job_charges SET charged_until = ?4, charged = ?5 WHERE job_id = ?1 AND run = ?2 AND gpu_type = ?3"
                .into()
        })
    }

    /// A row of a run keyed by its start (charged before Slurm gave the SLUID: an older ledger, or
    /// a Slurm upgraded under the job) that its SLUID took over.
    fn rename(&mut self) -> Result<&mut Statement<'tx>, LedgerError> {
        prepared(self.tx, &mut self.rename, || {
            "UPDATE job_charges SET run = ?4, charged_until = ?5, charged = ?6 WHERE job_id = ?1 AND run = ?2 AND gpu_type = ?3"
                .into()
        })
    }
}

/// Whether the ledger has runs keyed by a SLUID (a flag, schema 22: [`mark_sluid_runs`]).
pub(super) fn any_sluid_runs(tx: &Transaction<'_>) -> Result<bool, LedgerError> {
    Ok(tx.query_row("SELECT EXISTS (SELECT 1 FROM meta WHERE key = 'sluid_runs')", (), |r| r.get(0))?)
}

/// Marks that runs are keyed by a SLUID, in the transaction that charges one.
pub(super) fn mark_sluid_runs(tx: &Transaction<'_>) -> Result<(), LedgerError> {
    tx.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('sluid_runs', '1')", ())?;
    Ok(())
}

/// The rows of one chunk's jobs.
#[derive(Default)]
pub(super) struct Runs<'r> {
    rows: Vec<Row<'r>>,
    /// Each job's first row (END: none).
    first: FastMap<&'r str, usize>,
    /// Rows not in the ledger yet, in the order they were made.
    new: Vec<usize>,
    /// Stored rows charged further.
    changed: Vec<usize>,
    /// Whether the ledger's rows of the chunk's jobs were read (else they are expected to be new).
    read: bool,
    /// `start:<segment start>`, written here to compare with stored keys.
    start_key: String,
}

impl<'r> Runs<'r> {
    /// Starts a chunk of records: with every row of their jobs (`read`), or expecting none.
    pub fn begin(
        &mut self,
        statements: &mut RunStatements<'_>,
        chunk: &'r [UsageRecord],
        read: bool,
    ) -> Result<(), LedgerError> {
        let size = chunk_size(statements.tx.dialect());
        debug_assert!(chunk.len() <= size);
        self.rows.clear();
        self.first.clear();
        self.new.clear();
        self.changed.clear();
        self.read = read;
        for record in chunk {
            self.first.entry(record.job_id.as_str()).or_insert(END);
        }
        if !read {
            return Ok(());
        }
        let load = statements.load()?;
        for (i, job) in self.first.keys().enumerate() {
            load.raw_bind_parameter(i + 1, job)?;
        }
        for i in self.first.len()..size {
            load.raw_bind_parameter(i + 1, Null)?;
        }
        let mut rows = load.raw_query()?;
        while let Some(row) = rows.next()? {
            let job = row.get_str(0)?;
            let Some((&job, first)) = self.first.get_key_value(job.as_ref()) else { continue };
            let next = *first;
            self.rows.push(Row {
                job,
                next,
                run: Some(Cow::Owned(row.get(1)?)),
                segment_start: row.get(2)?,
                gpu_type: Cow::Owned(row.get(3)?),
                until: row.get(4)?,
                charged: row.get(5)?,
                energy: row.get(6)?,
                state: State::Stored,
                entry: None,
                as_made: false,
            });
            self.first.insert(job, self.rows.len() - 1);
        }
        Ok(())
    }

    /// Whether the ledger had rows of the chunk's jobs (false where it was not read).
    pub fn had_stored(&self) -> bool {
        self.rows.iter().any(|r| matches!(r.state, State::Stored | State::Changed { .. }))
    }

    /// The indexes of a job's rows.
    fn of(&self, job: &str) -> impl Iterator<Item = usize> + '_ {
        let mut at = self.first.get(job).copied().unwrap_or(END);
        std::iter::from_fn(move || {
            let this = at;
            (this != END).then(|| {
                at = self.rows[this].next;
                this
            })
        })
    }

    /// What the run of a job that started at `start` was charged so far, all GPU types and its
    /// energy (the chunk must have been read).
    pub fn charged_so_far(&self, job_id: &str, start: i64) -> Result<Tokens, LedgerError> {
        debug_assert!(self.read, "a job's charges are known only where its rows were read");
        let of_run = self.of(job_id).filter(|&i| self.rows[i].segment_start == start);
        let sum: i128 = of_run.map(|i| i128::from(self.rows[i].charged) + i128::from(self.rows[i].energy)).sum();
        let sum = i64::try_from(sum)
            .map_err(|_| LedgerError::Damaged(format!("job {job_id}'s charges add up to {sum} micro-tokens")))?;
        Ok(Tokens::from_micro(sum))
    }

    /// Moves the row of (record, GPU type) to the record's elapsed time and `total` cost; returns
    /// where it was, or None when the record adds nothing (already charged that far).
    ///
    /// A record with a SLUID finds its run by it, taking over a row its run was charged under by
    /// start time; one without finds its run by start time, whatever key the row has (a Slurm that
    /// stopped giving SLUIDs, a downgrade; the least key where there are several): a run is never
    /// charged twice under two names.
    pub fn advance(&mut self, record: &'r UsageRecord, gpu_type: &'r str, total: Tokens) -> Advanced {
        let job = record.job_id.as_str();
        let start = record.segment_start;
        let found = match &record.sluid {
            Some(sluid) => {
                let by_sluid = self.of(job).find(|&i| self.rows[i].gpu_type == gpu_type && self.rows[i].keyed(sluid));
                by_sluid.or_else(|| {
                    self.start_key.clear();
                    let _ = write!(self.start_key, "start:{start}");
                    let by_start = self.of(job).find(|&i| {
                        self.rows[i].gpu_type == gpu_type && self.rows[i].keyed_by_start(start, &self.start_key)
                    });
                    if let Some(i) = by_start {
                        self.take_over(i, sluid);
                    }
                    by_start
                })
            }
            // Several runs of one start (SLUIDs of an expedited requeue): the least key.
            None => self
                .of(job)
                .filter(|&i| self.rows[i].segment_start == start && self.rows[i].gpu_type == gpu_type)
                .reduce(|a, b| if self.rows[b].run() < self.rows[a].run() { b } else { a }),
        };
        let Some(i) = found else {
            let next = self.first.get(job).copied().unwrap_or(END);
            self.rows.push(Row {
                job,
                next,
                run: record.sluid.as_deref().map(Cow::Borrowed),
                segment_start: start,
                gpu_type: Cow::Borrowed(gpu_type),
                until: record.elapsed as i64,
                charged: total.micro(),
                energy: 0,
                state: State::New { user: &record.user },
                entry: None,
                as_made: true,
            });
            let new = self.rows.len() - 1;
            self.first.insert(job, new);
            self.new.push(new);
            return Advanced { until: Some(Progress::default()), new_row: Some(new) };
        };
        let row = &mut self.rows[i];
        let before = Progress { seconds: row.until as u64, charged: Tokens::from_micro(row.charged) };
        if record.elapsed <= before.seconds {
            return Advanced { until: None, new_row: None };
        }
        row.until = record.elapsed as i64;
        row.charged = total.max(before.charged).micro();
        row.as_made = false;
        if let State::Stored = row.state {
            row.state = State::Changed { stored_run: None };
            self.changed.push(i);
        }
        Advanced { until: Some(before), new_row: None }
    }

    /// New row `row` was charged whole by entry `entry` (of the row's user, for all of its charge):
    /// the row is written from it, where it is still as made and keyed by its start.
    pub fn charged_by(&mut self, row: usize, entry: i64) {
        let row = &mut self.rows[row];
        if row.as_made && row.run.is_none() {
            row.entry = Some(entry);
        }
    }

    /// Row `i`, keyed by its start, becomes its run's SLUID's.
    fn take_over(&mut self, i: usize, sluid: &'r str) {
        let row = &mut self.rows[i];
        let stored_run = row.run().into_owned();
        row.run = Some(Cow::Borrowed(sluid));
        row.as_made = false;
        match &mut row.state {
            State::Stored => {
                row.state = State::Changed { stored_run: Some(stored_run) };
                self.changed.push(i);
            }
            State::Changed { stored_run: stored @ None } => *stored = Some(stored_run),
            State::Changed { stored_run: Some(_) } | State::New { .. } => {}
        }
    }

    /// Writes the stored rows charged further in this chunk (before its entries).
    pub fn store_changed(&self, statements: &mut RunStatements<'_>) -> Result<(), LedgerError> {
        let maria = statements.tx.dialect() == Dialect::MariaDb;
        let mut moved = Vec::new();
        for &i in &self.changed {
            let row = &self.rows[i];
            let (job, run, gpu_type) = (row.job, row.run(), row.gpu_type.as_ref());
            match &row.state {
                // On MariaDB each statement is a round trip: the chunk's moves in one, below.
                State::Changed { stored_run: None } if maria => moved.push(i),
                State::Changed { stored_run: None } => {
                    statements.update()?.execute(params![job, run, gpu_type, row.until, row.charged])?;
                }
                State::Changed { stored_run: Some(stored) } => {
                    statements.rename()?.execute(params![job, stored, gpu_type, run, row.until, row.charged])?;
                }
                State::Stored | State::New { .. } => unreachable!("only stored rows are listed as changed"),
            }
        }
        for rows in moved.chunks(chunk_size(Dialect::MariaDb)) {
            self.update_many(statements.tx, rows)?;
        }
        Ok(())
    }

    /// Moves stored rows (not renamed) to their new progress with one statement: the rows joined
    /// to a derived table of their keys and values (MariaDB), padded with NULL keys, which join no
    /// row, to a statement size of a few.
    fn update_many(&self, tx: &Transaction<'_>, rows: &[usize]) -> Result<(), LedgerError> {
        let size = crate::db::padded(rows.len());
        let values: Vec<String> = (0..size)
            .map(|r| {
                let p = |k: usize| r * 5 + k;
                match r {
                    0 => format!(
                        "SELECT ?{} AS job_id, ?{} AS run, ?{} AS gpu_type, ?{} AS until, ?{} AS charged",
                        p(1),
                        p(2),
                        p(3),
                        p(4),
                        p(5)
                    ),
                    _ => format!("SELECT ?{}, ?{}, ?{}, ?{}, ?{}", p(1), p(2), p(3), p(4), p(5)),
                }
            })
            .collect();
        let mut update = tx.prepare_cached(&format!(
            "UPDATE job_charges AS c JOIN ({}) AS v
                 ON c.job_id = v.job_id AND c.run = v.run AND c.gpu_type = v.gpu_type
             SET c.charged_until = v.until, c.charged = v.charged",
            values.join(" UNION ALL ")
        ))?;
        for (n, &i) in rows.iter().enumerate() {
            let row = &self.rows[i];
            let p = n * 5;
            update.raw_bind_parameter(p + 1, row.job)?;
            update.raw_bind_parameter(p + 2, row.run().as_ref())?;
            update.raw_bind_parameter(p + 3, row.gpu_type.as_ref())?;
            update.raw_bind_parameter(p + 4, row.until)?;
            update.raw_bind_parameter(p + 5, row.charged)?;
        }
        for p in rows.len() * 5 + 1..=size * 5 {
            update.raw_bind_parameter(p, Null)?;
        }
        match update.raw_execute()? {
            written if written == rows.len() => Ok(()),
            written => Err(LedgerError::Damaged(format!("{written} of {} charged runs moved on", rows.len()))),
        }
    }

    /// Inserts the rows made in this chunk (after its entries: some are written from them). Where
    /// the chunk was not read, a run charged before makes this fail with a constraint violation.
    pub fn insert_new(&self, statements: &mut RunStatements<'_>) -> Result<(), LedgerError> {
        // On MariaDB a statement is a round trip and binding costs little: every row bound, many a
        // statement.
        let maria = statements.tx.dialect() == Dialect::MariaDb;
        let (from_entries, bound): (Vec<usize>, Vec<usize>) =
            self.new.iter().partition(|&&i| !maria && self.rows[i].entry.is_some());
        let mut many = from_entries.chunks_exact(FROM_ENTRY_ROWS);
        for rows in &mut many {
            self.insert_from_entries(statements.insert_from_entry(rows.len())?, rows)?;
        }
        let mut few = many.remainder().chunks_exact(FROM_ENTRY_FEW);
        for rows in &mut few {
            self.insert_from_entries(statements.insert_from_entry(rows.len())?, rows)?;
        }
        for row in few.remainder() {
            self.insert_from_entries(statements.insert_from_entry(1)?, std::slice::from_ref(row))?;
        }
        let many = bound.chunks_exact(if maria { MARIA_INSERT_ROWS } else { INSERT_ROWS });
        let rest = many.remainder();
        for rows in many {
            let insert = statements.insert(rows.len())?;
            self.bind_new(insert, rows)?;
            insert.raw_execute()?;
            insert.clear_bindings();
        }
        if maria {
            // The rest in a few statements of fixed sizes: each statement is a round trip.
            for rows in crate::db::sized_slices(rest) {
                let mut insert = statements.tx.prepare_cached(&insert_sql(rows.len()))?;
                self.bind_new(&mut insert, rows)?;
                insert.raw_execute()?;
            }
            return Ok(());
        }
        for row in rest.chunks(1) {
            let insert = statements.insert(1)?;
            self.bind_new(insert, row)?;
            insert.raw_execute()?;
            insert.clear_bindings();
        }
        Ok(())
    }

    /// Inserts new rows written from their entries (a row each, or the insert fails).
    fn insert_from_entries(&self, insert: &mut Statement<'_>, new: &[usize]) -> Result<(), LedgerError> {
        for (n, &i) in new.iter().enumerate() {
            let row = &self.rows[i];
            insert.raw_bind_parameter(n * 3 + 1, row.entry)?;
            insert.raw_bind_parameter(n * 3 + 2, row.segment_start)?;
            insert.raw_bind_parameter(n * 3 + 3, row.until)?;
        }
        match insert.raw_execute()? {
            written if written == new.len() => Ok(()),
            written => {
                Err(LedgerError::Damaged(format!("{written} of {} runs written from their charge entries", new.len())))
            }
        }
    }

    /// Binds new rows to an insert of as many rows.
    fn bind_new(&self, insert: &mut Statement<'_>, new: &[usize]) -> Result<(), LedgerError> {
        for (n, &i) in new.iter().enumerate() {
            let row = &self.rows[i];
            let State::New { user } = row.state else { unreachable!("only new rows are listed as new") };
            let p = n * 7;
            insert.raw_bind_parameter(p + 1, row.job)?;
            match &row.run {
                Some(run) => insert.raw_bind_parameter(p + 2, run.as_ref())?,
                None => insert.raw_bind_parameter(p + 2, Null)?,
            }
            insert.raw_bind_parameter(p + 3, row.segment_start)?;
            insert.raw_bind_parameter(p + 4, row.gpu_type.as_ref())?;
            insert.raw_bind_parameter(p + 5, user)?;
            insert.raw_bind_parameter(p + 6, row.until)?;
            insert.raw_bind_parameter(p + 7, row.charged)?;
        }
        Ok(())
    }
}
