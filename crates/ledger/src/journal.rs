//! The admin journal's outbox: an admin's change is marked for the journal in the very transaction
//! that records it (`journal_outbox`), and accountd exports the marked entries to the journal file
//! after the commit, until they land. A crash between the commit and the file's append leaves the
//! mark, never a change no journal lists.

use crate::db::{params, Transaction};
use gputokens::policy::BucketRules;
use gputokens::Tokens;
use serde::{Deserialize, Serialize};

use crate::error::LedgerError;
use crate::history::{entry_row, ENTRY_COLUMNS};
use crate::{Entry, Ledger};

/// Why an entry goes to the admin journal: what its line must say beyond the entry itself to enter
/// the change again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Journaled {
    /// The entry says it all (a grant, an adjustment, a refund, an import).
    AsItsKind,
    /// A grant that ends (unix seconds).
    Expiring { ends: i64 },
    /// A pool made with these rules.
    PoolCreated { rules: BucketRules, user_limit: Option<Tokens> },
    /// A pool's rules changed to these (the pool it draws on and whether it lends: none and no in
    /// marks written before pools nested).
    PoolRules {
        rules: BucketRules,
        user_limit: Option<Tokens>,
        #[serde(default)]
        parent: Option<String>,
        #[serde(default)]
        lends: bool,
    },
    /// A dated sub-allocation made inside `parent`'s pool.
    Allocation { parent: String, amount: Tokens, starts: i64, ends: i64 },
    /// Tokens moved between two balances (the `:from` half's entry); `key` as the admin gave it.
    Transfer { from: String, to: String, amount: Tokens, reason: String, key: String },
}

/// An entry marked for the journal and not exported yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJournal {
    pub entry: Entry,
    pub journaled: Journaled,
}

/// Marks the entry `entry_id` for the journal, in the transaction that inserted it.
pub(crate) fn mark(tx: &Transaction<'_>, entry_id: i64, journaled: &Journaled) -> Result<(), LedgerError> {
    let what = serde_json::to_string(journaled).map_err(|e| LedgerError::Refused(e.to_string()))?;
    tx.prepare_cached("INSERT INTO journal_outbox (entry_id, what) VALUES (?1, ?2)")?
        .execute(params![entry_id, what])?;
    Ok(())
}

