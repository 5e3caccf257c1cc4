//! What accountd does with an agent's report once the report gate let it in: the GPUs' metrics,
//! their health (drains, `crate::health`) and the jobs' utilization (`crate::utilization`). What the
//! two keep between reports is the HTTP listener's own ([`ReportState`]).

use super::report_gate::Authorized;
use crate::error::AccountdResult;
use crate::health::{Drain, HealthState};
use crate::metrics::{GpuLabels, JobLabels, Metrics, NodeLabels};
use crate::resources::Resources;
use crate::slurm::Slurm;
use crate::utilization::energy::{EnergyTracker, Within, MAX_GAP_INTERVALS};
use crate::utilization::{tracker, JobUtilization, Tracker};
use gputokens_node_report::job_use::job_use;
use gputokens_node_report::AgentReport;
use gputokens_node_report::GpuHealth;
use std::collections::HashMap;

/// What the agents' reports leave behind for the next one.
#[derive(Debug, Default)]
pub struct ReportState {
    pub utilization: Tracker,
    pub health: HealthState,
    pub energy: EnergyTracker,
    /// Each node's per-GPU series, so that a GPU's series go when it leaves the node's reports
    /// (or shows another UUID at its index).
    pub gpu_series: HashMap<String, Vec<GpuLabels>>,
}

/// Per job, as the agent computes it for its own metrics (`gputokens_node_report::job_use`): the job's own use of
/// its GPUs (a shared GPU's by its own processes), or unmeasured.
pub fn job_utilization(report: &AgentReport) -> Vec<JobUtilization> {
    job_use(&report.sample)
        .into_iter()
        .map(|(job, used)| JobUtilization { job, percent: used.percent, memory_bytes: used.memory_bytes })
        .collect()
}

/// The report, and what Slurm said of its jobs, with each job named by its ledger key
/// ([`Slurm::job_key`]): the node names its jobs as its cluster does, the ledger as the site does.
pub fn keyed(slurm: &Slurm, mut report: AgentReport, mut says: Authorized) -> (AgentReport, Authorized) {
    let key = |id: &mut String| *id = slurm.job_key(id);
    for gpu in &mut report.sample.gpus {
        gpu.jobs.iter_mut().for_each(key);
        gpu.mig.iter_mut().flat_map(|mig| mig.jobs.iter_mut()).for_each(key);
    }
    report.sample.processes.iter_mut().filter_map(|p| p.job_id.as_mut()).for_each(key);
    says.jobs = std::mem::take(&mut says.jobs).into_iter().map(|(id, job)| (slurm.job_key(&id), job)).collect();
    (report, says)
}

/// Applies one agent report that passed the report gate, received at `received` (accountd's clock):
/// the drain to carry out once the reports' lock is let go (`health::carry_out`), and a summary for
/// the log. A drain decided is returned even when a later step fails: its faults are recorded as
/// acted on, so it must be carried out (or forgotten), never dropped.
pub fn ingest(
    res: &mut Resources,
    state: &mut ReportState,
    report: &AgentReport,
    slurm_says: &Authorized,
    received: i64,
) -> (Option<Drain>, AccountdResult<String>) {
    record_gpus(&res.metrics, &mut state.gpu_series, report, res.config.http.per_user_metrics);
    state.utilization.note_users(slurm_says.jobs.iter().map(|(job, j)| (job.as_str(), j.user.as_str())));
    // accountd's clock, not the sample's: a node's skewed clock must not hide its silence.
    res.metrics.agent_last_report.get_or_create(&NodeLabels { node: report.node.clone() }).set(gputokens::time::now());
    let drain = match crate::health::check(res, &mut state.health, report) {
        Ok(drain) => drain,
        Err(e) => return (None, Err(e)),
    };
    let rest = (|| {
        let jobs = job_utilization(report);
        let (count, idle) =
            tracker::apply(res, &mut state.utilization, &report.node, jobs, report.sample.time.timestamp())?;
        record_energy(res, state, report, slurm_says, received)?;
        Ok(format!(
            "{}: {} GPUs, {count} jobs, {idle} newly idle, {}",
            report.node,
            report.sample.gpus.len(),
            if drain.is_some() { "drained" } else { "no drain" }
        ))
    })();
    (drain, rest)
}

