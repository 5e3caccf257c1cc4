//! Grants with an end date (`accountd admin grant ... --expires`): what is left of such a grant when
//! it ends expires, as an adjustment of its balance (a user's or a pool's). Charges draw from a
//! balance's open grants first, the soonest-ending first, so a grant's `unused` is what charges have
//! not used of it; a refund puts what it gives back into the open grants charges drew from
//! (`undraw`), so tokens a grant paid for expire with it even when a run is refunded.

use std::collections::HashSet;

use crate::db::{params, Transaction};

use gputokens::entry::{expiry_key, Entry, EntryKind};
use gputokens::time::format_local;
use gputokens::tokens::Tokens;

use super::accounts::{ensure_user, insert_entry, Applied, NewEntry};
use super::notify::{insert_notice, NewNotice};
use super::{Ledger, LedgerError};

/// An open grant with an end date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiringGrant {
    pub entry_id: i64,
    pub user: String,
    pub amount: Tokens,
    /// What charges have not drawn of it yet: what expires at its end.
    pub unused: Tokens,
    pub expires_at: i64,
}

impl ExpiringGrant {
    /// What would expire of it with the balance at `balance`: what is left of it, but never
    /// taking the balance below 0 (a grant that paid a debt back has nothing left to expire).
    pub fn at_stake(&self, balance: Tokens) -> Tokens {
        self.unused.min(balance.max(Tokens::ZERO))
    }
}

const GRANT_COLUMNS: &str = "entry_id, user, amount, unused, expires_at";

fn grant_row(r: &crate::db::Row) -> crate::db::Result<ExpiringGrant> {
    Ok(ExpiringGrant {
        entry_id: r.get(0)?,
        user: r.get(1)?,
        amount: Tokens::from_micro(r.get(2)?),
        unused: Tokens::from_micro(r.get(3)?),
        expires_at: r.get(4)?,
    })
}

impl Ledger {
    /// Appends a grant that ends at `expires_at`, with its end, in one transaction. A key used
    /// before adds nothing.
    pub fn append_expiring(&mut self, entry: &NewEntry, expires_at: i64) -> Result<Applied, LedgerError> {
        if entry.kind != EntryKind::Grant || entry.amount <= Tokens::ZERO {
            return Err(LedgerError::Refused("only a positive grant can have an end date".into()));
        }
        if expires_at <= entry.at {
            return Err(LedgerError::Refused(format!(
                "a grant's end ({}) must come after it is made ({})",
                format_local(expires_at),
                format_local(entry.at)
            )));
        }
        // A journaled grant's line says when it ends.
        let journal = entry.journal.as_ref().map(|_| crate::Journaled::Expiring { ends: expires_at });
        let entry = &NewEntry { journal, ..entry.clone() };
        let tx = self.conn.transaction()?;
        ensure_user(&tx, &self.rules, &entry.user, entry.at)?;
        let applied = insert_entry(&tx, entry)?;
        if applied == Applied::Added {
            tx.execute(
                "INSERT INTO grant_expiries (entry_id, user, amount, unused, expires_at)
                 SELECT e.id, e.user, e.amount, e.amount, ?2 FROM entry_keys k JOIN entries e ON e.id = k.entry_id WHERE k.key = ?1",
                params![entry.key, expires_at],
            )?;
        }
        tx.commit()?;
        Ok(applied)
    }

