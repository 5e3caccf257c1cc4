//! Tests on the multi-node test cluster (tests/multinode/): two controllers, slurmdbd on MariaDB,
//! three GPU nodes each with its own munged, fake NVML and `gputokens-agent`, and hosts that fail.
//! Each test starts its own cluster, one at a time. Ignored unless asked for: tests/run.sh runs them
//! (`cargo test -p accountd --test multinode -- --include-ignored`) after the one-node suite.

#[path = "../support/mod.rs"]
mod support;
use support::by_hand;

mod alerts;
mod cluster;
mod clusters;
mod failover;
mod jobs;
mod login_host;
mod node_root;
mod outage;
mod pair;
mod partition;
mod reach;
mod restore;

pub use cluster::{wait_seen, wait_until, Cluster, Settings};

/// The series of `node`'s last accepted report.
pub fn last_report(node: &str) -> String {
    format!("gputokens_agent_last_report_timestamp_seconds{{node=\"{node}\"}}")
}

/// The value of `series` in a /metrics text.
pub fn metric(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}
