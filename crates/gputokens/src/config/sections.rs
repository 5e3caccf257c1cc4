//! The file's keys, table by table: what each may hold, its default and the checks that span
//! keys. The same code serves the strict and the lenient reader.

use std::collections::BTreeMap;
use std::path::Path;

use super::reader::Section;
use super::values::{
    absolute_path, accountd_urls, amount, any_duration, boolean, command_argv, header_name, host_names, ip_addresses,
    listen_address, mariadb_url, names, non_negative_amount, number, number_in, path, positive_duration,
    prometheus_url, query_timeout, report_urls, signal_name, socket_path, string, strings, web_url, whole, whole_from,
    whole_seconds, whole_seconds_or_off, xids,
};
use super::{
    AccountdAddress, Accounts, Admins, Admission, AgentAuth, AgentConfig, AtFloor, ChargeBasis, Clusters, Config,
    Exempt, Health, HttpAccess, Intervals, LedgerDatabase, Notify, OnDemand, OnDemandReaders, Paths, PreemptAction,
    Preemption, Problem, Prometheus, Refunds, SlurmTools, TlsFiles, UtilizationConfig, UtilizationSource, Web,
    DEFAULT_PROMETHEUS_JOB_LABEL, DEFAULT_PROMETHEUS_QUERY, DEFAULT_PROMETHEUS_TIMEOUT,
};
use crate::config::admission::OnError;
use crate::config::admission::{Deprioritize, Mode, DEFAULT_NICE_INCREMENT, DEFAULT_SITE_FACTOR, MAX_NICE};
use crate::config::Lending;
use crate::policy::BucketRules;
use crate::pools::PoolMode;
use crate::pricing::PriceTable;
use crate::refunds::RefundCause;
use crate::stranding::Part;
use crate::tokens::Tokens;

const DEFAULT_INITIAL: Tokens = Tokens::whole(100);
const DEFAULT_DAILY: Tokens = Tokens::whole(1);
const DEFAULT_MONTHLY: Tokens = Tokens::whole(30);
const DEFAULT_FLOOR: Tokens = Tokens::whole(-10);
const DEFAULT_SLURM_USER: &str = "slurm";
const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:9817";

