//! Why the agent stopped, and its exit status: 2 where the site must change something (the config,
//! a second agent running), 1 where the system failed.

use std::process::ExitCode;

use gputokens::daemon::DaemonError;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The config or the command line asks for what cannot be done, or another agent runs.
    #[error("{0}")]
    Refused(String),
    /// The node or the network failed.
    #[error("{0}")]
    Failed(String),
}

pub type AgentResult<T = ()> = Result<T, AgentError>;

impl AgentError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            AgentError::Refused(_) => ExitCode::from(2),
            AgentError::Failed(_) => ExitCode::from(1),
        }
    }
}

impl From<DaemonError> for AgentError {
    fn from(e: DaemonError) -> Self {
        match e {
            DaemonError::Refused(why) => AgentError::Refused(why),
            DaemonError::Failed(why) => AgentError::Failed(why),
        }
    }
}

impl AgentError {
    /// For `map_err`: an I/O error of the system, said with what the agent was doing.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
        let context = context.into();
        move |e| AgentError::Failed(format!("{context}: {e}"))
    }
}

impl From<gputokens::config::ConfigError> for AgentError {
    fn from(e: gputokens::config::ConfigError) -> Self {
        AgentError::Refused(e.to_string())
    }
}
