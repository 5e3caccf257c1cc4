//! The SQLite token ledger: append-only entries with idempotency keys, and a balance per user kept in
//! the same transaction as the entries that change it.
#![forbid(unsafe_code)]

mod charge;
mod faults;
mod freed;
mod notify;
mod replenish;
mod schema;
mod statement;
mod verify;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;

use chrono::NaiveDate;
use gputokens::policy::BucketRules;
use gputokens::time::local_date;
use gputokens::tokens::Tokens;

pub use charge::ChargeOutcome;
pub use faults::GpuFault;
pub use gputokens::entry::{Action, EntryKind};
pub use gputokens::gpu_time::UsageRecord;
pub use notify::{NewNotice, Notice};
pub use replenish::Replenished;
pub use schema::SchemaError;
pub use statement::Issue;
pub use verify::Verification;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot open ledger {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("ledger schema: {0}")]
    Schema(#[from] SchemaError),
    #[error("ledger: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("user '{0}' has no entries in the ledger")]
    UnknownUser(String),
    #[error("job {0} has nothing left to refund")]
    NothingToRefund(String),
    #[error("cannot import: {}", .0.join("; "))]
    ImportConflict(Vec<String>),
    #[error("'{name}' is not a user name: {why}")]
    BadUserName { name: String, why: &'static str },
    #[error("{0}")]
    OutOfRange(String),
    #[error("{user} has no entries in the ledger before the end of {month}: gputokens first saw them on {first_seen}")]
    NotYetSeen { user: String, month: String, first_seen: String },
    /// A statement that does not add up: a bug or a damaged ledger, never shown.
    #[error(transparent)]
    Statement(#[from] gputokens::statement::StatementError),
}

/// The refusal of a change that would take a balance beyond what the ledger can hold.
fn out_of_range(user: &str, balance: Tokens, amount: Tokens) -> LedgerError {
    LedgerError::OutOfRange(format!(
        "{user}'s balance {balance} changed by {amount} would leave the range the ledger can hold ({} to {} tokens)",
        Tokens::MIN,
        Tokens::MAX
    ))
}

/// An entry to append.
#[derive(Debug, Clone)]
pub struct NewEntry {
    pub user: String,
    pub kind: EntryKind,
    pub amount: Tokens,
    pub at: i64,
    pub actor: String,
    pub reason: String,
    pub key: String,
    pub job_id: Option<String>,
    pub gpu_type: Option<String>,
    pub gpu_seconds: Option<u64>,
}

impl NewEntry {
    pub fn new(user: &str, kind: EntryKind, amount: Tokens, at: i64, actor: &str, reason: &str, key: String) -> Self {
        NewEntry {
            user: user.to_string(),
            kind,
            amount,
            at,
            actor: actor.to_string(),
            reason: reason.to_string(),
            key,
            job_id: None,
            gpu_type: None,
            gpu_seconds: None,
        }
    }
}

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

/// Whether an append changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Added,
    /// An entry with the same idempotency key exists: nothing changed.
    AlreadyRecorded,
}

/// One user's standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub user: String,
    pub balance: Tokens,
    pub first_seen: i64,
}

