//! Carries out `[admission] hold_at_floor` each check cycle: pending GPU jobs whose payer is at the
//! floor are held with `scontrol hold`, and what gputokens held is released with `scontrol release`
//! once the payer is above it (`gputokens::holds` chooses). Each step is in the audit trail before
//! Slurm is asked (a crash in between is seen next cycle: a hold that did not take is taken as
//! lifted, a release that did not is tried again), its note in the job's comment, and a metric.

use std::collections::HashMap;

use gputokens::holds::{self, Held, Last, Pending, Step, Stopped};
use gputokens::pools::{payers, PoolMode};
use gputokens::slurm::squeue::QueueJob;
use gputokens::Tokens;
use ledger::Action;

use crate::cycles::preemption::{is_exempt, set_comment, with_note, without_note};
use crate::cycles::CycleState;
use crate::error::AccountdResult;
use crate::resources::Resources;
use crate::slurm::{QueueOnce, Slurm};

/// Holds and releases; returns the cycle summary's words for it.
pub fn check(cycle: &mut CycleState, slurm: &Slurm, queue: &mut QueueOnce, now: i64) -> AccountdResult<String> {
    if !cycle.res.config.admission.hold_at_floor {
        return Ok("holds off".into());
    }
    let jobs = queue.jobs()?;
    let pending: Vec<&QueueJob> =
        jobs.iter().filter(|j| j.state == "PENDING" && !j.request.counts.is_empty()).collect();
    let at_floor = payers_at_floor(cycle, &pending, now)?;
    let exempt = &cycle.res.config.exempt;
    let enforce = cycle.res.config.admission.enforce;
    let (mut steps, mut would_hold) = (Vec::new(), 0);
    // What gputokens did to each run of the jobs (requeued, it is another): an older job with the
    // same ID (Slurm's IDs wrap) is not this one.
    let runs: Vec<(&str, u64, i64)> = pending.iter().map(|j| (j.job_id.as_str(), j.restarts, j.submit_time)).collect();
    let last_actions = cycle.res.ledger.last_hold_actions(&runs)?;
    for job in &pending {
        let last = Last::from_action(last_actions.get(&job.job_id).map(String::as_str));
        let stopped = at_floor.get(job.job_id.as_str()).cloned();
        let mut pending = Pending {
            payer_at_floor: stopped.is_some(),
            exempt: is_exempt(exempt, job),
            held: Held::of(job.priority, &job.state_reason),
            last,
        };
        if !enforce {
            // Shadow mode: what would be held is logged, and nothing is; what was held before is
            // released.
            if matches!(holds::step(pending), Step::Hold | Step::HoldOverOwner) {
                let why = stopped.clone().unwrap_or_else(|| Stopped::AtFloor(job.user.clone()));
                tracing::warn!(
                    "shadow mode, not enforced: would hold pending job {} of {}: {}",
                    job.job_id,
                    job.user,
                    why.reason()
                );
                would_hold += 1;
            }
            pending.payer_at_floor = false;
        }
        let step = holds::step(pending);
        if step != Step::Nothing {
            steps.push((*job, step, stopped));
        }
    }
    let (mut held, mut released) = (0, 0);
    for (job, step, stopped) in steps {
        match act(&mut cycle.res, slurm, job, step, stopped.as_ref(), now)? {
            Some(Step::Hold | Step::HoldOverOwner) => held += 1,
            Some(Step::Release | Step::ReleaseToOwner) => released += 1,
            _ => {}
        }
    }
    if !enforce {
        return Ok(format!(
            "shadow mode: {would_hold} pending GPU jobs would be held at the floor, {released} released"
        ));
    }
    Ok(format!("{held} pending GPU jobs held at the floor, {released} released"))
}

