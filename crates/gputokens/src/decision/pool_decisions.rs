//! Submissions and updates decided with pools: which balance pays (the job's account, the
//! default, the job being updated), the worse of pool and user in mode "both", and an update of a
//! job the last queue read did not show.

use super::fixtures::{config, inputs, message, snapshot, world_of, NOW};
use super::{decide_modify, decide_submit, Verdict};
use crate::job_request::JobRequest;
use crate::policy::BucketRules;
use crate::pools::{PoolMode, PoolStanding};
use crate::Tokens;

const BOB: u32 = 1002;

/// bob (50 tokens of his own, default account physics) in lab (at its floor), course (50) and ops
/// (no pool); rich (a pool of 1000) is not his.
fn world(mode: PoolMode) -> super::fixtures::World {
    let mut snap = snapshot();
    snap.pool_mode = mode;
    let pool = |balance: i64| PoolStanding {
        balance: Tokens::whole(balance),
        rules: BucketRules { monthly: Tokens::whole(30), ..BucketRules::default() },
        user_limit: None,
        coordinators: vec!["carol".into()],
        spent: Default::default(),
        parent: None,
        lends: false,
        window: None,
    };
    snap.pools.insert("lab".into(), pool(-10));
    snap.pools.insert("course".into(), pool(50));
    snap.pools.insert("physics".into(), pool(-4));
    snap.pools.insert("rich".into(), pool(1000));
    snap.user_accounts.insert("bob".into(), vec!["course".into(), "lab".into(), "ops".into(), "physics".into()]);
    snap.queue.as_mut().unwrap().job_accounts.insert(7, "lab".into());
    snap.queue.as_mut().unwrap().job_accounts.insert(8, "course".into());
    snap.generated = NOW - 10;
    world_of(snap)
}

fn gpu_job(account: Option<&str>) -> JobRequest {
    JobRequest {
        user_id: Some(BOB),
        account: account.map(str::to_string),
        tres_per_node: Some("gres:gpu:a6000:1".into()),
        ..Default::default()
    }
}

fn submit(mode: PoolMode, job: &JobRequest) -> Verdict {
    let w = world(mode);
    decide_submit(job, &inputs(Some(&w), &config(), BOB), &mut |_, _| {}).verdict
}

fn update(mode: PoolMode, job: &JobRequest) -> Verdict {
    let w = world(mode);
    decide_modify(job, &inputs(Some(&w), &config(), BOB), &mut |_, _| {}).verdict
}

#[test]
fn the_jobs_account_picks_the_pool_that_pays() {
    let refused = submit(PoolMode::Account, &gpu_job(Some("lab")));
    assert!(matches!(refused, Verdict::Reject { .. }), "{refused:?}");
    assert!(message(&refused).contains("account lab's GPU token balance is -10"));
    assert!(message(&refused).contains("(course, ops, physics): sbatch -A course."), "{}", message(&refused));
    // lab's own floor and replenishment: above the floor tomorrow (see `codes`).
    assert!(message(&refused).ends_with(" [gputokens code=pool_floor retry_after=*:45060]"), "{}", message(&refused));
    assert!(matches!(submit(PoolMode::Account, &gpu_job(Some("course"))), Verdict::Accept { message: None, .. }));
    let default = submit(PoolMode::Account, &gpu_job(None));
    assert!(
        message(&default).starts_with("gputokens: account physics's GPU token balance is -4 (below 0)"),
        "no -A: physics"
    );
    assert!(message(&default).ends_with(" [gputokens code=overdraft retry_after=*:304260]"), "{}", message(&default));
    assert!(
        matches!(submit(PoolMode::Account, &gpu_job(Some("ops"))), Verdict::Accept { message: None, .. }),
        "ops: bob's own 50"
    );
    assert!(
        matches!(submit(PoolMode::User, &gpu_job(Some("lab"))), Verdict::Accept { message: None, .. }),
        "user mode"
    );
}

