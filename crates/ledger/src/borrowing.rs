//! Borrowing against next month's grant, and small debts forgiven at the month's turn (a site's
//! `borrow_limit` and `forgive_below`). A user borrows for themselves (`sbalance --borrow N`): an
//! entry of +N now, keyed `grant:borrow:USER:MONTH:K` by the month whose grant repays it; on that
//! month's 1st, after its grant, one entry takes back what was borrowed against it
//! (`repay:USER:MONTH`). Then a debt smaller than `forgive_below` is forgiven
//! (`adjust:forgive:USER:MONTH`). Both are journaled, under keys that `accountd admin grant|adjust
//! --key` stores again as they are (it prefixes the kind), so a restored ledger replays each once
//! and still finds what was borrowed.

use chrono::{Datelike, NaiveDate};

use crate::db::{params, Transaction};
use gputokens::entry::{Entry, EntryKind};
use gputokens::policy::Borrowing;
use gputokens::time::{local_date, local_midnight};
use gputokens::tokens::Tokens;

use super::accounts::{ensure_user, insert_entry, Applied, NewEntry};
use super::journal::Journaled;
use super::{Ledger, LedgerError};

/// `YYYY-MM` of the month after `day`'s.
fn next_month(day: NaiveDate) -> String {
    let (year, month) = if day.month() == 12 { (day.year() + 1, 1) } else { (day.year(), day.month() + 1) };
    format!("{year:04}-{month:02}")
}

/// The key prefix of what `user` borrows against `month`'s grant.
fn borrow_prefix(user: &str, month: &str) -> String {
    format!("grant:borrow:{user}:{month}:")
}

