//! `job_submit`: the steps for a new job. For a GPU job, in order: exempt users, accounts and QOS
//! pass untouched; `max_job_duration` refuses a longer `--time` or gives an untimed job the maximum;
//! with the balances unavailable `on_error` decides; at or below the floor the job is refused;
//! `max_gpus_per_user` and the estimate (`mode = "estimate"`) count what the user's running and
//! pending GPU jobs hold and can cost; in overdraft the job is deprioritized; `--gpu-tokens-estimate`
//! adds the job's maximum cost to the message. CPU-only jobs are never touched.

use crate::config::admission::{Deprioritize, Mode, OnError};
use crate::estimate::{requested_milli, total_milli, Commitment, MilliByType};
use crate::gpu_request::GpuRequest;
use crate::job_request::{JobRequest, TimeLimit};
use crate::job_shape::JobShape;
use crate::slurm::partitions::{limit_for_untimed, max_time, may_run_in};
use crate::snapshot::Snapshot;
use crate::stranded_estimate::Strands;
use crate::tres::MILLI;

use super::codes::{Code, Tail};
use super::quote;
use super::rules::{self, Decision, JobEstimate, TimeCheck};
use super::{
    decide, gpu_request, limit_minutes, raised_nice, site_factor, unavailable_tail, uncountable, within_estimates,
    within_gpu_limit, Account, Case, Draft, Inputs, Level, Log, Outcome, Owner, Refusal, Steps,
};

/// `job_submit`'s decision.
pub fn decide_submit(job: &JobRequest, inputs: &Inputs, log: &mut Log) -> Outcome {
    let screened = Submission::screen(job, inputs, log);
    // A quote is tallied as a submission would be: the job description cannot prove it is only
    // tested (a client may set the SPANK variable on a real job), and the tally lasts only until
    // accountd next reads the queue.
    decide(screened, job, inputs, log)
}

/// A GPU job being submitted, and what the steps learn of it.
struct Submission {
    request: GpuRequest,
    /// The time limit it will run under, when one is known before the default applies.
    seconds: Option<u64>,
    /// `--gpu-tokens-estimate`.
    wants_estimate: bool,
    /// `sbatch --test-only`.
    wants_quote: bool,
    /// Its estimate and what its owner's jobs hold, once counted (for `--gpu-tokens-estimate`).
    counted: Option<(JobEstimate, Commitment)>,
    /// The partitions it names (a comma list; None: the default), whose free GPUs a quote offers.
    partitions: Option<String>,
}

impl Submission {
    /// A GPU job of a user who is not exempt; None for any other.
    fn screen(job: &JobRequest, inputs: &Inputs, log: &mut Log) -> Option<(Owner, Submission)> {
        let request = gpu_request(job, log)?;
        let owner = Owner::of(job, inputs);
        if owner.exempt {
            log(Level::Verbose, format!("a GPU job of {} is exempt: not checked", owner.who));
            return None;
        }
        let (wants_estimate, wants_quote) = (job.wants_estimate, job.wants_quote);
        let partitions = job.partition.clone();
        Some((owner, Submission { request, seconds: None, wants_estimate, wants_quote, counted: None, partitions }))
    }
}

impl Steps for Submission {
    fn subject(&self, case: &Case) -> String {
        format!("a GPU job of {}", case.owner.who)
    }

    fn check_time(&mut self, case: &Case, draft: &mut Draft) -> Result<(), Refusal> {
        let job = case.job;
        let partitions = case.inputs.standing.map(|s| s.snapshot.partitions.as_slice()).unwrap_or_default();
        // Without --time the partition's DefaultTime (else MaxTime) applies; --time=UNLIMITED gets MaxTime.
        let untimed = if job.time_limit == Some(TimeLimit::Unlimited) {
            max_time(partitions, job.partition.as_deref())
        } else {
            limit_for_untimed(partitions, job.partition.as_deref())
        };
        self.seconds = job.time_limit_secs().or(untimed);
        let Some(max) = case.inputs.config.max_job_duration else { return Ok(()) };
        match rules::check_duration(job.time_limit_secs(), untimed, max.as_secs()) {
            TimeCheck::Fine => Ok(()),
            TimeCheck::Limit { seconds: max, message } => {
                draft.changes.time_limit = Some(limit_minutes(max));
                self.seconds = Some(max);
                draft.messages.push(message);
                Ok(())
            }
            TimeCheck::Reject { message } => {
                Err(Refusal::logged("its time limit is above max_job_duration", message, Tail::of(Code::TimeLimit)))
            }
        }
    }

    fn check_unavailable(&self, on_error: OnError) -> Result<(), Refusal> {
        // Missing, unreadable, corrupt or stale: logged by the watcher when it began.
        match rules::when_unavailable(on_error) {
            Decision::Reject { message } => Err(Refusal::silent(message, unavailable_tail())),
            _ => Ok(()),
        }
    }