/// The configuration `table` states, and its problems in the order found.
pub(super) fn read(table: &toml::Table, path: &Path) -> (Config, Vec<Problem>) {
    let mut top = Section::top(table, path);
    let defaults = BucketRules {
        initial: DEFAULT_INITIAL,
        daily: DEFAULT_DAILY,
        monthly: DEFAULT_MONTHLY,
        cap: None,
        floor: DEFAULT_FLOOR,
    };
    let user_rules = bucket(&mut top, defaults);
    let BucketRules { initial, daily, monthly, cap, floor } = user_rules;
    let default_price = top.optional("default_price", non_negative_amount);
    let (prices, per_kwh, stranded) = top.table("prices", prices);
    let balances_public = top.get("balances_public", false, boolean);
    let borrowing = crate::policy::Borrowing {
        limit: top.get("borrow_limit", Tokens::ZERO, non_negative_amount),
        forgive_below: top.get("forgive_below", Tokens::ZERO, non_negative_amount),
    };
    let slurm_user = top.get("slurm_user", DEFAULT_SLURM_USER.to_string(), |v| {
        string(v).and_then(|s| if s.trim().is_empty() { Err("must not be empty".into()) } else { Ok(s) })
    });
    let paths = top.table("paths", paths);
    let ledger = top.table("ledger", |s| LedgerDatabase {
        url: s.optional("url", mariadb_url),
        password_file: s.optional("password_file", absolute_path),
    });
    let admins = top.table("admins", |s| {
        let d = Admins::default();
        Admins { users: s.get("users", d.users, strings), groups: s.get("groups", d.groups, strings) }
    });
    let intervals = top.table("intervals", |s| {
        let d = Intervals::default();
        Intervals {
            charge: s.get("charge", d.charge, positive_duration),
            check: s.get("check", d.check, positive_duration),
        }
    });
    let slurm = top.table("slurm", slurm_tools);
    let (http_listen, http) = top.table("http", http);
    let accountd = top.table("accountd", |s| AccountdAddress {
        urls: s.get("urls", Vec::new(), accountd_urls),
        ca_file: s.optional("ca_file", absolute_path),
    });
    let agent = top.table("agent", agent);
    let prometheus = top.optional_table("prometheus", prometheus).flatten();
    let mut utilization = top.table("usage", utilization);
    if utilization.source == UtilizationSource::Prometheus && prometheus.is_none() {
        let reason = "\"prometheus\" needs a [prometheus] table with its url".to_string();
        top.problem("usage.source", reason, "using \"agents\"");
        utilization.source = UtilizationSource::Agents;
    }
    utilization.prometheus = prometheus;
    let sharing = top.table("sharing", |s| {
        let d = crate::tres::Sharing::default();
        crate::tres::Sharing {
            shards_per_gpu: s.get("shards_per_gpu", d.shards_per_gpu, |v| whole_from(v, 1)),
            mps_per_gpu: s.get("mps_per_gpu", d.mps_per_gpu, |v| whole_from(v, 1)),
        }
    });
    let preemption = top.table("preemption", preemption);
    let lending = top.table("lending", |s| Lending {
        enabled: s.get("enabled", false, boolean),
        at_floor: s.get("at_floor", false, boolean),
        discount_percent: s.get("discount", 0u32, |v| match whole_from::<u32>(v, 0)? {
            n if n <= 100 => Ok(n),
            n => Err(format!("expected a percent from 0 to 100, got {n}")),
        }) as u8,
    });
    let exempt = top.table("exempt", |s| Exempt {
        users: s.get("users", Vec::new(), names),
        // Slurm's account names are case-blind (kept lower-case): `OPS` is the account ops.
        accounts: s.get("accounts", Vec::new(), names).iter().map(|a| crate::pools::slurm_account_name(a)).collect(),
        qos: s.get("qos", Vec::new(), names),
    });
    let health = top.table("health", health);
    let admission = top.table("admission", admission);
    let notify = top.table("notify", notify);
    let web = top.table("web", web);
    let accounts = top.table("accounts", |s| Accounts {
        mode: s.get("mode", PoolMode::default(), |v| {
            let text = string(v)?;
            PoolMode::parse(&text).ok_or_else(|| format!("must be \"user\", \"account\" or \"both\" (got {text:?})"))
        }),
        pool_defaults: bucket(s, user_rules),
    });
    let ondemand = top.optional_table("ondemand", ondemand).flatten();
    let refunds = top.table("refunds", refunds);
    let clusters = top.table("clusters", clusters);
    if clusters.names.len() > 1 && ledger.url.is_none() {
        let reason = "several clusters share a ledger in MariaDB ([ledger] url): a SQLite file is one host's".into();
        top.problem("clusters.names", reason, "charging this host's cluster only");
    }

    let config = Config {
        path: path.to_path_buf(),
        initial,
        daily,
        monthly,
        cap,
        floor,
        prices: PriceTable::new(prices, default_price).with_per_kwh(per_kwh).with_stranded(stranded),
        balances_public,
        borrowing,
        slurm_user,
        paths,
        ledger,
        admins,
        intervals,
        slurm,
        http_listen,
        http,
        accountd,
        agent,
        utilization,
        sharing,
        preemption,
        lending,
        exempt,
        health,
        admission,
        notify,
        web,
        accounts,
        ondemand,
        refunds,
        clusters,
    };
    (config, top.finish())
}

