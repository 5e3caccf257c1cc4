//! Users' accounts: a user is added on first sight with the initial balance, and every entry is
//! appended to their account with the balance and their newest entry moved in the same transaction.

use crate::db::{params, Dialect, OptionalExtension, Transaction};
use std::collections::HashMap;

use gputokens::entry::EntryKind;
use gputokens::policy::BucketRules;
use gputokens::time::local_date;
use gputokens::tokens::Tokens;

use super::error::out_of_range;
use super::{Ledger, LedgerError};
use crate::journal::Journaled;

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
    /// A pool's entry: the member it was for (whose job, to whom a transfer went).
    pub member: Option<String>,
    /// An admin's change: marked for the admin journal in the same transaction.
    pub journal: Option<Journaled>,
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
            member: None,
            journal: None,
        }
    }

    /// This entry, marked for the admin journal.
    pub fn journaled(self, journaled: Journaled) -> Self {
        NewEntry { journal: Some(journaled), ..self }
    }
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

impl Ledger {
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

    pub fn account(&self, user: &str) -> Result<Option<Account>, LedgerError> {
        Ok(self
            .conn
            .query_row("SELECT name, balance, first_seen FROM users WHERE name = ?1", [user], account_row)
            .optional()?)
    }

    /// The balances of `users` the ledger has, [`crate::db::Dialect::in_list`] a statement (a check cycle
    /// asks for every user with a job in the queue).
    pub fn balances_of(&self, users: &[&str]) -> Result<HashMap<String, Tokens>, LedgerError> {
        let found: HashMap<String, i64> = users_column(&self.conn, "balance", users)?;
        Ok(found.into_iter().map(|(name, micro)| (name, Tokens::from_micro(micro))).collect())
    }

    /// Every user's standing (not the pools': [`Ledger::pools`]).
    pub fn accounts(&self) -> Result<Vec<Account>, LedgerError> {
        // A pool's row is named with a space, which no user name has.
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name, balance, first_seen FROM users WHERE instr(name, ' ') = 0 ORDER BY name")?;
        let rows = stmt.query_map((), account_row)?.collect::<Result<_, _>>()?;
        Ok(rows)
    }
}

/// `column` of each of `names` the ledger has a row of in `users`, [`crate::db::Dialect::in_list`] names a
/// statement: the cycles' lookups of many balances at once (on MariaDB each statement is a round
/// trip).
pub(crate) fn users_column<T: crate::db::FromSql>(
    conn: &crate::db::Connection,
    column: &str,
    names: &[&str],
) -> Result<HashMap<String, T>, LedgerError> {
    let sql = format!("SELECT name, {column} FROM users WHERE name IN (?LIST)");
    let rows = crate::db::query_among(conn, &sql, names, |r| Ok((r.get::<String>(0)?, r.get::<T>(1)?)))?;
    Ok(rows.into_iter().collect())
}

fn account_row(r: &crate::db::Row<'_>) -> crate::db::Result<Account> {
    Ok(Account { user: r.get(0)?, balance: Tokens::from_micro(r.get(1)?), first_seen: r.get(2)? })
}

/// A user name the ledger can key and the snapshot can list (see [`gputokens::user_name`]).
pub fn check_user_name(user: &str) -> Result<(), LedgerError> {
    match gputokens::user_name::problem(user) {
        None => Ok(()),
        Some(why) => Err(LedgerError::BadUserName { name: gputokens::free_text::printable(user).into_owned(), why }),
    }
}

/// A pool's holder (`account NAME`) is known only once `add_pool` made the pool; it gets `rules`'
/// initial balance then. Returns the id of the initial balance's entry where it added the user.
pub(crate) fn ensure_user(
    tx: &Transaction<'_>,
    rules: &BucketRules,
    user: &str,
    now: i64,
) -> Result<Option<i64>, LedgerError> {
    match gputokens::pools::account_of(user) {
        Some(account) => {
            let exists: bool = tx
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM pools WHERE account = ?1)")?
                .query_row([account], |r| r.get(0))?;
            if !exists {
                return Err(LedgerError::UnknownPool(account.to_string()));
            }
        }
        None => check_user_name(user)?,
    }
    let added = tx
        .prepare_cached(tx.dialect().pick(
            "INSERT INTO users (name, first_seen, balance, replenished_through) VALUES (?1, ?2, 0, ?3)
             ON CONFLICT (name) DO NOTHING",
            "INSERT INTO users (name, first_seen, balance, replenished_through) VALUES (?1, ?2, 0, ?3)
             ON DUPLICATE KEY UPDATE name = name",
        ))?
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
        if insert_entry(tx, &entry)? == Applied::Added {
            return Ok(Some(tx.last_insert_rowid()));
        }
    }
    Ok(None)
}

/// The id the next entry takes: SQLite's own (one past the newest); on MariaDB the same, given
/// explicitly, as its auto-increment skips the ids of rolled-back inserts (charges predict ids).
pub(crate) fn next_entry_id(tx: &Transaction<'_>) -> Result<Option<i64>, LedgerError> {
    match tx.dialect() {
        Dialect::Sqlite => Ok(None),
        Dialect::MariaDb => {
            Ok(Some(tx.prepare_cached("SELECT COALESCE(MAX(id), 0) + 1 FROM entries")?.query_row((), |r| r.get(0))?))
        }
    }
}

