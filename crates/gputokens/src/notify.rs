//! Notifications (`[notify]`): which event a user's balance change means, given the level they were
//! last notified at, and the message they get. Pure: the ledger keeps the level and the owed and sent
//! notifications, accountd runs the configured command.
//!
//! The levels, from good to bad: `ok`, `warned` (below `warn_below`), `overdraft` (below 0) and
//! `floor` (at or below the floor). Once per crossing:
//! - a balance that reaches a **worse** level than the one last notified gives one notification, for
//!   the worst level it reached (a fall through several levels in one cycle is one notification, of
//!   the lowest; one level per cycle is one notification per cycle);
//! - a balance back at 0 or more from overdraft or the floor gives one `recovered`;
//! - any other rise (floor → overdraft, warned → ok) lowers the level silently, so the next fall
//!   below it is told again; a user who recovered is warned again on their next fall.

use chrono::NaiveDate;

use crate::policy::BucketRules;
use crate::tokens::Tokens;

/// How bad a balance is, as notified; ordered from good to bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warned,
    Overdraft,
    Floor,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warned => "warned",
            Level::Overdraft => "overdraft",
            Level::Floor => "floor",
        }
    }

    pub fn parse(text: &str) -> Option<Level> {
        [Level::Ok, Level::Warned, Level::Overdraft, Level::Floor].into_iter().find(|l| l.as_str() == text)
    }

    /// The level of `balance`: at or below the floor, below 0, below `warn_below`, or ok.
    pub fn of(balance: Tokens, warn_below: Tokens, floor: Tokens) -> Level {
        if balance <= floor {
            Level::Floor
        } else if balance.is_negative() {
            Level::Overdraft
        } else if balance < warn_below {
            Level::Warned
        } else {
            Level::Ok
        }
    }
}

/// What a user is told; the name is the command's first fixed argument and `GPUTOKENS_EVENT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The balance fell below `warn_below`.
    Warning,
    /// Below 0: GPU jobs are deprioritized and may be preempted.
    Overdraft,
    /// At or below the floor: new GPU jobs are refused.
    Floor,
    /// Back at 0 or more from overdraft or the floor.
    Recovered,
    /// A job of theirs was preempted (requeued or cancelled).
    Preempted,
    /// A grant to them ends soon with tokens left, which then expire.
    Expiring,
    /// A job of theirs has held GPUs below the idle threshold for the idle window (`[usage] idle_notify`).
    Idle,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Warning => "warning",
            Event::Overdraft => "overdraft",
            Event::Floor => "floor",
            Event::Recovered => "recovered",
            Event::Preempted => "preempted",
            Event::Expiring => "expiring",
            Event::Idle => "idle",
        }
    }

    pub fn parse(text: &str) -> Option<Event> {
        let all = [
            Event::Warning,
            Event::Overdraft,
            Event::Floor,
            Event::Recovered,
            Event::Preempted,
            Event::Expiring,
            Event::Idle,
        ];
        all.into_iter().find(|e| e.as_str() == text)
    }
}

/// A change of level: the level to remember and the event to send, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossing {
    pub level: Level,
    pub event: Option<Event>,
}

/// What `balance` means for a user last notified at `last`; None when the level stays.
pub fn crossing(last: Level, balance: Tokens, warn_below: Tokens, floor: Tokens) -> Option<Crossing> {
    let now = Level::of(balance, warn_below, floor);
    let event = match now {
        _ if now == last => return None,
        Level::Floor if now > last => Some(Event::Floor),
        Level::Overdraft if now > last => Some(Event::Overdraft),
        Level::Warned if now > last => Some(Event::Warning),
        Level::Ok | Level::Warned if last >= Level::Overdraft => Some(Event::Recovered),
        _ => None,
    };
    Some(Crossing { level: now, event })
}

/// The human message of a balance event (the command's stdin), with the balance, what it means and
/// when it recovers (the admission messages' wording).
pub fn balance_message(
    event: Event,
    balance: Tokens,
    warn_below: Tokens,
    rules: &BucketRules,
    today: NaiveDate,
) -> String {
    let head = format!("gputokens: your GPU token balance is {balance}");
    let recovers = |what: &str| match rules.recovery(balance, today) {
        Some(recovery) => format!("{what} ({recovery})"),
        None => format!("{what} when an administrator grants tokens (no replenishment is configured)"),
    };
    let body = match event {
        Event::Warning => format!(
            "{head}, below the warning level {warn_below}. Below 0 your GPU jobs get lower priority and may be \
             preempted; at the floor ({}) new GPU jobs are refused.",
            rules.floor
        ),
        Event::Overdraft => format!(
            "{head} (below 0): your GPU jobs get lower priority and may be preempted when others wait for their \
             GPUs; at the floor ({}) new GPU jobs are refused. {}.",
            rules.floor,
            recovers("It is back to 0")
        ),
        Event::Floor => format!(
            "{head} (floor {}): new GPU jobs are refused. {}.",
            rules.floor,
            recovers("They are accepted again when it is above the floor")
        ),
        Event::Recovered => format!("{head} (0 or more again): your GPU jobs run with normal priority again."),
        Event::Preempted | Event::Expiring | Event::Idle => format!("{head}."),
    };
    format!("{body} Run 'sbalance' for details.")
}

/// The message of a grant about to end: what is left of it, when it expires, and that charges use
/// it first.
pub fn expiring_message(unused: Tokens, amount: Tokens, expires: &str, balance: Tokens) -> String {
    format!(
        "gputokens: {unused} tokens left of a grant of {amount} expire at {expires} (your GPU jobs use them first); \
         your balance is {balance}. Run 'sbalance' for details."
    )
}

