//! Carries out preemption: finds contention per GPU type in squeue, lets `gputokens::preemption`
//! (the pure choice) pick the victims, and acts on them through Slurm with argv — comment, optional
//! signal and grace, then `scontrol requeue` or `scancel`. Every action is an audit row and a metric.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use gputokens::config::{AtFloor, JobIdentity, PreemptAction};
use gputokens::pools::{payers, paying_balance, PoolMode};
use gputokens::preemption::{
    at_floor_victims, contention_victims, freed_for, still_wanted, utilization_by_type, Cause, Holder, Limits, Victim,
    Waiter,
};
use gputokens::slurm::squeue::QueueJob;
use gputokens::tres::{Sharing, MILLI};
use gputokens::Tokens;
use ledger::Action;

use crate::cycles::CycleState;
use crate::error::AccountdResult;
use crate::resources::Resources;
use crate::slurm::{QueueOnce, Slurm};

/// Pending reasons that mean "waiting for resources", not for a dependency or a hold.
const WAITING_FOR_RESOURCES: [&str; 2] = ["Resources", "Priority"];

/// The nodes a pending job may run on: those of the partitions it names (a comma list); None where
/// one of them, or its nodes, is not known (then any GPUs may serve it, as before partitions were
/// read).
fn reach(partition_nodes: &HashMap<String, Vec<String>>, partitions: &str) -> Option<Arc<BTreeSet<String>>> {
    let mut nodes = BTreeSet::new();
    for name in partitions.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        nodes.extend(partition_nodes.get(name)?.iter().cloned());
    }
    (!nodes.is_empty()).then(|| Arc::new(nodes))
}

/// The preemption settings in effect: in shadow mode (`[admission] enforce = false`) a dry run.
fn settings(res: &Resources) -> gputokens::config::Preemption {
    let mut config = res.config.preemption.clone();
    config.dry_run |= !res.config.admission.enforce;
    config
}

