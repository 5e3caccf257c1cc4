//! The job_submit plugin's settings, read from the gputokens TOML file (`$GPUTOKENS_CONF`, else
//! /etc/slurm/gputokens.toml) in `init` and again whenever the file changes: `[paths] snapshot`, the
//! `[admission]` table and the `[exempt]` lists. Everything else in the file is accountd's business
//! and ignored here (accountd reads this too, for `default_time_limit`).
//!
//! A missing or broken file, or a bad key, never stops slurmctld: each problem is reported (and
//! logged by the caller) and that setting keeps its default. `accountd config check` reports the
//! same problems as errors.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Exempt;

pub const DEFAULT_PATH: &str = "/etc/slurm/gputokens.toml";
pub const DEFAULT_SNAPSHOT: &str = "/var/lib/gputokens/balances.snapshot";
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    /// The balance snapshot accountd writes (`[paths] snapshot`).
    pub snapshot: PathBuf,
    pub deprioritize: Deprioritize,
    pub mode: Mode,
    /// What GPU jobs get while the snapshot is missing, unreadable, corrupt or stale.
    pub on_error: OnError,
    /// A snapshot written longer ago than this is stale; None = never.
    pub max_snapshot_age: Option<Duration>,
    /// The time limit assumed for a job that has none and whose partition has none.
    pub default_time_limit: Duration,
    /// GPUs a user may hold in running and pending jobs together; None = no limit.
    pub max_gpus_per_user: Option<u32>,
    /// The longest time limit a GPU job may have; None = no limit.
    pub max_job_duration: Option<Duration>,
    /// Users, accounts and QOS whose jobs are never checked (nor preempted).
    pub exempt: Exempt,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            snapshot: DEFAULT_SNAPSHOT.into(),
            deprioritize: Deprioritize::Nice(DEFAULT_NICE_INCREMENT),
            mode: Mode::default(),
            on_error: OnError::default(),
            max_snapshot_age: Some(DEFAULT_MAX_SNAPSHOT_AGE),
            default_time_limit: DEFAULT_TIME_LIMIT,
            max_gpus_per_user: None,
            max_job_duration: None,
            exempt: Exempt::default(),
        }
    }
}

