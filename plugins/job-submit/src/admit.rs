//! What `job_submit` and `job_modify` decide, in safe code: the job is read from the job
//! description's copy ([`JobRequest`]), balances, prices, partitions and queue commitments from the
//! published [`View`], the settings from the config's `[admission]` ([`PluginConfig`]) and
//! `[exempt]`; the rules and their messages are `gputokens::admission`'s.
//!
//! For a GPU job, in order: exempt users, accounts and QOS pass untouched; `max_job_duration`
//! refuses a longer `--time` or gives an untimed job the maximum; with the balances unavailable
//! `on_error` decides; at or below the floor the job is refused; `max_gpus_per_user` and the
//! estimate (`mode = "estimate"`) count what the user's running and pending GPU jobs hold and can
//! cost; in overdraft the job is deprioritized; `--gpu-tokens-estimate` adds the job's maximum cost
//! to the message.

use std::ffi::c_int;

use chrono::NaiveDate;
use gputokens::admission::{self, Decision, JobEstimate, TimeCheck};
use gputokens::config::Exempt;
use gputokens::estimate::{array_task_count, requested_milli, total_milli, Commitment, JobShape};
use gputokens::plugin_config::{Deprioritize, Mode, PluginConfig, MAX_NICE};
use gputokens::request::{GpuRequest, TresPer};
use gputokens::slurm::partitions::{limit_for_untimed, max_time};
use gputokens::tres::{Sharing, MILLI};

use crate::bindings::{ESLURM_ACCOUNTING_POLICY, INFINITE, NICE_OFFSET, NO_VAL, NO_VAL16};
use crate::ffi::Level;
use crate::watch::{Balances, View};

/// The fields of a job description the plugin reads (copied out by `ffi::read_job`). Numbers are
/// raw: NO_VAL (NO_VAL16) = not given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    /// In an update: the job it changes (the number that `scontrol update jobid=` starts with: a job,
    /// an array job or a heterogeneous job); None at submission.
    pub job_id: Option<u32>,
    /// The job's owner; NO_VAL when not set (e.g. in most update requests).
    pub user_id: u32,
    /// NICE_OFFSET + nice.
    pub nice: u32,
    pub tres_per_job: Option<String>,
    pub tres_per_node: Option<String>,
    pub tres_per_task: Option<String>,
    pub tres_per_socket: Option<String>,
    /// Minutes; INFINITE = `--time=UNLIMITED`.
    pub time_limit: u32,
    /// A comma list; None = the default partition.
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub min_nodes: u32,
    pub num_tasks: u32,
    pub ntasks_per_node: u16,
    pub sockets_per_node: u16,
    /// `--array`, e.g. `0-99%4`.
    pub array_inx: Option<String>,
    /// `--gpu-tokens-estimate` (the SPANK plugin puts `GPUTOKENS_ESTIMATE=1` in the job's SPANK environment).
    pub wants_estimate: bool,
}

impl Default for JobRequest {
    fn default() -> Self {
        JobRequest {
            job_id: None,
            user_id: NO_VAL,
            nice: NO_VAL,
            tres_per_job: None,
            tres_per_node: None,
            tres_per_task: None,
            tres_per_socket: None,
            time_limit: NO_VAL,
            partition: None,
            account: None,
            qos: None,
            min_nodes: NO_VAL,
            num_tasks: NO_VAL,
            ntasks_per_node: NO_VAL16 as u16,
            sockets_per_node: NO_VAL16 as u16,
            array_inx: None,
            wants_estimate: false,
        }
    }
}

impl JobRequest {
    fn gpus(&self) -> Result<GpuRequest, gputokens::request::RequestError> {
        GpuRequest::parse(&TresPer {
            job: self.tres_per_job.as_deref(),
            node: self.tres_per_node.as_deref(),
            task: self.tres_per_task.as_deref(),
            socket: self.tres_per_socket.as_deref(),
        })
    }

    /// The GPU request when the job asks for GPUs. A GPU entry that cannot be read counts as a
    /// request of nothing countable (Slurm will judge the syntax; the balance rule must not be
    /// skipped because of it).
    pub(crate) fn gpu_request(&self, log: &mut dyn FnMut(Level, String)) -> Option<GpuRequest> {
        match self.gpus() {
            Ok(request) => request.has_gpus().then_some(request),
            Err(e) => {
                log(Level::Verbose, format!("{e}; treated as a GPU job"));
                Some(GpuRequest::default())
            }
        }
    }

    /// `--time` in seconds; None when not given or UNLIMITED (the partition's limit applies).
    pub(crate) fn time_limit_secs(&self) -> Option<u64> {
        (self.time_limit != NO_VAL && self.time_limit != INFINITE).then_some(self.time_limit as u64 * 60)
    }