#[test]
fn an_account_named_in_another_case_or_not_the_users_is_judged_as_slurm_runs_it() {
    // The plugin reads -A lower-cased (slurmctld lower-cases it only after job_submit): LAB is lab.
    let lab = JobRequest { account: Some(crate::pools::slurm_account_name("LAB")), ..gpu_job(None) };
    assert!(message(&submit(PoolMode::Account, &lab)).contains("account lab's GPU token balance is -10"));
    // rich is not bob's: slurmctld refuses it, or without AccountingStorageEnforce=associations runs
    // it under his default account physics, which pays; never judged by rich's 1000.
    let rich = submit(PoolMode::Account, &gpu_job(Some("rich")));
    assert!(message(&rich).starts_with("gputokens: account physics's GPU token balance is -4 (below 0)"), "{rich:?}");
}

#[test]
fn in_mode_both_the_user_and_the_pool_must_have_tokens() {
    let mut w = world(PoolMode::Both);
    w.snapshot.balances.insert("bob".into(), Tokens::whole(-10));
    let verdict = decide_submit(&gpu_job(Some("course")), &inputs(Some(&w), &config(), BOB), &mut |_, _| {}).verdict;
    assert!(message(&verdict).starts_with("gputokens: your GPU token balance is -10"), "{verdict:?}");
    assert!(matches!(submit(PoolMode::Both, &gpu_job(Some("lab"))), Verdict::Reject { .. }));
}

/// Mode "both", both balances at their floors: the pool's refusal is shown (the pool on a tie), and
/// its `retry_after` waits for the later of the two to recover (bob's own, six days of grants away).
#[test]
fn in_mode_both_a_refusal_retries_after_both_balances_recover() {
    let decide = |mode: PoolMode| {
        let mut w = world(mode);
        w.snapshot.balances.insert("bob".into(), Tokens::whole(-15));
        message(&decide_submit(&gpu_job(Some("lab")), &inputs(Some(&w), &config(), BOB), &mut |_, _| {}).verdict)
    };
    let retry = |text: &str| crate::decision::codes::parse(text).expect("a tail").1;
    let own = retry(&decide(PoolMode::User));
    let lab = retry(&message(&submit(PoolMode::Account, &gpu_job(Some("lab")))));
    assert!(own[0].1 > lab[0].1, "bob's own recovers later: {own:?} {lab:?}");
    let both = decide(PoolMode::Both);
    assert!(both.contains("account lab's GPU token balance is -10"), "{both}");
    assert_eq!(retry(&both), own, "{both}");
}

#[test]
fn updates_are_judged_by_the_pool_of_the_account_the_job_is_in_or_moves_to() {
    let nice0 = |id: u32| JobRequest { job_id: Some(id), nice: Some(0), ..Default::default() };
    let moved = |id: u32, to: &str| JobRequest { job_id: Some(id), account: Some(to.into()), ..Default::default() };
    // Into lab at its floor: refused; into course: allowed.
    assert!(matches!(update(PoolMode::Account, &moved(8, "lab")), Verdict::Reject { .. }));
    assert!(matches!(update(PoolMode::Account, &moved(7, "course")), Verdict::Accept { .. }));
    // Job 8 is in course: its nice is bob's to set; job 9 (not in the last read) may be in physics,
    // which is in overdraft: the penalty stays.
    assert!(matches!(update(PoolMode::Account, &nice0(8)), Verdict::Accept { .. }));
    assert!(matches!(update(PoolMode::Account, &nice0(9)), Verdict::Reject { .. }));
}