impl PluginConfig {
    /// One line for slurmctld's log.
    pub fn describe(&self) -> String {
        let duration = |d: Option<Duration>| d.map_or("off".to_string(), |d| humantime::format_duration(d).to_string());
        let deprioritize = match &self.deprioritize {
            Deprioritize::Nice(n) => format!("nice +{n}"),
            Deprioritize::SiteFactor(f) => format!("site_factor {f}"),
            Deprioritize::Qos(q) => format!("qos {q}"),
        };
        let mut line = format!(
            "snapshot {}, mode {}, overdraft {deprioritize}, on_error {}, max_snapshot_age {}",
            self.snapshot.display(),
            match self.mode {
                Mode::Balance => "balance",
                Mode::Estimate => "estimate",
            },
            self.on_error.as_str(),
            duration(self.max_snapshot_age),
        );
        if self.mode == Mode::Estimate {
            line.push_str(&format!(", default_time_limit {}", duration(Some(self.default_time_limit))));
        }
        if let Some(n) = self.max_gpus_per_user {
            line.push_str(&format!(", max_gpus_per_user {n}"));
        }
        if self.max_job_duration.is_some() {
            line.push_str(&format!(", max_job_duration {}", duration(self.max_job_duration)));
        }
        let exempt = self.exempt.users.len() + self.exempt.accounts.len() + self.exempt.qos.len();
        if exempt > 0 {
            line.push_str(&format!(
                ", exempt {} users {} accounts {} qos",
                self.exempt.users.len(),
                self.exempt.accounts.len(),
                self.exempt.qos.len()
            ));
        }
        line
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

const KNOWN: &str = "mode, deprioritize, nice_increment, site_factor, qos, on_error, max_snapshot_age, \
                     default_time_limit, max_gpus_per_user, max_job_duration";

/// Parses the file's text: `[paths] snapshot`, the `[admission]` keys and the `[exempt]` lists.
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
    if let Some(exempt) = table.get("exempt").and_then(toml::Value::as_table) {
        for (key, slot) in [
            ("users", &mut config.exempt.users),
            ("accounts", &mut config.exempt.accounts),
            ("qos", &mut config.exempt.qos),
        ] {
            match exempt.get(key).map(names) {
                None => {}
                Some(Ok(list)) => *slot = list,
                Some(Err(reason)) => problems.push(format!("exempt.{key}: {reason}")),
            }
        }
    }

    let Some(admission) = table.get("admission") else { return (config, problems) };
    let Some(admission) = admission.as_table() else {
        problems.push("admission: expected a table ([admission]); using the defaults".into());
        return (config, problems);
    };
    let (mut how, mut nice, mut site_factor, mut qos) = ("nice", DEFAULT_NICE_INCREMENT, DEFAULT_SITE_FACTOR, None);
    for (key, value) in admission {
        let result = match key.as_str() {
            "mode" => match value.as_str() {
                Some("balance") => Ok(Mode::Balance),
                Some("estimate") => Ok(Mode::Estimate),
                _ => Err(format!("expected \"balance\" or \"estimate\", got {value}; using \"balance\"")),
            }
            .map(|m| config.mode = m),
            "deprioritize" => match value.as_str() {
                Some(s @ ("nice" | "site_factor" | "qos")) => Ok(s),
                _ => Err(format!("expected \"nice\", \"site_factor\" or \"qos\", got {value}; using \"nice\"")),
            }
            .map(|s| how = s),
            "nice_increment" => nice_increment(value).map(|n| nice = n),
            "site_factor" => match value.as_integer() {
                Some(n) if n.unsigned_abs() <= MAX_NICE as u64 => Ok(n),
                _ => Err(format!(
                    "expected a whole number from -{MAX_NICE} to {MAX_NICE}, got {value}; using {DEFAULT_SITE_FACTOR}"
                )),
            }
            .map(|n| site_factor = n),
            "qos" => match value.as_str() {
                Some(q) if !q.is_empty() && !q.contains([',', ' ']) => Ok(q.to_string()),
                _ => Err(format!("expected the name of one QOS, got {value}")),
            }
            .map(|q| qos = Some(q)),
            "on_error" => value
                .as_str()
                .ok_or_else(|| format!("expected \"accept\" or \"reject\", got {value}"))
                .and_then(|s| s.parse::<OnError>())
                .map(|v| config.on_error = v),
            "max_snapshot_age" => {
                optional_duration(value, Some(DEFAULT_MAX_SNAPSHOT_AGE)).map(|v| config.max_snapshot_age = v)
            }
            "default_time_limit" => duration(value)
                .map(|d| config.default_time_limit = d)
                .map_err(|e| format!("{e}; using {}", humantime::format_duration(DEFAULT_TIME_LIMIT))),
            "max_gpus_per_user" => match value.as_integer() {
                Some(n) if (1..=u32::MAX as i64).contains(&n) => Ok(n as u32),
                _ => Err(format!("expected a whole number of GPUs from 1, got {value}; no limit")),
            }
            .map(|n| config.max_gpus_per_user = Some(n)),
            "max_job_duration" => optional_duration(value, None).map(|v| config.max_job_duration = v),
            _ => Err(format!("unknown key (known: {KNOWN}); ignored")),
        };
        if let Err(reason) = result {
            problems.push(format!("admission.{key}: {reason}"));
        }
    }
    config.deprioritize = match (how, qos) {
        ("site_factor", _) => Deprioritize::SiteFactor(site_factor),
        ("qos", Some(q)) => Deprioritize::Qos(q),
        ("qos", None) => {
            problems.push("admission.qos: deprioritize = \"qos\" needs qos = \"<name>\"; using nice".into());
            Deprioritize::Nice(nice)
        }
        _ => Deprioritize::Nice(nice),
    };
    (config, problems)
}

fn nice_increment(value: &toml::Value) -> Result<u32, String> {
    match value.as_integer() {
        Some(n) if (0..=MAX_NICE as i64).contains(&n) => Ok(n as u32),
        _ => Err(format!("expected a whole number from 0 to {MAX_NICE}, got {value}; using {DEFAULT_NICE_INCREMENT}")),
    }
}

fn names(value: &toml::Value) -> Result<Vec<String>, String> {
    let bad = || format!("expected a list of names such as [\"alice\"], got {value}; ignored");
    let list = value.as_array().ok_or_else(bad)?;
    list.iter().map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string).ok_or_else(bad)).collect()
}

/// `"2h"`, `"90m"`, `"1d"` (at least a second).
fn duration(value: &toml::Value) -> Result<Duration, String> {
    match value.as_str().map(humantime::parse_duration) {
        Some(Ok(d)) if d >= Duration::from_secs(1) => Ok(d),
        _ => Err(format!("expected a duration such as \"2h\", got {value}")),
    }
}

