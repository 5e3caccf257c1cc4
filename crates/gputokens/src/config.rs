//! The one TOML configuration file (`/etc/slurm/gputokens.toml`), parsed strictly and validated.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::pricing::PriceTable;
use crate::tokens::Tokens;

pub const DEFAULT_PATH: &str = "/etc/slurm/gputokens.toml";

/// The commented example shipped in `slurm-conf/`; `accountd config default` prints it.
pub const EXAMPLE: &str = include_str!("../../../slurm-conf/gputokens.toml");

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {key}: {reason}")]
    Invalid { path: PathBuf, key: String, reason: String },
}

/// Validated configuration. Amounts are exact micro-token values.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub initial: Tokens,
    pub daily: Tokens,
    pub monthly: Tokens,
    pub cap: Option<Tokens>,
    pub floor: Tokens,
    pub prices: PriceTable,
    pub balances_public: bool,
    pub slurm_user: String,
    pub paths: Paths,
    pub admins: Admins,
    pub intervals: Intervals,
    pub slurm: SlurmTools,
    /// accountd's HTTP listener (`/metrics`, JSON API, agent reports); None = off.
    pub http_listen: Option<std::net::SocketAddr>,
    pub http: HttpAccess,
    pub agent: AgentConfig,
    pub usage: UsageConfig,
    /// How shards and MPS units are charged as fractions of a GPU.
    pub sharing: crate::tres::Sharing,
    pub preemption: Preemption,
    pub exempt: Exempt,
    pub health: Health,
    /// The job_submit plugin's `[admission]` settings (accountd uses `default_time_limit`).
    pub admission: crate::plugin_config::PluginConfig,
}

/// Preempting debtors' GPU jobs when others wait for the same GPU type.
#[derive(Debug, Clone)]
pub struct Preemption {
    pub enabled: bool,
    /// Only log what would be done.
    pub dry_run: bool,
    pub min_runtime: Duration,
    pub max_per_cycle: usize,
    pub action: PreemptAction,
    /// Sent first (e.g. "USR1"), `grace` before the action, so a job can checkpoint.
    pub signal: Option<String>,
    pub grace: Duration,
    /// What happens to running GPU jobs of users at or below the floor.
    pub at_floor: AtFloor,
    /// The busy test: a contended GPU type is acted on only when the jobs holding it use it at least
    /// this much on average (percent, from the usage samples); None = always.
    pub busy_percent: Option<f64>,
    /// A waiting job that caused a preemption causes no other for this long after the preempted
    /// job's GPUs are freed (after `grace`): the time Slurm needs to start it.
    pub start_wait: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreemptAction {
    /// `scontrol requeue` for requeueable batch jobs, `scancel` for the rest.
    Requeue,
    Cancel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AtFloor {
    None,
    Requeue,
    Cancel,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawPreemption {
    enabled: bool,
    dry_run: bool,
    min_runtime: String,
    max_per_cycle: usize,
    action: PreemptAction,
    signal: String,
    grace: String,
    at_floor: AtFloor,
    busy_percent: f64,
    start_wait: String,
}

impl Default for RawPreemption {
    fn default() -> Self {
        RawPreemption {
            enabled: true,
            dry_run: false,
            min_runtime: "10m".into(),
            max_per_cycle: 4,
            action: PreemptAction::Requeue,
            signal: String::new(),
            grace: "60s".into(),
            at_floor: AtFloor::None,
            busy_percent: 0.0,
            start_wait: "10m".into(),
        }
    }
}

/// Users, accounts and QOS that gputokens never preempts and the job_submit plugin never checks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Exempt {
    pub users: Vec<String>,
    pub accounts: Vec<String>,
    pub qos: Vec<String>,
}

/// A job as the exemption rule sees it; None where it is not known (e.g. no `-A`, or the user name
/// of a uid the plugin could not map).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobIdentity<'a> {
    pub user: Option<&'a str>,
    /// The job's own account (`-A`).
    pub account: Option<&'a str>,
    /// The user's default account in slurmdbd: the account a job without `-A` runs under.
    pub default_account: Option<&'a str>,
    pub qos: Option<&'a str>,
}

impl Exempt {
    /// The one exemption rule (preemption and the job_submit plugin): an exempt user, account (the
    /// job's, else the user's default) or QOS.
    pub fn covers(&self, job: &JobIdentity) -> bool {
        let listed = |names: &[String], name: Option<&str>| name.is_some_and(|n| names.iter().any(|e| e == n));
        listed(&self.users, job.user)
            || listed(&self.accounts, job.account.or(job.default_account))
            || listed(&self.qos, job.qos)
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.accounts.is_empty() && self.qos.is_empty()
    }
}

/// When a GPU counts as failing: the node is drained and the jobs on that GPU requeued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub drain: bool,
    pub max_temperature: u32,
    /// A GPU drains for heat only after staying above `max_temperature` this long.
    pub temperature_for: Duration,
    /// XIDs that are hardware or driver faults; any other XID (an application's error) never drains.
    pub drain_xids: std::collections::BTreeSet<u64>,
    /// The same XID on the same GPU within this long of the drain it caused is the same fault.
    pub repeat_after: Duration,
}

