//! The charge cycle: finished jobs from slurmdbd (sacct) and running jobs from slurmctld (squeue),
//! charged for the GPU time not yet charged. Idempotent: re-reading the same records charges nothing.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use gputokens::config::ChargeBasis;
use gputokens::ledger::{ChargeOutcome, UsageRecord};
use gputokens::slurm::{sacct, squeue};

use crate::error::{CliError, CliResult};
use crate::handler::Service;
use crate::slurm::Slurm;

/// Ledger meta key: sacct has been read up to this unix time.
const READ_UNTIL: &str = "sacct_read_until";
/// Where the very first read began (`first_lookback` before it): re-reads never reach before it, so
/// jobs that ended earlier (charged by the system gputokens replaced, or imported) are never charged.
const READ_FROM: &str = "sacct_read_from";

#[derive(Debug, Default)]
pub struct ChargeSummary {
    /// The sacct window read: from, to (unix).
    pub window: (i64, i64),
    pub finished: usize,
    pub running: usize,
    pub outcome: ChargeOutcome,
    pub skipped: usize,
}

impl fmt::Display for ChargeSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sacct {} to {}: {} finished and {} running GPU jobs: {} charge entries, {} tokens; {} rows without GPU time skipped",
            gputokens::time::format_local(self.window.0),
            gputokens::time::format_local(self.window.1),
            self.finished, self.running, self.outcome.entries, self.outcome.charged, self.skipped
        )?;
        for (gpu_type, secs) in &self.outcome.unlisted_types {
            write!(f, "; {secs} GPU-seconds of unpriced type '{gpu_type}'")?;
        }
        Ok(())
    }
}

pub fn charge(service: &mut Service, slurm: &Slurm, now: i64) -> CliResult<ChargeSummary> {
    let tools = &service.config.slurm;
    let meta = |key| -> CliResult<Option<i64>> { Ok(service.ledger.meta(key)?.and_then(|v| v.parse().ok())) };
    let (read_until, read_from) = (meta(READ_UNTIL)?, meta(READ_FROM)?);
    let since = match read_until {
        Some(t) => (t - tools.reread.as_secs() as i64).max(read_from.unwrap_or(i64::MIN)),
        None => now - tools.first_lookback.as_secs() as i64,
    };

    let sharing = service.config.sharing;
    let finished =
        sacct::parse(&slurm.sacct(since, now)?, sharing).map_err(|e| CliError::failed(format!("sacct: {e}")))?;
    let running = squeue::running_gpu_jobs(&slurm.squeue_json()?).map_err(|e| CliError::failed(e.to_string()))?;

    let mut nodes_of: HashMap<String, String> = finished.nodes.clone();
    nodes_of.extend(running.iter().map(|j| (j.job_id.clone(), j.nodes.clone())));
    let mut records: Vec<UsageRecord> =
        finished.records.iter().cloned().chain(running.iter().map(|j| j.usage(now, sharing))).collect();
    resolve_untyped(&mut records, &nodes_of, slurm);
    if service.config.usage.charge_basis == ChargeBasis::Measured {
        weigh_by_utilization(service, &mut records)?;
    }

    let outcome = service.ledger.charge(&records, &service.config.prices, now)?;
    service.ledger.set_meta(READ_UNTIL, &now.to_string())?;
    if read_from.is_none() {
        // Ledgers from before this key: their first read is long past, nothing to protect.
        let from = if read_until.is_none() { since } else { i64::MIN };
        service.ledger.set_meta(READ_FROM, &from.to_string())?;
    }
    service.metrics.record_charge(&outcome, finished.skipped);
    for (gpu_type, secs) in &outcome.unlisted_types {
        tracing::warn!(
            "GPU type '{gpu_type}' is not in [prices]: {secs} GPU-seconds charged at the unlisted-type price"
        );
    }
    Ok(ChargeSummary {
        window: (since, now),
        finished: finished.records.len(),
        running: running.len(),
        outcome,
        skipped: finished.skipped,
    })
}

/// `charge_basis = "measured"`: a job pays for its GPUs in proportion to their mean measured
/// utilization, never less than `measured_min_fraction`; a job never measured pays the allocation.
fn weigh_by_utilization(service: &Service, records: &mut [UsageRecord]) -> CliResult {
    let floor = service.config.usage.measured_min_fraction;
    for record in records {
        if let Some(percent) = service.ledger.mean_utilization(&record.job_id)? {
            let fraction = (percent / 100.0).clamp(floor, 1.0);
            record.weight_permille = (fraction * 1000.0).round() as u32;
        }
    }
    Ok(())
}

/// An untyped allocation on nodes that have a single GPU type is charged as that type.
fn resolve_untyped(records: &mut [UsageRecord], nodes_of: &HashMap<String, String>, slurm: &Slurm) {
    if !records.iter().any(|r| r.milli_gpus.contains_key(sacct::UNTYPED)) {
        return;
    }
    let types_by_node = match slurm.node_gpu_types() {
        Ok(t) => t,
        Err(e) => return tracing::warn!("cannot learn node GPU types for untyped allocations: {e}"),
    };
    for record in records.iter_mut().filter(|r| r.milli_gpus.contains_key(sacct::UNTYPED)) {
        let Some(hostlist) = nodes_of.get(&record.job_id) else { continue };
        let Ok(hosts) = slurm.hostnames(hostlist) else { continue };
        let types: BTreeSet<&String> = hosts.iter().filter_map(|h| types_by_node.get(h)).flatten().collect();
        if let [only] = types.into_iter().collect::<Vec<_>>().as_slice() {
            let count = record.milli_gpus.remove(sacct::UNTYPED).unwrap_or(0);
            *record.milli_gpus.entry((*only).clone()).or_default() += count;
        }
    }
}