    fn shape(&self) -> JobShape {
        let given = |n: u32| (n != NO_VAL && n > 0).then_some(n as u64);
        let given16 = |n: u16| (n as u32 != NO_VAL16 && n > 0).then_some(n as u64);
        let nodes = given(self.min_nodes).unwrap_or(1);
        JobShape {
            nodes,
            tasks: given(self.num_tasks).or_else(|| given16(self.ntasks_per_node).map(|t| t * nodes)).unwrap_or(1),
            sockets_per_node: given16(self.sockets_per_node).unwrap_or(1),
            array_tasks: self.array_inx.as_deref().and_then(array_task_count).unwrap_or(1),
        }
    }
}

/// Changes made to an accepted job (raw Slurm values).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub nice: Option<u32>,
    pub site_factor: Option<u32>,
    pub qos: Option<String>,
    /// Minutes.
    pub time_limit: Option<u32>,
}

/// What slurmctld is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Accept with `changes`, telling the submitter `message` if any.
    Accept { changes: Changes, message: Option<String> },
    /// Refuse with an `ESLURM_*` code and a message for the submitter.
    Reject { code: c_int, message: String },
}

impl Verdict {
    pub fn accept() -> Verdict {
        Verdict::Accept { changes: Changes::default(), message: None }
    }

    pub(crate) fn reject(message: String) -> Verdict {
        Verdict::Reject { code: ESLURM_ACCOUNTING_POLICY as c_int, message }
    }
}

/// A submission's or an update's verdict, and what the admitted GPU job (or the accepted update) adds
/// to its owner's commitments until the next snapshot's queue includes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub verdict: Verdict,
    pub admitted: Option<(u32, Commitment)>,
}

/// The plugin's settings and the current view, as `job_submit` sees them.
pub struct Context<'a> {
    pub view: &'a View,
    pub config: &'a PluginConfig,
    pub exempt: &'a Exempt,
    /// Unix time.
    pub now: i64,
    /// The local date (for "about N days").
    pub today: NaiveDate,
    /// slurmctld's own uid (the SlurmUser): its updates, like root's, are an administrator's.
    pub slurm_uid: u32,
}

impl Context<'_> {
    /// The balances when they are usable (not missing, unreadable, corrupt or stale).
    pub(crate) fn balances(&self) -> Option<&Balances> {
        match self.view {
            View::Ready(b)
                if self.config.max_snapshot_age.is_none_or(|max| b.age(self.now) <= max.as_secs() as i64) =>
            {
                Some(b)
            }
            _ => None,
        }
    }
}

