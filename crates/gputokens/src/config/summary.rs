//! What the plugins say about the config they run with.

use std::time::Duration;

use super::Config;
use crate::config::admission::{Deprioritize, Mode};

/// One line for slurmctld's log: the settings the job_submit plugin works with.
pub fn describe(config: &Config) -> String {
    let admission = &config.admission;
    let duration = |d: Option<Duration>| d.map_or("off".to_string(), |d| humantime::format_duration(d).to_string());
    let deprioritize = match &admission.deprioritize {
        Deprioritize::Nice(n) => format!("nice +{n}"),
        Deprioritize::SiteFactor(f) => format!("site_factor {f}"),
        Deprioritize::Qos(q) => format!("qos {q}"),
    };
    let mut line = format!(
        "snapshot {}, mode {}, overdraft {deprioritize}, on_error {}, max_snapshot_age {}",
        config.paths.snapshot.display(),
        match admission.mode {
            Mode::Balance => "balance",
            Mode::Estimate => "estimate",
        },
        admission.on_error.as_str(),
        duration(admission.max_snapshot_age),
    );
    if admission.mode == Mode::Estimate {
        line.push_str(&format!(", default_time_limit {}", duration(Some(admission.default_time_limit))));
    }
    if let Some(n) = admission.max_gpus_per_user {
        line.push_str(&format!(", max_gpus_per_user {n}"));
    }
    if admission.max_job_duration.is_some() {
        line.push_str(&format!(", max_job_duration {}", duration(admission.max_job_duration)));
    }
    if !admission.enforce {
        line.push_str(", SHADOW MODE (enforce = false: decisions logged, no job refused or changed)");
    }
    let exempt = &config.exempt;
    if !exempt.is_empty() {
        line.push_str(&format!(
            ", exempt {} users {} accounts {} qos",
            exempt.users.len(),
            exempt.accounts.len(),
            exempt.qos.len()
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Config {
        let (config, problems) = Config::parse_lenient(text, Path::new("test.toml"));
        assert!(problems.is_empty(), "{problems:?}");
        config
    }

    #[test]
    fn describes_the_defaults_and_what_differs() {
        assert_eq!(
            describe(&parse("initial = 100\n[prices]\na6000 = 4\n")),
            "snapshot /var/lib/gputokens/balances.snapshot, mode balance, overdraft nice +10000, on_error accept, \
             max_snapshot_age 2h"
        );
        let text = "[admission]\nmode = \"estimate\"\ndeprioritize = \"site_factor\"\nsite_factor = -500\n\
                    default_time_limit = \"4h\"\nmax_gpus_per_user = 8\nmax_job_duration = \"2d\"\n\
                    [exempt]\nusers = [\"root\", \"ops\"]\naccounts = [\"admin\"]\nqos = [\"urgent\"]\n";
        assert_eq!(
            describe(&parse(text)),
            "snapshot /var/lib/gputokens/balances.snapshot, mode estimate, overdraft site_factor -500, on_error \
             accept, max_snapshot_age 2h, default_time_limit 4h, max_gpus_per_user 8, max_job_duration 2days, \
             exempt 2 users 1 accounts 1 qos"
        );
    }
}