/// A bucket's rules (`initial`, `daily`, `monthly`, `cap`, `floor`) in `s`, each key not given `d`'s.
fn bucket(s: &mut Section, d: BucketRules) -> BucketRules {
    let initial = s.get("initial", d.initial, amount);
    let daily = s.get("daily", d.daily, non_negative_amount);
    let monthly = s.get("monthly", d.monthly, non_negative_amount);
    let floor = s.get("floor", d.floor, |v| {
        let floor = amount(v)?;
        if floor > Tokens::ZERO {
            return Err(format!("must be 0 or below (got {})", number(v)?));
        }
        Ok(floor)
    });
    let cap = s.optional("cap", |v| {
        let cap = amount(v)?;
        if cap < Tokens::ZERO {
            return Err(format!("must not be negative (got {cap})"));
        }
        Ok(cap)
    });
    let cap = cap.or(d.cap);
    let initial = match cap {
        Some(cap) if initial > cap => {
            s.problem("initial", format!("{initial} is above cap {cap}"), &format!("using {cap}"));
            cap
        }
        _ => initial,
    };
    BucketRules { initial, daily, monthly, cap, floor }
}

/// The GPU types' prices per GPU-hour, `per_kwh` (GPU energy's price) and `stranded` (what a job's
/// share of its nodes is counted by); no GPU type has either name.
fn prices(s: &mut Section) -> (BTreeMap<String, Tokens>, Option<Tokens>, Vec<Part>) {
    let mut prices = BTreeMap::new();
    let per_kwh = s.optional(PER_KWH, non_negative_amount).filter(|p| *p > Tokens::ZERO);
    let stranded = s.get(STRANDED, Vec::new(), stranded_parts);
    let entries: Vec<_> = s.entries().filter(|(key, _)| key.as_str() != PER_KWH && key.as_str() != STRANDED).collect();
    for (gpu_type, value) in entries {
        if gpu_type.eq_ignore_ascii_case(PER_KWH) {
            // GPU types match case-blind: `PER_KWH = 1` would price a GPU type, never energy.
            s.problem(gpu_type, format!("the energy price is written `{PER_KWH}`, in lower case"), "ignored");
            continue;
        }
        match non_negative_amount(value) {
            Err(reason) => s.problem(gpu_type, dotted_type(gpu_type, value).unwrap_or(reason), "ignored"),
            Ok(_) if prices.contains_key(&gpu_type.to_lowercase()) => {
                let reason = "listed twice (GPU types match case-insensitively)".to_string();
                s.problem(gpu_type, reason, "ignored")
            }
            Ok(price) => {
                prices.insert(gpu_type.to_lowercase(), price);
            }
        }
    }
    (prices, per_kwh, stranded)
}

/// The key of `[prices]` that prices GPU energy, not a GPU type.
const PER_KWH: &str = "per_kwh";
/// The key of `[prices]` that prices what a job strands, not a GPU type.
const STRANDED: &str = "stranded";

/// `stranded = ["cpus", "memory"]`: each part once, none other.
fn stranded_parts(value: &toml::Value) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    for name in strings(value)? {
        let part = Part::parse(&name).ok_or_else(|| format!("\"{name}\" is not \"cpus\" or \"memory\""))?;
        if parts.contains(&part) {
            return Err(format!("\"{name}\" is listed twice"));
        }
        parts.push(part);
    }
    Ok(parts)
}

/// An unquoted MIG type (`a100_3g.20gb = 1`) is TOML's dotted key, a table `a100_3g` holding
/// `20gb`: the type it meant and how to write it.
fn dotted_type(gpu_type: &str, value: &toml::Value) -> Option<String> {
    let (mut name, mut value) = (gpu_type.to_string(), value);
    while let Some(table) = value.as_table() {
        let [(key, inner)] = table.iter().collect::<Vec<_>>()[..] else { return None };
        (name, value) = (format!("{name}.{key}"), inner);
    }
    (name != gpu_type).then(|| format!("a GPU type with a dot (a MIG slice) must be quoted: \"{name}\" = {value}"))
}

