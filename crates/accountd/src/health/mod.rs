//! GPU health from the agents' reports: a GPU that fell off the bus, has an uncorrectable ECC error,
//! reports a hardware XID (`[health] drain_xids`) or stays hotter than `max_temperature` for
//! `temperature_for` gets its node drained (`scontrol update ... state=drain`), and, for the
//! hardware faults (not heat), the jobs on it requeued. Other XIDs are a program's own errors, which any user can cause: logged and counted only.
//! Only an admin resumes the node. Each fault is acted on once, kept in the ledger (`gpu_faults`) so a
//! restart does not drain again a node resumed for it: a state fault (lost, ECC, heat) until a report
//! shows the GPU without it, an XID until `repeat_after` after its drain.

pub mod faults;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use gputokens::entry::{FAULT_CANCEL, FAULT_REQUEUE};
use gputokens::slurm::squeue;
use ledger::{Action, GpuFault};

use self::faults::{classify, cleared, gpu_key, Fault, XID_PREFIX};
use crate::error::AccountdResult;
use crate::metrics::{NodeLabels, XidLabels};
use crate::resources::Resources;
use crate::slurm::{job_id_arg, node_name_arg, Slurm};
use gputokens_node_report::AgentReport;
use gputokens_node_report::GpuSample;

/// What health keeps between reports: since when GPUs run hot, and which ignored XIDs were logged.
#[derive(Debug, Default)]
pub struct HealthState {
    pub hot: HotSince,
    /// (node, GPU, XID) of XIDs outside `drain_xids` already logged, so each is logged once.
    pub logged: std::collections::HashSet<(String, String, u64)>,
}

/// Since when each GPU (node, `gpu_key`) has been above `max_temperature`, by the agents' sample times.
#[derive(Debug, Default)]
pub struct HotSince(HashMap<(String, String), i64>);

impl HotSince {
    /// Notes one sample at `at` (unix seconds) that found the GPU `overheated` (see
    /// `health::faults::overheated`); returns how long it has been so, None when it is not. A sample
    /// that is not resets; a sample without a reading changes nothing.
    pub fn observe(&mut self, node: &str, gpu: &str, overheated: Option<bool>, at: i64) -> Option<Duration> {
        let key = (node.to_string(), gpu.to_string());
        match overheated {
            None => None,
            Some(false) => {
                self.0.remove(&key);
                None
            }
            Some(true) => {
                let since = *self.0.entry(key).or_insert(at);
                Some(Duration::from_secs(u64::try_from(at - since).unwrap_or(0)))
            }
        }
    }
}

/// One GPU's faults in a report.
struct Failing<'r> {
    gpu: &'r GpuSample,
    key: String,
    faults: Vec<Fault>,
}

/// Drains the node of every GPU in `report` with a fault not acted on yet, and requeues the jobs on
/// that GPU; returns the drain reasons.
pub fn check(res: &mut Resources, state: &mut HealthState, report: &AgentReport) -> AccountdResult<Vec<String>> {
    let health = res.config.health.clone();
    let node = report.node.as_str();
    let mut failing = Vec::new();
    for gpu in &report.sample.gpus {
        let key = gpu_key(gpu);
        let at = report.sample.time.timestamp();
        let hot = faults::overheated(gpu, health.max_temperature);
        let hot_for = state.hot.observe(node, &key, hot, at);
        let found = classify(gpu, &health, hot_for);
        for xid in found.ignored_xids {
            ignored_xid(res, state, node, gpu, &key, xid);
        }
        if !found.faults.is_empty() {
            failing.push(Failing { gpu, key, faults: found.faults });
        }
    }
    if !health.drain {
        return Ok(Vec::new());
    }
    let now = gputokens::time::now();
    let known = forget_cleared(res, report, now)?;
    let mut done = Vec::new();
    for f in failing {
        let new: Vec<&Fault> =
            f.faults.iter().filter(|fault| !known.contains(&(f.key.clone(), fault.cause()))).collect();
        if new.is_empty() {
            tracing::debug!("{node}: GPU {} ({}): already acted on: {:?}", f.gpu.index, f.key, f.faults);
            continue;
        }
        done.push(drain(res, report, &f, &new, now)?);
    }
    Ok(done)
}

/// The node's recorded faults that still hold, as (GPU, cause); drops those this report shows cleared
/// and XIDs whose `repeat_after` has passed.
fn forget_cleared(res: &mut Resources, report: &AgentReport, now: i64) -> AccountdResult<HashSet<(String, String)>> {
    let health = &res.config.health;
    let mut known = HashSet::new();
    for row in res.ledger.gpu_faults(&report.node)? {
        let expired = row.cause.starts_with(XID_PREFIX)
            && now.saturating_sub(row.acted_at) >= i64::try_from(health.repeat_after.as_secs()).unwrap_or(i64::MAX);
        let gone =
            report.sample.gpus.iter().any(|g| gpu_key(g) == row.gpu && cleared(g, &row.cause, health.max_temperature));
        if expired || gone {
            tracing::info!("{}: GPU {}: {} is over; it drains again if it comes back", row.node, row.gpu, row.cause);
            res.ledger.clear_gpu_fault(&row.node, &row.gpu, &row.cause)?;
        } else {
            known.insert((row.gpu, row.cause));
        }
    }
    Ok(known)
}