/// The audit's L5: every member's jobs a pool pays for draw on its one balance, so the estimate
/// counts them all (the last queue read's and what the plugin admitted since for that pool), not
/// only the submitter's own; and an admitted job is tallied against its pool.
#[test]
fn the_estimate_counts_every_members_jobs_the_pool_pays_for() {
    use crate::config::admission::Mode;
    use crate::estimate::Commitment;
    let estimate = crate::config::Admission { mode: Mode::Estimate, ..config() };
    let held = |tokens: i64| Commitment { milli_gpus: 4000, max_cost: Tokens::whole(tokens) };
    let course_job = gpu_job(Some("course"));
    let decide = |w: &super::fixtures::World, admitted: &dyn Fn(&str) -> Commitment| {
        let inputs = super::Inputs { admitted_to_pool: admitted, ..inputs(Some(w), &estimate, BOB) };
        decide_submit(&course_job, &inputs, &mut |_, _| {})
    };
    let none = |_: &str| Commitment::default();
    let mut w = world(PoolMode::Account);
    let alone = decide(&w, &none);
    assert!(matches!(alone.verdict, Verdict::Accept { .. }), "course has 50: {alone:?}");
    assert_eq!(alone.pool.as_deref(), Some("course"), "tallied against its pool");
    // alice's and carol's course jobs can cost 58 of the 50: bob's own 16 alone would pass.
    w.snapshot.queue.as_mut().unwrap().pool_committed.insert("course".into(), held(58));
    let refused = decide(&w, &none);
    assert!(matches!(refused.verdict, Verdict::Reject { .. }), "{refused:?}");
    assert!(
        message(&refused.verdict).contains(
            "account course's GPU token balance is 50 and the running and pending GPU jobs of its members that it \
             pays for can cost up to 58 more, which could take it to -12"
        ),
        "{}",
        message(&refused.verdict)
    );
    assert!(message(&refused.verdict).contains("wait until jobs of account course have finished"));
    // The same from what the plugin admitted for course since the read.
    w.snapshot.queue.as_mut().unwrap().pool_committed.insert("course".into(), held(20));
    assert!(matches!(decide(&w, &none).verdict, Verdict::Accept { .. }));
    let admitted = |account: &str| if account == "course" { held(38) } else { Commitment::default() };
    assert!(matches!(decide(&w, &admitted).verdict, Verdict::Reject { .. }), "20 read + 38 admitted since");
    // bob's own jobs (of his own bucket) can cost 58: not course's to pay, with course's listed.
    let mut own_jobs = world(PoolMode::Account);
    own_jobs.snapshot.queue.as_mut().unwrap().committed.insert("bob".into(), held(58));
    assert!(matches!(decide(&own_jobs, &none).verdict, Verdict::Reject { .. }), "course's not listed: his count");
    own_jobs.snapshot.queue.as_mut().unwrap().pool_committed.insert("course".into(), Commitment::default());
    assert!(matches!(decide(&own_jobs, &none).verdict, Verdict::Accept { .. }), "course's listed: its own count");
    // A job of bob's own bucket (ops has no pool) is not held back by course's jobs.
    let ops = gpu_job(Some("ops"));
    let inputs = super::Inputs { admitted_to_pool: &admitted, ..inputs(Some(&w), &estimate, BOB) };
    let own = decide_submit(&ops, &inputs, &mut |_, _| {});
    assert!(matches!(own.verdict, Verdict::Accept { .. }), "{own:?}");
    assert_eq!(own.pool, None);
}

