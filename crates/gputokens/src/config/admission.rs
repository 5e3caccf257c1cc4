//! The value types of the `[admission]` section (the config model's `Admission`) and their defaults:
//! how an overdraft job is deprioritized, which jobs the balance refuses, what happens while the
//! balances cannot be read. Plain values with no reader of their own: the config's one reader (lenient
//! in the plugins, strict in accountd) checks the keys.

use std::time::Duration;

pub const DEFAULT_NICE_INCREMENT: u32 = 10_000;
pub const DEFAULT_SITE_FACTOR: i64 = -10_000;
pub const DEFAULT_MAX_SNAPSHOT_AGE: Duration = Duration::from_secs(2 * 3600);
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(24 * 3600);
/// Slurm's largest nice value (NICE_OFFSET - 3); site factors share its range.
pub const MAX_NICE: u32 = 2_147_483_645;

/// How a GPU job submitted in overdraft is put behind others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deprioritize {
    /// Add this to the job's nice value (every priority plugin honours nice); 0 = only tell the user.
    Nice(u32),
    /// Set the job's site factor (priority/multifactor adds it to the priority; negative lowers it).
    SiteFactor(i64),
    /// Move the job to this QOS (give it a low Priority and PriorityWeightQOS; users' associations
    /// must be allowed to use it).
    Qos(String),
}

/// Which jobs the balance refuses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// GPU jobs are refused while the balance is at or below the floor.
    #[default]
    Balance,
    /// Also refused when the job's maximum cost, with what the user's running and pending GPU jobs
    /// can still cost, would take the balance below the floor.
    Estimate,
}

/// What happens to a GPU job when the balances cannot be read (missing, unreadable, corrupt or
/// stale snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnError {
    /// Fail open: accept GPU jobs as if every balance were fine (the default).
    #[default]
    Accept,
    /// Fail closed: refuse GPU jobs until the balances are readable again.
    Reject,
}

impl std::str::FromStr for OnError {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "accept" => Ok(OnError::Accept),
            "reject" => Ok(OnError::Reject),
            other => Err(format!("'{other}' is not \"accept\" or \"reject\"")),
        }
    }
}

impl OnError {
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Accept => "accept",
            OnError::Reject => "reject",
        }
    }
}
