//! What accountd keeps while it runs, shared by everything that handles a request, a report or a
//! cycle: the configuration, the ledger, the metrics and the state each part keeps between calls.
//! State only: the modules that act on it (handler, health, utilization, slurm_view, charging,
//! cycle…) sit above this one, so none of them needs another's state type.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gputokens::access::Caller;
use gputokens::slurm::partitions;
use gputokens::snapshot::QueueSummary;
use gputokens::Config;
use ledger::Ledger;

use crate::error::{AccountdError, AccountdResult};
use crate::metrics::{JobLabels, Metrics};
use crate::rejected_records::RejectedRecords;

/// The service the socket, the HTTP listener and `accountd serve`'s cycles share.
pub type Shared = Arc<Mutex<Service>>;

pub struct Service {
    pub config: Config,
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
    /// Measured GPU utilization per job, between reports (idle-job detection).
    pub utilization: UtilizationTracker,
    pub health: HealthState,
    /// Partitions, default accounts and queue commitments for the snapshot.
    pub slurm_view: SlurmView,
    /// Preemptions waiting out their grace on threads of their own; joined before the process exits.
    pub pending: Vec<std::thread::JoinHandle<()>>,
    /// Job records that could not be charged, logged once each.
    pub rejected_records: RejectedRecords,
    /// The status page's login links and sessions.
    pub logins: crate::web::Logins,
    /// Where `accountd serve`'s HTTP listener listens, once bound (for login links).
    pub http_address: Option<std::net::SocketAddr>,
}

impl Service {
    /// Opens the ledger for commands that read or write it directly (serve, tick, charge, verify);
    /// only admins may.
    pub fn open_as_admin(config: Config) -> AccountdResult<Service> {
        let caller = Caller::identify(nix::unistd::getuid().as_raw(), &config);
        if !caller.admin {
            return Err(AccountdError::Refused(format!(
                "only root, the SlurmUser ({}) and gputokens admins may run this; you are {}",
                config.slurm_user, caller.name
            )));
        }
        let ledger = Ledger::open(&config.paths.ledger, (&config).into())?;
        Ok(Service::new(config, ledger))
    }

    pub fn new(config: Config, ledger: Ledger) -> Service {
        Service {
            metrics: std::sync::Arc::new(crate::metrics::Metrics::with_users(config.http.per_user_metrics)),
            config,
            ledger,
            utilization: Default::default(),
            health: Default::default(),
            slurm_view: Default::default(),
            pending: Vec::new(),
            rejected_records: Default::default(),
            logins: Default::default(),
            http_address: None,
        }
    }

    /// Waits for preemptions still in their grace period.
    pub fn finish_pending(&mut self) {
        for handle in self.pending.drain(..) {
            let _ = handle.join();
        }
    }
}

/// Per-job utilization state between reports (`utilization::agents`).
#[derive(Debug, Default)]
pub struct UtilizationTracker {
    /// Each job seen running on a GPU, by job ID.
    pub jobs: HashMap<String, JobWatch>,
    /// Each job's user, asked of squeue once.
    pub users: HashMap<String, String>,
}

/// One job's way toward being flagged idle.
#[derive(Debug, Clone)]
pub struct JobWatch {
    pub labels: JobLabels,
    /// Since when its utilization has stayed below `idle_threshold_percent`.
    pub below_since: Option<i64>,
    pub flagged: bool,
}

/// What health keeps between reports: since when GPUs run hot, and which ignored XIDs were logged.
#[derive(Debug, Default)]
pub struct HealthState {
    pub hot: HotSince,
    /// (node, GPU, XID) of XIDs outside `drain_xids` already logged, so each is logged once.
    pub logged: std::collections::HashSet<(String, String, u64)>,
}

/// Since when each GPU (node, `gpu_key`) has been above `max_temperature`, by the agents' sample times.
#[derive(Debug, Default)]
pub struct HotSince(HashMap<(String, String), i64>);

impl HotSince {
    /// Notes one sample at `at` (unix seconds) that found the GPU `overheated` (see
    /// `health::faults::overheated`); returns how long it has been so, None when it is not. A sample
    /// that is not resets; a sample without a reading changes nothing.
    pub fn observe(&mut self, node: &str, gpu: &str, overheated: Option<bool>, at: i64) -> Option<Duration> {
        let key = (node.to_string(), gpu.to_string());
        match overheated {
            None => None,
            Some(false) => {
                self.0.remove(&key);
                None
            }
            Some(true) => {
                let since = *self.0.entry(key).or_insert(at);
                Some(Duration::from_secs(u64::try_from(at - since).unwrap_or(0)))
            }
        }
    }
}

/// What the job_submit plugin needs from Slurm beside the balances, as `slurm_view` last read it.
#[derive(Debug, Default, Clone)]
pub struct SlurmView {
    pub partitions: Vec<partitions::Partition>,
    pub default_accounts: HashMap<String, String>,
    pub queue: Option<QueueSummary>,
    /// What failed at the last read, so a failure is logged when it changes, not every cycle.
    pub last_problems: Vec<String>,
}