/// A job moved into a pool's account (`scontrol update account=`) is new to that pool's estimate:
/// without this, bob could pass the estimate on his own bucket and then move the job onto lab's
/// tokens that other members' jobs already count on.
#[test]
fn moving_a_job_into_a_pool_runs_the_pools_estimate() {
    use crate::config::admission::Mode;
    use crate::estimate::{Commitment, PendingJob};
    let estimate = crate::config::Admission { mode: Mode::Estimate, ..config() };
    let mut w = world(PoolMode::Account);
    let queue = w.snapshot.queue.as_mut().unwrap();
    let gpus = Some(Commitment { milli_gpus: 2000, max_cost: Tokens::whole(40) });
    queue
        .pending
        .insert(7, PendingJob { nodes: 1, tasks: 1, array_tasks: 1, seconds: 3600, gpus, ..Default::default() });
    queue.pool_committed.insert("course".into(), Commitment { milli_gpus: 1000, max_cost: Tokens::whole(30) });
    let moved = JobRequest { job_id: Some(7), account: Some("course".into()), ..Default::default() };
    let decided = |w: &super::fixtures::World| decide_modify(&moved, &inputs(Some(w), &estimate, BOB), &mut |_, _| {});
    let refused = decided(&w);
    assert!(matches!(refused.verdict, Verdict::Reject { .. }), "50 - 30 - 40 is below -10: {refused:?}");
    assert!(message(&refused.verdict).contains("account course's GPU token balance is 50"), "{refused:?}");
    w.snapshot.queue.as_mut().unwrap().pool_committed.insert("course".into(), Commitment::default());
    let moved_in = decided(&w);
    assert!(matches!(moved_in.verdict, Verdict::Accept { .. }), "{moved_in:?}");
    assert_eq!(moved_in.pool.as_deref(), Some("course"), "its whole cost tallied against course");
    assert_eq!(moved_in.admitted.map(|(_, c)| c.max_cost), Some(Tokens::whole(40)));
}

/// Mode "both": the user's bucket and the pool each pay, so the estimate must hold for each, and
/// the job is tallied against the pool whichever decision ruled (the user's, here in overdraft).
#[test]
fn in_mode_both_the_estimate_holds_for_the_user_and_the_pool() {
    use crate::config::admission::Mode;
    use crate::estimate::Commitment;
    let estimate = crate::config::Admission { mode: Mode::Estimate, ..config() };
    let mut w = world(PoolMode::Both);
    w.snapshot.balances.insert("bob".into(), Tokens::whole(-3));
    w.snapshot.queue.as_mut().unwrap().committed.clear();
    let job = gpu_job(Some("course"));
    let decided = |w: &super::fixtures::World| decide_submit(&job, &inputs(Some(w), &estimate, BOB), &mut |_, _| {});
    let passed = decided(&w);
    assert!(matches!(passed.verdict, Verdict::Accept { .. }), "-3 - 4 and 50 - 4 hold: {passed:?}");
    assert_eq!(passed.pool.as_deref(), Some("course"), "tallied against course though bob's overdraft ruled");
    w.snapshot
        .queue
        .as_mut()
        .unwrap()
        .pool_committed
        .insert("course".into(), Commitment { milli_gpus: 4000, max_cost: Tokens::whole(58) });
    let refused = decided(&w);
    assert!(message(&refused.verdict).contains("account course's GPU token balance is 50"), "{refused:?}");
}

/// course draws on dept: bob's course job is judged by course and by dept, the worse deciding.
fn nested(dept_balance: i64, course_balance: i64, lends: bool) -> super::fixtures::World {
    let mut w = world(PoolMode::Account);
    let pools = &mut w.snapshot.pools;
    let dept = PoolStanding { balance: Tokens::whole(dept_balance), lends, ..pools["course"].clone() };
    pools.insert("dept".into(), dept);
    let course = pools.get_mut("course").unwrap();
    course.balance = Tokens::whole(course_balance);
    course.parent = Some("dept".into());
    w
}

fn decided(w: &super::fixtures::World, job: &JobRequest) -> Verdict {
    decide_submit(job, &inputs(Some(w), &config(), BOB), &mut |_, _| {}).verdict
}

