//! What `job_modify` decides: an update (`scontrol update jobid=N ...`) by the job's owner obeys the
//! same policy as a submission. The update holds only the fields being changed (slurmctld fills in
//! the owner), and 22.05 hands the plugin no readable job record, so what job N is comes from the
//! snapshot: every job pending when accountd last read the queue, with its shape and, for a GPU job,
//! what it asks for and can cost. A job not listed (submitted since the read, or running) may be a
//! GPU job and is judged as one; a listed CPU-only job is never touched, unless the update adds GPUs.
//!
//! For a (possible) GPU job of a user who is not exempt: a time limit above `max_job_duration` is
//! refused; at the floor, adding GPUs is refused; in overdraft, a nice value below `nice_increment`
//! (deprioritize = "nice") or another QOS than the overdraft QOS (deprioritize = "qos") is refused,
//! and an update that adds GPUs gets the penalty; more GPUs, time, nodes or tasks than
//! `max_gpus_per_user` and the estimate allow are refused. Updates by root and the SlurmUser
//! (slurmctld's own uid) are not checked.

use gputokens::admission::{self, Decision, JobEstimate};
use gputokens::estimate::{requested_milli, total_milli, Commitment, JobShape, MilliByType, PendingJob};
use gputokens::plugin_config::{Deprioritize, Mode};
use gputokens::request::GpuRequest;
use gputokens::slurm::partitions::max_time;
use gputokens::Tokens;

use crate::admit::{accepted, owner, site_factor, Changes, Context, JobRequest, Outcome, Owner, Verdict};
use crate::bindings::{INFINITE, NICE_OFFSET, NO_VAL, NO_VAL16};
use crate::ffi::Level;
use crate::watch::Balances;

