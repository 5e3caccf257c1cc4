//! What the HTTP listener's handlers share: the answering state (with the socket), the report gate
//! and the reports' own state, the caps on work under way, and the secrets read at start.

use std::sync::Arc;

use crate::answering::{self, Shared};
use crate::error::{AccountdError, AccountdResult};
use crate::slurm::Slurm;

use super::report_gate::ReportGate;
use super::reports::ReportState;
use gputokens_node_report::auth;

/// Agent reports (and their MUNGE decodes) checked at once; more are told to come back.
pub(super) const REPORTS_AT_ONCE: usize = 16;

#[derive(Clone)]
pub struct AppState {
    /// What answers requests, shared with the socket.
    pub answering: Shared,
    /// What the agents' reports leave for the next, and their own ledger connection: a report's
    /// Slurm commands (squeue for a job not seen, a drain's scontrol) never hold what answers
    /// sbalance, the page and the API (the audit's L1). Never taken with `answering`.
    pub(super) reports: Arc<std::sync::Mutex<Reports>>,
    pub(super) gate: Arc<ReportGate>,
    pub(super) report_slots: Arc<tokio::sync::Semaphore>,
    /// The JSON API's requests under way (each decodes a MUNGE credential), as many as reports.
    pub(super) api_slots: Arc<tokio::sync::Semaphore>,
    /// The shared metrics, counted into without taking the answering lock.
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    pub(super) slurm: Slurm,
    /// `[http] admin_token_file`'s token: reads the JSON API as an admin.
    pub(super) admin_token: Option<String>,
    /// `[web] proxy_secret_file`'s secret: what a trusted proxy's requests carry.
    pub proxy_secret: Option<String>,
    /// `[web] trusted_proxies`: besides this host, where the admin token may come from.
    pub(super) trusted_proxies: Vec<std::net::IpAddr>,
    /// The names the listener answers to (`[web] url`'s host, `[http] server_names`, this host's).
    pub(super) host_names: Arc<super::host_names::HostNames>,
    pub(super) munge_socket: Option<std::path::PathBuf>,
    /// `[http] per_user_metrics`: without it a scrape reads no balance, and takes no lock.
    pub(super) per_user_metrics: bool,
}

impl AppState {
    pub fn new(answering: Shared) -> AccountdResult<AppState> {
        let (config, metrics, reports_res) = {
            let s = answering::lock(&answering);
            (s.res.config.clone(), s.res.metrics.clone(), s.res.reopen()?)
        };
        let gate = ReportGate::new(&config).map_err(AccountdError::Refused)?;
        let admin_token = config
            .http
            .admin_token_file
            .as_deref()
            .map(|path| read_private_secret(path, "http.admin_token_file"))
            .transpose()?;
        let proxy_secret = config
            .web
            .proxy_secret_file
            .as_deref()
            .map(|path| read_private_secret(path, "web.proxy_secret_file"))
            .transpose()?;
        Ok(AppState {
            answering,
            reports: Arc::new(std::sync::Mutex::new(Reports { state: ReportState::default(), res: reports_res })),
            gate: Arc::new(gate),
            report_slots: Arc::new(tokio::sync::Semaphore::new(REPORTS_AT_ONCE)),
            api_slots: Arc::new(tokio::sync::Semaphore::new(REPORTS_AT_ONCE)),
            metrics,
            slurm: Slurm::of(&config),
            admin_token,
            proxy_secret,
            trusted_proxies: config.web.trusted_proxies.clone(),
            host_names: Arc::new(super::host_names::HostNames::new(
                config.web.url.as_deref(),
                &config.http.server_names,
            )),
            munge_socket: config.agent.munge_socket.clone(),
            per_user_metrics: config.http.per_user_metrics,
        })
    }
}

/// The agents' reports' side: what they leave for the next, and the connection they write with.
pub(super) struct Reports {
    pub state: ReportState,
    pub res: crate::resources::Resources,
}

/// A secret's file must be readable by its owner alone: anyone who can read it is an admin (the
/// admin token) or any user (a proxy's secret).
fn read_private_secret(path: &std::path::Path, key: &str) -> AccountdResult<String> {
    auth::read_private_secret(path, key, None).map_err(AccountdError::Refused)
}

impl AppState {
    /// The metrics, for the listener to count refused connections into.
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        self.metrics.clone()
    }
}

/// A drain's ledger writes, each under the reports' lock taken for it alone.
pub(super) struct LockedRecord<'a>(pub &'a std::sync::Mutex<Reports>);

impl crate::health::DrainRecord for LockedRecord<'_> {
    fn audit(&mut self, action: ledger::Action) {
        let mut reports = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = reports.res.ledger.record_action(&action) {
            tracing::error!(
                "{} of job {} not recorded ({e}): its run will not be refunded automatically",
                action.action,
                action.target
            );
        }
    }

    fn forget(&mut self, faults: &[ledger::GpuFault]) {
        let mut reports = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for f in faults {
            if let Err(e) = reports.res.ledger.clear_gpu_fault(&f.node, &f.gpu, &f.cause) {
                tracing::error!("{}: GPU {}: {} stays recorded ({e}): resume the node by hand", f.node, f.gpu, f.cause);
            }
        }
    }
}
