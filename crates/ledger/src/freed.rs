//! GPUs preemptions freed for waiting jobs (table `freed_for_waiters`), remembered until the job
//! had time to start: what keeps a second cycle from preempting again for the same wait. Small: a
//! row per waiting job and GPU type, gone when the job no longer waits or its time is up.

use crate::db::params;

use super::{Ledger, LedgerError};
use gputokens::preemption::FreedFor;

impl Ledger {
    /// What earlier preemptions freed for waiting jobs and has not expired at `now`.
    pub fn freed_for_waiters(&self, now: i64) -> Result<Vec<FreedFor>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT waiter, gpu_type, gpus, expires FROM freed_for_waiters WHERE expires > ?1
             ORDER BY waiter, gpu_type",
        )?;
        let rows = stmt.query_map([now], |r| {
            Ok(FreedFor {
                waiter: r.get(0)?,
                gpu_type: r.get(1)?,
                gpus: u64::try_from(r.get::<i64>(2)?).unwrap_or(0),
                expires: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Remembers GPUs freed at `at` (added to what was freed for the same job and type before and
    /// has not expired; the later expiry holds).
    pub fn remember_freed(&mut self, freed: &[FreedFor], at: i64) -> Result<(), LedgerError> {
        let tx = self.conn.transaction()?;
        for f in freed {
            let gpus = i64::try_from(f.gpus).unwrap_or(i64::MAX);
            tx.prepare_cached(tx.dialect().pick(
                "INSERT INTO freed_for_waiters (waiter, gpu_type, gpus, at, expires) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (waiter, gpu_type) DO UPDATE SET
                    gpus = excluded.gpus + CASE WHEN expires > excluded.at THEN gpus ELSE 0 END,
                    at = excluded.at, expires = MAX(expires, excluded.expires)",
                // MariaDB assigns in order, each seeing the ones before: gpus reads the old expires.
                "INSERT INTO freed_for_waiters (waiter, gpu_type, gpus, at, expires) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON DUPLICATE KEY UPDATE
                    gpus = VALUES(gpus) + CASE WHEN expires > VALUES(at) THEN gpus ELSE 0 END,
                    at = VALUES(at), expires = GREATEST(expires, VALUES(expires))",
            ))?
            .execute(params![f.waiter, f.gpu_type, gpus, at, f.expires])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Forgets what expired by `now` and what was freed for jobs that no longer wait (`still_waits`
    /// says which still do: pending in squeue). Returns how many rows went.
    pub fn forget_freed(&mut self, now: i64, still_waits: impl Fn(&str) -> bool) -> Result<usize, LedgerError> {
        let tx = self.conn.transaction()?;
        let mut gone = tx.execute("DELETE FROM freed_for_waiters WHERE expires <= ?1", [now])?;
        let waiters: Vec<String> = {
            let mut stmt = tx.prepare("SELECT DISTINCT waiter FROM freed_for_waiters")?;
            let rows = stmt.query_map((), |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        for waiter in waiters.iter().filter(|w| !still_waits(w)) {
            gone += tx.execute("DELETE FROM freed_for_waiters WHERE waiter = ?1", [waiter])?;
        }
        tx.commit()?;
        Ok(gone)
    }
}
