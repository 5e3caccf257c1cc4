//! The reader in both modes: the strict errors `accountd config check` prints, the lenient problems
//! the plugins log, and that the two agree.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::load::resolve_path;
use super::*;
use crate::config::admission::{DEFAULT_MAX_SNAPSHOT_AGE, DEFAULT_SITE_FACTOR};

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("test.toml"))
}

#[test]
fn shipped_example_is_valid_and_has_the_seed_prices() {
    let cfg = parse(EXAMPLE).expect("slurm-conf/gputokens.toml must be valid");
    assert_eq!(cfg.prices.price("RTX2080"), Some(Tokens::from_micro(500_000)));
    assert_eq!(cfg.prices.price("rtx3090"), Some(Tokens::whole(1)));
    assert_eq!(cfg.prices.price("a6000"), Some(Tokens::whole(4)));
    assert_eq!(cfg.initial, Tokens::whole(100));
    assert_eq!(cfg.floor, Tokens::whole(-10));
}

#[test]
fn empty_file_gets_the_documented_defaults() {
    let cfg = parse("").unwrap();
    assert_eq!(cfg.initial, Tokens::whole(100));
    assert_eq!(cfg.daily, Tokens::whole(1));
    assert_eq!(cfg.monthly, Tokens::whole(30));
    assert_eq!(cfg.floor, Tokens::whole(-10));
    assert_eq!(cfg.cap, None);
    assert_eq!(crate::policy::BucketRules::from(&cfg), crate::policy::BucketRules::default());
    assert_eq!(cfg.intervals.charge, Duration::from_secs(3600));
    assert_eq!(cfg.intervals.check, Duration::from_secs(1800));
    assert_eq!(cfg.paths.socket, PathBuf::from("/run/gputokens/accountd.sock"));
    assert_eq!(cfg.agent.jobs_dir, PathBuf::from("/run/gputokens/jobs"));
    assert!(!cfg.agent.per_job_metrics, "every local user can read the agent's /metrics");
}

#[test]
fn unknown_key_is_named() {
    let err = parse("initail = 5\n").unwrap_err().to_string();
    assert!(err.contains("initail"), "{err}");
    let err = parse("[prices]\na6000 = 4\n[paths]\nledgr = \"/x\"\n").unwrap_err().to_string();
    assert!(err.contains("ledgr"), "{err}");
}

#[test]
fn wrong_type_is_named() {
    let err = parse("floor = \"low\"\n").unwrap_err().to_string();
    assert!(err.contains("floor"), "{err}");
}

#[test]
fn amounts_beyond_the_limit_are_named() {
    let err = parse("[prices]\na6000 = 1e10\n").unwrap_err().to_string();
    assert!(err.contains("prices.a6000") && err.contains("beyond the limit of ±1000000000 tokens"), "{err}");
    let err = parse("floor = -1e300\n").unwrap_err().to_string();
    assert!(err.contains("floor"), "{err}");
    assert!(parse("initial = 1e9\n").is_ok(), "the limit itself is allowed");
}

/// The newcomer review's fourth harm: a price of 0.0000001 passed and rounded to a free GPU type.
/// Amounts are exact or refused; what a file writes in six decimals or fewer is exact.
#[test]
fn amounts_with_more_than_six_decimals_are_refused() {
    let err = parse("[prices]\na6000 = 0.0000001\n").unwrap_err().to_string();
    assert!(err.contains("prices.a6000") && err.contains("0.0000001 has more than 6 decimals"), "{err}");
    assert!(err.contains("would round it to 0"), "{err}");
    let err = parse("daily = 1.0000005\n").unwrap_err().to_string();
    assert!(err.contains("daily") && err.contains("more than 6 decimals"), "{err}");
    let err = parse("cap = 200000.0000001\n").unwrap_err().to_string();
    assert!(err.contains("cap") && err.contains("more than 6 decimals"), "a large amount too: {err}");
    assert!(parse("initial = 1e-6\ncap = 999999999.999999\n").is_ok());
    for exact in ["0.1", "0.000001", "4", "0.5", "123456.789012", "9.999999"] {
        assert!(parse(&format!("[prices]\na6000 = {exact}\n")).is_ok(), "{exact}");
    }
    assert!(parse("floor = -9.999999\n").is_ok());
    assert!(parse("[prices]\nfree = 0\n").is_ok(), "a free GPU type, written as one");
}

/// The newcomer review's third harm: the ledger and the snapshot at one path passed `config check`,
/// and the first charge overwrote the ledger.
#[test]
fn two_files_at_one_path_are_refused() {
    let err = parse("[paths]\nledger = \"/var/lib/g/x\"\nsnapshot = \"/var/lib/g/x\"\n").unwrap_err().to_string();
    assert!(err.contains("paths.snapshot") && err.contains("/var/lib/g/x is the same file as paths.ledger"), "{err}");
    let err = parse("[paths]\nledger = \"/var/lib/g/l\"\nsocket = \"/var/lib/g/l/sock\"\n").unwrap_err().to_string();
    assert!(err.contains("paths.socket") && err.contains("is inside the file paths.ledger"), "{err}");
    let err = parse("[paths]\nadmin_journal = \"/var/lib/gputokens/ledger.sqlite\"\n").unwrap_err().to_string();
    assert!(err.contains("paths.admin_journal") && err.contains("same file as paths.ledger"), "{err}");
    assert!(parse("[paths]\nledger = \"/var/lib/g/ledger\"\nsnapshot = \"/var/lib/g/ledger.snapshot\"\n").is_ok());
}

