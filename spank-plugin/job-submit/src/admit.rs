//! What `job_submit` and `job_modify` decide, in safe code: the GPU request is read from the job
//! description's copy ([`JobRequest`]), the user's balance from the published [`View`], and the
//! decision itself is `gputokens::admission`'s.

use std::ffi::c_int;

use chrono::NaiveDate;
use gputokens::admission::{self, Decision, OnError};
use gputokens::request::{GpuRequest, TresPer};

use crate::bindings::{ESLURM_ACCOUNTING_POLICY, NICE_OFFSET, NO_VAL};
use crate::ffi::Level;
use crate::watch::View;
use gputokens::plugin_config::MAX_NICE;

/// The fields of a job description the plugin reads (copied out by `ffi::read_job`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobRequest {
    /// The job's owner; NO_VAL when not set (e.g. in most update requests).
    pub user_id: u32,
    /// Raw: NO_VAL = not given, else NICE_OFFSET + nice.
    pub nice: u32,
    pub tres_per_job: Option<String>,
    pub tres_per_node: Option<String>,
    pub tres_per_task: Option<String>,
    pub tres_per_socket: Option<String>,
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

    /// Whether the job asks for GPUs. A GPU entry that cannot be read counts as a request (Slurm
    /// will judge the syntax; the balance rule must not be skipped because of it).
    fn wants_gpus(&self, log: &mut dyn FnMut(Level, String)) -> bool {
        match self.gpus() {
            Ok(request) => request.has_gpus(),
            Err(e) => {
                log(Level::Verbose, format!("{e}; treated as a GPU job"));
                true
            }
        }
    }
}

/// What slurmctld is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Accept with the raw `nice` value to store and a message for the submitter.
    Deprioritize {
        nice: u32,
        message: String,
    },
    /// Refuse with an `ESLURM_*` code and a message for the submitter.
    Reject {
        code: c_int,
        message: String,
    },
}

/// The plugin's settings and the current view, as `job_submit` sees them.
pub struct Context<'a> {
    pub view: &'a View,
    pub on_error: OnError,
    pub nice_increment: u32,
    pub max_snapshot_age_secs: Option<i64>,
    /// Unix time.
    pub now: i64,
    /// The local date (for "about N days").
    pub today: NaiveDate,
}

/// `job_submit`: CPU-only jobs pass untouched; GPU jobs by the owner's balance.
pub fn on_submit(ctx: &Context, job: &JobRequest, submit_uid: u32, log: &mut dyn FnMut(Level, String)) -> Verdict {
    if !job.wants_gpus(log) {
        return Verdict::Accept;
    }
    let uid = if job.user_id == NO_VAL { submit_uid } else { job.user_id };
    match decide(ctx, uid, "a GPU job", log) {
        Decision::Accept => Verdict::Accept,
        Decision::AcceptDeprioritized { nice, message } => {
            Verdict::Deprioritize { nice: raised_nice(job.nice, nice), message }
        }
        Decision::Reject { message } => Verdict::Reject { code: ESLURM_ACCOUNTING_POLICY as c_int, message },
    }
}

/// `job_modify`: when the update asks for GPUs, the floor rule applies to the job's owner (slurmctld
/// fills in `user_id`). Changes made by root are not checked (an administrator may grant tokens
/// anyway). Overdraft does not change the nice value of a job already queued.
pub fn on_modify(ctx: &Context, job: &JobRequest, submit_uid: u32, log: &mut dyn FnMut(Level, String)) -> Verdict {
    if submit_uid == 0 || !job.wants_gpus(log) {
        return Verdict::Accept;
    }
    let uid = if job.user_id == NO_VAL { submit_uid } else { job.user_id };
    match decide(ctx, uid, "a GPU request in an update of a job", log) {
        Decision::Reject { message } => Verdict::Reject { code: ESLURM_ACCOUNTING_POLICY as c_int, message },
        Decision::Accept | Decision::AcceptDeprioritized { .. } => Verdict::Accept,
    }
}

/// The decision for `what` of user `uid`; refusals are logged (one line per refused job).
fn decide(ctx: &Context, uid: u32, what: &str, log: &mut dyn FnMut(Level, String)) -> Decision {
    let balances = match ctx.view {
        View::Ready(b) if fresh(ctx.max_snapshot_age_secs, b.age(ctx.now)) => b,
        // Missing, unreadable, corrupt or stale: logged by the watcher when it began.
        _ => return admission::when_unavailable(ctx.on_error),
    };
    let (name, balance) = balances.of(uid);
    let decision = admission::decide(balance, &balances.rules, ctx.today, ctx.nice_increment);
    let who = match name {
        Some(n) => format!("{n} (uid {uid})"),
        None => format!("uid {uid}"),
    };
    match &decision {
        Decision::Reject { .. } => log(
            Level::Info,
            format!("refused {what} of {who}: balance {balance} is at or below the floor {}", balances.rules.floor),
        ),
        Decision::AcceptDeprioritized { nice, .. } => {
            log(Level::Verbose, format!("{what} of {who} in overdraft (balance {balance}): nice +{nice}"))
        }
        Decision::Accept => {}
    }
    decision
}