/// Whether an entry holds `key` already (MariaDB: looked up under the write turn before a plain
/// insert, where SQLite's insert skips it itself).
fn key_taken(tx: &Transaction<'_>, key: &str) -> Result<bool, LedgerError> {
    Ok(tx.prepare_cached("SELECT EXISTS (SELECT 1 FROM entry_keys WHERE key = ?1)")?.query_row([key], |r| r.get(0))?)
}

/// Inserts unless the key exists; keeps `users.balance` equal to the sum of the user's entries and
/// `users.last_entry` at the newest of them.
pub(crate) fn insert_entry(tx: &Transaction<'_>, e: &NewEntry) -> Result<Applied, LedgerError> {
    let given_id = next_entry_id(tx)?;
    let taken = given_id.is_some() && key_taken(tx, &e.key)?;
    let added = if taken {
        0
    } else {
        tx
        .prepare_cached(tx.dialect().pick(
            "INSERT INTO entries (id, user, kind, amount, at, actor, reason, key, job_id, gpu_type, gpu_seconds, member, prev_id)
             VALUES (?12, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, (SELECT last_entry FROM users WHERE name = ?1))
             ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING",
            // A plain insert: a key already taken was looked for first (`key_taken`); an update on a
            // duplicate key would fire the append-only trigger, and IGNORE would hide any error.
            "INSERT INTO entries (id, user, kind, amount, at, actor, reason, key, job_id, gpu_type, gpu_seconds, member, prev_id)
             VALUES (?12, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, (SELECT last_entry FROM users WHERE name = ?1))",
        ))?
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
            e.gpu_seconds.map(|s| s as i64),
            e.member,
            given_id
        ])?
    };
    if let (Some(id), 1) = (given_id, added) {
        tx.inserted_with_id(id);
        crate::entry_keys::note(tx, &[(&e.key, id)])?;
    }
    if added == 0 {
        // (Replays of the cycles' and refunds' keys may differ in amount: what is left to give back.)
        if matches!(e.kind, EntryKind::Grant | EntryKind::Adjust | EntryKind::Import) {
            refuse_key_of_another_change(tx, e)?;
        }
        return Ok(Applied::AlreadyRecorded);
    }
    // What a person moves by hand stays within the balance bound; the cycles' own entries (charges,
    // replenishment, expiries, refunds of what was paid) only within the representable range.
    if matches!(e.kind, EntryKind::Grant | EntryKind::Adjust | EntryKind::Import) {
        refuse_beyond_balance_limit(tx, &e.user, e.amount)?;
    }
    let id = tx.last_insert_rowid();
    if let Some(journaled) = &e.journal {
        crate::journal::mark(tx, id, journaled)?;
    }
    move_balance(tx, &e.user, e.amount, id)?;
    Ok(Applied::Added)
}

/// A key already in the ledger replays its change only when it is that change (the same balance,
/// kind and amount): one namespace holds admins' and coordinators' keys, so a coordinator's grant
/// under the key of an admin's scripted grant (`monthly-bob-2026-12`) must make the admin's a loud
/// refusal, never a silent "already recorded" (the audit's L3).
fn refuse_key_of_another_change(tx: &Transaction<'_>, e: &NewEntry) -> Result<(), LedgerError> {
    let recorded: Option<(String, String, i64)> = tx
        .prepare_cached(
            "SELECT e.user, e.kind, e.amount FROM entry_keys k JOIN entries e ON e.id = k.entry_id WHERE k.key = ?1",
        )?
        .query_row([&e.key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    match recorded {
        Some((user, kind, amount)) if user != e.user || kind != e.kind.as_str() || amount != e.amount.micro() => {
            Err(LedgerError::Refused(format!(
                "key {} already names another change ({kind} {} to {user}): choose another key",
                e.key,
                Tokens::from_micro(amount)
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses a change by hand that would take `user`'s balance beyond ±[`Tokens::BALANCE_LIMIT`]
/// (one that brings a balance back towards it is always allowed).
fn refuse_beyond_balance_limit(tx: &Transaction<'_>, user: &str, amount: Tokens) -> Result<(), LedgerError> {
    let balance: Tokens = tx
        .prepare_cached("SELECT balance FROM users WHERE name = ?1")?
        .query_row([user], |r| r.get(0))
        .map(Tokens::from_micro)?;
    let moved = balance.checked_add(amount).ok_or_else(|| out_of_range(user, balance, amount))?;
    let limit = Tokens::BALANCE_LIMIT.micro().unsigned_abs();
    if moved.micro().unsigned_abs() > limit && moved.micro().unsigned_abs() > balance.micro().unsigned_abs() {
        return Err(LedgerError::OutOfRange(format!(
            "{user}'s balance {balance} changed by {amount} would pass ±{} tokens, the most a balance may be moved to",
            Tokens::BALANCE_LIMIT
        )));
    }
    Ok(())
}

/// Adds `amount` to the user's balance and makes `last_entry` their newest entry. Checked here: SQLite
/// would turn an integer sum that overflows into an inexact REAL.
pub(crate) fn move_balance(
    tx: &Transaction<'_>,
    user: &str,
    amount: Tokens,
    last_entry: i64,
) -> Result<(), LedgerError> {
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
