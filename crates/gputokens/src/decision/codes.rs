//! What programs read of a refusal or a deprioritization: a stable code, and when the job would pass
//! per GPU type, as a tail on the message the submitter sees:
//!
//! ```text
//! ... Run 'sbalance' for details. [gputokens code=floor retry_after=*:52380]
//! ... [gputokens code=estimate retry_after=a6000:139380,rtx2080:0,rtx3090:52380]
//! ```
//!
//! `retry_after` is seconds from the decision, by replenishment alone (running jobs that finish
//! sooner may let a job through sooner); `*` stands for every GPU type; `0`: that type would pass
//! now. A refusal that waiting does not mend (a time limit, too many GPUs) has no `retry_after`.
//! docs/workflows.md documents the codes for workflow tools; their names never change.

use std::fmt;

use chrono::NaiveDate;

use crate::time::local_midnight;

/// Why a job was refused or deprioritized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The balance is at or below the floor.
    Floor,
    /// Accepted with lower priority: the balance is below 0.
    Overdraft,
    /// `mode = "estimate"`: the job's most could take the balance below the floor.
    Estimate,
    /// `max_gpus_per_user`.
    GpuLimit,
    /// `max_job_duration`.
    TimeLimit,
    /// More GPUs or time than gputokens counts.
    TooLarge,
    /// The balances cannot be read (`on_error = "reject"`).
    Unavailable,
    /// An account pool at or below its floor.
    PoolFloor,
    /// The member spent their per-user limit of the pool this month.
    PoolLimit,
    /// An update would undo the overdraft penalty.
    PenaltyKept,
    /// An update of a job submitted after the queue was last read.
    UnknownJob,
    /// A dated sub-allocation before its start or after its end.
    AllocationClosed,
    /// `[lending]`: an interactive job of a payer in debt (a borrowed run must be a batch job).
    Borrowed,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Floor => "floor",
            Code::Overdraft => "overdraft",
            Code::Estimate => "estimate",
            Code::GpuLimit => "gpu_limit",
            Code::TimeLimit => "time_limit",
            Code::TooLarge => "too_large",
            Code::Unavailable => "unavailable",
            Code::PoolFloor => "pool_floor",
            Code::PoolLimit => "pool_limit",
            Code::PenaltyKept => "penalty_kept",
            Code::UnknownJob => "unknown_job",
            Code::AllocationClosed => "allocation_closed",
            Code::Borrowed => "borrowed",
        }
    }
}

/// Every GPU type, in `retry_after`.
pub const ANY_TYPE: &str = "*";

/// How long after a local midnight a retry waits for that day's replenishment where the check
/// interval is not known (sbalance): accountd's first cycle of the day adds it and rewrites the
/// snapshot, within one check interval (30 minutes by default) and a minute.
pub const REPLENISHED_WITHIN: i64 = 31 * 60;

/// How long after a local midnight that day's replenishment is in the snapshot, for a check
/// interval of `check_seconds`.
pub fn replenished_within(check_seconds: u64) -> i64 {
    i64::try_from(check_seconds).unwrap_or(i64::MAX / 2).saturating_add(60)
}

/// How long a retry waits when the balances cannot be read, and at least for anything refused
/// now: a client never retries in a tight loop.
pub const UNAVAILABLE_RETRY: u64 = 60;

/// The tail of a message: its code and when each GPU type would pass (empty: waiting does not help).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub code: Code,
    pub retry_after: Vec<(String, u64)>,
}

impl Tail {
    pub fn of(code: Code) -> Tail {
        Tail { code, retry_after: Vec::new() }
    }

    /// Every GPU type after `seconds`.
    pub fn any_type_after(code: Code, seconds: Option<u64>) -> Tail {
        Tail { code, retry_after: seconds.map(|s| vec![(ANY_TYPE.to_string(), s)]).unwrap_or_default() }
    }

    /// This tail, waiting also for `other` (a second balance that refuses the same job): each type
    /// passes once both have passed; never (no `retry_after`) where either never does.
    pub fn waiting_also_for(mut self, other: &Tail) -> Tail {
        let after = |tail: &Tail, gpu_type: &str| {
            let named = tail.retry_after.iter().find(|(t, _)| t == gpu_type);
            named.or_else(|| tail.retry_after.iter().find(|(t, _)| t == ANY_TYPE)).map(|(_, seconds)| *seconds)
        };
        // Each type either names (or both give for every type), where both say when it passes.
        let mut types: Vec<&str> = self.retry_after.iter().chain(&other.retry_after).map(|(t, _)| t.as_str()).collect();
        types.sort_unstable();
        types.dedup();
        let waits =
            types.into_iter().filter_map(|t| Some((t.to_string(), after(&self, t)?.max(after(other, t)?)))).collect();
        self.retry_after = waits;
        self
    }

