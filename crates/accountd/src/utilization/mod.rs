//! Measured GPU utilization per job (not the allocated GPU time that is charged), from the node
//! agents' reports or a Prometheus server, as `[usage] source` says.

pub mod prometheus;
pub mod tracker;

use gputokens::config::UsageSource;
use gputokens::Config;
use serde::Deserialize;

use crate::error::{AccountdError, AccountdResult};
use crate::resources::Resources;
use prometheus::PrometheusSource;
pub use tracker::{JobUtilization, Tracker};

/// The `[prometheus]` table when `[usage] source = "prometheus"`, checked.
pub fn prometheus_source(config: &Config) -> AccountdResult<Option<PrometheusSource>> {
    if config.usage.source != UsageSource::Prometheus {
        return Ok(None);
    }
    let table = config.usage.prometheus.clone().unwrap_or_default();
    let bad = |problem: String| AccountdError::BadInput { path: config.path.clone(), problem };
    let source =
        PrometheusSource::deserialize(toml::Value::Table(table)).map_err(|e| bad(format!("[prometheus]: {e}")))?;
    source.validate().map_err(|e| bad(format!("[prometheus]: {e}")))?;
    Ok(Some(source))
}

/// Reads job utilization over the last `window` from Prometheus, when that is the source.
pub fn poll_prometheus(
    res: &mut Resources,
    tracker: &mut Tracker,
    window: std::time::Duration,
    now: i64,
) -> AccountdResult<Option<String>> {
    let Some(source) = prometheus_source(&res.config)? else { return Ok(None) };
    let by_job = source.job_utilization(window, now).map_err(|e| AccountdError::Failed(format!("prometheus: {e}")))?;
    let jobs = by_job.into_iter().map(|(job, percent)| JobUtilization { job, percent, memory_bytes: 0 }).collect();
    let (count, idle) = tracker::apply(res, tracker, "", jobs, now)?;
    Ok(Some(format!("{count} jobs' utilization read from Prometheus, {idle} newly idle")))
}