    fn check_balance(&self, case: &Case, account: &Account) -> Result<(), Refusal> {
        match &account.decision {
            Decision::Reject { message } => {
                let reason = match account.pool {
                    Some(pool) if account.closed.is_some() => format!("the sub-allocation {pool} is closed"),
                    Some(pool) if account.balance > account.rules.floor => {
                        format!("its owner spent their per-user limit in account {pool}")
                    }
                    Some(pool) => format!(
                        "account {pool}'s balance {} is at or below the floor {}",
                        account.balance, account.rules.floor
                    ),
                    None => format!("balance {} is at or below the floor {}", account.balance, account.rules.floor),
                };
                Err(Refusal::logged(reason, message.clone(), account.refusal_tail(case)))
            }
            _ => Ok(()),
        }
    }

    fn check_limits(&mut self, case: &Case, account: &Account) -> Result<Option<Commitment>, Refusal> {
        let config = case.inputs.config;
        let seconds = self.seconds.unwrap_or(config.default_time_limit.as_secs());
        let snapshot = account.standing.snapshot;
        let shape = case.job.shape();
        let gpus = requested_milli(&self.request, &shape, snapshot.sharing);
        let strands = strands_of(case.job, &self.request, &shape, snapshot);
        let estimate = JobEstimate::with_strands(gpus, seconds, &snapshot.prices, strands).map_err(uncountable)?;
        let held = account.held(case);
        let asked = total_milli(&estimate.gpus);
        if let Some(max) = config.max_gpus_per_user {
            within_gpu_limit(max, held.milli_gpus, asked)?;
        }
        if config.mode == Mode::Estimate && !account.borrowed {
            within_estimates(case, account, held.max_cost, &estimate, |other| other.held(case).max_cost)?;
        }
        let counts = config.mode == Mode::Estimate || config.max_gpus_per_user.is_some();
        let admitted = counts.then_some(Commitment { milli_gpus: asked, max_cost: estimate.cost });
        self.counted = Some((estimate, held));
        Ok(admitted)
    }

    fn deprioritize(
        &self,
        case: &Case,
        account: &Account,
        how: &Deprioritize,
        message: &str,
        draft: &mut Draft,
        log: &mut Log,
    ) {
        log(
            Level::Verbose,
            format!("a GPU job of {} in overdraft (balance {}): {how:?}", case.owner.who, account.balance),
        );
        let changes = &mut draft.changes;
        match how {
            Deprioritize::Nice(n) => changes.nice = (*n > 0).then(|| raised_nice(case.job.nice, *n)),
            Deprioritize::SiteFactor(f) => changes.site_factor = Some(site_factor(*f)),
            Deprioritize::Qos(q) => changes.qos = Some(q.clone()),
        }
        draft.messages.push(message.to_string());
    }

    fn note(&self, account: &Account) -> Option<String> {
        let (estimate, held) = self.counted.as_ref().filter(|_| self.wants_estimate || self.wants_quote)?;
        if self.wants_quote {
            let snapshot = account.standing.snapshot;
            let partitions = may_run_in(&snapshot.partitions, self.partitions.as_deref());
            let free = snapshot.queue.as_ref().and_then(|q| q.free_gpus_for(&partitions));
            return Some(quote::message(
                account.balance,
                held.max_cost,
                estimate,
                account.pool,
                &snapshot.prices,
                free.as_ref(),
            ));
        }
        Some(rules::estimate_message(account.balance, held.max_cost, estimate, account.pool))
    }
}

