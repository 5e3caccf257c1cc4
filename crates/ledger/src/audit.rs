//! The audit trail (table `actions`): what gputokens did, or with `dry_run` would have done, to a
//! job or a node.

use rusqlite::params;

use gputokens::entry::Action;

use super::{Ledger, LedgerError};

impl Ledger {
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
}
