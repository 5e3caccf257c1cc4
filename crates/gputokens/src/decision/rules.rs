//! The rules a GPU job is checked against, at submission and at update, each with the message that
//! tells the user why; the decision (the parent module) picks which apply and in which order. What the
//! job_submit plugin does inside slurmctld, kept here as plain safe code.
//!
//! The balance rule, from the submitting user's balance and the bucket rules:
//! - balance ≤ floor → the job is refused, with the balance, the floor and when it recovers;
//! - floor < balance < 0 → accepted with lower priority (a raised `nice`, a site factor or a QOS),
//!   and the user is told;
//! - otherwise accepted untouched.
//!
//! Beside it: the limits `max_job_duration` and `max_gpus_per_user`, and the estimate
//! (`mode = "estimate"`, `--gpu-tokens-estimate`).
//! CPU-only jobs never get here (the caller checks the request first).

use chrono::NaiveDate;

use crate::config::admission::{Deprioritize, OnError};
use crate::estimate::{checked_max_cost, total_milli, GpusText, MilliByType};
use crate::policy::{BucketRules, Status};
use crate::pricing::PriceTable;
use crate::slurm::partitions::format_duration;
use crate::stranded_estimate::Strands;
use crate::stranding::Stranding;
use crate::tokens::Tokens;
use crate::tres::{gpu_count, MILLI};

/// The most GPUs one job may ask for (whole job: every node, task and array task). More is no real
/// request: it is refused as such rather than priced.
pub const MAX_JOB_GPUS: u64 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Accept untouched.
    Accept,
    /// Accept with lower priority (`how`), show `message` to the submitter.
    AcceptDeprioritized { how: Deprioritize, message: String },
    /// Refuse with `message`.
    Reject { message: String },
}

/// Decides a GPU job of a user whose balance is `balance`, on `today` (local date, for the
/// recovery estimate).
pub fn decide(
    balance: Tokens,
    rules: &BucketRules,
    today: NaiveDate,
    how: &Deprioritize,
    contact: Option<&str>,
) -> Decision {
    match rules.status(balance) {
        Status::Ok => Decision::Accept,
        Status::Overdraft => {
            Decision::AcceptDeprioritized { how: how.clone(), message: overdraft_message(balance, rules, how) }
        }
        Status::Blocked => Decision::Reject { message: blocked_message(balance, rules, today, contact) },
    }
}

/// The decision for a GPU job when the balances cannot be read.
pub fn when_unavailable(on_error: OnError) -> Decision {
    match on_error {
        OnError::Accept => Decision::Accept,
        OnError::Reject => Decision::Reject { message: UNAVAILABLE_MESSAGE.to_string() },
    }
}

pub const UNAVAILABLE_MESSAGE: &str = "gputokens: GPU jobs cannot be admitted right now because the GPU token \
     balances are unavailable; please try again later or contact the cluster administrators.";

/// `gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused until it is above
/// the floor again (+1 token per day: about 1 day). CPU-only jobs still run; ask hpc-help@example.org
/// for tokens sooner. Run 'sbalance' for details.`
pub fn blocked_message(balance: Tokens, rules: &BucketRules, today: NaiveDate, contact: Option<&str>) -> String {
    let head = format!("gputokens: your GPU token balance is {balance} (floor {})", rules.floor);
    let Some(recovery) = rules.recovery(balance, today) else {
        return format!(
            "{head}; GPU jobs are refused until an administrator grants tokens (no replenishment is configured). \
             CPU-only jobs still run; {}. Run 'sbalance' for details.",
            ask_for_tokens(contact)
        );
    };
    format!(
        "{head}; GPU jobs are refused until it is above the floor again ({recovery}). CPU-only jobs still run; \
         {} sooner. Run 'sbalance' for details.",
        ask_for_tokens(contact)
    )
}

/// A refusal at the user's floor where the site lets users borrow against next month's grant
/// (`borrow_limit`): the message says how.
pub fn with_borrowing(decision: Decision, snapshot: &crate::snapshot::Snapshot) -> Decision {
    let limit = snapshot.borrow_limit.min(snapshot.rules.monthly);
    match decision {
        Decision::Reject { message } if limit > Tokens::ZERO => {
            let hint = format!(
                "You may borrow against next month's grant, up to {limit} tokens a month (sbalance --borrow N). Run 'sbalance' for details."
            );
            Decision::Reject { message: message.replacen("Run 'sbalance' for details.", &hint, 1) }
        }
        other => other,
    }
}

