//! `[lending]` at submission, decided: borrowed runs, interactive jobs refused, updates left alone.

use super::fixtures::{config, inputs, message, snapshot, world_of};
use super::{decide_submit, Verdict};
use crate::config::Lending;
use crate::job_request::JobRequest;
use crate::Tokens;

fn gpu_job(batch: bool) -> JobRequest {
    JobRequest {
        user_id: Some(1001),
        tres_per_node: Some("gres:gpu:a6000:1".into()),
        batch: Some(batch),
        ..Default::default()
    }
}

fn decided(balance: i64, lending: Lending, job: &JobRequest) -> Verdict {
    let mut snap = snapshot();
    snap.balances.insert("alice".into(), Tokens::whole(balance));
    let w = world_of(snap);
    let config = config();
    let inputs = super::Inputs { lending, ..inputs(Some(&w), &config, 1001) };
    decide_submit(job, &inputs, &mut |_, _| {}).verdict
}

const ON: Lending = Lending { enabled: true, at_floor: false, discount_percent: 0 };

#[test]
fn a_batch_job_in_overdraft_runs_borrowed_requeueable_and_at_lower_priority() {
    let Verdict::Accept { changes, message } = decided(-3, ON, &gpu_job(true)) else { panic!() };
    assert!(changes.requeue && changes.nice.is_some(), "{changes:?}");
    let told = message.unwrap_or_default();
    assert!(told.contains("your GPU token balance is -3"), "{told}");
    assert!(told.contains("this job runs as a borrowed run on idle GPUs"), "{told}");
    let Verdict::Accept { changes, .. } = decided(-3, Lending::default(), &gpu_job(true)) else { panic!() };
    assert!(!changes.requeue, "lending off: an overdraft job as before");
    let Verdict::Accept { changes, message } = decided(20, ON, &gpu_job(true)) else { panic!() };
    assert!(!changes.requeue && message.is_none(), "in credit: not borrowed");
}

/// The estimate does not hold a borrowed run back (its payer is in debt already);
/// max_gpus_per_user does.
#[test]
fn the_estimate_gives_way_to_a_borrowed_run_and_the_gpu_limit_does_not() {
    use crate::config::admission::Mode;
    let mut snap = snapshot();
    snap.balances.insert("alice".into(), Tokens::from_micro(-9_900_000));
    let w = world_of(snap);
    let decide = |config: crate::config::Admission, job: &JobRequest| {
        let inputs = super::Inputs { lending: ON, ..inputs(Some(&w), &config, 1001) };
        decide_submit(job, &inputs, &mut |_, _| {}).verdict
    };
    let estimate = crate::config::Admission { mode: Mode::Estimate, ..config() };
    let Verdict::Accept { changes, .. } = decide(estimate.clone(), &gpu_job(true)) else { panic!() };
    assert!(changes.requeue);
    let off = super::Inputs { lending: Lending::default(), ..inputs(Some(&w), &estimate, 1001) };
    let without = decide_submit(&gpu_job(true), &off, &mut |_, _| {}).verdict;
    assert!(matches!(without, Verdict::Reject { .. }), "without lending: {without:?}");
    let capped = crate::config::Admission { max_gpus_per_user: Some(1), ..config() };
    let two = JobRequest { tres_per_node: Some("gres:gpu:a6000:2".into()), ..gpu_job(true) };
    let over = decide(capped, &two);
    assert!(message(&over).contains("[gputokens code=gpu_limit"), "{over:?}");
}

#[test]
fn an_interactive_job_in_debt_is_refused_and_the_floor_lends_only_where_the_site_says() {
    let interactive = decided(-3, ON, &gpu_job(false));
    assert!(message(&interactive).contains("an interactive job (srun, salloc) cannot be; submit it with sbatch"));
    assert!(message(&interactive).ends_with("[gputokens code=borrowed]"), "{}", message(&interactive));
    assert!(matches!(decided(-10, ON, &gpu_job(true)), Verdict::Reject { .. }), "at the floor: refused");
    let at_floor = Lending { at_floor: true, ..ON };
    let Verdict::Accept { changes, message } = decided(-10, at_floor, &gpu_job(true)) else { panic!() };
    assert!(changes.requeue, "{changes:?}");
    let told = message.unwrap_or_default();
    assert!(
        told.starts_with("gputokens: your GPU token balance is -10 (floor -10); this job runs as a borrowed run"),
        "{told}"
    );
    // An update (no script known) is judged as before, and not made requeueable.
    let mut snap = snapshot();
    snap.balances.insert("alice".into(), Tokens::whole(-3));
    let w = world_of(snap);
    let config = config();
    let inputs = super::Inputs { lending: ON, ..inputs(Some(&w), &config, 1001) };
    let update = JobRequest { job_id: Some(41), batch: None, nice: Some(0), ..gpu_job(false) };
    let updated = super::decide_modify(&update, &inputs, &mut |_, _| {}).verdict;
    assert!(matches!(updated, Verdict::Reject { .. }), "the penalty kept, as without lending: {updated:?}");
    let moved = JobRequest { job_id: Some(41), batch: None, ..gpu_job(false) };
    match super::decide_modify(&moved, &inputs, &mut |_, _| {}).verdict {
        Verdict::Accept { changes, .. } => assert!(!changes.requeue, "{changes:?}"),
        other => panic!("{other:?}"),
    }
}
