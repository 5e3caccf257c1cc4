//! The burn-rate forecast of the status page: at the rate a user spent on jobs over the last days,
//! when their balance reaches the floor. Only what jobs cost counts (charges, net of refunds):
//! an admin's adjustment or grant, an import, replenishment or a grant expiring is no spending,
//! so a one-off correction never predicts the floor.

use crate::entry::EntryKind;
use crate::tokens::Tokens;

/// How far back the rate is measured.
pub const WINDOW_DAYS: i64 = 7;

/// What the forecast reads of one ledger entry: its time, kind and signed amount (a charge is
/// negative, a refund positive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Movement {
    pub at: i64,
    pub kind: EntryKind,
    pub amount: Tokens,
}

/// The instant the balance reaches `floor` at the rate jobs spent over the last [`WINDOW_DAYS`],
/// or None when nothing was spent on jobs (or refunds gave it all back), the balance is at the
/// floor already, or nothing is known of the window. `entries` are the user's, oldest first;
/// `balance` is now's. A user first seen inside the window is measured over the shorter time since.
pub fn floor_reached(entries: &[Movement], balance: Tokens, floor: Tokens, now: i64) -> Option<i64> {
    let first_seen = entries.first()?.at;
    let from = first_seen.max(now - WINDOW_DAYS * 86_400);
    let elapsed = now - from;
    let spent: i128 = entries
        .iter()
        .filter(|e| e.at >= from && matches!(e.kind, EntryKind::Charge | EntryKind::Refund))
        .map(|e| -i128::from(e.amount.micro()))
        .sum();
    if spent <= 0 || elapsed <= 0 || balance <= floor {
        return None;
    }
    let left = i128::from(balance.micro()) - i128::from(floor.micro());
    let seconds = left * i128::from(elapsed) / spent;
    i64::try_from(seconds).ok().and_then(|s| now.checked_add(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;
    const NOW: i64 = 1_795_000_000;

    fn entry(days_ago: i64, kind: EntryKind, amount: &str) -> Movement {
        Movement { at: NOW - days_ago * DAY, kind, amount: amount.parse().unwrap() }
    }

    #[test]
    fn charges_of_ten_a_day_from_fifty_reach_minus_ten_in_six_days() {
        let mut entries = vec![entry(30, EntryKind::Import, "100")];
        // 70 charged over the 7 days, one charge a day; a replenishment between does not slow it.
        entries.extend((1..=7).map(|d| entry(d, EntryKind::Charge, "-10")).rev());
        entries.push(entry(3, EntryKind::Replenish, "1"));
        entries.sort_by_key(|e| e.at);
        let at = floor_reached(&entries, Tokens::whole(50), Tokens::whole(-10), NOW).unwrap();
        assert_eq!(at, NOW + 6 * DAY);
    }

    #[test]
    fn an_admins_adjustment_and_grant_are_no_spending() {
        // The review's case: alice, charged long ago, adjusted by -56.4 and granted +5 this week,
        // stands at -5.4 in overdraft. She ran no job in the window: no floor is forecast.
        let entries = [
            entry(40, EntryKind::Charge, "-84"),
            entry(2, EntryKind::Adjust, "-56.4"),
            entry(1, EntryKind::Grant, "5"),
        ];
        assert_eq!(floor_reached(&entries, "-5.4".parse().unwrap(), Tokens::whole(-10), NOW), None);
    }

    #[test]
    fn refunds_are_taken_off_what_jobs_spent() {
        // 28 charged, 14 of it refunded (a run lost to a failing GPU): 14 over 7 days, 2 a day;
        // 20 left above the floor: ten days.
        let entries =
            [entry(8, EntryKind::Import, "0"), entry(6, EntryKind::Charge, "-28"), entry(5, EntryKind::Refund, "14")];
        assert_eq!(floor_reached(&entries, Tokens::whole(10), Tokens::whole(-10), NOW), Some(NOW + 10 * DAY));
        let all_back =
            [entry(8, EntryKind::Import, "0"), entry(6, EntryKind::Charge, "-28"), entry(5, EntryKind::Refund, "28")];
        assert_eq!(floor_reached(&all_back, Tokens::whole(10), Tokens::whole(-10), NOW), None);
    }

    #[test]
    fn no_spending_or_already_at_the_floor_has_no_forecast() {
        let earned = [entry(8, EntryKind::Import, "40"), entry(2, EntryKind::Replenish, "1")];
        assert_eq!(floor_reached(&earned, Tokens::whole(41), Tokens::whole(-10), NOW), None);
        let old = [entry(9, EntryKind::Charge, "-10")];
        assert_eq!(floor_reached(&old, Tokens::whole(40), Tokens::whole(-10), NOW), None, "spent before the window");
        let spent = [entry(8, EntryKind::Import, "0"), entry(3, EntryKind::Charge, "-10")];
        assert_eq!(floor_reached(&spent, Tokens::whole(-10), Tokens::whole(-10), NOW), None);
        assert_eq!(floor_reached(&[], Tokens::whole(5), Tokens::whole(-10), NOW), None);
    }

    #[test]
    fn a_user_first_seen_inside_the_window_is_measured_since_then() {
        // 20 charged over the two days since first seen: 10 a day, 90 left to -10: nine days.
        let entries = [entry(2, EntryKind::Charge, "-10"), entry(1, EntryKind::Charge, "-10")];
        assert_eq!(floor_reached(&entries, Tokens::whole(80), Tokens::whole(-10), NOW), Some(NOW + 9 * DAY));
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let huge = [Movement { at: i64::MIN / 2, kind: EntryKind::Charge, amount: Tokens::from_micro(-1) }];
        assert_eq!(floor_reached(&huge, Tokens::from_micro(i64::MAX), Tokens::from_micro(i64::MIN), 0), None);
        let spent = [Movement { at: NOW - 8 * DAY, kind: EntryKind::Charge, amount: Tokens::from_micro(i64::MIN) }];
        let spent =
            [spent[0], Movement { at: NOW - DAY, kind: EntryKind::Charge, amount: Tokens::from_micro(i64::MIN) }];
        assert!(floor_reached(&spent, Tokens::from_micro(-1), Tokens::from_micro(i64::MIN), NOW).is_some());
    }
}