/// Whom a user at the floor asks for tokens: the site's `[admission] contact`, else its administrators.
pub fn ask_for_tokens(contact: Option<&str>) -> String {
    match contact {
        Some(contact) => format!("ask {contact} for tokens"),
        None => "ask the cluster administrators for tokens".to_string(),
    }
}

/// `gputokens: your GPU token balance is -3.5 (below 0): this job was accepted with lower priority
/// (nice +10000); at the floor (-10) GPU jobs are refused. Run 'sbalance' for details.`
pub fn overdraft_message(balance: Tokens, rules: &BucketRules, how: &Deprioritize) -> String {
    let priority = match how {
        Deprioritize::Nice(0) => "this job was accepted".to_string(),
        Deprioritize::Nice(n) => format!("this job was accepted with lower priority (nice +{n})"),
        Deprioritize::SiteFactor(f) => format!("this job was accepted with lower priority (site factor {f})"),
        Deprioritize::Qos(q) => format!("this job was accepted with lower priority (QOS {q})"),
    };
    format!(
        "gputokens: your GPU token balance is {balance} (below 0): {priority}; at the floor ({}) GPU jobs are \
         refused. Run 'sbalance' for details.",
        rules.floor
    )
}

/// What `max_job_duration` makes of a GPU job's time limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeCheck {
    Fine,
    /// The job has no limit of its own and its partition's is longer: it gets `seconds`.
    Limit {
        seconds: u64,
        message: String,
    },
    Reject {
        message: String,
    },
}

/// `requested`: the job's `--time` in seconds (None = not given); `untimed`: what the partition gives
/// a job without one (None = unlimited); `max`: `max_job_duration` in seconds.
pub fn check_duration(requested: Option<u64>, untimed: Option<u64>, max: u64) -> TimeCheck {
    let max_text = format_duration(max);
    match requested {
        Some(t) if t > max => TimeCheck::Reject {
            message: format!(
                "gputokens: GPU jobs may run for at most {max_text} here, and this job asks for {}; submit it with \
                 --time={max_text} or less.",
                format_duration(t)
            ),
        },
        Some(_) => TimeCheck::Fine,
        None if untimed.is_some_and(|u| u <= max) => TimeCheck::Fine,
        None => TimeCheck::Limit {
            seconds: max,
            message: format!(
                "gputokens: this GPU job has no time limit of its own; it was given the longest allowed, {max_text} \
                 (--time={max_text})."
            ),
        },
    }
}

/// An update's new time limit (`scontrol update timelimit=`) against `max_job_duration`: `requested`
/// None = UNLIMITED. None when it fits.
pub fn check_update_duration(requested: Option<u64>, max: u64) -> Option<String> {
    let asked = match requested {
        Some(t) if t <= max => return None,
        Some(t) => format_duration(t),
        None => "UNLIMITED".to_string(),
    };
    Some(format!(
        "gputokens: GPU jobs may run for at most {} here, and this update asks for {asked}.",
        format_duration(max)
    ))
}

/// Refusal of an update of a GPU job that would undo the overdraft penalty: `kept` says what the
/// user's GPU jobs keep (`a nice value of at least 10000`, `QOS gputokens-overdraft`).
pub fn penalty_kept_message(balance: Tokens, kept: &str) -> String {
    format!(
        "gputokens: your GPU token balance is {balance} (below 0): your GPU jobs keep {kept} until it is 0 or more. \
         Run 'sbalance' for details."
    )
}

/// Refusal of an update that changes GPUs, time or tasks of a job that was not in the queue accountd
/// last read (submitted since): whether it asks for GPUs, and how many, is not known yet.
pub fn unknown_job_message(job: &str) -> String {
    format!(
        "gputokens: {job} was submitted after the queue was last read, so its GPUs are not known yet; try this \
         update again in a minute."
    )
}

