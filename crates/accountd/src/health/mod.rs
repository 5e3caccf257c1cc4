//! GPU health from the agents' reports: a GPU that fell off the bus, has an uncorrectable ECC error,
//! reports a hardware XID (`[health] drain_xids`) or stays hotter than `max_temperature` for
//! `temperature_for` gets its node drained (`scontrol update ... state=drain`), and, for the
//! hardware faults (not heat), the jobs on it requeued. Other XIDs are a program's own errors, which any user can cause: logged and counted only.
//! Only an admin resumes the node. Each fault is acted on once, kept in the ledger (`gpu_faults`) so a
//! restart does not drain again a node resumed for it: a state fault (lost, ECC, heat) until a report
//! shows the GPU without it, an XID until `repeat_after` after its drain.

pub mod faults;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use gputokens::entry::{FAULT_CANCEL, FAULT_REQUEUE};
use ledger::{Action, GpuFault};

use self::faults::{classify, cleared, gpu_key, Fault, XID_PREFIX};
use crate::error::AccountdResult;
use crate::metrics::{NodeLabels, XidLabels};
use crate::resources::Resources;
use crate::slurm::{node_name_arg, Slurm};
use gputokens_node_report::AgentReport;
use gputokens_node_report::GpuSample;

/// What health keeps between reports: since when GPUs run hot, which ignored XIDs were logged, and
/// when each node was last drained. Only GPUs in a node's latest report are kept.
#[derive(Debug, Default)]
pub struct HealthState {
    pub hot: HotSince,
    /// (node, GPU, XID) of XIDs outside `drain_xids` already logged, so each is logged once.
    pub logged: HashSet<(String, String, u64)>,
    /// When each node was last drained (accountd's clock): a node's further faults wait a while.
    drained_at: HashMap<String, i64>,
}

impl HealthState {
    /// Forgets what it kept of `node`'s GPUs that are not in its latest report.
    fn keep_only(&mut self, node: &str, keys: &HashSet<String>) {
        self.hot.0.retain(|(n, gpu), _| n != node || keys.contains(gpu));
        self.logged.retain(|(n, gpu, _)| n != node || keys.contains(gpu));
    }
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

/// A node's further faults wait this long after it was drained: one drain, one squeue and its
/// requeues at most this often per node, however many faults a node's reports claim.
const DRAINS_APART_SECS: i64 = 60;
/// XIDs above this get one `xids_ignored` series between them.
const MAX_LISTED_XID: u64 = 1000;
/// (node, GPU, XID) remembered as logged; past this the memory starts anew (a line each, no memory).
const LOGGED_XIDS: usize = 4096;
/// A node's recorded faults kept for GPUs its report does not show; past this, they are forgotten.
const FAULTS_KEPT_PER_NODE: usize = 64;

/// One GPU's faults in a report.
struct Failing<'r> {
    gpu: &'r GpuSample,
    key: String,
    faults: Vec<Fault>,
}

/// A drain decided under the reports' lock (its faults recorded there), carried out after it
/// ([`carry_out`]): no Slurm command runs while other nodes' reports wait.
#[derive(Debug, Clone, PartialEq)]
pub struct Drain {
    pub node: String,
    pub reason: String,
    /// The faults recorded for it: forgotten again if the drain fails, so the next report tries again.
    pub faults: Vec<GpuFault>,
    /// The GPUs whose jobs are taken off (hardware faults; heat takes none off), with the jobs the
    /// report shows on each.
    pub requeue: BTreeMap<u32, BTreeSet<String>>,
    /// Whether Slurm's GPU indices on the node are NVML's (squeue's IDX then names jobs too).
    pub slurm_indices_are_nvmls: bool,
}