#[test]
fn a_parent_at_its_floor_refuses_the_jobs_of_the_pools_drawing_on_it() {
    let course = gpu_job(Some("course"));
    let refused = decided(&nested(-10, 50, false), &course);
    assert!(
        message(&refused).starts_with(
            "gputokens: account course draws on account dept, whose GPU token balance is -10 (floor -10); its GPU \
             jobs and those of the accounts drawing on it are refused until it is above the floor again"
        ),
        "{refused:?}"
    );
    assert!(message(&refused).contains("[gputokens code=pool_floor retry_after=*:"), "{}", message(&refused));
    // Not offered as another account with tokens: its own 50 do not help while dept is at its floor.
    let lab = decided(&nested(-10, 50, false), &gpu_job(Some("lab")));
    assert!(message(&lab).contains("(ops, physics): sbatch -A ops."), "{}", message(&lab));
    let in_overdraft = decided(&nested(-3, 50, false), &course);
    assert!(
        message(&in_overdraft)
            .starts_with("gputokens: account course draws on account dept, whose GPU token balance is -3"),
        "{in_overdraft:?}"
    );
    assert!(matches!(in_overdraft, Verdict::Accept { .. }), "deprioritized, not refused");
    assert!(matches!(decided(&nested(40, 50, false), &course), Verdict::Accept { message: None, .. }));
    // A job of dept itself is judged by dept alone.
    let mut w = nested(40, -10, false);
    w.snapshot.user_accounts.get_mut("bob").unwrap().push("dept".into());
    assert!(matches!(decided(&w, &gpu_job(Some("dept"))), Verdict::Accept { message: None, .. }));
}

#[test]
fn a_parent_that_lends_lets_a_child_below_its_floor_run_while_it_has_tokens() {
    let course = gpu_job(Some("course"));
    let own_floor = decided(&nested(40, -10, false), &course);
    assert!(message(&own_floor).starts_with("gputokens: account course's GPU token balance is -10"), "{own_floor:?}");
    assert!(matches!(decided(&nested(40, -10, true), &course), Verdict::Accept { message: None, .. }), "dept lends");
    let both_down = decided(&nested(-10, -10, true), &course);
    assert!(matches!(both_down, Verdict::Reject { .. }), "dept has nothing to lend: {both_down:?}");
    // A small debt under a lender is no worse off than a deep one: no penalty either.
    assert!(matches!(decided(&nested(40, -3, true), &course), Verdict::Accept { message: None, .. }));
    // Nor does its own floor hold in the estimate: dept's does.
    use crate::config::admission::Mode;
    let estimate = crate::config::Admission { mode: Mode::Estimate, ..config() };
    let w = nested(40, -10, true);
    let lent = decide_submit(&course, &inputs(Some(&w), &estimate, BOB), &mut |_, _| {});
    assert!(matches!(lent.verdict, Verdict::Accept { .. }), "{lent:?}");
}

#[test]
fn a_parents_per_user_limit_counts_what_the_member_spent_below_it() {
    let mut w = nested(40, 50, false);
    let dept = w.snapshot.pools.get_mut("dept").unwrap();
    dept.user_limit = Some(Tokens::whole(10));
    dept.spent.insert("bob".into(), Tokens::whole(12));
    w.snapshot.spent_month = Some("2026-11".into());
    let refused = decided(&w, &gpu_job(Some("course")));
    assert!(
        message(&refused).contains(
            "you have spent 12 of the 10 tokens a member may spend per month in account dept; your GPU jobs under \
             course (which draws on dept) are refused"
        ),
        "{refused:?}"
    );
}

/// The estimate holds for every pool up the chain: dept's members' jobs (its own and its
/// children's, as accountd rolls them up) can take it below its floor though course has tokens.
#[test]
fn the_estimate_holds_for_the_pools_a_job_draws_on() {
    use crate::config::admission::Mode;
    use crate::estimate::Commitment;
    let estimate = crate::config::Admission { mode: Mode::Estimate, ..config() };
    let mut w = nested(40, 50, false);
    let job = gpu_job(Some("course"));
    let none = |_: &str| Commitment::default();
    let decide = |w: &super::fixtures::World, admitted: &dyn Fn(&str) -> Commitment| {
        let inputs = super::Inputs { admitted_to_pool: admitted, ..inputs(Some(w), &estimate, BOB) };
        decide_submit(&job, &inputs, &mut |_, _| {})
    };
    let passed = decide(&w, &none);
    assert!(matches!(passed.verdict, Verdict::Accept { .. }), "{passed:?}");
    assert_eq!(passed.pool.as_deref(), Some("course"), "tallied against its own pool");
    let held = |tokens: i64| Commitment { milli_gpus: 4000, max_cost: Tokens::whole(tokens) };
    w.snapshot.queue.as_mut().unwrap().pool_committed.insert("dept".into(), held(48));
    let refused = decide(&w, &none);
    assert!(
        message(&refused.verdict)
            .contains("account dept's GPU token balance is 40 and the running and pending GPU jobs"),
        "{refused:?}"
    );
    w.snapshot.queue.as_mut().unwrap().pool_committed.insert("dept".into(), held(10));
    assert!(matches!(decide(&w, &none).verdict, Verdict::Accept { .. }));
    let admitted = |account: &str| if account == "dept" { held(38) } else { Commitment::default() };
    assert!(matches!(decide(&w, &admitted).verdict, Verdict::Reject { .. }), "10 read + 38 admitted below dept");
}