/// Refusal by `max_gpus_per_user`: `held` milli-GPUs in running and pending jobs, `asked` by this job.
pub fn gpu_limit_message(max: u32, held: u64, asked: u64) -> String {
    format!(
        "gputokens: you may hold at most {max} GPUs in running and pending jobs together; you hold {} and this job \
         asks for {}. Submit it when some of your GPU jobs have finished (squeue --me).",
        gpus(held),
        gpus(asked)
    )
}

fn gpus(milli: u64) -> Tokens {
    gpu_count(milli)
}

/// The most a job being submitted can cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEstimate {
    pub gpus: MilliByType,
    pub seconds: u64,
    pub cost: Tokens,
    /// Where the site prices what a job strands: what the job holds beside its GPUs, and the worst
    /// its share of a node adds to each of its GPU-hours (None: its own GPUs price it).
    pub strands: Option<TaskStrands>,
    pub stranding: Option<Stranding>,
}

impl JobEstimate {
    /// The most `gpus` can cost in `seconds`; Err with the refusal message when the request is more
    /// than can be counted (over [`MAX_JOB_GPUS`], or a cost beyond the representable amounts).
    pub fn of(gpus: MilliByType, seconds: u64, prices: &PriceTable) -> Result<JobEstimate, String> {
        Self::with_strands(gpus, seconds, prices, None)
    }

    /// [`JobEstimate::of`] where what the job holds beside its GPUs may price it (`strands`, and
    /// each array task's GPUs: `[prices] stranded`): at most the worst node shape's surcharge on
    /// each of its GPU-hours.
    pub fn with_strands(
        gpus: MilliByType,
        seconds: u64,
        prices: &PriceTable,
        strands: Option<(Strands, MilliByType)>,
    ) -> Result<JobEstimate, String> {
        let countable = total_milli(&gpus) <= MAX_JOB_GPUS * MILLI;
        let stranding = strands.as_ref().and_then(|(s, per_task)| s.worst(per_task, prices));
        let surcharge = stranding.as_ref().map_or(Tokens::ZERO, |s| s.surcharge);
        let surcharged = crate::pricing::cost_of(surcharge, total_milli(&gpus), seconds);
        let cost = checked_max_cost(&gpus, seconds, prices).zip(surcharged).and_then(|(c, s)| c.checked_add(s));
        let strands =
            strands.map(|(strands, per_task)| TaskStrands { strands, per_task_milli: total_milli(&per_task) });
        match cost {
            Some(cost) if countable => Ok(JobEstimate { gpus, seconds, cost, strands, stranding }),
            _ => Err(impossible_message(&gpus, seconds)),
        }
    }

    /// The most the same job can cost with all its GPUs of `gpu_type` instead (None: beyond what
    /// can be counted): what a refusal's `retry_after` and a quote weigh each type by.
    pub(super) fn cost_on(&self, gpu_type: &str, prices: &PriceTable) -> Option<Tokens> {
        let stranding = self.strands.as_ref().and_then(|t| t.strands.worst_on(gpu_type, t.per_task_milli, prices));
        let price = prices.requested(gpu_type).checked_add(stranding.map_or(Tokens::ZERO, |s| s.surcharge))?;
        crate::pricing::cost_of(price, total_milli(&self.gpus), self.seconds)
    }

    /// `up to 32 tokens (2 a6000 GPUs for 4:00:00)`, and where its CPUs or memory price it, `up to
    /// 48 tokens (1 rtx3090 GPU for 2:00:00; priced by its CPUs: 16 of the 16 on a node it may run on ...)`
    pub(super) fn describe(&self) -> String {
        let stranding = self.stranding.as_ref().map_or(String::new(), |s| format!("; {s}"));
        format!(
            "up to {} tokens ({} for {}{stranding})",
            self.cost,
            GpusText(&self.gpus),
            format_duration(self.seconds)
        )
    }
}

/// What an array task of a job holds beside its GPUs, and its milli-GPUs: what the same job on
/// another GPU type would strand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStrands {
    pub strands: Strands,
    pub per_task_milli: u64,
}

