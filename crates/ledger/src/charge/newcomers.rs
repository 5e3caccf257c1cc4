//! The balances a chunk of records charges, known to the cycle before its records are charged,
//! many a statement: the newest entry of each balance the ledger has, and the users it does not
//! have yet added with their initial balance. One at a time, these were most of a cycle's round
//! trips on MariaDB (a site's first cycle meets every user).

use std::collections::HashMap;
use std::fmt::Write;

use crate::db::{placeholders, ToSql, Transaction};
use crate::LedgerError;
use gputokens::entry::initial_key;
use gputokens::policy::BucketRules;
use gputokens::time::local_date;
use gputokens::tokens::Tokens;

/// Names a statement.
const GROUP: usize = 64;

/// The newest entry of each of `names` the ledger has a balance for (None: a balance with no entry).
pub(super) fn newest_entries(
    tx: &Transaction<'_>,
    names: &[&str],
) -> Result<HashMap<String, Option<i64>>, LedgerError> {
    crate::accounts::users_column(tx, "last_entry", names)
}

/// Of `users` (none in the ledger), those whose initial balance's key no entry holds: the rest
/// (a balance removed by hand, say) are left to `ensure_user`, which says what is wrong.
pub(super) fn without_initial_entry<'a>(tx: &Transaction<'_>, users: &[&'a str]) -> Result<Vec<&'a str>, LedgerError> {
    let mut taken = std::collections::HashSet::new();
    for group in users.chunks(GROUP) {
        let keys: Vec<String> = group.iter().map(|u| initial_key(u)).collect();
        let values: Vec<&dyn ToSql> = keys.iter().map(|k| k as &dyn ToSql).collect();
        let sql = format!("SELECT key FROM entry_keys WHERE key IN ({})", placeholders(group.len(), 1));
        let mut read = tx.prepare_cached(&sql)?;
        for key in read.query_map(&values[..], |r| r.get::<String>(0))? {
            taken.insert(key?);
        }
    }
    Ok(users.iter().copied().filter(|u| !taken.contains(&initial_key(u))).collect())
}

/// Adds `users` (checked names, none in the ledger nor their initial entries) with their initial
/// balance as `ensure_user` does each, the entries given `ids` (one each, in order).
pub(super) fn add_users(
    tx: &Transaction<'_>,
    rules: &BucketRules,
    users: &[&str],
    ids: std::ops::Range<i64>,
    now: i64,
) -> Result<(), LedgerError> {
    let initial = rules.initial.micro();
    let today = local_date(now).to_string();
    let keys: Vec<String> = users.iter().map(|u| initial_key(u)).collect();
    let ids: Vec<i64> = ids.collect();
    for ((group, keys), ids) in users.chunks(GROUP).zip(keys.chunks(GROUP)).zip(ids.chunks(GROUP)) {
        // ?1 now, ?2 the initial balance; per user ?(3i+3) its entry's id, ?(3i+4) its name, ?(3i+5)
        // the entry's key.
        let mut entries = String::new();
        let mut values: Vec<&dyn ToSql> = vec![&now, &initial];
        for (i, ((id, name), key)) in ids.iter().zip(group).zip(keys).enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let (p_id, p_name, p_key) = (3 * i + 3, 3 * i + 4, 3 * i + 5);
            let _ =
                write!(entries, "{sep}(?{p_id}, ?{p_name}, 'grant', ?2, ?1, 'gputokens', 'initial balance', ?{p_key})");
            values.extend([id as &dyn ToSql, name, key]);
        }
        tx.prepare_cached(&format!(
            "INSERT INTO entries (id, user, kind, amount, at, actor, reason, key) VALUES {entries}"
        ))?
        .execute(&values[..])?;
        let keyed: Vec<(&str, i64)> = keys.iter().map(String::as_str).zip(ids.iter().copied()).collect();
        crate::entry_keys::note(tx, &keyed)?;
        // ?1 now, ?2 the initial balance, ?3 today; per user ?(2i+4) its name, ?(2i+5) its entry.
        let mut balances = String::new();
        let mut values: Vec<&dyn ToSql> = vec![&now, &initial, &today];
        for (i, (id, name)) in ids.iter().zip(group).enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(balances, "{sep}(?{}, ?1, ?2, ?3, ?{})", 2 * i + 4, 2 * i + 5);
            values.extend([name as &dyn ToSql, id]);
        }
        tx.prepare_cached(&format!(
            "INSERT INTO users (name, first_seen, balance, replenished_through, last_entry) VALUES {balances}"
        ))?
        .execute(&values[..])?;
        if let Some(&last) = ids.last() {
            tx.inserted_with_id(last);
        }
    }
    Ok(())
}

/// Whether an initial balance of `rules` may be given without `ensure_user`'s check of the bound
/// a balance may be moved to (it always may, but for a site configured past it).
pub(super) fn initial_within_bound(rules: &BucketRules) -> bool {
    rules.initial.micro().unsigned_abs() <= Tokens::BALANCE_LIMIT.micro().unsigned_abs()
}
