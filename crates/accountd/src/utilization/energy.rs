//! Each job's GPU energy from NVML's energy counters: between two consecutive reports of a node,
//! each GPU's counter difference is given to the jobs on it, by the mean of their parts at the
//! step's two ends (`gputokens_node_report::job_use::energy_shares` at each: all to a job holding it alone but
//! for the part of processes of no job there, a shared GPU by its jobs' own processes), so a job that began or ended within the step gets about its
//! half of it, not the whole. A step the counter cannot vouch for gives nothing rather than a wrong
//! figure: the counter went back (the driver reloaded, the GPU was reset), another GPU (or one
//! without a UUID) answers at that index, the reports lie further apart than [`MAX_GAP_INTERVALS`]
//! agent intervals (who was on the GPU in between is unknown), or the rise is more than a GPU can
//! draw ([`MAX_GPU_WATTS`]) in the time that really passed by accountd's clock (and one interval's
//! slack, given once, however often the node posts). A job gets at most what its own GPUs (as
//! Slurm counts them) can draw in that time. A report older than its node's last is left out whole. What the
//! [`EnergyTracker`] keeps is each GPU's previous counter and parts, and each job's run.

use std::collections::{BTreeMap, HashMap, HashSet};

use gputokens_node_report::job_use::energy_shares;
use gputokens_node_report::NodeSample;

/// Reports further apart than this many `[agent] interval`s give no energy for the step between.
pub const MAX_GAP_INTERVALS: u32 = 3;
/// More than any one GPU draws (a GB200 superchip's budget is under 3 kW): a counter that rose more
/// than this over the longest step taken is not believed (a garbage report must not credit a job a
/// year of power).
pub const MAX_GPU_WATTS: u64 = 5_000;

/// The energy state between reports.
#[derive(Debug, Default)]
pub struct EnergyTracker {
    /// Each GPU's counter in its node's previous report, by node and GPU index, and its jobs' parts then.
    last: HashMap<(String, u32), (Reading, Parts)>,
    /// Each node's newest report's sample time: an older one arriving late is left out.
    newest: HashMap<String, i64>,
    /// When accountd received each node's newest report (its own clock), and the end of the time
    /// its steps were believed over so far: a node's sample times are its word, so its steps
    /// together are believed over no more than the time that really passed and one interval's
    /// slack (a node posting many reports a second gains no slack from each).
    received: HashMap<String, (i64, i64)>,
    /// The run each job on a node is counted under: the sample time of the first of the node's
    /// unbroken reports that carry it.
    runs: HashMap<(String, String), i64>,
}

/// How far a node's report is believed: the longest step between two of its reports (seconds),
/// the slack a delayed report is given (accountd's own interval) and when it was received
/// (accountd's clock).
#[derive(Debug, Clone, Copy)]
pub struct Within {
    pub max_gap: i64,
    pub slack: i64,
    pub received: i64,
}

/// Each job's part of a GPU's energy at one report (`energy_shares`).
type Parts = Vec<(String, f64)>;

/// One GPU's energy counter in one report.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The report's sample time (the node's clock: the step is measured between its own readings).
    pub at: i64,
    pub uuid: Option<String>,
    pub millijoules: u64,
}

/// What one job of a node used between its previous report and this one.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnergy {
    pub job: String,
    /// The run's first report (see [`EnergyTracker`]).
    pub since: i64,
    pub joules: u64,
}

/// Millijoules a GPU used from `before` to `now`, or None when the counter cannot say (see the module).
/// `watt_seconds`: the seconds over which the rise may be at most [`MAX_GPU_WATTS`].
pub fn step(before: &Reading, now: &Reading, max_gap: i64, watt_seconds: i64) -> Option<u64> {
    let gap = now.at - before.at;
    if gap < 0 || gap > max_gap || before.uuid.is_none() || before.uuid != now.uuid {
        return None;
    }
    let used = now.millijoules.checked_sub(before.millijoules)?;
    // At most MAX_GPU_WATTS over the longest step taken (reports a moment apart may carry a rise
    // sampled over a longer stretch: the counter and the sample time are not read at one instant).
    let most = MAX_GPU_WATTS.saturating_mul(1000).saturating_mul(watt_seconds.clamp(0, max_gap.max(1)) as u64);
    (used <= most).then_some(used)
}

