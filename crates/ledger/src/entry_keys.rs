//! The entries' idempotency keys, read through `entry_keys (key, entry_id)` on both backends.
//!
//! Few entries have a key (grants, adjustments, refunds, a day's replenishment); charges have none.
//! SQLite keeps them in a partial index of `entries`, and `entry_keys` is a view of it. MariaDB
//! cannot leave the unkeyed rows out of an index, so an index of `entries.key` took an insert for
//! every charge (a sixth of a bulk charge's time): there `entry_keys` is a table of its own, written
//! here beside each keyed entry, in the same transaction.

use crate::db::{Dialect, ToSql, Transaction};
use crate::LedgerError;

/// Keys a statement on MariaDB.
const PER_INSERT: usize = 256;

/// Records that the entries `keyed` (key, entry id), inserted in this transaction, hold those keys.
/// Nothing to do on SQLite, whose view reads the entries themselves.
pub(crate) fn note(tx: &Transaction<'_>, keyed: &[(&str, i64)]) -> Result<(), LedgerError> {
    if tx.dialect() == Dialect::Sqlite {
        return Ok(());
    }
    for group in keyed.chunks(PER_INSERT) {
        let rows = (0..group.len()).map(|i| format!("(?{}, ?{})", 2 * i + 1, 2 * i + 2)).collect::<Vec<_>>();
        let values: Vec<&dyn ToSql> = group.iter().flat_map(|(key, id)| [key as &dyn ToSql, id]).collect();
        tx.prepare_cached(&format!("INSERT INTO entry_keys (key, entry_id) VALUES {}", rows.join(", ")))?
            .execute(&values[..])?;
    }
    Ok(())
}

/// Fills MariaDB's `entry_keys` from the entries copied into it in this transaction.
pub(crate) fn note_copied(tx: &Transaction<'_>) -> Result<(), LedgerError> {
    if tx.dialect() == Dialect::MariaDb {
        tx.execute("INSERT INTO entry_keys (key, entry_id) SELECT key, id FROM entries WHERE key IS NOT NULL", ())?;
    }
    Ok(())
}

/// Keyed entries that `entry_keys` does not list under their key, and listings of no such entry
/// (for `verify`; always none on SQLite).
pub(crate) fn mismatches(conn: &crate::db::Connection) -> Result<i64, LedgerError> {
    Ok(conn.query_row(
        "SELECT (SELECT COUNT(*) FROM entries e WHERE e.key IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM entry_keys k WHERE k.key = e.key AND k.entry_id = e.id))
              + (SELECT COUNT(*) FROM entry_keys k
                   WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.id = k.entry_id AND e.key = k.key))",
        (),
        |r| r.get(0),
    )?)
}