#[test]
fn negative_price_is_named() {
    let err = parse("[prices]\na6000 = -4\n").unwrap_err().to_string();
    assert!(err.contains("prices.a6000") && err.contains("negative"), "{err}");
}

#[test]
fn positive_floor_is_refused() {
    let err = parse("floor = 5\n").unwrap_err().to_string();
    assert!(err.contains("floor") && err.contains("0 or below"), "{err}");
}

#[test]
fn case_insensitive_duplicate_types_are_refused() {
    let err = parse("[prices]\nA6000 = 4\na6000 = 4\n").unwrap_err().to_string();
    assert!(err.contains("listed twice"), "{err}");
}

#[test]
fn per_kwh_prices_energy_and_no_gpu_type() {
    let config = parse("[prices]\na6000 = 4\nper_kwh = 0.25\n").unwrap();
    assert_eq!(config.prices.per_kwh(), Some("0.25".parse().unwrap()));
    assert_eq!(config.prices.listed_types().collect::<Vec<_>>(), ["a6000"]);
    assert_eq!(parse("[prices]\na6000 = 4\n").unwrap().prices.per_kwh(), None, "off unless set");
    assert_eq!(parse("[prices]\nper_kwh = 0\n").unwrap().prices.per_kwh(), None, "0 is off");
    let err = parse("[prices]\nper_kwh = -1\n").unwrap_err().to_string();
    assert!(err.contains("prices.per_kwh"), "{err}");
    let err = parse("[prices]\nPER_KWH = 1\n").unwrap_err().to_string();
    assert!(err.contains("the energy price is written `per_kwh`, in lower case"), "{err}");
}

#[test]
fn bad_interval_and_relative_path_are_named() {
    let err = parse("[intervals]\ncharge = \"often\"\n").unwrap_err().to_string();
    assert!(err.contains("intervals.charge"), "{err}");
    let err = parse("[paths]\nledger = \"ledger.db\"\n").unwrap_err().to_string();
    assert!(err.contains("paths.ledger") && err.contains("absolute"), "{err}");
    let err = parse("[preemption]\nbusy_percent = 120\n").unwrap_err().to_string();
    assert!(err.contains("preemption.busy_percent: must be from 0 to 100 (got 120)"), "{err}");
    assert_eq!(parse("[preemption]\nbusy_percent = 55\n").unwrap().preemption.busy_percent, Some(55.0));
    assert_eq!(parse("").unwrap().preemption.busy_percent, None);
    let err = parse("[agent]\njobs_dir = \"jobs\"\n").unwrap_err().to_string();
    assert!(err.contains("agent.jobs_dir") && err.contains("absolute"), "{err}");
    assert_eq!(parse("[agent]\njobs_dir = \"/x/jobs\"\n").unwrap().agent.jobs_dir, PathBuf::from("/x/jobs"));
    assert!(parse("[agent]\nper_job_metrics = true\n").unwrap().agent.per_job_metrics);
    let err = parse("[agent]\nper_job_metrics = \"yes\"\n").unwrap_err().to_string();
    assert!(err.contains("agent.per_job_metrics"), "{err}");
}

#[test]
fn health_keys_default_and_are_named_when_wrong() {
    let h = parse("").unwrap().health;
    assert_eq!(h.temperature_for, Duration::from_secs(300));
    assert_eq!(h.repeat_after, Duration::from_secs(86400));
    assert_eq!(h.drain_xids, DEFAULT_DRAIN_XIDS.into_iter().collect());
    assert!(!h.drain_xids.contains(&13) && !h.drain_xids.contains(&43));
    let h = parse("[health]\ndrain_xids = [79]\ntemperature_for = \"0s\"\nrepeat_after = \"2h\"\n").unwrap().health;
    assert_eq!(h.drain_xids, [79].into_iter().collect());
    assert_eq!(h.temperature_for, Duration::ZERO, "0s: drain on the first hot sample");
    assert_eq!(h.repeat_after, Duration::from_secs(7200));
    let err = parse("[health]\ntemperature_for = \"long\"\n").unwrap_err().to_string();
    assert!(err.contains("health.temperature_for"), "{err}");
    let err = parse("[health]\nrepeat_after = \"0s\"\n").unwrap_err().to_string();
    assert!(err.contains("health.repeat_after: must be longer than 0"), "{err}");
    let err = parse("[health]\ndrain_xids = [-1]\n").unwrap_err().to_string();
    assert!(err.contains("drain_xids"), "{err}");
    let err = parse("[health]\ndrain_xid = [79]\n").unwrap_err().to_string();
    assert!(err.contains("drain_xid"), "{err}");
}

#[test]
fn initial_above_cap_is_refused() {
    let err = parse("cap = 50\n").unwrap_err().to_string();
    assert!(err.contains("initial") && err.contains("cap"), "{err}");
}

fn lenient(text: &str) -> (Config, Vec<Problem>) {
    Config::parse_lenient(text, Path::new("test.toml"))
}

/// The problems' keys, in order.
fn keys(problems: &[Problem]) -> Vec<&str> {
    problems.iter().map(|p| p.key.as_str()).collect()
}

#[test]
fn the_shipped_example_is_valid_in_both_modes_and_reads_the_same() {
    let strict = parse(EXAMPLE).expect("valid");
    let (lenient, problems) = lenient(EXAMPLE);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(format!("{strict:?}"), format!("{lenient:?}"));
    assert!(EXAMPLE.contains("\n[admission]\n"), "the example documents [admission]");
    // A first config: shadow mode, every other [admission] key at its default.
    let shadow = Admission { enforce: false, ..Admission::default() };
    assert_eq!(strict.admission, shadow, "every other [admission] key in the example is at its default");
    let empty = Config::defaults(Path::new("test.toml"));
    assert_eq!(format!("{:?}", parse("").unwrap()), format!("{empty:?}"));
}