/// Each job's part of a step: the mean of its parts at the step's two ends (0 where it was not there).
fn mean_parts(before: &[(String, f64)], now: &[(String, f64)]) -> BTreeMap<String, f64> {
    let mut parts: BTreeMap<String, f64> = BTreeMap::new();
    for (job, part) in before.iter().chain(now) {
        *parts.entry(job.clone()).or_default() += part / 2.0;
    }
    parts
}

impl EnergyTracker {
    /// [`EnergyTracker::apply_received`], each report received at its sample time, an interval of
    /// a third of `max_gap`, every job bounded by 8 GPUs.
    #[cfg(test)]
    pub fn apply(&mut self, node: &str, sample: &NodeSample, max_gap: i64) -> Vec<JobEnergy> {
        let within =
            Within { max_gap, slack: max_gap / i64::from(MAX_GAP_INTERVALS), received: sample.time.timestamp() };
        self.apply_received(node, sample, within, &|_| 8)
    }

    /// The sample time of `node`'s newest report this tracker has.
    pub fn newest(&self, node: &str) -> Option<i64> {
        self.newest.get(node).copied()
    }

    /// Forgets `node`'s counters, so that its next report is a first reading (no step): the other
    /// accountd of a pair counted the node's steps since this one's last reading of them.
    pub fn forget_counters(&mut self, node: &str) {
        self.last.retain(|(n, _), _| n != node);
    }