fn paths(s: &mut Section) -> Paths {
    let d = Paths::default();
    let ledger = s.get("ledger", d.ledger, absolute_path);
    let snapshot = s.get("snapshot", d.snapshot, absolute_path);
    // Beside the snapshot unless set: wherever a site moves the snapshot (a directory both
    // controllers share), the status files follow.
    let controller_status = s.get("controller_status", crate::controller_status::default_dir(&snapshot), absolute_path);
    // Beside the ledger unless set: a site that moves the ledger moves the journal's default too.
    let journal = Paths::journal_beside(&ledger);
    let paths = Paths {
        snapshot,
        socket: s.get("socket", d.socket, socket_path),
        controller_status,
        admin_journal: s.get("admin_journal", journal, absolute_path),
        ledger,
    };
    // Two of gputokens' files at one path, or one under another: with the snapshot at the ledger's
    // path the first charge overwrote the ledger (the newcomer review).
    let files = [
        ("ledger", &paths.ledger),
        ("snapshot", &paths.snapshot),
        ("socket", &paths.socket),
        ("admin_journal", &paths.admin_journal),
    ];
    for (i, (key, path)) in files.iter().enumerate() {
        for (other, other_path) in &files[..i] {
            let clash = match () {
                _ if path == other_path => "is the same file as",
                _ if path.starts_with(other_path) => "is inside the file",
                _ if other_path.starts_with(path) => "is a directory of",
                _ => continue,
            };
            let reason = format!("{} {clash} paths.{other}: give each its own path", path.display());
            s.problem(key, reason, "using it all the same");
        }
    }
    paths
}

fn slurm_tools(s: &mut Section) -> SlurmTools {
    let d = SlurmTools::default();
    SlurmTools {
        bin_dir: s.optional("bin_dir", absolute_path),
        first_lookback: s.get("first_lookback", d.first_lookback, positive_duration),
        reread: s.get("reread", d.reread, any_duration),
        sacct_timeout: s.get("sacct_timeout", d.sacct_timeout, positive_duration),
        command_timeout: s.get("command_timeout", d.command_timeout, positive_duration),
    }
}

/// `[http]`: the listen address and who may read what.
fn http(s: &mut Section) -> (Option<std::net::SocketAddr>, HttpAccess) {
    let d = HttpAccess::default();
    let default_listen = DEFAULT_HTTP_LISTEN.parse().ok();
    let listen = s.get("listen", default_listen, listen_address);
    let max_connections = s.get("max_connections", d.max_connections, |v| whole_from(v, 1));
    let per_address = s.get("max_connections_per_address", d.max_connections_per_address, |v| whole_from(v, 1));
    let access = HttpAccess {
        per_user_metrics: s.get("per_user_metrics", d.per_user_metrics, boolean),
        admin_token_file: s.optional("admin_token_file", absolute_path),
        max_connections,
        max_connections_per_address: per_address.min(max_connections),
        request_timeout: s.get("request_timeout", d.request_timeout, positive_duration),
        server_names: s.get("server_names", d.server_names, host_names),
        tls: None,
        remote_writes: s.get("remote_writes", d.remote_writes, boolean),
    };
    let certificate = s.optional("tls_certificate", absolute_path);
    let key = s.optional("tls_key", absolute_path);
    let access = match (certificate, key) {
        (Some(certificate), Some(key)) => HttpAccess { tls: Some(TlsFiles { certificate, key }), ..access },
        (None, None) => access,
        (Some(_), None) => {
            s.problem("tls_certificate", "needs http.tls_key beside it".into(), "listening without TLS");
            access
        }
        (None, Some(_)) => {
            s.problem("tls_key", "needs http.tls_certificate beside it".into(), "listening without TLS");
            access
        }
    };
    (listen, access)
}

fn agent(s: &mut Section) -> AgentConfig {
    let d = AgentConfig::default();
    let mut agent = AgentConfig {
        report_to: s.get("report_to", d.report_to, report_urls),
        // Kept as written; checked here so that the agent can rely on it.
        interval: s.get("interval", d.interval, |v| positive_duration(v).and_then(|_| string(v))),
        nvml_library: s.get("nvml_library", d.nvml_library, path),
        jobs_dir: s.get("jobs_dir", d.jobs_dir, absolute_path),
        listen: s.get("listen", d.listen, string),
        per_job_metrics: s.get("per_job_metrics", d.per_job_metrics, boolean),
        auth: s.choice("auth", d.auth, &[("munge", AgentAuth::Munge), ("token", AgentAuth::Token)]),
        munge_socket: s.optional("munge_socket", socket_path),
        token_file: s.optional("token_file", absolute_path),
        accept_unchecked_origin: s.get("accept_unchecked_origin", d.accept_unchecked_origin, boolean),
        unscheduled_gpus: s.get("unscheduled_gpus", d.unscheduled_gpus, |v| whole_from(v, 0)),
    };
    if agent.auth == AgentAuth::Token && agent.token_file.is_none() {
        s.problem("auth", "\"token\" needs agent.token_file".into(), "using \"munge\"");
        agent.auth = AgentAuth::Munge;
    }
    agent
}

