//! The token-bucket rules: what a balance means and when it grows.

use chrono::{Datelike, Duration, NaiveDate};

use crate::tokens::Tokens;

/// How balances start, grow and bottom out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BucketRules {
    pub initial: Tokens,
    pub daily: Tokens,
    pub monthly: Tokens,
    pub cap: Option<Tokens>,
    pub floor: Tokens,
}

/// What a site lets users borrow against their next monthly grant, and the debts it forgives at
/// the month's turn. Zero turns each off (the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Borrowing {
    /// Tokens a user may borrow against next month's grant (never more than the grant).
    pub limit: Tokens,
    /// At the month's turn, after the grant and the repayment, a balance below 0 by less than
    /// this is raised to 0.
    pub forgive_below: Tokens,
}

/// The documented defaults: 100 to start, +1 a day, +30 on the 1st, no cap, floor −10.
impl Default for BucketRules {
    fn default() -> Self {
        BucketRules {
            initial: Tokens::whole(100),
            daily: Tokens::whole(1),
            monthly: Tokens::whole(30),
            cap: None,
            floor: Tokens::whole(-10),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Balance ≥ 0: GPU jobs run normally.
    Ok,
    /// floor < balance < 0: GPU jobs are accepted but deprioritized.
    Overdraft,
    /// balance ≤ floor: new GPU jobs are refused.
    Blocked,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Overdraft => "overdraft",
            Status::Blocked => "blocked",
        }
    }

    /// What the status means for the user's GPU jobs, the one wording of every surface (the SPANK line
    /// at sbatch and srun, `sbalance --json`, the status page): a clause without its full stop, to fit
    /// `blocked: GPU jobs …` as well as a sentence of its own. `floor` is the configured floor.
    pub fn explanation(self, floor: Tokens) -> String {
        match self {
            Status::Ok => "GPU jobs run normally".to_string(),
            Status::Overdraft => "GPU jobs are accepted at lower priority and may be preempted when others wait for \
                                  their GPUs, until the balance is 0 or more again"
                .to_string(),
            Status::Blocked => format!("GPU jobs are refused until the balance is above the floor {floor} again"),
        }
    }
}

/// A replenishment to come: `amount` tokens on `date`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextGrant {
    pub date: NaiveDate,
    pub amount: Tokens,
}

impl BucketRules {
    pub fn status(&self, balance: Tokens) -> Status {
        if balance <= self.floor {
            Status::Blocked
        } else if balance.is_negative() {
            Status::Overdraft
        } else {
            Status::Ok
        }
    }

    /// What replenishment adds on `date` (daily, plus monthly on the 1st), before the cap.
    pub fn grant_on(&self, date: NaiveDate) -> Tokens {
        let monthly = if date.day() == 1 { self.monthly } else { Tokens::ZERO };
        self.daily + monthly
    }

    /// `amount` reduced so that `balance` does not rise above the cap; never negative.
    pub fn capped(&self, balance: Tokens, amount: Tokens) -> Tokens {
        match self.cap {
            Some(cap) => amount.min(cap - balance).max(Tokens::ZERO),
            None => amount,
        }
    }

    /// The first replenishment after `today` that adds anything to `balance`, looking one month ahead.
    pub fn next_grant(&self, today: NaiveDate, balance: Tokens) -> Option<NextGrant> {
        (1..=31).map(|d| today + Duration::days(d)).find_map(|date| {
            let amount = self.capped(balance, self.grant_on(date));
            (amount > Tokens::ZERO).then_some(NextGrant { date, amount })
        })
    }

    /// Days of replenishment until a balance ≤ floor is above it again (ignoring new charges; the
    /// cap too, as it only limits replenishment above it).
    pub fn days_to_recover(&self, today: NaiveDate, balance: Tokens) -> Option<i64> {
        self.uncapped().day_reaching(today, balance, |b| b > self.floor).map(|day| (day - today).num_days())
    }

    /// These rules without a cap: how far below it a balance is, replenishment is never held back.
    fn uncapped(&self) -> BucketRules {
        BucketRules { cap: None, ..*self }
    }

