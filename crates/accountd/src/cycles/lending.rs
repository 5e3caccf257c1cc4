//! Idle GPUs lent to users in debt (`[lending]`), as the cycles carry it out: which runs are
//! borrowed (judged once, in the ledger), charging them (nothing while they run; at their end
//! nothing where reclaimed, else their price less the site's discount), and reclaiming them for
//! users in credit who wait for their GPU type (requeued, never cancelled; marked in AdminComment).

use std::collections::HashMap;

use gputokens::gpu_time::UsageRecord;
use gputokens::lending::Lent;
use gputokens::pools::{holder, payers, PoolMode};
use gputokens::slurm::squeue::QueueJob;
use gputokens::Tokens;
use ledger::{BorrowedRun, RunToJudge};

use crate::error::AccountdResult;
use crate::resources::Resources;
use crate::slurm::Slurm;

/// A run to judge: job, run start, user, account, and whether Slurm can requeue it (None: not known,
/// as for a run only sacct showed).
pub struct Run<'a> {
    pub job_id: &'a str,
    pub start: i64,
    pub user: &'a str,
    pub account: Option<&'a str>,
    pub requeueable: Option<bool>,
}

/// The borrowed runs among `runs`, judging those not judged yet. A run Slurm cannot requeue is never
/// borrowed: it could not be reclaimed without being cancelled.
pub fn borrowed<'a>(
    res: &mut Resources,
    runs: impl Iterator<Item = Run<'a>>,
    now: i64,
) -> AccountdResult<HashMap<(String, i64), BorrowedRun>> {
    if !lends(res) {
        return Ok(HashMap::new());
    }
    let mode = res.config.accounts.mode;
    let all_pools = match mode {
        PoolMode::User => Vec::new(),
        _ => res.ledger.pools()?,
    };
    let pools: HashMap<&str, &ledger::Pool> = all_pools.iter().map(|p| (p.account.as_str(), p)).collect();
    let parent_of = |a: &str| pools.get(a)?.parent.as_deref();
    // In debt below 0, or (lending at the floor) at the floor too, as the plugin lends.
    let at_floor = res.config.lending.at_floor;
    let below = |floor: Tokens| match at_floor {
        true => (floor + Tokens::from_micro(1)).max(Tokens::ZERO),
        false => Tokens::ZERO,
    };
    let user_floor = res.ledger.rules().floor;
    let mut to_judge = Vec::new();
    for run in runs {
        let who = payers(mode, run.account, |a| pools.contains_key(a));
        let mut holders: Vec<(String, Tokens)> = Vec::new();
        if let Some(pool) = who.pool {
            // The pool that pays and those it draws on, as the plugin judges them.
            for account in gputokens::pools::chain(pool, parent_of) {
                let floor = pools.get(account).map_or(Tokens::ZERO, |p| p.rules.floor);
                holders.push((holder(account), below(floor)));
            }
        }
        if who.user {
            holders.push((run.user.to_string(), below(user_floor)));
        }
        // Only a run Slurm can requeue, seen running, is lent: it can be reclaimed.
        if run.requeueable != Some(true) {
            holders.clear();
        }
        to_judge.push(RunToJudge { job_id: run.job_id.to_string(), run_start: run.start, payers: holders });
    }
    Ok(res.ledger.judge_borrowed(&to_judge, now)?)
}

/// Whether runs are lent at all: `[lending]` on, and enforced (in shadow mode or a preemption dry
/// run nothing is reclaimed, so every run is charged as before and none is marked).
pub fn lends(res: &Resources) -> bool {
    res.config.lending.enabled && res.config.admission.enforce && !res.config.preemption.dry_run
}

/// The runs of squeue's running jobs, for [`borrowed`].
pub fn running_runs(jobs: &[QueueJob]) -> impl Iterator<Item = Run<'_>> {
    // Every job holding GPUs (a suspended one too, which the charge cycle charges), none without.
    jobs.iter().filter(|j| gputokens::slurm::squeue::holds_gpus(j)).map(|j| Run {
        job_id: &j.job_id,
        start: j.start_time,
        user: &j.user,
        account: (!j.account.is_empty()).then_some(j.account.as_str()),
        requeueable: Some(j.requeueable),
    })
}

