//! accountd's error: what failed, and whose it is to fix ([`Fault`]). Only the binaries end with an
//! exit code, made from the fault (`ExitCode::from(fault)`); nothing inside accountd carries one.

use std::path::PathBuf;

use gputokens::config::ConfigError;
use ledger::LedgerError;

use crate::slurm::{NotASlurmName, SlurmError};
use gputokens_client::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum AccountdError {
    /// gputokens.toml cannot be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A Slurm command failed, timed out, or printed what cannot be read.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// A node name or job ID that must not reach a Slurm command.
    #[error(transparent)]
    SlurmName(#[from] NotASlurmName),
    /// Asking accountd over its socket failed, or accountd answered with an error.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The system failed accountd: a listener, a thread, the runtime, a lock file.
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// Another process's cycle held the cycle lock longer than this one would wait.
    #[error("another cycle is running ({holder}); waited {waited} for it to end (lock {})", lock.display())]
    CycleBusy { holder: String, waited: String, lock: PathBuf },
    /// A file given to accountd cannot be read or does not hold what it should.
    #[error("{}: {problem}", path.display())]
    BadInput { path: PathBuf, problem: String },
    /// Refused or invalid: the caller can fix it.
    #[error("{0}")]
    Refused(String),
    /// Failed in a way the caller did not cause.
    #[error("{0}")]
    Failed(String),
}

/// Whose an error is to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request was refused or invalid (a usage error, a bad file, a name accountd refuses).
    Caller,
    /// Something failed that the caller did not cause (accountd down, Slurm or the disk in trouble).
    System,
}

/// The exit code both binaries (accountd and sbalance) end with: 2 when the caller can fix it
/// (refused or invalid; like Slurm's tools, a usage error is 2 too), 1 when something failed that
/// the caller did not cause (accountd down, disk trouble).
impl From<Fault> for std::process::ExitCode {
    fn from(fault: Fault) -> Self {
        match fault {
            Fault::Caller => std::process::ExitCode::from(2),
            Fault::System => std::process::ExitCode::from(1),
        }
    }
}

impl AccountdError {
    pub fn fault(&self) -> Fault {
        match self {
            AccountdError::Ledger(e) if e.is_callers_fault() => Fault::Caller,
            AccountdError::Config(_)
            | AccountdError::SlurmName(_)
            | AccountdError::BadInput { .. }
            | AccountdError::Refused(_)
            | AccountdError::Client(ClientError::Refused(_)) => Fault::Caller,
            AccountdError::Ledger(_)
            | AccountdError::Slurm(_)
            | AccountdError::Client(_)
            | AccountdError::Io { .. }
            | AccountdError::CycleBusy { .. }
            | AccountdError::Failed(_) => Fault::System,
        }
    }

    /// For `map_err`: an I/O error of the system, said with what accountd was doing.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> AccountdError {
        let context = context.into();
        move |source| AccountdError::Io { context, source }
    }
}

pub type AccountdResult<T = ()> = Result<T, AccountdError>;

impl From<gputokens::daemon::DaemonError> for AccountdError {
    fn from(e: gputokens::daemon::DaemonError) -> Self {
        match e {
            gputokens::daemon::DaemonError::Refused(why) => AccountdError::Refused(why),
            gputokens::daemon::DaemonError::Failed(why) => AccountdError::Failed(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_the_callers_and_failures_the_systems() {
        assert_eq!(AccountdError::Ledger(LedgerError::UnknownUser("x".into())).fault(), Fault::Caller);
        assert_eq!(AccountdError::Ledger(LedgerError::OutOfRange("x".into())).fault(), Fault::Caller);
        assert_eq!(AccountdError::Ledger(LedgerError::Damaged("x".into())).fault(), Fault::System);
        assert_eq!(AccountdError::Client(ClientError::Refused("no".into())).fault(), Fault::Caller);
        assert_eq!(AccountdError::Client(ClientError::Internal("down".into())).fault(), Fault::System);
        let io = AccountdError::io("cannot listen on x")(std::io::Error::other("busy"));
        assert_eq!((io.fault(), io.to_string().as_str()), (Fault::System, "cannot listen on x: busy"));
    }
}
