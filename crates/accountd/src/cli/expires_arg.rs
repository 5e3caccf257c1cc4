//! `--expires WHEN` of `accountd admin grant` and `admin account grant`: when what is left of the
//! grant expires. A duration from now (`30d`, `2m`), a time (RFC 3339 or local
//! `YYYY-MM-DDTHH:MM:SS`), or a day (`YYYY-MM-DD`: at its end, the next local midnight).

use chrono::NaiveDate;

use crate::error::{AccountdError, AccountdResult};

pub fn resolve(text: &str, now: i64) -> AccountdResult<i64> {
    let when = moment(text, now, true);
    let when = when.ok_or_else(|| {
        AccountdError::Refused(format!(
            "--expires '{text}' is neither a duration (30d, 2m), a time (2026-12-31T18:00:00) nor a day (2026-12-31)"
        ))
    })?;
    if when <= now {
        return Err(AccountdError::Refused(format!(
            "--expires {} has passed: a grant's end must come after it is made",
            gputokens::time::format_local(when)
        )));
    }
    Ok(when)
}

/// `text` as a moment: a duration from `now`, a time, or a day (its end where `day_end`, else its
/// start); `now` itself for "now".
pub fn moment(text: &str, now: i64, day_end: bool) -> Option<i64> {
    if text == "now" {
        Some(now)
    } else if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if day_end { day.succ_opt() } else { Some(day) }.map(gputokens::time::local_midnight)
    } else if let Some(at) = gputokens::time::parse_timestamp(text) {
        Some(at)
    } else {
        humantime::parse_duration(text).ok().and_then(|d| now.checked_add(i64::try_from(d.as_secs()).ok()?))
    }
}

/// `--from` and `--until` of `accountd admin account allocate`: a sub-allocation's window. `--from`
/// a day is its start, `--until` a day its end (the next local midnight); either may be a time or
/// a duration from now, `--from` also "now".
pub fn window(from: &str, until: &str, now: i64) -> AccountdResult<(i64, i64)> {
    let bad = |flag: &str, text: &str| {
        AccountdError::Refused(format!(
            "{flag} '{text}' is neither a duration (30d, 2m), a time (2026-12-31T18:00:00) nor a day (2026-12-31)"
        ))
    };
    let starts = moment(from, now, false).ok_or_else(|| bad("--from", from))?;
    let ends = moment(until, now, true).ok_or_else(|| bad("--until", until))?;
    if ends <= starts {
        return Err(AccountdError::Refused(format!(
            "--until {} is not after --from {}",
            gputokens::time::format_local(ends),
            gputokens::time::format_local(starts)
        )));
    }
    Ok((starts, ends))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_from_the_start_of_a_day_until_the_end_of_another() {
        let now = gputokens::time::parse_timestamp("2026-11-26T10:00:00").unwrap();
        let day = |d: &str| gputokens::time::parse_timestamp(&format!("{d}T00:00:00")).unwrap();
        assert_eq!(window("2026-12-01", "2026-12-15", now).unwrap(), (day("2026-12-01"), day("2026-12-16")));
        assert_eq!(window("now", "2h", now).unwrap(), (now, now + 7200));
        assert!(window("2026-12-15", "2026-12-01", now).is_err(), "ends before it starts");
        assert!(window("soon", "2h", now).unwrap_err().to_string().contains("--from 'soon'"));
    }

    #[test]
    fn a_duration_a_time_or_the_end_of_a_day() {
        let now = gputokens::time::parse_timestamp("2026-11-26T10:00:00").unwrap();
        assert_eq!(resolve("2m", now).unwrap(), now + 120);
        assert_eq!(resolve("30d", now).unwrap(), now + 30 * 86400);
        assert_eq!(resolve("2026-11-26T18:00:00", now).unwrap(), now + 8 * 3600);
        assert_eq!(
            resolve("2026-11-26", now).unwrap(),
            gputokens::time::parse_timestamp("2026-11-27T00:00:00").unwrap()
        );
        assert!(resolve("2026-11-25", now).unwrap_err().to_string().contains("has passed"));
        assert!(resolve("soon", now).unwrap_err().to_string().contains("neither a duration"));
    }
}