    /// The first day after `today` on which replenishment alone (no new charges) has brought
    /// `balance` to where `reached` holds; None beyond ten years.
    pub fn day_reaching(
        &self,
        today: NaiveDate,
        balance: Tokens,
        reached: impl Fn(Tokens) -> bool,
    ) -> Option<NaiveDate> {
        let mut b = balance;
        (1..=3660).map(|d| today + Duration::days(d)).find(|&day| {
            b = b + self.capped(b, self.grant_on(day));
            reached(b)
        })
    }

    /// When a user in debt is back to normal: above the floor (GPU jobs accepted again) when
    /// blocked, at 0 or more (full priority again) in overdraft; None when not in debt. The cap is
    /// ignored: it only limits replenishment above it.
    pub fn recovers_on(&self, today: NaiveDate, balance: Tokens) -> Option<NaiveDate> {
        match self.status(balance) {
            Status::Blocked => self.uncapped().day_reaching(today, balance, |b| b > self.floor),
            Status::Overdraft => self.uncapped().day_reaching(today, balance, |b| !b.is_negative()),
            Status::Ok => None,
        }
    }

    /// How a balance in debt recovers by replenishment alone: `+1 token per day: about 3 days` (above
    /// the floor when at it, back to 0 in overdraft); None when nothing is ever added. The one wording
    /// of the refusal at the floor and of the notifications.
    pub fn recovery(&self, balance: Tokens, today: NaiveDate) -> Option<String> {
        let replenishment = self.replenishment()?;
        let when = match self.recovers_on(today, balance).map(|day| (day - today).num_days()) {
            Some(1) => "about 1 day".to_string(),
            Some(days) => format!("about {days} days"),
            None => "more than 10 years".to_string(),
        };
        Some(format!("{replenishment}: {when}"))
    }

