//! A ledger copied between databases (`accountd admin ledger copy`: SQLite to a site's MariaDB, or
//! back to a file), and a fingerprint of what a ledger holds that reads the same on both, so the
//! copy is shown equal row for row.

use std::fmt::Write;

use crate::db::{Connection, Dialect, Value};
use crate::{Ledger, LedgerError};

/// Every table of the ledger, in an order its rows can be written in. (`write_turn` and the
/// schema's version belong to a database, not to the ledger.)
const TABLES: &[&str] = &[
    "users",
    "entries",
    "job_charges",
    "meta",
    "job_utilization",
    "actions",
    "usage_days",
    "gpu_faults",
    "freed_for_waiters",
    "notify_levels",
    "notifications",
    "pools",
    "pool_member_months",
    "job_payments",
    "grant_expiries",
    "journal_outbox",
    "job_energy",
    "borrowed_runs",
];

/// Rows per insert statement of a copy.
const ROWS_PER_INSERT: usize = 256;

/// What a table holds: its rows, and a digest of them that does not depend on their order or on
/// the order of the table's columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFingerprint {
    pub table: &'static str,
    pub rows: u64,
    pub digest: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(pub Vec<TableFingerprint>);

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for t in &self.0 {
            writeln!(f, "{:<20} {:>10} rows  {:016x}", t.table, t.rows, t.digest)?;
        }
        Ok(())
    }
}

impl Ledger {
    /// What the ledger holds, table by table, read in one consistent view.
    pub fn fingerprint(&self) -> Result<Fingerprint, LedgerError> {
        let view = self.conn.read_transaction()?;
        let mut tables = Vec::new();
        for table in TABLES {
            let (mut rows, mut digest) = (0u64, 0u64);
            each_row(&view, table, |columns, values| {
                rows += 1;
                // Summed, so the order rows come in does not count; each row's columns by name.
                digest = digest.wrapping_add(row_digest(columns, values));
                Ok(())
            })?;
            tables.push(TableFingerprint { table, rows, digest });
        }
        view.commit()?;
        Ok(Fingerprint(tables))
    }

    /// Copies every row of this ledger into `to`, a ledger with no users and no entries yet, in
    /// one transaction of `to`'s: all of it or nothing. Returns the rows copied.
    pub fn copy_into(&self, to: &mut Ledger) -> Result<u64, LedgerError> {
        let held: i64 =
            to.conn
                .query_row("SELECT (SELECT COUNT(*) FROM users) + (SELECT COUNT(*) FROM entries)", (), |r| r.get(0))?;
        if held > 0 {
            return Err(LedgerError::Refused(
                "the ledger copied to already holds users or entries: copy only into an empty one".into(),
            ));
        }
        if to.dialect() == Dialect::MariaDb {
            // Between its inserts this transaction waits on reading the source (a MariaDB source's
            // table comes whole): no idle limit on it (`db::maria`'s is for a writer lost mid-cycle).
            to.conn.execute_batch("SET SESSION idle_write_transaction_timeout = 0")?;
        }
        let view = self.conn.read_transaction()?;
        let tx = to.conn.transaction()?;
        let mut copied = 0u64;
        for table in TABLES {
            let mut pending: Vec<Value> = Vec::new();
            let mut names: Vec<String> = Vec::new();
            each_row(&view, table, |columns, values| {
                if names.is_empty() {
                    names = columns.to_vec();
                }
                pending.extend_from_slice(values);
                copied += 1;
                if pending.len() >= ROWS_PER_INSERT * names.len() {
                    insert_rows(&tx, table, &names, &std::mem::take(&mut pending))?;
                }
                Ok(())
            })?;
            if !pending.is_empty() {
                insert_rows(&tx, table, &names, &pending)?;
            }
        }
        crate::entry_keys::note_copied(&tx)?;
        tx.commit()?;
        view.commit()?;
        if to.dialect() == Dialect::MariaDb {
            to.conn.execute_batch(crate::db::IDLE_WRITE_LIMIT)?;
        }
        Ok(copied)
    }
}

/// Calls `each` with the column names and values of every row of `table`.
fn each_row(
    conn: &Connection,
    table: &str,
    mut each: impl FnMut(&[String], &[Value]) -> Result<(), LedgerError>,
) -> Result<(), LedgerError> {
    let mut stmt = conn.prepare(&format!("SELECT * FROM {table}"))?;
    let columns = stmt.column_names();
    let mut rows = stmt.query(())?;
    let mut values = Vec::with_capacity(columns.len());
    while let Some(row) = rows.next()? {
        values.clear();
        for i in 0..columns.len() {
            values.push(row.value(i)?);
        }
        each(&columns, &values)?;
    }
    Ok(())
}

/// Writes rows (`values`, one row's after another) into `table`.
fn insert_rows(conn: &Connection, table: &str, columns: &[String], values: &[Value]) -> Result<(), LedgerError> {
    let row = format!("({})", vec!["?"; columns.len()].join(", "));
    let rows = values.len() / columns.len();
    let names: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
    let sql = format!("INSERT INTO {table} ({}) VALUES {}", names.join(", "), vec![row; rows].join(", "));
    let params: Vec<&dyn crate::db::ToSql> = values.iter().map(|v| v as &dyn crate::db::ToSql).collect();
    conn.execute(&sql, params.as_slice())?;
    Ok(())
}

/// A row's digest: FNV-1a over its columns sorted by name, each written `name=value;` with the
/// value's kind (so 1 and '1' differ), then mixed so that sums of digests spread.
fn row_digest(columns: &[String], values: &[Value]) -> u64 {
    let mut order: Vec<usize> = (0..columns.len()).collect();
    order.sort_by(|&a, &b| columns[a].cmp(&columns[b]));
    let mut text = String::new();
    for i in order {
        let _ = match &values[i] {
            Value::Null => write!(text, "{}=n;", columns[i]),
            Value::Integer(v) => write!(text, "{}=i{v};", columns[i]),
            Value::Real(v) => write!(text, "{}=r{:016x};", columns[i], v.to_bits()),
            Value::Text(v) => write!(text, "{}=t{}:{v};", columns[i], v.len()),
            Value::Blob(v) => write!(text, "{}=b{}:{v:02x?};", columns[i], v.len()),
        };
    }
    let hash = text.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
    // splitmix64's finish: FNV's low bits alone would add up poorly.
    let mut z = hash.wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}
