//! What accountd does with an agent's report once the report gate let it in: the GPUs' metrics,
//! their health (drains, `crate::health`) and the jobs' utilization (`crate::utilization`). What the
//! two keep between reports is the HTTP listener's own ([`ReportState`]).

use crate::agent::export::job_use;
use crate::agent::report::AgentReport;
use crate::agent::GpuHealth;
use crate::error::AccountdResult;
use crate::health::HealthState;
use crate::metrics::{GpuLabels, Metrics, NodeLabels};
use crate::resources::Resources;
use crate::utilization::{tracker, JobUtilization, Tracker};

/// What the agents' reports leave behind for the next one.
#[derive(Debug, Default)]
pub struct ReportState {
    pub utilization: Tracker,
    pub health: HealthState,
}

/// Per job, as the agent computes it for its own metrics (`agent::export::job_use`): the mean GPU
/// utilization of the GPUs the job's processes run on.
pub fn job_utilization(report: &AgentReport) -> Vec<JobUtilization> {
    job_use(&report.sample)
        .into_iter()
        .map(|(job, used)| JobUtilization { job, percent: used.percent, memory_bytes: used.memory_bytes })
        .collect()
}

/// Applies one agent report that passed the report gate.
pub fn ingest(res: &mut Resources, state: &mut ReportState, report: &AgentReport) -> AccountdResult<String> {
    record_gpus(&res.metrics, report);
    // accountd's clock, not the sample's: a node's skewed clock must not hide its silence.
    res.metrics.agent_last_report.get_or_create(&NodeLabels { node: report.node.clone() }).set(gputokens::time::now());
    let drained = crate::health::check(res, &mut state.health, report)?;
    let jobs = job_utilization(report);
    let (count, idle) =
        tracker::apply(res, &mut state.utilization, &report.node, jobs, report.sample.time.timestamp())?;
    Ok(format!(
        "{}: {} GPUs, {count} jobs, {idle} newly idle, {} drains",
        report.node,
        report.sample.gpus.len(),
        drained.len()
    ))
}

fn record_gpus(metrics: &Metrics, report: &AgentReport) {
    for gpu in &report.sample.gpus {
        let labels = GpuLabels {
            node: report.node.clone(),
            gpu: gpu.index.to_string(),
            uuid: gpu.uuid.clone().unwrap_or_default(),
        };
        let set = |family: &prometheus_client::metrics::family::Family<GpuLabels, _>, value: Option<f64>| {
            if let Some(v) = value {
                let gauge: &prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64> =
                    &family.get_or_create(&labels);
                gauge.set(v);
            }
        };
        set(&metrics.gpu_utilization, gpu.utilization_percent.map(f64::from));
        set(&metrics.gpu_memory_used, gpu.memory_used_bytes.map(|b| b as f64));
        set(&metrics.gpu_temperature, gpu.temperature_c.map(f64::from));
        set(&metrics.gpu_power, gpu.power_w);
        let healthy = matches!(gpu.health, GpuHealth::Ok) && gpu.ecc_uncorrected.unwrap_or(0) == 0;
        metrics.gpu_healthy.get_or_create(&labels).set(healthy as i64);
    }
}