/// A TA's sub-allocation ta1 inside course, open for a day around NOW: its jobs pass inside its
/// window and are refused before it opens (retry when it does) and after it ends (no retry).
#[test]
fn a_dated_sub_allocation_refuses_jobs_outside_its_window() {
    let mut w = nested(40, 50, false);
    let ta1 = PoolStanding {
        balance: Tokens::whole(20),
        parent: Some("course".into()),
        ..w.snapshot.pools["course"].clone()
    };
    w.snapshot.pools.insert("ta1".into(), ta1);
    w.snapshot.user_accounts.get_mut("bob").unwrap().push("ta1".into());
    let job = gpu_job(Some("ta1"));
    let now = inputs(Some(&w), &config(), BOB).now;
    let with_window = |w: &mut super::fixtures::World, starts: i64, ends: i64| {
        w.snapshot.pools.get_mut("ta1").unwrap().window = Some((starts, ends));
    };
    with_window(&mut w, now - 3600, now + 3600);
    let inside = decided(&w, &job);
    assert!(matches!(inside, Verdict::Accept { message: None, .. }), "{inside:?}");
    with_window(&mut w, now + 600, now + 3600);
    let early = decided(&w, &job);
    assert!(message(&early).starts_with("gputokens: the sub-allocation ta1 of account course opens at "), "{early:?}");
    assert!(message(&early).ends_with(" [gputokens code=allocation_closed retry_after=*:600]"), "{}", message(&early));
    with_window(&mut w, now - 7200, now - 3600);
    let late = decided(&w, &job);
    assert!(message(&late).contains("ended at ") && message(&late).contains("sbatch -A course."), "{late:?}");
    assert!(message(&late).ends_with(" [gputokens code=allocation_closed]"), "{}", message(&late));
    // Its parent's floor still holds inside the window.
    with_window(&mut w, now - 3600, now + 3600);
    w.snapshot.pools.get_mut("dept").unwrap().balance = Tokens::whole(-10);
    assert!(message(&decided(&w, &job)).contains("account ta1 draws on account dept, whose GPU token balance is -10"));
}

/// Where the site lets users borrow against next month's grant, a refusal at the user's own floor
/// says how; a pool's floor does not (users borrow for themselves).
#[test]
fn a_refusal_at_the_floor_says_how_much_may_be_borrowed() {
    let mut w = world(PoolMode::Account);
    w.snapshot.balances.insert("bob".into(), Tokens::whole(-10));
    w.snapshot.borrow_limit = Tokens::whole(50);
    w.snapshot.rules.monthly = Tokens::whole(30);
    let own = decided(&w, &gpu_job(Some("ops")));
    assert!(
        message(&own).contains(
            "You may borrow against next month's grant, up to 30 tokens a month (sbalance --borrow N). Run 'sbalance' for details."
        ),
        "at most the monthly grant: {own:?}"
    );
    let pool = decided(&w, &gpu_job(Some("lab")));
    assert!(!message(&pool).contains("borrow"), "{pool:?}");
    w.snapshot.borrow_limit = Tokens::ZERO;
    assert!(!message(&decided(&w, &gpu_job(Some("ops")))).contains("borrow"));
}
