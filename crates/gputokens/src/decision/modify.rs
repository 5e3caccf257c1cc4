//! `job_modify`: the steps for an update (`scontrol update jobid=N ...`) by the job's owner, which
//! obeys the same policy as a submission. The update holds only the fields being changed (slurmctld
//! fills in the owner), and 22.05 hands the plugin no readable job record, so what job N is comes
//! from the snapshot: every job pending when accountd last read the queue, with its shape and, for a
//! GPU job, what it asks for and can cost. A job not listed (submitted since the read, or running)
//! may be a GPU job and is judged as one; a listed CPU-only job is never touched, unless the update
//! adds GPUs.
//!
//! For a (possible) GPU job of a user who is not exempt: a time limit above `max_job_duration` is
//! refused; at the floor, adding GPUs is refused; in overdraft, a nice value below `nice_increment`
//! (deprioritize = "nice") or another QOS than the overdraft QOS (deprioritize = "qos") is refused,
//! and an update that adds GPUs gets the penalty; more GPUs, time, nodes or tasks than
//! `max_gpus_per_user` and the estimate allow are refused. Updates by root and the SlurmUser
//! (slurmctld's own uid) are not checked.

use crate::config::admission::{Deprioritize, Mode, OnError};
use crate::estimate::{requested_milli, total_milli, Commitment, MilliByType, PendingJob};
use crate::gpu_request::GpuRequest;
use crate::job_request::{JobRequest, TimeLimit};
use crate::job_shape::JobShape;
use crate::slurm::partitions::max_time;
use crate::stranded_estimate::Strands;
use crate::stranding::Held;
use crate::tokens::Tokens;
use crate::tres::MILLI;

use super::codes::{Code, Tail};
use super::rules::{self, Decision, JobEstimate};
use super::{
    codes, decide, gpu_request, raised_nice, site_factor, unavailable_tail, uncountable, within_estimates,
    within_gpu_limit, Account, Case, Draft, Inputs, Log, Outcome, Owner, Refusal, Steps,
};

/// `job_modify`'s decision.
pub fn decide_modify(job: &JobRequest, inputs: &Inputs, log: &mut Log) -> Outcome {
    let screened = Update::screen(job, inputs, log);
    decide(screened, job, inputs, log)
}

/// An update of a job that is (or may be) a GPU job.
struct Update<'a> {
    /// The GPUs the update asks for; None when it sets none.
    asked: Option<GpuRequest>,
    /// The job as the last queue read showed it; None when it was not pending then.
    known: Option<&'a PendingJob>,
}

impl<'a> Update<'a> {
    /// An update by a user (not an administrator) who is not exempt, of a job that is or may become
    /// a GPU job; None for any other.
    fn screen(job: &JobRequest, inputs: &Inputs<'a>, log: &mut Log) -> Option<(Owner, Update<'a>)> {
        if inputs.submit_uid == 0 || inputs.submit_uid == inputs.slurm_uid {
            return None;
        }
        let owner = Owner::of(job, inputs);
        if owner.exempt {
            return None;
        }
        let asked = gpu_request(job, log);
        let known = job.job_id.and_then(|id| inputs.standing?.pending_job(id));
        if asked.is_none() && known.is_some_and(|k| k.gpus.is_none()) {
            return None; // a CPU-only job stays untouched
        }
        Some((owner, Update { asked, known }))
    }
}

/// `job 7`, or `a job` when the update names none.
fn what(job: &JobRequest) -> String {
    job.job_id.map_or("a job".to_string(), |id| format!("job {id}"))
}

