//! What the ledger refuses or fails at, and whose fault each is ([`LedgerError::is_callers_fault`]):
//! the one place that decides it, for every reply, HTTP status and exit code accountd makes of one.

use gputokens::tokens::Tokens;

use super::{BackupError, SchemaError};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot open ledger {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("ledger schema: {0}")]
    Schema(#[from] SchemaError),
    #[error("ledger: {0}")]
    Db(#[from] crate::db::Error),
    #[error("user '{0}' has no entries in the ledger")]
    UnknownUser(String),
    #[error("job {0} has nothing left to refund")]
    NothingToRefund(String),
    #[error("cannot import: {}", .0.join("; "))]
    ImportConflict(Vec<String>),
    #[error("'{name}' is not a user name: {why}")]
    BadUserName { name: String, why: &'static str },
    #[error("'{name}' is not an account name: {why}")]
    BadAccountName { name: String, why: &'static str },
    #[error("account '{0}' has no token pool (accountd admin account add {0})")]
    UnknownPool(String),
    #[error("account '{0}' already has a token pool (accountd admin account set {0} changes its rules)")]
    PoolExists(String),
    /// A request that cannot be done as asked (e.g. a transfer of nothing).
    #[error("{0}")]
    Refused(String),
    /// A change that would take a balance beyond what the ledger can hold.
    #[error("{0}")]
    OutOfRange(String),
    #[error("{user} has no entries in the ledger before the end of {month}: gputokens first saw them on {first_seen}")]
    NotYetSeen { user: String, month: String, first_seen: String },
    /// A stored value gputokens never writes (e.g. negative GPU-seconds): a damaged ledger.
    #[error("{0}")]
    Damaged(String),
    /// A backup that could not be written (nothing is left under its name).
    #[error(transparent)]
    Backup(#[from] BackupError),
    /// A statement that does not add up: a bug or a damaged ledger, never shown.
    #[error(transparent)]
    Statement(#[from] gputokens::statement::StatementError),
}

impl LedgerError {
    /// Whether the caller can fix it: a user, a name, a job, a month or an amount they gave. Else it
    /// is ours: the disk, SQLite, a bug or a damaged ledger. Every variant is named, so a new one
    /// has to be sorted here.
    pub fn is_callers_fault(&self) -> bool {
        match self {
            LedgerError::UnknownUser(_)
            | LedgerError::NothingToRefund(_)
            | LedgerError::ImportConflict(_)
            | LedgerError::BadUserName { .. }
            | LedgerError::BadAccountName { .. }
            | LedgerError::UnknownPool(_)
            | LedgerError::PoolExists(_)
            | LedgerError::Refused(_)
            | LedgerError::NotYetSeen { .. }
            // The amount asked for (a grant, an adjustment) would take the balance out of range: a
            // smaller one goes through.
            | LedgerError::OutOfRange(_)
            // A backup file the admin named exists: --force, or another name.
            | LedgerError::Backup(BackupError::Exists(_)) => true,
            LedgerError::Open { .. }
            | LedgerError::Schema(_)
            | LedgerError::Db(_)
            | LedgerError::Damaged(_)
            | LedgerError::Backup(_)
            | LedgerError::Statement(_) => false,
        }
    }
}

/// The refusal of a change that would take a balance beyond what the ledger can hold.
pub(crate) fn out_of_range(user: &str, balance: Tokens, amount: Tokens) -> LedgerError {
    LedgerError::OutOfRange(format!(
        "{user}'s balance {balance} changed by {amount} would leave the range the ledger can hold ({} to {} tokens)",
        Tokens::MIN,
        Tokens::MAX
    ))
}

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> LedgerError {
        LedgerError::Db(e.into())
    }
}

#[cfg(test)]
mod tests {
    use gputokens::statement::StatementError;

    use super::*;

    #[test]
    fn what_the_caller_gave_is_theirs_to_fix_and_the_rest_ours() {
        let month = "2026-11".parse().unwrap();
        let callers = [
            LedgerError::UnknownUser("x".into()),
            LedgerError::NothingToRefund("7".into()),
            LedgerError::ImportConflict(vec!["x is already in the ledger".into()]),
            LedgerError::BadUserName { name: "a b".into(), why: "a space" },
            LedgerError::NotYetSeen { user: "x".into(), month: "2026-11".into(), first_seen: "2026-12-01".into() },
            out_of_range("x", Tokens::MAX, Tokens::from_micro(1)),
            LedgerError::Backup(BackupError::Exists("/b".into())),
        ];
        for e in &callers {
            assert!(e.is_callers_fault(), "{e:?}");
        }
        let ours = [
            LedgerError::Open { path: "/l".into(), source: std::io::Error::other("read-only") },
            LedgerError::Schema(SchemaError::TooNew { found: 99 }),
            LedgerError::Db(crate::db::Error::NoRows),
            LedgerError::Damaged("negative GPU-seconds -1".into()),
            LedgerError::Backup(BackupError::File { path: "/b".into(), source: std::io::Error::other("disk full") }),
            LedgerError::Statement(StatementError::OutOfRange { user: "x".into(), month }),
        ];
        for e in &ours {
            assert!(!e.is_callers_fault(), "{e:?}");
        }
    }
}