    /// `message` with the tail on its last line.
    pub fn appended_to(&self, message: &str) -> String {
        format!("{message} {self}")
    }
}

impl fmt::Display for Tail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[gputokens code={}", self.code.as_str())?;
        for (i, (gpu_type, seconds)) in self.retry_after.iter().enumerate() {
            let lead = if i == 0 { " retry_after=" } else { "," };
            write!(f, "{lead}{gpu_type}:{seconds}")?;
        }
        f.write_str("]")
    }
}

/// When `day`'s replenishment is in the snapshot (unix): its local midnight and `within`.
pub fn replenished_at(day: NaiveDate, within: i64) -> i64 {
    local_midnight(day).saturating_add(within)
}

/// Seconds from `now` until `day`'s replenishment is in the snapshot ([`replenished_at`]), at least
/// [`UNAVAILABLE_RETRY`]: it is asked for something refused now.
pub fn seconds_until_replenished(day: NaiveDate, now: i64, within: i64) -> u64 {
    (replenished_at(day, within) - now).max(UNAVAILABLE_RETRY as i64) as u64
}

/// The code and `retry_after` of a message's tail, as a program reads them; None without one.
pub fn parse(message: &str) -> Option<(String, Vec<(String, u64)>)> {
    let start = message.rfind("[gputokens code=")?;
    let tail = message[start + 1..].split(']').next()?;
    let mut fields = tail.split_whitespace().skip(1);
    let code = fields.next()?.strip_prefix("code=")?.to_string();
    let retry = match fields.next().and_then(|f| f.strip_prefix("retry_after=")) {
        Some(list) => list
            .split(',')
            .map(|entry| {
                let (gpu_type, seconds) = entry.rsplit_once(':')?;
                Some((gpu_type.to_string(), seconds.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?,
        None => Vec::new(),
    };
    Some((code, retry))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two balances refuse a job: each type passes once both say it does.
    #[test]
    fn a_wait_for_two_balances_is_the_later_of_each_type() {
        let tail = |waits: &[(&str, u64)]| Tail {
            code: Code::Floor,
            retry_after: waits.iter().map(|(t, s)| (t.to_string(), *s)).collect(),
        };
        let waits = |a: Tail, b: &Tail| a.waiting_also_for(b).retry_after;
        let pair = |t: &str, s: u64| (t.to_string(), s);
        assert_eq!(waits(tail(&[("*", 100)]), &tail(&[("*", 300)])), [pair("*", 300)]);
        assert_eq!(
            waits(tail(&[("*", 100)]), &tail(&[("a6000", 50), ("rtx2080", 500)])),
            [pair("a6000", 100), pair("rtx2080", 500)]
        );
        assert_eq!(waits(tail(&[("a6000", 50)]), &tail(&[("rtx2080", 500)])), []);
        assert_eq!(waits(tail(&[("*", 100)]), &tail(&[])), [], "the other never recovers by waiting");
    }

    #[test]
    fn a_tail_is_written_and_read_back() {
        let tail = Tail {
            code: Code::Estimate,
            retry_after: vec![("a6000".into(), 139_380), ("rtx2080".into(), 0), ("a100_3g.20gb".into(), 5)],
        };
        let message = tail.appended_to("gputokens: this job can cost up to 12 tokens.");
        assert_eq!(
            message,
            "gputokens: this job can cost up to 12 tokens. [gputokens code=estimate \
             retry_after=a6000:139380,rtx2080:0,a100_3g.20gb:5]"
        );
        assert_eq!(parse(&message), Some(("estimate".to_string(), tail.retry_after)));
        let plain = Tail::of(Code::TimeLimit).appended_to("no.");
        assert_eq!(plain, "no. [gputokens code=time_limit]");
        assert_eq!(parse(&plain), Some(("time_limit".to_string(), vec![])));
        assert_eq!(parse("gputokens: nothing to read"), None);
    }

    #[test]
    fn a_retry_waits_for_the_days_replenishment() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 8).unwrap();
        let midnight = local_midnight(day);
        let within = replenished_within(1800);
        assert_eq!(within, 1860, "a check interval of 30 minutes, and a minute");
        assert_eq!(seconds_until_replenished(day, midnight - 3600, within), 3600 + 1860);
        assert_eq!(seconds_until_replenished(day, midnight + 3600, within), 60, "past: a minute, never a spin");
    }
}