#[test]
fn one_bad_key_is_an_error_in_strict_and_a_problem_with_its_default_in_lenient() {
    for (text, key) in [
        ("daily = 2\n[intervals]\ncheck = \"often\"\n", "intervals.check"),
        ("[admission]\non_error = \"maybe\"\nmode = \"estimate\"\n", "admission.on_error"),
        ("[paths]\nsnapshot = \"relative\"\nsocket = \"/s.sock\"\n", "paths.snapshot"),
        ("[preemption]\nbusy_percent = 120\nmax_per_cycle = 2\n", "preemption.busy_percent"),
        ("dayly = 2\ndaily = 2\n", "dayly"),
    ] {
        let Err(ConfigError::Invalid { key: named, .. }) = parse(text) else { panic!("{text}: not refused") };
        assert_eq!(named, key, "{text}");
        let (config, problems) = lenient(text);
        assert_eq!(keys(&problems), [key], "{text}");
        let d = Config::defaults(Path::new("test.toml"));
        assert_eq!(config.intervals.check, d.intervals.check);
        assert_eq!(config.admission.on_error, d.admission.on_error);
        assert_eq!(config.paths.snapshot, d.paths.snapshot);
        assert_eq!(config.preemption.busy_percent, d.preemption.busy_percent);
    }
    let (config, _) = lenient("daily = 2\n[intervals]\ncheck = \"often\"\n");
    assert_eq!(config.daily, Tokens::whole(2), "the rest of the file still applies");
    let (config, _) = lenient("[admission]\non_error = \"maybe\"\nmode = \"estimate\"\n");
    assert_eq!(config.admission.mode, crate::config::admission::Mode::Estimate);
    let (config, _) = lenient("[paths]\nsnapshot = \"relative\"\nsocket = \"/s.sock\"\n");
    assert_eq!(config.paths.socket, PathBuf::from("/s.sock"));
}

#[test]
fn lenient_problems_say_what_is_used_instead() {
    let (_, problems) = lenient("[admission]\nmax_snapshot_age = \"soon\"\n");
    assert_eq!(
        problems[0].to_string(),
        "test.toml: admission.max_snapshot_age: expected a duration such as \"2h\" or \"off\", got \"soon\"; using \
         the default 2h"
    );
    let err = parse("[admission]\nmax_snapshot_age = \"soon\"\n").unwrap_err().to_string();
    assert_eq!(
        err,
        "test.toml: admission.max_snapshot_age: expected a duration such as \"2h\" or \"off\", got \"soon\""
    );
    let (config, problems) = lenient("cap = 50\n");
    assert_eq!((config.initial, keys(&problems)), (Tokens::whole(50), vec!["initial"]));
    let (config, problems) = lenient("[usage]\nsource = \"prometheus\"\n[agent]\nauth = \"token\"\n");
    assert_eq!((config.utilization.source, config.agent.auth), (UtilizationSource::Agents, AgentAuth::Munge));
    assert_eq!(keys(&problems), ["agent.auth", "usage.source"]);
}

#[test]
fn prometheus_is_typed_and_checked_when_the_file_loads() {
    let c = parse("[usage]\nsource = \"prometheus\"\n[prometheus]\nurl = \"http://127.0.0.1:9090\"\n").unwrap();
    let source = c.utilization.prometheus_source().expect("the source");
    assert_eq!(source, &Prometheus::at("http://127.0.0.1:9090"));
    assert_eq!((source.job_label.as_str(), source.timeout), ("hpc_job", Duration::from_secs(10)));
    assert_eq!(
        source.query_for(Duration::from_secs(3600)),
        r#"avg by (hpc_job) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{hpc_job!=""}[3600s]))"#
    );
    assert!(source.query_for(Duration::from_millis(1500)).contains("[1500ms]"));
    let text = "[prometheus]\nurl = \"http://prom:9090/prometheus\"\nquery = \"up[$window]\"\njob_label = \"job\"\n\
                timeout = \"2s\"\n";
    let c = parse(text).unwrap();
    assert_eq!(c.utilization.prometheus_source(), None, "[usage] source is still the agents");
    let kept = c.utilization.prometheus.expect("the table is read whatever the source");
    assert_eq!((kept.url.as_str(), kept.query.as_str()), ("http://prom:9090/prometheus", "up[$window]"));
    assert_eq!((kept.job_label.as_str(), kept.timeout), ("job", Duration::from_secs(2)));
    for url in ["http://[::1]:9090", "HTTP://prom", "http://user@prom:9090/"] {
        assert!(parse(&format!("[prometheus]\nurl = \"{url}\"\n")).is_ok(), "{url}");
    }

    for (text, key, reason) in [
        ("url = \"ftp://x\"", "prometheus.url", "'ftp://x' is not a usable http:// URL (the scheme must be http)"),
        ("url = \"127.0.0.1:9090\"", "prometheus.url", "(no scheme: it starts with http://)"),
        ("url = \"http://\"", "prometheus.url", "(no host)"),
        ("url = \"not a url\"", "prometheus.url", "(no scheme"),
        ("url = \"https://prom:9090\"", "prometheus.url", "(https is not supported by this build; use http://)"),
        ("url = \"http://prom:port\"", "prometheus.url", "(the port is not a number"),
        ("url = \"http://pr om\"", "prometheus.url", "(it holds a space"),
        ("query = \"up\"", "prometheus.url", "missing"),
        ("url = \"http://h\"\ntimeout = \"soon\"", "prometheus.timeout", "'soon' is not a duration like \"10s\""),
        ("url = \"http://h\"\ntimeout = \"0s\"", "prometheus.timeout", "must be longer than 0"),
        ("url = \"http://h\"\njob_label = \" \"", "prometheus.job_label", "must not be empty"),
        ("url = \"http://h\"\nqurey = \"up\"", "prometheus.qurey", "unknown field `qurey`"),
    ] {
        let text = format!("[usage]\nsource = \"prometheus\"\n[prometheus]\n{text}\n");
        let Err(ConfigError::Invalid { key: named, reason: why, .. }) = parse(&text) else { panic!("{text}: valid") };
        assert_eq!(named, key, "{text}");
        assert!(why.contains(reason), "{text}: {why}");
    }
    let err = parse("prometheus = 3\n").unwrap_err().to_string();
    assert!(err.contains("prometheus: expected a table ([prometheus]), got 3"), "{err}");

    // Leniently, a [prometheus] without a usable url is left out, and the source falls back to the agents.
    let (c, problems) = lenient("[usage]\nsource = \"prometheus\"\n[prometheus]\nurl = \"ftp://x\"\n");
    assert_eq!((c.utilization.source, c.utilization.prometheus), (UtilizationSource::Agents, None));
    assert_eq!(keys(&problems), ["prometheus.url", "usage.source"]);
    assert!(problems[0].to_string().ends_with("; ignoring [prometheus]"), "{problems:?}");
    let (c, problems) = lenient("[prometheus]\nurl = \"http://h\"\ntimeout = \"soon\"\n");
    assert_eq!(c.utilization.prometheus.unwrap().timeout, Duration::from_secs(10));
    assert!(problems[0].to_string().ends_with("; using the default 10s"), "{problems:?}");
}

