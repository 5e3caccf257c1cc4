//! GPU health from the agents' reports: a GPU with an uncorrectable ECC error, an XID error, one that
//! fell off the bus or runs too hot gets its node drained (`scontrol update ... state=drain`) and the
//! jobs on it requeued. Only an admin resumes the node; a GPU is acted on once per problem.

use std::collections::BTreeSet;

use gputokens::ledger::Action;
use gputokens::slurm::squeue;

use crate::agent::report::AgentReport;
use crate::agent::{GpuHealth, GpuSample};
use crate::error::CliResult;
use crate::handler::Service;
use crate::metrics::NodeLabels;
use crate::slurm::Slurm;

/// What is wrong with a GPU, if anything worth draining for.
pub fn problem(gpu: &GpuSample, max_temperature: u32) -> Option<String> {
    if gpu.health == GpuHealth::Lost {
        return Some("fell off the bus".into());
    }
    if let Some(n) = gpu.ecc_uncorrected.filter(|n| *n > 0) {
        return Some(format!("has {n} uncorrectable ECC errors"));
    }
    if let Some(xids) = gpu.xids.as_ref().filter(|x| !x.is_empty()) {
        let list: Vec<String> = xids.iter().map(u64::to_string).collect();
        return Some(format!("reported XID {}", list.join(",")));
    }
    match gpu.temperature_c {
        Some(t) if t > max_temperature => Some(format!("is at {t} °C, over {max_temperature} °C")),
        _ => None,
    }
}

/// GPUs of one node already acted on, and still failing.
#[derive(Debug, Default)]
pub struct Drained(BTreeSet<(String, u32)>);

/// Drains the node of every newly failing GPU in `report` and requeues the jobs on that GPU.
pub fn check(service: &mut Service, report: &AgentReport) -> CliResult<Vec<String>> {
    let health = service.config.health.clone();
    let node = &report.node;
    let failing: Vec<(u32, String)> =
        report.sample.gpus.iter().filter_map(|g| Some((g.index, problem(g, health.max_temperature)?))).collect();
    service.health.0.retain(|(n, i)| n != node || failing.iter().any(|(f, _)| f == i));
    if !health.drain {
        return Ok(Vec::new());
    }
    let slurm = Slurm::new(&service.config.slurm);
    let mut done = Vec::new();
    for (index, what) in failing {
        if !service.health.0.insert((node.clone(), index)) {
            continue;
        }
        let reason = format!("gputokens: GPU {index} {what}");
        tracing::error!("draining {node}: {reason}");
        slurm.run("scontrol", &["update", &format!("nodename={node}"), "state=drain", &format!("reason={reason}")])?;
        audit(service, "drain", node, "", &reason)?;
        service.metrics.drains.get_or_create(&NodeLabels { node: node.clone() }).inc();
        for (job, user) in jobs_on_gpu(report, &slurm, index) {
            let result = slurm.run("scontrol", &["requeue", &job]).or_else(|_| slurm.run("scancel", &[&job]));
            match result {
                Ok(_) => audit(service, "requeue", &job, &user, &reason)?,
                Err(e) => tracing::error!("cannot requeue job {job} from failing GPU {index} of {node}: {e}"),
            }
        }
        done.push(reason);
    }
    Ok(done)
}

/// Jobs whose processes run on GPU `index` or recorded as holding it (agent), or that Slurm gave that
/// GPU (squeue `IDX`).
fn jobs_on_gpu(report: &AgentReport, slurm: &Slurm, index: u32) -> BTreeSet<(String, String)> {
    let mut jobs: BTreeSet<(String, String)> = BTreeSet::new();
    let queue = slurm.squeue_json().ok().and_then(|j| squeue::queue(&j).ok()).unwrap_or_default();
    let user_of = |job: &str| queue.iter().find(|j| j.job_id == job).map(|j| j.user.clone()).unwrap_or_default();
    for p in report.sample.processes.iter().filter(|p| p.gpu_index == index) {
        if let Some(job) = &p.job_id {
            jobs.insert((job.clone(), user_of(job)));
        }
    }
    for gpu in report.sample.gpus.iter().filter(|g| g.index == index) {
        jobs.extend(gpu.jobs.iter().map(|job| (job.clone(), user_of(job))));
    }
    for j in queue.iter().filter(|j| j.state == "RUNNING" && j.nodes == report.node && j.gpu_indices.contains(&index)) {
        jobs.insert((j.job_id.clone(), j.user.clone()));
    }
    jobs
}

fn audit(service: &mut Service, action: &str, target: &str, user: &str, reason: &str) -> CliResult {
    service.ledger.record_action(&Action {
        at: gputokens::time::now(),
        action: action.into(),
        target: target.into(),
        user: user.into(),
        reason: reason.into(),
        dry_run: false,
    })?;
    Ok(())
}