impl Steps for Update<'_> {
    fn subject(&self, case: &Case) -> String {
        format!("an update of {} of {}", what(case.job), case.owner.who)
    }

    fn check_time(&mut self, case: &Case, _: &mut Draft) -> Result<(), Refusal> {
        if let (Some(max), Some(limit)) = (case.inputs.config.max_job_duration, case.job.time_limit) {
            if let Some(message) = rules::check_update_duration(limit.seconds(), max.as_secs()) {
                return Err(Refusal::logged("time limit above max_job_duration", message, Tail::of(Code::TimeLimit)));
            }
        }
        Ok(())
    }

    fn check_unavailable(&self, on_error: OnError) -> Result<(), Refusal> {
        // Missing, unreadable, corrupt or stale: on_error decides what adds GPUs.
        match (self.asked.is_some(), rules::when_unavailable(on_error)) {
            (true, Decision::Reject { message }) => {
                Err(Refusal::logged("balances unavailable", message, unavailable_tail()))
            }
            _ => Ok(()),
        }
    }

    fn check_balance(&self, case: &Case, account: &Account) -> Result<(), Refusal> {
        let balance = account.balance;
        if let (Some(_), Decision::Reject { message }) = (&self.asked, &account.decision) {
            let reason = format!("it adds GPUs and balance {balance} is at or below the floor {}", account.rules.floor);
            return Err(Refusal::logged(reason, message.clone(), account.refusal_tail(case)));
        }
        // Moving a GPU job into an account whose pool (or the user's limit there) refuses new jobs.
        if let (Some(moved_to), Decision::Reject { message }) = (&case.job.account, &account.decision) {
            let reason = format!("it moves the job to account {moved_to}, whose jobs are refused (balance {balance})");
            return Err(Refusal::logged(reason, message.clone(), account.refusal_tail(case)));
        }
        if !matches!(account.decision, Decision::Accept) {
            if let Some((reason, kept)) = undoes_penalty(case.job, &case.inputs.config.deprioritize) {
                return Err(Refusal::logged(
                    format!("{reason} in overdraft (balance {balance})"),
                    rules::penalty_kept_message(balance, &kept),
                    Tail::any_type_after(Code::PenaltyKept, account.retry_after(case)),
                ));
            }
        }
        Ok(())
    }

    fn check_limits(&mut self, case: &Case, account: &Account) -> Result<Option<Commitment>, Refusal> {
        let config = case.inputs.config;
        let limited = config.mode == Mode::Estimate || config.max_gpus_per_user.is_some();
        // Moved into a pool's account (`account=`): the whole job is new to that pool's estimate.
        let moved = moves_to_another_pool(case, account);
        if !limited || (self.asked.is_none() && !case.job.sets_shape_or_time() && !moved) {
            return Ok(None);
        }
        let Some(known) = self.known else {
            let message = rules::unknown_job_message(&what(case.job));
            // In the queue at accountd's next read: within a check interval of the last.
            let read =
                case.inputs.standing.and_then(|s| s.snapshot.queue.as_ref()).map_or(case.inputs.now, |q| q.as_of);
            let next_read = read.saturating_add(codes::replenished_within(case.inputs.check_interval));
            let seconds = (next_read - case.inputs.now).max(codes::UNAVAILABLE_RETRY as i64) as u64;
            let tail = Tail::any_type_after(Code::UnknownJob, Some(seconds));
            return Err(Refusal::logged("not in the last queue read", message, tail));
        };
        let (old, new) = before_and_after(case, account, self.asked.as_ref(), known).map_err(uncountable)?;
        // What the paying balance already counts of this job: nothing where it moves to it.
        let old_cost = if moved { Tokens::ZERO } else { old.max_cost };
        let held = {
            let c = account.held(case);
            Commitment {
                milli_gpus: c.milli_gpus.saturating_sub(old.milli_gpus),
                max_cost: (c.max_cost - old_cost).max(Tokens::ZERO),
            }
        };
        let asked_milli = total_milli(&new.gpus);
        if let Some(max) = config.max_gpus_per_user {
            if asked_milli > old.milli_gpus {
                within_gpu_limit(max, held.milli_gpus, asked_milli)?;
            }
        }
        if config.mode == Mode::Estimate && new.cost > old_cost {
            let held_by_other = |other: &Account| (other.held(case).max_cost - old.max_cost).max(Tokens::ZERO);
            within_estimates(case, account, held.max_cost, &new, held_by_other)?;
        }
        let grown = Commitment {
            milli_gpus: asked_milli.saturating_sub(old.milli_gpus),
            max_cost: (new.cost - old_cost).max(Tokens::ZERO),
        };
        Ok((grown != Commitment::default()).then_some(grown))
    }

    /// GPUs added in overdraft: the update gets the penalty a submission would, where it does not
    /// set the nice value or QOS itself.
    fn deprioritize(
        &self,
        case: &Case,
        _: &Account,
        how: &Deprioritize,
        message: &str,
        draft: &mut Draft,
        _: &mut Log,
    ) {
        if self.asked.is_none() {
            return;
        }
        let changes = &mut draft.changes;
        match how {
            Deprioritize::Nice(n) if *n > 0 && case.job.nice.is_none() => changes.nice = Some(raised_nice(None, *n)),
            Deprioritize::SiteFactor(f) => changes.site_factor = Some(site_factor(*f)),
            Deprioritize::Qos(q) if case.job.qos.is_none() => changes.qos = Some(q.clone()),
            _ => {}
        }
        draft.messages.push(message.to_string());
    }

    fn note(&self, _: &Account) -> Option<String> {
        None
    }
}

