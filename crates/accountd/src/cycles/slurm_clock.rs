//! How far a check cycle trusts the clock for what cannot be undone: replenishing a day and
//! expiring a grant. A clock that jumps ahead (a bad RTC at boot, before NTP has corrected it)
//! would otherwise replenish every day up to the wrong date and expire every grant ending before
//! it, for good (the audit's L7). Evidence of the real time: the newest time Slurm has shown (jobs'
//! submit, start and end times from squeue and sacct, kept in the ledger), and within one process
//! the last bound moved on by the monotonic clock. A cycle acts up to a day past that evidence;
//! whatever it holds back (days, expiries) it catches up once the evidence moves on.

use std::time::Instant;

use crate::error::AccountdResult;
use crate::resources::Resources;

/// The ledger's meta key: the newest time (unix seconds) Slurm has shown.
pub const SEEN: &str = "slurm_time_seen";
/// How far past the evidence a cycle acts.
pub const LEEWAY: i64 = 86_400;

/// What the last check cycle of this process took for the real time (the clock where it was
/// trusted, else the evidence), and when: moved on by the monotonic clock, it is evidence for the
/// next cycle that a quiet Slurm cannot give.
#[derive(Debug, Default)]
pub struct ClockWitness {
    last: Option<(i64, Instant)>,
}

/// Notes `times` (unix seconds from Slurm's records) as seen, keeping the newest; zeros (unset)
/// are skipped.
pub fn saw(res: &mut Resources, times: impl IntoIterator<Item = i64>) -> AccountdResult<()> {
    let Some(newest) = times.into_iter().filter(|t| *t > 0).max() else { return Ok(()) };
    let stored = seen(res)?;
    if stored.is_none_or(|s| newest > s) {
        res.ledger.set_meta(SEEN, &newest.to_string())?;
    }
    Ok(())
}

fn seen(res: &Resources) -> AccountdResult<Option<i64>> {
    Ok(res.ledger.meta(SEEN)?.and_then(|v| v.parse().ok()))
}

/// Up to when this cycle may replenish and expire: `now`, unless that is more than [`LEEWAY`] past
/// the evidence. Logs (and shows in `gputokens_clock_ahead_seconds`) how far the clock is ahead.
pub fn bound(res: &Resources, witness: &mut ClockWitness, now: i64) -> AccountdResult<i64> {
    let carried = witness.last.map(|(at, when)| at.saturating_add(when.elapsed().as_secs() as i64));
    let evidence = seen(res)?.into_iter().chain(carried).max();
    // No evidence yet (a new ledger, no job seen): nothing to protect.
    let bound = evidence.map_or(now, |e| now.min(e.saturating_add(LEEWAY)));
    res.metrics.clock_ahead.set(now - bound);
    if bound < now {
        tracing::warn!(
            "the clock says {}, over a day past the newest time Slurm has shown ({}): replenishment and grant \
             expiry are held at {} until Slurm's jobs show the clock is right (or it is corrected); nothing held \
             is lost",
            gputokens::time::format_local(now),
            evidence.map(gputokens::time::format_local).unwrap_or_default(),
            gputokens::time::format_local(bound),
        );
    }
    let real = match (bound < now, evidence) {
        (true, Some(evidence)) => evidence,
        _ => now,
    };
    witness.last = Some((real, Instant::now()));
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources() -> (tempfile::TempDir, Resources) {
        let dir = tempfile::tempdir().unwrap();
        let config = gputokens::Config::defaults(std::path::Path::new("test.toml"));
        let ledger = ledger::Ledger::open(&dir.path().join("ledger.sqlite"), (&config).into()).unwrap();
        (dir, Resources::new(config, ledger))
    }

    #[test]
    fn the_clock_is_trusted_up_to_a_day_past_what_slurm_showed() {
        let (_dir, mut res) = resources();
        let mut witness = ClockWitness::default();
        let now = 1_800_000_000;
        assert_eq!(bound(&res, &mut witness, now).unwrap(), now, "no evidence yet: a new ledger");
        let mut witness = ClockWitness::default();
        saw(&mut res, [0, now - 3 * LEEWAY, now - 4 * LEEWAY]).unwrap();
        saw(&mut res, [now - 5 * LEEWAY]).unwrap();
        assert_eq!(res.ledger.meta(SEEN).unwrap(), Some((now - 3 * LEEWAY).to_string()), "the newest kept");
        assert_eq!(bound(&res, &mut witness, now).unwrap(), now - 2 * LEEWAY);
        assert_eq!(res.metrics.clock_ahead.get(), 2 * LEEWAY);
        // Held cycles do not creep forward: the next one carries the evidence, not its bound.
        assert_eq!(bound(&res, &mut witness, now + 60).unwrap(), now - 2 * LEEWAY);
        saw(&mut res, [now]).unwrap();
        assert_eq!(bound(&res, &mut witness, now + 60).unwrap(), now + 60);
        assert_eq!(res.metrics.clock_ahead.get(), 0);
        // Within a process, a jump of the clock is held (the monotonic clock says little time passed)...
        assert_eq!(bound(&res, &mut witness, now + 3 * LEEWAY).unwrap(), now + 60 + LEEWAY);
        // ...while a clock trusted two days ago, with Slurm quiet since, is trusted as time passes.
        let mut quiet = ClockWitness { last: Some((now + 2 * LEEWAY, Instant::now())) };
        assert_eq!(bound(&res, &mut quiet, now + 2 * LEEWAY + 600).unwrap(), now + 2 * LEEWAY + 600);
    }
}