#[test]
fn one_resolver_of_the_file_an_option_then_the_environment_then_the_default() {
    let (option, env) = (Some(Path::new("/opt/g.toml")), Some(std::ffi::OsStr::new("/env/g.toml")));
    assert_eq!(resolve_path(option, env), PathBuf::from("/opt/g.toml"));
    assert_eq!(resolve_path(None, env), PathBuf::from("/env/g.toml"));
    assert_eq!(resolve_path(None, None), PathBuf::from(DEFAULT_PATH));
    let empty = Some(std::ffi::OsStr::new(""));
    assert_eq!(resolve_path(Some(Path::new("")), env), PathBuf::from("/env/g.toml"), "an empty option is none");
    assert_eq!(resolve_path(None, empty), PathBuf::from(DEFAULT_PATH), "an empty variable is none");
}

#[test]
fn reads_paths_and_admission() {
    let text = "floor = -10\n[paths]\nledger = \"/x/l.sqlite\"\nsnapshot = \"/tmp/s/balances.snapshot\"\n\
                [admission]\nnice_increment = 500\non_error = \"reject\"\nmax_snapshot_age = \"90m\"\n";
    let c = parse(text).unwrap();
    assert_eq!(c.paths.snapshot, PathBuf::from("/tmp/s/balances.snapshot"));
    assert_eq!(c.paths.admin_journal, PathBuf::from("/x/admin-journal.jsonl"), "the journal follows the ledger");
    let moved = parse("[paths]\nledger = \"/x/l.sqlite\"\nadmin_journal = \"/backup/j.jsonl\"\n").unwrap();
    assert_eq!(moved.paths.admin_journal, PathBuf::from("/backup/j.jsonl"));
    let err = parse("[paths]\nadmin_journal = \"j.jsonl\"\n").unwrap_err().to_string();
    assert!(err.contains("paths.admin_journal") && err.contains("absolute"), "{err}");
    assert_eq!(
        c.admission,
        Admission {
            deprioritize: Deprioritize::Nice(500),
            on_error: OnError::Reject,
            max_snapshot_age: Some(Duration::from_secs(5400)),
            ..Admission::default()
        }
    );
    assert_eq!(parse("[admission]\nmax_snapshot_age = \"off\"\n").unwrap().admission.max_snapshot_age, None);
}

#[test]
fn limits_estimate_deprioritization_and_exemptions() {
    let text = "[admission]\nmode = \"estimate\"\ndeprioritize = \"site_factor\"\nsite_factor = -500\n\
                default_time_limit = \"4h\"\nmax_gpus_per_user = 8\nmax_job_duration = \"2d\"\n\
                [exempt]\nusers = [\"root\", \"ops\"]\naccounts = [\"Admin\"]\nqos = [\"urgent\"]\n";
    let c = parse(text).unwrap();
    let a = &c.admission;
    assert_eq!(a.mode, Mode::Estimate);
    assert_eq!(a.deprioritize, Deprioritize::SiteFactor(-500));
    assert_eq!(a.default_time_limit, Duration::from_secs(4 * 3600));
    assert_eq!(a.max_gpus_per_user, Some(8));
    assert_eq!(a.max_job_duration, Some(Duration::from_secs(2 * 86400)));
    assert_eq!(c.exempt.users, ["root", "ops"]);
    assert_eq!((c.exempt.accounts.len(), c.exempt.qos.len()), (1, 1));
    assert_eq!(c.exempt.accounts, ["admin"], "Slurm's name for the account Admin");
    let c = parse("[admission]\ndeprioritize = \"qos\"\nqos = \"overdraft\"\n").unwrap();
    assert_eq!(c.admission.deprioritize, Deprioritize::Qos("overdraft".into()));
    let (c, problems) = lenient("[admission]\ndeprioritize = \"qos\"\nnice_increment = 7\n");
    assert_eq!(c.admission.deprioritize, Deprioritize::Nice(7));
    assert!(
        problems[0].to_string().starts_with("test.toml: admission.qos: deprioritize = \"qos\" needs qos"),
        "{problems:?}"
    );
}

