//! Measured GPU utilization per job (not the allocated GPU time that is charged), from the node
//! agents' reports or a Prometheus server, as `[usage] source` says.

pub mod agents;
pub mod prometheus;

use crate::error::{AccountdError, AccountdResult};
use crate::service::Service;

/// Reads job utilization over the last `window` from Prometheus, when that is the source.
pub fn poll_prometheus(service: &mut Service, window: std::time::Duration, now: i64) -> AccountdResult<Option<String>> {
    let Some(source) = service.config.utilization.prometheus_source() else { return Ok(None) };
    let by_job = prometheus::job_utilization(source, window, now)
        .map_err(|e| AccountdError::Failed(format!("prometheus: {e}")))?;
    let jobs =
        by_job.into_iter().map(|(job, percent)| agents::JobUtilization { job, percent, memory_bytes: 0 }).collect();
    let (count, idle) = agents::apply(service, "", jobs, now)?;
    Ok(Some(format!("{count} jobs' utilization read from Prometheus, {idle} newly idle")))
}
