//! gputokens core: configuration, prices, TRES parsing, the bucket rules and the SQLite ledger.
//! The daemon, the CLIs and the Slurm plugins are thin layers over this crate.

pub mod access;
pub mod admission;
pub mod config;
pub mod estimate;
pub mod ledger;
pub mod plugin_config;
pub mod policy;
pub mod preemption;
pub mod pricing;
pub mod protocol;
pub mod request;
pub mod slurm;
pub mod snapshot;
pub mod stamp;
pub mod time;
pub mod tokens;
pub mod tres;
pub mod user_name;

pub use config::Config;
pub use tokens::Tokens;

/// The Slurm release whose headers were installed at build time (`build.rs`).
pub const SLURM_HEADERS: &str = env!("GPUTOKENS_SLURM_HEADERS");
