//! A calendar month as a statement names it (`2026-11`), and the local instants it spans: the same
//! local midnights replenishment stamps its days with, so a month holds exactly its days' grants.

use std::fmt;
use std::str::FromStr;

use chrono::{Datelike, NaiveDate};

use crate::time::local_midnight;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    year: i32,
    month: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MonthError {
    #[error("'{0}' is not a month: expected YYYY-MM, e.g. 2026-11")]
    NotAMonth(String),
    #[error("'{text}' is not a month: there is no month {month} (01 to 12)")]
    NoSuchMonth { text: String, month: u32 },
}

impl Month {
    /// The month `date` falls in.
    pub fn of(date: NaiveDate) -> Month {
        Month { year: date.year(), month: date.month() }
    }

    pub fn first_day(self) -> NaiveDate {
        // Valid by construction: `parse` and `of` only make months chrono can date.
        NaiveDate::from_ymd_opt(self.year, self.month, 1).unwrap_or_default()
    }

    pub fn next(self) -> Month {
        match self.month {
            12 => Month { year: self.year + 1, month: 1 },
            m => Month { year: self.year, month: m + 1 },
        }
    }

    pub fn last_day(self) -> NaiveDate {
        self.next().first_day().pred_opt().unwrap_or_default()
    }

    /// Unix seconds of its first local instant and of the next month's: entries at `start <= at < end`
    /// belong to it.
    pub fn bounds(self) -> (i64, i64) {
        (local_midnight(self.first_day()), local_midnight(self.next().first_day()))
    }
}

impl FromStr for Month {
    type Err = MonthError;

    /// Exactly `YYYY-MM`: a statement is filed under its month, so no other spelling is guessed at.
    fn from_str(text: &str) -> Result<Month, MonthError> {
        let not_a_month = || MonthError::NotAMonth(text.to_string());
        let (year, month) = text.split_once('-').ok_or_else(not_a_month)?;
        let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(year, 4) || !digits(month, 2) {
            return Err(not_a_month());
        }
        let (year, month) = (year.parse().map_err(|_| not_a_month())?, month.parse().map_err(|_| not_a_month())?);
        if !(1..=12).contains(&month) {
            return Err(MonthError::NoSuchMonth { text: text.to_string(), month });
        }
        // chrono dates every four-digit year; the check keeps `first_day` honest if that changes.
        NaiveDate::from_ymd_opt(year, month, 1).ok_or_else(not_a_month)?;
        Ok(Month { year, month })
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format!("{:04}-{:02}", self.year, self.month))
    }
}

impl serde::Serialize for Month {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Month {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::local_date;

    #[test]
    fn parses_exactly_yyyy_mm() {
        let nov: Month = "2026-11".parse().unwrap();
        assert_eq!(nov.to_string(), "2026-11");
        assert_eq!(nov.first_day(), NaiveDate::from_ymd_opt(2026, 11, 1).unwrap());
        assert_eq!(nov.last_day(), NaiveDate::from_ymd_opt(2026, 11, 30).unwrap());
        assert_eq!("2026-12".parse::<Month>().unwrap().next().to_string(), "2027-01");
        assert_eq!(
            "2026-13".parse::<Month>().unwrap_err().to_string(),
            "'2026-13' is not a month: there is no month 13 (01 to 12)"
        );
        assert!(matches!("2026-00".parse::<Month>(), Err(MonthError::NoSuchMonth { month: 0, .. })));
        assert_eq!(
            "nov".parse::<Month>().unwrap_err().to_string(),
            "'nov' is not a month: expected YYYY-MM, e.g. 2026-11"
        );
        for bad in ["", "2026-1", "2026/11", "2026-11-01", "26-11", " 2026-11", "2026-+1", "２０２６-11"] {
            assert!(matches!(bad.parse::<Month>(), Err(MonthError::NotAMonth(_))), "{bad:?}");
        }
    }

    #[test]
    fn orders_by_time() {
        let m = |s: &str| s.parse::<Month>().unwrap();
        assert!(m("2026-12") < m("2027-01") && m("2026-02") < m("2026-11"));
        assert_eq!(Month::of(NaiveDate::from_ymd_opt(2026, 2, 28).unwrap()), m("2026-02"));
    }

    /// The bounds are local midnights: the 1st's instant is in, the next 1st's is out.
    #[test]
    fn bounds_are_the_local_days_of_the_month() {
        let feb: Month = "2028-02".parse().unwrap();
        let (start, end) = feb.bounds();
        assert_eq!(local_date(start), feb.first_day());
        assert_eq!(local_date(end - 1), NaiveDate::from_ymd_opt(2028, 2, 29).unwrap());
        assert_eq!(local_date(end), NaiveDate::from_ymd_opt(2028, 3, 1).unwrap());
    }

    #[test]
    fn travels_as_text() {
        let nov: Month = "2026-11".parse().unwrap();
        assert_eq!(serde_json::to_string(&nov).unwrap(), "\"2026-11\"");
        assert_eq!(serde_json::from_str::<Month>("\"2026-11\"").unwrap(), nov);
        assert!(serde_json::from_str::<Month>("\"2026-13\"").is_err());
    }
}