/// The longest step between two of a node's reports that energy is believed over: a few of the
/// longer of accountd's `[agent] interval` and the one the agent says it reports at (an agent's own
/// config may differ), the agent's taken at most up to an hour.
fn max_energy_gap(own_interval: &str, agents_secs: Option<u64>) -> i64 {
    const MOST_BELIEVED_SECS: u64 = 3600;
    let interval = own_interval_secs(own_interval).max(agents_secs.unwrap_or(0).min(MOST_BELIEVED_SECS)).max(1);
    (interval * u64::from(MAX_GAP_INTERVALS)) as i64
}

/// accountd's own `[agent] interval`, in seconds.
fn own_interval_secs(own_interval: &str) -> u64 {
    humantime::parse_duration(own_interval).map_or(30, |d| d.as_secs()).max(1)
}

/// Each job's GPU energy since the node's previous report: in the ledger under its run, and on
/// /metrics (per job with per-user metrics, and the site's sum of what jobs used).
fn record_energy(
    res: &mut Resources,
    state: &mut ReportState,
    report: &AgentReport,
    slurm_says: &Authorized,
    received: i64,
) -> AccountdResult {
    let within = Within {
        max_gap: max_energy_gap(&res.config.agent.interval, report.interval_secs),
        slack: own_interval_secs(&res.config.agent.interval) as i64,
        received,
    };
    let at = report.sample.time.timestamp();
    let counted = counted_elsewhere(res, state, report, within)?;
    let job_gpus = |job: &str| slurm_says.job_gpus(job);
    let energy = state.energy.apply_received(&report.node, &report.sample, within, &job_gpus);
    if let Some(counted) = counted {
        counted.advance(res, at)?;
    }
    for used in energy {
        res.ledger.record_energy(&used.job, used.since, &report.node, at, used.joules)?;
        res.metrics.jobs_gpu_energy.inc_by(used.joules as f64);
        let labels = JobLabels {
            job: used.job.clone(),
            user: state.utilization.user(&used.job).to_string(),
            node: report.node.clone(),
        };
        if let Some(series) = res.metrics.job_labels(&labels) {
            res.metrics.job_gpu_energy.get_or_create(&series).inc_by(used.joules as f64);
        }
    }
    Ok(())
}

/// How far a node's energy was counted, by whichever accountd of a pair took its reports
/// (`energy_counted_through:NODE`, the node's sample time).
struct CountedThrough {
    key: String,
    through: Option<i64>,
}

impl CountedThrough {
    /// Moves the mark on to `at`, the report just counted from.
    fn advance(self, res: &mut Resources, at: i64) -> AccountdResult {
        if self.through.is_none_or(|through| at > through) {
            res.ledger.set_meta(&self.key, &at.to_string())?;
        }
        Ok(())
    }
}

/// Where the node's reports went to the other accountd of a pair for a while (an agent fails
/// over and back), forgets this one's older counters: the steps the other counted must not be
/// counted again from them. Only a ledger a pair can share (MariaDB) keeps the mark, and only for
/// a report with energy counters whose sample time is not ahead of accountd's clock by more than a
/// step (a node's clock set far ahead must not stop its energy being counted).
fn counted_elsewhere(
    res: &Resources,
    state: &mut ReportState,
    report: &AgentReport,
    within: Within,
) -> AccountdResult<Option<CountedThrough>> {
    let at = report.sample.time.timestamp();
    let has_energy = report.sample.gpus.iter().any(|gpu| gpu.energy_mj.is_some());
    if res.config.ledger.url.is_none() || !has_energy || at > within.received.saturating_add(within.max_gap) {
        return Ok(None);
    }
    let key = crate::cycles::charge::cluster_meta(res, &format!("energy_counted_through:{}", report.node));
    let believable = |through: &i64| *through <= within.received.saturating_add(within.max_gap);
    let through = res.ledger.meta(&key)?.and_then(|v| v.parse::<i64>().ok()).filter(believable);
    if let (Some(through), Some(ours)) = (through, state.energy.newest(&report.node)) {
        if through > ours {
            state.energy.forget_counters(&report.node);
        }
    }
    Ok(Some(CountedThrough { key, through }))
}

