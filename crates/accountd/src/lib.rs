//! accountd: the gputokens daemon, its admin CLI and `sbalance`, over the `gputokens` core library.
//! No unsafe code: libmunge is reached through `slurm_ffi::munge`.
#![forbid(unsafe_code)]

pub mod admin;
pub mod agent;
pub mod auth;
pub mod charging;
pub mod cli;
pub mod client;
pub mod command;
pub mod conn_caps;
pub mod cycle;
pub mod cycle_lock;
pub mod error;
pub mod file_trust;
pub mod handler;
pub mod health;
pub mod http;
pub mod http_listener;
pub mod instance_lock;
pub mod metrics;
pub mod notify;
pub mod now_arg;
pub mod plugstack;
pub mod port_owner;
pub mod preempt_jobs;
pub mod rate_limit;
pub mod rejected_records;
pub mod report_gate;
pub mod sacct_file;
pub mod sbalance;
pub mod serve_cycles;
pub mod server;
pub mod service;
pub mod signals;
pub mod slurm;
pub mod slurm_check;
pub mod slurm_view;
pub mod snapshot_access;
pub mod statement_output;
pub mod stdout;
pub mod utilization;
pub mod web;

/// MUNGE credentials (libmunge), from slurm-ffi; `accountd::munge` as before.
pub use slurm_ffi::munge;

/// `accountd --version`: the crate version and the Slurm headers it was built against.
pub fn version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("{} (Slurm headers {})", env!("CARGO_PKG_VERSION"), env!("GPUTOKENS_SLURM_HEADERS"))
    });
    VERSION.as_str()
}