/// No maximum age, or `age` (seconds) within it.
fn fresh(max_age: Option<i64>, age: i64) -> bool {
    match max_age {
        None => true,
        Some(max) => age <= max,
    }
}

/// The raw nice value after adding `increment` to what the job asked for (NO_VAL = nice 0),
/// capped at Slurm's maximum.
pub fn raised_nice(raw: u32, increment: u32) -> u32 {
    let offset = NICE_OFFSET as i64;
    let current = if raw == NO_VAL { 0 } else { raw as i64 - offset };
    let wanted = (current + increment as i64).clamp(-(MAX_NICE as i64), MAX_NICE as i64);
    (offset + wanted) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::{Balances, Problem, UserBalance};
    use gputokens::policy::BucketRules;
    use gputokens::Tokens;
    use std::collections::HashMap;

    const NOW: i64 = 1_795_430_400;

    fn view() -> View {
        let rules = BucketRules {
            initial: Tokens::whole(100),
            daily: Tokens::whole(1),
            monthly: Tokens::ZERO,
            cap: None,
            floor: Tokens::whole(-10),
        };
        let user = |name: &str, balance| UserBalance { name: name.into(), balance };
        let by_uid = HashMap::from([
            (1001, user("alice", Tokens::from_micro(-10_400_000))),
            (1002, user("bob", Tokens::whole(50))),
            (1003, user("carol", Tokens::from_micro(-3_500_000))),
        ]);
        View::Ready(Balances { generated: NOW - 10, rules, listed: by_uid.len(), by_uid })
    }

    fn ctx(view: &View) -> Context<'_> {
        Context {
            view,
            on_error: OnError::Accept,
            nice_increment: 10_000,
            max_snapshot_age_secs: Some(7200),
            now: NOW,
            today: NaiveDate::from_ymd_opt(2026, 11, 10).unwrap(),
        }
    }

    fn gpu_job(user_id: u32) -> JobRequest {
        JobRequest { user_id, nice: NO_VAL, tres_per_node: Some("gres:gpu:a6000:1".into()), ..Default::default() }
    }

    fn submit(ctx: &Context, job: &JobRequest) -> (Verdict, Vec<String>) {
        let mut lines = Vec::new();
        let v = on_submit(ctx, job, job.user_id, &mut |l, m| lines.push(format!("{l:?}: {m}")));
        (v, lines)
    }

    #[test]
    fn cpu_only_jobs_pass_untouched_whatever_the_balance() {
        let v = view();
        let cpu = JobRequest { user_id: 1001, nice: NO_VAL, ..Default::default() };
        assert_eq!(submit(&ctx(&v), &cpu).0, Verdict::Accept);
        let other = JobRequest { tres_per_node: Some("gres:nic:1".into()), ..cpu.clone() };
        assert_eq!(submit(&ctx(&v), &other).0, Verdict::Accept);
        let shard = JobRequest { tres_per_node: Some("gres:shard:1".into()), ..cpu };
        assert!(matches!(submit(&ctx(&v), &shard).0, Verdict::Reject { .. }), "a GPU share is a GPU request");
        let broken = View::Unavailable(Problem::Missing);
        let strict = Context { on_error: OnError::Reject, ..ctx(&broken) };
        assert_eq!(submit(&strict, &JobRequest { user_id: 1001, ..Default::default() }).0, Verdict::Accept);
    }

    #[test]
    fn at_the_floor_gpu_jobs_are_refused_in_every_form() {
        let v = view();
        for (field, text) in [
            ("node", "gres:gpu:a6000:1"),
            ("job", "gres:gpu:1"),
            ("task", "gres/gpu:1"),
            ("socket", "gres/gpu:rtx3090:1"),
        ] {
            let mut job = JobRequest { user_id: 1001, nice: NO_VAL, ..Default::default() };
            let slot = match field {
                "node" => &mut job.tres_per_node,
                "job" => &mut job.tres_per_job,
                "task" => &mut job.tres_per_task,
                _ => &mut job.tres_per_socket,
            };
            *slot = Some(text.into());
            let (verdict, log) = submit(&ctx(&v), &job);
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
    fn overdraft_raises_nice_and_tells_the_user() {
        let v = view();
        let (verdict, _) = submit(&ctx(&v), &gpu_job(1003));
        let Verdict::Deprioritize { nice, message } = verdict else { panic!("{verdict:?}") };
        assert_eq!(nice, NICE_OFFSET + 10_000);
        assert!(message.contains("-3.5 (below 0)"), "{message}");
        let asked = JobRequest { nice: NICE_OFFSET + 500, ..gpu_job(1003) };
        let Verdict::Deprioritize { nice, .. } = submit(&ctx(&v), &asked).0 else { panic!() };
        assert_eq!(nice, NICE_OFFSET + 10_500);
    }

    #[test]
    fn positive_and_unknown_users_pass() {
        let v = view();
        assert_eq!(submit(&ctx(&v), &gpu_job(1002)).0, Verdict::Accept);
        assert_eq!(submit(&ctx(&v), &gpu_job(4242)).0, Verdict::Accept, "not in the snapshot: initial 100");
    }

    #[test]
    fn the_owner_is_the_submit_uid_when_the_description_has_none() {
        let v = view();
        let job = gpu_job(NO_VAL);
        let mut log = |_: Level, _: String| {};
        assert!(matches!(on_submit(&ctx(&v), &job, 1001, &mut log), Verdict::Reject { .. }));
        assert_eq!(on_submit(&ctx(&v), &job, 1002, &mut log), Verdict::Accept);
    }

    #[test]
    fn unavailable_or_stale_balances_follow_on_error() {
        let v = view();
        let stale = Context { now: NOW + 7200, ..ctx(&v) };
        assert_eq!(submit(&stale, &gpu_job(1001)).0, Verdict::Accept, "stale + accept: no check");
        let stale_strict = Context { on_error: OnError::Reject, ..stale };
        assert!(matches!(submit(&stale_strict, &gpu_job(1002)).0, Verdict::Reject { code: 2050, .. }));
        let no_limit = Context { max_snapshot_age_secs: None, now: NOW + 1_000_000, ..ctx(&v) };
        assert!(matches!(submit(&no_limit, &gpu_job(1001)).0, Verdict::Reject { .. }), "never stale: still checked");
        for problem in [Problem::Missing, Problem::Corrupt("x".into()), Problem::Unreadable("y".into())] {
            let broken = View::Unavailable(problem);
            assert_eq!(submit(&ctx(&broken), &gpu_job(1001)).0, Verdict::Accept);
            let strict = Context { on_error: OnError::Reject, ..ctx(&broken) };
            let Verdict::Reject { message, .. } = submit(&strict, &gpu_job(1002)).0 else { panic!() };
            assert!(message.contains("balances are unavailable"), "{message}");
        }
    }

    #[test]
    fn an_unreadable_gpu_entry_counts_as_a_gpu_request() {
        let v = view();
        let job = JobRequest { tres_per_node: Some("gres:gpu:a6000:lots".into()), ..gpu_job(1001) };
        let (verdict, log) = submit(&ctx(&v), &job);
        assert!(matches!(verdict, Verdict::Reject { .. }));
        assert!(log[0].contains("cannot read the GPU request 'gres:gpu:a6000:lots'"), "{log:?}");
    }

    #[test]
    fn modify_applies_the_floor_rule_to_gpu_requests_only() {
        let v = view();
        let mut log = |_: Level, _: String| {};
        let update = JobRequest {
            user_id: NO_VAL,
            nice: NO_VAL,
            tres_per_node: Some("gres:gpu:2".into()),
            ..Default::default()
        };
        assert!(matches!(on_modify(&ctx(&v), &update, 1001, &mut log), Verdict::Reject { code: 2050, .. }));
        assert_eq!(on_modify(&ctx(&v), &update, 1003, &mut log), Verdict::Accept, "overdraft: no change on update");
        // slurmctld fills in the owner: the owner's balance counts, unless root makes the change.
        let owned = JobRequest { user_id: 1001, ..update.clone() };
        let mut lines = Vec::new();
        let verdict = on_modify(&ctx(&v), &owned, 1001, &mut |_, m| lines.push(m));
        assert!(matches!(verdict, Verdict::Reject { .. }));
        assert_eq!(
            lines,
            ["refused a GPU request in an update of a job of alice (uid 1001): balance -10.4 is at or below the floor -10"]
        );
        assert_eq!(on_modify(&ctx(&v), &owned, 0, &mut log), Verdict::Accept, "root is not checked");
        let time_only = JobRequest { user_id: NO_VAL, nice: NO_VAL, ..Default::default() };
        assert_eq!(on_modify(&ctx(&v), &time_only, 1001, &mut log), Verdict::Accept);
    }

    #[test]
    fn nice_arithmetic() {
        assert_eq!(raised_nice(NO_VAL, 10_000), NICE_OFFSET + 10_000);
        assert_eq!(raised_nice(NICE_OFFSET, 0), NICE_OFFSET);
        assert_eq!(raised_nice(NICE_OFFSET - 100, 50), NICE_OFFSET - 50, "a negative nice (operators) is kept");
        assert_eq!(raised_nice(NICE_OFFSET + MAX_NICE - 1, 10), NICE_OFFSET + MAX_NICE, "capped");
    }
}