/// `job_submit`. `local` gives what the plugin admitted for a uid since the snapshot's queue was read.
pub fn on_submit(
    ctx: &Context,
    job: &JobRequest,
    submit_uid: u32,
    local: &dyn Fn(u32) -> Commitment,
    log: &mut dyn FnMut(Level, String),
) -> Outcome {
    let pass = Outcome { verdict: Verdict::accept(), admitted: None };
    let Some(request) = job.gpu_request(log) else { return pass };
    let balances = ctx.balances();
    let Owner { uid, who, exempt } = owner(ctx.exempt, balances, job, submit_uid);
    if exempt {
        log(Level::Verbose, format!("a GPU job of {who} is exempt: not checked"));
        return pass;
    }

    let mut changes = Changes::default();
    let mut messages = Vec::new();
    let partitions = balances.map(|b| b.snapshot.partitions.as_slice()).unwrap_or_default();
    // Without --time the partition's DefaultTime (else MaxTime) applies; --time=UNLIMITED gets MaxTime.
    let untimed = if job.time_limit == INFINITE {
        max_time(partitions, job.partition.as_deref())
    } else {
        limit_for_untimed(partitions, job.partition.as_deref())
    };
    let mut seconds = job.time_limit_secs().or(untimed);
    if let Some(max) = ctx.config.max_job_duration {
        match admission::check_duration(job.time_limit_secs(), untimed, max.as_secs()) {
            TimeCheck::Fine => {}
            TimeCheck::Limit { seconds: max, message } => {
                changes.time_limit = Some(limit_minutes(max));
                seconds = Some(max);
                messages.push(message);
            }
            TimeCheck::Reject { message } => {
                log(Level::Info, format!("refused a GPU job of {who}: its time limit is above max_job_duration"));
                return Outcome { verdict: Verdict::reject(message), admitted: None };
            }
        }
    }

    let Some(balances) = balances else {
        // Missing, unreadable, corrupt or stale: logged by the watcher when it began.
        return match admission::when_unavailable(ctx.config.on_error) {
            Decision::Reject { message } => Outcome { verdict: Verdict::reject(message), admitted: None },
            _ => Outcome { verdict: accepted(changes, messages), admitted: None },
        };
    };
    let (_, balance) = balances.of(uid);
    let rules = balances.rules();
    let decision = admission::decide(balance, rules, ctx.today, &ctx.config.deprioritize);
    if let Decision::Reject { message } = decision {
        log(
            Level::Info,
            format!("refused a GPU job of {who}: balance {balance} is at or below the floor {}", rules.floor),
        );
        return Outcome { verdict: Verdict::reject(message), admitted: None };
    }

    let seconds = seconds.unwrap_or(ctx.config.default_time_limit.as_secs());
    let estimate = match job_estimate(&request, job, seconds, balances) {
        Ok(estimate) => estimate,
        Err(message) => {
            log(Level::Info, format!("refused a GPU job of {who}: its request is more than can be counted"));
            return Outcome { verdict: Verdict::reject(message), admitted: None };
        }
    };
    let committed = {
        let mut c = balances.committed(uid);
        c += local(uid);
        c
    };
    if let Some(max) = ctx.config.max_gpus_per_user {
        let asked = total_milli(&estimate.gpus);
        if committed.milli_gpus.saturating_add(asked) > max as u64 * MILLI {
            log(Level::Info, format!("refused a GPU job of {who}: above max_gpus_per_user ({max})"));
            let message = admission::gpu_limit_message(max, committed.milli_gpus, asked);
            return Outcome { verdict: Verdict::reject(message), admitted: None };
        }
    }
    if ctx.config.mode == Mode::Estimate {
        if let Some(message) = admission::check_estimate(balance, committed.max_cost, &estimate, rules) {
            log(
                Level::Info,
                format!(
                    "refused a GPU job of {who}: its maximum cost {} would take {balance} below the floor",
                    estimate.cost
                ),
            );
            return Outcome { verdict: Verdict::reject(message), admitted: None };
        }
    }

    if let Decision::AcceptDeprioritized { how, message } = decision {
        log(Level::Verbose, format!("a GPU job of {who} in overdraft (balance {balance}): {how:?}"));
        match how {
            Deprioritize::Nice(n) => changes.nice = (n > 0).then(|| raised_nice(job.nice, n)),
            Deprioritize::SiteFactor(f) => changes.site_factor = Some(site_factor(f)),
            Deprioritize::Qos(q) => changes.qos = Some(q),
        }
        messages.push(message);
    }
    if job.wants_estimate {
        messages.push(admission::estimate_message(balance, committed.max_cost, &estimate));
    }
    let counts = ctx.config.mode == Mode::Estimate || ctx.config.max_gpus_per_user.is_some();
    let admitted =
        counts.then_some((uid, Commitment { milli_gpus: total_milli(&estimate.gpus), max_cost: estimate.cost }));
    Outcome { verdict: accepted(changes, messages), admitted }
}

pub(crate) fn accepted(changes: Changes, messages: Vec<String>) -> Verdict {
    let message = (!messages.is_empty()).then(|| messages.join("\n"));
    Verdict::Accept { changes, message }
}

/// The job's estimate, or the refusal of a request too large to count.
fn job_estimate(
    request: &GpuRequest,
    job: &JobRequest,
    seconds: u64,
    balances: &Balances,
) -> Result<JobEstimate, String> {
    let sharing: Sharing = balances.snapshot.sharing;
    let gpus = requested_milli(request, &job.shape(), sharing);
    JobEstimate::of(gpus, seconds, &balances.snapshot.prices)
}

/// `seconds` as a job description's time limit in minutes, below Slurm's NO_VAL and INFINITE.
pub(crate) fn limit_minutes(seconds: u64) -> u32 {
    u32::try_from(seconds / 60).unwrap_or(u32::MAX).min(NO_VAL - 1)
}

/// The job's owner as the rules see them.
pub(crate) struct Owner {
    pub uid: u32,
    /// `alice (uid 1001)`, or `uid 1001` when the name is not known, for the log.
    pub who: String,
    pub exempt: bool,
}

/// The owner is the description's `user_id`, else (NO_VAL, as in most updates) the submitter.
pub(crate) fn owner(exempt: &Exempt, balances: Option<&Balances>, job: &JobRequest, submit_uid: u32) -> Owner {
    let uid = if job.user_id == NO_VAL { submit_uid } else { job.user_id };
    let name = balances.and_then(|b| b.names.get(&uid)).map(String::as_str);
    let who = name.map_or(format!("uid {uid}"), |n| format!("{n} (uid {uid})"));
    let exempt = is_exempt(exempt, name, job, balances.and_then(|b| b.default_account(uid)));
    Owner { uid, who, exempt }
}