/// A duration, or `"off"` = None; a bad value keeps `fallback`.
fn optional_duration(value: &toml::Value, fallback: Option<Duration>) -> Result<Option<Duration>, String> {
    if value.as_str() == Some("off") {
        return Ok(None);
    }
    duration(value).map(Some).map_err(|_| {
        let fallback = fallback.map_or("off".to_string(), |d| humantime::format_duration(d).to_string());
        format!("expected a duration such as \"2h\" or \"off\", got {value}; using {fallback}")
    })
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
            "snapshot /var/lib/gputokens/balances.snapshot, mode balance, overdraft nice +10000, on_error accept, \
             max_snapshot_age 2h"
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
                deprioritize: Deprioritize::Nice(500),
                on_error: OnError::Reject,
                max_snapshot_age: Some(Duration::from_secs(5400)),
                ..PluginConfig::default()
            }
        );
        let (c, _) = parse("[admission]\nmax_snapshot_age = \"off\"\n");
        assert_eq!(c.max_snapshot_age, None);
    }

    #[test]
    fn limits_estimate_deprioritization_and_exemptions() {
        let text = "[admission]\nmode = \"estimate\"\ndeprioritize = \"site_factor\"\nsite_factor = -500\n\
                    default_time_limit = \"4h\"\nmax_gpus_per_user = 8\nmax_job_duration = \"2d\"\n\
                    [exempt]\nusers = [\"root\", \"ops\"]\naccounts = [\"admin\"]\nqos = [\"urgent\"]\n";
        let (c, problems) = parse(text);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.mode, Mode::Estimate);
        assert_eq!(c.deprioritize, Deprioritize::SiteFactor(-500));
        assert_eq!(c.default_time_limit, Duration::from_secs(4 * 3600));
        assert_eq!(c.max_gpus_per_user, Some(8));
        assert_eq!(c.max_job_duration, Some(Duration::from_secs(2 * 86400)));
        assert_eq!(c.exempt.users, ["root", "ops"]);
        assert_eq!((c.exempt.accounts.len(), c.exempt.qos.len()), (1, 1));
        assert_eq!(
            c.describe(),
            "snapshot /var/lib/gputokens/balances.snapshot, mode estimate, overdraft site_factor -500, on_error \
             accept, max_snapshot_age 2h, default_time_limit 4h, max_gpus_per_user 8, max_job_duration 2days, \
             exempt 2 users 1 accounts 1 qos"
        );
        let (c, problems) = parse("[admission]\ndeprioritize = \"qos\"\nqos = \"overdraft\"\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.deprioritize, Deprioritize::Qos("overdraft".into()));
        let (c, problems) = parse("[admission]\ndeprioritize = \"qos\"\nnice_increment = 7\n");
        assert_eq!(c.deprioritize, Deprioritize::Nice(7));
        assert!(problems[0].starts_with("admission.qos: deprioritize = \"qos\" needs qos"), "{problems:?}");
    }

    #[test]
    fn bad_limits_are_named() {
        let text = "[admission]\nmode = \"guess\"\ndeprioritize = \"hope\"\nsite_factor = 1e3\nqos = \"a,b\"\n\
                    default_time_limit = \"off\"\nmax_gpus_per_user = 0\nmax_job_duration = \"long\"\n\
                    [exempt]\nusers = \"root\"\nqos = [1]\n";
        let (c, problems) = parse(text);
        assert_eq!(c, PluginConfig::default());
        let joined = problems.join("\n");
        for key in [
            "admission.mode",
            "admission.deprioritize",
            "admission.site_factor",
            "admission.qos",
            "admission.default_time_limit",
            "admission.max_gpus_per_user",
            "admission.max_job_duration",
            "exempt.users",
            "exempt.qos",
        ] {
            assert!(joined.contains(&format!("{key}: ")), "{key} not named in {joined}");
        }
        assert_eq!(problems.len(), 9, "{joined}");
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
        assert_eq!((c.deprioritize, c.on_error), (Deprioritize::Nice(DEFAULT_NICE_INCREMENT), OnError::Reject));
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
        assert_eq!(config, PluginConfig::default(), "every key in the example is at its default");
        assert_eq!(config.on_error, OnError::default());
        assert_eq!(config.max_snapshot_age, Some(DEFAULT_MAX_SNAPSHOT_AGE));
    }
}