/// `job_modify`. `local` gives what the plugin admitted for a uid since the snapshot's queue was read.
pub fn on_modify(
    ctx: &Context,
    job: &JobRequest,
    submit_uid: u32,
    local: &dyn Fn(u32) -> Commitment,
    log: &mut dyn FnMut(Level, String),
) -> Outcome {
    let pass = Outcome { verdict: Verdict::accept(), admitted: None };
    if submit_uid == 0 || submit_uid == ctx.slurm_uid {
        return pass;
    }
    let balances = ctx.balances();
    let Owner { uid, who, exempt } = owner(ctx.exempt, balances, job, submit_uid);
    if exempt {
        return pass;
    }
    let asked = job.gpu_request(log);
    let known = balances.and_then(|b| b.pending_job(job.job_id?));
    if asked.is_none() && known.is_some_and(|k| k.gpus.is_none()) {
        return pass; // a CPU-only job stays untouched
    }
    let what = job.job_id.map_or("a job".to_string(), |id| format!("job {id}"));
    let mut refuse = |reason: String, message: String| {
        log(Level::Info, format!("refused an update of {what} of {who}: {reason}"));
        Outcome { verdict: Verdict::reject(message), admitted: None }
    };

    if let (Some(max), true) = (ctx.config.max_job_duration, job.time_limit != NO_VAL) {
        if let Some(message) = admission::check_update_duration(job.time_limit_secs(), max.as_secs()) {
            return refuse("time limit above max_job_duration".into(), message);
        }
    }
    let Some(balances) = balances else {
        // Missing, unreadable, corrupt or stale: on_error decides what adds GPUs.
        return match (asked.is_some(), admission::when_unavailable(ctx.config.on_error)) {
            (true, Decision::Reject { message }) => refuse("balances unavailable".into(), message),
            _ => pass,
        };
    };
    let (_, balance) = balances.of(uid);
    let rules = balances.rules();
    let decision = admission::decide(balance, rules, ctx.today, &ctx.config.deprioritize);
    if let (Some(_), Decision::Reject { message }) = (&asked, &decision) {
        let reason = format!("it adds GPUs and balance {balance} is at or below the floor {}", rules.floor);
        return refuse(reason, message.clone());
    }
    if !matches!(decision, Decision::Accept) {
        if let Some((reason, kept)) = undoes_penalty(job, &ctx.config.deprioritize) {
            return refuse(
                format!("{reason} in overdraft (balance {balance})"),
                admission::penalty_kept_message(balance, &kept),
            );
        }
    }

    let mut admitted = None;
    let limited = ctx.config.mode == Mode::Estimate || ctx.config.max_gpus_per_user.is_some();
    if limited && (asked.is_some() || raises_shape_or_time(job)) {
        let Some(known) = known else {
            return refuse("not in the last queue read".into(), admission::unknown_job_message(&what));
        };
        let (old, new) = match before_and_after(ctx, balances, job, asked.as_ref(), known) {
            Ok(both) => both,
            Err(message) => return refuse("its request is more than can be counted".into(), message),
        };
        let held = {
            let mut c = balances.committed(uid);
            c += local(uid);
            Commitment {
                milli_gpus: c.milli_gpus.saturating_sub(old.milli_gpus),
                max_cost: (c.max_cost - old.max_cost).max(Tokens::ZERO),
            }
        };
        let asked_milli = total_milli(&new.gpus);
        if let Some(max) = ctx.config.max_gpus_per_user {
            if asked_milli > old.milli_gpus && held.milli_gpus.saturating_add(asked_milli) > max as u64 * 1000 {
                let message = admission::gpu_limit_message(max, held.milli_gpus, asked_milli);
                return refuse(format!("above max_gpus_per_user ({max})"), message);
            }
        }
        if ctx.config.mode == Mode::Estimate && new.cost > old.max_cost {
            if let Some(message) = admission::check_estimate(balance, held.max_cost, &new, rules) {
                let reason = format!("its maximum cost {} would take {balance} below the floor", new.cost);
                return refuse(reason, message);
            }
        }
        let grown = Commitment {
            milli_gpus: asked_milli.saturating_sub(old.milli_gpus),
            max_cost: (new.cost - old.max_cost).max(Tokens::ZERO),
        };
        admitted = (grown != Commitment::default()).then_some((uid, grown));
    }

    // GPUs added in overdraft: the update gets the penalty a submission would.
    let mut changes = Changes::default();
    let mut messages = Vec::new();
    if let (Some(_), Decision::AcceptDeprioritized { how, message }) = (&asked, decision) {
        match how {
            Deprioritize::Nice(n) if n > 0 && job.nice == NO_VAL => changes.nice = Some(NICE_OFFSET + n),
            Deprioritize::SiteFactor(f) => changes.site_factor = Some(site_factor(f)),
            Deprioritize::Qos(q) if job.qos.is_none() => changes.qos = Some(q),
            _ => {}
        }
        messages.push(message);
    }
    Outcome { verdict: accepted(changes, messages), admitted }
}

/// (what the log says, what the user's GPU jobs keep) when the update would lift the penalty.
fn undoes_penalty(job: &JobRequest, how: &Deprioritize) -> Option<(String, String)> {
    match how {
        Deprioritize::Nice(n) if *n > 0 && job.nice != NO_VAL && job.nice < NICE_OFFSET + n => {
            let asked = job.nice as i64 - NICE_OFFSET as i64;
            Some((format!("nice {asked} is below nice_increment {n}"), format!("a nice value of at least {n}")))
        }
        Deprioritize::Qos(q) => match job.qos.as_deref() {
            Some(asked) if asked != q => {
                let shown = if asked.is_empty() { "the default QOS" } else { asked };
                Some((format!("QOS {shown} is not the overdraft QOS {q}"), format!("QOS {q}")))
            }
            _ => None,
        },
        _ => None,
    }
}