/// Each GPU's series. Its use (utilization, memory, power, energy) only with per-user metrics: with
/// the job's GPU indices (`scontrol show job -d`) it is one join away from each user's use.
fn record_gpus(metrics: &Metrics, kept: &mut HashMap<String, Vec<GpuLabels>>, report: &AgentReport, per_user: bool) {
    let now: Vec<GpuLabels> = report
        .sample
        .gpus
        .iter()
        .map(|gpu| GpuLabels {
            node: report.node.clone(),
            gpu: gpu.index.to_string(),
            uuid: gpu.uuid.clone().unwrap_or_default(),
        })
        .collect();
    for gone in kept.get(&report.node).into_iter().flatten().filter(|l| !now.contains(l)) {
        metrics.remove_gpu(gone);
    }
    kept.insert(report.node.clone(), now.clone());
    for (gpu, labels) in report.sample.gpus.iter().zip(now) {
        let set = |family: &prometheus_client::metrics::family::Family<GpuLabels, _>, value: Option<f64>| {
            if let Some(v) = value {
                let gauge: &prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64> =
                    &family.get_or_create(&labels);
                gauge.set(v);
            }
        };
        set(&metrics.gpu_temperature, gpu.temperature_c.map(f64::from));
        if per_user {
            set(&metrics.gpu_utilization, gpu.utilization_percent.map(f64::from));
            set(&metrics.gpu_memory_used, gpu.memory_used_bytes.map(|b| b as f64));
            set(&metrics.gpu_power, gpu.power_w);
            set(&metrics.gpu_energy, gpu.energy_mj.map(|mj| mj as f64 / 1000.0));
        }
        let healthy = matches!(gpu.health, GpuHealth::Ok) && gpu.ecc_uncorrected.unwrap_or(0) == 0;
        metrics.gpu_healthy.get_or_create(&labels).set(healthy as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens_node_report::{GpuSample, NodeSample, ProcessSample};

    #[test]
    fn energy_is_believed_over_a_few_of_the_longer_of_the_two_intervals() {
        assert_eq!(max_energy_gap("30s", None), 90, "an agent before 0.2.1: accountd's own");
        assert_eq!(max_energy_gap("30s", Some(120)), 360, "an agent told to report every 2 minutes");
        assert_eq!(max_energy_gap("2m", Some(10)), 360);
        assert_eq!(max_energy_gap("30s", Some(u64::MAX)), 3 * 3600, "an agent's word only up to an hour");
    }

    fn resources(dir: &std::path::Path) -> Resources {
        let text = format!(
            "[slurm]\nbin_dir = \"{}/no-slurm\"\n[usage]\nidle_threshold_percent = 5\nidle_window = \"20s\"\n\
             charge_basis = \"measured\"\nmeasured_min_fraction = 0.25\n[http]\nper_user_metrics = true\n",
            dir.display()
        );
        let config = gputokens::Config::parse(&text, std::path::Path::new("test.toml")).unwrap();
        let ledger = ledger::Ledger::open(&dir.join("ledger.sqlite"), (&config).into()).unwrap();
        Resources::new(config, ledger)
    }

    fn process(pid: u32, job: Option<&str>, sm: u32) -> ProcessSample {
        ProcessSample {
            pid,
            gpu_index: 0,
            used_memory_bytes: Some(u64::from(pid) << 20),
            sm_utilization_percent: Some(sm),
            job_id: job.map(str::to_owned),
            mig_uuid: None,
        }
    }

    /// One GPU that jobs 4242 (alice's, busy), 4243 (bob's, idle) and 4244 (out of sight) share, the
    /// GPU itself at 100 %, and a process of bob's claiming 4242 (the agent gave it no job).
    fn shared_gpu(at: i64) -> AgentReport {
        let gpu = GpuSample {
            uuid: Some("GPU-h100".into()),
            utilization_percent: Some(100),
            jobs: vec!["4242".into(), "4243".into(), "4244".into()],
            ..GpuSample::empty(0)
        };
        let processes = vec![process(1, Some("4242"), 99), process(2, Some("4243"), 0), process(3, None, 0)];
        let time = chrono::DateTime::from_timestamp(at, 0).unwrap();
        AgentReport {
            node: "gpu1".into(),
            sample: NodeSample { time, gpus: vec![gpu], processes },
            interval_secs: None,
        }
    }

    /// A node of 8 GPUs whose jobs' own counts Slurm does not give.
    fn eight_gpus() -> Authorized {
        Authorized { node_gpus: 8, jobs: Default::default() }
    }

    fn job_metric(res: &Resources, name: &str, job: &str) -> Option<String> {
        let prefix = format!("gputokens_{name}{{job=\"{job}\",user=\"unknown\",node=\"gpu1\"}} ");
        res.metrics.encode().lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
    }

    /// The audit's N4: a node whose GPUs show a fresh UUID in every report leaves one set of
    /// series, and a GPU gone from its reports leaves none.
    #[test]
    fn a_gpus_series_go_when_it_leaves_its_nodes_reports() {
        let dir = tempfile::tempdir().unwrap();
        let mut res = resources(dir.path());
        let mut state = ReportState::default();
        let series = |res: &Resources| res.metrics.encode().lines().filter(|l| l.starts_with("gputokens_gpu_")).count();
        for i in 0..300 {
            let mut report = shared_gpu(1_800_000_000 + i);
            report.sample.gpus[0].uuid = Some(format!("GPU-fresh-{i}"));
            report.sample.gpus.push(GpuSample { uuid: Some(format!("GPU-other-{i}")), ..GpuSample::empty(1) });
            ingest(&mut res, &mut state, &report, &eight_gpus(), report.sample.time.timestamp()).1.unwrap();
        }
        let text = res.metrics.encode();
        assert!(text.contains("uuid=\"GPU-fresh-299\"") && !text.contains("uuid=\"GPU-fresh-298\""), "{text}");
        let two_gpus = series(&res);
        let mut report = shared_gpu(1_800_001_000);
        report.sample.gpus[0].uuid = Some("GPU-fresh-299".into());
        ingest(&mut res, &mut state, &report, &eight_gpus(), report.sample.time.timestamp()).1.unwrap();
        assert!(!res.metrics.encode().contains("GPU-other"), "GPU 1 left the node's reports");
        assert!(series(&res) < two_gpus && series(&res) > 0);
    }

    /// The audit's N8: without per-user metrics a GPU's use is not public (joined with a job's GPU
    /// indices it is that user's use); its temperature and health are.
    #[test]
    fn a_gpus_use_is_public_only_with_per_user_metrics() {
        let dir = tempfile::tempdir().unwrap();
        let mut res = resources(dir.path());
        res.config.http.per_user_metrics = false;
        let mut state = ReportState::default();
        let mut report = shared_gpu(1_800_000_000);
        report.sample.gpus[0].temperature_c = Some(60);
        report.sample.gpus[0].power_w = Some(250.0);
        ingest(&mut res, &mut state, &report, &eight_gpus(), report.sample.time.timestamp()).1.unwrap();
        let text = res.metrics.encode();
        for hidden in ["gputokens_gpu_utilization_percent{", "gputokens_gpu_power_watts{"] {
            assert!(!text.lines().any(|l| l.starts_with(hidden)), "{hidden} in {text}");
        }
        assert!(text.contains("gputokens_gpu_temperature_celsius{"), "{text}");
        res.config.http.per_user_metrics = true;
        ingest(&mut res, &mut state, &shared_gpu(1_800_000_010), &eight_gpus(), 1_800_000_010).1.unwrap();
        assert!(res.metrics.encode().contains("gputokens_gpu_utilization_percent{"));
    }

    /// Done-when 1 of issue 37 at accountd's end: side by side on one GPU, the busy job reads busy,
    /// the idle one idle and is flagged after idle_window, the unseen one is neither; under measured
    /// basis each pays for its own use; bob's claimant moves neither.
    #[test]
    fn jobs_sharing_a_gpu_are_measured_flagged_and_charged_by_their_own_use() {
        let dir = tempfile::tempdir().unwrap();
        let mut res = resources(dir.path());
        let mut state = ReportState::default();
        let start = 1_800_000_000;
        for i in 0..4 {
            ingest(&mut res, &mut state, &shared_gpu(start + 10 * i), &eight_gpus(), start + 10 * i).1.unwrap();
        }
        assert_eq!(job_metric(&res, "job_gpu_utilization_percent", "4242").as_deref(), Some("99.0"));
        assert_eq!(job_metric(&res, "job_gpu_utilization_percent", "4243").as_deref(), Some("0.0"));
        assert_eq!(job_metric(&res, "job_gpu_utilization_percent", "4244"), None, "unmeasured: no figure");
        assert_eq!(job_metric(&res, "job_gpu_measured", "4244").as_deref(), Some("0"));
        assert_eq!(job_metric(&res, "job_gpu_measured", "4243").as_deref(), Some("1"));
        assert_eq!(job_metric(&res, "job_gpu_memory_bytes", "4242").as_deref(), Some("1048576.0"), "not bob's");
        for (job, idle) in [("4242", "0"), ("4243", "1"), ("4244", "0")] {
            assert_eq!(job_metric(&res, "job_idle", job).as_deref(), Some(idle), "job {job}");
        }
        assert!(res.metrics.encode().contains("gputokens_idle_jobs{node=\"gpu1\"} 1"));
        // The idle job's samples are idle from the first, once they lasted the window (20 s).
        assert_eq!(res.ledger.idle_share("4243").unwrap(), Some((4, 4)));
        assert_eq!(res.ledger.idle_share("4242").unwrap(), Some((0, 4)));
        assert_eq!(res.ledger.idle_share("4244").unwrap(), Some((0, 4)), "never counted idle");

        // Measured basis, four samples at the agents' interval (10 s here) over a 40 s run.
        let pays = |job: &str| {
            let (samples, sum) = res.ledger.utilization_samples(job).unwrap().unwrap();
            gputokens::pricing::measured_fraction(samples, sum, 40, 10, 1, 0.25)
        };
        assert_eq!(pays("4242"), 0.99, "its own 99 %");
        assert_eq!(pays("4243"), 0.25, "the minimum, not its neighbour's 100 %");
        assert_eq!(pays("4244"), 1.0, "unmeasured: its allocation");
    }

    /// The shared GPU's energy counter rises 3 kJ a report: alice's busy job (99 %) gets most of it,
    /// bob's idle one nothing, 4244 (out of sight) the 1 % the GPU's 100 % leaves over, bob's
    /// claimant (0 %) nothing. In the ledger per run, and on /metrics.
    #[test]
    fn a_shared_gpus_energy_goes_to_its_jobs_in_the_ledger_and_on_metrics() {
        let dir = tempfile::tempdir().unwrap();
        let mut res = resources(dir.path());
        let mut state = ReportState::default();
        let start = 1_800_000_000;
        for i in 0..4 {
            let mut report = shared_gpu(start + 10 * i);
            report.sample.gpus[0].energy_mj = Some(5_000_000 + 3_000_000 * i as u64);
            ingest(&mut res, &mut state, &report, &eight_gpus(), report.sample.time.timestamp()).1.unwrap();
        }
        for (job, joules) in [("4242", Some(8910)), ("4243", None), ("4244", Some(90))] {
            let runs = res.ledger.job_energy(job).unwrap();
            let got: Vec<(i64, &str, u64)> = runs.iter().map(|r| (r.since, r.node.as_str(), r.joules)).collect();
            let want: Vec<(i64, &str, u64)> = joules.map(|j| (start, "gpu1", j)).into_iter().collect();
            assert_eq!(got, want, "job {job}");
            let metric = job_metric(&res, "job_gpu_energy_joules_total", job);
            assert_eq!(metric, joules.map(|j| format!("{j}.0")), "job {job}");
        }
        assert!(res.metrics.encode().contains("gputokens_jobs_gpu_energy_joules_total 9000.0"));

        // 4244 gone: alice's job and bob's idle one. Each report is another run's while the old
        // state is forgotten (an accountd restart).
        let mut state = ReportState::default();
        for i in 0..3 {
            let mut report = shared_gpu(start + 100 + 10 * i);
            report.sample.gpus[0].jobs.retain(|j| j != "4244");
            report.sample.gpus[0].energy_mj = Some(3_000_000 * i as u64);
            ingest(&mut res, &mut state, &report, &eight_gpus(), report.sample.time.timestamp()).1.unwrap();
        }
        let second_run =
            |job: &str| res.ledger.job_energy(job).unwrap().iter().find(|r| r.since == start + 100).map(|r| r.joules);
        assert_eq!(second_run("4242"), Some(6000), "all of it: bob's process and the claimant read 0");
        assert_eq!(second_run("4243"), None);
    }

    /// One report of job 4242 alone on the node's GPU, its counter at `kj` kJ, sampled at `at`.
    fn energy_report(at: i64, kj: u64) -> AgentReport {
        let mut report = shared_gpu(at);
        report.sample.gpus[0].jobs = vec!["4242".into()];
        report.sample.processes.truncate(1);
        report.sample.gpus[0].energy_mj = Some(1_000_000 * kj);
        report
    }

    fn energy_of_4242(res: &Resources) -> u64 {
        res.ledger.job_energy("4242").unwrap().iter().map(|r| r.joules).sum()
    }

    /// A pair of accountd on one ledger (the ledger's URL set, as a pair's is; the meta it keeps is
    /// the same on SQLite): the node's agent reports to A, fails over to B, and comes back to A
    /// within A's energy gap. A counts from the node's next report, never over B's stretch.
    #[test]
    fn energy_a_pairs_other_accountd_counted_is_not_counted_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut res = resources(dir.path());
        res.config.ledger.url = Some("mysql://gputokens@db/gputokens".into());
        let (mut a, mut b) = (ReportState::default(), ReportState::default());
        let start = 1_800_000_000;
        let mut post = |state: &mut ReportState, i: u64| {
            let report = energy_report(start + 10 * i as i64, i);
            ingest(&mut res, state, &report, &eight_gpus(), report.sample.time.timestamp()).1.unwrap();
        };
        for i in 0..3 {
            post(&mut a, i);
        }
        for i in 3..6 {
            post(&mut b, i);
        }
        post(&mut a, 6);
        post(&mut a, 7);
        // A: 0→1, 1→2; B: 3→4, 4→5 (its first report is no step); A: 6→7 (6 a first reading again).
        assert_eq!(energy_of_4242(&res), 5_000, "each kJ step counted once, none twice");
    }

    /// A node whose clock jumped a day ahead for one report: the mark is not moved there, so its
    /// energy is counted again from its next reports (after a restart too); a ledger no pair can
    /// share (SQLite, one accountd) keeps no mark at all.
    #[test]
    fn energy_a_sample_time_far_ahead_leaves_no_mark() {
        let dir = tempfile::tempdir().unwrap();
        let mut res = resources(dir.path());
        let mut alone = ReportState::default();
        let start = 1_800_000_000;
        for i in 0..2 {
            let report = energy_report(start + 10 * i, i as u64);
            ingest(&mut res, &mut alone, &report, &eight_gpus(), start + 10 * i).1.unwrap();
        }
        assert_eq!(res.ledger.meta("energy_counted_through:gpu1").unwrap(), None, "SQLite: no mark");

        res.config.ledger.url = Some("mysql://gputokens@db/gputokens".into());
        let mut state = ReportState::default();
        let ahead = energy_report(start + 86_400, 2);
        ingest(&mut res, &mut state, &ahead, &eight_gpus(), start + 20).1.unwrap();
        assert_eq!(res.ledger.meta("energy_counted_through:gpu1").unwrap(), None, "a day ahead: not believed");
        let mut restarted = ReportState::default();
        let before = energy_of_4242(&res);
        for i in 3..6 {
            let report = energy_report(start + 10 * i, i as u64);
            ingest(&mut res, &mut restarted, &report, &eight_gpus(), start + 10 * i).1.unwrap();
        }
        assert_eq!(energy_of_4242(&res) - before, 2_000, "3→4 and 4→5 counted");
    }
}
