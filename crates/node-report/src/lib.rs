//! The formats a GPU node and accountd share, both halves of each in one place: what an agent
//! reports (`POST /v1/agent/report`: [`AgentReport`], its [`NodeSample`]), each job's use of its GPUs
//! that both ends compute from a sample ([`job_use`]), and how a report proves its node ([`auth`]).
//! The agent (`gputokens-agent`) writes them; accountd reads them. No SQLite, no async runtime.

pub mod auth;
pub mod job_use;
mod sample;

use serde::{Deserialize, Serialize};

pub use sample::{GpuHealth, GpuSample, MigSample, NodeSample, ProcessSample};

/// Where an agent posts its reports, with this JSON body and `Authorization: MUNGE <credential of
/// the body's SHA-256>` (`[agent] auth = "munge"`) or `GPUTOKENS-HMAC …` signed with the node's
/// token (`auth = "token"`): see [`auth`].
pub const REPORT_PATH: &str = "/v1/agent/report";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The node's Slurm name (`hostname -s` unless told otherwise).
    pub node: String,
    pub sample: NodeSample,
    /// The agent's `[agent] interval` in seconds: how far apart its reports are meant to be, which
    /// need not be accountd's (energy between reports further apart than a few is not believed).
    /// None from agents before 0.2.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_secs: Option<u64>,
}
