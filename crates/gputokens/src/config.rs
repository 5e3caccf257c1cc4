//! The one TOML configuration file (`/etc/slurm/gputokens.toml`): the model every component uses,
//! and its one reader in two modes. [`Config::load`] is strict (accountd, `accountd config check`):
//! the first problem is an error naming the key. [`Config::load_lenient`] never fails (the Slurm
//! plugins, which must never stop slurmctld or a job): each bad setting keeps its default and is
//! reported as a [`Problem`], the rest of the file still applies. Both run the same per-key code
//! (`sections`), so they agree on what is valid.
//!
//! This file is the model; the files below it read the file into it (`load`, `sections`, `reader`,
//! `values`, `problem`) and describe it (`summary`), and it imports none of them but the
//! `[admission]` value types (`admission`), which import nothing of the config.

pub mod admission;
pub mod advice;
mod advice_reach;
mod advice_timing;
mod load;
mod problem;
mod reader;
pub mod reference;
mod sections;
mod summary;
#[cfg(test)]
mod tests;
mod values;
mod warning;

use std::path::PathBuf;
use std::time::Duration;

use crate::policy::BucketRules;
use crate::pricing::PriceTable;
use crate::tokens::Tokens;
use admission::{Deprioritize, Mode, OnError, DEFAULT_MAX_SNAPSHOT_AGE, DEFAULT_NICE_INCREMENT, DEFAULT_TIME_LIMIT};

pub use problem::Problem;
pub use summary::describe;

pub const DEFAULT_PATH: &str = "/etc/slurm/gputokens.toml";
/// The environment variable that names the file when no option or argument does.
pub const PATH_ENV: &str = "GPUTOKENS_CONF";
pub const DEFAULT_SNAPSHOT: &str = "/var/lib/gputokens/balances.snapshot";

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
    /// `borrow_limit` and `forgive_below`.
    pub borrowing: crate::policy::Borrowing,
    pub slurm_user: String,
    pub paths: Paths,
    /// Which database holds the ledger ([ledger]): SQLite at `paths.ledger`, or a site's MariaDB.
    pub ledger: LedgerDatabase,
    pub admins: Admins,
    pub intervals: Intervals,
    pub slurm: SlurmTools,
    /// accountd's HTTP listener (`/metrics`, JSON API, agent reports); None = off.
    pub http_listen: Option<std::net::SocketAddr>,
    pub http: HttpAccess,
    /// `[accountd]`: where accountd answers as every host of the site reaches it.
    pub accountd: AccountdAddress,
    pub agent: AgentConfig,
    /// `[usage]` (and `[prometheus]`): measured GPU utilization, not the allocated GPU time charged.
    pub utilization: UtilizationConfig,
    /// How shards and MPS units are charged as fractions of a GPU.
    pub sharing: crate::tres::Sharing,
    pub preemption: Preemption,
    pub lending: Lending,
    /// Users, accounts and QOS never preempted nor checked by the job_submit plugin.
    pub exempt: Exempt,
    pub health: Health,
    /// The job_submit plugin's `[admission]` settings (accountd uses `default_time_limit`).
    pub admission: Admission,
    /// `[notify]`: the command users are notified through (Slurm's `MailProg` way); off by default.
    pub notify: Notify,
    /// `[web]`: the status page's login links, sessions and trusted proxies.
    pub web: Web,
    /// `[accounts]`: whether Slurm accounts hold token pools, and a new pool's rules.
    pub accounts: Accounts,
    /// `[ondemand]`: the balance file Open OnDemand's dashboard reads; None = not written.
    pub ondemand: Option<OnDemand>,
    /// `[refunds]`: runs lost to the system, refunded automatically.
    pub refunds: Refunds,
    /// `[clusters]`: the Slurm clusters whose jobs the ledger charges, and which one this host is in.
    pub clusters: Clusters,
}

/// `[clusters]`: several Slurm clusters (on one slurmdbd, or not) charged to one MariaDB ledger, an
/// accountd (or a pair) on each. Empty: one cluster, the ledger its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Clusters {
    /// Every cluster that charges the ledger, the first the one that charged it alone before: its
    /// jobs' keys stay bare job IDs, the others' are `CLUSTER:ID`.
    pub names: Vec<String>,
    /// This host's cluster (its slurm.conf ClusterName); the first of `names` when unset.
    pub local: Option<String>,
}