/// Drains the node for `new` faults of one GPU, records them, requeues the GPU's jobs.
fn drain(
    res: &mut Resources,
    report: &AgentReport,
    f: &Failing<'_>,
    new: &[&Fault],
    now: i64,
) -> AccountdResult<String> {
    // The name comes from the report: one plain node name, or nothing is run.
    let node = node_name_arg(&report.node).inspect_err(|e| tracing::error!("not draining: {e}"))?;
    let index = f.gpu.index;
    let what: Vec<String> = new.iter().map(|fault| fault.describe()).collect();
    let reason = format!("gputokens: GPU {index} {}", what.join("; "));
    tracing::error!("draining {node}: {reason} ({})", f.key);
    let slurm = Slurm::new(&res.config.slurm);
    slurm
        .run("scontrol", &["--", "update", &format!("nodename={node}"), "state=drain", &format!("reason={reason}")])?;
    for fault in new {
        let row = GpuFault { node: node.to_string(), gpu: f.key.clone(), cause: fault.cause(), acted_at: now };
        res.ledger.record_gpu_fault(&row)?;
    }
    audit(res, "drain", node, "", &reason)?;
    res.metrics.drains.get_or_create(&NodeLabels { node: node.to_string() }).inc();
    // Heat alone drains and requeues nothing: a throttled GPU still computes (slower), the jobs on
    // it end by themselves, and its occupant's own code can make it hot, so a requeue for heat
    // would be a refund any user could have (audit H2).
    if new.iter().all(|fault| matches!(fault, Fault::Hot { .. })) {
        tracing::warn!("{node}: GPU {index} is drained for heat; the jobs on it run on (heat requeues nothing)");
        return Ok(reason);
    }
    // Audited as fault actions, apart from preemptions: the run they end is refunded ([refunds]).
    // Each is recorded before scontrol runs, so a crash or a slow scontrol cannot lose the refund of
    // a run that was taken off a failing GPU.
    // A failed audit is logged and the job still taken off the GPU (the others too).
    let audited = |res: &mut Resources, action: &str, job: &str, user: &str| {
        if let Err(e) = audit(res, action, job, user, &reason) {
            tracing::error!("{action} of job {job} not recorded ({e}): its run will not be refunded automatically");
        }
    };
    for (job, user) in jobs_on_gpu(report, &slurm, index) {
        audited(res, FAULT_REQUEUE, &job, &user);
        if let Err(e) = slurm.run("scontrol", &["--", "requeue", &job]) {
            tracing::warn!("cannot requeue job {job} from failing GPU {index} of {node} ({e}): cancelling it");
            match slurm.run("scancel", &["--", &job]) {
                Ok(_) => audited(res, FAULT_CANCEL, &job, &user),
                Err(e) => tracing::error!("cannot requeue or cancel job {job} on failing GPU {index} of {node}: {e}"),
            }
        }
    }
    Ok(reason)
}

/// An XID outside `drain_xids`: counted every time, logged once per node, GPU and XID.
fn ignored_xid(res: &mut Resources, state: &mut HealthState, node: &str, gpu: &GpuSample, key: &str, xid: u64) {
    let labels = XidLabels { node: node.to_string(), xid: xid.to_string() };
    res.metrics.xids_ignored.get_or_create(&labels).inc();
    if state.logged.insert((node.to_string(), key.to_string(), xid)) {
        tracing::warn!(
            "{node}: GPU {} ({key}) reported XID {xid}, an application error (not in [health] drain_xids): not draining",
            gpu.index
        );
    }
}

/// Jobs whose processes run on GPU `index` (or on its MIG devices) or recorded as holding it (agent),
/// or that Slurm gave that GPU (squeue `IDX`, where Slurm's numbering is NVML's): only plain job
/// IDs, as they go to scontrol and scancel.
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
    let by_index = slurm_numbers_gpus_as_nvml(report);
    for j in queue
        .iter()
        .filter(|j| by_index && j.state == "RUNNING" && j.nodes == report.node && j.gpu_indices.contains(&index))
    {
        jobs.insert((j.job_id.clone(), j.user.clone()));
    }
    jobs.retain(|(job, _)| job_id_arg(job).inspect_err(|e| tracing::warn!("not requeued: {e}")).is_ok());
    jobs
}

/// Whether Slurm's GPU indices on the report's node are NVML's: not where a GPU is in MIG mode,
/// whose MIG devices Slurm numbers as GPUs of their own (and every GPU after them shifted).
fn slurm_numbers_gpus_as_nvml(report: &AgentReport) -> bool {
    report.sample.gpus.iter().all(|g| g.mig.is_empty())
}

fn audit(res: &mut Resources, action: &str, target: &str, user: &str, reason: &str) -> AccountdResult {
    res.ledger.record_action(&Action {
        at: gputokens::time::now(),
        action: action.into(),
        target: target.into(),
        user: user.into(),
        reason: reason.into(),
        dry_run: false,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens_node_report::{GpuSample, MigSample, NodeSample};

    /// A node with a GPU in MIG mode: Slurm numbers its MIG devices as GPUs, so squeue's indices
    /// name no NVML GPU there (a fault of GPU 1 must not requeue the job on Slurm's GPU 1, a slice
    /// of GPU 0); the agent's records and processes say whose jobs are on it.
    #[test]
    fn slurms_indices_are_nvmls_only_without_mig() {
        let mut report = AgentReport {
            node: "gpu01".into(),
            sample: NodeSample {
                time: chrono::Utc::now(),
                gpus: vec![GpuSample::empty(0), GpuSample::empty(1)],
                processes: vec![],
            },
            interval_secs: None,
        };
        assert!(slurm_numbers_gpus_as_nvml(&report));
        report.sample.gpus[0].mig = vec![MigSample {
            uuid: "MIG-a".into(),
            profile: Some("3g.20gb".into()),
            memory_used_bytes: None,
            memory_total_bytes: None,
            sm_utilization_percent: None,
            jobs: vec!["7".into()],
        }];
        assert!(!slurm_numbers_gpus_as_nvml(&report));
    }
}
