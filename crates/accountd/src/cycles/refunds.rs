//! Automatic refunds, each charge cycle: the finished runs sacct says were lost to the system (see
//! `gputokens::refunds`) get what they were charged back, once per run, with the cause in the
//! entry's reason (and so in the history, the statement and the status page).

use std::collections::HashMap;

use gputokens::refunds::{cause, node_failure_shared, refunded_share, FailedRun, RefundCause, RunEnd};
use gputokens::slurm::sacct::RunEnded;
use gputokens::statement::Month;
use gputokens::time::{format_local, local_date};
use ledger::{RunRefund, UsageRecord};

use crate::error::AccountdResult;
use crate::metrics::CauseLabels;
use crate::resources::Resources;
use crate::slurm::Slurm;

/// How long after a run's end (by Slurm's clock) gputokens' fault requeue may be stamped (by
/// accountd's): the action is recorded before scontrol runs, so only the two clocks' skew. (It was
/// 300 s while actions were recorded after scontrol returned: a run its user ended in those minutes
/// matched a later fault action.)
const FAULT_ACTION_SLACK: i64 = 10;

/// Refunds the lost runs among `records` (finished ones), by how each ended (sacct); returns how
/// many runs were refunded now.
pub fn run(
    res: &mut Resources,
    records: &[UsageRecord],
    ends: &HashMap<(String, i64), RunEnded>,
    now: i64,
) -> AccountdResult<usize> {
    let config = res.config.refunds.clone();
    if config.causes.is_empty() {
        return Ok(0);
    }
    let end_of =
        |record: &UsageRecord| record.segment_start.saturating_add(i64::try_from(record.elapsed).unwrap_or(i64::MAX));
    let failed = node_failures(res, records, ends, end_of);
    let failed_runs: Vec<FailedRun> = failed.iter().map(|(_, run)| run.clone()).collect();
    let (month_start, _) = Month::of(local_date(now)).bounds();
    let mut refunded = 0;
    for record in records {
        let Some(ended) = ends.get(&(record.job_id.clone(), record.segment_start)) else { continue };
        let state = ended.state.as_str();
        let end = end_of(record);
        // The audit trail is read only for the states a fault action leaves.
        let fault = match state {
            "REQUEUED" | "CANCELLED" => res.ledger.fault_action_on(
                &record.job_id,
                record.segment_start,
                end.saturating_add(FAULT_ACTION_SLACK),
            )?,
            _ => None,
        };
        let node_failure_shared = failed
            .iter()
            .find(|(failed, _)| std::ptr::eq(*failed, record))
            .is_some_and(|(_, run)| node_failure_shared(run, &failed_runs));
        let run_end = RunEnd { state, fault_action: fault.is_some(), node_failure_shared };
        let Some(why) = cause(&run_end, &config.causes) else {
            if state == "NODE_FAIL" && config.causes.contains(&RefundCause::NodeFail) {
                tracing::warn!(
                    "job {} of {}: run from {} ended NODE_FAIL on {}, but no other user's job failed with that node: \
                     not refunded automatically (a job can bring its own node down; an admin may `accountd admin refund` it)",
                    record.job_id,
                    record.user,
                    format_local(record.segment_start),
                    ended.nodes.as_deref().unwrap_or("its node")
                );
            }
            tracing::debug!("job {} run from {}: {state}, not refunded", record.job_id, record.segment_start);
            continue;
        };
        if res.ledger.run_refunded(&record.job_id, record.segment_start)? {
            continue;
        }
        let gpu_seconds = record.milli_gpus.values().sum::<u64>().saturating_mul(record.elapsed) / 1000;
        let share = refunded_share(gpu_seconds, config.max_gpu_seconds);
        let lost_to = match why {
            RefundCause::NodeFail => {
                let node = ended.nodes.as_deref().unwrap_or("its node");
                format!("a node failure (NODE_FAIL on {node})")
            }
            RefundCause::GpuFault => format!("a GPU fault ({})", fault.unwrap_or_default()),
        };
        let mut reason = format!(
            "refund: run of job {} from {} lost to {lost_to}",
            record.job_id,
            format_local(record.segment_start)
        );
        if share.0 != share.1 {
            reason += &format!(
                "; {} of its {} GPU-hours refunded ([refunds] max_gpu_hours)",
                gpu_hours(share.0),
                gpu_hours(gpu_seconds)
            );
        }
        let refund = RunRefund {
            job_id: &record.job_id,
            segment_start: record.segment_start,
            share,
            reason: &reason,
            at: now,
            month_cap: config.max_tokens_per_month,
            month_start,
        };
        let entries = res.ledger.refund_run(&refund)?;
        if entries.is_empty() {
            tracing::info!(
                "job {} run from {}: lost to {lost_to}, but nothing refunded ([refunds] max_tokens_per_month {} reached, or nothing paid)",
                record.job_id,
                format_local(record.segment_start),
                config.max_tokens_per_month
            );
            continue;
        }
        let labels = CauseLabels { cause: why.as_str().to_string() };
        res.metrics.refunds.get_or_create(&labels).inc();
        let tokens: f64 = entries.iter().map(|e| e.amount.as_f64()).sum();
        res.metrics.refunded_tokens.get_or_create(&labels).inc_by(tokens);
        for e in &entries {
            tracing::info!("{}: +{} {}", e.user, e.amount, e.reason);
        }
        refunded += 1;
    }
    Ok(refunded)
}

/// The runs among `records` that ended NODE_FAIL, with their nodes expanded (`scontrol show
/// hostnames`, only for these few): what [`node_failure_shared`] compares.
fn node_failures<'r>(
    res: &Resources,
    records: &'r [UsageRecord],
    ends: &HashMap<(String, i64), RunEnded>,
    end_of: impl Fn(&UsageRecord) -> i64,
) -> Vec<(&'r UsageRecord, FailedRun)> {
    let slurm = Slurm::of(&res.config);
    let mut failed = Vec::new();
    for record in records {
        let Some(ended) = ends.get(&(record.job_id.clone(), record.segment_start)) else { continue };
        if ended.state != "NODE_FAIL" {
            continue;
        }
        let nodes = ended.nodes.as_deref().map_or(Ok(Vec::new()), |list| slurm.hostnames(list));
        let nodes = nodes.unwrap_or_else(|e| {
            tracing::warn!("job {}: cannot expand its nodes {:?}: {e}", record.job_id, ended.nodes);
            Vec::new()
        });
        let end = ended.end.unwrap_or_else(|| end_of(record));
        failed.push((record, FailedRun { user: record.user.clone(), nodes, end }));
    }
    failed
}

fn gpu_hours(gpu_seconds: u64) -> String {
    let hours = gpu_seconds as f64 / 3600.0;
    format!("{:.2}", hours).trim_end_matches('0').trim_end_matches('.').to_string()
}
