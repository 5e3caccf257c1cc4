//! Local dates and timestamps: replenishment follows the cluster's local midnight.

use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, TimeZone};

pub fn now() -> i64 {
    Local::now().timestamp()
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

/// Parses RFC 3339 (`2026-12-01T00:05:00Z`) or Slurm's local `2026-12-01T00:05:00`.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp());
    }
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").ok()?;
    Local.from_local_datetime(&naive).earliest().map(|t| t.timestamp())
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
}
