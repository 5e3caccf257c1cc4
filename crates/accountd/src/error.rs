//! The CLIs' error: a message for the user and the exit code that goes with it.

use std::fmt;
use std::process::ExitCode;

/// Exit 2: the request was refused or invalid (like Slurm's tools, a usage error is 2 too).
pub const EXIT_REFUSED: u8 = 2;
/// Exit 1: something failed that the user did not cause (accountd down, disk trouble).
pub const EXIT_FAILED: u8 = 1;

#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn refused(message: impl Into<String>) -> Self {
        CliError { code: EXIT_REFUSED, message: message.into() }
    }

    pub fn failed(message: impl Into<String>) -> Self {
        CliError { code: EXIT_FAILED, message: message.into() }
    }

    /// Prints `prog: message` to stderr and returns the exit code.
    pub fn report(&self, prog: &str) -> ExitCode {
        eprintln!("{prog}: {}", self.message);
        ExitCode::from(self.code)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<gputokens::config::ConfigError> for CliError {
    fn from(e: gputokens::config::ConfigError) -> Self {
        CliError::refused(e.to_string())
    }
}

impl From<ledger::LedgerError> for CliError {
    fn from(e: ledger::LedgerError) -> Self {
        use ledger::LedgerError::*;
        match e {
            UnknownUser(_) | NothingToRefund(_) | ImportConflict(_) | BadUserName { .. } => {
                CliError::refused(e.to_string())
            }
            _ => CliError::failed(e.to_string()),
        }
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;
