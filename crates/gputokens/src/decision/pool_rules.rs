//! The decision for a GPU job paid by an account's pool (`[accounts] mode`): the pool's floor and
//! overdraft, the per-user limit inside it, and in mode "both" the user's own bucket as well. Each
//! refusal names the account, its balance, when it recovers, whom to ask (its coordinators) and the
//! user's other accounts that still have tokens.

use chrono::{Datelike, NaiveDate};

use crate::config::admission::Deprioritize;
#[cfg(test)]
use crate::policy::BucketRules;
use crate::policy::Status;
use crate::pools::PoolStanding;
use crate::snapshot::Snapshot;
use crate::tokens::Tokens;

use super::rules::{overdraft_message, Decision};

/// The pool of `account` as the decision sees it for `user`.
pub struct PoolCase<'a> {
    pub account: &'a str,
    pub pool: &'a PoolStanding,
    pub user: Option<&'a str>,
    pub snapshot: &'a Snapshot,
    pub today: NaiveDate,
    /// The site's `[admission] contact`, named where a pool has no coordinators.
    pub contact: Option<&'a str>,
    /// The job's own account, where this pool is one it draws on.
    pub drawn_by: Option<&'a str>,
    /// Unix seconds: a dated sub-allocation is open only within its window.
    pub now: i64,
}

/// Why a dated sub-allocation refuses a job now: the message, and how many seconds until it opens
/// (None: it has ended).
pub struct Closed {
    pub message: String,
    pub opens_in: Option<u64>,
}

