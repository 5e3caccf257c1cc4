//! `accountd serve`'s periodic cycles. Each runs on a blocking thread, on the cycles' own state and
//! ledger connection: Slurm's commands, however long they take before their timeout, never hold
//! what answers sbalance, admins and agents. The snapshot is written by its publisher
//! (`snapshot::publisher`), which the cycles hand their view of Slurm, with no lock that answers
//! users held. Each cycle holds the cycle lock (`cycles::lock`) as `accountd tick` does.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::task::JoinHandle;

use super::CycleState;
use crate::answering::{self, Shared};
use crate::cycles::lock::CycleLock;
use crate::error::AccountdResult;
use crate::leadership::Leadership;
use crate::snapshot::publisher::Publisher;

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
    /// Cycles run only while this accountd leads the ledger.
    leadership: Leadership,
    publisher: Publisher,
    charge: Option<JoinHandle<()>>,
    check: Option<JoinHandle<()>>,
}

impl Cycles {
    /// Opens the cycles' own state (a second connection to the same ledger) beside `shared`,
    /// reporting to the same metrics.
    /// Its transactions are fenced by `leadership`'s lease: a cycle of an accountd that lost it
    /// (paused, cut off) writes nothing.
    pub fn open(shared: &Shared, leadership: Leadership) -> AccountdResult<Cycles> {
        let (mut res, publisher) = {
            let answering = answering::lock(shared);
            (answering.res.reopen()?, answering.publisher.clone())
        };
        res.ledger.fence_with_lease(leadership.name());
        Ok(Cycles { own: Arc::new(Mutex::new(CycleState::new(res))), leadership, publisher, charge: None, check: None })
    }

    /// Starts a `kind` cycle unless the last one is still running (waiting for the cycle lock, or
    /// for a slow Slurm command): then this turn is skipped.
    pub fn start(&mut self, kind: Kind) {
        let slot = match kind {
            Kind::Charge => &mut self.charge,
            Kind::Check => &mut self.check,
        };
        if !self.leadership.leading() {
            return tracing::debug!("{} cycle: following, the leading accountd runs it", kind.name());
        }
        if slot.as_ref().is_some_and(|running| !running.is_finished()) {
            return tracing::warn!("the last {} cycle is still running: this turn is skipped", kind.name());
        }
        let (own, publisher) = (self.own.clone(), self.publisher.clone());
        *slot = Some(tokio::task::spawn_blocking(move || run(kind, &own, &publisher)));
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
fn run(kind: Kind, own: &Mutex<CycleState>, publisher: &Publisher) {
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
        Kind::Charge => charge(&mut cycle, publisher, now),
        Kind::Check => {
            let slurm = crate::slurm::Slurm::of(&cycle.res.config);
            let mut queue = crate::slurm::QueueOnce::new(&slurm);
            super::check::check(&mut cycle, (&slurm, &mut queue), now, |c, now| {
                publisher.publish_view(&c.slurm_view, now)
            })
            .map(|c| c.to_string())
        }
    };
    drop(lock);
    cycle.res.metrics.record_cycle(name, started.elapsed().as_secs_f64(), result.is_ok());
    match result {
        Ok(summary) => tracing::info!("{name} cycle ({:?}): {summary}", started.elapsed()),
        Err(e) => tracing::error!("{name} cycle failed: {e} (the last snapshot stays)"),
    }
}

fn charge(cycle: &mut CycleState, publisher: &Publisher, now: i64) -> AccountdResult<String> {
    let slurm = crate::slurm::Slurm::of(&cycle.res.config);
    let summary = super::charge::charge(cycle, &slurm, &mut crate::slurm::QueueOnce::new(&slurm), now)?;
    publisher.publish_view(&cycle.slurm_view, now)?;
    super::notify::run(&mut cycle.res, now);
    Ok(summary.to_string())
}
