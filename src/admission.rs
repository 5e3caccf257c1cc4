//! The admission decision for a GPU job, from the submitting user's balance and the bucket rules:
//! what the job_submit plugin does inside slurmctld, kept here as plain safe code with its messages.
//!
//! - balance ≤ floor → the job is refused, with the balance, the floor and when it recovers;
//! - floor < balance < 0 → accepted with a raised `nice` (lower priority), and the user is told;
//! - otherwise accepted untouched.
//!
//! CPU-only jobs never get here (the caller checks the request first).

use chrono::NaiveDate;

use crate::policy::{BucketRules, Status};
use crate::tokens::Tokens;

/// What happens to a GPU job when the balances cannot be read (missing, unreadable, corrupt or
/// stale snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnError {
    /// Fail open: accept GPU jobs as if every balance were fine (the default).
    #[default]
    Accept,
    /// Fail closed: refuse GPU jobs until the balances are readable again.
    Reject,
}

impl std::str::FromStr for OnError {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "accept" => Ok(OnError::Accept),
            "reject" => Ok(OnError::Reject),
            other => Err(format!("'{other}' is not \"accept\" or \"reject\"")),
        }
    }
}

impl OnError {
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Accept => "accept",
            OnError::Reject => "reject",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Accept untouched.
    Accept,
    /// Accept, add `nice` to the job's nice value, show `message` to the submitter.
    AcceptDeprioritized { nice: u32, message: String },
    /// Refuse with `message`.
    Reject { message: String },
}

