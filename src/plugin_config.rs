//! The job_submit plugin's settings, read once in `init` from the gputokens TOML file (`$GPUTOKENS_CONF`, else
//! /etc/slurm/gputokens.toml): `[paths] snapshot` and the `[admission]` table. Everything else in
//! the file is accountd's business and ignored here.
//!
//! A missing or broken file, or a bad key, never stops slurmctld: each problem is reported (and
//! logged by the caller) and that setting keeps its default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::admission::OnError;

pub const DEFAULT_PATH: &str = "/etc/slurm/gputokens.toml";
pub const DEFAULT_SNAPSHOT: &str = "/var/lib/gputokens/balances.snapshot";
pub const DEFAULT_NICE_INCREMENT: u32 = 10_000;
pub const DEFAULT_MAX_SNAPSHOT_AGE: Duration = Duration::from_secs(2 * 3600);
/// Slurm's largest nice value (NICE_OFFSET - 3).
pub const MAX_NICE: u32 = 2_147_483_645;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    /// The balance snapshot accountd writes (`[paths] snapshot`).
    pub snapshot: PathBuf,
    /// Added to the nice value of GPU jobs submitted in overdraft; 0 = only tell the user.
    pub nice_increment: u32,
    /// What GPU jobs get while the snapshot is missing, unreadable, corrupt or stale.
    pub on_error: OnError,
    /// A snapshot written longer ago than this is stale; None = never.
    pub max_snapshot_age: Option<Duration>,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            snapshot: DEFAULT_SNAPSHOT.into(),
            nice_increment: DEFAULT_NICE_INCREMENT,
            on_error: OnError::default(),
            max_snapshot_age: Some(DEFAULT_MAX_SNAPSHOT_AGE),
        }
    }
}

impl PluginConfig {
    /// One line for slurmctld's log.
    pub fn describe(&self) -> String {
        let age = match self.max_snapshot_age {
            Some(d) => humantime::format_duration(d).to_string(),
            None => "off".into(),
        };
        format!(
            "snapshot {}, nice_increment {}, on_error {}, max_snapshot_age {age}",
            self.snapshot.display(),
            self.nice_increment,
            self.on_error.as_str()
        )
    }
}

/// `$GPUTOKENS_CONF` when set and not empty, else /etc/slurm/gputokens.toml.
pub fn config_path(env_value: Option<&str>) -> PathBuf {
    match env_value {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_PATH),
    }
}

/// Reads `path`; returns the settings and the problems found (each already phrased for the log).
pub fn load(path: &Path) -> (PluginConfig, Vec<String>) {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let (config, problems) = parse(&text);
            let problems = problems.into_iter().map(|p| format!("{}: {p}", path.display())).collect();
            (config, problems)
        }
        Err(e) => (PluginConfig::default(), vec![format!("cannot read {}: {e}; using the defaults", path.display())]),
    }
}

/// Parses the file's text: `[paths] snapshot` and the `[admission]` keys.
pub fn parse(text: &str) -> (PluginConfig, Vec<String>) {
    let mut config = PluginConfig::default();
    let mut problems = Vec::new();
    let table: toml::Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(e) => {
            problems.push(format!("not valid TOML ({}); using the defaults", e.to_string().trim_end()));
            return (config, problems);
        }
    };

    if let Some(paths) = table.get("paths") {
        match paths.get("snapshot") {
            None => {}
            Some(toml::Value::String(s)) if Path::new(s).is_absolute() => config.snapshot = s.into(),
            Some(other) => problems.push(format!(
                "paths.snapshot: expected an absolute path, got {other}; using {}",
                config.snapshot.display()
            )),
        }
    }

    let Some(admission) = table.get("admission") else { return (config, problems) };
    let Some(admission) = admission.as_table() else {
        problems.push("admission: expected a table ([admission]); using the defaults".into());
        return (config, problems);
    };
    for (key, value) in admission {
        let result = match key.as_str() {
            "nice_increment" => nice_increment(value).map(|n| config.nice_increment = n),
            "on_error" => value
                .as_str()
                .ok_or_else(|| format!("expected \"accept\" or \"reject\", got {value}"))
                .and_then(|s| s.parse::<OnError>())
                .map(|v| config.on_error = v),
            "max_snapshot_age" => max_age(value).map(|v| config.max_snapshot_age = v),
            _ => Err("unknown key (known: nice_increment, on_error, max_snapshot_age); ignored".into()),
        };
        if let Err(reason) = result {
            problems.push(format!("admission.{key}: {reason}"));
        }
    }
    (config, problems)
}