/// What `user` borrowed against `month`'s grant (`YYYY-MM`), in micro-tokens, and in how many
/// entries.
fn borrowed_in(tx: &Transaction<'_>, user: &str, month: &str) -> Result<(i64, i64), LedgerError> {
    let from = borrow_prefix(user, month);
    let to = format!("{};", from.trim_end_matches(':'));
    Ok(tx
        .prepare_cached(
            "SELECT COALESCE(SUM(e.amount), 0), COUNT(*) FROM entry_keys k JOIN entries e ON e.id = k.entry_id
             WHERE k.key >= ?1 AND k.key < ?2",
        )?
        .query_row(params![from, to], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

impl Ledger {
    /// What users may borrow, and which debts the month's turn forgives.
    pub fn set_borrowing(&mut self, borrowing: Borrowing) {
        self.borrowing = borrowing;
    }

    /// `user` borrows `amount` against next month's grant, within the site's limit (at most that
    /// grant) less what they borrowed against it already. Returns the entry.
    pub fn borrow(&mut self, user: &str, amount: Tokens, now: i64) -> Result<Entry, LedgerError> {
        let limit = self.borrowing.limit.min(self.rules.monthly);
        if limit <= Tokens::ZERO {
            return Err(LedgerError::Refused(match self.borrowing.limit > Tokens::ZERO {
                true => "there is no monthly grant to borrow against here".into(),
                false => "this site lets no one borrow against next month's grant (borrow_limit is 0)".into(),
            }));
        }
        if amount <= Tokens::ZERO {
            return Err(LedgerError::Refused(format!("borrow a positive amount (got {amount})")));
        }
        let month = next_month(local_date(now));
        let tx = self.conn.transaction()?;
        ensure_user(&tx, &self.rules, user, now)?;
        let (borrowed, count) = borrowed_in(&tx, user, &month)?;
        let borrowed = Tokens::from_micro(borrowed);
        let left = (limit - borrowed).max(Tokens::ZERO);
        if amount > left {
            return Err(LedgerError::Refused(format!(
                "you may borrow at most {limit} tokens against the grant of {month}; you have borrowed {borrowed}, \
                 so {left} more at most ({amount} asked)"
            )));
        }
        let reason = format!("borrowed against the monthly grant of {month}, which repays it on {month}-01");
        let key = format!("{}{}", borrow_prefix(user, &month), count + 1);
        let entry =
            NewEntry::new(user, EntryKind::Grant, amount, now, user, &reason, key).journaled(Journaled::AsItsKind);
        if insert_entry(&tx, &entry)? != Applied::Added {
            return Err(LedgerError::Refused("this borrowing was recorded already".into()));
        }
        let id: i64 = tx.query_row("SELECT MAX(id) FROM entries WHERE user = ?1", params![user], |r| r.get(0))?;
        tx.commit()?;
        self.entries_by_id(&[id])?
            .pop()
            .ok_or_else(|| LedgerError::Damaged("the borrowing just written is gone".into()))
    }
}

/// On `day` (a 1st), after its grant: `user` repays what they borrowed against it, then a debt
/// under `forgive_below` is forgiven. Returns the balance after.
pub(crate) fn settle_month(
    tx: &Transaction<'_>,
    user: &str,
    borrowing: &Borrowing,
    day: NaiveDate,
    mut balance: Tokens,
) -> Result<Tokens, LedgerError> {
    let month = day.format("%Y-%m").to_string();
    let at = local_midnight(day);
    let (borrowed, _) = borrowed_in(tx, user, &month)?;
    if borrowed > 0 {
        let owed = Tokens::from_micro(borrowed);
        let reason = format!("repays the {owed} tokens borrowed against this month's grant");
        let entry =
            NewEntry::new(user, EntryKind::Adjust, -owed, at, "gputokens", &reason, format!("repay:{user}:{month}"));
        if insert_entry(tx, &entry)? == Applied::Added {
            balance = balance - owed;
        }
    }
    let forgive = borrowing.forgive_below;
    if forgive > Tokens::ZERO && balance < Tokens::ZERO && -balance < forgive {
        let debt = -balance;
        let reason = format!("a debt of {debt} forgiven at the month's turn (under {forgive})");
        let entry = NewEntry::new(
            user,
            EntryKind::Adjust,
            debt,
            at,
            "gputokens",
            &reason,
            format!("adjust:forgive:{user}:{month}"),
        )
        .journaled(Journaled::AsItsKind);
        if insert_entry(tx, &entry)? == Applied::Added {
            balance = Tokens::ZERO;
        }
    }
    Ok(balance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::policy::BucketRules;
    use gputokens::time::parse_timestamp;

    fn at(text: &str) -> i64 {
        parse_timestamp(text).unwrap()
    }

    fn ledger(dir: &tempfile::TempDir, limit: i64, forgive: i64) -> Ledger {
        let rules = BucketRules { initial: Tokens::whole(-8), ..BucketRules::default() };
        let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), rules).unwrap();
        l.set_borrowing(Borrowing { limit: Tokens::whole(limit), forgive_below: Tokens::whole(forgive) });
        l
    }

    fn balance(l: &Ledger, user: &str) -> Tokens {
        l.account(user).unwrap().unwrap().balance
    }

    /// alice (at -8, floor -10) borrows 6 then 4 against January's 30 within a limit of 10, is
    /// refused a third, and on 1 January repays 10 from the grant, each once however often the
    /// month's turn is replenished.
    #[test]
    fn a_user_borrows_within_the_limit_and_repays_from_next_months_grant() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = ledger(&dir, 10, 0);
        let now = at("2026-12-07T12:00:00");
        l.replenish(now).unwrap();
        let first = l.borrow("alice", Tokens::whole(6), now).unwrap();
        assert_eq!((first.amount, first.actor.as_str()), (Tokens::whole(6), "alice"));
        assert_eq!(first.reason, "borrowed against the monthly grant of 2027-01, which repays it on 2027-01-01");
        l.borrow("alice", Tokens::whole(4), now + 60).unwrap();
        assert_eq!(balance(&l, "alice"), Tokens::whole(2));
        let past = l.borrow("alice", Tokens::from_micro(1), now + 120).unwrap_err().to_string();
        assert!(
            past.contains("at most 10 tokens against the grant of 2027-01; you have borrowed 10, so 0 more"),
            "{past}"
        );
        assert!(l.borrow("alice", Tokens::ZERO, now).is_err(), "nothing to borrow");
        let marked: Vec<String> = l.pending_journal().unwrap().into_iter().filter_map(|p| p.entry.key).collect();
        assert_eq!(marked, ["grant:borrow:alice:2027-01:1", "grant:borrow:alice:2027-01:2"], "journaled");
        // 24 days of +1 to the 31st, then on the 1st +1, +30 and the 10 repaid.
        // Once, however the passes fall: the next day's repays nothing more.
        l.replenish(at("2027-01-01T00:10:00")).unwrap();
        l.replenish(at("2027-01-02T00:10:00")).unwrap();
        assert_eq!(balance(&l, "alice"), Tokens::whole(2 + 24 + 1 + 30 - 10 + 1));
        let repaid = l.history("alice").unwrap().into_iter().find(|e| e.key.as_deref() == Some("repay:alice:2027-01"));
        assert_eq!(repaid.map(|e| e.amount), Some(Tokens::whole(-10)));
        // January's borrowing is against February's grant, the limit whole again.
        l.borrow("alice", Tokens::whole(10), at("2027-01-02T09:00:00")).unwrap();
        assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
    }

    #[test]
    fn a_site_without_borrowing_or_a_monthly_grant_refuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = ledger(&dir, 0, 0);
        let refused = l.borrow("alice", Tokens::whole(1), at("2026-12-07T12:00:00")).unwrap_err().to_string();
        assert!(refused.contains("borrow_limit is 0"), "{refused}");
        let rules = BucketRules { monthly: Tokens::ZERO, ..BucketRules::default() };
        let mut no_grant = crate::testdb::open(&dir.path().join("no-grant.sqlite"), rules).unwrap();
        no_grant.set_borrowing(Borrowing { limit: Tokens::whole(10), forgive_below: Tokens::ZERO });
        let refused = no_grant.borrow("alice", Tokens::whole(1), at("2026-12-07T12:00:00")).unwrap_err().to_string();
        assert!(refused.contains("no monthly grant to borrow against"), "{refused}");
    }

    /// At the month's turn a debt under `forgive_below` (after the grant) is forgiven, journaled; a
    /// larger one stays.
    #[test]
    fn small_debts_are_forgiven_at_the_months_turn() {
        let dir = tempfile::tempdir().unwrap();
        let rules = BucketRules { initial: Tokens::whole(-40), daily: Tokens::ZERO, ..BucketRules::default() };
        let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), rules).unwrap();
        l.set_borrowing(Borrowing { limit: Tokens::ZERO, forgive_below: Tokens::whole(5) });
        let now = at("2026-12-07T12:00:00");
        l.ensure_user("small", now).unwrap();
        l.ensure_user("large", now).unwrap();
        l.append(&NewEntry::new("small", EntryKind::Adjust, Tokens::whole(7), now, "root", "t", "t:small".into()))
            .unwrap();
        l.replenish(at("2027-01-01T00:10:00")).unwrap();
        assert_eq!(balance(&l, "small"), Tokens::ZERO, "-40 + 7 + 30 = -3, forgiven");
        assert_eq!(balance(&l, "large"), Tokens::whole(-10), "-40 + 30: not under 5");
        let forgiven =
            l.history("small").unwrap().into_iter().find(|e| e.key.as_deref() == Some("adjust:forgive:small:2027-01"));
        assert_eq!(
            forgiven.map(|e| (e.amount, e.reason)),
            Some((Tokens::whole(3), "a debt of 3 forgiven at the month's turn (under 5)".to_string()))
        );
        assert!(l
            .pending_journal()
            .unwrap()
            .iter()
            .any(|p| p.entry.key.as_deref() == Some("adjust:forgive:small:2027-01")));
    }
}
