//! Warnings about how the intervals fit together: how far back each charge cycle reads, how old the
//! snapshot may be between check cycles, and how fresh `estimate` mode's view of the queue is.

use std::time::Duration;

use super::admission::{Mode, OnError};
use super::warning::Advice;
use super::Config;

/// Longer than this, an interval is likely a slip (a charge cycle once a week, "1y").
const LONGEST_SENSIBLE_INTERVAL: Duration = Duration::from_secs(86_400);
/// `estimate` mode and `max_gpus_per_user` count the queue accountd read last: slower than this,
/// users are held back by jobs long gone.
const ESTIMATE_CHECK: Duration = Duration::from_secs(5 * 60);

fn shown(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

pub(super) fn advice(config: &Config, out: &mut Vec<Advice>) {
    let (charge, check) = (config.intervals.charge, config.intervals.check);
    for (key, interval) in [("intervals.charge", charge), ("intervals.check", check)] {
        if interval > LONGEST_SENSIBLE_INTERVAL {
            out.push(Advice {
                keys: key,
                text: format!(
                    "{key} is {}: a cycle that rarely runs ({}) leaves balances and the snapshot that long behind. \
                     Use minutes or hours (the defaults: charge = \"1h\", check = \"30m\")",
                    shown(interval),
                    if key == "intervals.charge" { "jobs are charged" } else { "replenishment, holds, the snapshot" },
                ),
            });
        }
    }
    let reread = config.slurm.reread;
    if reread < charge {
        out.push(Advice {
            keys: "slurm.reread, intervals.charge",
            text: format!(
                "reread ({}) is shorter than the charge interval ({}): a job that ends just before a cycle may reach \
                 slurmdbd only after it, and the next cycle's window, reaching back only {}, never sees it end. Set \
                 reread to at least the charge interval (reread = \"{}\")",
                shown(reread),
                shown(charge),
                shown(reread),
                shown(charge),
            ),
        });
    }
    let admission = &config.admission;
    if let Some(max_age) = admission.max_snapshot_age.filter(|max| check >= *max) {
        let then = match admission.on_error {
            OnError::Accept => "on_error = \"accept\" lets every GPU job through, whatever its balance",
            OnError::Reject => "on_error = \"reject\" refuses every GPU job",
        };
        out.push(Advice {
            keys: "intervals.check, admission.max_snapshot_age",
            text: format!(
                "the snapshot is rewritten every check cycle ({}) but is stale after max_snapshot_age ({}): between \
                 cycles the plugin holds a stale snapshot, and {then}. Set max_snapshot_age to a few check intervals \
                 (max_snapshot_age = \"{}\")",
                shown(check),
                shown(max_age),
                shown(check.saturating_mul(4)),
            ),
        });
    }
    let counts_queue = admission.mode == Mode::Estimate || admission.max_gpus_per_user.is_some();
    if counts_queue && check > ESTIMATE_CHECK {
        let (keys, what) = match admission.mode {
            Mode::Estimate => ("admission.mode, intervals.check", "mode = \"estimate\""),
            Mode::Balance => ("admission.max_gpus_per_user, intervals.check", "max_gpus_per_user"),
        };
        out.push(Advice {
            keys,
            text: format!(
                "{what} counts the user's running and pending GPU jobs from the queue accountd reads each check cycle \
                 ({}): a job that ended or was cancelled still counts against its user until the next read, so new \
                 GPU jobs are refused though the tokens or GPUs are there. Set [intervals] check to a minute or so \
                 (check = \"1m\")",
                shown(check),
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advice_of(text: &str) -> Vec<Advice> {
        super::super::warning::found_by(advice, text)
    }

    fn keys(found: &[Advice]) -> Vec<&'static str> {
        found.iter().map(|a| a.keys).collect()
    }

    #[test]
    fn the_defaults_fit_together() {
        assert!(advice_of("").is_empty(), "{:?}", advice_of(""));
    }

    #[test]
    fn a_reread_shorter_than_the_charge_interval_is_named() {
        let found = advice_of("[slurm]\nreread = \"1m\"\n[intervals]\ncharge = \"1h\"\n");
        assert_eq!(keys(&found), ["slurm.reread, intervals.charge"]);
        assert!(found[0].text.starts_with("reread (1m) is shorter than the charge interval (1h): "), "{found:?}");
        assert!(found[0].text.ends_with("(reread = \"1h\")"), "{found:?}");
        assert!(advice_of("[slurm]\nreread = \"1h\"\n[intervals]\ncharge = \"1h\"\n").is_empty(), "equal is enough");
    }

    #[test]
    fn a_check_at_or_above_max_snapshot_age_is_named_with_what_on_error_does() {
        let found = advice_of("[intervals]\ncheck = \"3h\"\n[admission]\nmax_snapshot_age = \"2h\"\n");
        assert_eq!(keys(&found), ["intervals.check, admission.max_snapshot_age"]);
        assert!(found[0].text.contains("every check cycle (3h) but is stale after max_snapshot_age (2h)"));
        assert!(found[0].text.contains("on_error = \"accept\" lets every GPU job through"), "{found:?}");
        let equal = "[intervals]\ncheck = \"30m\"\n[admission]\nmax_snapshot_age = \"30m\"\non_error = \"reject\"\n";
        let found = advice_of(equal);
        assert!(found[0].text.contains("on_error = \"reject\" refuses every GPU job"), "{found:?}");
        assert!(found[0].text.ends_with("(max_snapshot_age = \"2h\")"), "{found:?}");
        assert!(advice_of("[intervals]\ncheck = \"3h\"\n[admission]\nmax_snapshot_age = \"off\"\n").is_empty());
    }

    #[test]
    fn estimate_mode_or_a_gpu_limit_with_a_slow_check_is_named() {
        let found = advice_of("[admission]\nmode = \"estimate\"\n");
        assert_eq!(keys(&found), ["admission.mode, intervals.check"]);
        assert!(found[0].text.starts_with("mode = \"estimate\" counts ") && found[0].text.contains("(30m)"));
        let found = advice_of("[admission]\nmax_gpus_per_user = 8\n");
        assert_eq!(keys(&found), ["admission.max_gpus_per_user, intervals.check"]);
        assert!(advice_of("[intervals]\ncheck = \"1m\"\n[admission]\nmode = \"estimate\"\n").is_empty());
    }

    #[test]
    fn intervals_over_a_day_are_named() {
        let found = advice_of("[intervals]\ncharge = \"1y\"\ncheck = \"2days\"\n[slurm]\nreread = \"1y\"\n");
        assert_eq!(
            keys(&found),
            ["intervals.charge", "intervals.check", "intervals.check, admission.max_snapshot_age"]
        );
        assert!(found[0].text.starts_with("intervals.charge is 1year: "), "{found:?}");
        assert!(advice_of("[intervals]\ncharge = \"1d\"\n[slurm]\nreread = \"1d\"\n").is_empty(), "a day is fine");
    }
}
