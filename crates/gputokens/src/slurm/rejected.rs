//! Job records that cannot be charged: each is left out alone, so one bad row never stops the
//! others from being charged. The reasons are a fixed set (the `reason` label of
//! `gputokens_records_skipped_total`); what was wrong goes to the log, never into a label.

use crate::gpu_time::UsageRecord;

/// Longest run segment believed: ten years. More is a broken record, not GPU time.
pub const MAX_RECORD_SECONDS: u64 = 10 * 366 * 86400;
/// Most milli-GPUs of one type one record may hold: a hundred thousand GPUs.
pub const MAX_MILLI_GPUS: u64 = 100_000 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A row or job the parser cannot read (wrong field count, bad number, bad TRES, bad time).
    Unparseable,
    /// A user field no format of gputokens can carry (see [`crate::user_name`]).
    BadUserName,
    /// A uid Slurm printed for want of a name this system knows.
    UnknownUser,
    /// Times or GPU counts past any real job's.
    AbsurdValue,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::Unparseable => "unparseable",
            Reason::BadUserName => "bad_user_name",
            Reason::UnknownUser => "unknown_user",
            Reason::AbsurdValue => "absurd_value",
        }
    }
}

/// One record left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub reason: Reason,
    /// `sacct line 12` or `squeue job 345`: where to look.
    pub origin: String,
    /// What was wrong, with any text from Slurm escaped.
    pub detail: String,
}

/// What makes `record` uncharged, beyond parsing: a user name no format can carry, absurd values.
pub fn check(record: &UsageRecord) -> Result<(), (Reason, String)> {
    if let Some(why) = crate::user_name::problem(&record.user) {
        return Err((Reason::BadUserName, format!("user '{}': {why}", crate::free_text::printable(&record.user))));
    }
    if record.segment_start <= 0 {
        return Err((Reason::AbsurdValue, format!("start {} is not a time", record.segment_start)));
    }
    if record.elapsed > MAX_RECORD_SECONDS {
        return Err((Reason::AbsurdValue, format!("{} s elapsed is more than ten years", record.elapsed)));
    }
    if let Some((gpu_type, milli)) = record.milli_gpus.iter().find(|(_, m)| **m > MAX_MILLI_GPUS) {
        let detail = format!(
            "{} milli-GPUs of '{}' is more than a hundred thousand GPUs",
            milli,
            crate::free_text::printable(gpu_type)
        );
        return Err((Reason::AbsurdValue, detail));
    }
    Ok(())
}

/// A user field that is only digits: Slurm prints the uid when it knows no name for it. Such a
/// field names a user only where the system has a user of that name (`known`).
pub fn unresolved_uid(user: &str, known: impl Fn(&str) -> bool) -> bool {
    !user.is_empty() && user.bytes().all(|b| b.is_ascii_digit()) && !known(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(user: &str, elapsed: u64, milli: u64) -> UsageRecord {
        UsageRecord {
            job_id: "7".into(),
            user: user.into(),
            account: None,
            segment_start: 1_795_444_368,
            sluid: None,
            milli_gpus: [("a6000".to_string(), milli)].into(),
            elapsed,
            nodes: 1,
            weight_permille: 1000,
            held: Default::default(),
            stranding: None,
            lent: None,
        }
    }

    #[test]
    fn any_name_the_system_gives_is_charged() {
        for user in ["ann@example.org", "j.doe", "zoë", "李雷"] {
            assert_eq!(check(&record(user, 60, 1000)), Ok(()), "{user}");
        }
    }

    #[test]
    fn broken_records_say_why() {
        let (reason, detail) = check(&record("a\nuser x 1", 60, 1000)).unwrap_err();
        assert_eq!(reason, Reason::BadUserName);
        assert_eq!(detail, "user 'a\\nuser x 1': it contains whitespace", "escaped, one line");
        assert_eq!(check(&record("ann", MAX_RECORD_SECONDS + 1, 1000)).unwrap_err().0, Reason::AbsurdValue);
        assert_eq!(check(&record("ann", 60, MAX_MILLI_GPUS + 1)).unwrap_err().0, Reason::AbsurdValue);
        assert_eq!(
            check(&UsageRecord { segment_start: 0, ..record("ann", 60, 1) }).unwrap_err().0,
            Reason::AbsurdValue
        );
    }

    #[test]
    fn a_bare_uid_is_a_user_only_if_the_system_has_that_name() {
        assert!(unresolved_uid("1234", |_| false));
        assert!(!unresolved_uid("1234", |n| n == "1234"));
        assert!(!unresolved_uid("alice", |_| false));
        assert!(!unresolved_uid("", |_| false));
    }
}