/// `[usage]`, without `[prometheus]` (a table of its own, read before it).
fn utilization(s: &mut Section) -> UtilizationConfig {
    let d = UtilizationConfig::default();
    let sources = [("agents", UtilizationSource::Agents), ("prometheus", UtilizationSource::Prometheus)];
    let bases = [("allocation", ChargeBasis::Allocation), ("measured", ChargeBasis::Measured)];
    UtilizationConfig {
        source: s.choice("source", d.source, &sources),
        charge_basis: s.choice("charge_basis", d.charge_basis, &bases),
        measured_min_fraction: s
            .get("measured_min_fraction", d.measured_min_fraction, |v| number_in(v, 0.0, 1.0, "between 0 and 1")),
        idle_threshold_percent: s
            .get("idle_threshold_percent", d.idle_threshold_percent, |v| number_in(v, 0.0, 100.0, "between 0 and 100")),
        idle_window: s.get("idle_window", d.idle_window, positive_duration),
        idle_command: s.get("idle_command", d.idle_command, strings),
        idle_notify: s.get("idle_notify", d.idle_notify, boolean),
        prometheus: None,
    }
}

/// `[prometheus]`: of no use without its `url` (None then).
fn prometheus(s: &mut Section) -> Option<Prometheus> {
    let url = s.required("url", prometheus_url);
    let query = s.get("query", DEFAULT_PROMETHEUS_QUERY.to_string(), string);
    let job_label = s.get("job_label", DEFAULT_PROMETHEUS_JOB_LABEL.to_string(), |v| {
        string(v).and_then(|label| if label.trim().is_empty() { Err("must not be empty".into()) } else { Ok(label) })
    });
    let timeout = s.get("timeout", DEFAULT_PROMETHEUS_TIMEOUT, query_timeout);
    Some(Prometheus { url: url?, query, job_label, timeout })
}

fn preemption(s: &mut Section) -> Preemption {
    let d = Preemption::default();
    let actions = [("requeue", PreemptAction::Requeue), ("cancel", PreemptAction::Cancel)];
    let at_floor = [("none", AtFloor::None), ("requeue", AtFloor::Requeue), ("cancel", AtFloor::Cancel)];
    Preemption {
        enabled: s.get("enabled", d.enabled, boolean),
        dry_run: s.get("dry_run", d.dry_run, boolean),
        min_runtime: s.get("min_runtime", d.min_runtime, any_duration),
        max_per_cycle: s.get("max_per_cycle", d.max_per_cycle, |v| whole_from(v, 0)),
        action: s.choice("action", d.action, &actions),
        signal: s.optional("signal", signal_name).flatten(),
        grace: s.get("grace", d.grace, any_duration),
        at_floor: s.choice("at_floor", d.at_floor, &at_floor),
        // 0 turns the busy test off.
        busy_percent: s
            .optional("busy_percent", |v| number_in(v, 0.0, 100.0, "from 0 to 100"))
            .filter(|percent| *percent > 0.0),
        start_wait: s.get("start_wait", d.start_wait, any_duration),
    }
}

fn health(s: &mut Section) -> Health {
    let d = Health::default();
    Health {
        drain: s.get("drain", d.drain, boolean),
        max_temperature: s.get("max_temperature", d.max_temperature, |v| whole_from(v, 0)),
        temperature_for: s.get("temperature_for", d.temperature_for, any_duration),
        drain_xids: s.get("drain_xids", d.drain_xids, xids),
        repeat_after: s.get("repeat_after", d.repeat_after, positive_duration),
    }
}

