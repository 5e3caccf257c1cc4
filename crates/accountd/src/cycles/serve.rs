//! `accountd serve`'s periodic cycles. Each runs on a blocking thread, on the cycles' own state and
//! ledger connection: Slurm's commands, however long they take before their timeout, never hold
//! what answers sbalance, admins and agents. The snapshot is written through the answering state,
//! which gets the cycle's view of Slurm with it, so the two never write it over each other. Each cycle holds the cycle lock (`cycles::lock`) as `accountd tick` does.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::task::JoinHandle;

use super::CycleState;
use crate::answering::{self, Shared};
use crate::cycles::lock::CycleLock;
use crate::error::AccountdResult;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Charge,
    Check,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Charge => "charge",
            Kind::Check => "check",
        }
    }
}

pub struct Cycles {
    /// The cycles' own state; a cycle holds it for its whole length.
    own: Arc<Mutex<CycleState>>,
    shared: Shared,
    charge: Option<JoinHandle<()>>,
    check: Option<JoinHandle<()>>,
}

impl Cycles {
    /// Opens the cycles' own state (a second connection to the same ledger) beside `shared`,
    /// reporting to the same metrics.
    pub fn open(shared: &Shared) -> AccountdResult<Cycles> {
        let own = CycleState::new(answering::lock(shared).res.reopen()?);
        Ok(Cycles { own: Arc::new(Mutex::new(own)), shared: shared.clone(), charge: None, check: None })
    }

    /// Starts a `kind` cycle unless the last one is still running (waiting for the cycle lock, or
    /// for a slow Slurm command): then this turn is skipped.
    pub fn start(&mut self, kind: Kind) {
        let slot = match kind {
            Kind::Charge => &mut self.charge,
            Kind::Check => &mut self.check,
        };
        if slot.as_ref().is_some_and(|running| !running.is_finished()) {
            return tracing::warn!("the last {} cycle is still running: this turn is skipped", kind.name());
        }
        let (own, shared) = (self.own.clone(), self.shared.clone());
        *slot = Some(tokio::task::spawn_blocking(move || run(kind, &own, &shared)));
    }

    /// Waits for the cycles under way and for preemptions still in their grace.
    pub async fn finish(self) {
        for running in [self.charge, self.check].into_iter().flatten() {
            if let Err(e) = running.await {
                tracing::error!("a cycle panicked: {e}");
            }
        }
        self.own.lock().unwrap_or_else(|p| p.into_inner()).finish_preemptions();
    }
}

/// One cycle: the lock (waiting at most until the cycle's next turn), the work, its log line and
/// metrics.
fn run(kind: Kind, own: &Mutex<CycleState>, shared: &Shared) {
    let name = kind.name();
    let mut cycle = own.lock().unwrap_or_else(|p| p.into_inner());
    let intervals = &cycle.res.config.intervals;
    let wait = match kind {
        Kind::Charge => intervals.charge,
        Kind::Check => intervals.check,
    };
    let lock = match CycleLock::acquire(&cycle.res.config.paths.ledger, &format!("accountd serve: {name} cycle"), wait)
    {
        Ok(lock) => lock,
        // Not a failure of the cycle: the other one does the same work.
        Err(e) => return tracing::warn!("{name} cycle skipped: {e}"),
    };
    if let Some(note) = lock.waited_note() {
        tracing::info!("{name} cycle {note}");
    }
    let started = Instant::now();
    let now = gputokens::time::now();
    let result = match kind {
        Kind::Charge => charge(&mut cycle, shared, now),
        Kind::Check => super::check::check(&mut cycle, now, |c, now| publish(c, shared, now)).map(|c| c.to_string()),
    };
    drop(lock);
    cycle.res.metrics.record_cycle(name, started.elapsed().as_secs_f64(), result.is_ok());
    match result {
        Ok(summary) => tracing::info!("{name} cycle ({:?}): {summary}", started.elapsed()),
        Err(e) => tracing::error!("{name} cycle failed: {e} (the last snapshot stays)"),
    }
}

fn charge(cycle: &mut CycleState, shared: &Shared, now: i64) -> AccountdResult<String> {
    let slurm = crate::slurm::Slurm::new(&cycle.res.config.slurm);
    let summary = super::charge::charge(cycle, &slurm, now)?;
    publish(cycle, shared, now)?;
    super::notify::run(&mut cycle.res, now);
    Ok(summary.to_string())
}

/// Hands the cycle's view of Slurm to the answering state and writes the snapshot through it,
/// under its lock: a request that changes a balance writes it there too.
fn publish(cycle: &CycleState, shared: &Shared, now: i64) -> AccountdResult<usize> {
    let mut answering = answering::lock(shared);
    answering.slurm_view = cycle.slurm_view.clone();
    answering.publish_snapshot(now)
}
