//! The check cycle, shared by `accountd serve` and `accountd tick`.

use std::fmt;

use super::CycleState;
use crate::error::AccountdResult;

#[derive(Debug, Default)]
pub struct CheckSummary {
    pub replenished: ledger::Replenished,
    pub expiries: crate::cycles::expiries::Expired,
    pub users: usize,
    /// What was read from Prometheus, when that is the utilization source.
    pub utilization: Option<String>,
    pub preemption: String,
    pub holds: String,
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} replenishment entries (+{} tokens), snapshot of {} users written",
            self.replenished.entries, self.replenished.tokens, self.users
        )?;
        if self.expiries != Default::default() {
            write!(
                f,
                "; {} grants announced before they end, {} expired",
                self.expiries.warned, self.expiries.expired
            )?;
        }
        if let Some(utilization) = &self.utilization {
            write!(f, "; {utilization}")?;
        }
        write!(f, "; {}; {}", self.preemption, self.holds)
    }
}

/// Replenishes, republishes the snapshot, reads job utilization from Prometheus (when that is the
/// source), preempts where GPUs are contended and sends notifications (`[notify]`). A failure of
/// the last three is logged and does not stop the rest of the cycle. `publish` writes the snapshot
/// from what the cycle now knows ([`crate::snapshot::publish`], or `accountd serve`'s way of handing
/// the view to its answering side).
pub fn check(
    cycle: &mut CycleState,
    (slurm, queue): (&crate::slurm::Slurm, &mut crate::slurm::QueueOnce),
    now: i64,
    publish: impl FnOnce(&CycleState, i64) -> AccountdResult<crate::snapshot::Published>,
) -> AccountdResult<CheckSummary> {
    // What squeue shows is evidence of the real time: submit times, and running jobs' starts (a
    // pending job's start is a forecast).
    if let Ok(jobs) = queue.jobs() {
        let running = |j: &&gputokens::slurm::squeue::QueueJob| j.state != "PENDING";
        let times: Vec<i64> =
            jobs.iter().map(|j| j.submit_time).chain(jobs.iter().filter(running).map(|j| j.start_time)).collect();
        crate::cycles::slurm_clock::saw(&mut cycle.res, times)?;
    }
    // Never for a day that has not come on the clock, whatever `tick --now` says, nor for one over a
    // day past what Slurm has shown (a clock jumped ahead).
    let clock = now.min(gputokens::time::now());
    let bound = crate::cycles::slurm_clock::bound(&cycle.res, &mut cycle.clock, clock)?;
    // Several clusters on one ledger: their [bucket] rules compared before any replenishment.
    crate::cycles::cluster_rules::check(&mut cycle.res)?;
    let replenished = cycle.res.ledger.replenish(bound)?;
    cycle.res.metrics.replenished.inc_by(replenished.tokens.as_f64());
    for (holder, why) in &replenished.failures {
        tracing::error!("replenishment of {holder} skipped (the others' went on): {why}");
        let labels = crate::metrics::CycleLabels { cycle: "replenish".into() };
        cycle.res.metrics.balances_skipped.get_or_create(&labels).inc();
    }
    // Grants that end: their warnings, then what is left of them expires (before the snapshot).
    // (At `now`, which `tick --now` may set ahead, unless the clock itself is held back.)
    let expiries = crate::cycles::expiries::run(&mut cycle.res, if bound < clock { bound } else { now })?;
    crate::slurm_view::refresh(&cycle.res, &mut cycle.slurm_view, slurm, queue, now);
    let published = publish(cycle, now)?;
    let users = published.users;
    // Holds and preemption weigh the balances the snapshot was written with while no entry was
    // added since (`CycleState::balances_of`): one read of the ledger rather than one each (a round
    // trip per 1,024 users on MariaDB).
    cycle.balances_read = published.balances;
    crate::cycles::shadow::export(&cycle.res);
    let window = cycle.res.config.intervals.check;
    let utilization = crate::utilization::poll_prometheus(&mut cycle.res, &mut cycle.utilization, window, now)
        .unwrap_or_else(|e| {
            tracing::error!("{e}");
            Some(format!("usage not read: {e}"))
        });
    // Holds first: a job held at the floor waits for nothing a preemption could free.
    let holds = crate::cycles::holds::check(cycle, slurm, queue, now).unwrap_or_else(|e| {
        tracing::error!("holds at the floor not checked: {e}");
        format!("holds at the floor not checked: {e}")
    });
    let preemption = crate::cycles::preemption::check(cycle, slurm, queue, now).unwrap_or_else(|e| {
        tracing::error!("preemption check failed: {e}");
        format!("preemption check failed: {e}")
    });
    cycle.balances_read = None;
    // After replenishment, grants since the last cycle and preemptions: their crossings and notices.
    crate::cycles::notify::run(&mut cycle.res, now);
    Ok(CheckSummary { replenished, expiries, users, utilization, preemption, holds })
}