impl Clusters {
    /// This host's cluster, where `[clusters]` names any.
    pub fn local(&self) -> Option<&str> {
        self.local.as_deref().or(self.names.first().map(String::as_str))
    }

    /// What this cluster's job IDs are prefixed with in the ledger: `CLUSTER:` on every cluster but
    /// the first, nothing there (a ledger that charged one cluster keeps its keys).
    pub fn job_prefix(&self) -> Option<String> {
        (!self.is_first()).then(|| format!("{}:", self.lease_name()))
    }

    /// Whether this host's cluster is the ledger's first (or the ledger has one cluster): its job
    /// keys, lease and meta keys are the ledger's own, and its leader delivers notifications.
    pub fn is_first(&self) -> bool {
        self.local() == self.names.first().map(String::as_str)
    }

    /// The ledger's key of job `id`: this cluster's by its ID, any cluster's by `CLUSTER:ID` (the
    /// first cluster's keys are bare: `old:41` is `41`).
    pub fn job_key(&self, id: &str) -> String {
        // Slurm's cluster names are case-blind (kept lower-case): `OLD:41` is `old:41`.
        let first_cluster = |first: &String| {
            let (cluster, bare) = id.split_once(':')?;
            cluster.eq_ignore_ascii_case(first).then_some(bare)
        };
        if let Some(bare) = self.names.first().and_then(first_cluster) {
            return bare.to_string();
        }
        match self.job_prefix() {
            Some(prefix) if !id.contains(':') => format!("{prefix}{id}"),
            _ => id.to_string(),
        }
    }

    /// How a job's ledger key is shown to people: with its cluster where the ledger has several
    /// (`gtmn:41` for the first cluster's bare `41`), as it is otherwise.
    pub fn job_shown(&self, key: &str) -> String {
        match self.names.first() {
            Some(first) if self.names.len() > 1 && !key.contains(':') => format!("{first}:{key}"),
            _ => key.to_string(),
        }
    }

    /// The name of the lease this host's accountd leads under: each cluster's own, so each
    /// cluster's pair leads its own cycles; the first cluster's is the ledger's ("", where a pair
    /// led before `[clusters]`), so adding the table never gives a running pair two leases.
    pub fn lease_name(&self) -> &str {
        match self.is_first() {
            true => "",
            false => self.local().unwrap_or(""),
        }
    }
}

/// `[refunds]`: which runs lost to the system are refunded automatically, and how much of a long one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refunds {
    /// The causes refunded (`causes`); empty: none, admins refund by hand.
    pub causes: Vec<crate::refunds::RefundCause>,
    /// At most this many GPU-seconds of one run are refunded (`max_gpu_hours`, 24 by default).
    pub max_gpu_seconds: Option<u64>,
    /// At most this many tokens are refunded automatically to one balance (a user's or a pool's)
    /// per month (`max_tokens_per_month`, 100 by default): beyond it an admin refunds by hand.
    pub max_tokens_per_month: crate::tokens::Tokens,
}

impl Default for Refunds {
    fn default() -> Refunds {
        Refunds {
            causes: crate::refunds::RefundCause::ALL.to_vec(),
            max_gpu_seconds: Some(24 * 3600),
            max_tokens_per_month: crate::tokens::Tokens::whole(100),
        }
    }
}

/// `[ondemand]`: the balance file (format version 1) that Open OnDemand's dashboard reads from
/// `OOD_BALANCE_PATH`, as each user (its per-user nginx), to warn users below `OOD_BALANCE_THRESHOLD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDemand {
    pub balance_file: PathBuf,
    /// `config.unit`: what OnDemand calls the balance's unit.
    pub unit: String,
    /// `config.project_type`: what OnDemand calls the account of a pool's balance.
    pub project_type: String,
    /// Who may read it (every user's balance is in it).
    pub readers: OnDemandReaders,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnDemandReaders {
    /// Mode 0640, this group's.
    Group(String),
    /// Mode 0644: every user reads every balance.
    Everyone,
}