/// An exempt user (by name), account (the job's, else the user's default) or QOS (the job's).
fn is_exempt(exempt: &Exempt, name: Option<&str>, job: &JobRequest, default_account: Option<&str>) -> bool {
    name.is_some_and(|n| exempt.users.iter().any(|u| u == n))
        || job.account.as_deref().or(default_account).is_some_and(|a| exempt.accounts.iter().any(|e| e == a))
        || job.qos.as_deref().is_some_and(|q| exempt.qos.iter().any(|e| e == q))
}

/// The raw nice value after adding `increment` to what the job asked for (NO_VAL = nice 0),
/// capped at Slurm's maximum.
pub fn raised_nice(raw: u32, increment: u32) -> u32 {
    let offset = NICE_OFFSET as i64;
    let current = if raw == NO_VAL { 0 } else { raw as i64 - offset };
    let wanted = (current + increment as i64).clamp(-(MAX_NICE as i64), MAX_NICE as i64);
    (offset + wanted) as u32
}

/// The raw site factor (NICE_OFFSET + factor, as slurmctld stores it).
pub fn site_factor(factor: i64) -> u32 {
    (NICE_OFFSET as i64 + factor.clamp(-(MAX_NICE as i64), MAX_NICE as i64)) as u32
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::watch::Problem;
    use gputokens::admission::OnError;
    use gputokens::policy::BucketRules;
    use gputokens::pricing::PriceTable;
    use gputokens::slurm::partitions::Partition;
    use gputokens::snapshot::{QueueSummary, Snapshot};
    use gputokens::Tokens;
    use std::collections::HashMap;
    use std::time::Duration;

    pub(crate) const NOW: i64 = 1_795_430_400;

    pub(crate) fn snapshot() -> Snapshot {
        let rules = BucketRules { monthly: Tokens::ZERO, ..BucketRules::default() };
        let mut snap = Snapshot::new(NOW - 10, rules);
        snap.balances = HashMap::from([
            ("alice".to_string(), Tokens::from_micro(-10_400_000)),
            ("bob".to_string(), Tokens::whole(50)),
            ("carol".to_string(), Tokens::from_micro(-3_500_000)),
        ]);
        let prices = [("rtx2080".to_string(), Tokens::from_micro(500_000)), ("a6000".to_string(), Tokens::whole(4))];
        snap.prices = PriceTable::new(prices.into(), None);
        snap.partitions = vec![
            Partition { name: "gpu".into(), default: true, default_time: Some(3600), max_time: None },
            Partition { name: "long".into(), default: false, default_time: None, max_time: None },
        ];
        snap.default_accounts = HashMap::from([("bob".to_string(), "physics".to_string())]);
        let committed = |g, t| gputokens::estimate::Commitment { milli_gpus: g, max_cost: Tokens::whole(t) };
        snap.queue = Some(QueueSummary {
            as_of: NOW - 10,
            committed: HashMap::from([("bob".to_string(), committed(2000, 16))]),
            ..Default::default()
        });
        snap
    }

    pub(crate) fn view_of(snapshot: Snapshot) -> View {
        let names =
            HashMap::from([(1001, "alice".to_string()), (1002, "bob".to_string()), (1003, "carol".to_string())]);
        View::Ready(Balances { snapshot: std::sync::Arc::new(snapshot), names, mapped: 3 })
    }

    pub(crate) fn view() -> View {
        view_of(snapshot())
    }

    pub(crate) fn config() -> PluginConfig {
        PluginConfig::default()
    }

    static NO_EXEMPTIONS: Exempt = Exempt { users: Vec::new(), accounts: Vec::new(), qos: Vec::new() };

    pub(crate) fn ctx<'a>(view: &'a View, config: &'a PluginConfig) -> Context<'a> {
        exempting(view, config, &NO_EXEMPTIONS)
    }

    fn exempting<'a>(view: &'a View, config: &'a PluginConfig, exempt: &'a Exempt) -> Context<'a> {
        let today = NaiveDate::from_ymd_opt(2026, 11, 10).unwrap();
        Context { view, config, exempt, now: NOW, today, slurm_uid: 64030 }
    }

    fn gpu_job(user_id: u32) -> JobRequest {
        JobRequest { user_id, tres_per_node: Some("gres:gpu:a6000:1".into()), ..Default::default() }
    }

    pub(crate) fn no_local(_: u32) -> Commitment {
        Commitment::default()
    }

    fn submit(ctx: &Context, job: &JobRequest) -> (Verdict, Vec<String>) {
        let mut lines = Vec::new();
        let s = on_submit(ctx, job, job.user_id, &no_local, &mut |l, m| lines.push(format!("{l:?}: {m}")));
        (s.verdict, lines)
    }

    pub(crate) fn message(v: &Verdict) -> String {
        match v {
            Verdict::Accept { message, .. } => message.clone().unwrap_or_default(),
            Verdict::Reject { message, .. } => message.clone(),
        }
    }

    #[test]
    fn cpu_only_jobs_pass_untouched_whatever_the_balance() {
        let (v, c) = (view(), config());
        let cpu = JobRequest { user_id: 1001, ..Default::default() };
        assert_eq!(submit(&ctx(&v, &c), &cpu).0, Verdict::accept());
        let other = JobRequest { tres_per_node: Some("gres:nic:1".into()), ..cpu.clone() };
        assert_eq!(submit(&ctx(&v, &c), &other).0, Verdict::accept());
        let shard = JobRequest { tres_per_node: Some("gres:shard:1".into()), ..cpu };
        assert!(matches!(submit(&ctx(&v, &c), &shard).0, Verdict::Reject { .. }), "a GPU share is a GPU request");
        let broken = View::Unavailable(Problem::Missing);
        let strict = PluginConfig { on_error: OnError::Reject, ..config() };
        assert_eq!(
            submit(&ctx(&broken, &strict), &JobRequest { user_id: 1001, ..Default::default() }).0,
            Verdict::accept()
        );
    }

    #[test]
    fn at_the_floor_gpu_jobs_are_refused_in_every_form() {
        let (v, c) = (view(), config());
        for (field, text) in [
            ("node", "gres:gpu:a6000:1"),
            ("job", "gres:gpu:1"),
            ("task", "gres/gpu:1"),
            ("socket", "gres/gpu:rtx3090:1"),
        ] {
            let mut job = JobRequest { user_id: 1001, ..Default::default() };
            let slot = match field {
                "node" => &mut job.tres_per_node,
                "job" => &mut job.tres_per_job,
                "task" => &mut job.tres_per_task,
                _ => &mut job.tres_per_socket,
            };
            *slot = Some(text.into());
            let (verdict, log) = submit(&ctx(&v, &c), &job);
            let Verdict::Reject { code, message } = verdict else { panic!("{field}: {verdict:?}") };
            assert_eq!(code, 2050);
            assert!(message.starts_with("gputokens: your GPU token balance is -10.4 (floor -10)"), "{message}");
            assert_eq!(
                log,
                ["Info: refused a GPU job of alice (uid 1001): balance -10.4 is at or below the floor -10"]
            );
        }
    }

    #[test]
    fn overdraft_lowers_priority_the_configured_way_and_tells_the_user() {
        let v = view();
        let c = config();
        let (verdict, _) = submit(&ctx(&v, &c), &gpu_job(1003));
        let Verdict::Accept { changes, message } = verdict else { panic!("{verdict:?}") };
        assert_eq!(changes, Changes { nice: Some(NICE_OFFSET + 10_000), ..Default::default() });
        assert!(message.unwrap().contains("-3.5 (below 0)"));
        let asked = JobRequest { nice: NICE_OFFSET + 500, ..gpu_job(1003) };
        let Verdict::Accept { changes, .. } = submit(&ctx(&v, &c), &asked).0 else { panic!() };
        assert_eq!(changes.nice, Some(NICE_OFFSET + 10_500));

        let site = PluginConfig { deprioritize: Deprioritize::SiteFactor(-7000), ..config() };
        let Verdict::Accept { changes, message } = submit(&ctx(&v, &site), &gpu_job(1003)).0 else { panic!() };
        assert_eq!(changes, Changes { site_factor: Some(NICE_OFFSET - 7000), ..Default::default() });
        assert!(message.unwrap().contains("(site factor -7000)"));
        let qos = PluginConfig { deprioritize: Deprioritize::Qos("overdraft".into()), ..config() };
        let Verdict::Accept { changes, .. } = submit(&ctx(&v, &qos), &gpu_job(1003)).0 else { panic!() };
        assert_eq!(changes, Changes { qos: Some("overdraft".into()), ..Default::default() });
        let quiet = PluginConfig { deprioritize: Deprioritize::Nice(0), ..config() };
        let Verdict::Accept { changes, message } = submit(&ctx(&v, &quiet), &gpu_job(1003)).0 else { panic!() };
        assert_eq!((changes, message.is_some()), (Changes::default(), true), "nice_increment 0: only told");
    }

    #[test]
    fn positive_and_unknown_users_pass() {
        let (v, c) = (view(), config());
        assert_eq!(submit(&ctx(&v, &c), &gpu_job(1002)).0, Verdict::accept());
        assert_eq!(submit(&ctx(&v, &c), &gpu_job(4242)).0, Verdict::accept(), "not in the snapshot: initial 100");
    }

    #[test]
    fn the_owner_is_the_submit_uid_when_the_description_has_none() {
        let (v, c) = (view(), config());
        let job = gpu_job(NO_VAL);
        let mut log = |_: Level, _: String| {};
        assert!(matches!(on_submit(&ctx(&v, &c), &job, 1001, &no_local, &mut log).verdict, Verdict::Reject { .. }));
        assert_eq!(on_submit(&ctx(&v, &c), &job, 1002, &no_local, &mut log).verdict, Verdict::accept());
    }

    #[test]
    fn unavailable_or_stale_balances_follow_on_error() {
        let v = view();
        let c = config();
        let stale = Context { now: NOW + 7200, ..ctx(&v, &c) };
        assert_eq!(submit(&stale, &gpu_job(1001)).0, Verdict::accept(), "stale + accept: no check");
        let strict = PluginConfig { on_error: OnError::Reject, ..config() };
        let stale_strict = Context { now: NOW + 7200, ..ctx(&v, &strict) };
        assert!(matches!(submit(&stale_strict, &gpu_job(1002)).0, Verdict::Reject { code: 2050, .. }));
        let never = PluginConfig { max_snapshot_age: None, ..config() };
        let no_limit = Context { now: NOW + 1_000_000, ..ctx(&v, &never) };
        assert!(matches!(submit(&no_limit, &gpu_job(1001)).0, Verdict::Reject { .. }), "never stale: still checked");
        for problem in [Problem::Missing, Problem::Corrupt("x".into()), Problem::Unreadable("y".into())] {
            let broken = View::Unavailable(problem);
            assert_eq!(submit(&ctx(&broken, &c), &gpu_job(1001)).0, Verdict::accept());
            let msg = message(&submit(&ctx(&broken, &strict), &gpu_job(1002)).0);
            assert!(msg.contains("balances are unavailable"), "{msg}");
        }
    }

    #[test]
    fn an_unreadable_gpu_entry_counts_as_a_gpu_request() {
        let (v, c) = (view(), config());
        let job = JobRequest { tres_per_node: Some("gres:gpu:a6000:lots".into()), ..gpu_job(1001) };
        let (verdict, log) = submit(&ctx(&v, &c), &job);
        assert!(matches!(verdict, Verdict::Reject { .. }));
        assert!(log[0].contains("cannot read the GPU request 'gres:gpu:a6000:lots'"), "{log:?}");
    }

    #[test]
    fn exempt_users_accounts_and_qos_are_not_checked() {
        let v = view();
        let c = config();
        let by_user = Exempt { users: vec!["alice".into()], ..Default::default() };
        let (verdict, log) = submit(&exempting(&v, &c, &by_user), &gpu_job(1001));
        assert_eq!(verdict, Verdict::accept());
        assert_eq!(log, ["Verbose: a GPU job of alice (uid 1001) is exempt: not checked"]);
        let by_account = Exempt { accounts: vec!["ops".into()], ..Default::default() };
        assert!(matches!(submit(&exempting(&v, &c, &by_account), &gpu_job(1001)).0, Verdict::Reject { .. }));
        let named = JobRequest { account: Some("ops".into()), ..gpu_job(1001) };
        assert_eq!(submit(&exempting(&v, &c, &by_account), &named).0, Verdict::accept(), "the job's -A");
        let physics = Exempt { accounts: vec!["physics".into()], ..Default::default() };
        let one_gpu = PluginConfig { max_gpus_per_user: Some(1), ..config() };
        assert_eq!(
            submit(&exempting(&v, &one_gpu, &physics), &gpu_job(1002)).0,
            Verdict::accept(),
            "bob's default account"
        );
        let by_qos = Exempt { qos: vec!["urgent".into()], ..Default::default() };
        let urgent = JobRequest { qos: Some("urgent".into()), ..gpu_job(1001) };
        assert_eq!(submit(&exempting(&v, &c, &by_qos), &urgent).0, Verdict::accept());
    }

    #[test]
    fn max_job_duration_refuses_longer_jobs_and_limits_untimed_ones() {
        let v = view();
        let c = PluginConfig { max_job_duration: Some(Duration::from_secs(2 * 3600)), ..config() };
        let long = JobRequest { time_limit: 180, ..gpu_job(1002) };
        let (verdict, log) = submit(&ctx(&v, &c), &long);
        assert!(message(&verdict).starts_with("gputokens: GPU jobs may run for at most 2:00:00 here"), "{verdict:?}");
        assert_eq!(log, ["Info: refused a GPU job of bob (uid 1002): its time limit is above max_job_duration"]);
        assert_eq!(submit(&ctx(&v, &c), &JobRequest { time_limit: 120, ..gpu_job(1002) }).0, Verdict::accept());
        assert_eq!(submit(&ctx(&v, &c), &gpu_job(1002)).0, Verdict::accept(), "the gpu partition gives 1 h");
        let untimed_long = JobRequest { partition: Some("long".into()), ..gpu_job(1002) };
        let Verdict::Accept { changes, message } = submit(&ctx(&v, &c), &untimed_long).0 else { panic!() };
        assert_eq!(changes.time_limit, Some(120));
        assert!(message.unwrap().contains("it was given the longest allowed, 2:00:00"));
        let unlimited = JobRequest { time_limit: INFINITE, ..gpu_job(1002) };
        let Verdict::Accept { changes, .. } = submit(&ctx(&v, &c), &unlimited).0 else { panic!() };
        assert_eq!(changes.time_limit, Some(120), "--time=UNLIMITED gets the maximum too");
        let cpu = JobRequest { time_limit: 10_000, user_id: 1002, ..Default::default() };
        assert_eq!(submit(&ctx(&v, &c), &cpu).0, Verdict::accept(), "CPU jobs are not limited");
    }

    #[test]
    fn max_gpus_per_user_counts_the_queue_and_what_was_admitted_since() {
        let v = view();
        let c = PluginConfig { max_gpus_per_user: Some(4), ..config() };
        let two = JobRequest { tres_per_node: Some("gres:gpu:a6000:2".into()), ..gpu_job(1002) };
        let mut log = |_: Level, _: String| {};
        let s = on_submit(&ctx(&v, &c), &two, 1002, &no_local, &mut log);
        assert_eq!(s.verdict, Verdict::accept(), "bob holds 2 in the queue: 2 + 2 = 4");
        assert_eq!(s.admitted, Some((1002, Commitment { milli_gpus: 2000, max_cost: Tokens::whole(8) })));
        let one_more = |_: u32| Commitment { milli_gpus: 1000, max_cost: Tokens::ZERO };
        let s = on_submit(&ctx(&v, &c), &two, 1002, &one_more, &mut log);
        assert_eq!(
            message(&s.verdict),
            "gputokens: you may hold at most 4 GPUs in running and pending jobs together; you hold 3 and this job \
             asks for 2. Submit it when some of your GPU jobs have finished (squeue --me)."
        );
        assert_eq!(s.admitted, None);
        let array =
            JobRequest { array_inx: Some("1-5".into()), tres_per_node: Some("gres:gpu:1".into()), ..gpu_job(4242) };
        assert!(matches!(on_submit(&ctx(&v, &c), &array, 4242, &no_local, &mut log).verdict, Verdict::Reject { .. }));
        assert_eq!(
            on_submit(&ctx(&v, &config()), &two, 1002, &no_local, &mut log).admitted,
            None,
            "no limit: no tally"
        );
    }

    #[test]
    fn the_estimate_refuses_what_could_take_the_balance_below_the_floor() {
        let v = view();
        let c = PluginConfig { mode: Mode::Estimate, ..config() };
        let mut log = |_: Level, _: String| {};
        // bob: 50, queue can cost 16; 4 a6000 × 2 h × 4 = 32 → 50 - 16 - 32 = 2: fine.
        let job = JobRequest { tres_per_node: Some("gres:gpu:a6000:4".into()), time_limit: 120, ..gpu_job(1002) };
        let s = on_submit(&ctx(&v, &c), &job, 1002, &no_local, &mut log);
        assert_eq!(s.verdict, Verdict::accept());
        assert_eq!(s.admitted, Some((1002, Commitment { milli_gpus: 4000, max_cost: Tokens::whole(32) })));
        // Admitted once more before the queue shows it: 50 - 16 - 32 - 32 = -30.
        let again = |_: u32| Commitment { milli_gpus: 4000, max_cost: Tokens::whole(32) };
        let s = on_submit(&ctx(&v, &c), &job, 1002, &again, &mut log);
        let refused = message(&s.verdict);
        assert!(
            refused.starts_with(
                "gputokens: this job can cost up to 32 tokens (4 a6000 GPUs for 2:00:00); your GPU token balance is 50 \
                 and your running and pending GPU jobs can cost up to 48 more, which could take it to -30"
            ),
            "{refused}"
        );
        // Untimed: the partition's DefaultTime (1 h) → 16; with none, default_time_limit (24 h).
        let untimed = JobRequest { tres_per_node: Some("gres:gpu:a6000:4".into()), ..gpu_job(1002) };
        assert_eq!(
            on_submit(&ctx(&v, &c), &untimed, 1002, &no_local, &mut log).admitted.unwrap().1.max_cost,
            Tokens::whole(16)
        );
        let long = JobRequest { partition: Some("long".into()), ..untimed };
        assert!(matches!(on_submit(&ctx(&v, &c), &long, 1002, &no_local, &mut log).verdict, Verdict::Reject { .. }));
        // Untyped GPUs are priced at the highest price.
        let any = JobRequest {
            tres_per_job: Some("gres:gpu:12".into()),
            tres_per_node: None,
            time_limit: 60,
            ..gpu_job(1002)
        };
        let s = on_submit(&ctx(&v, &c), &any, 1002, &no_local, &mut log);
        assert!(message(&s.verdict).contains("up to 48 tokens (12 GPUs of any type for 1:00:00)"), "{:?}", s.verdict);
        assert_eq!(on_submit(&ctx(&v, &config()), &long, 1002, &no_local, &mut log).verdict, Verdict::accept());
    }

    #[test]
    fn a_request_too_large_to_count_is_refused_not_priced_cheap() {
        let v = view();
        for c in [config(), PluginConfig { mode: Mode::Estimate, max_gpus_per_user: Some(4), ..config() }] {
            let huge = JobRequest {
                tres_per_job: Some("gres:gpu:4294967295".into()),
                tres_per_node: None,
                time_limit: INFINITE,
                ..gpu_job(1002)
            };
            let (verdict, log) = submit(&ctx(&v, &c), &huge);
            let Verdict::Reject { code: 2050, message } = verdict else { panic!("{verdict:?}") };
            assert!(message.starts_with("gputokens: this job asks for 4294967295 GPUs of any type for "), "{message}");
            assert!(message.contains("more than gputokens can count (at most 1000000 GPUs in one job"), "{message}");
            assert_eq!(log, ["Info: refused a GPU job of bob (uid 1002): its request is more than can be counted"]);
            // Counts that wrap a u64 many times over, per task of a huge array: still refused.
            let wraps = JobRequest {
                tres_per_task: Some("gres/gpu:a6000:99999999999999999999t".into()),
                num_tasks: u32::MAX - 2,
                array_inx: Some("0-4294967294".into()),
                ..gpu_job(1002)
            };
            assert!(message_of_refusal(&ctx(&v, &c), &wraps).contains("more than gputokens can count"));
        }
        assert_eq!(limit_minutes(u64::MAX), NO_VAL - 1, "a huge max_job_duration never wraps to a short limit");
        assert_eq!(limit_minutes(7200), 120);
    }

    fn message_of_refusal(ctx: &Context, job: &JobRequest) -> String {
        match submit(ctx, job).0 {
            Verdict::Reject { message, .. } => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gpu_tokens_estimate_tells_the_most_a_job_can_cost() {
        let v = view();
        let c = config();
        let job = JobRequest { time_limit: 90, wants_estimate: true, ..gpu_job(1002) };
        let Verdict::Accept { changes, message: told } = submit(&ctx(&v, &c), &job).0 else { panic!() };
        assert_eq!(changes, Changes::default());
        assert_eq!(
            told.unwrap(),
            "gputokens: this job can cost up to 6 tokens (1 a6000 GPU for 1:30:00); your GPU token balance is 50; \
             your running and pending GPU jobs can cost up to 16 more."
        );
        let overdraft = JobRequest { time_limit: 60, wants_estimate: true, ..gpu_job(1003) };
        let text = message(&submit(&ctx(&v, &c), &overdraft).0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains("(below 0)") && lines[1].contains("can cost up to 4 tokens"), "{text}");
    }

    #[test]
    fn nice_and_site_factor_arithmetic() {
        assert_eq!(raised_nice(NO_VAL, 10_000), NICE_OFFSET + 10_000);
        assert_eq!(raised_nice(NICE_OFFSET, 0), NICE_OFFSET);
        assert_eq!(raised_nice(NICE_OFFSET - 100, 50), NICE_OFFSET - 50, "a negative nice (operators) is kept");
        assert_eq!(raised_nice(NICE_OFFSET + MAX_NICE - 1, 10), NICE_OFFSET + MAX_NICE, "capped");
        assert_eq!(site_factor(-10_000), NICE_OFFSET - 10_000);
        assert_eq!(site_factor(i64::MIN), NICE_OFFSET - MAX_NICE);
    }
}