/// (what the log says, what the user's GPU jobs keep) when the update would lift the penalty.
fn undoes_penalty(job: &JobRequest, how: &Deprioritize) -> Option<(String, String)> {
    match how {
        Deprioritize::Nice(n) if *n > 0 => match job.nice {
            Some(asked) if (asked as i64) < *n as i64 => {
                Some((format!("nice {asked} is below nice_increment {n}"), format!("a nice value of at least {n}")))
            }
            _ => None,
        },
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

/// What the job held and could cost before the update, and the most it can after. With GPUs in the
/// update, they are counted over the job's shape (the update's nodes and tasks, else the job's);
/// without, the job's GPUs scale with the larger growth of its nodes and tasks (per-node and
/// per-task requests grow at most that much), and its cost with the time limit too. Err: the
/// refusal of GPUs too many to count.
/// Whether the update moves the job (`account=`) to a pool that did not pay for it when the queue
/// was read.
fn moves_to_another_pool(case: &Case, account: &Account) -> bool {
    let Some(pool) = account.payer else { return false };
    if case.job.account.is_none() {
        return false;
    }
    let queue = account.standing.snapshot.queue.as_ref();
    let queued = case.job.job_id.and_then(|id| queue?.job_accounts.get(&id)).map(String::as_str);
    queued != Some(pool)
}

fn before_and_after(
    case: &Case,
    account: &Account,
    asked: Option<&GpuRequest>,
    known: &PendingJob,
) -> Result<(Commitment, JobEstimate), String> {
    let job = case.job;
    let snapshot = account.standing.snapshot;
    let old = known.gpus.unwrap_or_default();
    let nodes = job.nodes().unwrap_or(known.nodes.max(1));
    let tasks = job.tasks(nodes).unwrap_or(known.tasks.max(1));
    let seconds = match job.time_limit {
        None => known.seconds,
        Some(TimeLimit::Unlimited) => max_time(&snapshot.partitions, job.partition.as_deref())
            .unwrap_or(case.inputs.config.default_time_limit.as_secs()),
        Some(TimeLimit::Minutes(m)) => m as u64 * 60,
    };
    let prices = &snapshot.prices;
    if let Some(request) = asked {
        let shape = JobShape {
            nodes,
            tasks,
            sockets_per_node: job.sockets_per_node().unwrap_or(1),
            array_tasks: known.array_tasks.max(1),
        };
        let gpus = requested_milli(request, &shape, snapshot.sharing);
        let strands = strands_after(job, request, &shape, known, snapshot);
        return Ok((old, JobEstimate::with_strands(gpus, seconds, prices, strands)?));
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
    Ok((old, JobEstimate { gpus, seconds, cost, strands: None, stranding: None }))
}

/// Where the site prices what a job strands: what one array task of the updated job holds beside
/// its new GPUs (the CPUs and memory the update names, else those the job asked for when the queue
/// was read), and those GPUs.
fn strands_after(
    job: &JobRequest,
    request: &GpuRequest,
    shape: &JobShape,
    known: &PendingJob,
    snapshot: &crate::snapshot::Snapshot,
) -> Option<(Strands, MilliByType)> {
    if snapshot.prices.stranded().is_empty() {
        return None;
    }
    let per_task = requested_milli(request, &JobShape { array_tasks: 1, ..*shape }, snapshot.sharing);
    let named = job.held(total_milli(&per_task).div_ceil(MILLI));
    let held = Held { cpus: named.cpus.or(known.held.cpus), mem_mb: named.mem_mb.or(known.held.mem_mb) };
    Some((Strands::new(held, shape.nodes, &snapshot.node_shapes)?, per_task))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{self, config, message, no_local, snapshot, world_of, World, SLURM_UID};
    use super::super::Verdict;
    use super::*;
    use crate::config::Admission;
    use std::collections::BTreeMap;
    use std::time::Duration;

    const ALICE: u32 = 1001; // at the floor: -10.4
    const BOB: u32 = 1002; // 50; queue: 2 a6000 GPUs that can cost 16
    const CAROL: u32 = 1003; // overdraft: -3.5

    /// The test snapshot with pending jobs: 7 = bob's 2 a6000 GPUs for 1 h (cost 8, 1 node, 2
    /// tasks), 8 = carol's GPU job, 9 = carol's and 10 = alice's CPU-only jobs.
    fn world() -> World {
        let mut snap = snapshot();
        let gpu = |milli, cost| Some(Commitment { milli_gpus: milli, max_cost: Tokens::whole(cost) });
        let job =
            |tasks, gpus| PendingJob { nodes: 1, tasks, array_tasks: 1, seconds: 3600, gpus, ..Default::default() };
        let queue = snap.queue.as_mut().unwrap();
        queue.pending = BTreeMap::from([
            (7, job(2, gpu(2000, 8))),
            (8, job(1, gpu(1000, 4))),
            (9, job(1, None)),
            (10, job(4, None)),
        ]);
        world_of(snap)
    }

    /// The balances (None: unavailable) and the settings an update is judged with.
    #[derive(Clone, Copy)]
    struct Ctx<'a> {
        world: Option<&'a World>,
        config: &'a Admission,
    }

    fn ctx<'a>(world: &'a World, config: &'a Admission) -> Ctx<'a> {
        Ctx { world: Some(world), config }
    }

    fn update(job_id: u32, user_id: u32) -> JobRequest {
        JobRequest { job_id: Some(job_id), user_id: Some(user_id), ..Default::default() }
    }

    fn minutes(m: u32) -> Option<TimeLimit> {
        Some(TimeLimit::Minutes(m))
    }

    /// The outcome of an update asked by `submit_uid`, with `local` admitted since the queue was read.
    fn modify_as(ctx: Ctx, job: &JobRequest, submit_uid: u32, local: &dyn Fn(u32) -> Commitment) -> Outcome {
        let inputs = Inputs { admitted_since: local, ..fixtures::inputs(ctx.world, ctx.config, submit_uid) };
        decide_modify(job, &inputs, &mut |_, _| {})
    }

    /// The outcome of an update asked by the job's owner, and the log lines.
    fn modify(ctx: Ctx, job: &JobRequest) -> (Outcome, Vec<String>) {
        let mut lines = Vec::new();
        let inputs = fixtures::inputs(ctx.world, ctx.config, job.user_id.expect("the test update names its owner"));
        let m = decide_modify(job, &inputs, &mut |_, m| lines.push(m));
        (m, lines)
    }

    fn refused(ctx: Ctx, job: &JobRequest) -> String {
        match modify(ctx, job).0.verdict {
            Verdict::Reject { message } => message,
            other => panic!("{job:?} accepted: {other:?}"),
        }
    }

    fn passes(ctx: Ctx, job: &JobRequest) -> bool {
        modify(ctx, job).0.verdict == Verdict::accept()
    }

    /// Regression: a pending job of enormous cost, grown by an update, overflowed u128 (a panic in
    /// debug builds, a small wrapped cost in release builds).
    #[test]
    fn growth_past_what_can_be_counted_is_refused() {
        let mut snap = snapshot();
        let most = Some(Commitment { milli_gpus: u64::MAX / 2, max_cost: Tokens::from_micro(i64::MAX / 2) });
        let queue = snap.queue.as_mut().unwrap();
        queue.pending = BTreeMap::from([(
            7,
            PendingJob { nodes: 1, tasks: 1, array_tasks: 1, seconds: 1, gpus: most, ..Default::default() },
        )]);
        let w = world_of(snap);
        let c = Admission { mode: Mode::Estimate, ..config() };
        let grown = JobRequest { num_tasks: Some(u32::MAX - 2), time_limit: minutes(u32::MAX - 2), ..update(7, BOB) };
        let text = refused(ctx(&w, &c), &grown);
        assert!(text.contains("up to 9223372036854.775807 tokens"), "{text}");
        let asked =
            JobRequest { tres_per_task: Some("gres:gpu:2".into()), num_tasks: Some(u32::MAX - 2), ..update(7, BOB) };
        assert!(refused(ctx(&w, &c), &asked).contains("more than gputokens can count"));
    }

    #[test]
    fn overdraft_keeps_the_nice_of_gpu_jobs_and_leaves_cpu_jobs_alone() {
        let (w, c) = (world(), config());
        let ctx = ctx(&w, &c);
        let nice = |id, n: i32| JobRequest { nice: Some(n), ..update(id, CAROL) };
        let text = refused(ctx, &nice(8, 0));
        assert_eq!(
            text,
            "gputokens: your GPU token balance is -3.5 (below 0): your GPU jobs keep a nice value of at least 10000 \
             until it is 0 or more. Run 'sbalance' for details. [gputokens code=penalty_kept retry_after=*:304260]"
        );
        assert_eq!(
            modify(ctx, &nice(8, 0)).1,
            ["refused an update of job 8 of carol (uid 1003): nice 0 is below nice_increment 10000 in overdraft \
              (balance -3.5)"]
        );
        assert!(refused(ctx, &nice(8, -5)).contains("at least 10000"), "a negative nice");
        assert!(passes(ctx, &nice(8, 10_000)), "at the plugin's nice");
        assert!(passes(ctx, &nice(8, 20_000)));
        assert!(passes(ctx, &nice(9, 0)), "a CPU-only job lowers its nice");
        assert!(!passes(ctx, &nice(4242, 0)), "a job not in the last read may be a GPU job");
        assert!(passes(ctx, &JobRequest { nice: Some(0), ..update(7, BOB) }), "bob is not in overdraft");
        assert!(modify_as(ctx, &nice(8, 0), 0, &no_local).verdict == Verdict::accept(), "root");
        assert!(modify_as(ctx, &nice(8, 0), SLURM_UID, &no_local).verdict == Verdict::accept(), "SlurmUser");
        let quiet = Admission { deprioritize: Deprioritize::Nice(0), ..config() };
        assert!(passes(super::tests::ctx(&w, &quiet), &nice(8, 0)), "nice_increment 0: nothing to keep");
    }

    #[test]
    fn overdraft_keeps_gpu_jobs_in_the_overdraft_qos() {
        let w = world();
        let c = Admission { deprioritize: Deprioritize::Qos("gputokens-overdraft".into()), ..config() };
        let ctx = ctx(&w, &c);
        let qos = |id, q: &str| JobRequest { qos: Some(q.into()), ..update(id, CAROL) };
        assert!(refused(ctx, &qos(8, "normal")).contains("your GPU jobs keep QOS gputokens-overdraft until it is 0"));
        assert!(!passes(ctx, &qos(8, "")), "the default QOS");
        assert!(passes(ctx, &qos(8, "gputokens-overdraft")));
        assert!(passes(ctx, &qos(9, "normal")), "CPU-only");
        assert!(passes(ctx, &JobRequest { nice: Some(0), ..update(8, CAROL) }), "nice is free in qos mode");
        // GPUs added to the CPU job in overdraft: moved to the overdraft QOS like a submission.
        let add = JobRequest { tres_per_node: Some("gres:gpu:1".into()), ..update(9, CAROL) };
        let Verdict::Accept { changes, message } = modify(ctx, &add).0.verdict else { panic!() };
        assert_eq!(changes.qos.as_deref(), Some("gputokens-overdraft"));
        assert!(message.unwrap().contains("(QOS gputokens-overdraft)"));
        let nice_mode = config();
        let Verdict::Accept { changes, .. } = modify(super::tests::ctx(&w, &nice_mode), &add).0.verdict else {
            panic!()
        };
        assert_eq!(changes.nice, Some(10_000));
        let site = Admission { deprioritize: Deprioritize::SiteFactor(-7000), ..config() };
        let Verdict::Accept { changes, .. } = modify(super::tests::ctx(&w, &site), &add).0.verdict else { panic!() };
        assert_eq!(changes.site_factor, Some(-7000));
    }

    #[test]
    fn at_the_floor_adding_gpus_is_refused() {
        let (w, c) = (world(), config());
        let ctx = ctx(&w, &c);
        let add = JobRequest { tres_per_node: Some("gres:gpu:2".into()), ..update(10, ALICE) };
        assert!(refused(ctx, &add).starts_with("gputokens: your GPU token balance is -10.4 (floor -10)"));
        assert_eq!(
            modify(ctx, &add).1,
            ["refused an update of job 10 of alice (uid 1001): it adds GPUs and balance -10.4 is at or below the \
              floor -10"]
        );
        assert!(passes(ctx, &JobRequest { time_limit: minutes(600), ..update(10, ALICE) }), "CPU-only: any time");
        assert!(passes(ctx, &JobRequest { nice: Some(0), ..update(10, ALICE) }), "CPU-only: any nice");
        // The owner is the description's user_id (slurmctld fills it in), not whoever asks.
        let owned = JobRequest { user_id: Some(ALICE), ..add.clone() };
        assert!(matches!(modify_as(ctx, &owned, BOB, &no_local).verdict, Verdict::Reject { .. }));
        let unowned = JobRequest { user_id: None, ..add };
        assert!(matches!(modify_as(ctx, &unowned, ALICE, &no_local).verdict, Verdict::Reject { .. }), "else who asks");
        assert!(matches!(modify_as(ctx, &unowned, BOB, &no_local).verdict, Verdict::Accept { .. }));
    }

    #[test]
    fn max_job_duration_applies_to_gpu_jobs_only() {
        let w = world();
        let c = Admission { max_job_duration: Some(Duration::from_secs(3600)), ..config() };
        let ctx = ctx(&w, &c);
        let time = |id, t| JobRequest { time_limit: Some(t), ..update(id, BOB) };
        assert_eq!(
            refused(ctx, &time(7, TimeLimit::Minutes(120))),
            "gputokens: GPU jobs may run for at most 1:00:00 here, and this update asks for 2:00:00. [gputokens \
             code=time_limit]"
        );
        assert!(
            refused(ctx, &time(7, TimeLimit::Unlimited)).ends_with("asks for UNLIMITED. [gputokens code=time_limit]")
        );
        assert!(passes(ctx, &time(7, TimeLimit::Minutes(60))));
        assert!(passes(ctx, &time(9, TimeLimit::Minutes(600))), "a CPU-only job");
        assert!(!passes(ctx, &time(4242, TimeLimit::Minutes(600))), "unknown: judged as a GPU job");
        assert_eq!(
            modify(ctx, &time(7, TimeLimit::Minutes(120))).1,
            ["refused an update of job 7 of bob (uid 1002): time limit above max_job_duration"]
        );
    }

    #[test]
    fn max_gpus_per_user_counts_what_the_update_adds() {
        let w = world();
        let c = Admission { max_gpus_per_user: Some(3), ..config() };
        let ctx = ctx(&w, &c);
        // bob holds 2 (job 7); job 7 asking for 3 instead: 0 + 3 = 3 fits, 4 does not.
        let gres = |id, g: &str| JobRequest { tres_per_job: Some(g.into()), ..update(id, BOB) };
        let m = modify(ctx, &gres(7, "gres:gpu:a6000:3")).0;
        assert_eq!(m.verdict, Verdict::accept());
        assert_eq!(m.admitted, Some((BOB, Commitment { milli_gpus: 1000, max_cost: Tokens::whole(4) })));
        assert!(refused(ctx, &gres(7, "gres:gpu:4")).contains("you hold 0 and this job asks for 4"));
        // A CPU job of bob's gaining 2 GPUs: 2 + 2 > 3.
        assert!(!passes(ctx, &gres(9, "gres:gpu:2")));
        // Job 7 (2 tasks) to 4 tasks: its GPUs may double (per task): 4 > 3.
        assert!(!passes(ctx, &JobRequest { num_tasks: Some(4), ..update(7, BOB) }));
        assert!(passes(ctx, &JobRequest { num_tasks: Some(1), ..update(7, BOB) }), "fewer tasks");
        let local = |_: u32| Commitment { milli_gpus: 1000, max_cost: Tokens::ZERO };
        let v7 = gres(7, "gres:gpu:a6000:3");
        assert!(matches!(modify_as(ctx, &v7, BOB, &local).verdict, Verdict::Reject { .. }), "tally");
        let unknown = refused(ctx, &JobRequest { num_tasks: Some(4), ..update(4242, BOB) });
        assert!(unknown.starts_with("gputokens: job 4242 was submitted after the queue was last read"), "{unknown}");
        assert_eq!(
            modify(ctx, &JobRequest { num_tasks: Some(4), ..update(4242, BOB) }).1,
            ["refused an update of job 4242 of bob (uid 1002): not in the last queue read"]
        );
    }

    #[test]
    fn the_estimate_counts_what_the_update_adds() {
        let w = world();
        let c = Admission { mode: Mode::Estimate, ..config() };
        let ctx = ctx(&w, &c);
        // bob: 50, queue can cost 16 of which job 7 is 8. Job 7 for 8 h: 2 a6000 × 8 h × 4 = 64.
        let time = |t| JobRequest { time_limit: minutes(t), ..update(7, BOB) };
        let text = refused(ctx, &time(480));
        assert!(text.contains("this job can cost up to 64 tokens"), "{text}");
        assert!(text.contains("can cost up to 8 more, which could take it to -22"), "{text}");
        // 6 h: 48 → 50 - 8 - 48 = -6, above the floor.
        assert!(passes(ctx, &time(360)));
        assert!(passes(ctx, &time(30)), "shorter");
        assert_eq!(message(&modify(ctx, &time(30)).0.verdict), "");
    }

    /// Where the site prices what a job strands, an update of a pending job's GPUs is weighed with
    /// the CPUs it asked for (the snapshot's `pending_held`), or those the update names.
    #[test]
    fn an_update_of_its_gpus_counts_what_the_jobs_cpus_strand() {
        use crate::job_request::CpuRequest;
        use crate::stranding::{NodeShape, Part};
        let mut w = world();
        let snap = &mut w.snapshot;
        snap.prices = snap.prices.clone().with_stranded(vec![Part::Cpus]);
        // 16 CPUs, 2 a6000 and 2 rtx2080; job 7 asked for all 16 CPUs.
        let gpus = BTreeMap::from([("a6000".to_string(), 2000), ("rtx2080".to_string(), 2000)]);
        snap.node_shapes = vec![NodeShape { cpus: 16, mem_mb: 64_000, milli_gpus: gpus }];
        snap.queue.as_mut().unwrap().pending.get_mut(&7).unwrap().held = Held { cpus: Some(16), mem_mb: None };
        let c = Admission { mode: Mode::Estimate, ..config() };
        let ctx = ctx(&w, &c);
        // 1 rtx2080 for 8 h with the node's every CPU: its 0.5 and the 8.5 of the 3 GPUs left idle.
        let cheaper =
            JobRequest { tres_per_node: Some("gres:gpu:rtx2080:1".into()), time_limit: minutes(480), ..update(7, BOB) };
        let text = refused(ctx, &cheaper);
        assert!(text.contains("this job can cost up to 72 tokens") && text.contains("priced by its CPUs"), "{text}");
        // The update names 1 CPU a task: its GPU's price alone (4 tokens).
        let one_cpu = JobRequest { cpus: CpuRequest { cpus_per_task: Some(1), ..Default::default() }, ..cheaper };
        assert!(passes(ctx, &one_cpu));
    }

    #[test]
    fn unavailable_balances_follow_on_error_for_added_gpus() {
        let strict = Admission { on_error: OnError::Reject, ..config() };
        let lenient = config();
        let broken = |config| Ctx { world: None, config };
        let add = JobRequest { tres_per_node: Some("gres:gpu:1".into()), ..update(9, CAROL) };
        assert!(!passes(broken(&strict), &add));
        assert_eq!(modify(broken(&strict), &add).1, ["refused an update of job 9 of uid 1003: balances unavailable"]);
        assert!(passes(broken(&lenient), &add));
        assert!(passes(broken(&strict), &JobRequest { nice: Some(0), ..update(8, CAROL) }));
    }
}