pub struct Ledger {
    conn: Connection,
    rules: BucketRules,
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
        Ok(Ledger { conn, rules })
    }

    pub fn rules(&self) -> &BucketRules {
        &self.rules
    }

    /// Appends one entry (adding the user with the initial balance on first sight).
    pub fn append(&mut self, entry: &NewEntry) -> Result<Applied, LedgerError> {
        let tx = self.conn.transaction()?;
        ensure_user(&tx, &self.rules, &entry.user, entry.at)?;
        let applied = insert_entry(&tx, entry)?;
        tx.commit()?;
        Ok(applied)
    }

    /// Adds `user` with the initial balance if the ledger has not seen them yet.
    pub fn ensure_user(&mut self, user: &str, now: i64) -> Result<(), LedgerError> {
        let tx = self.conn.transaction()?;
        ensure_user(&tx, &self.rules, user, now)?;
        tx.commit()?;
        Ok(())
    }

    /// Records something gputokens did (or, with `dry_run`, would have done) to a job or node.
    pub fn record_action(&mut self, action: &Action) -> Result<(), LedgerError> {
        self.conn.execute(
            "INSERT INTO actions (at, action, target, user, reason, dry_run) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![action.at, action.action, action.target, action.user, action.reason, action.dry_run],
        )?;
        Ok(())
    }

    /// The most recent `limit` actions, newest first.
    pub fn actions(&self, limit: usize) -> Result<Vec<Action>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT at, action, target, user, reason, dry_run FROM actions ORDER BY id DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([limit as i64], |r| {
            Ok(Action {
                at: r.get(0)?,
                action: r.get(1)?,
                target: r.get(2)?,
                user: r.get(3)?,
                reason: r.get(4)?,
                dry_run: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A named value kept beside the entries (e.g. `sacct_read_until`).
    pub fn meta(&self, key: &str) -> Result<Option<String>, LedgerError> {
        Ok(self.conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional()?)
    }

    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<(), LedgerError> {
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
        Ok(())
    }

    /// Adds one utilization sample (percent) of a job.
    pub fn record_utilization(&mut self, job_id: &str, percent: f64, at: i64) -> Result<(), LedgerError> {
        self.conn.execute(
            "INSERT INTO job_utilization (job_id, samples, util_sum, last_at) VALUES (?1, 1, ?2, ?3)
             ON CONFLICT (job_id) DO UPDATE SET samples = samples + 1, util_sum = util_sum + excluded.util_sum,
                                                last_at = excluded.last_at",
            params![job_id, percent, at],
        )?;
        Ok(())
    }

    /// How often a job was sampled and the sum of its sampled utilization (percent), if ever.
    pub fn utilization_samples(&self, job_id: &str) -> Result<Option<(u64, f64)>, LedgerError> {
        Ok(self
            .conn
            .query_row("SELECT samples, util_sum FROM job_utilization WHERE job_id = ?1", [job_id], |r| {
                Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get(1)?))
            })
            .optional()?)
    }

    /// Mean sampled utilization of a job (percent), if it was ever sampled.
    pub fn mean_utilization(&self, job_id: &str) -> Result<Option<f64>, LedgerError> {
        Ok(self
            .conn
            .query_row("SELECT util_sum / samples FROM job_utilization WHERE job_id = ?1", [job_id], |r| r.get(0))
            .optional()?)
    }

    pub fn account(&self, user: &str) -> Result<Option<Account>, LedgerError> {
        Ok(self
            .conn
            .query_row("SELECT name, balance, first_seen FROM users WHERE name = ?1", [user], account_row)
            .optional()?)
    }

    pub fn accounts(&self) -> Result<Vec<Account>, LedgerError> {
        let mut stmt = self.conn.prepare_cached("SELECT name, balance, first_seen FROM users ORDER BY name")?;
        let rows = stmt.query_map([], account_row)?.collect::<Result<_, _>>()?;
        Ok(rows)
    }

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

    /// Refunds what job `job_id` was charged and not yet refunded.
    pub fn refund_job(&mut self, job_id: &str, actor: &str, reason: &str, now: i64) -> Result<Vec<Entry>, LedgerError> {
        let tx = self.conn.transaction()?;
        // job_charges holds what each run segment and GPU type was charged in all; refunds are keyed
        // `refund:JOB:...`, found by that prefix in the key index.
        let charged: Vec<(String, i64)> = {
            let mut stmt = tx.prepare("SELECT user, SUM(charged) FROM job_charges WHERE job_id = ?1 GROUP BY user")?;
            let rows = stmt.query_map([job_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut ids = Vec::new();
        for (user, charged) in charged {
            let refunded: i64 = tx.query_row(
                "SELECT COALESCE(SUM(amount), 0) FROM entries
                 WHERE key >= ?1 AND key < ?2 AND kind = 'refund' AND user = ?3",
                params![format!("refund:{job_id}:"), format!("refund:{job_id};"), user],
                |r| r.get(0),
            )?;
            let owed = charged - refunded;
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
            );
            entry.job_id = Some(job_id.to_string());
            if insert_entry(&tx, &entry)? == Applied::Added {
                ids.push(tx.last_insert_rowid());
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
    /// Returns how many users were imported now; users imported before are left as they are.
    pub fn import(&mut self, balances: &BTreeMap<String, Tokens>, actor: &str, now: i64) -> Result<usize, LedgerError> {
        let tx = self.conn.transaction()?;
        let mut conflicts = Vec::new();
        let mut fresh = Vec::new();
        for (user, balance) in balances {
            check_user_name(user)?;
            let key = format!("import:{user}");
            let imported: Option<i64> =
                tx.query_row("SELECT amount FROM entries WHERE key = ?1", [&key], |r| r.get(0)).optional()?;
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
            );
            insert_entry(&tx, &entry)?;
        }
        tx.commit()?;
        Ok(fresh.len())
    }

    fn entries_by_id(&self, ids: &[i64]) -> Result<Vec<Entry>, LedgerError> {
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

fn account_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Account> {
    Ok(Account { user: r.get(0)?, balance: Tokens::from_micro(r.get(1)?), first_seen: r.get(2)? })
}

/// A user name the ledger can key and the snapshot can list (see [`gputokens::user_name`]).
pub fn check_user_name(user: &str) -> Result<(), LedgerError> {
    match gputokens::user_name::problem(user) {
        None => Ok(()),
        Some(why) => Err(LedgerError::BadUserName { name: user.escape_debug().to_string(), why }),
    }
}

fn ensure_user(tx: &Transaction<'_>, rules: &BucketRules, user: &str, now: i64) -> Result<(), LedgerError> {
    check_user_name(user)?;
    let added = tx
        .prepare_cached(
            "INSERT INTO users (name, first_seen, balance, replenished_through) VALUES (?1, ?2, 0, ?3)
             ON CONFLICT (name) DO NOTHING",
        )?
        .execute(params![user, now, local_date(now).to_string()])?;
    if added == 1 {
        let entry = NewEntry::new(
            user,
            EntryKind::Grant,
            rules.initial,
            now,
            "gputokens",
            "initial balance",
            gputokens::entry::initial_key(user),
        );
        insert_entry(tx, &entry)?;
    }
    Ok(())
}

/// A user's entries as the recursive table `chain(id)`, walked down `prev_id` from the newest; `?1`
/// is the user. Close it with `)`, or with `LIMIT n)` to stop the walk after n entries.
const USER_CHAIN: &str = "WITH RECURSIVE chain(id) AS (
        SELECT last_entry FROM users WHERE name = ?1 AND last_entry IS NOT NULL
        UNION ALL
        SELECT e.prev_id FROM chain CROSS JOIN entries e ON e.id = chain.id WHERE e.prev_id IS NOT NULL";

/// Inserts unless the key exists; keeps `users.balance` equal to the sum of the user's entries and
/// `users.last_entry` at the newest of them.
fn insert_entry(tx: &Transaction<'_>, e: &NewEntry) -> Result<Applied, LedgerError> {
    let added = tx
        .prepare_cached(
            "INSERT INTO entries (user, kind, amount, at, actor, reason, key, job_id, gpu_type, gpu_seconds, prev_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, (SELECT last_entry FROM users WHERE name = ?1))
             ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING",
        )?
        .execute(params![
            e.user,
            e.kind.as_str(),
            e.amount.micro(),
            e.at,
            e.actor,
            e.reason,
            e.key,
            e.job_id,
            e.gpu_type,
            e.gpu_seconds.map(|s| s as i64)
        ])?;
    if added == 0 {
        return Ok(Applied::AlreadyRecorded);
    }
    move_balance(tx, &e.user, e.amount, tx.last_insert_rowid())?;
    Ok(Applied::Added)
}

/// Adds `amount` to the user's balance and makes `last_entry` their newest entry. Checked here: SQLite
/// would turn an integer sum that overflows into an inexact REAL.
fn move_balance(tx: &Transaction<'_>, user: &str, amount: Tokens, last_entry: i64) -> Result<(), LedgerError> {
    let balance = tx
        .prepare_cached("SELECT balance FROM users WHERE name = ?1")?
        .query_row([user], |r| r.get(0))
        .map(Tokens::from_micro)?;
    let moved = balance.checked_add(amount).ok_or_else(|| out_of_range(user, balance, amount))?;
    tx.prepare_cached("UPDATE users SET balance = ?2, last_entry = ?3 WHERE name = ?1")?.execute(params![
        user,
        moved.micro(),
        last_entry
    ])?;
    Ok(())
}

#[cfg(test)]
mod range_tests;
#[cfg(test)]
mod tests;
