//! The periodic work shared by `accountd serve` and `accountd tick`.

use std::fmt;

use gputokens::snapshot;

use crate::error::{AccountdError, AccountdResult};
use crate::service::Service;

#[derive(Debug, Default)]
pub struct CheckSummary {
    pub replenished: ledger::Replenished,
    pub users: usize,
    /// What was read from Prometheus, when that is the utilization source.
    pub utilization: Option<String>,
    pub preemption: String,
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} replenishment entries (+{} tokens), snapshot of {} users written",
            self.replenished.entries, self.replenished.tokens, self.users
        )?;
        if let Some(utilization) = &self.utilization {
            write!(f, "; {utilization}")?;
        }
        write!(f, "; {}", self.preemption)
    }
}

/// Replenishes, republishes the snapshot, reads job utilization from Prometheus (when that is the
/// source), preempts where GPUs are contended and sends notifications (`[notify]`). A failure of
/// the last three is logged and does not stop the rest of the cycle. `publish` writes the snapshot from what the service now knows
/// ([`publish_snapshot`], or `accountd serve`'s way of handing the view to its answering side).
pub fn check(
    service: &mut Service,
    now: i64,
    publish: impl FnOnce(&Service, i64) -> AccountdResult<usize>,
) -> AccountdResult<CheckSummary> {
    // Never for a day that has not come on the clock, whatever `tick --now` says.
    let replenished = service.ledger.replenish(now.min(gputokens::time::now()))?;
    service.metrics.replenished.inc_by(replenished.tokens.as_f64());
    let slurm = crate::slurm::Slurm::new(&service.config.slurm);
    let mut queue = crate::slurm::QueueOnce::new(&slurm);
    crate::slurm_view::refresh(service, &slurm, &mut queue, now);
    let users = publish(service, now)?;
    let window = service.config.intervals.check;
    let utilization = crate::utilization::poll_prometheus(service, window, now).unwrap_or_else(|e| {
        tracing::error!("{e}");
        Some(format!("usage not read: {e}"))
    });
    let preemption = crate::preempt_jobs::check(service, &slurm, &mut queue, now).unwrap_or_else(|e| {
        tracing::error!("preemption check failed: {e}");
        format!("preemption check failed: {e}")
    });
    // After replenishment, grants since the last cycle and preemptions: their crossings and notices.
    crate::notify::run(service, now);
    Ok(CheckSummary { replenished, users, utilization, preemption })
}

/// Writes the balance snapshot for the job_submit plugin; returns how many users it lists.
pub fn publish_snapshot(service: &Service, now: i64) -> AccountdResult<usize> {
    let accounts = service.ledger.accounts()?;
    if service.config.http.per_user_metrics {
        service.metrics.set_balances(&accounts);
    }
    let mut snap = snapshot::Snapshot::new(now, *service.ledger.rules());
    snap.balances = accounts.iter().map(|a| (a.user.clone(), a.balance)).collect();
    snap.sharing = service.config.sharing;
    snap.prices = service.config.prices.clone();
    snap.partitions = service.slurm_view.partitions.clone();
    snap.default_accounts = service.slurm_view.default_accounts.clone();
    snap.queue = service.slurm_view.queue.clone();
    let text = snapshot::render(&snap);
    // As root: readable by slurmctld's group, or the plugin could not read it.
    crate::snapshot_access::write(&service.config.paths.snapshot, &text, &service.config.slurm_user)
        .map_err(AccountdError::Failed)?;
    service.metrics.snapshot_written.set(now);
    Ok(accounts.len())
}
