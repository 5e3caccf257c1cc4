//! `gputokens-agent`: every `[agent] interval`, samples the node's GPUs through NVML, posts the sample to
//! accountd and serves it on the agent's own `/metrics`. A failed sample or post is logged and tried
//! again next interval: the agent outlives accountd restarts and GPU trouble.

use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use axum::http::header;
use axum::routing::get;
use gputokens::config::AgentAuth;
use gputokens::Config;
use prometheus_client::registry::Registry;

use gputokens::daemon::instance_lock::InstanceLock;
use gputokens_node_report::AgentReport;

use crate::error::{AgentError, AgentResult};
use crate::export::{self, Exporter};
use crate::listener;
use crate::post::{Reporter, Signer};
use crate::{GpuSource, NvmlOptions, NvmlSource, OpenError};

/// How long a stop waits for the loop to finish a sample or post under way.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Descriptors the agent needs besides its listener's connections: NVML's device files, /proc and
/// `jobs_dir` reads, munged's socket, the connection to accountd, the log.
const OTHER_OPEN_FILES: u64 = 192;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `node`: the Slurm node name, `hostname -s` when `None`. `once`: one sample and post, then exit.
pub fn run(config: &Config, node: Option<String>, once: bool) -> AgentResult {
    let cfg = &config.agent;
    // Validated by Config::load; parsed again because AgentConfig keeps the text.
    let interval = humantime::parse_duration(&cfg.interval)
        .map_err(|e| AgentError::Refused(format!("agent.interval '{}': {e}", cfg.interval)))?;
    let node = match node {
        Some(name) if name.trim().is_empty() => return Err(AgentError::Refused("--node must not be empty".into())),
        Some(name) => name,
        None => short_hostname()?,
    };
    let signer = match cfg.auth {
        AgentAuth::Munge => Signer::Munge(cfg.munge_socket.clone()),
        AgentAuth::Token => {
            let path = cfg
                .token_file
                .as_deref()
                .ok_or_else(|| AgentError::Refused("agent.auth = \"token\" needs agent.token_file".into()))?;
            Signer::Token(
                gputokens_node_report::auth::read_private_secret(path, "agent.token_file", None)
                    .map_err(AgentError::Refused)?,
            )
        }
    };
    // One agent per node: a second one would report every sample twice. The lock lives in the jobs
    // directory, made as the SPANK plugin makes it when the agent is first.
    let _lock = match once {
        true => None,
        false => Some(InstanceLock::acquire(
            &{
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(&cfg.jobs_dir)
                    .map_err(AgentError::io(format!("cannot create agent.jobs_dir {}", cfg.jobs_dir.display())))?;
                cfg.jobs_dir.join(".agent.lock")
            },
            &format!("gputokens-agent for node {node} (jobs_dir {})", cfg.jobs_dir.display()),
        )?),
    };
    let listen = if once { None } else { listen_addr(&cfg.listen)? };
    let reporter =
        Reporter::new(&cfg.report_to, config.accountd.ca_file.as_deref(), signer).map_err(AgentError::Failed)?;
    let options = NvmlOptions {
        jobs_dir: cfg.jobs_dir.clone(),
        jobs_dir_user: Some(config.slurm_user.clone()),
        ..NvmlOptions::with_lib_path(&cfg.nvml_library)
    };
    let source = NvmlSource::open(options).map_err(|e| match e {
        OpenError::Thread(_) => AgentError::Failed(e.to_string()),
        _ => AgentError::Refused(e.to_string()),
    })?;
    let (exporter, registry) = Exporter::new(cfg.per_job_metrics);
    let mut agent = Agent { node, source, reporter, exporter, interval };
    if once {
        let summary = agent.step().map_err(AgentError::Failed)?;
        tracing::info!("{summary}");
        return Ok(());
    }
    tracing::info!(
        "gputokens-agent {} for node {}: reporting to {} every {}",
        crate::version(),
        agent.node,
        agent.reporter.destinations(),
        humantime::format_duration(interval)
    );
    serve(agent, interval, listen, registry)
}

struct Agent {
    node: String,
    source: NvmlSource,
    reporter: Reporter,
    exporter: Exporter,
    /// Told to accountd with each report.
    interval: Duration,
}

impl Agent {
    /// One sample, exported and posted; a one-line summary, or what failed.
    fn step(&mut self) -> Result<String, String> {
        let sample = self.source.sample().map_err(|e| {
            self.exporter.sample_failed();
            format!("sample failed: {e}")
        })?;
        self.exporter.update(&self.node, &sample);
        let (gpus, processes) = (sample.gpus.len(), sample.processes.len());
        let report =
            AgentReport { node: self.node.clone(), sample, interval_secs: Some(self.interval.as_secs().max(1)) };
        let took = self.reporter.post(&report).map_err(|e| {
            self.exporter.report_failed();
            format!("report not delivered: {e}")
        })?;
        Ok(format!("reported {gpus} GPUs and {processes} GPU processes of {} to {took}", self.node))
    }
}