/// The borrowed runs among squeue's running jobs; those judged now are marked in their AdminComment.
pub fn running_borrowed(
    res: &mut Resources,
    slurm: &Slurm,
    jobs: &[QueueJob],
    now: i64,
) -> AccountdResult<HashMap<(String, i64), BorrowedRun>> {
    let borrowed = borrowed(res, running_runs(jobs), now)?;
    let by_id: HashMap<&str, &QueueJob> = jobs.iter().map(|j| (j.job_id.as_str(), j)).collect();
    for run in borrowed.values().filter(|r| r.judged_now) {
        let Some(job) = by_id.get(run.job_id.as_str()) else { continue };
        let types: Vec<String> =
            job.alloc.milli_by_type(gputokens::slurm::sacct::UNTYPED, Default::default()).into_keys().collect();
        let Ok(id) = slurm.job_arg(&run.job_id) else { continue };
        if let Err(e) = set_admin_comment(slurm, id, &mark(&types.join(","))) {
            tracing::warn!("cannot mark borrowed run of job {id} in its AdminComment: {e}");
        }
        tracing::info!(
            "job {id} of {} runs on borrowed GPUs (its payer {} was in debt when it started)",
            job.user,
            run.payer
        );
    }
    Ok(borrowed)
}

/// Running records: a borrowed run is charged only when it has ended (nothing if it is reclaimed).
pub fn defer_running(
    res: &mut Resources,
    slurm: &Slurm,
    records: &mut Vec<UsageRecord>,
    jobs: &[QueueJob],
    now: i64,
) -> AccountdResult {
    if !lends(res) {
        return Ok(());
    }
    let borrowed = running_borrowed(res, slurm, jobs, now)?;
    records.retain(|r| !borrowed.contains_key(&(r.job_id.clone(), r.segment_start)));
    Ok(())
}

/// Finished records: a borrowed run is charged nothing where it was reclaimed and Slurm requeued it
/// (`ends`: how each run ended), else its price less the site's discount.
pub fn price_finished(
    res: &mut Resources,
    records: &mut [UsageRecord],
    ends: &HashMap<(String, i64), gputokens::slurm::sacct::RunEnded>,
    now: i64,
) -> AccountdResult {
    if !lends(res) {
        return Ok(());
    }
    let runs = records.iter().map(|r| Run {
        job_id: &r.job_id,
        start: r.segment_start,
        user: &r.user,
        account: r.account.as_deref(),
        requeueable: None,
    });
    let borrowed = borrowed(res, runs, now)?;
    let discount_percent = res.config.lending.discount_percent;
    for record in records.iter_mut() {
        let key = (record.job_id.clone(), record.segment_start);
        if let Some(run) = borrowed.get(&key) {
            // Reclaimed only where the run did end requeued: a requeue that failed or came too late
            // (the run ended meanwhile) frees nothing.
            let requeued = ends.get(&key).is_some_and(|e| matches!(e.state.as_str(), "REQUEUED" | "PREEMPTED"));
            record.lent = Some(match &run.reclaimed {
                Some((waiting, _)) if requeued => Lent::Reclaimed { waiting: waiting.clone() },
                _ => Lent::Finished { discount_percent },
            });
        }
    }
    Ok(())
}

/// What a borrowed run's AdminComment says while it runs.
pub fn mark(gpu_types: &str) -> String {
    format!("gputokens: borrowed run of idle {gpu_types} GPUs; requeued if a user in credit waits for them, and then not charged")
}

/// Marks a borrowed run in its AdminComment (admins' and Slurm's own, which its owner cannot change).
pub fn set_admin_comment(slurm: &Slurm, job: &str, text: &str) -> AccountdResult {
    slurm.run("scontrol", &["--", "update", &format!("jobid={job}"), &format!("admincomment={text}")])?;
    Ok(())
}
