//! The SQLite token ledger: append-only entries with idempotency keys, and a balance per user kept in
//! the same transaction as the entries that change it.
#![forbid(unsafe_code)]

mod accounts;
mod admin;
mod allocations;
mod audit;
mod backup;
mod borrowing;
mod charge;
mod copy;
pub mod db;
mod energy;
mod energy_charge;
mod entry_keys;
mod error;
mod expiries;
mod faults;
mod freed;
mod history;
mod journal;
mod lease;
mod lending;
mod meta;
mod notify;
mod pools;
mod refunds;
mod replenish;
mod schema;
mod statement;
mod utilization;
mod verify;

use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rusqlite::Connection;

use gputokens::policy::BucketRules;

pub use accounts::{check_user_name, Account, Applied, NewEntry};
pub use allocations::{is_open as allocation_is_open, Allocation};
pub use audit::REQUEUED_RUN_SLACK;
pub use backup::{BackupError, BackupWritten};
pub use charge::ChargeOutcome;
pub use copy::{Fingerprint, TableFingerprint};
pub use energy::RunEnergy;
pub use energy_charge::{EnergyCharged, UNMATCHED_AFTER};
pub use error::LedgerError;
pub use expiries::ExpiringGrant;
pub use faults::GpuFault;
pub use gputokens::entry::{Action, Entry, EntryKind};
pub use gputokens::gpu_time::UsageRecord;
pub use journal::{Journaled, PendingJournal};
pub use lease::Lease;
pub use lending::{BorrowedRun, RunToJudge};
pub use notify::{NewNotice, Notice};
pub use pools::{created_key as pool_created_key, MemberSpending, Pool, PoolChange};
pub use refunds::{run_refund_key, RunRefund};
pub use replenish::Replenished;
pub use schema::SchemaError;
pub use statement::Issue;
pub use verify::Verification;

/// The ledger: one connection to its database (SQLite or MariaDB), and the bucket rules its
/// grants and replenishment follow.
pub struct Ledger {
    conn: db::Connection,
    rules: BucketRules,
    /// Who pays for a job charged ([`gputokens::pools::payers`]); users until set.
    pool_mode: gputokens::pools::PoolMode,
    /// The cluster whose lease this ledger's accountd leads under ([`Ledger::lead_for_cluster`]).
    lease_name: String,
    /// Borrowing against next month's grant, and the small debts forgiven at the month's turn.
    borrowing: gputokens::policy::Borrowing,
}

impl Ledger {
    /// Opens (creating mode 0600 if needed) and migrates the ledger at `path`. SQLite creates its WAL
    /// and shared-memory files with the database's mode, so they are private too.
    pub fn open(path: &Path, rules: BucketRules) -> Result<Ledger, LedgerError> {
        let open_err = |source| LedgerError::Open { path: path.display().to_string(), source };
        if let Some(dir) = path.parent() {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(open_err)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750)).map_err(open_err)?;
            }
        }
        // Only a new file is opened here: closing a descriptor of a database this process already
        // has open (serve's second connection) drops every POSIX lock SQLite holds on it, and
        // another process closing its connection would then delete the WAL under this one.
        if !path.exists() {
            OpenOptions::new().create(true).append(true).mode(0o600).open(path).map_err(open_err)?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(open_err)?;
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // 64 MiB of page cache: a large charge cycle touches several indexes per record.
        conn.pragma_update(None, "cache_size", -65536)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        // Writers take the write lock when they begin: a transaction that read first and then found
        // another connection (serve's cycles beside its requests, an admin's tick) had written since
        // would fail at once instead of waiting its turn.
        conn.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        schema::migrate(&mut conn)?;
        Ok(Ledger::on(db::Connection::sqlite(conn), rules))
    }

    /// Opens an existing ledger (the live one, or a backup copy) to read it and nothing else: a
    /// missing file is refused, never created; nothing is written to it, not even a migration. A
    /// ledger of an older schema is read through a migrated copy in `scratch` (a directory the
    /// caller keeps while it reads).
    pub fn open_read_only(path: &Path, rules: BucketRules, scratch: &Path) -> Result<Ledger, LedgerError> {
        let open_err = |source| LedgerError::Open { path: path.display().to_string(), source };
        if !path.is_file() {
            return Err(open_err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no ledger there (nothing was created)",
            )));
        }
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let version: i64 = conn.query_row("PRAGMA user_version", (), |r| r.get(0))?;
        if version >= schema::VERSION {
            return Ok(Ledger::on(db::Connection::sqlite(conn), rules));
        }
        // Older: read a migrated copy, leaving the file as it is.
        let copy = scratch.join("ledger-read-copy.sqlite");
        conn.backup(rusqlite::MAIN_DB, &copy, None)?;
        drop(conn);
        Ledger::open(&copy, rules)
    }

    /// Opens the ledger on the MariaDB `target` names, making its tables there if it has none, and
    /// bringing them to this version's schema.
    pub fn open_mariadb(target: &db::MariaTarget, rules: BucketRules) -> Result<Ledger, LedgerError> {
        let conn = db::Connection::mariadb(target)?;
        schema::maria::migrate(&conn)?;
        conn.write_only_on_schema(schema::VERSION);
        Ok(Ledger::on(conn, rules))
    }

    /// Opens the ledger on the MariaDB `target` names to read it: a database without one is
    /// refused, nothing is made or changed there.
    pub fn open_mariadb_existing(target: &db::MariaTarget, rules: BucketRules) -> Result<Ledger, LedgerError> {
        let conn = db::Connection::mariadb(target)?;
        match schema::maria::existing_version(&conn)? {
            None => {
                Err(LedgerError::Refused(format!("{} holds no gputokens ledger (nothing was created)", target.shown)))
            }
            Some(v) if v > schema::VERSION => Err(SchemaError::TooNew { found: v }.into()),
            Some(v) if v < schema::VERSION => Err(LedgerError::Refused(format!(
                "{} holds a ledger of schema {v}: start accountd serve of this version once to bring it to {}",
                target.shown,
                schema::VERSION
            ))),
            Some(_) => {
                conn.write_only_on_schema(schema::VERSION);
                Ok(Ledger::on(conn, rules))
            }
        }
    }

    /// Which database holds the ledger.
    pub fn dialect(&self) -> db::Dialect {
        self.conn.dialect()
    }

    fn on(conn: db::Connection, rules: BucketRules) -> Ledger {
        Ledger { conn, rules, pool_mode: Default::default(), lease_name: String::new(), borrowing: Default::default() }
    }

    pub fn rules(&self) -> &BucketRules {
        &self.rules
    }

    /// Charges from now on go to whom `mode` says ([`gputokens::pools::payers`]).
    pub fn set_pool_mode(&mut self, mode: gputokens::pools::PoolMode) {
        self.pool_mode = mode;
    }

    pub fn pool_mode(&self) -> gputokens::pools::PoolMode {
        self.pool_mode
    }
}

#[cfg(test)]
mod energy_charge_tests;
#[cfg(test)]
mod energy_tests;
#[cfg(test)]
mod expiry_tests;
#[cfg(test)]
mod hold_tests;
#[cfg(test)]
mod idle_tests;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod mig_tests;
#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod range_tests;
#[cfg(test)]
mod refund_tests;
#[cfg(test)]
mod testdb;
#[cfg(test)]
mod tests;