impl Ledger {
    /// The entries marked for the journal and not exported yet, oldest first.
    pub fn pending_journal(&self) -> Result<Vec<PendingJournal>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {ENTRY_COLUMNS}, o.what FROM journal_outbox o JOIN entries e ON e.id = o.entry_id ORDER BY o.entry_id"
        ))?;
        let mut rows = stmt.query(())?;
        let mut pending = Vec::new();
        while let Some(row) = rows.next()? {
            let entry = entry_row(&row)?;
            let what: String = row.get(11)?;
            // A mark this version cannot read (written by a newer one) still journals its entry,
            // as its kind says: never one mark holding back every later change.
            let journaled = serde_json::from_str(&what).unwrap_or(Journaled::AsItsKind);
            pending.push(PendingJournal { entry, journaled });
        }
        Ok(pending)
    }

    /// Unmarks entries whose lines the journal now holds.
    pub fn journal_exported(&mut self, entry_ids: &[i64]) -> Result<(), LedgerError> {
        let tx = self.conn.transaction()?;
        for id in entry_ids {
            tx.prepare_cached("DELETE FROM journal_outbox WHERE entry_id = ?1")?.execute([id])?;
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gputokens::entry::EntryKind;
    use gputokens::pools::holder;

    use super::*;
    use crate::{NewEntry, PoolChange};

    const NOW: i64 = 1_795_430_400;

    fn ledger(dir: &tempfile::TempDir) -> Ledger {
        Ledger::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap()
    }

    fn grant(user: &str, key: &str) -> NewEntry {
        NewEntry::new(user, EntryKind::Grant, Tokens::whole(5), NOW, "root", "course", key.into())
    }

    fn pending(l: &Ledger) -> Vec<(String, Journaled)> {
        l.pending_journal().unwrap().into_iter().map(|p| (p.entry.key.unwrap(), p.journaled)).collect()
    }

    /// Each admin change is marked with its own commit, once, and only what it needs to say; a
    /// change its transaction refuses leaves no mark; an exported mark is gone.
    #[test]
    fn admin_changes_are_marked_in_their_own_transaction_until_exported() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = ledger(&dir);
        l.append(&grant("alice", "grant:a").journaled(Journaled::AsItsKind)).unwrap();
        l.append(&grant("alice", "grant:a").journaled(Journaled::AsItsKind)).unwrap();
        l.append(&grant("bob", "replenish:bob")).unwrap();
        l.append_expiring(&grant("bob", "grant:b").journaled(Journaled::AsItsKind), NOW + 86_400).unwrap();
        let rules = BucketRules { daily: Tokens::ZERO, ..BucketRules::default() };
        l.add_pool("dept", rules, None, "root", NOW).unwrap();
        l.add_pool("lab", rules, None, "root", NOW).unwrap();
        let change = PoolChange {
            daily: Some(Tokens::whole(2)),
            parent: Some(Some("dept".into())),
            lends: Some(true),
            ..Default::default()
        };
        l.set_pool("lab", &change, "root", "pool-rules:k", NOW).unwrap();
        l.transfer(&holder("lab"), "alice", Tokens::whole(3), "root", "share", "move:1", NOW).unwrap();
        let refused = l.transfer(&holder("lab"), "alice", Tokens::whole(10_000), "root", "all", "move:2", NOW);
        assert!(refused.is_err(), "beyond what the pool may move");
        let marked = pending(&l);
        let changed = BucketRules { daily: Tokens::whole(2), ..rules };
        assert_eq!(
            marked,
            [
                ("grant:a".to_string(), Journaled::AsItsKind),
                ("grant:b".to_string(), Journaled::Expiring { ends: NOW + 86_400 }),
                (crate::pool_created_key("dept"), Journaled::PoolCreated { rules, user_limit: None }),
                (crate::pool_created_key("lab"), Journaled::PoolCreated { rules, user_limit: None }),
                (
                    "pool-rules:k".to_string(),
                    Journaled::PoolRules { rules: changed, user_limit: None, parent: Some("dept".into()), lends: true }
                ),
                (
                    "move:1:from".to_string(),
                    Journaled::Transfer {
                        from: holder("lab"),
                        to: "alice".into(),
                        amount: Tokens::whole(3),
                        reason: "share".into(),
                        key: "move:1".into(),
                    }
                ),
            ]
        );
        let first_two: Vec<i64> = l.pending_journal().unwrap().iter().take(2).map(|p| p.entry.id).collect();
        l.journal_exported(&first_two).unwrap();
        assert_eq!(pending(&l).len(), 4);
        drop(l);
        assert_eq!(pending(&ledger(&dir)).len(), 4, "marks outlive the process");
    }

    /// A mark this version cannot read (a newer one wrote it) still journals its entry, as its kind
    /// says, and holds back none of the others.
    #[test]
    fn a_mark_it_cannot_read_journals_its_entry_as_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = ledger(&dir);
        l.append(&grant("alice", "grant:a").journaled(Journaled::AsItsKind)).unwrap();
        l.append(&grant("bob", "grant:b").journaled(Journaled::AsItsKind)).unwrap();
        let first = l.pending_journal().unwrap()[0].entry.id;
        let sql = "UPDATE journal_outbox SET what = '{\"from_the_future\":1}' WHERE entry_id = ?1";
        assert_eq!(l.conn.execute(sql, [first]).unwrap(), 1);
        assert_eq!(
            pending(&l),
            [("grant:a".to_string(), Journaled::AsItsKind), ("grant:b".to_string(), Journaled::AsItsKind)]
        );
    }
}