/// Whose balance pays, in a message: the user's own (None) or the pool of an account.
pub(super) fn whose(pool: Option<&str>) -> (String, String) {
    match pool {
        None => ("your GPU token balance".into(), "your running and pending GPU jobs".into()),
        Some(account) => (
            format!("account {account}'s GPU token balance"),
            "the running and pending GPU jobs of its members that it pays for".into(),
        ),
    }
}

/// The estimate rule: refused when the balance, less what the running and pending GPU jobs it pays
/// for can still cost (`committed`) and this job's maximum, would fall below the floor. `pool` is
/// the account whose pool pays (None: the user's own balance). Returns the refusal message, or
/// None to let the job through.
pub fn check_estimate(
    balance: Tokens,
    committed: Tokens,
    job: &JobEstimate,
    rules: &BucketRules,
    pool: Option<&str>,
) -> Option<String> {
    if stays_above_floor(balance, committed, job.cost, rules.floor) {
        return None;
    }
    let after = balance - committed - job.cost; // for the message; saturates at the least amount
    let (balance_of, jobs_of) = whose(pool);
    let queued = if committed > Tokens::ZERO {
        format!(" and {jobs_of} can cost up to {committed} more")
    } else {
        String::new()
    };
    let wait = match pool {
        None => "your jobs have".to_string(),
        Some(account) => format!("jobs of account {account} have"),
    };
    Some(format!(
        "gputokens: this job can cost {}; {balance_of} is {balance}{queued}, which could take it to {after}, \
         below the floor ({}). Ask for less time (--time) or fewer GPUs, or wait until {wait} finished. Run \
         'sbalance' for details.",
        job.describe(),
        rules.floor
    ))
}

/// Whether `balance`, less what the jobs it pays for can still cost (`committed`) and a job's
/// `cost`, stays at or above `floor`: the estimate rule. Exact in i128: saturating steps could
/// round a worst case up to the floor.
pub(super) fn stays_above_floor(balance: Tokens, committed: Tokens, cost: Tokens, floor: Tokens) -> bool {
    balance.micro() as i128 - committed.micro() as i128 - cost.micro() as i128 >= floor.micro() as i128
}

/// Refusal of a request too large to count: `gputokens: this job asks for 4294967295 GPUs of any
/// type for 1-00:00:00, more than ...`.
pub fn impossible_message(gpus: &MilliByType, seconds: u64) -> String {
    format!(
        "gputokens: this job asks for {} for {}, more than gputokens can count (at most {MAX_JOB_GPUS} GPUs in one \
         job, at a cost below {} tokens); ask for fewer GPUs or less time.",
        GpusText(gpus),
        format_duration(seconds),
        Tokens::MAX
    )
}

