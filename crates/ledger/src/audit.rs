//! The audit trail (table `actions`): what gputokens did, or with `dry_run` would have done, to a
//! job or a node.

use crate::db::{params, OptionalExtension};

use gputokens::entry::{Action, FAULT_CANCEL, FAULT_REQUEUE};
use gputokens::holds;

use super::{Ledger, LedgerError};

/// How long before a requeued run's submit_time a hold on it may have been taken: its epilog's
/// time, which a hung node can stretch to hours.
pub const REQUEUED_RUN_SLACK: i64 = 86_400;

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

    /// Records a hold action (`gputokens::holds`) on run `run` of a job (squeue's `restart_cnt`).
    pub fn record_run_action(&mut self, action: &Action, run: u64) -> Result<(), LedgerError> {
        self.conn.execute(
            "INSERT INTO actions (at, action, target, user, reason, dry_run, run) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![action.at, action.action, action.target, action.user, action.reason, action.dry_run, run as i64],
        )?;
        Ok(())
    }

    /// The newest of gputokens' hold actions (`gputokens::holds`: hold, release, ...) on run `run`
    /// of job `job_id`, queued at `submitted`, if any.
    ///
    /// A run that was never requeued was queued at its submit_time, before any hold. A requeued
    /// run's submit_time is set only when its epilog ends, after a hold gputokens may already have
    /// taken on it: its actions are the ones recorded with its run number, back to
    /// [`REQUEUED_RUN_SLACK`] before its submit_time (an older job with the same ID, as Slurm's
    /// IDs wrap, is not this one). Actions recorded before schema 17 have no run: they count from
    /// `submitted`.
    pub fn last_hold_action(&self, job_id: &str, run: u64, submitted: i64) -> Result<Option<String>, LedgerError> {
        let run_since = if run == 0 { submitted } else { submitted - REQUEUED_RUN_SLACK };
        let action = self
            .conn
            .prepare_cached(
                "SELECT action FROM actions WHERE target = ?1 AND action IN (?2, ?3, ?4, ?5, ?6, ?7)
                 AND NOT dry_run AND ((run IS NULL AND at >= ?8) OR (run = ?9 AND at >= ?10))
                 ORDER BY id DESC LIMIT 1",
            )?
            .query_row(
                params![
                    job_id,
                    holds::HOLD,
                    holds::HOLD_OVER_OWNER,
                    holds::HOLD_FAILED,
                    holds::RELEASE,
                    holds::RELEASE_FAILED,
                    holds::HOLD_LIFTED,
                    submitted,
                    run as i64,
                    run_since
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