/// The pending jobs whose payer is at or below its floor, with that payer's name (the user, or
/// `account <name>` for a pool; in mode "both" either one), or whose user spent the per-user limit
/// of the pool that pays for them this month (the audit's L5).
fn payers_at_floor<'j>(
    cycle: &CycleState,
    jobs: &[&'j QueueJob],
    now: i64,
) -> AccountdResult<HashMap<&'j str, Stopped>> {
    let res = &cycle.res;
    let mode = res.config.accounts.mode;
    let all_pools = match mode {
        PoolMode::User => Vec::new(),
        _ => res.ledger.pools()?,
    };
    let pools: HashMap<String, (Tokens, Tokens)> =
        all_pools.iter().map(|p| (p.account.clone(), (p.balance, p.rules.floor))).collect();
    let parents: HashMap<&str, &str> =
        all_pools.iter().filter_map(|p| Some((p.account.as_str(), p.parent.as_deref()?))).collect();
    let lenders: std::collections::HashSet<&str> =
        all_pools.iter().filter(|p| p.lends).map(|p| p.account.as_str()).collect();
    let windows: HashMap<&str, (i64, i64)> =
        all_pools.iter().filter_map(|p| Some((p.account.as_str(), p.window?))).collect();
    let parent_of = |a: &str| parents.get(a).copied();
    let lends = |a: &str| lenders.contains(a);
    // `[lending] at_floor`: a job at the floor runs as a borrowed run; it is not held.
    let lending = res.config.lending;
    let lends_at_floor = lending.enabled && lending.at_floor;
    let at_its_floor = |a: &str| !lends_at_floor && pools.get(a).is_some_and(|(balance, floor)| balance <= floor);
    let limits: HashMap<&str, Tokens> =
        all_pools.iter().filter_map(|p| Some((p.account.as_str(), p.user_limit?))).collect();
    let spent: HashMap<(String, String), Tokens> = match limits.is_empty() {
        true => HashMap::new(),
        false => {
            let month = gputokens::time::local_date(now).format("%Y-%m").to_string();
            res.ledger.member_spending(&month)?.into_iter().map(|s| ((s.account, s.user), s.spent)).collect()
        }
    };
    let rules = res.ledger.rules();
    let mut names: Vec<&str> = jobs.iter().map(|j| j.user.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    // A user not in the ledger stands at `initial`.
    let users = cycle.balances_of(&names)?;
    let mut at_floor = HashMap::new();
    for job in jobs {
        let who = payers(mode, Some(job.account.as_str()), |a| pools.contains_key(a));
        // The pool that pays and those it draws on: each one's floor and limit hold (a pool whose
        // parent lends and is above its own floor runs below its own).
        let chain: Vec<&str> = match who.pool {
            Some(pool) => gputokens::pools::chain(pool, parent_of),
            None => Vec::new(),
        };
        // A dated sub-allocation outside its window holds its jobs, as the plugin refuses them.
        if let Some(&closed) =
            chain.iter().find(|a| windows.get(*a).is_some_and(|w| !ledger::allocation_is_open(Some(*w), now)))
        {
            at_floor.insert(job.job_id.as_str(), Stopped::Closed { account: closed.to_string() });
            continue;
        }
        let lent = |i: usize| i == 0 && chain.get(1).is_some_and(|&parent| lends(parent) && !at_its_floor(parent));
        let stopped_by = chain.iter().enumerate().find(|&(i, &pool)| at_its_floor(pool) && !lent(i));
        if let Some((_, pool)) = stopped_by {
            at_floor.insert(job.job_id.as_str(), Stopped::AtFloor(gputokens::pools::holder(pool)));
            continue;
        }
        let over_limit = chain.iter().find(|&&pool| {
            let key = (pool.to_string(), job.user.clone());
            limits.get(pool).is_some_and(|limit| spent.get(&key).is_some_and(|s| s >= limit))
        });
        if let Some(pool) = over_limit {
            at_floor
                .insert(job.job_id.as_str(), Stopped::OverLimit { account: pool.to_string(), user: job.user.clone() });
            continue;
        }
        if !who.user {
            continue;
        }
        let own = users.get(&job.user).copied().unwrap_or(rules.initial);
        if own <= rules.floor && !lends_at_floor {
            at_floor.insert(job.job_id.as_str(), Stopped::AtFloor(job.user.clone()));
        }
    }
    Ok(at_floor)
}