#[test]
fn bad_limits_are_named() {
    let text = "[admission]\nmode = \"guess\"\ndeprioritize = \"hope\"\nsite_factor = 1e3\nqos = \"a,b\"\n\
                default_time_limit = \"off\"\nmax_gpus_per_user = 0\nmax_job_duration = \"long\"\n\
                [exempt]\nusers = \"root\"\nqos = [1]\n";
    let (c, problems) = lenient(text);
    assert_eq!(c.admission, Admission::default());
    assert_eq!(c.exempt, Exempt::default());
    let mut named = keys(&problems);
    named.sort();
    assert_eq!(
        named,
        [
            "admission.default_time_limit",
            "admission.deprioritize",
            "admission.max_gpus_per_user",
            "admission.max_job_duration",
            "admission.mode",
            "admission.qos",
            "admission.site_factor",
            "exempt.qos",
            "exempt.users",
        ]
    );
    assert_eq!(c.admission.deprioritize, Deprioritize::Nice(DEFAULT_NICE_INCREMENT));
    assert_eq!(DEFAULT_SITE_FACTOR, -10_000);
}

#[test]
fn each_bad_key_is_named_and_keeps_its_default() {
    let text = "[paths]\nsnapshot = \"relative/path\"\n[admission]\nnice_increment = -1\non_error = \"maybe\"\n\
                max_snapshot_age = \"soon\"\nadmision = 1\n";
    let (c, problems) = lenient(text);
    assert_eq!(c.admission, Admission::default());
    assert_eq!(c.paths.snapshot, PathBuf::from(DEFAULT_SNAPSHOT));
    assert_eq!(
        keys(&problems),
        [
            "paths.snapshot",
            "admission.nice_increment",
            "admission.on_error",
            "admission.max_snapshot_age",
            "admission.admision"
        ]
    );
    assert!(problems[4].to_string().contains("admission.admision: unknown field `admision` (known: mode, "));
    let (c, problems) = lenient("[admission]\nnice_increment = 3000000000\non_error = \"reject\"\n");
    assert_eq!(
        (c.admission.deprioritize, c.admission.on_error),
        (Deprioritize::Nice(DEFAULT_NICE_INCREMENT), OnError::Reject)
    );
    assert_eq!(problems.len(), 1);
}

#[test]
fn broken_or_missing_file_gives_defaults() {
    let d = format!("{:?}", Config::defaults(Path::new("test.toml")));
    let (c, problems) = lenient("this is [not toml");
    assert_eq!(format!("{c:?}"), d);
    assert!(problems[0].to_string().starts_with("test.toml: not valid TOML"), "{problems:?}");
    assert!(problems[0].concerns("paths.socket"));
    let missing = Path::new("/nonexistent/gputokens.toml");
    let (c, problems) = Config::load_lenient(missing);
    assert_eq!(c.admission, Admission::default());
    assert!(problems[0].to_string().starts_with("/nonexistent/gputokens.toml: cannot read: "), "{problems:?}");
    assert!(problems[0].to_string().ends_with("; using the defaults"), "{problems:?}");
    assert!(problems[0].is_missing_file() && problems[0].concerns("paths.socket"));
    let dir = tempfile::tempdir().unwrap();
    let (_, problems) = Config::load_lenient(dir.path());
    assert!(problems[0].to_string().contains(": cannot read: "), "{problems:?}");
    assert!(!problems[0].is_missing_file(), "a directory is there, but unreadable as a file");
    let (_, problems) = lenient("this is [not toml");
    assert!(!problems[0].is_missing_file());
    let (_, problems) = lenient("admission = 3\n");
    assert!(problems[0].to_string().starts_with("test.toml: admission: expected a table"), "{problems:?}");
    assert!(problems[0].concerns("admission.mode") && !problems[0].concerns("paths.socket"));
}

#[test]
fn the_example_states_the_admission_defaults() {
    let c = parse(EXAMPLE).unwrap();
    assert_eq!(c.admission.on_error, OnError::default());
    assert_eq!(c.admission.max_snapshot_age, Some(DEFAULT_MAX_SNAPSHOT_AGE));
}

#[test]
fn exempt_covers_a_user_an_account_or_a_qos() {
    let exempt = Exempt { users: vec!["alice".into()], accounts: vec!["ops".into()], qos: vec!["urgent".into()] };
    let job = |user, account, default_account, qos| JobIdentity { user, account, default_account, qos };
    assert!(exempt.covers(&job(Some("alice"), None, None, None)));
    assert!(exempt.covers(&job(Some("bob"), Some("ops"), None, None)), "the job's account");
    assert!(exempt.covers(&job(Some("bob"), None, Some("ops"), None)), "without -A: the default account");
    assert!(!exempt.covers(&job(Some("bob"), Some("physics"), Some("ops"), None)), "-A wins over the default");
    assert!(exempt.covers(&job(None, None, None, Some("urgent"))));
    assert!(!exempt.covers(&job(None, None, None, None)), "nothing known: not exempt");
    assert!(!exempt.covers(&job(Some("bob"), Some("physics"), None, Some("normal"))));
    // 24.11's QOS lists: exempt only if every QOS the job may run in is.
    assert!(!exempt.covers(&job(None, None, None, Some("urgent,normal"))));
    assert!(!exempt.covers(&job(None, None, None, Some("normal,urgent"))));
    let two = Exempt { qos: vec!["urgent".into(), "ops".into()], ..exempt.clone() };
    assert!(two.covers(&job(None, None, None, Some("ops,urgent"))));
    assert!(!two.covers(&job(None, None, None, Some("ops,"))), "an empty name is not exempt");
}

