//! Measured GPU utilization per job (not the allocated GPU time that is charged), from the node
//! agents' reports or a Prometheus server, as `[usage] source` says.

pub mod energy;
pub mod prometheus;
pub mod tracker;

use crate::error::{AccountdError, AccountdResult};
use crate::resources::Resources;
pub use tracker::{JobUtilization, Tracker};

/// Reads job utilization over the last `window` from Prometheus, when that is the source.
pub fn poll_prometheus(
    res: &mut Resources,
    tracker: &mut Tracker,
    window: std::time::Duration,
    now: i64,
) -> AccountdResult<Option<String>> {
    let Some(source) = res.config.utilization.prometheus_source() else { return Ok(None) };
    let by_job = prometheus::job_utilization(source, window, now)
        .map_err(|e| AccountdError::Failed(format!("prometheus: {e}")))?;
    // Prometheus names this cluster's jobs as Slurm does; the ledger as the site does ([clusters]).
    let jobs = by_job
        .into_iter()
        .map(|(job, percent)| JobUtilization {
            job: res.config.clusters.job_key(&job),
            percent: Some(percent),
            memory_bytes: 0,
        })
        .collect();
    let (count, idle) = tracker::apply(res, tracker, "", jobs, now)?;
    Ok(Some(format!("{count} jobs' utilization read from Prometheus, {idle} newly idle")))
}
