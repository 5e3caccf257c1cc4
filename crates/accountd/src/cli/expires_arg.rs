//! `--expires WHEN` of `accountd admin grant` and `admin account grant`: when what is left of the
//! grant expires. A duration from now (`30d`, `2m`), a time (RFC 3339 or local
//! `YYYY-MM-DDTHH:MM:SS`), or a day (`YYYY-MM-DD`: at its end, the next local midnight).

use chrono::NaiveDate;

use crate::error::{AccountdError, AccountdResult};

pub fn resolve(text: &str, now: i64) -> AccountdResult<i64> {
    let when = if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        day.succ_opt().map(gputokens::time::local_midnight)
    } else if let Some(at) = gputokens::time::parse_timestamp(text) {
        Some(at)
    } else {
        humantime::parse_duration(text).ok().and_then(|d| now.checked_add(i64::try_from(d.as_secs()).ok()?))
    };
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

#[cfg(test)]
mod tests {
    use super::*;

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