/// Steps every `interval` (start to start) until `stop` says so or its sender is gone.
fn sampling_loop(mut agent: Agent, interval: Duration, stop: mpsc::Receiver<()>) {
    let mut failing = false;
    loop {
        let started = Instant::now();
        match agent.step() {
            Ok(summary) if failing => {
                tracing::info!("{summary} (working again)");
                failing = false;
            }
            Ok(summary) => tracing::debug!("{summary}"),
            Err(e) => {
                tracing::warn!("{e}; trying again in {}", humantime::format_duration(interval));
                failing = true;
            }
        }
        if let Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) =
            stop.recv_timeout(interval.saturating_sub(started.elapsed()))
        {
            return;
        }
    }
}

/// Runs the loop on a thread of its own (NVML and reqwest's blocking client block) and the `/metrics`
/// listener on a small runtime, until SIGTERM or SIGINT.
fn serve(agent: Agent, interval: Duration, listen: Option<SocketAddr>, registry: Arc<Registry>) -> AgentResult {
    // The kernel's default soft limit (1024) is what a unit without LimitNOFILE gives.
    gputokens::daemon::conn_caps::raise_open_file_limit(
        listener::MAX_CONNECTIONS as u64 + OTHER_OPEN_FILES,
        "raise LimitNOFILE in gputokens-agent's unit",
    );
    let tcp = listen.map(bind).transpose()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AgentError::io("cannot start the runtime"))?;
    let (stop, stopped) = mpsc::channel();
    // Dropped when the loop's thread ends, however it ends.
    let (ended_tx, ended) = tokio::sync::oneshot::channel::<()>();
    // Started outside the runtime: the reporter's blocking client must not be dropped inside it.
    let worker = std::thread::Builder::new()
        .name("agent-loop".into())
        .spawn(move || {
            let _ended = ended_tx;
            sampling_loop(agent, interval, stopped)
        })
        .map_err(AgentError::io("cannot start the sampling thread"))?;
    let outcome = runtime.block_on(async move {
        let (quit, quitting) = tokio::sync::watch::channel(false);
        if let Some(tcp) = tcp {
            let tcp = tokio::net::TcpListener::from_std(tcp).map_err(AgentError::io("agent metrics listener"))?;
            tokio::spawn(serve_metrics(tcp, registry, quitting));
        }
        let crashed = tokio::select! {
            _ = gputokens::daemon::signals::shutdown_signal() => false,
            _ = ended => true,
        };
        let _ = quit.send(true);
        Ok::<_, AgentError>(crashed)
    });
    let _ = stop.send(());
    let deadline = Instant::now() + STOP_GRACE;
    while !worker.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if outcome? {
        return Err(AgentError::Failed("the sampling loop stopped unexpectedly".into()));
    }
    if !worker.is_finished() {
        tracing::warn!("the sampling loop did not stop within {STOP_GRACE:?}; exiting anyway");
    }
    tracing::info!("agent stopped");
    Ok(())
}

fn bind(addr: SocketAddr) -> AgentResult<std::net::TcpListener> {
    let tcp = gputokens::daemon::port_owner::bind_tcp(addr, "agent.listen")?;
    // Tests and operators with port 0 learn the port from this line.
    tracing::info!("agent metrics on http://{}", tcp.local_addr().unwrap_or(addr));
    Ok(tcp)
}

/// `/metrics` under the listener's caps: a user's connections never take the descriptors the
/// sampling loop needs (the loop has a thread of its own and never waits on the listener).
async fn serve_metrics(
    tcp: tokio::net::TcpListener,
    registry: Arc<Registry>,
    quitting: tokio::sync::watch::Receiver<bool>,
) {
    let app = axum::Router::new().route(
        "/metrics",
        get(move || async move { ([(header::CONTENT_TYPE, OPENMETRICS)], export::encode(&registry)) }),
    );
    listener::serve(tcp, app, quitting).await
}

fn listen_addr(text: &str) -> AgentResult<Option<SocketAddr>> {
    match text.trim() {
        "" | "off" => Ok(None),
        t => t.parse().map(Some).map_err(|e| {
            AgentError::Refused(format!(
                "agent.listen: '{t}' is not an address like \"127.0.0.1:9818\" or \"off\" ({e})"
            ))
        }),
    }
}

/// `hostname -s`, which is what Slurm names a node unless told otherwise. Read from /proc, the same
/// as gethostname(2) on Linux.
fn short_hostname() -> AgentResult<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|e| AgentError::Failed(format!("cannot read the host name ({e}); give --node NAME")))?;
    match text.trim().split('.').next() {
        Some(name) if !name.is_empty() => Ok(name.to_string()),
        _ => Err(AgentError::Refused("the host name is empty; give --node NAME".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_off_or_an_address() {
        assert_eq!(listen_addr("off").unwrap(), None);
        assert_eq!(listen_addr(" 127.0.0.1:0 ").unwrap(), Some("127.0.0.1:0".parse().unwrap()));
        let err = listen_addr("localhost").unwrap_err();
        assert!(matches!(err, AgentError::Refused(_)) && err.to_string().contains("agent.listen"), "{err}");
    }
}
