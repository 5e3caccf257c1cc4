//! The audit trail (table `actions`): what gputokens did, or with `dry_run` would have done, to a
//! job or a node.

use rusqlite::{params, OptionalExtension};

use gputokens::entry::{Action, FAULT_CANCEL, FAULT_REQUEUE};
use gputokens::holds;

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

    /// The reason gputokens took job `job_id` off a faulty GPU (`FAULT_REQUEUE`/`FAULT_CANCEL`)
    /// between `from` and `until` (unix seconds), if it did: the run then holding it was lost.
    pub fn fault_action_on(&self, job_id: &str, from: i64, until: i64) -> Result<Option<String>, LedgerError> {
        let reason = self
            .conn
            .prepare_cached(
                "SELECT reason FROM actions WHERE target = ?1 AND action IN (?2, ?3) AND NOT dry_run
                 AND at BETWEEN ?4 AND ?5 ORDER BY id LIMIT 1",
            )?
            .query_row(params![job_id, FAULT_REQUEUE, FAULT_CANCEL, from, until], |r| r.get(0))
            .optional()?;
        Ok(reason)
    }

    /// The newest of gputokens' hold actions (`gputokens::holds`: hold, release, ...) on job
    /// `job_id` since `since` (when the job, or its run, was queued), if any.
    pub fn last_hold_action(&self, job_id: &str, since: i64) -> Result<Option<String>, LedgerError> {
        let action = self
            .conn
            .prepare_cached(
                "SELECT action FROM actions WHERE target = ?1 AND at >= ?2 AND action IN (?3, ?4, ?5, ?6, ?7, ?8)
                 AND NOT dry_run ORDER BY id DESC LIMIT 1",
            )?
            .query_row(
                params![
                    job_id,
                    since,
                    holds::HOLD,
                    holds::HOLD_OVER_OWNER,
                    holds::HOLD_FAILED,
                    holds::RELEASE,
                    holds::RELEASE_FAILED,
                    holds::HOLD_LIFTED
                ],
                |r| r.get(0),
            )
            .optional()?;
        Ok(action)
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
