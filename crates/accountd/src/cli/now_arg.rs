//! `--now TIME` of `accountd tick` and `charge`: act as if it were TIME (replays, tests, catching up
//! after an outage). Up to a day ahead of the clock is taken; what lies further is a mistake that
//! would stamp entries and move the sacct window into days that have not come, so it is refused.
//! Time that has not passed is never charged or granted either way: running jobs are charged up
//! to when squeue was read and replenishment stops at the clock's today.

use crate::error::{AccountdError, AccountdResult};

/// How far ahead of the clock `--now` may be.
pub const MAX_AHEAD_SECONDS: i64 = 86400;

/// The time `--now` names (or the clock's, without it).
pub fn resolve(now: Option<&str>, clock: i64) -> AccountdResult<i64> {
    let Some(text) = now else { return Ok(clock) };
    let at = gputokens::time::parse_timestamp(text)
        .ok_or_else(|| AccountdError::Refused(format!("--now '{text}' is not a time like 2026-12-01T00:00:00")))?;
    if at > clock.saturating_add(MAX_AHEAD_SECONDS) {
        return Err(AccountdError::Refused(format!(
            "--now {} is more than a day ahead of this host's clock ({}): refused, so no day that has not come \
             is charged or granted",
            gputokens::time::format_local(at),
            gputokens::time::format_local(clock)
        )));
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCK: i64 = 1_795_444_368;

    #[test]
    fn up_to_a_day_ahead() {
        assert_eq!(resolve(None, CLOCK).unwrap(), CLOCK);
        assert_eq!(resolve(Some("1795447968"), CLOCK).unwrap(), CLOCK + 3600, "an hour ahead");
        assert_eq!(resolve(Some("1795000000"), CLOCK).unwrap(), 1_795_000_000, "the past");
        let ahead = (CLOCK + MAX_AHEAD_SECONDS + 1).to_string();
        let err = resolve(Some(&ahead), CLOCK).unwrap_err().to_string();
        assert!(err.contains("more than a day ahead of this host's clock"), "{err}");
        assert!(resolve(Some("soon"), CLOCK).unwrap_err().to_string().contains("--now 'soon' is not a time"));
    }
}
