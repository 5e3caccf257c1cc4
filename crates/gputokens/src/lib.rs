//! gputokens policy: configuration, prices, TRES parsing, the bucket rules, the submit decision
//! (`decision`, on a typed `job_request::JobRequest`) and the formats Slurm and accountd speak. No
//! SQLite and no unsafe code: the ledger, the daemon and the Slurm plugins are layers over this crate.
#![forbid(unsafe_code)]

pub mod access;
pub mod config;
pub mod controller_status;
#[cfg(feature = "daemon")]
pub mod daemon;
pub mod decision;
pub mod entry;
pub mod estimate;
pub mod file_stamp;
pub mod file_trust;
pub mod forecast;
pub mod free_text;
pub mod gpu_record;
pub mod gpu_request;
pub mod gpu_time;
pub mod holds;
pub mod job_request;
pub mod job_shape;
pub mod lending;
pub mod mig;
pub mod notify;
pub mod policy;
pub mod pools;
pub mod preemption;
pub mod pricing;
pub mod protocol;
pub mod refunds;
pub mod slurm;
pub mod snapshot;
pub mod statement;
pub mod stranded_estimate;
pub mod stranded_price;
pub mod stranding;
pub mod time;
pub mod tokens;
pub mod tres;
pub mod user_name;

pub use config::Config;
pub use tokens::Tokens;
