//! Prometheus metrics of accountd (prometheus-client), served on `/metrics`.

use std::sync::atomic::AtomicU64;

use ledger::{Account, ChargeOutcome};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type FloatGauge = Gauge<f64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HolderLabels {
    pub holder: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UserLabels {
    pub user: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UserGpuLabels {
    pub user: String,
    pub gpu_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CycleLabels {
    pub cycle: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuTypeLabels {
    pub gpu_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabels {
    pub node: String,
    pub gpu: String,
    pub uuid: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub account: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job: String,
    pub user: String,
    pub node: String,
}

pub struct Metrics {
    registry: Registry,
    /// `[http] per_user_metrics`: without it no series names a user (/metrics is open to anyone
    /// who reaches the port; a label with an empty value is, to Prometheus, no label).
    per_user: bool,
    pub balance: Family<UserLabels, FloatGauge>,
    /// Each account pool's balance, only with per-user metrics (an account may be one person's).
    pub pool_balance: Family<PoolLabels, FloatGauge>,
    pub pool_floor: Family<PoolLabels, FloatGauge>,
    pub charged: Family<UserGpuLabels, FloatCounter>,
    pub replenished: FloatCounter,
    pub jobs_charged: Counter,
    /// Tokens charged for GPU energy (`[prices] per_kwh`), once per run whoever paid.
    pub energy_charged: FloatCounter,
    pub cycle_seconds: Family<CycleLabels, FloatGauge>,
    pub cycle_failures: Family<CycleLabels, Counter>,
    /// Balances a cycle could not change and left for the next one, the others going on.
    pub balances_skipped: Family<CycleLabels, Counter>,
    pub cycle_last_success: Family<CycleLabels, Gauge>,
    pub snapshot_written: Gauge,
    /// How far the clock is past a day beyond the newest time Slurm has shown (0 normally).
    pub clock_ahead: Gauge,
    pub records_skipped: Family<ReasonLabels, Counter>,
    pub unpriced_gpu_seconds: Family<GpuTypeLabels, Counter>,
    pub gpu_utilization: Family<GpuLabels, FloatGauge>,
    pub gpu_memory_used: Family<GpuLabels, FloatGauge>,
    pub gpu_temperature: Family<GpuLabels, FloatGauge>,
    pub gpu_power: Family<GpuLabels, FloatGauge>,
    pub gpu_energy: Family<GpuLabels, FloatGauge>,
    pub gpu_healthy: Family<GpuLabels, Gauge>,
    pub job_gpu_utilization: Family<JobLabels, FloatGauge>,
    pub job_gpu_memory: Family<JobLabels, FloatGauge>,
    /// 0 while a job shares a GPU where its processes cannot be seen (charged as allocated, never idle).
    pub job_gpu_measured: Family<JobLabels, Gauge>,
    pub job_idle: Family<JobLabels, Gauge>,
    /// GPU energy each job used (its part of each GPU's NVML energy counter), while it runs.
    pub job_gpu_energy: Family<JobLabels, FloatCounter>,
    /// The same summed over every job: served always, where the job series need per-user metrics.
    pub jobs_gpu_energy: FloatCounter,
    /// Jobs flagged idle per node: served always, where the job series need per-user metrics.
    pub idle_jobs: Family<NodeLabels, Gauge>,
    pub preemptions: Family<PreemptLabels, Counter>,
    /// Pending GPU jobs held while their payer is at the floor, released, or released by others.
    pub holds: Family<ReasonLabels, Counter>,
    /// Shadow mode: what each controller's plugin would have done since it started, from its status
    /// file (`{controller, decision}`: refuse, deprioritize, limit).
    pub shadow_decisions: Family<ShadowLabels, Gauge>,
    /// 1 while `[admission] enforce` (the default), 0 in shadow mode.
    pub enforcing: Gauge,
    /// 1 while this accountd leads (runs the cycles, writes the snapshot); a SQLite ledger's always.
    pub leading: Gauge,
    /// 1 for the accountd that holds the ledger's lease, as this one last read it (`host:pid`).
    pub leader: Family<HolderLabels, Gauge>,
    pub drains: Family<NodeLabels, Counter>,
    pub xids_ignored: Family<XidLabels, Counter>,
    /// Runs lost to the system refunded automatically, and the tokens given back, by cause.
    pub refunds: Family<CauseLabels, Counter>,
    pub refunded_tokens: Family<CauseLabels, FloatCounter>,
    pub agent_reports_refused: Family<ReasonLabels, Counter>,
    /// When each node's agent last had a report accepted: a node whose agent falls silent (node
    /// lost, link cut, agent stopped) shows as an age that keeps growing (`time() - ...`).
    pub agent_last_report: Family<NodeLabels, Gauge>,
    pub connections_refused: Family<ListenerLabels, Counter>,
    pub connections_shed: Family<ListenerLabels, Counter>,
    pub notifications: Family<NotifyLabels, Counter>,
    /// Admin changes committed to the ledger but not written to the admin journal.
    pub admin_journal_failures: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotifyLabels {
    /// `warning`, `overdraft`, `floor`, `recovered` or `preempted`.
    pub event: String,
    /// `sent` or `failed` (a failed one is retried on a later cycle).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// `http` or `socket`.
    pub listener: String,
    /// Which cap: `total`, `per_address` (HTTP) or `per_user` (the Unix socket).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptLabels {
    pub gpu_type: String,
    pub action: String,
    pub dry_run: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowLabels {
    pub controller: String,
    pub decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    /// `gpu_fault` or `node_fail` (`[refunds] causes`).
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct XidLabels {
    pub node: String,
    pub xid: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics whose series never name a user.
    pub fn new() -> Metrics {
        Metrics::with_users(false)
    }

    /// Metrics that label charges, balances and jobs with their users when `per_user` is true.
    pub fn with_users(per_user: bool) -> Metrics {
        let mut registry = Registry::with_prefix("gputokens");
        let m = Metrics {
            per_user,
            balance: Family::default(),
            pool_balance: Family::default(),
            pool_floor: Family::default(),
            charged: Family::default(),
            replenished: FloatCounter::default(),
            jobs_charged: Counter::default(),
            energy_charged: FloatCounter::default(),
            cycle_seconds: Family::default(),
            cycle_failures: Family::default(),
            balances_skipped: Family::default(),
            cycle_last_success: Family::default(),
            snapshot_written: Gauge::default(),
            clock_ahead: Gauge::default(),
            records_skipped: Family::default(),
            agent_reports_refused: Family::default(),
            agent_last_report: Family::default(),
            connections_refused: Family::default(),
            connections_shed: Family::default(),
            notifications: Family::default(),
            unpriced_gpu_seconds: Family::default(),
            gpu_utilization: Family::default(),
            gpu_memory_used: Family::default(),
            gpu_temperature: Family::default(),
            gpu_power: Family::default(),
            gpu_energy: Family::default(),
            gpu_healthy: Family::default(),
            job_gpu_utilization: Family::default(),
            job_gpu_memory: Family::default(),
            job_gpu_measured: Family::default(),
            job_idle: Family::default(),
            job_gpu_energy: Family::default(),
            jobs_gpu_energy: FloatCounter::default(),
            idle_jobs: Family::default(),
            preemptions: Family::default(),
            holds: Family::default(),
            shadow_decisions: Family::default(),
            enforcing: Gauge::default(),
            leading: Gauge::default(),
            leader: Family::default(),
            drains: Family::default(),
            xids_ignored: Family::default(),
            refunds: Family::default(),
            refunded_tokens: Family::default(),
            admin_journal_failures: Counter::default(),
            registry: Registry::default(),
        };
        registry.register("balance_tokens", "Token balance per user", m.balance.clone());
        registry.register("pool_balance_tokens", "Token balance of each Slurm account's pool", m.pool_balance.clone());
        registry.register("pool_floor_tokens", "Floor of each Slurm account's pool", m.pool_floor.clone());
        registry.register(
            "charged_tokens",
            "Tokens charged per GPU type (and user, with [http] per_user_metrics)",
            m.charged.clone(),
        );
        registry.register(
            "energy_charged_tokens",
            "Tokens charged for GPU energy ([prices] per_kwh), once per run whoever paid; in charged_tokens too",
            m.energy_charged.clone(),
        );
        registry.register(
            "replenished_tokens",
            "Tokens added by daily and monthly replenishment",
            m.replenished.clone(),
        );
        registry.register(
            "jobs_charged",
            "Job run segments charged, once per cycle that charged them (a running job every cycle; each run of a requeued job apart)",
            m.jobs_charged.clone(),
        );
        registry.register("cycle_duration_seconds", "Duration of the last cycle", m.cycle_seconds.clone());
        registry.register("cycle_failures", "Cycles that failed", m.cycle_failures.clone());
        registry.register(
            "balances_skipped",
            "Balances a cycle could not change (left for the next cycle; the others went on)",
            m.balances_skipped.clone(),
        );
        registry.register(
            "cycle_last_success_timestamp_seconds",
            "When the last cycle that succeeded ended (unix seconds); a failed cycle leaves it, and the snapshot, as they were",
            m.cycle_last_success.clone(),
        );
        registry.register(
            "snapshot_written_timestamp_seconds",
            "The time stamped in the balance snapshot last written (unix seconds): the job_submit plugin's max_snapshot_age counts from it",
            m.snapshot_written.clone(),
        );
        registry.register(
            "clock_ahead_seconds",
            "How far the clock is past a day beyond the newest time Slurm has shown: replenishment and grant expiry wait (0 normally)",
            m.clock_ahead.clone(),
        );
        registry.register(
            "agent_reports_refused",
            "Agent reports refused (unauthenticated, another node's or job's, malformed), by reason",
            m.agent_reports_refused.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at once because a client or all clients held the most allowed, by listener and cap",
            m.connections_refused.clone(),
        );
        registry.register(
            "connections_shed",
            "Idle connections (no request under way) closed to make room for a new one of the same client, or of \
             anyone at the total cap, by listener and cap",
            m.connections_shed.clone(),
        );
        registry.register("records_skipped", "Job records not charged, by reason", m.records_skipped.clone());
        registry.register(
            "unpriced_gpu_seconds",
            "GPU-seconds of types missing from [prices], charged at the unlisted-type price",
            m.unpriced_gpu_seconds.clone(),
        );
        registry.register(
            "gpu_utilization_percent",
            "GPU utilization reported by node agents",
            m.gpu_utilization.clone(),
        );
        registry.register("gpu_memory_used_bytes", "GPU memory in use", m.gpu_memory_used.clone());
        registry.register("gpu_temperature_celsius", "GPU temperature", m.gpu_temperature.clone());
        registry.register("gpu_power_watts", "GPU power draw", m.gpu_power.clone());
        registry.register(
            "gpu_energy_joules",
            "Energy the GPU used since its driver loaded (NVML's counter, from node agents)",
            m.gpu_energy.clone(),
        );
        registry.register("gpu_healthy", "1 when the GPU reports no health problem", m.gpu_healthy.clone());
        registry.register(
            "job_gpu_utilization_percent",
            "Mean utilization of the GPUs a job holds or its processes run on",
            m.job_gpu_utilization.clone(),
        );
        registry.register("job_gpu_memory_bytes", "GPU memory used by a job", m.job_gpu_memory.clone());
        registry.register(
            "job_gpu_measured",
            "0 while a job shares a GPU where the agent sees none of its processes: charged as allocated, never idle",
            m.job_gpu_measured.clone(),
        );
        registry.register(
            "job_idle",
            "1 when a job holds GPUs below the idle threshold for longer than the window",
            m.job_idle.clone(),
        );
        registry.register(
            "job_gpu_energy_joules",
            "GPU energy a job used: its part of each GPU's NVML energy counter (a shared GPU's by its own processes)",
            m.job_gpu_energy.clone(),
        );
        registry.register(
            "jobs_gpu_energy_joules",
            "GPU energy all jobs used, as gputokens_job_gpu_energy_joules counts it per job",
            m.jobs_gpu_energy.clone(),
        );
        registry.register(
            "enforcing",
            "1 while gputokens refuses, deprioritizes and holds; 0 in shadow mode ([admission] enforce = false)",
            m.enforcing.clone(),
        );
        registry.register(
            "ledger_leading",
            "1 while this accountd leads the ledger: runs the cycles and writes the snapshot (a pair on one MariaDB ledger: one of them)",
            m.leading.clone(),
        );
        registry.register(
            "ledger_leader",
            "1 for the accountd (host:pid) holding the ledger's lease, as this one last read it",
            m.leader.clone(),
        );
        registry.register(
            "shadow_decisions",
            "In shadow mode: GPU jobs each controller's plugin would have refused, deprioritized or limited since it \
             started (read from its controller status file each check cycle)",
            m.shadow_decisions.clone(),
        );
        registry.register(
            "idle_jobs",
            "GPU jobs on each node flagged idle now (gputokens_job_idle names them, with [http] per_user_metrics)",
            m.idle_jobs.clone(),
        );
        registry.register(
            "preemptions",
            "Jobs preempted (or, in a dry run, that would have been)",
            m.preemptions.clone(),
        );
        registry.register(
            "holds",
            "Pending GPU jobs gputokens held while their payer was at the floor ([admission] hold_at_floor), \
             by reason: hold, release, hold-lifted (released by someone else), hold-failed, release-failed",
            m.holds.clone(),
        );
        registry.register(
            "notifications",
            "Runs of the [notify] command, by event and result (failed ones are retried)",
            m.notifications.clone(),
        );
        registry.register(
            "agent_last_report_timestamp_seconds",
            "When each node's agent last had a report accepted (unix time); its age is time() minus it",
            m.agent_last_report.clone(),
        );
        registry.register("node_drains", "Nodes drained because a GPU failed", m.drains.clone());
        registry.register(
            "gpu_xids_ignored",
            "XIDs reported by node agents that are not in [health] drain_xids (application errors): never drained for",
            m.xids_ignored.clone(),
        );
        registry.register(
            "refunds",
            "GPU runs lost to the system refunded automatically ([refunds])",
            m.refunds.clone(),
        );
        registry.register(
            "refunded_tokens",
            "Tokens given back by automatic refunds of runs lost to the system",
            m.refunded_tokens.clone(),
        );
        registry.register(
            "admin_journal_failures",
            "Admin changes recorded in the ledger but not appended to [paths] admin_journal (see the log): a restore \
             would not list them",
            m.admin_journal_failures.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// A listener's refusal and shedding counters, at 0 until something is refused or shed: served
    /// from the start, so a dashboard and `rate()` see 0 rather than nothing.
    pub fn listener_started(&self, listener: &str, reasons: &[&str]) {
        for reason in reasons {
            let labels = ListenerLabels { listener: listener.into(), reason: (*reason).into() };
            drop(self.connections_refused.get_or_create(&labels));
            drop(self.connections_shed.get_or_create(&labels));
        }
    }

    pub fn connection_refused(&self, listener: &str, reason: &str) {
        self.connections_refused
            .get_or_create(&ListenerLabels { listener: listener.into(), reason: reason.into() })
            .inc();
    }

    pub fn connection_shed(&self, listener: &str, reason: &str) {
        self.connections_shed.get_or_create(&ListenerLabels { listener: listener.into(), reason: reason.into() }).inc();
    }

    /// A job record left out of a charge; `reason` is one of a fixed set, never a user's name.
    pub fn record_skipped(&self, reason: &str) {
        self.records_skipped.get_or_create(&ReasonLabels { reason: reason.to_string() }).inc();
    }

    /// Drops one GPU's series (it left its node's reports, or another GPU answers at its index).
    pub fn remove_gpu(&self, labels: &GpuLabels) {
        for family in
            [&self.gpu_utilization, &self.gpu_memory_used, &self.gpu_temperature, &self.gpu_power, &self.gpu_energy]
        {
            family.remove(labels);
        }
        self.gpu_healthy.remove(labels);
    }

    /// The labels of a job's series; None without per-user metrics, where a job has none: its ID
    /// is one join with squeue from its user, and with `PrivateData=jobs` itself not public.
    pub fn job_labels(&self, labels: &JobLabels) -> Option<JobLabels> {
        self.per_user.then(|| labels.clone())
    }

    fn user_label(&self, user: &str) -> String {
        if self.per_user {
            user.to_string()
        } else {
            String::new()
        }
    }

    /// Every user's balance, only with per-user metrics.
    pub fn set_balances(&self, accounts: &[Account]) {
        if !self.per_user {
            return;
        }
        for a in accounts {
            self.balance.get_or_create(&UserLabels { user: a.user.clone() }).set(a.balance.as_f64());
        }
    }

    /// Every pool's balance and floor, only with per-user metrics.
    pub fn set_pools(&self, pools: &[ledger::Pool]) {
        if !self.per_user {
            return;
        }
        for p in pools {
            let labels = PoolLabels { account: p.account.clone() };
            self.pool_balance.get_or_create(&labels).set(p.balance.as_f64());
            self.pool_floor.get_or_create(&labels).set(p.rules.floor.as_f64());
        }
    }

    pub fn record_charge(&self, outcome: &ChargeOutcome, skipped: usize) {
        for ((user, gpu_type), tokens) in &outcome.by_user_type {
            self.charged
                .get_or_create(&UserGpuLabels { user: self.user_label(user), gpu_type: gpu_type.clone() })
                .inc_by(tokens.as_f64());
        }
        self.jobs_charged.inc_by(outcome.records as u64);
        for (gpu_type, secs) in &outcome.unlisted_types {
            self.unpriced_gpu_seconds.get_or_create(&GpuTypeLabels { gpu_type: gpu_type.clone() }).inc_by(*secs);
        }
        if skipped > 0 {
            self.records_skipped.get_or_create(&ReasonLabels { reason: "no_gpu_time".into() }).inc_by(skipped as u64);
        }
    }

    pub fn record_energy_charge(&self, charged: &ledger::EnergyCharged) {
        for ((user, gpu_type), tokens) in &charged.by_user_type {
            self.charged
                .get_or_create(&UserGpuLabels { user: self.user_label(user), gpu_type: gpu_type.clone() })
                .inc_by(tokens.as_f64());
        }
        self.energy_charged.inc_by(charged.tokens.as_f64());
    }

    pub fn record_preemption(&self, gpu_type: &str, action: &str, dry_run: bool) {
        let labels =
            PreemptLabels { gpu_type: gpu_type.to_string(), action: action.to_string(), dry_run: dry_run.to_string() };
        self.preemptions.get_or_create(&labels).inc();
    }

    pub fn record_notification(&self, event: &str, sent: bool) {
        let result = if sent { "sent" } else { "failed" };
        self.notifications.get_or_create(&NotifyLabels { event: event.into(), result: result.into() }).inc();
    }

    /// What the admins' status page shows of each cycle of `accountd serve`: when it last
    /// succeeded, how long it took last, how often it failed since the start.
    pub fn cycle_health(&self, now: i64) -> serde_json::Value {
        let cycles: Vec<serde_json::Value> = ["charge", "check"]
            .iter()
            .map(|cycle| {
                let labels = CycleLabels { cycle: cycle.to_string() };
                // Read without creating a series: /metrics shows a cycle's failures only once it failed.
                let last = self.cycle_last_success.get(&labels).map_or(0, |g| g.get());
                serde_json::json!({
                    "cycle": cycle,
                    "last_success": (last > 0).then(|| gputokens::time::format_rfc3339(last)),
                    "ago_seconds": (last > 0).then(|| now - last),
                    "seconds": self.cycle_seconds.get(&labels).map(|g| g.get()),
                    "failures": self.cycle_failures.get(&labels).map_or(0, |c| c.get()),
                })
            })
            .collect();
        serde_json::json!({ "cycles": cycles, "snapshot_written": self.snapshot_written.get() })
    }

    pub fn record_cycle(&self, cycle: &str, seconds: f64, ok: bool) {
        let labels = CycleLabels { cycle: cycle.to_string() };
        self.cycle_seconds.get_or_create(&labels).set(seconds);
        if ok {
            self.cycle_last_success.get_or_create(&labels).set(gputokens::time::now());
        } else {
            self.cycle_failures.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// slurm-conf/prometheus/gputokens-alerts.yml reads only metrics served here (promtool's own
    /// tests of the rules are in tests/prometheus).
    #[test]
    fn the_alert_rules_read_metrics_served_here() {
        let rules = include_str!("../../../slurm-conf/prometheus/gputokens-alerts.yml");
        let used: std::collections::BTreeSet<&str> = rules
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("gputokens_"))
            .collect();
        assert!(used.len() >= 4, "{used:?}");
        // A sample in every family: a family without one is not described at all.
        let m = Metrics::new();
        m.record_cycle("charge", 0.1, false);
        m.record_cycle("check", 0.1, true);
        m.snapshot_written.set(1);
        let outcome = ChargeOutcome { unlisted_types: [("h100".to_string(), 60)].into(), ..Default::default() };
        m.record_charge(&outcome, 0);
        let gpu = GpuLabels { node: "n1".into(), gpu: "0".into(), uuid: "GPU-0".into() };
        m.gpu_healthy.get_or_create(&gpu).set(1);
        let job = JobLabels { job: "7".into(), user: "alice".into(), node: "n1".into() };
        m.job_idle.get_or_create(&job).set(0);
        m.agent_last_report.get_or_create(&NodeLabels { node: "n1".into() }).set(1);
        m.idle_jobs.get_or_create(&NodeLabels { node: "n1".into() }).set(0);
        m.agent_reports_refused.get_or_create(&ReasonLabels { reason: "replayed".into() }).inc();
        let text = m.encode();
        for name in used {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} "))),
                "the rules read {name}, not served:\n{text}"
            );
        }
    }

    /// The stale-snapshot alert fires (threshold plus `for`) before the job_submit plugin's default
    /// and example max_snapshot_age let on_error decide GPU jobs, and not while the snapshot is only
    /// as old as the default and example check interval.
    #[test]
    fn the_stale_snapshot_alert_fires_before_max_snapshot_age() {
        let rules = include_str!("../../../slurm-conf/prometheus/gputokens-alerts.yml");
        let rule = rules.split("- alert: ").find(|r| r.starts_with("GputokensSnapshotStale")).expect("the rule");
        let after = |key: &str| rule.lines().find_map(|l| l.trim().strip_prefix(key)).map(str::trim).unwrap();
        let threshold: u64 = after("expr: time() - gputokens_snapshot_written_timestamp_seconds >").parse().unwrap();
        let pending = humantime::parse_duration(after("for:")).unwrap().as_secs();

        let example = gputokens::Config::parse(gputokens::config::EXAMPLE, std::path::Path::new("example")).unwrap();
        let max_age = example.admission.max_snapshot_age.unwrap().as_secs();
        assert_eq!(max_age, gputokens::config::admission::DEFAULT_MAX_SNAPSHOT_AGE.as_secs());
        assert!(threshold + pending < max_age, "alert at {threshold}s + {pending}s, max_snapshot_age {max_age}s");
        let check = example.intervals.check.as_secs();
        assert_eq!(
            check,
            gputokens::Config::parse("", std::path::Path::new("empty")).unwrap().intervals.check.as_secs()
        );
        assert!(threshold > check, "the snapshot is {check}s old between check cycles");
    }

    #[test]
    fn energy_charges_count_in_charged_tokens_and_apart() {
        let mut charged =
            ledger::EnergyCharged { tokens: gputokens::Tokens::from_micro(2_500_000), ..Default::default() };
        charged.by_user_type.insert(("alice".into(), "a6000".into()), gputokens::Tokens::from_micro(2_500_000));
        let m = Metrics::with_users(true);
        m.record_energy_charge(&charged);
        m.record_energy_charge(&charged);
        let text = m.encode();
        assert!(text.contains("gputokens_energy_charged_tokens_total 5.0"), "{text}");
        assert!(text.contains(r#"gputokens_charged_tokens_total{user="alice",gpu_type="a6000"} 5.0"#), "{text}");
    }

    #[test]
    fn no_series_names_a_user_without_per_user_metrics() {
        let mut outcome = ChargeOutcome::default();
        outcome.by_user_type.insert(("alice".into(), "a6000".into()), gputokens::Tokens::whole(4));
        outcome.by_user_type.insert(("bob".into(), "a6000".into()), gputokens::Tokens::whole(2));
        let account = |user: &str| Account { user: user.into(), balance: gputokens::Tokens::whole(1), first_seen: 0 };
        let job = JobLabels { job: "7".into(), user: "alice".into(), node: "n1".into() };
        let pool = ledger::Pool {
            account: "alicelab".into(),
            balance: gputokens::Tokens::whole(5),
            rules: gputokens::policy::BucketRules::default(),
            user_limit: None,
            created: 0,
            parent: None,
            lends: false,
            window: None,
        };
        for per_user in [false, true] {
            let m = Metrics::with_users(per_user);
            m.record_charge(&outcome, 0);
            m.set_balances(&[account("alice")]);
            m.set_pools(std::slice::from_ref(&pool));
            if let Some(series) = m.job_labels(&job) {
                m.job_idle.get_or_create(&series).set(1);
            }
            let text = m.encode();
            assert_eq!(text.contains("alice"), per_user, "per_user_metrics = {per_user}:\n{text}");
            assert_eq!(text.contains(r#"job="7""#), per_user, "per_user_metrics = {per_user}:\n{text}");
            if !per_user {
                // One series per GPU type: the users' charges added up.
                assert!(text.contains(r#"gputokens_charged_tokens_total{user="",gpu_type="a6000"} 6.0"#), "{text}");
            }
        }
    }
}