/// NVIDIA's XID catalogue: double-bit ECC (48), page retirement / row remapping (63, 64), NVLink (74),
/// fallen off the bus (79), high single-bit ECC rate (92), contained / uncontained ECC (94, 95), GSP
/// (119, 120). Application faults (13, 31, 43, 45, ...) are left out: any user can cause them.
pub const DEFAULT_DRAIN_XIDS: [u64; 10] = [48, 63, 64, 74, 79, 92, 94, 95, 119, 120];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawHealth {
    drain: bool,
    max_temperature: u32,
    temperature_for: String,
    drain_xids: Vec<u64>,
    repeat_after: String,
}

impl Default for RawHealth {
    fn default() -> Self {
        RawHealth {
            drain: true,
            max_temperature: 85,
            temperature_for: "5m".into(),
            drain_xids: DEFAULT_DRAIN_XIDS.to_vec(),
            repeat_after: "1d".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSharing {
    shards_per_gpu: u64,
    mps_per_gpu: u64,
}

impl Default for RawSharing {
    fn default() -> Self {
        let d = crate::tres::Sharing::default();
        RawSharing { shards_per_gpu: d.shards_per_gpu, mps_per_gpu: d.mps_per_gpu }
    }
}

/// The SPANK plugin's default `jobs_dir`, so that agent and plugin agree unless both are told otherwise.
pub const DEFAULT_JOBS_DIR: &str = "/run/gputokens/jobs";

/// The NVML node agent (`accountd agent`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// accountd serve's HTTP listener, where samples are posted.
    pub report_to: String,
    pub interval: String,
    /// NVML library (nvml-wrapper dlopens it).
    pub nvml_library: PathBuf,
    /// Where the SPANK plugin's job prologs record each job's GPUs on the node (its `jobs_dir=`).
    pub jobs_dir: PathBuf,
    /// The agent's own `/metrics`; "off" disables it.
    pub listen: String,
    /// How reports prove where they come from: a MUNGE credential of root or the SlurmUser (default),
    /// or a per-node token derived from the site secret in `token_file`.
    pub auth: AgentAuth,
    /// munged's socket, when not libmunge's default (/run/munge/munge.socket.2).
    pub munge_socket: Option<PathBuf>,
    /// `auth = "token"`: on accountd's host the site secret; on a node, that node's token
    /// (`accountd admin node-token NODE`).
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentAuth {
    #[default]
    Munge,
    Token,
}

const HTTP_MAX_CONNECTIONS: usize = 1024;
const HTTP_MAX_CONNECTIONS_PER_ADDRESS: usize = 64;
const HTTP_REQUEST_TIMEOUT_SECS: u64 = 30;

/// Who may read what over HTTP, and how much of the listener one client may hold.
#[derive(Debug, Clone)]
pub struct HttpAccess {
    /// Per-user balances in `/metrics` (which is usually readable by the whole network).
    pub per_user_metrics: bool,
    /// A root-only file holding a bearer token that reads the JSON API as an admin.
    pub admin_token_file: Option<PathBuf>,
    /// Connections held open at once, in all and from one address (more are closed at once).
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// A client has this long to send a request's headers (also on an idle keep-alive connection)
    /// and accountd this long to read its body and answer.
    pub request_timeout: std::time::Duration,
}

impl Default for HttpAccess {
    fn default() -> Self {
        HttpAccess {
            per_user_metrics: false,
            admin_token_file: None,
            max_connections: HTTP_MAX_CONNECTIONS,
            max_connections_per_address: HTTP_MAX_CONNECTIONS_PER_ADDRESS,
            request_timeout: std::time::Duration::from_secs(HTTP_REQUEST_TIMEOUT_SECS),
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            report_to: "http://127.0.0.1:9817".into(),
            interval: "30s".into(),
            nvml_library: "libnvidia-ml.so.1".into(),
            jobs_dir: DEFAULT_JOBS_DIR.into(),
            listen: "127.0.0.1:9818".into(),
            auth: AgentAuth::Munge,
            munge_socket: None,
            token_file: None,
        }
    }
}

/// Where GPU utilization comes from and what it is used for.
#[derive(Debug, Clone)]
pub struct UsageConfig {
    pub source: UsageSource,
    pub charge_basis: ChargeBasis,
    /// With `measured`, a held GPU is charged at least this fraction of its price.
    pub measured_min_fraction: f64,
    /// A job whose GPUs stay below `idle_threshold_percent` for `idle_window` is flagged idle.
    pub idle_threshold_percent: f64,
    pub idle_window: Duration,
    /// Run (argv, no shell) when a job is flagged idle; `{job}`, `{user}`, `{node}` are substituted.
    pub idle_command: Vec<String>,
    /// The `[prometheus]` table, read by accountd when `source = "prometheus"`.
    pub prometheus: Option<toml::Table>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageSource {
    Agents,
    Prometheus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChargeBasis {
    /// GPUs × time held.
    Allocation,
    /// GPUs × time held × measured utilization (at least `measured_min_fraction`).
    Measured,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawUsage {
    source: UsageSource,
    charge_basis: ChargeBasis,
    measured_min_fraction: f64,
    idle_threshold_percent: f64,
    idle_window: String,
    idle_command: Vec<String>,
}

impl Default for RawUsage {
    fn default() -> Self {
        RawUsage {
            source: UsageSource::Agents,
            charge_basis: ChargeBasis::Allocation,
            measured_min_fraction: 0.25,
            idle_threshold_percent: 5.0,
            idle_window: "1h".into(),
            idle_command: Vec::new(),
        }
    }
}

/// Where Slurm's commands are and how far back the first charge cycle reads sacct.
#[derive(Debug, Clone)]
pub struct SlurmTools {
    /// Directory of sacct/squeue/sinfo/scontrol; None = search PATH.
    pub bin_dir: Option<PathBuf>,
    pub first_lookback: Duration,
    /// Each cycle re-reads sacct this far before where the last one stopped, for records slurmdbd
    /// stored late; charging is idempotent, so re-reading costs nothing but time.
    pub reread: Duration,
    /// How long sacct may run (it waits on slurmdbd) before it is killed and the cycle fails.
    pub sacct_timeout: Duration,
    /// How long squeue, scontrol, sinfo, sacctmgr and scancel may run.
    pub command_timeout: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSlurm {
    bin_dir: Option<PathBuf>,
    first_lookback: String,
    reread: String,
    sacct_timeout: String,
    command_timeout: String,
}

impl Default for RawSlurm {
    fn default() -> Self {
        RawSlurm {
            bin_dir: None,
            first_lookback: "1d".into(),
            reread: "1h".into(),
            sacct_timeout: "5m".into(),
            command_timeout: "60s".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Paths {
    pub ledger: PathBuf,
    pub snapshot: PathBuf,
    pub socket: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            ledger: "/var/lib/gputokens/ledger.sqlite".into(),
            snapshot: "/var/lib/gputokens/balances.snapshot".into(),
            socket: "/run/gputokens/accountd.sock".into(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Admins {
    pub users: Vec<String>,
    pub groups: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Intervals {
    pub charge: Duration,
    pub check: Duration,
}

/// The file as written; turned into [`Config`] by [`RawConfig::validate`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default = "default_initial")]
    initial: f64,
    #[serde(default = "default_daily")]
    daily: f64,
    #[serde(default = "default_monthly")]
    monthly: f64,
    cap: Option<f64>,
    #[serde(default = "default_floor")]
    floor: f64,
    default_price: Option<f64>,
    #[serde(default)]
    balances_public: bool,
    #[serde(default = "default_slurm_user")]
    slurm_user: String,
    #[serde(default)]
    prices: BTreeMap<String, f64>,
    #[serde(default)]
    paths: Paths,
    #[serde(default)]
    admins: Admins,
    #[serde(default)]
    intervals: RawIntervals,
    #[serde(default)]
    slurm: RawSlurm,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    agent: AgentConfig,
    #[serde(default)]
    usage: RawUsage,
    prometheus: Option<toml::Table>,
    #[serde(default)]
    sharing: RawSharing,
    #[serde(default)]
    preemption: RawPreemption,
    #[serde(default)]
    exempt: Exempt,
    #[serde(default)]
    health: RawHealth,
    /// Read by the job_submit plugin (`plugin_config`); checked in `Config::parse` so `config check`
    /// catches mistakes. Only its presence matters here.
    #[allow(dead_code)]
    admission: Option<toml::Table>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawHttp {
    listen: String,
    per_user_metrics: bool,
    admin_token_file: Option<PathBuf>,
    max_connections: usize,
    max_connections_per_address: usize,
    request_timeout: String,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            listen: "127.0.0.1:9817".into(),
            per_user_metrics: false,
            admin_token_file: None,
            max_connections: HTTP_MAX_CONNECTIONS,
            max_connections_per_address: HTTP_MAX_CONNECTIONS_PER_ADDRESS,
            request_timeout: format!("{HTTP_REQUEST_TIMEOUT_SECS}s"),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawIntervals {
    charge: String,
    check: String,
}

impl Default for RawIntervals {
    fn default() -> Self {
        RawIntervals { charge: "1h".into(), check: "30m".into() }
    }
}

fn default_initial() -> f64 {
    100.0
}
fn default_daily() -> f64 {
    1.0
}
fn default_monthly() -> f64 {
    30.0
}
fn default_floor() -> f64 {
    -10.0
}
fn default_slurm_user() -> String {
    "slurm".into()
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text, path)
    }

    /// Parses `text`; `path` only names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let mut config = raw.validate(path)?;
        // The plugin forgives a bad [admission] key (slurmctld must start); `config check` does not.
        let (admission, problems) = crate::plugin_config::parse(text);
        config.admission = admission;
        if let Some(problem) = problems.into_iter().next() {
            let (key, reason) = problem.split_once(": ").unwrap_or(("admission", problem.as_str()));
            return Err(ConfigError::Invalid { path: path.to_path_buf(), key: key.into(), reason: reason.into() });
        }
        Ok(config)
    }

    /// The path named by `--config`/`GPUTOKENS_CONF`, else the default.
    pub fn resolve_path(explicit: Option<&Path>) -> PathBuf {
        explicit.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(DEFAULT_PATH))
    }
}

impl RawConfig {
    fn validate(self, path: &Path) -> Result<Config, ConfigError> {
        let invalid =
            |key: &str, reason: String| ConfigError::Invalid { path: path.to_path_buf(), key: key.to_string(), reason };
        let amount = |key: &str, value: f64| {
            let tokens =
                Tokens::from_f64(value).ok_or_else(|| invalid(key, format!("{value} is not a usable amount")))?;
            if !tokens.within_limit() {
                return Err(invalid(key, format!("{value} is beyond the limit of ±{} tokens", Tokens::LIMIT)));
            }
            Ok(tokens)
        };
        let non_negative = |key: &str, value: f64| {
            if value < 0.0 {
                return Err(invalid(key, format!("must not be negative (got {value})")));
            }
            amount(key, value)
        };

        let initial = amount("initial", self.initial)?;
        let daily = non_negative("daily", self.daily)?;
        let monthly = non_negative("monthly", self.monthly)?;
        let floor = amount("floor", self.floor)?;
        if floor > Tokens::ZERO {
            return Err(invalid("floor", format!("must be 0 or below (got {})", self.floor)));
        }
        let cap = self.cap.map(|c| amount("cap", c)).transpose()?;
        if let Some(cap) = cap {
            if cap < Tokens::ZERO {
                return Err(invalid("cap", format!("must not be negative (got {cap})")));
            }
            if initial > cap {
                return Err(invalid("initial", format!("{initial} is above cap {cap}")));
            }
        }

        let mut prices = BTreeMap::new();
        for (gpu_type, price) in &self.prices {
            let key = format!("prices.{gpu_type}");
            let price = non_negative(&key, *price)?;
            if prices.insert(gpu_type.to_lowercase(), price).is_some() {
                return Err(invalid(&key, "listed twice (GPU types match case-insensitively)".into()));
            }
        }
        let default_price = self.default_price.map(|p| non_negative("default_price", p)).transpose()?;

        if self.slurm_user.trim().is_empty() {
            return Err(invalid("slurm_user", "must not be empty".into()));
        }
        for (key, p) in [
            ("paths.ledger", &self.paths.ledger),
            ("paths.snapshot", &self.paths.snapshot),
            ("paths.socket", &self.paths.socket),
        ] {
            if !p.is_absolute() {
                return Err(invalid(key, format!("must be an absolute path (got {})", p.display())));
            }
        }
        let any_duration = |key: &str, text: &str| {
            humantime::parse_duration(text)
                .map_err(|e| invalid(key, format!("'{text}' is not a duration like \"30m\" or \"1h\" ({e})")))
        };
        let duration = |key: &str, text: &str| {
            let d = any_duration(key, text)?;
            if d.is_zero() {
                return Err(invalid(key, "must be longer than 0".into()));
            }
            Ok(d)
        };
        let intervals = Intervals {
            charge: duration("intervals.charge", &self.intervals.charge)?,
            check: duration("intervals.check", &self.intervals.check)?,
        };

        if let Some(dir) = self.slurm.bin_dir.as_ref().filter(|d| !d.is_absolute()) {
            return Err(invalid("slurm.bin_dir", format!("must be an absolute path (got {})", dir.display())));
        }
        let slurm = SlurmTools {
            bin_dir: self.slurm.bin_dir,
            first_lookback: duration("slurm.first_lookback", &self.slurm.first_lookback)?,
            reread: any_duration("slurm.reread", &self.slurm.reread)?,
            sacct_timeout: duration("slurm.sacct_timeout", &self.slurm.sacct_timeout)?,
            command_timeout: duration("slurm.command_timeout", &self.slurm.command_timeout)?,
        };

        let http_listen = match self.http.listen.trim() {
            "" | "off" => None,
            text => Some(text.parse().map_err(|e| {
                invalid("http.listen", format!("'{text}' is not an address like \"127.0.0.1:9817\" ({e})"))
            })?),
        };

        for (key, path) in [
            ("http.admin_token_file", &self.http.admin_token_file),
            ("agent.token_file", &self.agent.token_file),
            ("agent.munge_socket", &self.agent.munge_socket),
        ] {
            if let Some(p) = path.as_ref().filter(|p| !p.is_absolute()) {
                return Err(invalid(key, format!("must be an absolute path (got {})", p.display())));
            }
        }
        if self.agent.auth == AgentAuth::Token && self.agent.token_file.is_none() {
            return Err(invalid("agent.auth", "\"token\" needs agent.token_file".into()));
        }
        for (key, value) in [
            ("http.max_connections", self.http.max_connections),
            ("http.max_connections_per_address", self.http.max_connections_per_address),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1".into()));
            }
        }
        let http = HttpAccess {
            per_user_metrics: self.http.per_user_metrics,
            admin_token_file: self.http.admin_token_file,
            max_connections: self.http.max_connections,
            max_connections_per_address: self.http.max_connections_per_address.min(self.http.max_connections),
            request_timeout: duration("http.request_timeout", &self.http.request_timeout)?,
        };
        duration("agent.interval", &self.agent.interval)?;
        if !self.agent.jobs_dir.is_absolute() {
            let got = self.agent.jobs_dir.display();
            return Err(invalid("agent.jobs_dir", format!("must be an absolute path (got {got})")));
        }
        if !(0.0..=1.0).contains(&self.usage.measured_min_fraction) {
            let got = self.usage.measured_min_fraction;
            return Err(invalid("usage.measured_min_fraction", format!("must be between 0 and 1 (got {got})")));
        }
        if !(0.0..=100.0).contains(&self.usage.idle_threshold_percent) {
            let got = self.usage.idle_threshold_percent;
            return Err(invalid("usage.idle_threshold_percent", format!("must be between 0 and 100 (got {got})")));
        }
        if self.usage.source == UsageSource::Prometheus && self.prometheus.is_none() {
            return Err(invalid("usage.source", "\"prometheus\" needs a [prometheus] table with its url".into()));
        }
        let usage = UsageConfig {
            source: self.usage.source,
            charge_basis: self.usage.charge_basis,
            measured_min_fraction: self.usage.measured_min_fraction,
            idle_threshold_percent: self.usage.idle_threshold_percent,
            idle_window: duration("usage.idle_window", &self.usage.idle_window)?,
            idle_command: self.usage.idle_command,
            prometheus: self.prometheus,
        };

        for (key, value) in
            [("sharing.shards_per_gpu", self.sharing.shards_per_gpu), ("sharing.mps_per_gpu", self.sharing.mps_per_gpu)]
        {
            if value == 0 {
                return Err(invalid(key, "must be at least 1".into()));
            }
        }
        let sharing =
            crate::tres::Sharing { shards_per_gpu: self.sharing.shards_per_gpu, mps_per_gpu: self.sharing.mps_per_gpu };

        let p = self.preemption;
        let signal = p.signal.trim().to_string();
        if !signal.is_empty() && !signal.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(invalid("preemption.signal", format!("'{signal}' is not a signal name like \"USR1\"")));
        }
        if !(0.0..=100.0).contains(&p.busy_percent) {
            return Err(invalid("preemption.busy_percent", format!("must be from 0 to 100 (got {})", p.busy_percent)));
        }
        let preemption = Preemption {
            enabled: p.enabled,
            dry_run: p.dry_run,
            min_runtime: any_duration("preemption.min_runtime", &p.min_runtime)?,
            max_per_cycle: p.max_per_cycle,
            action: p.action,
            signal: (!signal.is_empty()).then_some(signal),
            grace: any_duration("preemption.grace", &p.grace)?,
            at_floor: p.at_floor,
            busy_percent: (p.busy_percent > 0.0).then_some(p.busy_percent),
            start_wait: any_duration("preemption.start_wait", &p.start_wait)?,
        };

        let h = self.health;
        let health = Health {
            drain: h.drain,
            max_temperature: h.max_temperature,
            temperature_for: any_duration("health.temperature_for", &h.temperature_for)?,
            drain_xids: h.drain_xids.into_iter().collect(),
            repeat_after: duration("health.repeat_after", &h.repeat_after)?,
        };

        Ok(Config {
            path: path.to_path_buf(),
            initial,
            daily,
            monthly,
            cap,
            floor,
            prices: PriceTable::new(prices, default_price),
            balances_public: self.balances_public,
            slurm_user: self.slurm_user,
            paths: self.paths,
            admins: self.admins,
            intervals,
            slurm,
            http_listen,
            http,
            agent: self.agent,
            usage,
            sharing,
            preemption,
            exempt: self.exempt,
            health,
            admission: crate::plugin_config::PluginConfig::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
