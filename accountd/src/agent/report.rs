//! What an agent posts to accountd: `POST /v1/agent/report` with this JSON body, and
//! `Authorization: Bearer <token>` when `[agent] token_file` is set.

use serde::{Deserialize, Serialize};

use super::NodeSample;

pub const REPORT_PATH: &str = "/v1/agent/report";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The node's Slurm name (`hostname -s` unless told otherwise).
    pub node: String,
    pub sample: NodeSample,
}

/// Reads the shared secret; surrounding whitespace is not part of it.
pub fn read_token(path: &std::path::Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(path)?.trim().to_string())
}