impl PoolCase<'_> {
    /// What `user` spent of the pool this month (a snapshot of an earlier month counts nothing).
    pub fn spent(&self) -> Tokens {
        let Some(user) = self.user else { return Tokens::ZERO };
        if !self.snapshot.spent_month.as_deref().is_some_and(|m| is_month_of(m, self.today)) {
            return Tokens::ZERO;
        }
        self.pool.spent.get(user).copied().unwrap_or(Tokens::ZERO)
    }

    /// What `user`'s running and pending jobs paid by the pool can still cost (`pool_user_committed`):
    /// it counts toward the per-user limit beside what was spent (the audit's L5).
    pub fn committed(&self) -> Tokens {
        let (Some(user), Some(queue)) = (self.user, self.snapshot.queue.as_ref()) else { return Tokens::ZERO };
        queue
            .pool_user_committed
            .get(&(self.account.to_string(), user.to_string()))
            .map_or(Tokens::ZERO, |c| c.max_cost)
    }

    /// Spent this month and committed by the user's jobs under way: what the per-user limit weighs.
    fn toward_limit(&self) -> Tokens {
        self.spent().checked_add(self.committed()).unwrap_or(Tokens::MAX)
    }

    /// The pool's decision: its floor and overdraft, then the per-user limit.
    pub fn decide(&self, how: &Deprioritize) -> Decision {
        if let Some(closed) = self.closed() {
            return Decision::Reject { message: closed.message };
        }
        let (balance, rules) = (self.pool.balance, &self.pool.rules);
        match rules.status(balance) {
            Status::Blocked => return Decision::Reject { message: self.blocked_message() },
            Status::Overdraft => {
                let message = self.worded(&overdraft_message(balance, rules, how));
                return Decision::AcceptDeprioritized { how: how.clone(), message };
            }
            Status::Ok => {}
        }
        match self.pool.user_limit {
            Some(limit) if self.toward_limit() >= limit => Decision::Reject { message: self.limit_message(limit) },
            _ => Decision::Accept,
        }
    }

    /// Whether the pool is open now: always, unless it is a dated sub-allocation outside its window.
    fn is_open(&self) -> bool {
        self.pool.window.is_none_or(|(starts, ends)| starts <= self.now && self.now < ends)
    }

    /// Where the pool is a dated sub-allocation outside its window: why its jobs are refused.
    pub fn closed(&self) -> Option<Closed> {
        let (starts, ends) = self.pool.window?;
        let at = |t: i64| crate::time::format_local(t);
        let inside = self.pool.parent.as_deref().map(|p| format!(" of account {p}")).unwrap_or_default();
        let subject = format!("the sub-allocation {}{inside}", self.account);
        let whose = match self.drawn_by {
            Some(below) => format!("account {below} draws on {subject}, which"),
            None => subject,
        };
        let (when, opens_in) = if self.now < starts {
            (format!("opens at {}; its GPU jobs are refused until then", at(starts)), Some((starts - self.now) as u64))
        } else if self.now >= ends {
            (format!("ended at {}; its GPU jobs are refused", at(ends)), None)
        } else {
            return None;
        };
        let message =
            format!("gputokens: {whose} {when}. {} Run 'sbalance -A {}' for details.", self.elsewhere(), self.account);
        Some(Closed { message, opens_in })
    }

    /// The decision of a pool whose parent lends to it: in debt (below 0, or below its own
    /// floor) it runs on the parent's tokens, which decide as the pool it draws on, so only the
    /// per-user limit holds: never a penalty for a small debt that a deep one would not pay.
    pub fn decide_lent(&self) -> Decision {
        if let Some(closed) = self.closed() {
            return Decision::Reject { message: closed.message };
        }
        match self.pool.user_limit {
            Some(limit) if self.toward_limit() >= limit => Decision::Reject { message: self.limit_message(limit) },
            _ => Decision::Accept,
        }
    }

    /// `account lab's`, or for a pool the job's account draws on, `account course draws on account
    /// dept, whose`: how a message names this pool's balance.
    fn whose(&self) -> String {
        match self.drawn_by {
            Some(below) => format!("account {below} draws on account {}, whose", self.account),
            None => format!("account {}'s", self.account),
        }
    }

    /// Whether the user's job would be paid from the pool: not at its floor nor beyond the limit.
    fn has_tokens(&self) -> bool {
        self.is_open()
            && self.pool.rules.status(self.pool.balance) != Status::Blocked
            && self.pool.user_limit.is_none_or(|limit| self.toward_limit() < limit)
    }

    /// A message of the user's own bucket reworded for the pool.
    fn worded(&self, message: &str) -> String {
        message
            .replacen("your GPU token balance", &format!("{} GPU token balance", self.whose()), 1)
            .replace("Run 'sbalance'", &format!("Run 'sbalance -A {}'", self.account))
    }

    fn blocked_message(&self) -> String {
        let (balance, rules) = (self.pool.balance, &self.pool.rules);
        let jobs = match self.drawn_by {
            Some(_) => "its GPU jobs and those of the accounts drawing on it are refused",
            None => "its GPU jobs are refused",
        };
        let head =
            format!("gputokens: {} GPU token balance is {balance} (floor {}); {jobs}", self.whose(), rules.floor);
        let when = match rules.recovery(balance, self.today) {
            Some(recovery) => format!("until it is above the floor again ({recovery})"),
            None => "until tokens are granted to it (it has no replenishment)".to_string(),
        };
        format!("{head} {when}. {} Run 'sbalance -A {}' for details.", self.elsewhere(), self.account)
    }

    fn limit_message(&self, limit: Tokens) -> String {
        let next_month = first_of_next_month(self.today);
        let (spent, committed) = (self.spent(), self.committed());
        let under_way = match committed > Tokens::ZERO {
            true => format!(" and your running and pending jobs there may cost up to {committed} more"),
            false => String::new(),
        };
        let until = match committed > Tokens::ZERO {
            true => format!("until your jobs there end or {next_month}"),
            false => format!("until {next_month}"),
        };
        let under = match self.drawn_by {
            Some(below) => format!("{below} (which draws on {})", self.account),
            None => self.account.to_string(),
        };
        format!(
            "gputokens: you have spent {spent} of the {limit} tokens a member may spend per month in account {}{under_way}; \
             your GPU jobs under {under} are refused {until}. {} Run 'sbalance -A {}' for details.",
            self.account,
            self.elsewhere(),
            self.account
        )
    }

    /// `Ask its coordinators (carol) for tokens, or submit under another of your accounts that has
    /// tokens: sbatch -A course.`
    fn elsewhere(&self) -> String {
        let ask = match self.pool.coordinators.as_slice() {
            [] => match self.contact {
                Some(contact) => format!("Ask {contact} for tokens"),
                None => "Ask the cluster administrators for tokens".to_string(),
            },
            names => format!("Ask its coordinators ({}) for tokens", names.join(", ")),
        };
        let others = self.other_accounts_with_tokens();
        match others.first() {
            None => format!("{ask}."),
            Some(first) => format!(
                "{ask}, or submit under another of your accounts that has tokens ({}): sbatch -A {first}.",
                others.join(", ")
            ),
        }
    }

    /// The user's other accounts whose jobs would be accepted: a pool above its floor (and within
    /// the user's limit there), or an account without a pool (paid by the user's own bucket).
    fn other_accounts_with_tokens(&self) -> Vec<&str> {
        let Some(user) = self.user else { return Vec::new() };
        let Some(accounts) = self.snapshot.user_accounts.get(user) else { return Vec::new() };
        let own = self.snapshot.balance(user);
        accounts
            .iter()
            .map(String::as_str)
            .filter(|a| *a != self.account)
            .filter(|a| match self.snapshot.pools.get(*a) {
                Some(pool) => {
                    let above = crate::pools::ancestors(a, |p| self.snapshot.pools.get(p)?.parent.as_deref());
                    PoolCase { account: a, pool, drawn_by: None, ..*self }.has_tokens()
                        && above.iter().all(|p| {
                            let pool = &self.snapshot.pools[*p];
                            PoolCase { account: p, pool, drawn_by: Some(a), ..*self }.has_tokens()
                        })
                }
                None => own > self.snapshot.rules.floor,
            })
            .collect()
    }
}

