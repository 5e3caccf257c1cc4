//! What accountd does with the node agents' reports: per-GPU and per-job metrics, a utilization
//! sample per job in the ledger (for `charge_basis = "measured"`), and idle-job detection.

use std::collections::BTreeSet;

use gputokens::config::UtilizationConfig;

use crate::agent::export::job_use;
use crate::agent::report::AgentReport;
use crate::agent::GpuHealth;
use crate::error::AccountdResult;
use crate::metrics::{GpuLabels, JobLabels, Metrics};
use crate::service::{JobWatch, Service, UtilizationTracker};
use crate::slurm::Slurm;

/// Utilization of one job on one node in one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct JobUtilization {
    pub job: String,
    /// Mean utilization of the GPUs the job's processes run on.
    pub percent: f64,
    pub memory_bytes: u64,
}

/// Per job, as the agent computes it for its own metrics (`agent::export::job_use`): the mean GPU
/// utilization of the GPUs the job's processes run on.
pub fn job_utilization(report: &AgentReport) -> Vec<JobUtilization> {
    job_use(&report.sample)
        .into_iter()
        .map(|(job, used)| JobUtilization { job, percent: used.percent, memory_bytes: used.memory_bytes })
        .collect()
}

/// The job's user, asked of squeue once and remembered.
fn user_of(tracker: &mut UtilizationTracker, job: &str, slurm: &Slurm) -> String {
    if let Some(user) = tracker.users.get(job) {
        return user.clone();
    }
    let user = slurm
        .run("squeue", &["-h", "-j", job, "-o", "%u"])
        .ok()
        .and_then(|out| out.lines().next().map(|l| l.trim().to_string()))
        .filter(|u| !u.is_empty());
    match user {
        Some(u) => {
            tracker.users.insert(job.to_string(), u.clone());
            u
        }
        None => "unknown".into(),
    }
}

/// Applies one agent report.
pub fn ingest(service: &mut Service, report: &AgentReport) -> AccountdResult<String> {
    record_gpus(&service.metrics, report);
    let drained = crate::health::check(service, report)?;
    let jobs = job_utilization(report);
    let (count, idle) = apply(service, &report.node, jobs, report.sample.time.timestamp())?;
    Ok(format!(
        "{}: {} GPUs, {count} jobs, {idle} newly idle, {} drains",
        report.node,
        report.sample.gpus.len(),
        drained.len()
    ))
}

/// Records the utilization of the jobs seen on `node` (agents) or cluster-wide (`node` empty,
/// Prometheus); returns how many jobs and how many became idle.
pub fn apply(service: &mut Service, node: &str, jobs: Vec<JobUtilization>, now: i64) -> AccountdResult<(usize, usize)> {
    let node = node.to_string();
    let slurm = Slurm::new(&service.config.slurm);
    let usage = service.config.utilization.clone();
    let mut seen = BTreeSet::new();
    let mut flagged = Vec::new();
    for job in jobs {
        let user = user_of(&mut service.utilization, &job.job, &slurm);
        service.ledger.record_utilization(&job.job, job.percent, now)?;
        let labels = JobLabels { job: job.job.clone(), user, node: node.clone() };
        let series = service.metrics.job_labels(&labels);
        service.metrics.job_gpu_utilization.get_or_create(&series).set(job.percent);
        service.metrics.job_gpu_memory.get_or_create(&series).set(job.memory_bytes as f64);
        let watch = service.utilization.jobs.entry(job.job.clone()).or_insert_with(|| JobWatch {
            labels: labels.clone(),
            below_since: None,
            flagged: false,
        });
        if watch_idle(watch, job.percent, now, &usage) {
            flagged.push(watch.labels.clone());
        }
        service.metrics.job_idle.get_or_create(&series).set(watch.flagged as i64);
        seen.insert(job.job);
    }
    forget_ended_jobs(service, &node, &seen);
    for labels in &flagged {
        flag_idle(labels, &usage);
    }
    Ok((seen.len(), flagged.len()))
}

/// Advances a job's idle state; true when it has just become idle.
fn watch_idle(watch: &mut JobWatch, percent: f64, now: i64, usage: &UtilizationConfig) -> bool {
    if percent >= usage.idle_threshold_percent {
        watch.below_since = None;
        watch.flagged = false;
        return false;
    }
    let since = *watch.below_since.get_or_insert(now);
    let idle = now - since >= usage.idle_window.as_secs() as i64;
    let newly = idle && !watch.flagged;
    watch.flagged |= idle;
    newly
}

fn flag_idle(labels: &JobLabels, usage: &UtilizationConfig) {
    tracing::warn!(
        job = %labels.job, user = %labels.user, node = %labels.node,
        "job holds GPUs below {}% utilization for longer than {:?}: flagged idle",
        usage.idle_threshold_percent, usage.idle_window
    );
    let Some((program, args)) = usage.idle_command.split_first() else { return };
    // What fills the placeholders must not read as an option of the program.
    if [&labels.job, &labels.user, &labels.node].iter().any(|v| v.starts_with('-')) {
        return tracing::error!(job = %labels.job, "idle_command not run: a value to fill in starts with '-'");
    }
    let fill =
        |a: &String| a.replace("{job}", &labels.job).replace("{user}", &labels.user).replace("{node}", &labels.node);
    let mut command = std::process::Command::new(fill(program));
    command.args(args.iter().map(fill));
    let program = program.clone();
    // On a thread of its own (a slow command must not hold up reports), in a process group of its
    // own, killed with its children after IDLE_COMMAND_TIMEOUT.
    std::thread::spawn(move || match crate::command::run(command, IDLE_COMMAND_TIMEOUT) {
        Ok(done) if done.status.success() => {}
        Ok(done) => tracing::error!(
            "idle_command {program} failed ({}): {}",
            done.status,
            String::from_utf8_lossy(&done.stderr).trim()
        ),
        Err(e) => tracing::error!("idle_command {program}: {e}"),
    });
}

/// How long an idle_command may run.
const IDLE_COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Jobs of this node missing from its report have ended there: drop their series.
fn forget_ended_jobs(service: &mut Service, node: &str, seen: &BTreeSet<String>) {
    let ended: Vec<String> = service
        .utilization
        .jobs
        .iter()
        .filter(|(job, w)| w.labels.node == node && !seen.contains(*job))
        .map(|(job, _)| job.clone())
        .collect();
    for job in ended {
        if let Some(w) = service.utilization.jobs.remove(&job) {
            let series = service.metrics.job_labels(&w.labels);
            service.metrics.job_gpu_utilization.remove(&series);
            service.metrics.job_gpu_memory.remove(&series);
            service.metrics.job_idle.remove(&series);
        }
        service.utilization.users.remove(&job);
    }
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
