//! What a charge cycle writes once per balance at its end, many balances a statement: each
//! balance moved and its newest entry, and the day's usage per GPU type. On MariaDB each statement
//! is a round trip to the server; one per balance was most of a cycle's time there.

use std::collections::HashMap;
use std::fmt::Write;

use crate::db::{ToSql, Transaction};
use crate::error::out_of_range;
use crate::LedgerError;
use gputokens::tokens::Tokens;

/// Balances a statement: more on MariaDB, where each statement is a round trip.
fn group_size(tx: &Transaction<'_>) -> usize {
    match tx.dialect() {
        crate::db::Dialect::Sqlite => 64,
        crate::db::Dialect::MariaDb => 256,
    }
}

/// A balance's move: its name, what it moves by, and its newest entry.
pub(super) struct Move<'a> {
    pub user: &'a str,
    pub amount: Tokens,
    pub last_entry: i64,
}

/// `?{from}, ?{from + step}, …`: `n` numbered parameters.
fn numbered(n: usize, from: usize, step: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| from + i * step)
}

/// Moves each balance as [`crate::accounts::move_balance`] does one: read, checked to stay in
/// range, written with its newest entry.
pub(super) fn move_balances(tx: &Transaction<'_>, moves: &[Move<'_>]) -> Result<(), LedgerError> {
    for group in moves.chunks(group_size(tx)) {
        let names: Vec<&str> = group.iter().map(|m| m.user).collect();
        let found: HashMap<String, i64> = crate::accounts::users_column(tx, "balance", &names)?;
        let mut moved = Vec::with_capacity(group.len());
        for m in group {
            let balance = found
                .get(m.user)
                .map(|&micro| Tokens::from_micro(micro))
                .ok_or_else(|| LedgerError::Damaged(format!("{} was charged but has no balance", m.user)))?;
            moved.push(balance.checked_add(m.amount).ok_or_else(|| out_of_range(m.user, balance, m.amount))?.micro());
        }
        // ?(3i+1) the name, ?(3i+2) the balance, ?(3i+3) the newest entry; padded with NULLs, which
        // name no one, to a statement size of a few.
        let size = crate::db::padded(group.len());
        let (mut balance, mut last, mut names_in) = (String::new(), String::new(), String::new());
        for p in numbered(size, 1, 3) {
            let _ = write!(balance, " WHEN ?{p} THEN ?{}", p + 1);
            let _ = write!(last, " WHEN ?{p} THEN ?{}", p + 2);
            let _ = write!(names_in, "{}?{p}", if p == 1 { "" } else { ", " });
        }
        let sql = format!(
            "UPDATE users SET balance = CASE name{balance} END, last_entry = CASE name{last} END WHERE name IN ({names_in})"
        );
        let mut values: Vec<&dyn ToSql> = Vec::with_capacity(size * 3);
        for (m, micro) in group.iter().zip(&moved) {
            values.extend([&m.user as &dyn ToSql, micro, &m.last_entry]);
        }
        values.resize(size * 3, &crate::db::Null);
        tx.prepare_cached(&sql)?.execute(&values[..])?;
    }
    Ok(())
}

/// Adds what each (balance, GPU type) was charged to its usage on `day` (`usage_days`), as
/// [`super::add_usage`] does one.
pub(super) fn add_usages(tx: &Transaction<'_>, day: &str, usages: &[(&str, &str, i64)]) -> Result<(), LedgerError> {
    for group in usages.chunks(group_size(tx)).flat_map(crate::db::sized_slices) {
        // ?1 the day; ?(3i+2) the balance, ?(3i+3) the GPU type, ?(3i+4) the tokens.
        let rows: Vec<String> =
            numbered(group.len(), 2, 3).map(|p| format!("(?{p}, ?1, ?{}, ?{})", p + 1, p + 2)).collect();
        let rows = rows.join(", ");
        let sql = tx.dialect().pick(
            "INSERT INTO usage_days (user, day, gpu_type, charged) VALUES {rows}
             ON CONFLICT DO UPDATE SET charged = CASE WHEN charged <= 9223372036854775807 - excluded.charged
                                                      THEN charged + excluded.charged END",
            "INSERT INTO usage_days (user, day, gpu_type, charged) VALUES {rows}
             ON DUPLICATE KEY UPDATE charged = CASE WHEN charged <= 9223372036854775807 - VALUES(charged)
                                                      THEN charged + VALUES(charged) END",
        );
        let mut values: Vec<&dyn ToSql> = Vec::with_capacity(1 + group.len() * 3);
        values.push(&day);
        for (user, gpu_type, micro) in group {
            values.extend([user as &dyn ToSql, gpu_type, micro]);
        }
        tx.prepare_cached(&sql.replace("{rows}", &rows))?.execute(&values[..])?;
    }
    Ok(())
}