pub fn check(cycle: &mut CycleState, slurm: &Slurm, queue: &mut QueueOnce, now: i64) -> AccountdResult<String> {
    let config = settings(&cycle.res);
    // `[lending]` replaces the contention rule: borrowed runs are reclaimed instead.
    let lending = cycle.res.config.lending.enabled;
    let lends = crate::cycles::lending::lends(&cycle.res);
    if !config.enabled && !lending && config.at_floor == AtFloor::None {
        return Ok("preemption off".into());
    }
    let jobs = queue.jobs()?;
    let borrowed = match lends {
        true => crate::cycles::lending::running_borrowed(&mut cycle.res, slurm, jobs, now)?,
        false => HashMap::new(),
    };
    let run_of = |job: &QueueJob| (job.job_id.clone(), job.start_time);
    // GPUs earlier preemptions freed for jobs that still wait, and have not had their time to start.
    let pending: std::collections::HashSet<&str> =
        jobs.iter().filter(|j| j.state == "PENDING").map(|j| j.job_id.as_str()).collect();
    cycle.res.ledger.forget_freed(now, |job| pending.contains(job))?;
    let freed_earlier = cycle.res.ledger.freed_for_waiters(now)?;
    let balance = balances(cycle, jobs)?;
    let exempt = &cycle.res.config.exempt;
    let holders: Vec<Holder> = jobs
        .iter()
        .filter(|j| j.state == "RUNNING" && !j.alloc.is_empty())
        .map(|j| Holder {
            job_id: j.job_id.clone(),
            user: j.user.clone(),
            balance: balance[&j.job_id],
            start_time: j.start_time,
            gpus: whole_gpus(j),
            exempt: is_exempt(exempt, j),
            borrowed: borrowed.contains_key(&run_of(j)),
            nodes: gputokens::slurm::hostlist::expand(&j.nodes).unwrap_or_default(),
        })
        .collect();
    // Where each list of partitions lets a job run, worked out once per list.
    let mut reaches: HashMap<&str, Option<Arc<BTreeSet<String>>>> = HashMap::new();
    let partition_nodes = &cycle.slurm_view.partition_nodes;
    let mut waiters: Vec<Waiter> = Vec::new();
    for j in jobs.iter().filter(|j| j.state == "PENDING" && WAITING_FOR_RESOURCES.contains(&j.state_reason.as_str())) {
        let wants = wanted(j);
        if wants.is_empty() {
            continue;
        }
        let partitions = j.partition.as_str();
        let reach = reaches.entry(partitions).or_insert_with(|| reach(partition_nodes, partitions)).clone();
        waiters.push(Waiter {
            job_id: j.job_id.clone(),
            user: j.user.clone(),
            balance: balance[&j.job_id],
            wants,
            reach,
        });
    }
    let mut not_busy = String::new();
    if let Some(threshold) = config.busy_percent {
        let idle = idle_types(&cycle.res, &holders, threshold)?;
        for waiter in &mut waiters {
            waiter.wants.retain(|gpu_type, _| !idle.contains_key(gpu_type));
        }
        waiters.retain(|w| !w.wants.is_empty());
        not_busy = idle.iter().map(|(t, why)| format!(", {t} not busy ({why})")).collect();
    }

    let waiting = waiters.len();
    let waiters = still_wanted(&waiters, &freed_earlier);
    let served = waiting - waiters.len();
    let limits =
        Limits { min_runtime_secs: config.min_runtime.as_secs() as i64, max_per_cycle: config.max_per_cycle, lending };
    let mut victims =
        if config.enabled || lending { contention_victims(&holders, &waiters, now, limits) } else { Vec::new() };
    if !config.dry_run {
        // Remembered before scontrol runs (charged nothing if Slurm then requeues it). A run taken
        // back for its owner's own waiting jobs alone is charged: no one gets a run for free by
        // waiting for it themselves.
        let owner: HashMap<&str, &str> = waiters.iter().map(|w| (w.job_id.as_str(), w.user.as_str())).collect();
        for victim in &victims {
            let Cause::Reclaimed { waiting, .. } = &victim.cause else { continue };
            if waiting.iter().all(|w| owner.get(w.as_str()) == Some(&victim.user.as_str())) {
                continue;
            }
            let Some(holder) = holders.iter().find(|h| h.job_id == victim.job_id) else { continue };
            cycle.res.ledger.mark_reclaimed(&victim.job_id, holder.start_time, &waiting.join(","), now)?;
        }
    }
    if config.at_floor != AtFloor::None {
        let left = config.max_per_cycle.saturating_sub(victims.len());
        let floor = cycle.res.ledger.rules().floor;
        // A borrowed run at the floor is lent, not preempted.
        let lent_out: Vec<Holder> = holders.iter().filter(|h| !h.borrowed).cloned().collect();
        let more: Vec<Victim> = at_floor_victims(&lent_out, floor, left)
            .into_iter()
            .filter(|v| !victims.iter().any(|c| c.job_id == v.job_id))
            .collect();
        victims.extend(more);
    }
    if !config.dry_run && !victims.is_empty() {
        // Remembered before acting: a cycle that runs next (here or in another process) must see it.
        let secs = |d: std::time::Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        let expires = now.saturating_add(secs(config.grace)).saturating_add(secs(config.start_wait));
        cycle.res.ledger.remember_freed(&freed_for(&victims, &holders, &waiters, expires), now)?;
    }
    let requeueable: HashMap<&str, bool> = jobs.iter().map(|j| (j.job_id.as_str(), j.requeueable)).collect();
    // One victim that cannot be acted on (it ended meanwhile, scancel failed) spares no other.
    let mut failed = 0;
    for victim in &victims {
        let requeueable = requeueable.get(victim.job_id.as_str()).copied().unwrap_or(false);
        if let Err(e) = act(cycle, slurm, victim, requeueable, now) {
            tracing::error!("preempting job {} of {} failed: {e}", victim.job_id, victim.user);
            failed += 1;
        }
    }
    let not_busy = match failed {
        0 => not_busy,
        n => format!("{not_busy}; {n} of them failed (see the log)"),
    };
    let done = if config.dry_run { "would preempt (dry run)" } else { "preempted" };
    let served = match served {
        0 => String::new(),
        n => format!(" ({n} of them already had GPUs freed by an earlier preemption)"),
    };
    Ok(format!("{} GPU jobs running, {waiting} waiting{served}, {} {done}{not_busy}", holders.len(), victims.len()))
}