/// Notes the health of every GPU in `report`; the drain for faults not acted on yet, if any (at
/// most one per node and [`DRAINS_APART_SECS`]), its faults and its audit entry recorded.
pub fn check(res: &mut Resources, state: &mut HealthState, report: &AgentReport) -> AccountdResult<Option<Drain>> {
    let health = res.config.health.clone();
    let node = report.node.as_str();
    let at = report.sample.time.timestamp();
    let keys: HashSet<String> = report.sample.gpus.iter().map(gpu_key).collect();
    state.keep_only(node, &keys);
    let mut failing = Vec::new();
    for gpu in &report.sample.gpus {
        let key = gpu_key(gpu);
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
        return Ok(None);
    }
    let now = gputokens::time::now();
    let known = forget_cleared(res, report, &keys, now)?;
    let mut new: Vec<(&Failing<'_>, Vec<&Fault>)> = Vec::new();
    for f in &failing {
        let not_yet: Vec<&Fault> =
            f.faults.iter().filter(|fault| !known.contains(&(f.key.clone(), fault.cause()))).collect();
        match not_yet.is_empty() {
            true => tracing::debug!("{node}: GPU {} ({}): already acted on: {:?}", f.gpu.index, f.key, f.faults),
            false => new.push((f, not_yet)),
        }
    }
    if new.is_empty() {
        return Ok(None);
    }
    if state.drained_at.get(node).is_some_and(|&last| now - last < DRAINS_APART_SECS) {
        tracing::debug!("{node}: faults of {} GPUs wait: the node was drained less than a minute ago", new.len());
        return Ok(None);
    }
    state.drained_at.insert(node.to_string(), now);
    Ok(Some(decide(res, report, &new, now)?))
}

/// The node's recorded faults that still hold, as (GPU, cause); drops those this report shows
/// cleared, XIDs whose `repeat_after` has passed, and, past [`FAULTS_KEPT_PER_NODE`], those of GPUs
/// the report does not show.
fn forget_cleared(
    res: &mut Resources,
    report: &AgentReport,
    keys: &HashSet<String>,
    now: i64,
) -> AccountdResult<HashSet<(String, String)>> {
    let health = &res.config.health;
    let rows = res.ledger.gpu_faults(&report.node)?;
    let too_many = rows.len() > FAULTS_KEPT_PER_NODE;
    let mut known = HashSet::new();
    for row in rows {
        let expired = row.cause.starts_with(XID_PREFIX)
            && now.saturating_sub(row.acted_at) >= i64::try_from(health.repeat_after.as_secs()).unwrap_or(i64::MAX);
        let gone =
            report.sample.gpus.iter().any(|g| gpu_key(g) == row.gpu && cleared(g, &row.cause, health.max_temperature));
        let unseen = too_many && !keys.contains(&row.gpu);
        if expired || gone || unseen {
            tracing::info!("{}: GPU {}: {} is over; it drains again if it comes back", row.node, row.gpu, row.cause);
            res.ledger.clear_gpu_fault(&row.node, &row.gpu, &row.cause)?;
        } else {
            known.insert((row.gpu, row.cause));
        }
    }
    Ok(known)
}

/// The drain for `new` faults of the report's GPUs, recorded (faults and audit) before it is run.
fn decide(
    res: &mut Resources,
    report: &AgentReport,
    new: &[(&Failing<'_>, Vec<&Fault>)],
    now: i64,
) -> AccountdResult<Drain> {
    // The name comes from the report: one plain node name, or nothing is run.
    let node = node_name_arg(&report.node).inspect_err(|e| tracing::error!("not draining: {e}"))?;
    let what: Vec<String> = new
        .iter()
        .map(|(f, faults)| {
            let said: Vec<String> = faults.iter().map(|fault| fault.describe()).collect();
            format!("GPU {} {}", f.gpu.index, said.join("; "))
        })
        .collect();
    let reason = format!("gputokens: {}", what.join("; "));
    let mut faults = Vec::new();
    let mut requeue = BTreeMap::new();
    for (f, new_faults) in new {
        for fault in new_faults {
            faults.push(GpuFault { node: node.to_string(), gpu: f.key.clone(), cause: fault.cause(), acted_at: now });
        }
        // Heat alone drains and requeues nothing: a throttled GPU still computes (slower), the jobs on
        // it end by themselves, and its occupant's own code can make it hot, so a requeue for heat
        // would be a refund any user could have (audit H2).
        if new_faults.iter().all(|fault| matches!(fault, Fault::Hot { .. })) {
            tracing::warn!(
                "{node}: GPU {} is drained for heat; the jobs on it run on (heat requeues nothing)",
                f.gpu.index
            );
            continue;
        }
        requeue.insert(f.gpu.index, jobs_in_report(report, f.gpu.index));
    }
    // All recorded, or none: a fault recorded as acted on must be carried out (the caller does).
    let recorded = (|| {
        for f in &faults {
            res.ledger.record_gpu_fault(f)?;
        }
        audit(res, "drain", node, "", &reason)
    })();
    if let Err(e) = recorded {
        for f in &faults {
            let _ = res.ledger.clear_gpu_fault(&f.node, &f.gpu, &f.cause);
        }
        return Err(e);
    }
    res.metrics.drains.get_or_create(&NodeLabels { node: node.to_string() }).inc();
    Ok(Drain {
        node: node.to_string(),
        reason,
        faults,
        requeue,
        slurm_indices_are_nvmls: slurm_numbers_gpus_as_nvml(report),
    })
}

/// What carrying out a drain writes to the ledger, under the reports' lock taken for each write.
pub trait DrainRecord {
    /// An action to audit (fault requeues and cancels: the runs they end are refunded).
    fn audit(&mut self, action: Action);
    /// The drain failed: its faults are forgotten, so the next report tries again.
    fn forget(&mut self, faults: &[GpuFault]);
}

/// Drains the node and takes the jobs off its failing GPUs: one `scontrol update`, one squeue for
/// all of them, a requeue (else a cancel) per job, each audited before it is run.
pub fn carry_out(drain: &Drain, slurm: &Slurm, record: &mut dyn DrainRecord) {
    let node = &drain.node;
    tracing::error!("draining {node}: {}", drain.reason);
    let state = ["--", "update", &format!("nodename={node}"), "state=drain", &format!("reason={}", drain.reason)];
    if let Err(e) = slurm.run("scontrol", &state) {
        tracing::error!("cannot drain {node} ({e}): it is tried again at its next report");
        return record.forget(&drain.faults);
    }
    if drain.requeue.is_empty() {
        return;
    }
    // Keyed as the ledger keys jobs (the report's are): the audit names the job its refund looks for.
    let mut read = crate::slurm::QueueOnce::new(slurm);
    let queue = read.jobs().map(<[_]>::to_vec).unwrap_or_default();
    let user_of = |job: &str| queue.iter().find(|j| j.job_id == job).map(|j| j.user.clone()).unwrap_or_default();
    let mut jobs: BTreeSet<(String, String)> = BTreeSet::new();
    for (index, in_report) in &drain.requeue {
        jobs.extend(in_report.iter().map(|job| (job.clone(), user_of(job))));
        // Jobs Slurm gave that GPU (squeue `IDX`, where Slurm's numbering is NVML's).
        let by_index = queue.iter().filter(|j| {
            drain.slurm_indices_are_nvmls && j.state == "RUNNING" && &j.nodes == node && j.gpu_indices.contains(index)
        });
        jobs.extend(by_index.map(|j| (j.job_id.clone(), j.user.clone())));
    }
    jobs.retain(|(job, _)| slurm.job_arg(job).inspect_err(|e| tracing::warn!("not requeued: {e}")).is_ok());
    let action = |action: &str, job: &str, user: &str| Action {
        at: gputokens::time::now(),
        action: action.into(),
        target: job.into(),
        user: user.into(),
        reason: drain.reason.clone(),
        dry_run: false,
    };
    // Audited as fault actions, apart from preemptions: the run they end is refunded ([refunds]).
    // Each is recorded before scontrol runs, so a crash or a slow scontrol cannot lose the refund of
    // a run that was taken off a failing GPU.
    for (job, user) in jobs {
        let Ok(id) = slurm.job_arg(&job) else { continue };
        record.audit(action(FAULT_REQUEUE, &job, &user));
        if let Err(e) = slurm.run("scontrol", &["--", "requeue", id]) {
            tracing::warn!("cannot requeue job {job} from a failing GPU of {node} ({e}): cancelling it");
            match slurm.run("scancel", &["--", id]) {
                Ok(_) => record.audit(action(FAULT_CANCEL, &job, &user)),
                Err(e) => tracing::error!("cannot requeue or cancel job {job} on a failing GPU of {node}: {e}"),
            }
        }
    }
}

/// An XID outside `drain_xids`: counted every time, logged once per node, GPU and XID.
fn ignored_xid(res: &mut Resources, state: &mut HealthState, node: &str, gpu: &GpuSample, key: &str, xid: u64) {
    // XIDs are numbers NVIDIA lists (under 200 today): any other is one series, not one each.
    let shown_xid = if xid <= MAX_LISTED_XID { xid.to_string() } else { "other".to_string() };
    let labels = XidLabels { node: node.to_string(), xid: shown_xid };
    res.metrics.xids_ignored.get_or_create(&labels).inc();
    if state.logged.len() >= LOGGED_XIDS {
        state.logged.clear();
    }
    if state.logged.insert((node.to_string(), key.to_string(), xid)) {
        tracing::warn!(
            "{node}: GPU {} ({key}) reported XID {xid}, an application error (not in [health] drain_xids): not draining",
            gpu.index
        );
    }
}

/// Jobs the report shows on GPU `index`: its processes' (MIG devices' included) and those recorded
/// as holding it (agent).
fn jobs_in_report(report: &AgentReport, index: u32) -> BTreeSet<String> {
    let processes = report.sample.processes.iter().filter(|p| p.gpu_index == index).filter_map(|p| p.job_id.clone());
    let holders = report.sample.gpus.iter().filter(|g| g.index == index).flat_map(|g| g.jobs.iter().cloned());
    processes.chain(holders).collect()
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

    fn resources(dir: &std::path::Path) -> Resources {
        let text = format!("[slurm]\nbin_dir = \"{}/no-slurm\"\n[health]\ndrain = true\n", dir.display());
        let config = gputokens::Config::parse(&text, std::path::Path::new("test.toml")).unwrap();
        let ledger = ledger::Ledger::open(&dir.join("ledger.sqlite"), (&config).into()).unwrap();
        Resources::new(config, ledger)
    }

    /// The audit's N4: a node's root posts reports whose GPUs carry fresh UUIDs with XID 79 (and
    /// XIDs of every number). One drain per node a minute at most, decided without a Slurm command;
    /// what health keeps stays bounded.
    #[test]
    fn fresh_failing_gpus_in_every_report_drain_once_a_minute_and_keep_bounded_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut res = resources(dir.path());
        let mut state = HealthState::default();
        let mut drains = 0;
        for i in 0..500u64 {
            let gpus = (0..4)
                .map(|g| GpuSample {
                    uuid: Some(format!("GPU-{i}-{g}")),
                    xids: Some(vec![79, 13, 1_000_000 + i]),
                    temperature_c: Some(99),
                    ..GpuSample::empty(g)
                })
                .collect();
            let time = chrono::DateTime::from_timestamp(1_800_000_000 + i as i64, 0).unwrap();
            let report = AgentReport {
                node: "gpu01".into(),
                sample: NodeSample { time, gpus, processes: vec![] },
                interval_secs: None,
            };
            if let Some(drain) = check(&mut res, &mut state, &report).unwrap() {
                drains += 1;
                assert_eq!(drain.requeue.len(), 4, "{drain:?}");
            }
        }
        assert_eq!(drains, 1, "the test runs within a minute of accountd's clock");
        assert!(state.hot.0.len() <= 4 && state.logged.len() <= 8, "{} {}", state.hot.0.len(), state.logged.len());
        let xid_series = res.metrics.encode().lines().filter(|l| l.contains("xids_ignored")).count();
        assert!(xid_series <= 6, "{xid_series} series");
        assert!(res.ledger.gpu_faults("gpu01").unwrap().len() <= 4 * 2);
    }

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
