//! accountd: the gputokens daemon, its admin CLI and `sbalance`, over the `gputokens` core library.
//! No unsafe code: libmunge is reached through `slurm_ffi::munge`.
#![forbid(unsafe_code)]

pub mod admin_journal;
pub mod answering;
pub mod balance_json;
pub mod balance_row;
pub mod cli;
pub mod command;
pub mod cycles;
pub mod daemon;
pub mod error;
pub mod health;
pub mod http;
pub mod leadership;
pub mod logins;
pub mod metrics;
pub mod ondemand;
pub mod reply;
pub mod resources;
pub mod shadow_view;
pub mod slurm;
pub mod slurm_check;
pub mod slurm_view;
pub mod snapshot;
pub mod socket;
pub mod utilization;

/// How long sbalance and `accountd admin` wait for accountd (a statement of a whole site takes a while).
pub const CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// MUNGE credentials (libmunge), from slurm-ffi; `accountd::munge` as before.
pub use slurm_ffi::munge;

/// `accountd --version`: the crate version and the Slurm headers it was built against.
pub fn version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("{} (Slurm headers {})", env!("CARGO_PKG_VERSION"), env!("GPUTOKENS_SLURM_HEADERS"))
    });
    VERSION.as_str()
}