    /// `+1 token per day`, `+1 token per day and +30 tokens on the 1st of each month`; None when
    /// nothing is ever added.
    fn replenishment(&self) -> Option<String> {
        let tokens = |t: Tokens| if t == Tokens::whole(1) { "token" } else { "tokens" };
        let daily = (self.daily > Tokens::ZERO).then(|| format!("+{} {} per day", self.daily, tokens(self.daily)));
        let monthly = (self.monthly > Tokens::ZERO)
            .then(|| format!("+{} {} on the 1st of each month", self.monthly, tokens(self.monthly)));
        match (daily, monthly) {
            (Some(d), Some(m)) => Some(format!("{d} and {m}")),
            (Some(one), None) | (None, Some(one)) => Some(one),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> BucketRules {
        BucketRules::default()
    }

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    #[test]
    fn status_thresholds() {
        let r = rules();
        assert_eq!(r.status(Tokens::ZERO), Status::Ok);
        assert_eq!(r.status(Tokens::from_micro(-1)), Status::Overdraft);
        assert_eq!(r.status(Tokens::from_micro(-9_999_999)), Status::Overdraft);
        assert_eq!(r.status(Tokens::whole(-10)), Status::Blocked);
        assert_eq!(r.status(Tokens::from_micro(-10_400_000)), Status::Blocked);
    }

    #[test]
    fn each_status_has_one_explanation() {
        let floor = Tokens::whole(-10);
        assert_eq!(Status::Ok.explanation(floor), "GPU jobs run normally");
        assert_eq!(
            Status::Overdraft.explanation(floor),
            "GPU jobs are accepted at lower priority and may be preempted when others wait for their GPUs, until the \
             balance is 0 or more again"
        );
        assert_eq!(
            Status::Blocked.explanation(Tokens::from_micro(-2_500_000)),
            "GPU jobs are refused until the balance is above the floor -2.5 again"
        );
    }

    #[test]
    fn monthly_comes_on_the_first() {
        let r = rules();
        assert_eq!(r.grant_on(date(2026, 12, 1)), Tokens::whole(31));
        assert_eq!(r.grant_on(date(2026, 12, 2)), Tokens::whole(1));
    }

    #[test]
    fn cap_limits_replenishment_only_upwards() {
        let r = BucketRules { cap: Some(Tokens::whole(120)), ..rules() };
        assert_eq!(r.capped(Tokens::whole(100), Tokens::whole(31)), Tokens::whole(20));
        assert_eq!(r.capped(Tokens::whole(130), Tokens::whole(1)), Tokens::ZERO);
        assert_eq!(r.next_grant(date(2026, 11, 22), Tokens::whole(120)), None);
    }

    #[test]
    fn next_grant_and_recovery() {
        let r = rules();
        assert_eq!(
            r.next_grant(date(2026, 11, 30), Tokens::ZERO),
            Some(NextGrant { date: date(2026, 12, 1), amount: Tokens::whole(31) })
        );
        assert_eq!(r.days_to_recover(date(2026, 11, 10), Tokens::from_micro(-10_400_000)), Some(1));
        assert_eq!(r.days_to_recover(date(2026, 11, 10), Tokens::whole(-12)), Some(3));
        let no_grants = BucketRules { daily: Tokens::ZERO, monthly: Tokens::ZERO, ..rules() };
        assert_eq!(no_grants.days_to_recover(date(2026, 11, 10), Tokens::whole(-12)), None);
    }

    #[test]
    fn debt_ends_on_the_day_replenishment_covers_it() {
        let r = BucketRules { cap: Some(Tokens::whole(5)), ..rules() };
        let today = date(2026, 11, 28);
        // Blocked at -10.4: the next daily token lifts it above the floor.
        assert_eq!(r.recovers_on(today, Tokens::from_micro(-10_400_000)), Some(date(2026, 11, 29)));
        // Overdraft at -5.4: six daily tokens, or the monthly 30 on the 1st, whichever comes first.
        assert_eq!(r.recovers_on(today, Tokens::from_micro(-5_400_000)), Some(date(2026, 12, 1)));
        let no_monthly = BucketRules { monthly: Tokens::ZERO, ..r };
        assert_eq!(no_monthly.recovers_on(today, Tokens::from_micro(-5_400_000)), Some(date(2026, 12, 4)));
        assert_eq!(r.recovers_on(today, Tokens::ZERO), None);
        let nothing = BucketRules { daily: Tokens::ZERO, monthly: Tokens::ZERO, ..r };
        assert_eq!(nothing.recovers_on(today, Tokens::whole(-3)), None, "no replenishment: never");
    }

    #[test]
    fn recovery_names_the_replenishment_and_the_days() {
        let today = date(2026, 11, 10);
        let r = rules();
        assert_eq!(
            r.recovery(Tokens::whole(-12), today).as_deref(),
            Some("+1 token per day and +30 tokens on the 1st of each month: about 3 days")
        );
        assert_eq!(
            r.recovery(Tokens::whole(-3), today).as_deref(),
            Some("+1 token per day and +30 tokens on the 1st of each month: about 3 days"),
            "overdraft: back to 0"
        );
        let half = BucketRules { daily: Tokens::from_micro(500_000), monthly: Tokens::ZERO, ..rules() };
        assert_eq!(half.recovery(Tokens::whole(-11), today).as_deref(), Some("+0.5 tokens per day: about 3 days"));
        let monthly_only = BucketRules { daily: Tokens::ZERO, ..rules() };
        assert_eq!(
            monthly_only.recovery(Tokens::whole(-10), today).as_deref(),
            Some("+30 tokens on the 1st of each month: about 21 days")
        );
        let tiny = BucketRules { daily: Tokens::from_micro(1), monthly: Tokens::ZERO, ..rules() };
        assert_eq!(
            tiny.recovery(Tokens::whole(-1000), today).as_deref(),
            Some("+0.000001 tokens per day: more than 10 years")
        );
        let nothing = BucketRules { daily: Tokens::ZERO, monthly: Tokens::ZERO, ..rules() };
        assert_eq!(nothing.recovery(Tokens::whole(-12), today), None);
    }
}
