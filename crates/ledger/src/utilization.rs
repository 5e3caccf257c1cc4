//! Measured GPU utilization per run of a job (table `job_utilization`): a count of samples and
//! their sum, what `charge_basis = "measured"` weighs a run's price by, and how many samples were
//! idle (the share of its charges spent on idle GPUs). A run is keyed by when accountd first saw
//! it (`since`); a requeued job's runs are kept apart.

use crate::db::{params, OptionalExtension};

use super::{Ledger, LedgerError};

impl Ledger {
    /// Adds one utilization sample (percent) of a job's run first seen at `since`, and `idle`
    /// samples to its idle ones (this one, and the earlier ones of a stretch that has just lasted
    /// the idle window).
    pub fn record_utilization(
        &mut self,
        job_id: &str,
        since: i64,
        percent: f64,
        idle: u64,
        at: i64,
    ) -> Result<(), LedgerError> {
        self.conn.execute(
            self.conn.dialect().pick(
                "INSERT INTO job_utilization (job_id, since, samples, util_sum, last_at, idle_samples)
                 VALUES (?1, ?2, 1, ?3, ?4, ?5)
                 ON CONFLICT (job_id, since) DO UPDATE SET samples = samples + 1, util_sum = util_sum + excluded.util_sum,
                                                    last_at = excluded.last_at,
                                                    idle_samples = MIN(samples + 1, idle_samples + excluded.idle_samples)",
                // MariaDB assigns in order, each seeing the ones before: idle_samples reads the old samples.
                "INSERT INTO job_utilization (job_id, since, samples, util_sum, last_at, idle_samples)
                 VALUES (?1, ?2, 1, ?3, ?4, ?5)
                 ON DUPLICATE KEY UPDATE idle_samples = LEAST(samples + 1, idle_samples + VALUES(idle_samples)),
                                         samples = samples + 1, util_sum = util_sum + VALUES(util_sum),
                                         last_at = VALUES(last_at)",
            ),
            params![job_id, since, percent, at, idle as i64],
        )?;
        Ok(())
    }

    /// The samples of the run of `job_id` that Slurm ran from `run_start` to `run_end` (so far):
    /// those first seen within it (give or take `skew` seconds between the clocks), not a later
    /// run's; None when none were taken.
    pub fn run_utilization_samples(
        &self,
        job_id: &str,
        run_start: i64,
        run_end: i64,
        skew: i64,
    ) -> Result<Option<(u64, f64)>, LedgerError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT SUM(samples), SUM(util_sum) FROM job_utilization
                 WHERE job_id = ?1 AND since >= ?2 AND since <= ?3 HAVING COUNT(*) > 0",
            )?
            .query_row(params![job_id, run_start.saturating_sub(skew), run_end.saturating_add(skew)], |r| {
                Ok((r.get::<i64>(0)?.max(0) as u64, r.get(1)?))
            })
            .optional()?)
    }

    /// The share of a job's samples that were idle, as (idle, all); None when it was never sampled.
    pub fn idle_share(&self, job_id: &str) -> Result<Option<(u64, u64)>, LedgerError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT SUM(CASE WHEN idle_samples < samples THEN idle_samples ELSE samples END), SUM(samples) FROM job_utilization WHERE job_id = ?1
                 HAVING COUNT(*) > 0",
            )?
            .query_row([job_id], |r| Ok((r.get::<i64>(0)?.max(0) as u64, r.get::<i64>(1)?.max(0) as u64)))
            .optional()?)
    }

    /// How often a job was sampled and the sum of its sampled utilization (percent), all its runs
    /// together, if ever.
    pub fn utilization_samples(&self, job_id: &str) -> Result<Option<(u64, f64)>, LedgerError> {
        Ok(self
            .conn
            .query_row(
                "SELECT SUM(samples), SUM(util_sum) FROM job_utilization WHERE job_id = ?1 HAVING COUNT(*) > 0",
                [job_id],
                |r| Ok((r.get::<i64>(0)?.max(0) as u64, r.get(1)?)),
            )
            .optional()?)
    }

    /// Mean sampled utilization of a job (percent), if it was ever sampled.
    pub fn mean_utilization(&self, job_id: &str) -> Result<Option<f64>, LedgerError> {
        Ok(self
            .conn
            .query_row(
                "SELECT SUM(util_sum) / SUM(samples) FROM job_utilization WHERE job_id = ?1 HAVING COUNT(*) > 0",
                [job_id],
                |r| r.get(0),
            )
            .optional()?)
    }
}