/// The message of a job flagged idle: which, on which node, for how long, and what to do.
pub fn idle_message(job: &str, node: &str, threshold_percent: f64, window: &str) -> String {
    let on = if node.is_empty() { String::new() } else { format!(" on {node}") };
    format!(
        "gputokens: your GPU job {job}{on} has used its GPUs below {threshold_percent}% for {window}: the tokens \
         it is charged meanwhile are spent on idle GPUs. If it has nothing to do, end it (scancel {job}). Run \
         'sbalance --statement' for what idle GPUs cost you this month."
    )
}

/// The message of a preemption: the job, what was done and why (the action's reason).
pub fn preempted_message(job: &str, action: &str, reason: &str) -> String {
    let done = match action {
        "requeue" => "requeued (it will run again when it gets GPUs)",
        "cancel" => "cancelled",
        other => other,
    };
    format!(
        "gputokens: your GPU job {job} was {done}: {reason}. Jobs of users whose balance is below 0 give up \
         their GPUs when others wait for them. Run 'sbalance' for details."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: i64) -> Tokens {
        Tokens::whole(n)
    }

    /// The level a user ends at and the events they get, balance by balance.
    fn walk(balances: &[i64]) -> Vec<&'static str> {
        let mut level = Level::Ok;
        let mut events = Vec::new();
        for b in balances {
            if let Some(c) = crossing(level, t(*b), t(10), t(-10)) {
                level = c.level;
                events.extend(c.event.map(Event::as_str));
            }
        }
        events
    }

    #[test]
    fn levels() {
        assert_eq!(Level::of(t(10), t(10), t(-10)), Level::Ok);
        assert_eq!(Level::of(t(9), t(10), t(-10)), Level::Warned);
        assert_eq!(Level::of(t(0), t(10), t(-10)), Level::Warned);
        assert_eq!(Level::of(Tokens::from_micro(-1), t(10), t(-10)), Level::Overdraft);
        assert_eq!(Level::of(t(-10), t(10), t(-10)), Level::Floor);
        assert_eq!(Level::of(t(0), t(0), t(-10)), Level::Ok, "warn_below = 0: no warning");
        for l in [Level::Ok, Level::Warned, Level::Overdraft, Level::Floor] {
            assert_eq!(Level::parse(l.as_str()), Some(l));
        }
    }

    #[test]
    fn one_notification_per_level_crossed_one_per_cycle() {
        assert_eq!(walk(&[100, 5, -5, -11]), ["warning", "overdraft", "floor"]);
        // The same balances again, or moves within a level: nothing.
        assert_eq!(walk(&[5, 4, 3, -5, -6, -11, -12]), ["warning", "overdraft", "floor"]);
    }

    #[test]
    fn a_fall_through_several_levels_in_one_cycle_is_one_notification_of_the_lowest() {
        assert_eq!(walk(&[100, -11]), ["floor"]);
        assert_eq!(walk(&[100, -3]), ["overdraft"]);
        assert_eq!(walk(&[5, -20]), ["warning", "floor"]);
    }

    #[test]
    fn recovery_and_a_new_fall() {
        assert_eq!(walk(&[-5, 20]), ["overdraft", "recovered"]);
        assert_eq!(walk(&[-11, 3]), ["floor", "recovered"], "back to 0 or more, still below warn_below");
        // Floor → overdraft is silent, but reaching the floor again is told again.
        assert_eq!(walk(&[-11, -5, -11]), ["floor", "floor"]);
        // Warned → ok is silent; the next fall warns again.
        assert_eq!(walk(&[5, 50, 5]), ["warning", "warning"]);
        // A recovered user is warned again on the next fall.
        assert_eq!(walk(&[5, -1, 50, 5, -1]), ["warning", "overdraft", "recovered", "warning", "overdraft"]);
        // Recovered to warned: no new warning until they are above it first.
        assert_eq!(walk(&[-1, 5, 4]), ["overdraft", "recovered"]);
    }

    #[test]
    fn messages_say_the_balance_what_it_means_and_when_it_recovers() {
        let rules = BucketRules::default();
        let day = NaiveDate::from_ymd_opt(2026, 11, 10).unwrap();
        let floor = balance_message(Event::Floor, t(-12), t(10), &rules, day);
        assert_eq!(
            floor,
            "gputokens: your GPU token balance is -12 (floor -10): new GPU jobs are refused. They are accepted \
             again when it is above the floor (+1 token per day and +30 tokens on the 1st of each month: about 3 \
             days). Run 'sbalance' for details."
        );
        let over = balance_message(Event::Overdraft, t(-5), t(10), &rules, day);
        assert!(over.contains("balance is -5 (below 0)") && over.contains("about 5 days"), "{over}");
        let none = BucketRules { daily: Tokens::ZERO, monthly: Tokens::ZERO, ..rules };
        let stuck = balance_message(Event::Floor, t(-12), t(10), &none, day);
        assert!(stuck.contains("when an administrator grants tokens"), "{stuck}");
        let warn = balance_message(Event::Warning, t(5), t(10), &rules, day);
        assert!(warn.contains("balance is 5, below the warning level 10"), "{warn}");
        assert!(preempted_message("42", "requeue", "gputokens: preempted, balance -5, a6000 contended")
            .starts_with("gputokens: your GPU job 42 was requeued"));
    }
}