/// Decides a GPU job of a user whose balance is `balance`, on `today` (local date, for the
/// recovery estimate).
pub fn decide(balance: Tokens, rules: &BucketRules, today: NaiveDate, nice_increment: u32) -> Decision {
    match rules.status(balance) {
        Status::Ok => Decision::Accept,
        Status::Overdraft => Decision::AcceptDeprioritized {
            nice: nice_increment,
            message: overdraft_message(balance, rules, nice_increment),
        },
        Status::Blocked => Decision::Reject { message: blocked_message(balance, rules, today) },
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
/// the floor again (+1 token per day: about 1 day). Run 'sbalance' for details.`
pub fn blocked_message(balance: Tokens, rules: &BucketRules, today: NaiveDate) -> String {
    let head = format!("gputokens: your GPU token balance is {balance} (floor {})", rules.floor);
    let Some(replenishment) = replenishment(rules) else {
        return format!(
            "{head}; GPU jobs are refused until an administrator grants tokens (no replenishment is configured). \
             Run 'sbalance' for details."
        );
    };
    // The recovery estimate ignores the cap: it only limits replenishment above it, never up to 0.
    let unlimited = BucketRules { cap: None, ..*rules };
    let when = match unlimited.days_to_recover(today, balance) {
        Some(1) => "about 1 day".to_string(),
        Some(days) => format!("about {days} days"),
        None => "more than 10 years".to_string(),
    };
    format!(
        "{head}; GPU jobs are refused until it is above the floor again ({replenishment}: {when}). \
         Run 'sbalance' for details."
    )
}

/// `gputokens: your GPU token balance is -3.5 (below 0): this job was accepted with lower priority
/// (nice +10000); at the floor (-10) GPU jobs are refused. Run 'sbalance' for details.`
pub fn overdraft_message(balance: Tokens, rules: &BucketRules, nice_increment: u32) -> String {
    let priority = if nice_increment > 0 {
        format!("this job was accepted with lower priority (nice +{nice_increment})")
    } else {
        "this job was accepted".to_string()
    };
    format!(
        "gputokens: your GPU token balance is {balance} (below 0): {priority}; at the floor ({}) GPU jobs are \
         refused. Run 'sbalance' for details.",
        rules.floor
    )
}

/// `+1 token per day`, `+1 token per day and +30 tokens on the 1st of each month`; None when
/// nothing is ever added.
fn replenishment(rules: &BucketRules) -> Option<String> {
    let tokens = |t: Tokens| if t == Tokens::whole(1) { "token" } else { "tokens" };
    let daily = (rules.daily > Tokens::ZERO).then(|| format!("+{} {} per day", rules.daily, tokens(rules.daily)));
    let monthly = (rules.monthly > Tokens::ZERO)
        .then(|| format!("+{} {} on the 1st of each month", rules.monthly, tokens(rules.monthly)));
    match (daily, monthly) {
        (Some(d), Some(m)) => Some(format!("{d} and {m}")),
        (Some(one), None) | (None, Some(one)) => Some(one),
        (None, None) => None,
    }
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

    /// Mid-month: no monthly grant soon.
    fn today() -> NaiveDate {
        date(2026, 11, 10)
    }

    #[test]
    fn positive_and_zero_balances_are_accepted_untouched() {
        let r = rules(1, 30);
        assert_eq!(decide(Tokens::whole(50), &r, today(), 10_000), Decision::Accept);
        assert_eq!(decide(Tokens::ZERO, &r, today(), 10_000), Decision::Accept);
    }

    #[test]
    fn at_or_below_the_floor_is_refused_with_the_issues_message() {
        let r = rules(1, 0);
        let d = decide(Tokens::from_micro(-10_400_000), &r, today(), 10_000);
        assert_eq!(
            d,
            Decision::Reject {
                message: "gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused until it is \
                          above the floor again (+1 token per day: about 1 day). Run 'sbalance' for details."
                    .into()
            }
        );
        let Decision::Reject { message } = decide(Tokens::whole(-10), &r, today(), 10_000) else { panic!() };
        assert!(message.contains("balance is -10 (floor -10)"), "{message}");
    }

    #[test]
    fn recovery_estimate_counts_days_and_the_monthly_grant() {
        let r = rules(1, 30);
        let Decision::Reject { message } = decide(Tokens::whole(-12), &r, today(), 1) else { panic!() };
        assert!(
            message.contains("(+1 token per day and +30 tokens on the 1st of each month: about 3 days)"),
            "{message}"
        );
        // On the 30th the monthly grant two days later lifts -25 above the floor.
        let Decision::Reject { message } = decide(Tokens::whole(-25), &r, date(2026, 11, 29), 1) else { panic!() };
        assert!(message.contains("about 2 days"), "{message}");
        let half = BucketRules { daily: Tokens::from_micro(500_000), ..rules(0, 0) };
        let Decision::Reject { message } = decide(Tokens::whole(-11), &half, today(), 1) else { panic!() };
        assert!(message.contains("(+0.5 tokens per day: about 3 days)"), "{message}");
    }

    #[test]
    fn without_replenishment_only_an_admin_helps() {
        let Decision::Reject { message } = decide(Tokens::whole(-10), &rules(0, 0), today(), 1) else { panic!() };
        assert!(message.contains("refused until an administrator grants tokens"), "{message}");
        let monthly_only = rules(0, 30);
        let Decision::Reject { message } = decide(Tokens::whole(-10), &monthly_only, today(), 1) else { panic!() };
        assert!(message.contains("(+30 tokens on the 1st of each month: about 21 days)"), "{message}");
    }

    #[test]
    fn a_cap_does_not_hide_recovery() {
        let capped = BucketRules { cap: Some(Tokens::whole(-20)), ..rules(1, 0) };
        let Decision::Reject { message } = decide(Tokens::whole(-11), &capped, today(), 1) else { panic!() };
        assert!(message.contains("about 2 days"), "{message}");
    }

    #[test]
    fn overdraft_is_accepted_with_a_raised_nice_and_told() {
        let r = rules(1, 30);
        let d = decide(Tokens::from_micro(-3_500_000), &r, today(), 10_000);
        assert_eq!(
            d,
            Decision::AcceptDeprioritized {
                nice: 10_000,
                message: "gputokens: your GPU token balance is -3.5 (below 0): this job was accepted with lower \
                          priority (nice +10000); at the floor (-10) GPU jobs are refused. Run 'sbalance' for details."
                    .into()
            }
        );
        let Decision::AcceptDeprioritized { nice: 0, message } = decide(Tokens::from_micro(-1), &r, today(), 0) else {
            panic!()
        };
        assert!(message.contains("-0.000001 (below 0): this job was accepted;"), "{message}");
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
