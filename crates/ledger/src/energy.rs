//! GPU energy per job run (table `job_energy`): what accountd's `utilization::energy` gives each job
//! of NVML's energy counters between two reports of a node, summed per run, node and local day.

use std::collections::HashMap;

use crate::db::{params, Connection};

use gputokens::statement::Month;
use gputokens::time::local_date;

use super::{Ledger, LedgerError};

/// One run's energy on one node, all days together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnergy {
    /// Unix seconds of the run's first report on the node.
    pub since: i64,
    pub node: String,
    pub joules: u64,
}

impl Ledger {
    /// Adds `joules` that job `job_id`'s run `since` used on `node` between two of its reports, the
    /// later one at `at`.
    pub fn record_energy(
        &mut self,
        job_id: &str,
        since: i64,
        node: &str,
        at: i64,
        joules: u64,
    ) -> Result<(), LedgerError> {
        let day = local_date(at).to_string();
        self.conn
            .prepare_cached(self.conn.dialect().pick(
                "INSERT INTO job_energy (job_id, since, node, day, joules, last_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (job_id, since, node, day)
                 DO UPDATE SET joules = joules + excluded.joules, last_at = MAX(last_at, excluded.last_at)",
                "INSERT INTO job_energy (job_id, since, node, day, joules, last_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON DUPLICATE KEY UPDATE joules = joules + VALUES(joules), last_at = GREATEST(last_at, VALUES(last_at))",
            ))?
            .execute(params![job_id, since, node, day, i64::try_from(joules).unwrap_or(i64::MAX), at])?;
        Ok(())
    }

    /// Each run of `job_id` on each node, the earliest first.
    pub fn job_energy(&self, job_id: &str) -> Result<Vec<RunEnergy>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT since, node, SUM(joules) FROM job_energy WHERE job_id = ?1 GROUP BY since, node ORDER BY since, node",
        )?;
        let rows = stmt.query_map([job_id], |r| {
            Ok(RunEnergy { since: r.get(0)?, node: r.get(1)?, joules: r.get::<i64>(2)?.max(0) as u64 })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Each job's energy (joules) in `month`'s local days, every run and node summed.
pub(super) fn month_energy(conn: &Connection, month: Month) -> Result<HashMap<String, u64>, LedgerError> {
    let (first, last) = (month.first_day().to_string(), month.last_day().to_string());
    let mut stmt = conn
        .prepare_cached("SELECT job_id, SUM(joules) FROM job_energy WHERE day >= ?1 AND day <= ?2 GROUP BY job_id")?;
    let rows = stmt.query_map(params![first, last], |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?.max(0) as u64)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}