#[test]
fn notify_is_off_by_default_and_its_keys_are_checked() {
    let n = parse("").unwrap().notify;
    assert!(!n.enabled());
    assert_eq!(n, super::Notify::default());
    assert_eq!(parse(EXAMPLE).unwrap().notify, super::Notify::default(), "the example states the defaults");
    let text = "[notify]\ncommand = [\"/usr/local/sbin/gputokens-notify\", \"--site\", \"x\"]\nwarn_below = 2.5\n\
                timeout = \"5s\"\n";
    let n = parse(text).unwrap().notify;
    assert_eq!(n.command, ["/usr/local/sbin/gputokens-notify", "--site", "x"]);
    assert_eq!(n.warn_below, crate::Tokens::from_micro(2_500_000));
    assert_eq!(n.timeout, Duration::from_secs(5));
    for (bad, key) in [
        ("command = \"/usr/bin/mail\"", "notify.command: expected a list of strings"),
        ("command = [\"mail\"]", "notify.command: the program must be an absolute path"),
        ("command = [\"/usr/bin/mail\", \"\"]", "notify.command: an argument is empty"),
        ("warn_below = -1", "notify.warn_below: must not be negative"),
        ("timeout = \"0s\"", "notify.timeout: must be longer than 0"),
        ("mail_prog = \"/usr/bin/mail\"", "notify.mail_prog: unknown field"),
    ] {
        let err = parse(&format!("[notify]\n{bad}\n")).unwrap_err().to_string();
        assert!(err.contains(key), "{bad}: {err}");
        let (config, problems) = lenient(&format!("[notify]\n{bad}\n"));
        assert_eq!(keys(&problems).len(), 1, "{bad}: {problems:?}");
        assert_eq!(config.notify, super::Notify::default(), "{bad}");
    }
}

#[test]
fn web_defaults_and_bad_values_are_named() {
    let w = parse("").unwrap().web;
    assert_eq!(w, super::Web::default());
    assert_eq!(parse(EXAMPLE).unwrap().web, super::Web::default(), "the example states the defaults");
    let text = "[web]\nurl = \"https://gputokens.example.org/\"\nlink_ttl = \"2m\"\nsession_ttl = \"1h\"\n\
                trusted_proxies = [\"10.0.0.5\", \"::1\"]\nuser_header = \"X-Forwarded-User\"\n\
                proxy_secret_file = \"/etc/slurm/gputokens-proxy.secret\"\n";
    let w = parse(text).unwrap().web;
    assert_eq!(w.url.as_deref(), Some("https://gputokens.example.org"));
    assert_eq!((w.link_ttl.as_secs(), w.session_ttl.as_secs()), (120, 3600));
    assert_eq!(w.trusted_proxies.len(), 2);
    assert_eq!(w.user_header, "X-Forwarded-User");
    for (bad, says) in [
        ("url = \"gputokens.example.org\"", "web.url: expected http://host[:port]"),
        ("url = \"javascript:alert(1)\"", "web.url: expected http://host[:port]"),
        (
            "trusted_proxies = [\"proxy.example.org\"]",
            "web.trusted_proxies: \"proxy.example.org\" is not an IP address",
        ),
        ("user_header = \"X Remote\"", "web.user_header: \"X Remote\" is not an HTTP header name"),
        ("trusted_proxies = [\"10.0.0.5\"]", "web.trusted_proxies: needs web.proxy_secret_file"),
        ("proxy_secret_file = \"relative\"", "web.proxy_secret_file"),
        ("link_ttl = \"0s\"", "web.link_ttl: must be longer than 0"),
    ] {
        let err = parse(&format!("[web]\n{bad}\n")).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
        let (config, problems) = lenient(&format!("[web]\n{bad}\n"));
        assert_eq!(problems.len(), 1, "{bad}");
        assert_eq!(config.web, super::Web::default(), "{bad}");
    }
}

#[test]
fn controller_status_follows_the_snapshot_unless_set() {
    assert_eq!(
        Config::defaults(Path::new("t")).paths.controller_status,
        PathBuf::from("/var/lib/gputokens/controllers")
    );
    let moved = parse("[paths]\nsnapshot = \"/shared/gputokens/balances.snapshot\"\n").unwrap();
    assert_eq!(moved.paths.controller_status, PathBuf::from("/shared/gputokens/controllers"));
    let set = parse("[paths]\ncontroller_status = \"/shared/status\"\n").unwrap();
    assert_eq!(set.paths.controller_status, PathBuf::from("/shared/status"));
    let err = parse("[paths]\ncontroller_status = \"status\"\n").unwrap_err().to_string();
    assert!(err.starts_with("test.toml: paths.controller_status: "), "{err}");
    let (config, problems) = lenient("[paths]\nsnapshot = \"/s/b.snapshot\"\ncontroller_status = 3\n");
    assert_eq!(keys(&problems), ["paths.controller_status"]);
    assert_eq!(config.paths.controller_status, PathBuf::from("/s/controllers"), "the default beside the snapshot");
}

