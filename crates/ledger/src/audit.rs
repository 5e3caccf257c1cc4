//! The audit trail (table `actions`): what gputokens did, or with `dry_run` would have done, to a
//! job or a node.

use std::collections::HashMap;

use crate::db::{params, OptionalExtension, ToSql};

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
        Ok(self.last_hold_actions(&[(job_id, run, submitted)])?.remove(job_id))
    }

    /// [`Ledger::last_hold_action`] of many runs (job ID, run, queued at) at once, by job ID: a
    /// check cycle asks it of every pending job, [`crate::db::Dialect::in_list`] of them a statement.
    pub fn last_hold_actions(&self, runs: &[(&str, u64, i64)]) -> Result<HashMap<String, String>, LedgerError> {
        const KINDS: [&str; 6] = [
            holds::HOLD,
            holds::HOLD_OVER_OWNER,
            holds::HOLD_FAILED,
            holds::RELEASE,
            holds::RELEASE_FAILED,
            holds::HOLD_LIFTED,
        ];
        let mut newest = HashMap::new();
        for group in runs.chunks(self.conn.dialect().in_list()) {
            let wanted: HashMap<&str, (i64, i64, i64)> = group
                .iter()
                .map(|&(job, run, submitted)| {
                    let run_since = if run == 0 { submitted } else { submitted - REQUEUED_RUN_SLACK };
                    (job, (run as i64, submitted, run_since))
                })
                .collect();
            let jobs: Vec<&str> = group.iter().map(|(job, ..)| *job).collect();
            let jobs = crate::db::padded_values(&jobs);
            let mut values: Vec<&dyn ToSql> = KINDS.iter().map(|k| k as &dyn ToSql).collect();
            values.extend(&jobs);
            let mut stmt = self.conn.prepare_cached(&format!(
                "SELECT target, action, run, at FROM actions
                 WHERE action IN (?1, ?2, ?3, ?4, ?5, ?6) AND NOT dry_run AND target IN ({})
                 ORDER BY id",
                crate::db::placeholders(jobs.len(), KINDS.len() + 1)
            ))?;
            let rows = stmt.query_map(&values[..], |r| {
                Ok((r.get::<String>(0)?, r.get::<String>(1)?, r.get::<Option<i64>>(2)?, r.get::<i64>(3)?))
            })?;
            for row in rows {
                let (target, action, run, at) = row?;
                let Some(&(job_run, submitted, run_since)) = wanted.get(target.as_str()) else { continue };
                // Actions recorded before schema 17 have no run: they count from `submitted`.
                let this_run = match run {
                    None => at >= submitted,
                    Some(run) => run == job_run && at >= run_since,
                };
                if this_run {
                    newest.insert(target, action);
                }
            }
        }
        Ok(newest)
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