    /// The energy of each job in `node`'s report `sample` since the node's previous report, in job
    /// order; jobs with nothing to show are left out. A job's energy is at most what `job_gpus` of
    /// its GPUs (what Slurm gave it there) can draw in the time that really passed.
    pub fn apply_received(
        &mut self,
        node: &str,
        sample: &NodeSample,
        within: Within,
        job_gpus: &dyn Fn(&str) -> u32,
    ) -> Vec<JobEnergy> {
        let Within { max_gap, slack, received } = within;
        let at = sample.time.timestamp();
        // A report that arrives after a newer one of its node (posts are answered in no set order)
        // changes nothing: its step was measured from the newer one's counters already.
        if self.newest.get(node).is_some_and(|&newest| at < newest) {
            return Vec::new();
        }
        self.newest.insert(node.to_string(), at);
        // The time that really passed since the node's previous report, and one interval's slack
        // for a report delayed on the way (accountd's own interval: never the node's word), less
        // what earlier steps were already believed over.
        let (watt_seconds, believed_until) = match self.received.get(node) {
            Some(&(before, believed_until)) => {
                let window_end = received.saturating_add(slack);
                ((window_end - before.max(believed_until)).max(0), window_end)
            }
            // The first report: no step, nothing believed yet.
            None => (max_gap, received),
        };
        self.received.insert(node.to_string(), (received, believed_until));
        let mut shares = energy_shares(sample);
        let mut millijoules: BTreeMap<String, f64> = BTreeMap::new();
        for gpu in &sample.gpus {
            let key = (node.to_string(), gpu.index);
            let Some(counter) = gpu.energy_mj else {
                self.last.remove(&key);
                continue;
            };
            let now = Reading { at, uuid: gpu.uuid.clone(), millijoules: counter };
            let parts_now = shares.remove(&gpu.index).unwrap_or_default();
            if let Some((before, parts_before)) = self.last.get(&key) {
                if let Some(used) = step(before, &now, max_gap, watt_seconds) {
                    for (job, part) in mean_parts(parts_before, &parts_now) {
                        *millijoules.entry(job).or_default() += used as f64 * part;
                    }
                }
            }
            self.last.insert(key, (now, parts_now));
        }
        // Runs: a job the node's reports carry without a break is one run; energy from a step it
        // ended in goes to the run it ended.
        let runs = &mut self.runs;
        let energy: Vec<JobEnergy> = millijoules
            .into_iter()
            .map(|(job, mj)| {
                let since = *runs.entry((node.to_string(), job.clone())).or_insert(at);
                // However the node shares its GPUs out, a job draws at most its own GPUs' worth.
                let most =
                    f64::from(job_gpus(&job)) * MAX_GPU_WATTS as f64 * watt_seconds.clamp(1, max_gap.max(1)) as f64;
                JobEnergy { job, since, joules: (mj / 1000.0).min(most).round() as u64 }
            })
            .filter(|e| e.joules > 0)
            .collect();
        let here: HashSet<&str> = sample
            .gpus
            .iter()
            .flat_map(|g| self.last.get(&(node.to_string(), g.index)))
            .flat_map(|(_, parts)| parts.iter().map(|(job, _)| job.as_str()))
            .collect();
        runs.retain(|(n, job), _| n != node || here.contains(job.as_str()));
        for job in here {
            runs.entry((node.to_string(), job.to_string())).or_insert(at);
        }
        energy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens_node_report::{GpuSample, ProcessSample};

    const GAP: i64 = 90;

    fn gpu(index: u32, uuid: &str, energy_mj: Option<u64>, jobs: &[&str]) -> GpuSample {
        GpuSample {
            uuid: Some(uuid.into()),
            energy_mj,
            jobs: jobs.iter().map(|j| j.to_string()).collect(),
            ..GpuSample::empty(index)
        }
    }

    fn process(pid: u32, gpu_index: u32, job: Option<&str>, sm: u32) -> ProcessSample {
        ProcessSample {
            pid,
            gpu_index,
            used_memory_bytes: Some(1),
            sm_utilization_percent: Some(sm),
            job_id: job.map(str::to_owned),
            mig_uuid: None,
        }
    }

    fn sample(at: i64, gpus: Vec<GpuSample>, processes: Vec<ProcessSample>) -> NodeSample {
        NodeSample { time: chrono::DateTime::from_timestamp(at, 0).unwrap(), gpus, processes }
    }

    fn got(energy: &[JobEnergy]) -> Vec<(&str, i64, u64)> {
        energy.iter().map(|e| (e.job.as_str(), e.since, e.joules)).collect()
    }

    #[test]
    fn a_job_holding_a_gpu_alone_gets_all_of_its_counters_rise() {
        let mut t = EnergyTracker::default();
        let at =
            |s: i64, mj: u64| sample(s, vec![gpu(0, "GPU-a", Some(mj), &["7"]), gpu(1, "GPU-b", Some(5), &[])], vec![]);
        assert_eq!(t.apply("n1", &at(100, 1_000_000), GAP), [], "a first reading is no step");
        assert_eq!(got(&t.apply("n1", &at(130, 4_000_400), GAP)), [("7", 100, 3000)], "to the nearest joule");
        assert_eq!(got(&t.apply("n1", &at(160, 4_300_000), GAP)), [("7", 100, 300)]);
        // Another node's counters are its own.
        assert_eq!(t.apply("n2", &at(160, 9_000_000), GAP), []);
    }

    /// alice's busy job and bob's idle one on one GPU, bob's claimant beside them (nobody's job).
    #[test]
    fn a_shared_gpus_rise_is_split_by_the_jobs_own_processes() {
        let mut t = EnergyTracker::default();
        let at = |s: i64, mj: u64| {
            sample(
                s,
                vec![gpu(0, "GPU-h100", Some(mj), &["4242", "4243"])],
                vec![process(1, 0, Some("4242"), 90), process(2, 0, Some("4243"), 0), process(3, 0, None, 10)],
            )
        };
        t.apply("n1", &at(0, 0), GAP);
        assert_eq!(
            got(&t.apply("n1", &at(30, 10_000_000), GAP)),
            [("4242", 0, 9000)],
            "the claimant's tenth is nobody's"
        );
    }

    #[test]
    fn a_counter_that_went_back_or_a_gap_gives_no_energy_for_that_step() {
        let mut t = EnergyTracker::default();
        let at = |s: i64, uuid: &str, mj: u64| sample(s, vec![gpu(0, uuid, Some(mj), &["7"])], vec![]);
        t.apply("n1", &at(0, "GPU-a", 50_000_000), GAP);
        assert_eq!(t.apply("n1", &at(30, "GPU-a", 2_000_000), GAP), [], "the driver reloaded: counting from 0 again");
        assert_eq!(
            got(&t.apply("n1", &at(60, "GPU-a", 3_000_000), GAP)),
            [("7", 0, 1000)],
            "counted from the new start"
        );
        assert_eq!(t.apply("n1", &at(60 + GAP + 1, "GPU-a", 9_000_000), GAP), [], "a gap: who used it in between?");
        assert_eq!(got(&t.apply("n1", &at(60 + GAP + 31, "GPU-a", 9_500_000), GAP)), [("7", 0, 500)]);
        assert_eq!(t.apply("n1", &at(60 + GAP + 61, "GPU-z", 9_600_000), GAP), [], "another GPU at index 0");
        // A report without the counter forgets it: the next one with it starts afresh.
        t.apply("n1", &sample(300, vec![gpu(0, "GPU-z", None, &["7"])], vec![]), GAP);
        assert_eq!(t.apply("n1", &at(330, "GPU-z", 9_700_000), GAP), []);
    }

    /// A job missing from a report has ended on the node: when it is there again (requeued), it is
    /// another run. A step a job began or ended in gives it half (the mean of its parts at the two
    /// ends): the other half was the GPU's before or after it.
    #[test]
    fn a_job_back_after_a_report_without_it_is_another_run() {
        let mut t = EnergyTracker::default();
        let at = |s: i64, mj: u64, jobs: &[&str]| sample(s, vec![gpu(0, "GPU-a", Some(mj), jobs)], vec![]);
        t.apply("n1", &at(0, 0, &["7"]), GAP);
        assert_eq!(got(&t.apply("n1", &at(30, 1_000_000, &["7"]), GAP)), [("7", 0, 1000)]);
        assert_eq!(got(&t.apply("n1", &at(60, 2_000_000, &[]), GAP)), [("7", 0, 500)], "half of the step it ended in");
        assert_eq!(got(&t.apply("n1", &at(90, 3_000_000, &["7"]), GAP)), [("7", 90, 500)], "another run, half");
        assert_eq!(got(&t.apply("n1", &at(120, 4_000_000, &["7"]), GAP)), [("7", 90, 1000)]);
    }

    /// Job 8 takes the GPU over from job 7 between two reports: each gets half of that step, never
    /// the whole of the other's.
    #[test]
    fn a_job_that_takes_over_a_gpu_gets_half_of_the_step_it_began_in() {
        let mut t = EnergyTracker::default();
        let at = |s: i64, mj: u64, job: &str| sample(s, vec![gpu(0, "GPU-a", Some(mj), &[job])], vec![]);
        t.apply("n1", &at(0, 0, "7"), GAP);
        assert_eq!(got(&t.apply("n1", &at(30, 2_000_000, "8"), GAP)), [("7", 0, 1000), ("8", 30, 1000)]);
    }

    /// Posts are answered in no set order: a report older than its node's newest changes nothing,
    /// and the next one is measured from the newest, so nothing is counted twice.
    #[test]
    fn a_late_report_is_left_out_whole() {
        let mut t = EnergyTracker::default();
        let at = |s: i64, mj: u64| sample(s, vec![gpu(0, "GPU-a", Some(mj), &["7"])], vec![]);
        t.apply("n1", &at(0, 0), GAP);
        assert_eq!(got(&t.apply("n1", &at(60, 2_000_000), GAP)), [("7", 0, 2000)]);
        assert_eq!(t.apply("n1", &at(30, 1_000_000), GAP), [], "late");
        assert_eq!(got(&t.apply("n1", &at(90, 3_000_000), GAP)), [("7", 0, 1000)], "from the newest, once");
    }

    /// A node's sample times are its word: reports that arrive a second apart but claim a minute and
    /// a half between them are believed only for what a GPU can draw in the second that passed and
    /// an interval (a node cannot post a day of power in a minute), and the interval's slack is
    /// given once, not at each of many reports.
    #[test]
    fn a_rise_is_bounded_by_the_time_that_really_passed() {
        let mut t = EnergyTracker::default();
        let at = |s: i64, mj: u64| sample(s, vec![gpu(0, "GPU-a", Some(mj), &["7"])], vec![]);
        let within = |received| Within { max_gap: GAP, slack: GAP / 3, received };
        let per_second = MAX_GPU_WATTS * 1000;
        t.apply_received("n1", &at(0, 0), within(1000), &|_| 8);
        let most = per_second * (1 + GAP / 3) as u64;
        assert_eq!(t.apply_received("n1", &at(90, most + 1000), within(1001), &|_| 8), [], "more than 31 s of a GPU");
        // The slack was spent: a second later, a second's draw.
        let next = most + 1000 + per_second;
        assert_eq!(got(&t.apply_received("n1", &at(180, next), within(1002), &|_| 8)), [("7", 0, per_second / 1000)]);
        assert_eq!(t.apply_received("n1", &at(181, next + 1), within(1002), &|_| 8), [], "no time passed");
        // Sent in time, it counts whole.
        let whole = per_second * 60;
        assert_eq!(
            got(&t.apply_received("n1", &at(270, next + 1 + whole), within(1062), &|_| 8)),
            [("7", 0, whole / 1000)]
        );
    }

    /// The audit's N1: a node posting ten reports a second, each claiming the most a GPU may draw
    /// since the last, is believed for the seconds that passed and one slack, not a slack each.
    #[test]
    fn many_reports_a_second_gain_no_slack_each() {
        let mut t = EnergyTracker::default();
        let within = |received| Within { max_gap: GAP, slack: 30, received };
        let at = |s: i64, mj: u64| sample(s, vec![gpu(0, "GPU-a", Some(mj), &["7"])], vec![]);
        t.apply_received("n1", &at(0, 0), within(1000), &|_| 1);
        let (mut counter, mut joules) = (0, 0);
        for i in 1..=100 {
            counter += MAX_GPU_WATTS * 1000 * 30;
            let received = 1000 + i / 10;
            joules +=
                t.apply_received("n1", &at(i, counter), within(received), &|_| 1).iter().map(|e| e.joules).sum::<u64>();
        }
        assert!(joules <= MAX_GPU_WATTS * (10 + 30), "{joules} J in 10 s");
    }

    /// The audit's N1: a node's root names alice's one-GPU job as the holder of every GPU there;
    /// her energy is at most what her one GPU can draw in the time that passed and an interval.
    #[test]
    fn a_job_is_given_no_more_than_its_own_gpus_can_draw() {
        let mut t = EnergyTracker::default();
        let at = |s: i64, mj: u64| {
            let gpus = (0..8).map(|i| gpu(i, &format!("GPU-{i}"), Some(mj), &["7"])).collect();
            sample(s, gpus, vec![])
        };
        let within = |received| Within { max_gap: GAP, slack: 30, received };
        let one_gpu = |job: &str| if job == "7" { 1 } else { 8 };
        t.apply_received("n1", &at(0, 0), within(1000), &one_gpu);
        // Each of the 8 GPUs rises 3 kW over 30 s: 720 kJ in all; one GPU's most is 5 kW × 60 s.
        let got_now = t.apply_received("n1", &at(30, 90_000_000), within(1030), &one_gpu);
        assert_eq!(got(&got_now), [("7", 0, 300_000)]);
    }

    /// A garbage counter (a node's report of 0 then u64::MAX) or a GPU without a UUID credits nothing.
    #[test]
    fn a_rise_no_gpu_can_draw_or_a_gpu_without_a_uuid_gives_nothing() {
        let mut t = EnergyTracker::default();
        let at = |s: i64, mj: u64| sample(s, vec![gpu(0, "GPU-a", Some(mj), &["7"])], vec![]);
        t.apply("n1", &at(0, 0), GAP);
        assert_eq!(t.apply("n1", &at(30, u64::MAX), GAP), []);
        // At most a GPU's draw over the 30 s that passed (the interval's slack went to the first step).
        let most = MAX_GPU_WATTS * 1000 * 30;
        assert_eq!(t.apply("n1", &at(60, u64::MAX - most - 1), GAP), [], "went back");
        assert_eq!(got(&t.apply("n1", &at(90, u64::MAX - 1), GAP)), [("7", 0, most / 1000)], "at most a GPU's draw");
        let nameless = |s: i64, mj: u64| {
            let mut g = gpu(0, "x", Some(mj), &["7"]);
            g.uuid = None;
            sample(s, vec![g], vec![])
        };
        let mut t = EnergyTracker::default();
        t.apply("n1", &nameless(0, 0), GAP);
        assert_eq!(t.apply("n1", &nameless(30, 1_000_000), GAP), []);
    }
}