/// Whether `first` is worse than `second`: a refusal, then lower priority, then acceptance.
pub fn is_worse(first: &Decision, second: &Decision) -> bool {
    let rank = |d: &Decision| match d {
        Decision::Accept => 0,
        Decision::AcceptDeprioritized { .. } => 1,
        Decision::Reject { .. } => 2,
    };
    rank(first) > rank(second)
}

/// Whether `month` (YYYY-MM) is the month of `day` (compared without allocating: this runs in
/// every decision under a pool with a per-user limit).
fn is_month_of(month: &str, day: NaiveDate) -> bool {
    match month.split_once('-') {
        Some((y, m)) => y.parse() == Ok(day.year()) && m.parse() == Ok(day.month()),
        None => false,
    }
}

pub(super) fn first_of_next_month(today: NaiveDate) -> NaiveDate {
    let (year, month) = if today.month() == 12 { (today.year() + 1, 1) } else { (today.year(), today.month() + 1) };
    NaiveDate::from_ymd_opt(year, month, 1).unwrap_or(today)
}

/// The rules of a pool with no replenishment at all.
#[cfg(test)]
fn dry(floor: i64) -> BucketRules {
    BucketRules {
        initial: Tokens::ZERO,
        daily: Tokens::ZERO,
        monthly: Tokens::ZERO,
        cap: None,
        floor: Tokens::whole(floor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pools::PoolMode;

    fn snapshot() -> Snapshot {
        let mut snap = Snapshot::new(0, BucketRules::default());
        snap.pool_mode = PoolMode::Account;
        let pool = |balance: i64, monthly: i64| PoolStanding {
            balance: Tokens::whole(balance),
            rules: BucketRules { monthly: Tokens::whole(monthly), ..dry(-10) },
            user_limit: None,
            coordinators: vec![],
            spent: Default::default(),
            parent: None,
            lends: false,
            window: None,
        };
        snap.pools.insert("lab".into(), PoolStanding { coordinators: vec!["carol".into()], ..pool(-10, 30) });
        snap.pools.insert("course".into(), pool(50, 0));
        snap.pools.insert("empty".into(), pool(-12, 0));
        snap.user_accounts.insert("bob".into(), vec!["lab".into(), "course".into(), "empty".into(), "ops".into()]);
        snap.spent_month = Some("2026-11".into());
        snap.pools.get_mut("course").unwrap().spent.insert("bob".into(), Tokens::whole(12));
        snap
    }

    fn case<'a>(snap: &'a Snapshot, account: &'a str) -> PoolCase<'a> {
        let today = NaiveDate::from_ymd_opt(2026, 11, 26).unwrap();
        PoolCase {
            account,
            pool: &snap.pools[account],
            user: Some("bob"),
            snapshot: snap,
            today,
            contact: None,
            drawn_by: None,
            now: 0,
        }
    }

    #[test]
    fn at_the_floor_the_message_names_account_recovery_coordinators_and_other_accounts() {
        let snap = snapshot();
        let Decision::Reject { message } = case(&snap, "lab").decide(&Deprioritize::Nice(100)) else { panic!() };
        assert_eq!(
            message,
            "gputokens: account lab's GPU token balance is -10 (floor -10); its GPU jobs are refused until it is \
             above the floor again (+30 tokens on the 1st of each month: about 5 days). Ask its coordinators \
             (carol) for tokens, or submit under another of your accounts that has tokens (course, ops): sbatch -A \
             course. Run 'sbalance -A lab' for details."
        );
        let Decision::Reject { message } = case(&snap, "empty").decide(&Deprioritize::Nice(100)) else { panic!() };
        assert!(message.contains("until tokens are granted to it") && message.contains("administrators"), "{message}");
    }

    #[test]
    fn the_per_user_limit_refuses_while_the_pool_has_tokens() {
        let mut snap = snapshot();
        snap.pools.get_mut("course").unwrap().user_limit = Some(Tokens::whole(10));
        let Decision::Reject { message } = case(&snap, "course").decide(&Deprioritize::Nice(100)) else { panic!() };
        assert!(message.starts_with("gputokens: you have spent 12 of the 10 tokens a member may spend per month in account course; your GPU jobs under course are refused until 2026-12-01."), "{message}");
        snap.spent_month = Some("2026-10".into());
        assert_eq!(case(&snap, "course").decide(&Deprioritize::Nice(100)), Decision::Accept, "last month's spending");
    }

    /// The audit's L5: what a member's running and pending jobs in the pool can still cost counts
    /// toward the limit beside what was charged: five jobs at once do not each pass on the charges
    /// of before.
    #[test]
    fn a_members_jobs_under_way_count_toward_the_per_user_limit() {
        let mut snap = snapshot();
        snap.pools.get_mut("course").unwrap().user_limit = Some(Tokens::whole(20));
        assert_eq!(case(&snap, "course").decide(&Deprioritize::Nice(100)), Decision::Accept, "12 of 20 spent");
        let mut queue = snap.queue.clone().unwrap_or_default();
        let user = case(&snap, "course").user.unwrap().to_string();
        let held = crate::estimate::Commitment { milli_gpus: 2000, max_cost: Tokens::whole(8) };
        queue.pool_user_committed.insert(("course".into(), user.clone()), held);
        queue.pool_user_committed.insert(("course".into(), "someone-else".into()), held);
        snap.queue = Some(queue);
        let Decision::Reject { message } = case(&snap, "course").decide(&Deprioritize::Nice(100)) else { panic!() };
        assert!(
            message.contains("spent 12 of the 20 tokens") && message.contains("may cost up to 8 more"),
            "{message}"
        );
        assert!(message.contains("refused until your jobs there end or 2026-12-01"), "{message}");
        // Another member's jobs count for the pool's balance, not toward this member's limit.
        snap.queue.as_mut().unwrap().pool_user_committed.remove(&("course".into(), user));
        assert_eq!(case(&snap, "course").decide(&Deprioritize::Nice(100)), Decision::Accept);
    }

    #[test]
    fn overdraft_is_worded_for_the_pool_and_decisions_rank_refusal_then_lower_priority() {
        let mut snap = snapshot();
        snap.pools.get_mut("course").unwrap().balance = Tokens::whole(-3);
        let d = case(&snap, "course").decide(&Deprioritize::Nice(100));
        let Decision::AcceptDeprioritized { message, .. } = &d else { panic!("{d:?}") };
        assert!(message.starts_with("gputokens: account course's GPU token balance is -3 (below 0)"), "{message}");
        assert!(message.ends_with("Run 'sbalance -A course' for details."), "{message}");
        let refuse = Decision::Reject { message: "no".into() };
        assert!(is_worse(&refuse, &d) && !is_worse(&d, &refuse), "a refusal is worse than lower priority");
        assert!(is_worse(&d, &Decision::Accept) && !is_worse(&Decision::Accept, &d));
        assert!(!is_worse(&d, &d.clone()), "a tie is not worse");
    }
}