    /// `user`'s grants that have not ended, the soonest-ending first.
    pub fn open_grants(&self, user: &str) -> Result<Vec<ExpiringGrant>, LedgerError> {
        let sql = format!(
            "SELECT {GRANT_COLUMNS} FROM grant_expiries WHERE user = ?1 AND expired_entry IS NULL
             ORDER BY expires_at, entry_id"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([user], grant_row)?.collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Open grants ending before `until` with something left whose balance was not warned yet.
    pub fn grants_to_warn(&self, until: i64) -> Result<Vec<ExpiringGrant>, LedgerError> {
        let sql = format!(
            "SELECT {GRANT_COLUMNS} FROM grant_expiries
             WHERE expired_entry IS NULL AND warned_at IS NULL AND unused > 0 AND expires_at <= ?1
             ORDER BY expires_at, entry_id"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([until], grant_row)?.collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Records that `entry_id`'s user was warned of its end and, with `notice`, the notification it
    /// owes (keyed by the grant, so owed once), in one transaction.
    pub fn mark_warned(&mut self, entry_id: i64, notice: Option<&NewNotice>, now: i64) -> Result<(), LedgerError> {
        let tx = self.conn.transaction()?;
        let changed = tx.execute(
            "UPDATE grant_expiries SET warned_at = ?2 WHERE entry_id = ?1 AND warned_at IS NULL",
            params![entry_id, now],
        )?;
        if let (1, Some(notice)) = (changed, notice) {
            insert_notice(&tx, notice, Some(format!("expiring:{entry_id}")), now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Ends every grant whose end has come: what is left of it (at most the balance, never taking it
    /// below 0) leaves the balance as an adjustment keyed `expire:<grant entry>`, in one transaction.
    /// Returns the entries written (a grant with nothing left ends without one).
    pub fn expire_grants(&mut self, now: i64) -> Result<Vec<Entry>, LedgerError> {
        let tx = self.conn.transaction()?;
        let due: Vec<(ExpiringGrant, i64, String)> = {
            let mut stmt = tx.prepare(
                "SELECT g.entry_id, g.user, g.amount, g.unused, g.expires_at, e.at, e.reason
                 FROM grant_expiries g JOIN entries e ON e.id = g.entry_id
                 WHERE g.expired_entry IS NULL AND g.expires_at <= ?1 ORDER BY g.expires_at, g.entry_id",
            )?;
            let rows = stmt.query_map([now], |r| Ok((grant_row(r)?, r.get(5)?, r.get(6)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut keys = Vec::new();
        for (grant, granted_at, reason) in due {
            let balance: i64 =
                tx.query_row("SELECT balance FROM users WHERE name = ?1", [&grant.user], |r| r.get(0))?;
            let expiring = grant.at_stake(Tokens::from_micro(balance));
            let mut expired_entry = 0;
            if expiring > Tokens::ZERO {
                let key = expiry_key(grant.entry_id);
                let why = format!(
                    "expired: {} left of the grant of {} on {} ({reason}), which ended {}",
                    expiring,
                    grant.amount,
                    format_local(granted_at),
                    format_local(grant.expires_at)
                );
                let entry =
                    NewEntry::new(&grant.user, EntryKind::Adjust, -expiring, now, "gputokens", &why, key.clone());
                insert_entry(&tx, &entry)?;
                expired_entry = tx.query_row("SELECT entry_id FROM entry_keys WHERE key = ?1", [&key], |r| r.get(0))?;
                keys.push(key);
            }
            tx.execute(
                "UPDATE grant_expiries SET expired_entry = ?2, unused = 0 WHERE entry_id = ?1",
                params![grant.entry_id, expired_entry],
            )?;
        }
        tx.commit()?;
        let mut written = Vec::new();
        for key in keys {
            written.extend(self.entry_with_key(&key)?);
        }
        Ok(written)
    }
}

/// The balances with an open grant that has something left, read once per charge cycle: only their
/// charges draw from grants.
pub(crate) fn balances_with_open_grants(tx: &Transaction<'_>) -> Result<HashSet<String>, LedgerError> {
    let mut stmt =
        tx.prepare_cached("SELECT DISTINCT user FROM grant_expiries WHERE expired_entry IS NULL AND unused > 0")?;
    let rows = stmt.query_map((), |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Draws `charged` from `user`'s open grants, the soonest-ending first (ended ones are not drawn
/// from: they expire at the next check cycle as they were).
pub(crate) fn draw(tx: &Transaction<'_>, user: &str, charged: Tokens, now: i64) -> Result<(), LedgerError> {
    let mut left = charged;
    let open: Vec<(i64, i64)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT entry_id, unused FROM grant_expiries
             WHERE user = ?1 AND expired_entry IS NULL AND unused > 0 AND expires_at > ?2
             ORDER BY expires_at, entry_id",
        )?;
        let rows = stmt.query_map(params![user, now], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    for (entry_id, unused) in open {
        if left <= Tokens::ZERO {
            break;
        }
        let take = left.min(Tokens::from_micro(unused));
        tx.prepare_cached("UPDATE grant_expiries SET unused = unused - ?2 WHERE entry_id = ?1")?
            .execute(params![entry_id, take.micro()])?;
        left = left - take;
    }
    Ok(())
}

/// Puts `refunded` (micro-tokens) of job `job_id` back into `user`'s open grants that charges drew
/// from, the soonest-ending first, each at most what was drawn of it: charges draw from open grants
/// first, so what a refund gives back came from them while one was drawn, and it expires with them
/// (the audit's L4). Only grants made before the job's last charge to `user` can have paid for it;
/// what a grant that has ended was drawn for stays in the balance.
pub(crate) fn undraw(
    tx: &Transaction<'_>,
    user: &str,
    job_id: &str,
    refunded: i64,
    now: i64,
) -> Result<(), LedgerError> {
    if refunded <= 0 {
        return Ok(());
    }
    let drawn: Vec<(i64, i64)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT g.entry_id, g.amount - g.unused FROM grant_expiries g JOIN entries e ON e.id = g.entry_id
             WHERE g.user = ?1 AND g.expired_entry IS NULL AND g.expires_at > ?2 AND g.unused < g.amount
               AND e.at <= (SELECT MAX(at) FROM entries WHERE job_id = ?3 AND user = ?1 AND kind = 'charge')
             ORDER BY g.expires_at, g.entry_id",
        )?;
        let rows = stmt.query_map(params![user, now, job_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    let mut left = refunded;
    for (entry_id, drawn) in drawn {
        if left <= 0 {
            break;
        }
        let put = left.min(drawn);
        tx.prepare_cached("UPDATE grant_expiries SET unused = unused + ?2 WHERE entry_id = ?1")?
            .execute(params![entry_id, put])?;
        left -= put;
    }
    Ok(())
}