fn nice_increment(value: &toml::Value) -> Result<u32, String> {
    match value.as_integer() {
        Some(n) if (0..=MAX_NICE as i64).contains(&n) => Ok(n as u32),
        _ => Err(format!("expected a whole number from 0 to {MAX_NICE}, got {value}; using {DEFAULT_NICE_INCREMENT}")),
    }
}

/// `"2h"`, `"90m"`, `"1d"`; `"off"` = never stale.
fn max_age(value: &toml::Value) -> Result<Option<Duration>, String> {
    let fallback = humantime::format_duration(DEFAULT_MAX_SNAPSHOT_AGE);
    let bad = || format!("expected a duration such as \"2h\" or \"off\", got {value}; using {fallback}");
    match value.as_str() {
        Some("off") => Ok(None),
        Some(text) => match humantime::parse_duration(text) {
            Ok(d) if d >= Duration::from_secs(1) => Ok(Some(d)),
            _ => Err(bad()),
        },
        None => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_when_nothing_is_said() {
        let (c, problems) = parse("initial = 100\n[prices]\na6000 = 4\n");
        assert_eq!(c, PluginConfig::default());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            c.describe(),
            "snapshot /var/lib/gputokens/balances.snapshot, nice_increment 10000, on_error accept, max_snapshot_age 2h"
        );
    }

    #[test]
    fn reads_paths_and_admission() {
        let text = "floor = -10\n[paths]\nledger = \"/x/l.sqlite\"\nsnapshot = \"/tmp/s/balances.snapshot\"\n\
                    [admission]\nnice_increment = 500\non_error = \"reject\"\nmax_snapshot_age = \"90m\"\n";
        let (c, problems) = parse(text);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            c,
            PluginConfig {
                snapshot: "/tmp/s/balances.snapshot".into(),
                nice_increment: 500,
                on_error: OnError::Reject,
                max_snapshot_age: Some(Duration::from_secs(5400)),
            }
        );
        let (c, _) = parse("[admission]\nmax_snapshot_age = \"off\"\n");
        assert_eq!(c.max_snapshot_age, None);
    }

    #[test]
    fn each_bad_key_is_named_and_keeps_its_default() {
        let text = "[paths]\nsnapshot = \"relative/path\"\n[admission]\nnice_increment = -1\non_error = \"maybe\"\n\
                    max_snapshot_age = \"soon\"\nadmision = 1\n";
        let (c, problems) = parse(text);
        assert_eq!(c, PluginConfig::default());
        let joined = problems.join("\n");
        for key in ["paths.snapshot", "admission.nice_increment", "admission.on_error", "admission.max_snapshot_age"] {
            assert!(joined.contains(key), "{key} not named in {joined}");
        }
        assert!(joined.contains("admission.admision: unknown key"), "{joined}");
        let (c, problems) = parse("[admission]\nnice_increment = 3000000000\non_error = \"reject\"\n");
        assert_eq!((c.nice_increment, c.on_error), (DEFAULT_NICE_INCREMENT, OnError::Reject));
        assert_eq!(problems.len(), 1);
    }

    #[test]
    fn broken_or_missing_file_gives_defaults() {
        let (c, problems) = parse("this is [not toml");
        assert_eq!(c, PluginConfig::default());
        assert!(problems[0].starts_with("not valid TOML"), "{problems:?}");
        let (c, problems) = load(Path::new("/nonexistent/gputokens.toml"));
        assert_eq!(c, PluginConfig::default());
        assert!(problems[0].starts_with("cannot read /nonexistent/gputokens.toml"), "{problems:?}");
        let (_, problems) = parse("admission = 3\n");
        assert!(problems[0].starts_with("admission: expected a table"), "{problems:?}");
    }

    #[test]
    fn config_path_from_the_environment() {
        assert_eq!(config_path(Some("/x/g.toml")), PathBuf::from("/x/g.toml"));
        assert_eq!(config_path(Some("")), PathBuf::from(DEFAULT_PATH));
        assert_eq!(config_path(None), PathBuf::from(DEFAULT_PATH));
    }

    #[test]
    fn the_shipped_example_states_the_defaults() {
        let (config, problems) = parse(crate::config::EXAMPLE);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(crate::config::EXAMPLE.contains("\n[admission]\n"), "the example documents [admission]");
        assert_eq!(config.nice_increment, DEFAULT_NICE_INCREMENT);
        assert_eq!(config.on_error, OnError::default());
        assert_eq!(config.max_snapshot_age, Some(DEFAULT_MAX_SNAPSHOT_AGE));
    }
}