/// The update sets a time limit, nodes, tasks or sockets: what a job's GPUs and cost scale with.
fn raises_shape_or_time(job: &JobRequest) -> bool {
    job.time_limit != NO_VAL
        || job.min_nodes != NO_VAL
        || job.num_tasks != NO_VAL
        || job.ntasks_per_node as u32 != NO_VAL16
        || job.sockets_per_node as u32 != NO_VAL16
}

/// What the job held and could cost before the update, and the most it can after. With GPUs in the
/// update, they are counted over the job's shape (the update's nodes and tasks, else the job's);
/// without, the job's GPUs scale with the larger growth of its nodes and tasks (per-node and
/// per-task requests grow at most that much), and its cost with the time limit too. Err: the
/// refusal of GPUs too many to count.
fn before_and_after(
    ctx: &Context,
    balances: &Balances,
    job: &JobRequest,
    asked: Option<&GpuRequest>,
    known: &PendingJob,
) -> Result<(Commitment, JobEstimate), String> {
    let old = known.gpus.unwrap_or_default();
    let given = |n: u32| (n != NO_VAL && n > 0).then_some(n as u64);
    let given16 = |n: u16| (n as u32 != NO_VAL16 && n > 0).then_some(n as u64);
    let nodes = given(job.min_nodes).unwrap_or(known.nodes.max(1));
    let tasks =
        given(job.num_tasks).or_else(|| given16(job.ntasks_per_node).map(|t| t * nodes)).unwrap_or(known.tasks.max(1));
    let seconds = match job.time_limit {
        NO_VAL => known.seconds,
        INFINITE => max_time(&balances.snapshot.partitions, job.partition.as_deref())
            .unwrap_or(ctx.config.default_time_limit.as_secs()),
        _ => job.time_limit_secs().unwrap_or(known.seconds),
    };
    let prices = &balances.snapshot.prices;
    if let Some(request) = asked {
        let shape = JobShape {
            nodes,
            tasks,
            sockets_per_node: given16(job.sockets_per_node).unwrap_or(1),
            array_tasks: known.array_tasks.max(1),
        };
        let gpus = requested_milli(request, &shape, balances.snapshot.sharing);
        return Ok((old, JobEstimate::of(gpus, seconds, prices)?));
    }
    // growth = max(nodes / old nodes, tasks / old tasks, 1), as a fraction
    let (mut num, mut den) = (1u128, 1u128);
    for (new, was) in [(nodes, known.nodes.max(1)), (tasks, known.tasks.max(1))] {
        if new as u128 * den > num * was as u128 {
            (num, den) = (new as u128, was as u128);
        }
    }
    // u64 × u64 fits in u128; a product of three may not: beyond it, the cost is the most there is.
    let milli = (old.milli_gpus as u128 * num).div_ceil(den);
    let scaled = (old.max_cost.micro().max(0) as u128 * num).checked_mul(seconds as u128);
    let cost = scaled.map_or(u128::MAX, |c| c / (den * known.seconds.max(1) as u128));
    let gpus = MilliByType::from([(None, u64::try_from(milli).unwrap_or(u64::MAX))]);
    let cost = Tokens::from_micro(i64::try_from(cost).unwrap_or(i64::MAX));
    Ok((old, JobEstimate { gpus, seconds, cost }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::tests::{config, ctx, message, no_local, snapshot, view_of};
    use crate::watch::View;
    use gputokens::plugin_config::PluginConfig;
    use std::collections::BTreeMap;
    use std::time::Duration;

    const ALICE: u32 = 1001; // at the floor: -10.4
    const BOB: u32 = 1002; // 50; queue: 2 a6000 GPUs that can cost 16
    const CAROL: u32 = 1003; // overdraft: -3.5

    /// The test snapshot with pending jobs: 7 = bob's 2 a6000 GPUs for 1 h (cost 8, 1 node, 2
    /// tasks), 8 = carol's GPU job, 9 = carol's and 10 = alice's CPU-only jobs.
    fn view() -> View {
        let mut snap = snapshot();
        let gpu = |milli, cost| Some(Commitment { milli_gpus: milli, max_cost: Tokens::whole(cost) });
        let job = |tasks, gpus| PendingJob { nodes: 1, tasks, array_tasks: 1, seconds: 3600, gpus };
        let queue = snap.queue.as_mut().unwrap();
        queue.pending = BTreeMap::from([
            (7, job(2, gpu(2000, 8))),
            (8, job(1, gpu(1000, 4))),
            (9, job(1, None)),
            (10, job(4, None)),
        ]);
        view_of(snap)
    }

    fn update(job_id: u32, user_id: u32) -> JobRequest {
        JobRequest { job_id: Some(job_id), user_id, ..Default::default() }
    }

    fn modify(ctx: &Context, job: &JobRequest) -> (Outcome, Vec<String>) {
        let mut lines = Vec::new();
        let m = on_modify(ctx, job, job.user_id, &no_local, &mut |_, m| lines.push(m));
        (m, lines)
    }

    fn refused(ctx: &Context, job: &JobRequest) -> String {
        match modify(ctx, job).0.verdict {
            Verdict::Reject { code: 2050, message } => message,
            other => panic!("{job:?} accepted: {other:?}"),
        }
    }

    fn passes(ctx: &Context, job: &JobRequest) -> bool {
        modify(ctx, job).0.verdict == Verdict::accept()
    }

    /// Regression: a pending job of enormous cost, grown by an update, overflowed u128 (a panic in
    /// debug builds, a small wrapped cost in release builds).
    #[test]
    fn growth_past_what_can_be_counted_is_refused() {
        let mut snap = snapshot();
        let most = Some(Commitment { milli_gpus: u64::MAX / 2, max_cost: Tokens::from_micro(i64::MAX / 2) });
        let queue = snap.queue.as_mut().unwrap();
        queue.pending =
            BTreeMap::from([(7, PendingJob { nodes: 1, tasks: 1, array_tasks: 1, seconds: 1, gpus: most })]);
        let v = view_of(snap);
        let c = PluginConfig { mode: Mode::Estimate, ..config() };
        let grown = JobRequest { num_tasks: u32::MAX - 2, time_limit: u32::MAX - 2, ..update(7, BOB) };
        let text = refused(&ctx(&v, &c), &grown);
        assert!(text.contains("up to 9223372036854.775807 tokens"), "{text}");
        let asked = JobRequest { tres_per_task: Some("gres:gpu:2".into()), num_tasks: u32::MAX - 2, ..update(7, BOB) };
        assert!(refused(&ctx(&v, &c), &asked).contains("more than gputokens can count"));
    }

    #[test]
    fn overdraft_keeps_the_nice_of_gpu_jobs_and_leaves_cpu_jobs_alone() {
        let (v, c) = (view(), config());
        let ctx = ctx(&v, &c);
        let nice = |id, n: u32| JobRequest { nice: NICE_OFFSET + n, ..update(id, CAROL) };
        let text = refused(&ctx, &nice(8, 0));
        assert_eq!(
            text,
            "gputokens: your GPU token balance is -3.5 (below 0): your GPU jobs keep a nice value of at least 10000 \
             until it is 0 or more. Run 'sbalance' for details."
        );
        assert_eq!(
            modify(&ctx, &nice(8, 0)).1,
            ["refused an update of job 8 of carol (uid 1003): nice 0 is below nice_increment 10000 in overdraft \
              (balance -3.5)"]
        );
        assert!(passes(&ctx, &nice(8, 10_000)), "at the plugin's nice");
        assert!(passes(&ctx, &nice(8, 20_000)));
        assert!(passes(&ctx, &nice(9, 0)), "a CPU-only job lowers its nice");
        assert!(!passes(&ctx, &nice(4242, 0)), "a job not in the last read may be a GPU job");
        assert!(passes(&ctx, &JobRequest { nice: NICE_OFFSET, ..update(7, BOB) }), "bob is not in overdraft");
        assert!(on_modify(&ctx, &nice(8, 0), 0, &no_local, &mut |_, _| {}).verdict == Verdict::accept(), "root");
        assert!(
            on_modify(&ctx, &nice(8, 0), 64030, &no_local, &mut |_, _| {}).verdict == Verdict::accept(),
            "SlurmUser"
        );
        let quiet = PluginConfig { deprioritize: Deprioritize::Nice(0), ..config() };
        assert!(passes(&crate::admit::tests::ctx(&v, &quiet), &nice(8, 0)), "nice_increment 0: nothing to keep");
    }

    #[test]
    fn overdraft_keeps_gpu_jobs_in_the_overdraft_qos() {
        let v = view();
        let c = PluginConfig { deprioritize: Deprioritize::Qos("gputokens-overdraft".into()), ..config() };
        let ctx = ctx(&v, &c);
        let qos = |id, q: &str| JobRequest { qos: Some(q.into()), ..update(id, CAROL) };
        assert!(refused(&ctx, &qos(8, "normal")).contains("your GPU jobs keep QOS gputokens-overdraft until it is 0"));
        assert!(!passes(&ctx, &qos(8, "")), "the default QOS");
        assert!(passes(&ctx, &qos(8, "gputokens-overdraft")));
        assert!(passes(&ctx, &qos(9, "normal")), "CPU-only");
        assert!(passes(&ctx, &JobRequest { nice: NICE_OFFSET, ..update(8, CAROL) }), "nice is free in qos mode");
        // GPUs added to the CPU job in overdraft: moved to the overdraft QOS like a submission.
        let add = JobRequest { tres_per_node: Some("gres:gpu:1".into()), ..update(9, CAROL) };
        let Verdict::Accept { changes, message } = modify(&ctx, &add).0.verdict else { panic!() };
        assert_eq!(changes.qos.as_deref(), Some("gputokens-overdraft"));
        assert!(message.unwrap().contains("(QOS gputokens-overdraft)"));
        let nice_mode = config();
        let Verdict::Accept { changes, .. } = modify(&crate::admit::tests::ctx(&v, &nice_mode), &add).0.verdict else {
            panic!()
        };
        assert_eq!(changes.nice, Some(NICE_OFFSET + 10_000));
    }

    #[test]
    fn at_the_floor_adding_gpus_is_refused() {
        let (v, c) = (view(), config());
        let ctx = ctx(&v, &c);
        let add = JobRequest { tres_per_node: Some("gres:gpu:2".into()), ..update(10, ALICE) };
        assert!(refused(&ctx, &add).starts_with("gputokens: your GPU token balance is -10.4 (floor -10)"));
        assert_eq!(
            modify(&ctx, &add).1,
            ["refused an update of job 10 of alice (uid 1001): it adds GPUs and balance -10.4 is at or below the \
              floor -10"]
        );
        assert!(passes(&ctx, &JobRequest { time_limit: 600, ..update(10, ALICE) }), "CPU-only: any time");
        assert!(passes(&ctx, &JobRequest { nice: NICE_OFFSET, ..update(10, ALICE) }), "CPU-only: any nice");
        // The owner is the description's user_id (slurmctld fills it in), not whoever asks.
        let owned = JobRequest { user_id: ALICE, ..add.clone() };
        assert!(matches!(on_modify(&ctx, &owned, BOB, &no_local, &mut |_, _| {}).verdict, Verdict::Reject { .. }));
    }

    #[test]
    fn max_job_duration_applies_to_gpu_jobs_only() {
        let v = view();
        let c = PluginConfig { max_job_duration: Some(Duration::from_secs(3600)), ..config() };
        let ctx = ctx(&v, &c);
        let time = |id, t| JobRequest { time_limit: t, ..update(id, BOB) };
        assert_eq!(
            refused(&ctx, &time(7, 120)),
            "gputokens: GPU jobs may run for at most 1:00:00 here, and this update asks for 2:00:00."
        );
        assert!(refused(&ctx, &time(7, INFINITE)).ends_with("this update asks for UNLIMITED."));
        assert!(passes(&ctx, &time(7, 60)));
        assert!(passes(&ctx, &time(9, 600)), "a CPU-only job");
        assert!(!passes(&ctx, &time(4242, 600)), "unknown: judged as a GPU job");
    }

    #[test]
    fn max_gpus_per_user_counts_what_the_update_adds() {
        let v = view();
        let c = PluginConfig { max_gpus_per_user: Some(3), ..config() };
        let ctx = ctx(&v, &c);
        // bob holds 2 (job 7); job 7 asking for 3 instead: 0 + 3 = 3 fits, 4 does not.
        let gres = |id, g: &str| JobRequest { tres_per_job: Some(g.into()), ..update(id, BOB) };
        let m = modify(&ctx, &gres(7, "gres:gpu:a6000:3")).0;
        assert_eq!(m.verdict, Verdict::accept());
        assert_eq!(m.admitted, Some((BOB, Commitment { milli_gpus: 1000, max_cost: Tokens::whole(4) })));
        assert!(refused(&ctx, &gres(7, "gres:gpu:4")).contains("you hold 0 and this job asks for 4"));
        // A CPU job of bob's gaining 2 GPUs: 2 + 2 > 3.
        assert!(!passes(&ctx, &gres(9, "gres:gpu:2")));
        // Job 7 (2 tasks) to 4 tasks: its GPUs may double (per task): 4 > 3.
        assert!(!passes(&ctx, &JobRequest { num_tasks: 4, ..update(7, BOB) }));
        assert!(passes(&ctx, &JobRequest { num_tasks: 1, ..update(7, BOB) }), "fewer tasks");
        let local = |_: u32| Commitment { milli_gpus: 1000, max_cost: Tokens::ZERO };
        let v7 = gres(7, "gres:gpu:a6000:3");
        assert!(matches!(on_modify(&ctx, &v7, BOB, &local, &mut |_, _| {}).verdict, Verdict::Reject { .. }), "tally");
        let unknown = refused(&ctx, &JobRequest { num_tasks: 4, ..update(4242, BOB) });
        assert!(unknown.starts_with("gputokens: job 4242 was submitted after the queue was last read"), "{unknown}");
    }

    #[test]
    fn the_estimate_counts_what_the_update_adds() {
        let v = view();
        let c = PluginConfig { mode: Mode::Estimate, ..config() };
        let ctx = ctx(&v, &c);
        // bob: 50, queue can cost 16 of which job 7 is 8. Job 7 for 8 h: 2 a6000 × 8 h × 4 = 64.
        let time = |t| JobRequest { time_limit: t, ..update(7, BOB) };
        let text = refused(&ctx, &time(480));
        assert!(text.contains("this job can cost up to 64 tokens"), "{text}");
        assert!(text.contains("can cost up to 8 more, which could take it to -22"), "{text}");
        // 6 h: 48 → 50 - 8 - 48 = -6, above the floor.
        assert!(passes(&ctx, &time(360)));
        assert!(passes(&ctx, &time(30)), "shorter");
        assert_eq!(message(&modify(&ctx, &time(30)).0.verdict), "");
    }

    #[test]
    fn unavailable_balances_follow_on_error_for_added_gpus() {
        let broken = View::Unavailable(crate::watch::Problem::Missing);
        let strict = PluginConfig { on_error: gputokens::admission::OnError::Reject, ..config() };
        let add = JobRequest { tres_per_node: Some("gres:gpu:1".into()), ..update(9, CAROL) };
        assert!(!passes(&ctx(&broken, &strict), &add));
        assert!(passes(&ctx(&broken, &config()), &add));
        assert!(passes(&ctx(&broken, &strict), &JobRequest { nice: NICE_OFFSET, ..update(8, CAROL) }));
    }
}