#[test]
fn ondemand_is_off_unless_the_site_says_where_and_who_reads_it() {
    assert_eq!(parse("").unwrap().ondemand, None);
    let group =
        parse("[ondemand]\nbalance_file = \"/var/lib/ood/b.json\"\ngroup = \"ood\"\nunit = \"tokens\"\n").unwrap();
    let set = group.ondemand.unwrap();
    assert_eq!(
        (set.balance_file, set.unit, set.project_type, set.readers),
        (
            PathBuf::from("/var/lib/ood/b.json"),
            "tokens".into(),
            "account".into(),
            super::OnDemandReaders::Group("ood".into())
        )
    );
    let everyone = parse("[ondemand]\nbalance_file = \"/b.json\"\nworld_readable = true\n").unwrap();
    assert_eq!(everyone.ondemand.unwrap().readers, super::OnDemandReaders::Everyone);
    for (bad, key) in [
        ("[ondemand]\nbalance_file = \"/b.json\"\n", "ondemand.balance_file"),
        ("[ondemand]\nbalance_file = \"/b.json\"\ngroup = \"g\"\nworld_readable = true\n", "ondemand.group"),
        ("[ondemand]\ngroup = \"g\"\n", "ondemand.balance_file"),
        ("[ondemand]\nbalance_file = \"b.json\"\nworld_readable = true\n", "ondemand.balance_file"),
    ] {
        let (config, problems) = lenient(bad);
        assert_eq!(keys(&problems), [key], "{bad}");
        assert_eq!(config.ondemand, None, "{bad}");
    }
}

/// The newcomer review: a typo got the whole list of known names, never the one meant.
#[test]
fn unknown_keys_and_tables_name_the_nearest_known_one() {
    let err = |text: &str| parse(text).unwrap_err().to_string();
    assert!(
        err("inital = 100\n").ends_with("inital: unknown field `inital`: did you mean `initial`?"),
        "{}",
        err("inital = 100\n")
    );
    assert!(
        err("[intervals]\ncharg = \"1h\"\n").contains("intervals.charg: unknown field `charg`: did you mean `charge`?")
    );
    assert!(err("[price]\na6000 = 4\n").contains("price: unknown table `[price]`: did you mean `[prices]`?"));
    assert!(err("[admision]\nmode = \"balance\"\n").contains("unknown table `[admision]`: did you mean `[admission]`?"));
    assert!(err("[admission]\nMode = \"balance\"\n").contains("did you mean `mode`?"), "case alone");
    // Nothing near: the known names, as before.
    let far = err("[intervals]\nfrequency = \"1h\"\n");
    assert!(far.contains("unknown field `frequency` (known: charge, check)"), "{far}");
    assert!(
        err("[nonsense]\nx = 1\n").contains("unknown table `[nonsense]` (known: "),
        "{}",
        err("[nonsense]\nx = 1\n")
    );
}

#[test]
fn a_signal_scancel_does_not_know_is_a_warning() {
    for good in ["USR1", "SIGUSR2", "sigterm", "Cont", "XCPU", "10", " KILL "] {
        let config = parse(&format!("[preemption]\nsignal = \"{good}\"\n")).unwrap_or_else(|e| panic!("{good}: {e}"));
        assert_eq!(config.preemption.signal.as_deref(), Some(good.trim()));
        assert!(!advice::advice(&config).iter().any(|a| a.keys == "preemption.signal"), "{good}");
    }
    assert_eq!(parse("[preemption]\nsignal = \"\"\n").unwrap().preemption.signal, None);
    // A file that started accountd before still does: an unknown name is a warning.
    for unknown in ["SIGFOO", "USR3", "SEGV", "0", "65"] {
        let config = parse(&format!("[preemption]\nsignal = \"{unknown}\"\n")).unwrap();
        let warned = advice::advice(&config);
        let warning = warned.iter().find(|a| a.keys == "preemption.signal").unwrap_or_else(|| panic!("{unknown}"));
        assert!(warning.text.contains(&format!("'{unknown}' is not a signal scancel is known to take (HUP, INT")));
    }
    let err = parse("[preemption]\nsignal = \"USR1@60\"\n").unwrap_err().to_string();
    assert!(err.contains("preemption.signal: 'USR1@60' is not a signal name like \"USR1\""), "{err}");
}

#[test]
fn a_socket_path_longer_than_a_unix_address_holds_is_refused() {
    let at = |len: usize| format!("/{}", "s".repeat(len - 1));
    assert_eq!(parse(&format!("[paths]\nsocket = \"{}\"\n", at(107))).unwrap().paths.socket.as_os_str().len(), 107);
    let err = parse(&format!("[paths]\nsocket = \"{}\"\n", at(108))).unwrap_err().to_string();
    assert!(
        err.contains("paths.socket: ") && err.contains(" is 108 bytes: a Unix socket's path holds at most 107"),
        "{err}"
    );
    let err = parse(&format!("[agent]\nmunge_socket = \"{}\"\n", at(120))).unwrap_err().to_string();
    assert!(err.contains("agent.munge_socket: ") && err.contains(" is 120 bytes"), "{err}");
}

/// The agents post with an HTTP client that has no TLS: checked as `[prometheus] url` is (without a
/// port, http's 80: a proxy in front of accountd).
#[test]
fn report_to_is_an_http_url_with_a_host() {
    for good in [
        "http://gpu-head:9817",
        "http://10.0.0.5:9817/",
        "http://[fd00::5]:9817",
        "HTTP://gpu-head:9817",
        "http://gpu-head",
        "https://gpu-head:9817",
    ] {
        let config = parse(&format!("[agent]\nreport_to = \"{good}\"\n")).unwrap_or_else(|e| panic!("{good}: {e}"));
        assert_eq!(config.agent.report_to, [good]);
    }
    for (bad, why) in [
        ("ftp://gpu-head:9817", "the scheme must be http"),
        ("https://:9817", "no host"),
        ("gpu-head 9817", "no scheme"),
        ("http://:9817", "no host"),
        ("http://gpu-head:98170", "the port is not a number"),
    ] {
        let err = parse(&format!("[agent]\nreport_to = \"{bad}\"\n")).unwrap_err().to_string();
        assert!(err.contains("agent.report_to: ") && err.contains(why), "{bad}: {err}");
    }
    // A pair's two accountd hosts, each checked.
    let pair = parse("[agent]\nreport_to = [\"http://ctl1:9817\", \"http://ctl2:9817\"]\n").unwrap();
    assert_eq!(pair.agent.report_to, ["http://ctl1:9817", "http://ctl2:9817"]);
    for (list, why) in [("[]", "at least one URL"), ("[\"http://ctl1:9817\", \"ftp://x\"]", "the scheme must be http")]
    {
        let err = parse(&format!("[agent]\nreport_to = {list}\n")).unwrap_err().to_string();
        assert!(err.contains("agent.report_to: ") && err.contains(why), "{list}: {err}");
    }
}

