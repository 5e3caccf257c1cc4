//! The burn-rate forecast of the status page: at the rate of the last days (charges net of
//! grants and replenishment), when a user's balance reaches the floor.

use crate::tokens::Tokens;

/// How far back the rate is measured.
pub const WINDOW_DAYS: i64 = 7;

/// The instant the balance reaches `floor` at the rate it changed over the last [`WINDOW_DAYS`],
/// or None when it is not falling (or is at the floor already, or nothing is known of the window).
/// `history` is (time, balance after) of the user's entries, oldest first; `balance` is now's.
pub fn floor_reached(history: &[(i64, Tokens)], balance: Tokens, floor: Tokens, now: i64) -> Option<i64> {
    let start = now - WINDOW_DAYS * 86_400;
    // The balance at the window's start: after the last entry before it, or, for a user first seen
    // inside it, the first balance known (measured over the shorter time since).
    let (from, then) = match history.iter().rev().find(|(at, _)| *at <= start) {
        Some(&(_, b)) => (start, b),
        None => *history.first()?,
    };
    let elapsed = now - from;
    let fallen = i128::from(then.micro()) - i128::from(balance.micro());
    if fallen <= 0 || elapsed <= 0 || balance <= floor {
        return None;
    }
    let left = i128::from(balance.micro()) - i128::from(floor.micro());
    let seconds = left * i128::from(elapsed) / fallen;
    i64::try_from(seconds).ok().and_then(|s| now.checked_add(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;
    const NOW: i64 = 1_795_000_000;

    #[test]
    fn falling_ten_a_day_from_fifty_reaches_minus_ten_in_six_days() {
        let history = [(NOW - 30 * DAY, Tokens::whole(100)), (NOW - 7 * DAY, Tokens::whole(120))];
        let at = floor_reached(&history, Tokens::whole(50), Tokens::whole(-10), NOW).unwrap();
        assert_eq!(at, NOW + 6 * DAY);
    }

    #[test]
    fn rising_flat_or_already_at_the_floor_has_no_forecast() {
        let history = [(NOW - 8 * DAY, Tokens::whole(40))];
        assert_eq!(floor_reached(&history, Tokens::whole(41), Tokens::whole(-10), NOW), None);
        assert_eq!(floor_reached(&history, Tokens::whole(40), Tokens::whole(-10), NOW), None);
        let fallen = [(NOW - 8 * DAY, Tokens::whole(0))];
        assert_eq!(floor_reached(&fallen, Tokens::whole(-10), Tokens::whole(-10), NOW), None);
        assert_eq!(floor_reached(&[], Tokens::whole(5), Tokens::whole(-10), NOW), None);
    }

    #[test]
    fn a_user_first_seen_inside_the_window_is_measured_since_then() {
        // 100 two days ago, 80 now: 10 a day, 90 left to -10: nine days.
        let history = [(NOW - 2 * DAY, Tokens::whole(100)), (NOW - DAY, Tokens::whole(90))];
        assert_eq!(floor_reached(&history, Tokens::whole(80), Tokens::whole(-10), NOW), Some(NOW + 9 * DAY));
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let history = [(i64::MIN / 2, Tokens::from_micro(i64::MAX))];
        assert_eq!(floor_reached(&history, Tokens::from_micro(i64::MAX - 1), Tokens::from_micro(i64::MIN), 0), None);
        let history = [(NOW - 8 * DAY, Tokens::from_micro(i64::MAX))];
        assert!(floor_reached(&history, Tokens::from_micro(-1), Tokens::from_micro(i64::MIN), NOW).is_some());
    }
}
