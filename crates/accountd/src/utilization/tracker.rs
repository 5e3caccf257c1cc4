//! What accountd does with each job's measured utilization, from an agent's report or Prometheus:
//! per-job metrics, a utilization sample per run of a job in the ledger (for `charge_basis =
//! "measured"`; a run is keyed by when it was first sampled), and idle-job detection, whose state
//! between samples is the [`Tracker`].

use std::collections::{BTreeSet, HashMap};

use gputokens::config::UtilizationConfig;
use gputokens::notify::{idle_message, Event};
use ledger::NewNotice;

use crate::error::AccountdResult;
use crate::metrics::{JobLabels, NodeLabels};
use crate::resources::Resources;
use crate::slurm::Slurm;

/// Per-job utilization state between samples.
#[derive(Debug, Default)]
pub struct Tracker {
    /// Each job seen running on a GPU, by job ID.
    jobs: HashMap<String, JobWatch>,
    /// Each job's user, asked of squeue once.
    users: HashMap<String, String>,
}

/// One job's way toward being flagged idle.
#[derive(Debug, Clone)]
struct JobWatch {
    labels: JobLabels,
    /// When this run of the job was first sampled: its samples are kept under it in the ledger
    /// (a requeued job's next run is a watch of its own, once the job left the reports).
    since: i64,
    /// Since when its utilization has stayed below `idle_threshold_percent`, and in how many samples.
    below_since: Option<i64>,
    below_samples: u64,
    flagged: bool,
}

/// Utilization of one job on one node in one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct JobUtilization {
    pub job: String,
    /// The job's own use of its GPUs (`gputokens_node_report::job_use`); `None`: unmeasured (it shares a GPU where
    /// the agent sees none of its processes), which counts as its allocation and never as idle.
    pub percent: Option<f64>,
    pub memory_bytes: u64,
}

/// Job users kept beyond the jobs being watched before those of other jobs are dropped.
const USERS_KEPT: usize = 65_536;

/// What an unmeasured sample counts as in the ledger: the whole allocation, so that under
/// `charge_basis = "measured"` the job pays as allocated for it and no idle share comes of it.
const UNMEASURED_AS_PERCENT: f64 = 100.0;

/// The job's user, asked of squeue once and remembered.
fn user_of(tracker: &mut Tracker, job: &str, slurm: &Slurm) -> String {
    if let Some(user) = tracker.users.get(job) {
        return user.clone();
    }
    let user = slurm
        .job_arg(job)
        .ok()
        .and_then(|id| slurm.run("squeue", &["--all", "-h", "-j", id, "-o", "%u"]).ok())
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

impl Tracker {
    /// Notes each job's user as Slurm showed it to the report gate, so that no squeue is asked
    /// for it while every node's reports wait.
    pub fn note_users<'a>(&mut self, users: impl Iterator<Item = (&'a str, &'a str)>) {
        // Jobs a report named but that were never sampled leave with the next prune.
        if self.users.len() > USERS_KEPT {
            let jobs = &self.jobs;
            self.users.retain(|job, _| jobs.contains_key(job));
        }
        for (job, user) in users.filter(|(_, user)| !user.is_empty()) {
            self.users.entry(job.to_string()).or_insert_with(|| user.to_string());
        }
    }

    /// The user of a job seen in the latest reports ("unknown" when squeue could not say).
    pub fn user(&self, job: &str) -> &str {
        self.users.get(job).map(String::as_str).unwrap_or("unknown")
    }
}

/// Records the utilization of the jobs seen on `node` (agents) or cluster-wide (`node` empty,
/// Prometheus); returns how many jobs and how many became idle.
pub fn apply(
    res: &mut Resources,
    tracker: &mut Tracker,
    node: &str,
    jobs: Vec<JobUtilization>,
    now: i64,
) -> AccountdResult<(usize, usize)> {
    let node = node.to_string();
    let slurm = Slurm::of(&res.config);
    let usage = res.config.utilization.clone();
    let mut seen = BTreeSet::new();
    let mut flagged = Vec::new();
    for job in jobs {
        let user = user_of(tracker, &job.job, &slurm);
        let labels = JobLabels { job: job.job.clone(), user, node: node.clone() };
        let series = res.metrics.job_labels(&labels);
        if let Some(series) = &series {
            match job.percent {
                Some(percent) => {
                    res.metrics.job_gpu_utilization.get_or_create(series).set(percent);
                }
                None => {
                    res.metrics.job_gpu_utilization.remove(series);
                }
            }
            res.metrics.job_gpu_measured.get_or_create(series).set(i64::from(job.percent.is_some()));
            res.metrics.job_gpu_memory.get_or_create(series).set(job.memory_bytes as f64);
        }
        let watch = tracker.jobs.entry(job.job.clone()).or_insert_with(|| JobWatch {
            labels: labels.clone(),
            since: now,
            below_since: None,
            below_samples: 0,
            flagged: false,
        });
        let (newly, idle_samples) = watch_idle(watch, job.percent, now, &usage);
        if newly {
            flagged.push(watch.labels.clone());
        }
        let percent = job.percent.unwrap_or(UNMEASURED_AS_PERCENT);
        res.ledger.record_utilization(&job.job, watch.since, percent, idle_samples, now)?;
        if let Some(series) = &series {
            res.metrics.job_idle.get_or_create(series).set(watch.flagged as i64);
        }
        seen.insert(job.job);
    }
    forget_ended_jobs(res, tracker, &node, &seen);
    // Per node, from the agents (Prometheus as the source knows no node).
    if !node.is_empty() {
        let idle_here = tracker.jobs.values().filter(|w| w.labels.node == node && w.flagged).count();
        res.metrics.idle_jobs.get_or_create(&NodeLabels { node: node.clone() }).set(idle_here as i64);
    }
    for labels in &flagged {
        flag_idle(labels, &usage);
        if usage.idle_notify && res.config.notify.enabled() {
            owe_idle_notice(res, labels, &usage, now)?;
        }
    }
    Ok((seen.len(), flagged.len()))
}