#[test]
fn a_mig_type_is_listed_quoted_and_an_unquoted_one_is_named() {
    let cfg = parse("[prices]\na100 = 4\n\"A100_3g.20gb\" = 1\n").unwrap();
    assert_eq!(cfg.prices.price("a100_3g.20gb"), Some(Tokens::whole(1)));
    let err = parse("[prices]\na100 = 4\na100_3g.20gb = 1\n").unwrap_err().to_string();
    assert_eq!(
        err,
        "test.toml: prices.a100_3g: a GPU type with a dot (a MIG slice) must be quoted: \"a100_3g.20gb\" = 1"
    );
    let err = parse("[prices]\na100_1c.3g.20gb = 0.5\n").unwrap_err().to_string();
    assert!(err.ends_with("must be quoted: \"a100_1c.3g.20gb\" = 0.5"), "{err}");
    let err = parse("[prices]\n[prices.a100]\nx = 1\ny = 2\n").unwrap_err().to_string();
    assert!(err.ends_with("prices.a100: expected a number, got { x = 1, y = 2 }"), "{err}");
}

#[test]
fn the_ledgers_mariadb_url_names_user_and_database_and_never_a_password() {
    let c =
        parse("[ledger]\nurl = \"mariadb://gputokens@db1:3306/gputokens\"\npassword_file = \"/etc/gputokens/db\"\n")
            .unwrap();
    assert_eq!(c.ledger.url.as_deref(), Some("mysql://gputokens@db1:3306/gputokens"));
    assert_eq!(c.ledger.password_file.as_deref(), Some(std::path::Path::new("/etc/gputokens/db")));
    assert_eq!(parse("").unwrap().ledger, LedgerDatabase::default(), "SQLite unless set");
    for (url, why) in [
        ("mysql://gputokens:hunter2@db1/gputokens", "must not hold a password: put it in [ledger] password_file"),
        ("mysql://db1/gputokens", "must name the user"),
        ("mysql://gputokens@db1", "must name the database"),
        ("mysql://gputokens@db1/?socket=/run/mysqld/mysqld.sock", "must name the database"),
        ("postgres://gputokens@db1/gputokens", "must be mysql://USER@HOST/DATABASE"),
    ] {
        let err = parse(&format!("[ledger]\nurl = \"{url}\"\n")).unwrap_err().to_string();
        assert!(err.contains("ledger.url") && err.contains(why), "{url}: {err}");
        assert!(!err.contains("hunter2"), "the password is never repeated: {err}");
    }
    let err = parse("[ledger]\npassword_file = \"db-password\"\n").unwrap_err().to_string();
    assert!(err.contains("ledger.password_file") && err.contains("absolute"), "{err}");
}

#[test]
fn clusters_sharing_a_ledger_key_the_jobs_of_all_but_the_first_by_cluster() {
    let ledger = "[ledger]\nurl = \"mysql://gputokens@db1/gputokens\"\n";
    let first = parse(&format!("{ledger}[clusters]\nnames = [\"Old\", \"new\"]\n")).unwrap().clusters;
    assert_eq!((first.local(), first.job_prefix()), (Some("old"), None), "Slurm's cluster names are lower-case");
    assert_eq!((first.job_key("12"), first.lease_name()), ("12".to_string(), ""), "the ledger's own lease");
    assert_eq!((first.job_key("old:12"), first.job_key("new:12")), ("12".to_string(), "new:12".to_string()));
    assert_eq!(first.job_key("OLD:12"), "12", "cluster names are case-blind");
    let second = parse(&format!("{ledger}[clusters]\nnames = [\"old\", \"new\"]\nlocal = \"new\"\n")).unwrap().clusters;
    assert_eq!(
        (second.job_key("12"), second.job_key("old:12"), second.lease_name()),
        ("new:12".into(), "12".into(), "new")
    );
    assert_eq!((second.job_shown("12"), second.job_shown("new:12")), ("old:12".into(), "new:12".into()));
    let alone = parse("").unwrap().clusters;
    assert_eq!(alone.job_shown("12"), "12");
    assert_eq!((alone.job_key("12"), alone.lease_name()), ("12".to_string(), ""), "one cluster: keys as ever");
    for (table, why) in [
        ("names = [\"a\", \"b\"]\nlocal = \"c\"", "clusters.local: \"c\" is not one of names"),
        ("names = [\"a\", \"a b\"]", "\"a b\" is not a Slurm cluster name"),
        ("names = [\"a\", \"a\"]", "\"a\" is named twice"),
    ] {
        let err = parse(&format!("{ledger}[clusters]\n{table}\n")).unwrap_err().to_string();
        assert!(err.contains(why), "{table}: {err}");
    }
    let err = parse("[clusters]\nnames = [\"a\", \"b\"]\n").unwrap_err().to_string();
    assert!(err.contains("clusters.names") && err.contains("MariaDB"), "{err}");
}