/// `[accounts]`: what holds tokens (users, the pools of Slurm accounts, or both) and the rules a pool
/// gets when `accountd admin account add` gives none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accounts {
    pub mode: crate::pools::PoolMode,
    pub pool_defaults: BucketRules,
}

/// `[web]`: the status page on the HTTP listener. Users log in with a link `sbalance --web` asks for
/// over the Unix socket, or through a site's proxy that names them in `user_header`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Web {
    /// The address users open, put in login links (default: http://<this host>:<listen port>).
    pub url: Option<String>,
    /// How long a login link may wait before it is opened (it works once).
    pub link_ttl: Duration,
    /// How long a browser stays logged in.
    pub session_ttl: Duration,
    /// Proxies whose `user_header` names the user (their own login in front, e.g. Open OnDemand).
    pub trusted_proxies: Vec<std::net::IpAddr>,
    pub user_header: String,
    /// Login links and sessions over plain http (the session cookie then travels in clear, and a
    /// user's server on another port of that host receives it): only when the site says so.
    pub allow_http: bool,
    /// A root-only file with the secret a trusted proxy sends in `X-Gputokens-Proxy-Secret`: its
    /// address alone does not prove a request is the proxy's (users' code may run on that host).
    pub proxy_secret_file: Option<PathBuf>,
}

impl Default for Web {
    fn default() -> Self {
        Web {
            url: None,
            link_ttl: Duration::from_secs(300),
            session_ttl: Duration::from_secs(8 * 3600),
            trusted_proxies: Vec::new(),
            user_header: "X-Remote-User".into(),
            allow_http: false,
            proxy_secret_file: None,
        }
    }
}

/// `[notify]`: notifications of balance crossings and preemptions (see `crate::notify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// The command (argv, never a shell), run with the event and the user name appended; empty = off.
    pub command: Vec<String>,
    /// A balance below this (and at or above 0) is the warning level; 0 = no warning.
    pub warn_below: Tokens,
    /// How long one run of the command may take before it is killed (and retried on a later cycle).
    pub timeout: Duration,
    /// How long before a grant with tokens left ends its user is told (once).
    pub expiry_warning: Duration,
}

impl Default for Notify {
    fn default() -> Self {
        Notify {
            command: Vec::new(),
            warn_below: Tokens::whole(10),
            timeout: Duration::from_secs(30),
            expiry_warning: Duration::from_secs(7 * 86400),
        }
    }
}

impl Notify {
    pub fn enabled(&self) -> bool {
        !self.command.is_empty()
    }
}

/// `[admission]`: how the job_submit plugin judges GPU jobs. Its snapshot is `[paths] snapshot`
/// and its exemptions `[exempt]`, both in [`Config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
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
    /// accountd holds pending GPU jobs whose payer is at the floor, and releases them when it is
    /// above (`crate::holds`).
    pub hold_at_floor: bool,
    /// false: shadow mode. Every decision is made and logged as it would be, and no job is
    /// refused, deprioritized, changed, held or preempted.
    pub enforce: bool,
    /// Whom users at the floor ask for tokens (an address, a ticket queue), named in refusals and
    /// sbalance; None: "the cluster administrators".
    pub contact: Option<String>,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            deprioritize: Deprioritize::Nice(DEFAULT_NICE_INCREMENT),
            mode: Mode::default(),
            on_error: OnError::default(),
            max_snapshot_age: Some(DEFAULT_MAX_SNAPSHOT_AGE),
            default_time_limit: DEFAULT_TIME_LIMIT,
            max_gpus_per_user: None,
            max_job_duration: None,
            hold_at_floor: true,
            enforce: true,
            contact: None,
        }
    }
}

/// Idle GPUs lent to users in debt (`[lending]`, see [`crate::lending`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lending {
    pub enabled: bool,
    /// Users at or below the floor borrow too (their GPU jobs are accepted, as borrowed runs).
    pub at_floor: bool,
    /// Percent off a borrowed run that finishes unreclaimed.
    pub discount_percent: u8,
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

