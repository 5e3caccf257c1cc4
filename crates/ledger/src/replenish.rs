//! Daily and monthly replenishment, one idempotent entry per user and date.

use crate::db::params;

use super::accounts::{insert_entry, Applied, NewEntry};
use super::{EntryKind, Ledger, LedgerError};
use gputokens::time::{local_date, local_midnight};
use gputokens::tokens::Tokens;

/// What one replenishment pass added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replenished {
    pub entries: usize,
    pub tokens: Tokens,
    /// Balances whose replenishment failed and was left for the next pass (the others' went on).
    pub failed: usize,
    /// Why each failed: the holder and the error.
    pub failures: Vec<(String, String)>,
}

impl Ledger {
    /// Adds `daily` for every whole local day since each user's last replenishment and `monthly` for
    /// every 1st among them, capped. Keys are `daily:USER:DATE` and `monthly:USER:YYYY-MM`, so a second
    /// pass, or a pass after a crash, adds nothing twice. A capped day is still recorded (amount 0), so
    /// a later charge does not make it due again.
    pub fn replenish(&mut self, now: i64) -> Result<Replenished, LedgerError> {
        let today = local_date(now);
        let user_rules = self.rules;
        let borrowing = self.borrowing;
        let pool_rules = super::pools::pool_rules(&self.conn)?;
        let tx = self.conn.transaction()?;
        let due: Vec<(String, String, i64)> = {
            let mut stmt =
                tx.prepare("SELECT name, replenished_through, balance FROM users WHERE replenished_through < ?1")?;
            let rows = stmt.query_map([today.to_string()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut done = Replenished::default();
        for (user, through, balance) in due {
            let rules = pool_rules.get(&user).unwrap_or(&user_rules);
            let Ok(date) = through.parse::<chrono::NaiveDate>() else { continue };
            // Each balance in a savepoint of its own: one that cannot be replenished (a balance at
            // the edge of the range) is rolled back and named, and the others are still replenished.
            tx.execute_batch("SAVEPOINT holder")?;
            let mut added = Replenished::default();
            // Borrowing and forgiveness are users' own (pools have their coordinators).
            let borrowing = match gputokens::pools::account_of(&user) {
                Some(_) => None,
                None => Some(&borrowing),
            };
            match replenish_one(&tx, &user, (rules, borrowing), Tokens::from_micro(balance), (date, today), &mut added)
            {
                Ok(()) => {
                    tx.execute_batch("RELEASE SAVEPOINT holder")?;
                    done.entries += added.entries;
                    done.tokens = done.tokens + added.tokens;
                }
                Err(e) => {
                    tx.execute_batch("ROLLBACK TO SAVEPOINT holder; RELEASE SAVEPOINT holder")?;
                    done.failed += 1;
                    done.failures.push((user, e.to_string()));
                }
            }
        }
        tx.commit()?;
        Ok(done)
    }
}

/// Replenishes `user` from the day after `date` through `today`, counting into `done`; on each 1st
/// a user (`borrowing`) repays what they borrowed against its grant and may be forgiven a small debt.
fn replenish_one(
    tx: &crate::db::Transaction<'_>,
    user: &str,
    (rules, borrowing): (&gputokens::policy::BucketRules, Option<&gputokens::policy::Borrowing>),
    mut balance: Tokens,
    (mut date, today): (chrono::NaiveDate, chrono::NaiveDate),
    done: &mut Replenished,
) -> Result<(), LedgerError> {
    while date < today {
        date = date.succ_opt().unwrap_or(today);
        let at = local_midnight(date);
        let grants = [
            (EntryKind::Replenish, rules.daily, format!("daily:{user}:{date}"), "daily replenishment"),
            (
                EntryKind::Monthly,
                if chrono::Datelike::day(&date) == 1 { rules.monthly } else { Tokens::ZERO },
                format!("monthly:{user}:{}", date.format("%Y-%m")),
                "monthly grant",
            ),
        ];
        for (kind, amount, key, reason) in grants {
            if amount == Tokens::ZERO {
                continue;
            }
            let capped = rules.capped(balance, amount);
            let reason = if capped < amount { format!("{reason} (capped)") } else { reason.to_string() };
            let entry = NewEntry::new(user, kind, capped, at, "gputokens", &reason, key);
            if insert_entry(tx, &entry)? == Applied::Added {
                balance = balance + capped;
                done.entries += 1;
                done.tokens = done.tokens + capped;
            }
        }
        if let (Some(borrowing), 1) = (borrowing, chrono::Datelike::day(&date)) {
            balance = super::borrowing::settle_month(tx, user, borrowing, date, balance)?;
        }
    }
    tx.execute("UPDATE users SET replenished_through = ?2 WHERE name = ?1", params![user, today.to_string()])?;
    Ok(())
}