/// How scontrol names the job: its ID, or for an array's pending record `ID_[tasks]`, its pending
/// tasks alone (the array's ID would change its running tasks' comment too); and whether it names
/// those alone. An array whose task list cannot be read is named by its ID: a hold or release of
/// it touches only its pending tasks, but its comment is left alone.
fn slurm_target(slurm: &Slurm, job: &QueueJob) -> Option<(String, bool)> {
    let id = slurm.job_arg(&job.job_id).ok()?;
    if job.pending_tasks.is_empty() {
        return Some((id.to_string(), true));
    }
    // `3-9%2`: the part after % is the throttle, not tasks. A step (`5-61:2`), which squeue writes
    // but scontrol does not read as a job ID, is named by the array's ID.
    let tasks = job.pending_tasks.split('%').next().unwrap_or_default();
    let list = !tasks.is_empty() && tasks.bytes().all(|b| b.is_ascii_digit() || b == b',' || b == b'-');
    Some(match list {
        true => (format!("{id}_[{tasks}]"), true),
        false => (id.to_string(), false),
    })
}

/// Whether job `job_id` (an array: a pending task of it) is held now: scontrol may fail after its
/// hold took (its time limit; a task of the list that started meanwhile).
fn held_now(slurm: &Slurm, job_id: &str) -> bool {
    let Ok(job_id) = slurm.job_arg(job_id) else { return false };
    let shown = slurm.run("squeue", &["--all", "-h", "-j", job_id, "-t", "PD", "-o", "%Q %r"]).unwrap_or_default();
    shown.lines().any(|line| {
        let (priority, reason) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        priority == "0" || reason == "JobHeldAdmin"
    })
}

/// Records `step` and carries it out; returns the step that took effect.
fn act(
    res: &mut Resources,
    slurm: &Slurm,
    job: &QueueJob,
    step: Step,
    stopped: Option<&Stopped>,
    now: i64,
) -> AccountdResult<Option<Step>> {
    let Some((target, tasks_alone)) = slurm_target(slurm, job) else {
        tracing::error!("not holding or releasing job '{}': not a job ID", job.job_id);
        return Ok(None);
    };
    let id = target.as_str();
    let set_comment = |comment: &str| {
        if tasks_alone && comment != job.comment {
            if let Err(e) = set_comment(slurm, id, comment) {
                tracing::warn!("cannot set the comment of job {id}: {e}");
            }
        }
    };
    let stopped = stopped.cloned().unwrap_or_else(|| Stopped::AtFloor(job.user.clone()));
    let note = stopped.comment_note();
    let record = |res: &mut Resources, action: &str, reason: String| -> AccountdResult {
        let audit = Action {
            at: now,
            action: action.into(),
            target: job.job_id.clone(),
            user: job.user.clone(),
            reason,
            dry_run: false,
        };
        res.ledger.record_run_action(&audit, job.restarts)?;
        res.metrics.holds.get_or_create(&crate::metrics::ReasonLabels { reason: action.into() }).inc();
        Ok(())
    };
    match step {
        Step::Hold | Step::HoldOverOwner => {
            let (action, over) = match step {
                Step::Hold => (holds::HOLD, ""),
                _ => (holds::HOLD_OVER_OWNER, " (over its owner's own hold, put back at the release)"),
            };
            record(res, action, format!("{}{over}", stopped.reason()))?;
            if let Err(e) = slurm.run("scontrol", &["--", "hold", id]) {
                // Taken all the same where Slurm shows it held: else tried again next cycle.
                if !held_now(slurm, &job.job_id) {
                    tracing::error!("hold of job {id} of {} failed (tried again next cycle): {e}", job.user);
                    record(res, holds::HOLD_FAILED, e.to_string())?;
                    return Ok(None);
                }
                tracing::warn!("scontrol hold of job {id} said it failed, but the job is held: {e}");
            }
            tracing::warn!("held pending job {id} of {}: {}{over}", job.user, stopped.reason());
            // From the queue read: squeue -j of an array's ID would list all its tasks.
            set_comment(&with_note(&job.comment, &note));
        }
        Step::Release | Step::ReleaseToOwner => {
            let why = match res.config.admission.enforce {
                true => "its payer is above the floor and within its limits, or the job is exempt".to_string(),
                false => "gputokens does not enforce (shadow mode)".to_string(),
            };
            record(res, holds::RELEASE, why)?;
            // Back to its owner's hold straight from gputokens' (Slurm turns an admin hold into a
            // user hold in place): a release first let the scheduler start the job in between.
            let to = if step == Step::ReleaseToOwner { "uhold" } else { "release" };
            if let Err(e) = slurm.run("scontrol", &["--", to, id]) {
                tracing::error!("release of job {id} of {} failed (tried again next cycle): {e}", job.user);
                record(res, holds::RELEASE_FAILED, e.to_string())?;
                return Ok(None);
            }
            tracing::info!("released job {id} of {}: its payer is above the floor and within its limits", job.user);
            set_comment(&without_note(&job.comment, holds::COMMENT_PREFIX));
        }
        Step::Lifted => {
            record(res, holds::HOLD_LIFTED, "released by someone else; not held again".into())?;
            tracing::info!("job {id} of {}, held at the floor, was released by someone else: left alone", job.user);
        }
        Step::Nothing => return Ok(None),
    }
    Ok(Some(step))
}

