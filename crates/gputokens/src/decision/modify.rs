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

use crate::admission::{self, Decision, JobEstimate};
use crate::estimate::{requested_milli, total_milli, Commitment, MilliByType, PendingJob};
use crate::job_request::{JobRequest, TimeLimit};
use crate::job_shape::JobShape;
use crate::plugin_config::{Deprioritize, Mode, OnError};
use crate::request::GpuRequest;
use crate::slurm::partitions::max_time;
use crate::tokens::Tokens;

use super::{
    decide, gpu_request, raised_nice, site_factor, uncountable, within_estimate, within_gpu_limit, Account, Case,
    Draft, Inputs, Log, Outcome, Owner, Refusal, Steps,
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
            if let Some(message) = admission::check_update_duration(limit.seconds(), max.as_secs()) {
                return Err(Refusal::logged("time limit above max_job_duration", message));
            }
        }
        Ok(())
    }

    fn check_unavailable(&self, on_error: OnError) -> Result<(), Refusal> {
        // Missing, unreadable, corrupt or stale: on_error decides what adds GPUs.
        match (self.asked.is_some(), admission::when_unavailable(on_error)) {
            (true, Decision::Reject { message }) => Err(Refusal::logged("balances unavailable", message)),
            _ => Ok(()),
        }
    }

    fn check_balance(&self, case: &Case, account: &Account) -> Result<(), Refusal> {
        let balance = account.balance;
        if let (Some(_), Decision::Reject { message }) = (&self.asked, &account.decision) {
            let reason = format!("it adds GPUs and balance {balance} is at or below the floor {}", account.rules.floor);
            return Err(Refusal::logged(reason, message.clone()));
        }
        if !matches!(account.decision, Decision::Accept) {
            if let Some((reason, kept)) = undoes_penalty(case.job, &case.inputs.config.deprioritize) {
                return Err(Refusal::logged(
                    format!("{reason} in overdraft (balance {balance})"),
                    admission::penalty_kept_message(balance, &kept),
                ));
            }
        }
        Ok(())
    }

    fn check_limits(&mut self, case: &Case, account: &Account) -> Result<Option<Commitment>, Refusal> {
        let config = case.inputs.config;
        let limited = config.mode == Mode::Estimate || config.max_gpus_per_user.is_some();
        if !limited || (self.asked.is_none() && !case.job.sets_shape_or_time()) {
            return Ok(None);
        }
        let Some(known) = self.known else {
            return Err(Refusal::logged("not in the last queue read", admission::unknown_job_message(&what(case.job))));
        };
        let (old, new) = before_and_after(case, account, self.asked.as_ref(), known).map_err(uncountable)?;
        let held = {
            let c = account.held(case);
            Commitment {
                milli_gpus: c.milli_gpus.saturating_sub(old.milli_gpus),
                max_cost: (c.max_cost - old.max_cost).max(Tokens::ZERO),
            }
        };
        let asked_milli = total_milli(&new.gpus);
        if let Some(max) = config.max_gpus_per_user {
            if asked_milli > old.milli_gpus {
                within_gpu_limit(max, held.milli_gpus, asked_milli)?;
            }
        }
        if config.mode == Mode::Estimate && new.cost > old.max_cost {
            within_estimate(account, held.max_cost, &new)?;
        }
        let grown = Commitment {
            milli_gpus: asked_milli.saturating_sub(old.milli_gpus),
            max_cost: (new.cost - old.max_cost).max(Tokens::ZERO),
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