/// `[admission]`. How to deprioritize is three keys (`deprioritize` picks which of `nice_increment`,
/// `site_factor` and `qos` applies), read together at the end.
fn admission(s: &mut Section) -> Admission {
    let d = Admission::default();
    let mode = s.choice("mode", d.mode, &[("balance", Mode::Balance), ("estimate", Mode::Estimate)]);
    let how = s.choice("deprioritize", "nice", &[("nice", "nice"), ("site_factor", "site_factor"), ("qos", "qos")]);
    let max_nice = i64::from(MAX_NICE);
    let nice = s.get("nice_increment", i64::from(DEFAULT_NICE_INCREMENT), |v| whole(v, 0, max_nice));
    let site_factor = s.get("site_factor", DEFAULT_SITE_FACTOR, |v| whole(v, -max_nice, max_nice));
    let qos = s.optional("qos", |v| match v.as_str() {
        Some(q) if !q.is_empty() && !q.contains([',', ' ']) => Ok(q.to_string()),
        _ => Err(format!("expected the name of one QOS, got {v}")),
    });
    let on_error = s.choice("on_error", d.on_error, &[("accept", OnError::Accept), ("reject", OnError::Reject)]);
    let max_snapshot_age = s.get("max_snapshot_age", d.max_snapshot_age, whole_seconds_or_off);
    let default_time_limit = s.get("default_time_limit", d.default_time_limit, whole_seconds);
    let max_gpus_per_user = s.optional("max_gpus_per_user", |v| whole_from(v, 1));
    let max_job_duration = s.get("max_job_duration", d.max_job_duration, whole_seconds_or_off);
    let hold_at_floor = s.get("hold_at_floor", d.hold_at_floor, boolean);
    let enforce = s.get("enforce", d.enforce, boolean);
    let contact = s.optional("contact", |v| {
        let text = string(v)?;
        match crate::free_text::printable(&text) == text && !text.trim().is_empty() && text.len() <= 200 {
            true => Ok(text),
            false => Err(format!("expected one printable line of at most 200 characters, got {v}")),
        }
    });
    // Both within MAX_NICE, checked above.
    let nice = u32::try_from(nice).unwrap_or(DEFAULT_NICE_INCREMENT);
    let deprioritize = match (how, qos) {
        ("site_factor", _) => Deprioritize::SiteFactor(site_factor),
        ("qos", Some(q)) => Deprioritize::Qos(q),
        ("qos", None) => {
            s.problem("qos", "deprioritize = \"qos\" needs qos = \"<name>\"".into(), "using nice");
            Deprioritize::Nice(nice)
        }
        _ => Deprioritize::Nice(nice),
    };
    Admission {
        deprioritize,
        mode,
        on_error,
        max_snapshot_age,
        default_time_limit,
        max_gpus_per_user,
        max_job_duration,
        hold_at_floor,
        enforce,
        contact,
    }
}

/// `[notify]`: the command, the warning level and the command's timeout.
fn notify(s: &mut Section) -> Notify {
    let d = Notify::default();
    Notify {
        command: s.get("command", d.command, command_argv),
        warn_below: s.get("warn_below", d.warn_below, non_negative_amount),
        timeout: s.get("timeout", d.timeout, positive_duration),
        expiry_warning: s.get("expiry_warning", d.expiry_warning, positive_duration),
    }
}