/// Advances a job's idle state by one sample: whether it has just become idle, and how many samples
/// are idle by this one (the whole stretch below the threshold when it has just lasted the idle
/// window, then each sample while it stays below). An unmeasured sample ends a stretch, as a busy
/// one does: nothing says the job idled then.
fn watch_idle(watch: &mut JobWatch, percent: Option<f64>, now: i64, usage: &UtilizationConfig) -> (bool, u64) {
    if !percent.is_some_and(|p| p < usage.idle_threshold_percent) {
        watch.below_since = None;
        watch.below_samples = 0;
        watch.flagged = false;
        return (false, 0);
    }
    let since = *watch.below_since.get_or_insert(now);
    watch.below_samples += 1;
    let idle = now - since >= usage.idle_window.as_secs() as i64;
    let newly = idle && !watch.flagged;
    watch.flagged |= idle;
    let counted = match (newly, watch.flagged) {
        (true, _) => watch.below_samples,
        (false, true) => 1,
        (false, false) => 0,
    };
    (newly, counted)
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
    // Slurm's ID of the job (a second cluster's ledger key is CLUSTER:ID): what scancel takes.
    let job = gputokens::slurm::job_number(&labels.job).map_or_else(|| labels.job.clone(), |n| n.to_string());
    let fill = |a: &String| a.replace("{job}", &job).replace("{user}", &labels.user).replace("{node}", &labels.node);
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

/// The notice owed to the owner of a job just flagged idle (`[usage] idle_notify`), once per job:
/// delivered by the next check cycle with the other notifications.
fn owe_idle_notice(res: &mut Resources, labels: &JobLabels, usage: &UtilizationConfig, now: i64) -> AccountdResult {
    if labels.user == "unknown" {
        return Ok(()); // squeue no longer knows the job: nobody to tell
    }
    let balance = res.ledger.account(&labels.user)?.map(|a| a.balance).unwrap_or(res.ledger.rules().initial);
    let window = humantime::format_duration(usage.idle_window).to_string();
    let notice = NewNotice {
        user: labels.user.clone(),
        event: Event::Idle,
        balance,
        job_id: Some(labels.job.clone()),
        message: idle_message(&labels.job, &labels.node, usage.idle_threshold_percent, &window),
    };
    res.ledger.record_notice(&notice, &format!("idle:{}", labels.job), now)?;
    Ok(())
}

/// How long an idle_command may run.
const IDLE_COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Jobs of this node missing from its report have ended there: drop their series.
fn forget_ended_jobs(res: &mut Resources, tracker: &mut Tracker, node: &str, seen: &BTreeSet<String>) {
    let ended: Vec<String> = tracker
        .jobs
        .iter()
        .filter(|(job, w)| w.labels.node == node && !seen.contains(*job))
        .map(|(job, _)| job.clone())
        .collect();
    for job in ended {
        if let Some(series) = tracker.jobs.remove(&job).and_then(|w| res.metrics.job_labels(&w.labels)) {
            res.metrics.job_gpu_utilization.remove(&series);
            res.metrics.job_gpu_memory.remove(&series);
            res.metrics.job_gpu_measured.remove(&series);
            res.metrics.job_idle.remove(&series);
            res.metrics.job_gpu_energy.remove(&series);
        }
        tracker.users.remove(&job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> JobWatch {
        let labels = JobLabels { job: "7".into(), user: "alice".into(), node: "n1".into() };
        JobWatch { labels, since: 0, below_since: None, below_samples: 0, flagged: false }
    }

    /// Samples every 10 s against a 30 s window at 5 %: a stretch is idle once it lasted the window,
    /// all its samples then, and each later one while it lasts; a busy sample ends it.
    #[test]
    fn a_stretch_below_the_threshold_counts_idle_once_it_lasts_the_window() {
        let usage = UtilizationConfig { idle_window: std::time::Duration::from_secs(30), ..Default::default() };
        let mut w = watch();
        let got: Vec<(bool, u64)> = [(0, 1.0), (10, 2.0), (20, 0.0), (30, 1.0), (40, 3.0), (50, 80.0), (60, 0.0)]
            .iter()
            .map(|(at, percent)| watch_idle(&mut w, Some(*percent), *at, &usage))
            .collect();
        assert_eq!(got, [(false, 0), (false, 0), (false, 0), (true, 4), (false, 1), (false, 0), (false, 0)]);
    }

    /// A job sharing a GPU where its processes are out of sight is unmeasured: it never becomes idle,
    /// and an unmeasured sample ends a stretch below the threshold as a busy one does.
    #[test]
    fn an_unmeasured_job_is_never_idle() {
        let usage = UtilizationConfig { idle_window: std::time::Duration::from_secs(30), ..Default::default() };
        let mut w = watch();
        let got: Vec<(bool, u64)> = (0..10).map(|i| watch_idle(&mut w, None, i * 10, &usage)).collect();
        assert!(got.iter().all(|g| *g == (false, 0)), "{got:?}");
        assert!(!w.flagged);
        let got: Vec<(bool, u64)> =
            [(100, Some(0.0)), (110, Some(0.0)), (120, None), (130, Some(0.0)), (160, Some(0.0))]
                .iter()
                .map(|(at, percent)| watch_idle(&mut w, *percent, *at, &usage))
                .collect();
        assert_eq!(got, [(false, 0), (false, 0), (false, 0), (false, 0), (true, 2)], "the stretch began again at 130");
    }
}