impl Default for Preemption {
    fn default() -> Self {
        Preemption {
            enabled: true,
            dry_run: false,
            min_runtime: Duration::from_secs(10 * 60),
            max_per_cycle: 4,
            action: PreemptAction::Requeue,
            signal: None,
            grace: Duration::from_secs(60),
            at_floor: AtFloor::None,
            busy_percent: None,
            start_wait: Duration::from_secs(10 * 60),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptAction {
    /// `scontrol requeue` for requeueable batch jobs, `scancel` for the rest.
    Requeue,
    Cancel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtFloor {
    None,
    Requeue,
    Cancel,
}

/// Users, accounts and QOS that gputokens never preempts and the job_submit plugin never checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// job's, else the user's default) or QOS. A job may ask for several QOS (24.11+: `--qos=a,b`, run
    /// in whichever lets it): exempt only when every one of them is.
    pub fn covers(&self, job: &JobIdentity) -> bool {
        let listed = |names: &[String], name: &str| names.iter().any(|e| e == name);
        let qos_exempt = job.qos.is_some_and(|list| !list.is_empty() && list.split(',').all(|q| listed(&self.qos, q)));
        job.user.is_some_and(|u| listed(&self.users, u))
            || job.account.or(job.default_account).is_some_and(|a| listed(&self.accounts, a))
            || qos_exempt
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

impl Default for Health {
    fn default() -> Self {
        Health {
            drain: true,
            max_temperature: 85,
            temperature_for: Duration::from_secs(5 * 60),
            drain_xids: DEFAULT_DRAIN_XIDS.into_iter().collect(),
            repeat_after: Duration::from_secs(86400),
        }
    }
}

/// NVIDIA's XID catalogue: double-bit ECC (48), page retirement / row remapping (63, 64), NVLink (74),
/// fallen off the bus (79), high single-bit ECC rate (92), contained / uncontained ECC (94, 95), GSP
/// (119, 120). Application faults (13, 31, 43, 45, ...) are left out: any user can cause them.
pub const DEFAULT_DRAIN_XIDS: [u64; 10] = [48, 63, 64, 74, 79, 92, 94, 95, 119, 120];

/// The SPANK plugin's default `jobs_dir`, so that agent and plugin agree unless both are told otherwise.
pub const DEFAULT_JOBS_DIR: &str = "/run/gputokens/jobs";

/// The NVML node agent (`gputokens-agent`).
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// accountd serve's HTTP listener(s), where samples are posted: a pair's both, the one to try
    /// first first. Never empty.
    pub report_to: Vec<String>,
    pub interval: String,
    /// NVML library (nvml-wrapper dlopens it).
    pub nvml_library: PathBuf,
    /// Where the SPANK plugin's job prologs record each job's GPUs on the node (its `jobs_dir=`).
    pub jobs_dir: PathBuf,
    /// The agent's own `/metrics`; "off" disables it.
    pub listen: String,
    /// Per-job series on the agent's `/metrics` (`gputokens_agent_job_*{job,node}`: each job's GPU
    /// utilization, memory and GPUs). Off by default: every local user can read that listener
    /// (127.0.0.1), and a job's use is its owner's business; per-GPU series without job labels are
    /// always served.
    pub per_job_metrics: bool,
    /// How reports prove where they come from: a MUNGE credential of root or the SlurmUser (default),
    /// or a per-node token derived from the site secret in `token_file`.
    pub auth: AgentAuth,
    /// munged's socket, when not libmunge's default (/run/munge/munge.socket.2).
    pub munge_socket: Option<PathBuf>,
    /// `auth = "token"`: on accountd's host the site secret; on a node, that node's token
    /// (`accountd admin node-token NODE`).
    pub token_file: Option<PathBuf>,
    /// Accept a MUNGE report whose origin cannot be checked (munged knew no origin address, or
    /// Slurm's addresses of the node do not resolve here): off, such a report is refused.
    pub accept_unchecked_origin: bool,
    /// GPUs a node's NVML shows beyond those in its Slurm `Gres` (one taken out of gres.conf while
    /// it waits for replacement, one kept for a display, a MIG GPU with no slices yet): a report
    /// may name this many more GPUs than Slurm shows on its node, at indices this much higher.
    pub unscheduled_gpus: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
    /// Names of this host (DNS aliases) that /metrics, the API and the page answer to, besides its
    /// addresses, `localhost`, its host name and `[web] url`'s host.
    pub server_names: Vec<String>,
    /// The listener's certificate chain and key (PEM): with both, it speaks TLS only.
    pub tls: Option<TlsFiles>,
    /// Whether requests that change balances (admins', coordinators') are taken over the network
    /// (`remote_writes`); off: only through the Unix socket on accountd's host.
    pub remote_writes: bool,
}

/// The listener's certificate chain and private key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

/// `[accountd]`: where users' tools reach accountd from a host without its Unix socket (login and
/// compute nodes): its `[http]` listener, as that host reaches it; one URL, or two for a pair (tried
/// in order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountdAddress {
    pub urls: Vec<String>,
    /// The CA certificates (PEM) that accountd's TLS certificate is checked against; None: the public
    /// CAs' (webpki roots).
    pub ca_file: Option<PathBuf>,
}

impl Default for HttpAccess {
    fn default() -> Self {
        HttpAccess {
            per_user_metrics: false,
            admin_token_file: None,
            max_connections: HTTP_MAX_CONNECTIONS,
            max_connections_per_address: HTTP_MAX_CONNECTIONS_PER_ADDRESS,
            request_timeout: std::time::Duration::from_secs(HTTP_REQUEST_TIMEOUT_SECS),
            server_names: Vec::new(),
            tls: None,
            remote_writes: false,
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            report_to: vec!["http://127.0.0.1:9817".into()],
            interval: "30s".into(),
            nvml_library: "libnvidia-ml.so.1".into(),
            jobs_dir: DEFAULT_JOBS_DIR.into(),
            listen: "127.0.0.1:9818".into(),
            per_job_metrics: false,
            auth: AgentAuth::Munge,
            munge_socket: None,
            token_file: None,
            accept_unchecked_origin: false,
            unscheduled_gpus: 0,
        }
    }
}

/// `[usage]`: where measured GPU utilization comes from and what it is used for.
#[derive(Debug, Clone)]
pub struct UtilizationConfig {
    pub source: UtilizationSource,
    pub charge_basis: ChargeBasis,
    /// With `measured`, a held GPU is charged at least this fraction of its price.
    pub measured_min_fraction: f64,
    /// A job whose GPUs stay below `idle_threshold_percent` for `idle_window` is flagged idle.
    pub idle_threshold_percent: f64,
    pub idle_window: Duration,
    /// Run (argv, no shell) when a job is flagged idle; `{job}`, `{user}`, `{node}` are substituted.
    pub idle_command: Vec<String>,
    /// Notify the job's owner (through `[notify] command`) when a job is flagged idle, once per job.
    pub idle_notify: bool,
    /// `[prometheus]`, when the file has it (whatever the source).
    pub prometheus: Option<Prometheus>,
}

impl UtilizationConfig {
    /// The Prometheus server to read utilization from: Some only with `source = "prometheus"` (the
    /// reader makes sure `[prometheus]` is then given).
    pub fn prometheus_source(&self) -> Option<&Prometheus> {
        self.prometheus.as_ref().filter(|_| self.source == UtilizationSource::Prometheus)
    }
}

impl Default for UtilizationConfig {
    fn default() -> Self {
        UtilizationConfig {
            source: UtilizationSource::Agents,
            charge_basis: ChargeBasis::Allocation,
            measured_min_fraction: 0.25,
            idle_threshold_percent: 5.0,
            idle_window: Duration::from_secs(3600),
            idle_command: Vec::new(),
            idle_notify: false,
            prometheus: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UtilizationSource {
    /// `gputokens-agent` on the nodes reports it.
    Agents,
    /// A Prometheus server (dcgm-exporter's metrics), `[prometheus]`.
    Prometheus,
}

/// Replaced in [`Prometheus::query`] by the window as a PromQL duration (`3600s`, or `1500ms` when not
/// whole seconds).
pub const PROMETHEUS_WINDOW: &str = "$window";
/// Average utilization (percent) of each job's GPUs over the window, from dcgm-exporter's metric with
/// the Slurm job in its `hpc_job` label (its HPC job mapping).
pub const DEFAULT_PROMETHEUS_QUERY: &str =
    r#"avg by (hpc_job) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{hpc_job!=""}[$window]))"#;
pub const DEFAULT_PROMETHEUS_JOB_LABEL: &str = "hpc_job";
pub const DEFAULT_PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(10);

/// `[prometheus]`: the server `[usage] source = "prometheus"` reads per-job GPU utilization from. The
/// query is configurable so that sites with other exporters or label names can use it too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prometheus {
    /// Base URL, e.g. `http://127.0.0.1:9090`; http only (a path prefix such as `/prometheus` is kept).
    pub url: String,
    /// PromQL giving one sample per job, in percent 0..100; [`PROMETHEUS_WINDOW`] is substituted.
    pub query: String,
    /// The label that holds the Slurm job id in the query's result; never empty.
    pub job_label: String,
    /// How long one query may take; longer than 0.
    pub timeout: Duration,
}

impl Prometheus {
    /// The server at `url` with the default query, job label and timeout.
    pub fn at(url: &str) -> Prometheus {
        Prometheus {
            url: url.to_string(),
            query: DEFAULT_PROMETHEUS_QUERY.to_string(),
            job_label: DEFAULT_PROMETHEUS_JOB_LABEL.to_string(),
            timeout: DEFAULT_PROMETHEUS_TIMEOUT,
        }
    }

    /// The query with the window substituted.
    pub fn query_for(&self, window: Duration) -> String {
        // PromQL durations: whole seconds when possible, otherwise milliseconds.
        let window = if window.subsec_nanos() == 0 {
            format!("{}s", window.as_secs())
        } else {
            format!("{}ms", window.as_millis())
        };
        self.query.replace(PROMETHEUS_WINDOW, &window)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeBasis {
    /// GPUs × time held.
    Allocation,
    /// GPUs × time held × measured utilization (at least `measured_min_fraction`).
    Measured,
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

impl Default for SlurmTools {
    fn default() -> Self {
        SlurmTools {
            bin_dir: None,
            first_lookback: Duration::from_secs(86400),
            reread: Duration::from_secs(3600),
            sacct_timeout: Duration::from_secs(5 * 60),
            command_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub ledger: PathBuf,
    pub snapshot: PathBuf,
    pub socket: PathBuf,
    /// Where each controller's job_submit plugin writes what it sees (`crate::controller_status`).
    pub controller_status: PathBuf,
    /// Every admin change to balances, one JSON line each, appended after it commits: what a
    /// restored backup lacks. Default beside the ledger; a site puts it on other storage.
    pub admin_journal: PathBuf,
}

impl Paths {
    /// The admin journal's default place: `admin-journal.jsonl` in the ledger's directory.
    pub fn journal_beside(ledger: &std::path::Path) -> PathBuf {
        ledger.with_file_name("admin-journal.jsonl")
    }
}

/// The ledger's database: `url` unset, the SQLite file at `paths.ledger`; else a MariaDB database
/// (`mysql://USER@HOST[:PORT]/DATABASE`), its password the first line of `password_file`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerDatabase {
    pub url: Option<String>,
    pub password_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admins {
    pub users: Vec<String>,
    pub groups: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Intervals {
    pub charge: Duration,
    pub check: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals { charge: Duration::from_secs(3600), check: Duration::from_secs(30 * 60) }
    }
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            ledger: "/var/lib/gputokens/ledger.sqlite".into(),
            snapshot: DEFAULT_SNAPSHOT.into(),
            socket: "/run/gputokens/accountd.sock".into(),
            controller_status: crate::controller_status::default_dir(std::path::Path::new(DEFAULT_SNAPSHOT)),
            admin_journal: "/var/lib/gputokens/admin-journal.jsonl".into(),
        }
    }
}

impl From<&Config> for BucketRules {
    fn from(cfg: &Config) -> Self {
        BucketRules { initial: cfg.initial, daily: cfg.daily, monthly: cfg.monthly, cap: cfg.cap, floor: cfg.floor }
    }
}