/// What one array task of the job holds beside its GPUs, and its GPUs, where the site prices what
/// a job strands (`[prices] stranded`) and the snapshot has the nodes' shapes.
fn strands_of(
    job: &JobRequest,
    request: &GpuRequest,
    shape: &JobShape,
    snapshot: &Snapshot,
) -> Option<(Strands, MilliByType)> {
    if snapshot.prices.stranded().is_empty() {
        return None;
    }
    let per_task = requested_milli(request, &JobShape { array_tasks: 1, ..*shape }, snapshot.sharing);
    let held = job.held(total_milli(&per_task).div_ceil(MILLI));
    Some((Strands::new(held, shape.nodes, &snapshot.node_shapes)?, per_task))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{config, inputs, message, no_local, world, World};
    use super::super::{Changes, Verdict};
    use super::*;
    use crate::config::Admission;
    use crate::config::Exempt;
    use crate::Tokens;
    use std::collections::HashMap;
    use std::time::Duration;

    fn gpu_job(user_id: u32) -> JobRequest {
        JobRequest { user_id: Some(user_id), tres_per_node: Some("gres:gpu:a6000:1".into()), ..Default::default() }
    }

    fn minutes(m: u32) -> Option<TimeLimit> {
        Some(TimeLimit::Minutes(m))
    }

    /// The outcome, asked by `submit_uid`, with `local` admitted since the queue was read.
    fn submit_as(
        world: Option<&World>,
        config: &Admission,
        job: &JobRequest,
        submit_uid: u32,
        local: &dyn Fn(u32) -> Commitment,
    ) -> Outcome {
        let inputs = Inputs { admitted_since: local, ..inputs(world, config, submit_uid) };
        decide_submit(job, &inputs, &mut |_, _| {})
    }

    /// The verdict for a job submitted by its owner, and the log lines.
    fn submit(world: Option<&World>, config: &Admission, job: &JobRequest) -> (Verdict, Vec<String>) {
        let mut lines = Vec::new();
        let inputs = inputs(world, config, job.user_id.expect("the test job names its owner"));
        let s = decide_submit(job, &inputs, &mut |l, m| lines.push(format!("{l:?}: {m}")));
        (s.verdict, lines)
    }

    #[test]
    fn cpu_only_jobs_pass_untouched_whatever_the_balance() {
        let (w, c) = (world(), config());
        let cpu = JobRequest { user_id: Some(1001), ..Default::default() };
        assert_eq!(submit(Some(&w), &c, &cpu).0, Verdict::accept());
        let other = JobRequest { tres_per_node: Some("gres:nic:1".into()), ..cpu.clone() };
        assert_eq!(submit(Some(&w), &c, &other).0, Verdict::accept());
        let shard = JobRequest { tres_per_node: Some("gres:shard:1".into()), ..cpu.clone() };
        assert!(matches!(submit(Some(&w), &c, &shard).0, Verdict::Reject { .. }), "a GPU share is a GPU request");
        let strict = Admission { on_error: OnError::Reject, ..config() };
        assert_eq!(submit(None, &strict, &cpu).0, Verdict::accept());
    }

    #[test]
    fn at_the_floor_gpu_jobs_are_refused_in_every_form() {
        let (w, c) = (world(), config());
        for (field, text) in [
            ("node", "gres:gpu:a6000:1"),
            ("job", "gres:gpu:1"),
            ("task", "gres/gpu:1"),
            ("socket", "gres/gpu:rtx3090:1"),
        ] {
            let mut job = JobRequest { user_id: Some(1001), ..Default::default() };
            let slot = match field {
                "node" => &mut job.tres_per_node,
                "job" => &mut job.tres_per_job,
                "task" => &mut job.tres_per_task,
                _ => &mut job.tres_per_socket,
            };
            *slot = Some(text.into());
            let (verdict, log) = submit(Some(&w), &c, &job);
            let Verdict::Reject { message } = verdict else { panic!("{field}: {verdict:?}") };
            assert!(message.starts_with("gputokens: your GPU token balance is -10.4 (floor -10)"), "{message}");
            assert_eq!(
                log,
                ["Info: refused a GPU job of alice (uid 1001): balance -10.4 is at or below the floor -10"]
            );
        }
    }

    #[test]
    fn overdraft_lowers_priority_the_configured_way_and_tells_the_user() {
        let w = world();
        let c = config();
        let (verdict, _) = submit(Some(&w), &c, &gpu_job(1003));
        let Verdict::Accept { changes, message } = verdict else { panic!("{verdict:?}") };
        assert_eq!(changes, Changes { nice: Some(10_000), ..Default::default() });
        assert!(message.unwrap().contains("-3.5 (below 0)"));
        let asked = JobRequest { nice: Some(500), ..gpu_job(1003) };
        let Verdict::Accept { changes, .. } = submit(Some(&w), &c, &asked).0 else { panic!() };
        assert_eq!(changes.nice, Some(10_500));

        let site = Admission { deprioritize: Deprioritize::SiteFactor(-7000), ..config() };
        let Verdict::Accept { changes, message } = submit(Some(&w), &site, &gpu_job(1003)).0 else { panic!() };
        assert_eq!(changes, Changes { site_factor: Some(-7000), ..Default::default() });
        assert!(message.unwrap().contains("(site factor -7000)"));
        let qos = Admission { deprioritize: Deprioritize::Qos("overdraft".into()), ..config() };
        let Verdict::Accept { changes, .. } = submit(Some(&w), &qos, &gpu_job(1003)).0 else { panic!() };
        assert_eq!(changes, Changes { qos: Some("overdraft".into()), ..Default::default() });
        let quiet = Admission { deprioritize: Deprioritize::Nice(0), ..config() };
        let Verdict::Accept { changes, message } = submit(Some(&w), &quiet, &gpu_job(1003)).0 else { panic!() };
        assert_eq!((changes, message.is_some()), (Changes::default(), true), "nice_increment 0: only told");
    }

    #[test]
    fn positive_and_unknown_users_pass() {
        let (w, c) = (world(), config());
        assert_eq!(submit(Some(&w), &c, &gpu_job(1002)).0, Verdict::accept());
        assert_eq!(submit(Some(&w), &c, &gpu_job(4242)).0, Verdict::accept(), "not in the snapshot: initial 100");
    }

    #[test]
    fn the_owner_is_the_submit_uid_when_the_description_has_none() {
        let (w, c) = (world(), config());
        let job = JobRequest { user_id: None, ..gpu_job(0) };
        assert!(matches!(submit_as(Some(&w), &c, &job, 1001, &no_local).verdict, Verdict::Reject { .. }));
        assert_eq!(submit_as(Some(&w), &c, &job, 1002, &no_local).verdict, Verdict::accept());
    }

    #[test]
    fn unavailable_balances_follow_on_error() {
        let (w, c) = (world(), config());
        assert_eq!(submit(None, &c, &gpu_job(1001)).0, Verdict::accept(), "accept: no check");
        let strict = Admission { on_error: OnError::Reject, ..config() };
        let (verdict, log) = submit(None, &strict, &gpu_job(1002));
        assert!(message(&verdict).contains("balances are unavailable"), "{verdict:?}");
        assert!(log.is_empty(), "the watcher logs it when it begins: {log:?}");
        assert!(matches!(submit(Some(&w), &strict, &gpu_job(1001)).0, Verdict::Reject { .. }), "usable: checked");
    }

    #[test]
    fn a_uid_whose_name_lookup_may_have_failed_is_judged_by_on_error_not_as_new() {
        // alice (1001) is at the floor in the snapshot; uid 1009's name could not be looked up.
        let w = World { lookups_failed: true, ..world() };
        let strict = Admission { on_error: OnError::Reject, ..config() };
        let (verdict, _) = submit(Some(&w), &strict, &gpu_job(1009));
        assert!(message(&verdict).contains("balances are unavailable"), "{verdict:?}");
        assert_eq!(submit(Some(&w), &config(), &gpu_job(1009)).0, Verdict::accept(), "on_error accept");
        assert!(matches!(submit(Some(&w), &strict, &gpu_job(1001)).0, Verdict::Reject { .. }), "alice's known");
        // With every name looked up, an unlisted uid is a new user at `initial`.
        let all_known = world();
        assert_eq!(submit(Some(&all_known), &strict, &gpu_job(1009)).0, Verdict::accept());
    }

    #[test]
    fn an_unreadable_gpu_entry_counts_as_a_gpu_request() {
        let (w, c) = (world(), config());
        let job = JobRequest { tres_per_node: Some("gres:gpu:a6000:lots".into()), ..gpu_job(1001) };
        let (verdict, log) = submit(Some(&w), &c, &job);
        assert!(matches!(verdict, Verdict::Reject { .. }));
        assert!(log[0].contains("cannot read the GPU request 'gres:gpu:a6000:lots'"), "{log:?}");
    }

    #[test]
    fn exempt_users_accounts_and_qos_are_not_checked() {
        let w = world();
        let exempt_submit = |config: &Admission, exempt: Exempt, job: &JobRequest| {
            let mut lines = Vec::new();
            let inputs = Inputs { exempt: &exempt, ..inputs(Some(&w), config, job.user_id.unwrap()) };
            let verdict = decide_submit(job, &inputs, &mut |l, m| lines.push(format!("{l:?}: {m}"))).verdict;
            (verdict, lines)
        };
        let by_user = || Exempt { users: vec!["alice".into()], ..Default::default() };
        let (verdict, log) = exempt_submit(&config(), by_user(), &gpu_job(1001));
        assert_eq!(verdict, Verdict::accept());
        assert_eq!(log, ["Verbose: a GPU job of alice (uid 1001) is exempt: not checked"]);
        let by_account = || Exempt { accounts: vec!["ops".into()], ..Default::default() };
        assert!(matches!(exempt_submit(&config(), by_account(), &gpu_job(1001)).0, Verdict::Reject { .. }));
        let named = JobRequest { account: Some("ops".into()), ..gpu_job(1001) };
        assert_eq!(exempt_submit(&config(), by_account(), &named).0, Verdict::accept(), "the job's -A");
        let physics = Exempt { accounts: vec!["physics".into()], ..Default::default() };
        let limited = Admission { max_gpus_per_user: Some(1), ..config() };
        assert_eq!(exempt_submit(&limited, physics, &gpu_job(1002)).0, Verdict::accept(), "bob's default account");
        let by_qos = Exempt { qos: vec!["urgent".into()], ..Default::default() };
        let urgent = JobRequest { qos: Some("urgent".into()), ..gpu_job(1001) };
        assert_eq!(exempt_submit(&config(), by_qos, &urgent).0, Verdict::accept());
    }

    /// accountd down: the snapshot stale or missing, and on_error = "reject". Exempt users and the
    /// members of an exempt default account still pass, and the duration limit spares them.
    #[test]
    fn exemptions_hold_while_the_balances_are_stale_or_missing() {
        let w = world();
        let c = Admission { on_error: OnError::Reject, max_job_duration: Some(Duration::from_secs(3600)), ..config() };
        let long = |uid| JobRequest { time_limit: minutes(180), ..gpu_job(uid) };
        let alice = Exempt { users: vec!["alice".into()], ..Default::default() };
        let names = HashMap::from([(1001, "alice".to_string())]);
        let verdict = |exempt: &Exempt, identity: Option<&World>, names: &HashMap<u32, String>, job: &JobRequest| {
            let standing = identity.map(World::standing);
            let inputs = Inputs {
                exempt,
                standing: None,
                identity: standing,
                exempt_names: names,
                ..inputs(None, &c, job.user_id.unwrap())
            };
            decide_submit(job, &inputs, &mut |_, _| {}).verdict
        };
        assert_eq!(verdict(&alice, Some(&w), &HashMap::new(), &long(1001)), Verdict::accept(), "stale");
        assert_eq!(verdict(&alice, None, &names, &long(1001)), Verdict::accept(), "missing");
        let refused = verdict(&alice, None, &HashMap::new(), &long(1001));
        assert!(message(&refused).contains("at most 1:00:00"), "a name known from nowhere: {refused:?}");
        assert!(matches!(verdict(&alice, None, &names, &long(1002)), Verdict::Reject { .. }), "bob is not exempt");
        let physics = Exempt { accounts: vec!["physics".into()], ..Default::default() };
        assert_eq!(verdict(&physics, Some(&w), &names, &long(1002)), Verdict::accept(), "bob's default account");
    }

    #[test]
    fn max_job_duration_refuses_longer_jobs_and_limits_untimed_ones() {
        let w = world();
        let c = Admission { max_job_duration: Some(Duration::from_secs(2 * 3600)), ..config() };
        let long = JobRequest { time_limit: minutes(180), ..gpu_job(1002) };
        let (verdict, log) = submit(Some(&w), &c, &long);
        assert!(message(&verdict).starts_with("gputokens: GPU jobs may run for at most 2:00:00 here"), "{verdict:?}");
        assert_eq!(log, ["Info: refused a GPU job of bob (uid 1002): its time limit is above max_job_duration"]);
        assert_eq!(
            submit(Some(&w), &c, &JobRequest { time_limit: minutes(120), ..gpu_job(1002) }).0,
            Verdict::accept()
        );
        assert_eq!(submit(Some(&w), &c, &gpu_job(1002)).0, Verdict::accept(), "the gpu partition gives 1 h");
        let untimed_long = JobRequest { partition: Some("long".into()), ..gpu_job(1002) };
        let Verdict::Accept { changes, message } = submit(Some(&w), &c, &untimed_long).0 else { panic!() };
        assert_eq!(changes.time_limit, Some(120));
        assert!(message.unwrap().contains("it was given the longest allowed, 2:00:00"));
        let unlimited = JobRequest { time_limit: Some(TimeLimit::Unlimited), ..gpu_job(1002) };
        let Verdict::Accept { changes, .. } = submit(Some(&w), &c, &unlimited).0 else { panic!() };
        assert_eq!(changes.time_limit, Some(120), "--time=UNLIMITED gets the maximum too");
        let cpu = JobRequest { time_limit: minutes(10_000), user_id: Some(1002), ..Default::default() };
        assert_eq!(submit(Some(&w), &c, &cpu).0, Verdict::accept(), "CPU jobs are not limited");
        let (verdict, _) = submit(None, &c, &untimed_long);
        assert_eq!(verdict.clone(), submit(None, &c, &gpu_job(1002)).0, "unavailable: no partitions known");
        let Verdict::Accept { changes, .. } = verdict else { panic!() };
        assert_eq!(changes.time_limit, Some(120), "the limit applies even with the balances unavailable");
    }

    #[test]
    fn max_gpus_per_user_counts_the_queue_and_what_was_admitted_since() {
        let w = world();
        let c = Admission { max_gpus_per_user: Some(4), ..config() };
        let two = JobRequest { tres_per_node: Some("gres:gpu:a6000:2".into()), ..gpu_job(1002) };
        let s = submit_as(Some(&w), &c, &two, 1002, &no_local);
        assert_eq!(s.verdict, Verdict::accept(), "bob holds 2 in the queue: 2 + 2 = 4");
        assert_eq!(s.admitted, Some((1002, Commitment { milli_gpus: 2000, max_cost: Tokens::whole(8) })));
        let one_more = |_: u32| Commitment { milli_gpus: 1000, max_cost: Tokens::ZERO };
        let s = submit_as(Some(&w), &c, &two, 1002, &one_more);
        assert_eq!(
            message(&s.verdict),
            "gputokens: you may hold at most 4 GPUs in running and pending jobs together; you hold 3 and this job \
             asks for 2. Submit it when some of your GPU jobs have finished (squeue --me). [gputokens code=gpu_limit]"
        );
        assert_eq!(s.admitted, None);
        let array =
            JobRequest { array_inx: Some("1-5".into()), tres_per_node: Some("gres:gpu:1".into()), ..gpu_job(4242) };
        assert!(matches!(submit_as(Some(&w), &c, &array, 4242, &no_local).verdict, Verdict::Reject { .. }));
        assert_eq!(submit_as(Some(&w), &config(), &two, 1002, &no_local).admitted, None, "no limit: no tally");
    }

    #[test]
    fn the_estimate_refuses_what_could_take_the_balance_below_the_floor() {
        let w = world();
        let c = Admission { mode: Mode::Estimate, ..config() };
        // bob: 50, queue can cost 16; 4 a6000 × 2 h × 4 = 32 → 50 - 16 - 32 = 2: fine.
        let job =
            JobRequest { tres_per_node: Some("gres:gpu:a6000:4".into()), time_limit: minutes(120), ..gpu_job(1002) };
        let s = submit_as(Some(&w), &c, &job, 1002, &no_local);
        assert_eq!(s.verdict, Verdict::accept());
        assert_eq!(s.admitted, Some((1002, Commitment { milli_gpus: 4000, max_cost: Tokens::whole(32) })));
        // Admitted once more before the queue shows it: 50 - 16 - 32 - 32 = -30.
        let again = |_: u32| Commitment { milli_gpus: 4000, max_cost: Tokens::whole(32) };
        let s = submit_as(Some(&w), &c, &job, 1002, &again);
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
        assert_eq!(submit_as(Some(&w), &c, &untimed, 1002, &no_local).admitted.unwrap().1.max_cost, Tokens::whole(16));
        let long = JobRequest { partition: Some("long".into()), ..untimed };
        assert!(matches!(submit_as(Some(&w), &c, &long, 1002, &no_local).verdict, Verdict::Reject { .. }));
        // Untyped GPUs are priced at the highest price.
        let any = JobRequest {
            tres_per_job: Some("gres:gpu:12".into()),
            tres_per_node: None,
            time_limit: minutes(60),
            ..gpu_job(1002)
        };
        let s = submit_as(Some(&w), &c, &any, 1002, &no_local);
        assert!(message(&s.verdict).contains("up to 48 tokens (12 GPUs of any type for 1:00:00)"), "{:?}", s.verdict);
        assert_eq!(submit_as(Some(&w), &config(), &long, 1002, &no_local).verdict, Verdict::accept());
    }

    /// Every refusal and deprioritization ends with its code, and when replenishment alone lets the
    /// job through, per GPU type: at noon on 2026-11-10, +1 token a day, each day's grant counted
    /// a check interval (30 minutes) and a minute after its midnight.
    #[test]
    fn refusals_and_deprioritizations_carry_their_code_and_when_each_gpu_type_passes() {
        let w = world();
        let tail = |verdict: &Verdict| {
            let text = match verdict {
                Verdict::Reject { message } => message.clone(),
                Verdict::Accept { message, .. } => message.clone().unwrap_or_default(),
            };
            text.rsplit_once(" [").map(|(_, t)| format!("[{t}")).unwrap_or(text)
        };
        // alice at -10.4: above the floor (-9.4) tomorrow, 12 h and 31 min away (a check interval
        // of 30 minutes and a minute after midnight).
        let s = submit_as(Some(&w), &config(), &gpu_job(1001), 1001, &no_local);
        assert_eq!(tail(&s.verdict), "[gputokens code=floor retry_after=*:45060]");
        // carol at -3.5: deprioritized until back at 0, on the 14th.
        let s = submit_as(Some(&w), &config(), &gpu_job(1003), 1003, &no_local);
        assert_eq!(tail(&s.verdict), "[gputokens code=overdraft retry_after=*:304260]");
        // Balances unreadable and on_error = "reject": a minute.
        let strict = Admission { on_error: OnError::Reject, ..config() };
        let s = submit_as(None, &strict, &gpu_job(1002), 1002, &no_local);
        assert_eq!(tail(&s.verdict), "[gputokens code=unavailable retry_after=*:60]");
        // bob (50, his queue can cost 16): 12 a6000 for 1 h (48) would take him to -14; at rtx2080's
        // price (6) it passes now; a6000 once 4 days have brought him to 54.
        let estimate = Admission { mode: Mode::Estimate, ..config() };
        let twelve = JobRequest { tres_per_node: Some("gres:gpu:a6000:12".into()), ..gpu_job(1002) };
        let s = submit_as(Some(&w), &estimate, &twelve, 1002, &no_local);
        assert_eq!(tail(&s.verdict), "[gputokens code=estimate retry_after=a6000:304260,rtx2080:0]");
        let parsed = crate::decision::codes::parse(&message(&s.verdict)).unwrap();
        assert_eq!(parsed, ("estimate".to_string(), vec![("a6000".to_string(), 304_260), ("rtx2080".to_string(), 0)]));
        // Waiting mends neither a time limit nor too many GPUs.
        let capped =
            Admission { max_job_duration: Some(Duration::from_secs(3600)), max_gpus_per_user: Some(4), ..config() };
        let long = JobRequest { time_limit: minutes(120), ..gpu_job(1002) };
        assert_eq!(tail(&submit_as(Some(&w), &capped, &long, 1002, &no_local).verdict), "[gputokens code=time_limit]");
        let many = JobRequest { tres_per_node: Some("gres:gpu:a6000:3".into()), ..gpu_job(1002) };
        assert_eq!(tail(&submit_as(Some(&w), &capped, &many, 1002, &no_local).verdict), "[gputokens code=gpu_limit]");
        // A user who is fine is told nothing.
        assert_eq!(submit_as(Some(&w), &config(), &gpu_job(1002), 1002, &no_local).verdict, Verdict::accept());
    }

    #[test]
    fn a_request_too_large_to_count_is_refused_not_priced_cheap() {
        let w = world();
        for c in [config(), Admission { mode: Mode::Estimate, max_gpus_per_user: Some(4), ..config() }] {
            let huge = JobRequest {
                tres_per_job: Some("gres:gpu:4294967295".into()),
                tres_per_node: None,
                time_limit: Some(TimeLimit::Unlimited),
                ..gpu_job(1002)
            };
            let (verdict, log) = submit(Some(&w), &c, &huge);
            let Verdict::Reject { message } = verdict else { panic!("{verdict:?}") };
            assert!(message.starts_with("gputokens: this job asks for 4294967295 GPUs of any type for "), "{message}");
            assert!(message.contains("more than gputokens can count (at most 1000000 GPUs in one job"), "{message}");
            assert_eq!(log, ["Info: refused a GPU job of bob (uid 1002): its request is more than can be counted"]);
            // Counts that wrap a u64 many times over, per task of a huge array: still refused.
            let wraps = JobRequest {
                tres_per_task: Some("gres/gpu:a6000:99999999999999999999t".into()),
                num_tasks: Some(u32::MAX - 2),
                array_inx: Some("0-4294967294".into()),
                ..gpu_job(1002)
            };
            assert!(message_of_refusal(&w, &c, &wraps).contains("more than gputokens can count"));
        }
    }

    fn message_of_refusal(w: &World, c: &Admission, job: &JobRequest) -> String {
        match submit(Some(w), c, job).0 {
            Verdict::Reject { message } => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gpu_tokens_estimate_tells_the_most_a_job_can_cost() {
        let w = world();
        let c = config();
        let job = JobRequest { time_limit: minutes(90), wants_estimate: true, ..gpu_job(1002) };
        let Verdict::Accept { changes, message: told } = submit(Some(&w), &c, &job).0 else { panic!() };
        assert_eq!(changes, Changes::default());
        assert_eq!(
            told.unwrap(),
            "gputokens: this job can cost up to 6 tokens (1 a6000 GPU for 1:30:00); your GPU token balance is 50; \
             your running and pending GPU jobs can cost up to 16 more."
        );
        let overdraft = JobRequest { time_limit: minutes(60), wants_estimate: true, ..gpu_job(1003) };
        let text = message(&submit(Some(&w), &c, &overdraft).0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains("(below 0)") && lines[1].contains("can cost up to 4 tokens"), "{text}");
    }

    /// `sbatch --test-only`: the quote, from the snapshot's free GPUs (fixture: none listed, so it
    /// says it does not know); a refusal is still a refusal, with its code.
    #[test]
    fn a_test_only_submission_is_quoted() {
        let mut w = world();
        let job = JobRequest { time_limit: minutes(60), wants_quote: true, ..gpu_job(1002) };
        let Verdict::Accept { message: told, .. } = submit(Some(&w), &config(), &job).0 else { panic!() };
        assert_eq!(
            told.unwrap(),
            "gputokens quote: this job can cost up to 4 tokens (1 a6000 GPU for 1:00:00); your GPU token balance is \
             50, at least 30 after it and what your running and pending GPU jobs can still cost (16). Which GPUs are \
             free now is not known."
        );
        let free = std::collections::BTreeMap::from([("rtx2080".to_string(), 3)]);
        w.snapshot.queue.as_mut().unwrap().free_gpus = Some(free);
        let told = message(&submit(Some(&w), &config(), &job).0);
        assert!(told.ends_with("Cheaper, with GPUs free now: rtx2080 up to 0.5 tokens (3 free)."), "{told}");
        let at_floor = JobRequest { wants_quote: true, ..gpu_job(1001) };
        assert!(message(&submit(Some(&w), &config(), &at_floor).0).contains("[gputokens code=floor"));

        // Where the snapshot lists each partition's free GPUs, a job is offered those of the
        // partitions it may run in (the fixture's default is `gpu`).
        let queue = w.snapshot.queue.as_mut().unwrap();
        let free = |n: u64| std::collections::BTreeMap::from([("rtx2080".to_string(), n)]);
        queue.free_gpus_in = std::collections::BTreeMap::from([
            ("gpu".to_string(), free(0)),
            ("long".to_string(), free(2)),
            ("other".to_string(), free(1)),
        ]);
        let told = message(&submit(Some(&w), &config(), &job).0);
        assert!(told.ends_with("No cheaper GPU type has 1 GPU free now."), "{told}");
        let in_long = JobRequest { partition: Some("long,other".into()), ..job.clone() };
        let told = message(&submit(Some(&w), &config(), &in_long).0);
        assert!(told.ends_with("Cheaper, with GPUs free now: rtx2080 up to 0.5 tokens (2 free)."), "{told}");
    }

    /// Where the site prices what a job strands, the estimate and the quote count the worst node
    /// a job's CPUs could leave GPUs idle on, and say so; a job that says no CPUs is priced as before.
    #[test]
    fn the_estimate_counts_the_gpus_a_jobs_cpus_would_leave_idle() {
        use crate::job_request::CpuRequest;
        use crate::stranding::{NodeShape, Part};
        let mut w = world();
        let snap = &mut w.snapshot;
        snap.prices = snap.prices.clone().with_stranded(vec![Part::Cpus]);
        // 16 CPUs, 2 a6000 and 2 rtx2080 (9 tokens an hour).
        let gpus = std::collections::BTreeMap::from([("a6000".to_string(), 2000), ("rtx2080".to_string(), 2000)]);
        snap.node_shapes = vec![NodeShape { cpus: 16, mem_mb: 64_000, milli_gpus: gpus }];
        let cpus = |cpus_per_task| CpuRequest { cpus_per_task: Some(cpus_per_task), ..Default::default() };
        let quoted = |cpus| JobRequest { time_limit: minutes(60), wants_quote: true, cpus, ..gpu_job(1002) };
        // Every CPU: its share is the node's 4 GPUs; the other 3 (4 + 0.5 + 0.5 an hour) are added.
        let told = message(&submit(Some(&w), &config(), &quoted(cpus(16))).0);
        assert!(
            told.starts_with(
                "gputokens quote: this job can cost up to 9 tokens (1 a6000 GPU for 1:00:00; priced by its CPUs: 16 of \
                 the 16 on a node it may run on stand for 4 of its 4 GPUs, so 5/GPU-hour is added for the 3 it leaves idle); your \
                 GPU token balance is 50, at least 25 after it"
            ),
            "{told}"
        );
        // Its share (4 CPUs, a GPU): as before; no CPUs said: as before.
        let fair = message(&submit(Some(&w), &config(), &quoted(cpus(4))).0);
        assert!(
            fair.starts_with("gputokens quote: this job can cost up to 4 tokens (1 a6000 GPU for 1:00:00);"),
            "{fair}"
        );
        let said_none = message(&submit(Some(&w), &config(), &quoted(CpuRequest::default())).0);
        assert_eq!(said_none, fair);
        // In estimate mode the stranded price is what the balance must cover: for 8 hours, 50 - 16 -
        // 8 × 9 is below the floor, 50 - 16 - 8 × 4 is not.
        let estimate = Admission { mode: crate::config::admission::Mode::Estimate, ..config() };
        let long = |cpus| JobRequest { time_limit: minutes(480), cpus, ..gpu_job(1002) };
        let (verdict, _) = submit(Some(&w), &estimate, &long(cpus(16)));
        let refused = message(&verdict);
        assert!(matches!(verdict, Verdict::Reject { .. }), "{refused}");
        assert!(refused.contains("can cost up to 72 tokens (1 a6000 GPU for 8:00:00; priced by its CPUs"), "{refused}");
        assert!(matches!(submit(Some(&w), &estimate, &long(cpus(4))).0, Verdict::Accept { .. }));
    }
}