#[cfg(test)]
mod tests {
    use super::slurm_target;

    fn pending(job_id: &str, tasks: &str) -> gputokens::slurm::squeue::QueueJob {
        let json = format!(
            r#"{{"jobs":[{{"job_id":{job_id},"user_name":"alice","job_state":"PENDING","array_task_string":"{tasks}"}}]}}"#
        );
        gputokens::slurm::squeue::queue(&json).unwrap().remove(0)
    }

    #[test]
    fn an_arrays_pending_tasks_are_named_alone() {
        let slurm = crate::slurm::Slurm::new(&Default::default());
        let target = |tasks: &str| slurm_target(&slurm, &pending("41", tasks));
        assert_eq!(target(""), Some(("41".into(), true)));
        assert_eq!(target("3-4"), Some(("41_[3-4]".into(), true)));
        assert_eq!(target("3-9%2"), Some(("41_[3-9]".into(), true)), "the throttle is not a task");
        assert_eq!(target("5-61:2"), Some(("41".into(), false)), "a step scontrol does not read");
        let cut = "1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31,33,35,37,39,41,43,45,47,49...";
        assert_eq!(target(cut), Some(("41".into(), false)), "a list cut short: the array's ID, its comment left");
    }

    #[test]
    fn a_second_clusters_jobs_reach_its_scontrol_by_their_own_ids_only() {
        let text = "[ledger]\nurl = \"mysql://g@db/g\"\n[clusters]\nnames = [\"old\", \"new\"]\nlocal = \"new\"\n";
        let config = gputokens::config::Config::parse(text, std::path::Path::new("t.toml")).unwrap();
        let slurm = crate::slurm::Slurm::of(&config);
        let mut job = pending("41", "");
        job.job_id = slurm.job_key(&job.job_id);
        assert_eq!(job.job_id, "new:41");
        assert_eq!(slurm_target(&slurm, &job), Some(("41".into(), true)));
        job.job_id = "old:41".into();
        assert_eq!(slurm_target(&slurm, &job), None, "another cluster's job is never held here");
        job.job_id = "41".into();
        assert_eq!(slurm_target(&slurm, &job), None, "nor the first cluster's, whose keys are bare");
    }
}