/// What `--gpu-tokens-estimate` shows on submission.
pub fn estimate_message(balance: Tokens, committed: Tokens, job: &JobEstimate, pool: Option<&str>) -> String {
    let (balance_of, jobs_of) = whose(pool);
    let queued =
        if committed > Tokens::ZERO { format!("; {jobs_of} can cost up to {committed} more") } else { String::new() };
    format!("gputokens: this job can cost {}; {balance_of} is {balance}{queued}.", job.describe())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(daily: i64, monthly: i64) -> BucketRules {
        BucketRules {
            initial: Tokens::whole(100),
            daily: Tokens::whole(daily),
            monthly: Tokens::whole(monthly),
            cap: None,
            floor: Tokens::whole(-10),
        }
    }

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    const NICE: Deprioritize = Deprioritize::Nice(10_000);
    const ONE: Deprioritize = Deprioritize::Nice(1);

    /// Mid-month: no monthly grant soon.
    fn today() -> NaiveDate {
        date(2026, 11, 10)
    }

    #[test]
    fn positive_and_zero_balances_are_accepted_untouched() {
        let r = rules(1, 30);
        assert_eq!(decide(Tokens::whole(50), &r, today(), &NICE, None), Decision::Accept);
        assert_eq!(decide(Tokens::ZERO, &r, today(), &NICE, None), Decision::Accept);
    }

    #[test]
    fn at_or_below_the_floor_is_refused_with_the_issues_message() {
        let r = rules(1, 0);
        let d = decide(Tokens::from_micro(-10_400_000), &r, today(), &NICE, None);
        assert_eq!(
            d,
            Decision::Reject {
                message: "gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused until it is \
                          above the floor again (+1 token per day: about 1 day). CPU-only jobs still run; ask the \
                          cluster administrators for tokens sooner. Run 'sbalance' for details."
                    .into()
            }
        );
        let Decision::Reject { message } = decide(Tokens::whole(-10), &r, today(), &NICE, None) else { panic!() };
        assert!(message.contains("balance is -10 (floor -10)"), "{message}");
        // The site's contact, where it set one: whom to ask, in the same sentence.
        let contact = Some("hpc-help@example.org");
        let Decision::Reject { message } = decide(Tokens::whole(-10), &r, today(), &NICE, contact) else { panic!() };
        assert!(message.contains("CPU-only jobs still run; ask hpc-help@example.org for tokens sooner."), "{message}");
        let Decision::Reject { message } = decide(Tokens::whole(-10), &rules(0, 0), today(), &NICE, contact) else {
            panic!()
        };
        assert!(message.contains("CPU-only jobs still run; ask hpc-help@example.org for tokens."), "{message}");
    }

    #[test]
    fn recovery_estimate_counts_days_and_the_monthly_grant() {
        let r = rules(1, 30);
        let Decision::Reject { message } = decide(Tokens::whole(-12), &r, today(), &ONE, None) else { panic!() };
        assert!(
            message.contains("(+1 token per day and +30 tokens on the 1st of each month: about 3 days)"),
            "{message}"
        );
        // On the 30th the monthly grant two days later lifts -25 above the floor.
        let Decision::Reject { message } = decide(Tokens::whole(-25), &r, date(2026, 11, 29), &ONE, None) else {
            panic!()
        };
        assert!(message.contains("about 2 days"), "{message}");
        let half = BucketRules { daily: Tokens::from_micro(500_000), ..rules(0, 0) };
        let Decision::Reject { message } = decide(Tokens::whole(-11), &half, today(), &ONE, None) else { panic!() };
        assert!(message.contains("(+0.5 tokens per day: about 3 days)"), "{message}");
    }

    #[test]
    fn without_replenishment_only_an_admin_helps() {
        let Decision::Reject { message } = decide(Tokens::whole(-10), &rules(0, 0), today(), &ONE, None) else {
            panic!()
        };
        assert!(message.contains("refused until an administrator grants tokens"), "{message}");
        let monthly_only = rules(0, 30);
        let Decision::Reject { message } = decide(Tokens::whole(-10), &monthly_only, today(), &ONE, None) else {
            panic!()
        };
        assert!(message.contains("(+30 tokens on the 1st of each month: about 21 days)"), "{message}");
    }

    #[test]
    fn a_cap_does_not_hide_recovery() {
        let capped = BucketRules { cap: Some(Tokens::whole(-20)), ..rules(1, 0) };
        let Decision::Reject { message } = decide(Tokens::whole(-11), &capped, today(), &ONE, None) else { panic!() };
        assert!(message.contains("about 2 days"), "{message}");
    }

    #[test]
    fn overdraft_is_accepted_with_a_raised_nice_and_told() {
        let r = rules(1, 30);
        let d = decide(Tokens::from_micro(-3_500_000), &r, today(), &NICE, None);
        assert_eq!(
            d,
            Decision::AcceptDeprioritized {
                how: NICE,
                message: "gputokens: your GPU token balance is -3.5 (below 0): this job was accepted with lower \
                          priority (nice +10000); at the floor (-10) GPU jobs are refused. Run 'sbalance' for details."
                    .into()
            }
        );
        let quiet = Deprioritize::Nice(0);
        let Decision::AcceptDeprioritized { message, .. } = decide(Tokens::from_micro(-1), &r, today(), &quiet, None)
        else {
            panic!()
        };
        assert!(message.contains("-0.000001 (below 0): this job was accepted;"), "{message}");
        let site = Deprioritize::SiteFactor(-5000);
        let Decision::AcceptDeprioritized { how, message } = decide(Tokens::whole(-1), &r, today(), &site, None) else {
            panic!()
        };
        assert_eq!(how, site);
        assert!(message.contains("accepted with lower priority (site factor -5000);"), "{message}");
        let qos = Deprioritize::Qos("overdraft".into());
        let Decision::AcceptDeprioritized { message, .. } = decide(Tokens::whole(-1), &r, today(), &qos, None) else {
            panic!()
        };
        assert!(message.contains("accepted with lower priority (QOS overdraft);"), "{message}");
    }

    #[test]
    fn max_job_duration() {
        let day = 86_400;
        assert_eq!(check_duration(Some(3600), None, day), TimeCheck::Fine);
        assert_eq!(check_duration(Some(day), None, day), TimeCheck::Fine, "the maximum itself is allowed");
        assert_eq!(
            check_duration(Some(2 * day), Some(3600), day),
            TimeCheck::Reject {
                message: "gputokens: GPU jobs may run for at most 1-00:00:00 here, and this job asks for 2-00:00:00; \
                          submit it with --time=1-00:00:00 or less."
                    .into()
            }
        );
        assert_eq!(check_duration(None, Some(3600), day), TimeCheck::Fine, "the partition's default fits");
        for untimed in [None, Some(2 * day)] {
            let TimeCheck::Limit { seconds, message } = check_duration(None, untimed, day) else { panic!() };
            assert_eq!(seconds, day);
            assert!(message.contains("it was given the longest allowed, 1-00:00:00 (--time=1-00:00:00)"), "{message}");
        }
    }

    #[test]
    fn max_gpus_per_user_message() {
        assert_eq!(
            gpu_limit_message(4, 3000, 2000),
            "gputokens: you may hold at most 4 GPUs in running and pending jobs together; you hold 3 and this job \
             asks for 2. Submit it when some of your GPU jobs have finished (squeue --me)."
        );
        assert!(gpu_limit_message(4, 3250, 1000).contains("you hold 3.25 and"));
    }

    #[test]
    fn the_estimate_rule_counts_the_queue_and_the_job() {
        let r = rules(1, 0);
        let job = JobEstimate {
            gpus: MilliByType::from([(Some("a6000".to_string()), 2000)]),
            seconds: 4 * 3600,
            cost: Tokens::whole(32),
            strands: None,
            stranding: None,
        };
        assert_eq!(check_estimate(Tokens::whole(42), Tokens::ZERO, &job, &r, None), None, "42 - 32 = 10");
        assert_eq!(
            check_estimate(Tokens::whole(22), Tokens::ZERO, &job, &r, None),
            None,
            "exactly at the floor is allowed"
        );
        assert_eq!(
            check_estimate(Tokens::whole(20), Tokens::whole(10), &job, &r, None).unwrap(),
            "gputokens: this job can cost up to 32 tokens (2 a6000 GPUs for 4:00:00); your GPU token balance is 20 \
             and your running and pending GPU jobs can cost up to 10 more, which could take it to -22, below the floor \
             (-10). Ask for less time (--time) or fewer GPUs, or wait until your jobs have finished. Run 'sbalance' \
             for details."
        );
        let alone = check_estimate(Tokens::whole(20), Tokens::ZERO, &job, &r, None).unwrap();
        assert!(alone.contains("balance is 20, which could take it to -12,"), "{alone}");
        assert_eq!(
            estimate_message(Tokens::whole(46), Tokens::whole(8), &job, None),
            "gputokens: this job can cost up to 32 tokens (2 a6000 GPUs for 4:00:00); your GPU token balance is 46; \
             your running and pending GPU jobs can cost up to 8 more."
        );
    }

    /// Regression: `balance - committed - cost` overflowed (a panic in debug
    /// builds; in release builds a huge commitment wrapped into a balance far above the floor).
    #[test]
    fn the_estimate_rule_never_wraps() {
        let r = rules(1, 0);
        let job = |cost| JobEstimate {
            gpus: MilliByType::from([(None, 1000)]),
            seconds: 60,
            cost,
            strands: None,
            stranding: None,
        };
        let refused = check_estimate(Tokens::whole(-5), Tokens::MAX, &job(Tokens::MAX), &r, None).unwrap();
        assert!(refused.contains("which could take it to -9223372036854.775808, below the floor"), "{refused}");
        assert!(check_estimate(Tokens::MIN, Tokens::ZERO, &job(Tokens::from_micro(1)), &r, None).is_some());
        assert_eq!(check_estimate(Tokens::MAX, Tokens::MIN, &job(Tokens::ZERO), &r, None), None);
    }

    #[test]
    fn a_request_too_large_to_count_is_refused_by_name() {
        let prices = PriceTable::new([("a6000".to_string(), Tokens::whole(4))].into(), None);
        let huge = MilliByType::from([(None, u32::MAX as u64 * MILLI)]);
        let message = JobEstimate::of(huge, 365 * 86_400, &prices).unwrap_err();
        assert_eq!(
            message,
            "gputokens: this job asks for 4294967295 GPUs of any type for 365-00:00:00, more than gputokens can count \
             (at most 1000000 GPUs in one job, at a cost below 9223372036854.775807 tokens); ask for fewer GPUs or \
             less time."
        );
        let most = MilliByType::from([(Some("a6000".to_string()), MAX_JOB_GPUS * MILLI)]);
        assert_eq!(JobEstimate::of(most.clone(), 3600, &prices).unwrap().cost, Tokens::whole(4_000_000));
        assert!(JobEstimate::of(most, u32::MAX as u64 * 60, &prices).is_err(), "a million GPUs for 8000 years");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn tokens() -> impl Strategy<Value = Tokens> {
            prop_oneof![-1_000_000_000i64..1_000_000_000, any::<i64>()].prop_map(Tokens::from_micro)
        }

        fn rules() -> impl Strategy<Value = BucketRules> {
            (tokens(), tokens(), tokens(), proptest::option::of(tokens()), tokens())
                .prop_map(|(initial, daily, monthly, cap, floor)| BucketRules { initial, daily, monthly, cap, floor })
        }

        fn how() -> impl Strategy<Value = Deprioritize> {
            prop_oneof![
                any::<u32>().prop_map(Deprioritize::Nice),
                any::<i64>().prop_map(Deprioritize::SiteFactor),
                "\\PC{0,12}".prop_map(Deprioritize::Qos),
            ]
        }

        proptest! {
            /// Any balance, rules and penalty give a decision, and a message that names the balance.
            #[test]
            fn no_amounts_panic(balance in tokens(), committed in tokens(), cost in tokens(), r in rules(), how in how(), day in 0..3_000_000i32) {
                let today = NaiveDate::from_num_days_from_ce_opt(day).unwrap_or_default();
                match decide(balance, &r, today, &how, None) {
                    Decision::Accept => prop_assert!(balance > r.floor && !balance.is_negative()),
                    Decision::AcceptDeprioritized { message, .. } | Decision::Reject { message } => {
                        prop_assert!(message.contains(&balance.to_string()));
                    }
                }
                let job = JobEstimate { gpus: MilliByType::from([(None, 1000)]), seconds: 60, cost, strands: None, stranding: None };
                let refused = check_estimate(balance, committed, &job, &r, None);
                // Refused exactly when the worst case, counted exactly, is below the floor.
                let worst = balance.micro() as i128 - committed.micro() as i128 - cost.micro() as i128;
                prop_assert_eq!(refused.is_some(), worst < r.floor.micro() as i128);
                let _ = estimate_message(balance, committed, &job, Some("lab"));
            }

            #[test]
            fn any_limits_give_a_message(max in any::<u32>(), held in any::<u64>(), asked in any::<u64>(), t in proptest::option::of(any::<u64>()), u in proptest::option::of(any::<u64>()), m in any::<u64>()) {
                prop_assert!(gpu_limit_message(max, held, asked).starts_with("gputokens: "));
                let _ = (check_duration(t, u, m), check_update_duration(t, m));
            }
        }
    }

    #[test]
    fn unavailable_balances_follow_on_error() {
        assert_eq!(when_unavailable(OnError::Accept), Decision::Accept);
        let Decision::Reject { message } = when_unavailable(OnError::Reject) else { panic!() };
        assert!(message.starts_with("gputokens: GPU jobs cannot be admitted right now"), "{message}");
        assert_eq!("reject".parse::<OnError>(), Ok(OnError::Reject));
        assert_eq!("accept".parse::<OnError>(), Ok(OnError::Accept));
        assert!("maybe".parse::<OnError>().is_err());
        assert_eq!(OnError::default().as_str(), "accept");
    }
}
