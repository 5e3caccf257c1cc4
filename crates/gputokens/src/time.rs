//! Local dates and timestamps: replenishment follows the cluster's local midnight.

use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, TimeZone};

pub fn now() -> i64 {
    Local::now().timestamp()
}

/// The wall clock in unix milliseconds.
pub fn now_ms() -> i64 {
    Local::now().timestamp_millis()
}

/// A span of seconds as people read it: `5s`, `2h 2m` (whole minutes from an hour on); 0 below 0.
pub fn span(seconds: i64) -> String {
    let seconds = seconds.max(0) as u64;
    let rounded = if seconds >= 3600 { seconds - seconds % 60 } else { seconds };
    humantime::format_duration(std::time::Duration::from_secs(rounded)).to_string()
}

/// The local calendar date of a unix timestamp.
pub fn local_date(ts: i64) -> NaiveDate {
    Local.timestamp_opt(ts, 0).earliest().map(|t| t.date_naive()).unwrap_or_default()
}

/// Unix time of local midnight starting `date`.
pub fn local_midnight(date: NaiveDate) -> i64 {
    let naive = date.and_hms_opt(0, 0, 0).unwrap_or_default();
    Local.from_local_datetime(&naive).earliest().map(|t| t.timestamp()).unwrap_or_default()
}

/// Parses unix seconds (what Slurm prints with `SLURM_TIME_FORMAT=%s`), RFC 3339
/// (`2026-12-01T00:05:00Z`) or Slurm's local `2026-12-01T00:05:00` (in the repeated hour of a DST
/// change, the earlier of the two instants).
pub fn parse_timestamp(text: &str) -> Option<i64> {
    if !text.is_empty() && text.len() <= 12 && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp());
    }
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").ok()?;
    Local.from_local_datetime(&naive).earliest().map(|t| t.timestamp())
}

/// A local wall-clock time for Slurm's `-S` that no reading of puts after `ts`: Slurm takes local
/// times only, and in the repeated hour of a DST change the same text names two instants.
pub fn local_text_not_after(ts: i64) -> String {
    let mut at = ts;
    while latest_reading(&format_local(at)).is_some_and(|t| t > ts) {
        at -= 900;
    }
    format_local(at)
}

/// A local wall-clock time for Slurm's `-E` that no reading of puts before `ts`.
pub fn local_text_not_before(ts: i64) -> String {
    let mut at = ts;
    while earliest_reading(&format_local(at)).is_some_and(|t| t < ts) {
        at += 900;
    }
    format_local(at)
}

fn readings(text: &str) -> chrono::LocalResult<DateTime<Local>> {
    match NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
        Ok(naive) => Local.from_local_datetime(&naive),
        Err(_) => chrono::LocalResult::None,
    }
}

fn latest_reading(text: &str) -> Option<i64> {
    readings(text).latest().map(|t| t.timestamp())
}

fn earliest_reading(text: &str) -> Option<i64> {
    readings(text).earliest().map(|t| t.timestamp())
}

/// `2026-11-22T14:03:00+01:00`: local time with its offset, the same instant read anywhere.
pub fn format_rfc3339(ts: i64) -> String {
    Local.timestamp_opt(ts, 0).earliest().map(|t| t.to_rfc3339()).unwrap_or_default()
}

/// `2026-11-22 14:03:00` in local time, for tables.
pub fn format_local(ts: i64) -> String {
    Local.timestamp_opt(ts, 0).earliest().map(|t| t.format("%Y-%m-%dT%H:%M:%S").to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        assert_eq!(parse_timestamp("1970-01-01T00:01:00Z"), Some(60));
        let local = parse_timestamp("2026-11-22T10:00:00").unwrap();
        assert_eq!(format_local(local), "2026-11-22T10:00:00");
        assert_eq!(local_date(local), NaiveDate::from_ymd_opt(2026, 11, 22).unwrap());
        assert_eq!(local_midnight(local_date(local)), local - 10 * 3600);
        assert_eq!(parse_timestamp("Unknown"), None);
    }

    #[test]
    fn slurm_epoch_seconds() {
        assert_eq!(parse_timestamp("1795444368"), Some(1_795_444_368));
        assert_eq!(parse_timestamp("0"), Some(0));
        for bad in ["", "-5", "17954e4368", "1795444368 ", "9999999999999"] {
            assert_eq!(parse_timestamp(bad), None, "{bad:?}");
        }
    }

    /// Whatever the zone (the test cluster's is UTC; a site's may have DST), the texts bound the
    /// instant from the right side.
    #[test]
    fn window_texts_bound_the_instant() {
        for ts in [0, 1_795_444_368, 1_792_026_000, 1_806_883_200] {
            let start = local_text_not_after(ts);
            assert!(latest_reading(&start).unwrap() <= ts, "{start}");
            let end = local_text_not_before(ts);
            assert!(earliest_reading(&end).unwrap() >= ts, "{end}");
        }
    }
}
