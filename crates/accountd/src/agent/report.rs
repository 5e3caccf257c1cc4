//! What an agent posts to accountd: `POST /v1/agent/report` with this JSON body and
//! `Authorization: MUNGE <credential of the body's SHA-256>` (`[agent] auth = "munge"`) or
//! `Authorization: Bearer <the node's token>` (`auth = "token"`); see `crate::http::auth`.

use serde::{Deserialize, Serialize};

use super::NodeSample;

pub const REPORT_PATH: &str = "/v1/agent/report";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The node's Slurm name (`hostname -s` unless told otherwise).
    pub node: String,
    pub sample: NodeSample,
}
