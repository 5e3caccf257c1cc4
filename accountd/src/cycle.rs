//! The periodic work shared by `accountd serve` and `accountd tick`.

use std::fmt;

use gputokens::snapshot;

use crate::error::{CliError, CliResult};
use crate::handler::Service;

#[derive(Debug, Default)]
pub struct CheckSummary {
    pub replenished: gputokens::ledger::Replenished,
    pub users: usize,
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} replenishment entries (+{} tokens), snapshot of {} users written",
            self.replenished.entries, self.replenished.tokens, self.users
        )
    }
}

/// Replenishes and republishes the snapshot.
pub fn check(service: &mut Service, now: i64) -> CliResult<CheckSummary> {
    let replenished = service.ledger.replenish(now)?;
    service.metrics.replenished.inc_by(replenished.tokens.as_f64());
    let users = publish_snapshot(service, now)?;
    Ok(CheckSummary { replenished, users })
}

/// Writes the balance snapshot for the job_submit plugin; returns how many users it lists.
pub fn publish_snapshot(service: &Service, now: i64) -> CliResult<usize> {
    let accounts = service.ledger.accounts()?;
    service.metrics.set_balances(&accounts);
    let text = snapshot::render(&accounts, service.ledger.rules(), now);
    let path = &service.config.paths.snapshot;
    snapshot::write_atomically(path, &text)
        .map_err(|e| CliError::failed(format!("cannot write snapshot {}: {e}", path.display())))?;
    Ok(accounts.len())
}