/// GPU types that fail the busy test, with why: their holders' mean utilization is below
/// `threshold`, or unknown (no samples from agents or Prometheus).
fn idle_types(res: &Resources, holders: &[Holder], threshold: f64) -> AccountdResult<BTreeMap<String, String>> {
    let mut sampled = HashMap::new();
    for holder in holders {
        if let Some(percent) = res.ledger.mean_utilization(&holder.job_id)? {
            sampled.insert(holder.job_id.clone(), percent);
        }
    }
    let by_type = utilization_by_type(holders, &sampled);
    let held: std::collections::BTreeSet<&String> = holders.iter().flat_map(|h| h.gpus.keys()).collect();
    Ok(held
        .into_iter()
        .filter_map(|gpu_type| match by_type.get(gpu_type) {
            Some(p) if *p >= threshold => None,
            Some(p) => Some((gpu_type.clone(), format!("{p:.0}% < busy_percent {threshold}"))),
            None => Some((gpu_type.clone(), "no utilization samples".to_string())),
        })
        .collect())
}

/// The balance that pays for each job, by job ID: its user's (a user not in the ledger stands at
/// `initial`), or with pools its account's pool, or in mode "both" the lower of the two. A job is a
/// debtor's when that balance is in overdraft.
fn balances(cycle: &CycleState, jobs: &[QueueJob]) -> AccountdResult<HashMap<String, Tokens>> {
    let res = &cycle.res;
    let mode = res.config.accounts.mode;
    let pools: HashMap<String, Tokens> = if mode == PoolMode::User {
        HashMap::new()
    } else {
        res.ledger.pools()?.into_iter().map(|p| (p.account, p.balance)).collect()
    };
    let mut names: Vec<&str> = jobs.iter().map(|j| j.user.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let users = cycle.balances_of(&names)?;
    let mut balance = HashMap::new();
    for job in jobs {
        let own = users.get(&job.user).copied().unwrap_or(res.ledger.rules().initial);
        let payers = payers(mode, Some(job.account.as_str()), |a| pools.contains_key(a));
        balance.insert(job.job_id.clone(), paying_balance(payers, own, |a| pools.get(a).copied()));
    }
    Ok(balance)
}

/// Whether `[exempt]` covers the job's user, account or QOS (as squeue shows them).
pub(crate) fn is_exempt(exempt: &gputokens::config::Exempt, job: &QueueJob) -> bool {
    exempt.covers(&JobIdentity {
        user: Some(&job.user),
        account: Some(&job.account),
        default_account: None,
        qos: Some(&job.qos),
    })
}

/// GPUs held per type, shards rounded up to whole GPUs (a shard keeps the GPU from a whole-GPU job).
fn whole_gpus(job: &QueueJob) -> BTreeMap<String, u64> {
    let milli = job.alloc.milli_by_type(gputokens::slurm::sacct::UNTYPED, Sharing::default());
    milli.into_iter().map(|(t, m)| (t, m.div_ceil(MILLI))).collect()
}

/// Typed GPUs a pending job asks for (untyped requests name no type to contend for).
fn wanted(job: &QueueJob) -> BTreeMap<String, u64> {
    let mut wants = BTreeMap::new();
    for count in &job.request.counts {
        if let Some(t) = &count.gpu_type {
            let wanted = wants.entry(t.clone()).or_default();
            *wanted = count.count.saturating_add(*wanted);
        }
    }
    wants
}

fn act(cycle: &mut CycleState, slurm: &Slurm, victim: &Victim, requeueable: bool, now: i64) -> AccountdResult {
    let config = settings(&cycle.res);
    let reclaimed = matches!(victim.cause, Cause::Reclaimed { .. });
    let action = match (victim.cause == Cause::AtFloor, cycle.res.config.preemption.at_floor, config.action) {
        // A borrowed run is requeued, never cancelled.
        _ if reclaimed => "requeue",
        (true, AtFloor::Cancel, _) | (false, _, PreemptAction::Cancel) => "cancel",
        _ if requeueable => "requeue",
        _ => "cancel",
    };
    let reason = victim.reason();
    let gpu_type = match &victim.cause {
        Cause::Contended { gpu_type, .. } | Cause::Reclaimed { gpu_type, .. } => gpu_type.clone(),
        Cause::AtFloor => "at_floor".into(),
    };
    // The owner is notified once per action (`[notify]`), recorded with it: never for a dry run or
    // a job ID that is not acted on.
    let acted = !config.dry_run && slurm.job_arg(&victim.job_id).is_ok();
    let notice = acted
        .then(|| {
            crate::cycles::notify::preempted_notice(
                &cycle.res,
                &victim.user,
                &victim.job_id,
                action,
                &reason,
                victim.balance,
            )
        })
        .flatten();
    let audit = Action {
        at: now,
        action: action.into(),
        target: victim.job_id.clone(),
        user: victim.user.clone(),
        reason: reason.clone(),
        dry_run: config.dry_run,
    };
    cycle.res.ledger.record_action_noticed(&audit, notice.as_ref())?;
    cycle.res.metrics.record_preemption(&gpu_type, action, config.dry_run);
    if config.dry_run {
        tracing::warn!("dry run: would {action} job {} of {} ({reason})", victim.job_id, victim.user);
        return Ok(());
    }
    let job = match slurm.job_arg(&victim.job_id) {
        Ok(job) => job.to_string(),
        Err(e) => {
            tracing::error!("not preempting: {e}");
            return Ok(());
        }
    };
    tracing::warn!("{action} job {job} of {}: {reason}", victim.user);
    if let Err(e) = append_comment(slurm, &job, &reason) {
        tracing::warn!("cannot set the comment of job {job}: {e}");
    }
    if reclaimed {
        if let Err(e) = crate::cycles::lending::set_admin_comment(slurm, &job, &reason) {
            tracing::warn!("cannot set the AdminComment of job {job}: {e}");
        }
    }
    let signalled = job.clone();
    let step = move |slurm: &Slurm| {
        let result = match action {
            "requeue" => slurm.run("scontrol", &["--", "requeue", &job]),
            _ => slurm.run("scancel", &["--", &job]),
        };
        if let Err(e) = result {
            tracing::error!("{action} of job {job} failed: {e}");
        }
    };
    match &config.signal {
        None => step(slurm),
        Some(signal) => {
            slurm.run("scancel", &["--full", &format!("--signal={signal}"), "--", &signalled])?;
            // The grace runs on a thread of its own: the cycle must not wait.
            let (slurm, grace) = (slurm.clone(), config.grace);
            cycle.preemptions.retain(|h| !h.is_finished());
            cycle.preemptions.push(std::thread::spawn(move || {
                std::thread::sleep(grace);
                step(&slurm);
            }));
        }
    }
    Ok(())
}

/// Adds `note` to the job's comment, keeping what the user or another tool wrote there.
pub(crate) fn append_comment(slurm: &Slurm, job: &str, note: &str) -> crate::error::AccountdResult {
    let current = slurm.run("squeue", &["--all", "-h", "-j", job, "-o", "%k"])?;
    set_comment(slurm, job, &with_note(current.trim(), note))
}

/// Sets the job's comment (of every pending task, for an array's pending record).
pub(crate) fn set_comment(slurm: &Slurm, job: &str, comment: &str) -> crate::error::AccountdResult {
    slurm.run("scontrol", &["--", "update", &format!("jobid={job}"), &format!("comment={comment}")])?;
    Ok(())
}

/// `old` less its `; `-separated notes that begin with `prefix`.
pub(crate) fn without_note(old: &str, prefix: &str) -> String {
    old.split("; ").filter(|note| !note.starts_with(prefix)).collect::<Vec<_>>().join("; ")
}

/// `old; note`, or `note` alone when there was none (squeue shows a missing comment as "(null)").
pub(crate) fn with_note(old: &str, note: &str) -> String {
    match old {
        "" | "(null)" => note.to_string(),
        old if old.ends_with(note) => old.to_string(),
        old => format!("{old}; {note}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{with_note, without_note};

    #[test]
    fn a_note_is_taken_off_the_comment_and_the_rest_kept() {
        let prefix = "gputokens: held while";
        assert_eq!(without_note("gputokens: held while alice is at the floor", prefix), "");
        assert_eq!(without_note("sweep 7; gputokens: held while alice is at the floor", prefix), "sweep 7");
        assert_eq!(without_note("a; gputokens: held while x; b", prefix), "a; b");
        assert_eq!(without_note("sweep 7", prefix), "sweep 7");
    }

    #[test]
    fn the_note_is_appended_to_the_comment() {
        assert_eq!(with_note("(null)", "gputokens: preempted"), "gputokens: preempted");
        assert_eq!(with_note("", "gputokens: preempted"), "gputokens: preempted");
        assert_eq!(with_note("run 7 of sweep", "gputokens: preempted"), "run 7 of sweep; gputokens: preempted");
        assert_eq!(with_note("x; gputokens: preempted", "gputokens: preempted"), "x; gputokens: preempted");
    }
}