/// `[ondemand]`: off without `balance_file`, and without readers (it holds every user's balance:
/// the site says who may read it).
fn ondemand(s: &mut Section) -> Option<OnDemand> {
    let balance_file = s.required("balance_file", absolute_path);
    let unit = s.get("unit", "GPU tokens".to_string(), string);
    let project_type = s.get("project_type", "account".to_string(), string);
    let group = s.optional("group", string);
    let everyone = s.get("world_readable", false, boolean);
    let balance_file = balance_file?;
    let readers = match (group, everyone) {
        (Some(group), false) => OnDemandReaders::Group(group),
        (None, true) => OnDemandReaders::Everyone,
        (Some(_), true) => {
            s.problem("group", "and world_readable = true both say who reads it".into(), "ignoring [ondemand]");
            return None;
        }
        (None, false) => {
            s.problem(
                "balance_file",
                "says nothing of who may read it: OnDemand reads it as each user, and it holds every user's \
                 balance; set ondemand.group (a group of every OnDemand user) or world_readable = true"
                    .into(),
                "ignoring [ondemand]",
            );
            return None;
        }
    };
    Some(OnDemand { balance_file, unit, project_type, readers })
}

/// `[refunds]`: the causes by name, and a cap in GPU-hours per run.
fn refunds(s: &mut Section) -> Refunds {
    let d = Refunds::default();
    let all: Vec<String> = d.causes.iter().map(|c| c.as_str().to_string()).collect();
    let causes = s.get("causes", all, |v| {
        let list = strings(v)?;
        for name in &list {
            if RefundCause::parse(name).is_none() {
                let known: Vec<&str> = RefundCause::ALL.iter().map(|c| c.as_str()).collect();
                return Err(format!("unknown cause {name:?}: the causes are {known:?}"));
            }
        }
        Ok(list)
    });
    let max_gpu_seconds = s.get("max_gpu_hours", d.max_gpu_seconds, |v| {
        let hours = number(v)?;
        if !(hours > 0.0 && hours <= 1e9) {
            return Err(format!("must be a number of GPU-hours above 0 (got {hours})"));
        }
        Ok(Some((hours * 3600.0).round() as u64))
    });
    let max_tokens_per_month = s.get("max_tokens_per_month", d.max_tokens_per_month, non_negative_amount);
    let causes = causes.iter().filter_map(|c| RefundCause::parse(c)).collect();
    Refunds { causes, max_gpu_seconds, max_tokens_per_month }
}

/// `[web]`: the status page's address, link and session lifetimes, and trusted proxies.
fn web(s: &mut Section) -> Web {
    let d = Web::default();
    let mut web = Web {
        url: s.optional("url", web_url),
        link_ttl: s.get("link_ttl", d.link_ttl, positive_duration),
        session_ttl: s.get("session_ttl", d.session_ttl, positive_duration),
        trusted_proxies: s.get("trusted_proxies", d.trusted_proxies, ip_addresses),
        user_header: s.get("user_header", d.user_header, header_name),
        allow_http: s.get("allow_http", d.allow_http, boolean),
        proxy_secret_file: s.optional("proxy_secret_file", absolute_path),
    };
    if !web.trusted_proxies.is_empty() && web.proxy_secret_file.is_none() {
        s.problem(
            "trusted_proxies",
            "needs web.proxy_secret_file (a secret the proxy sends in X-Gputokens-Proxy-Secret: a proxy's \
             address alone is no proof, users' code may run there)"
                .into(),
            "trusting no proxy",
        );
        web.trusted_proxies.clear();
    }
    web
}

/// `[clusters]`: names Slurm knows clusters by, `local` among them.
fn clusters(s: &mut Section) -> Clusters {
    let names = s.get("names", Vec::new(), |v| {
        let list: Vec<String> = names(v)?.iter().map(|n| n.to_ascii_lowercase()).collect();
        if let Some(bad) =
            list.iter().find(|n| !n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')))
        {
            return Err(format!("{bad:?} is not a Slurm cluster name (letters, digits, _ and -)"));
        }
        match list.iter().enumerate().find(|(i, n)| list[..*i].contains(n)) {
            Some((_, twice)) => Err(format!("{twice:?} is named twice")),
            None => Ok(list),
        }
    });
    let local = s.optional("local", string).map(|l| l.to_ascii_lowercase());
    match &local {
        Some(l) if !names.contains(l) => {
            s.problem("local", format!("{l:?} is not one of names {names:?}"), "the first of names");
            Clusters { names, local: None }
        }
        _ => Clusters { names, local },
    }
}
