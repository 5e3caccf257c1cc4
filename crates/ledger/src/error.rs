//! What the ledger refuses or fails at.

use gputokens::tokens::Tokens;

use super::SchemaError;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot open ledger {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("ledger schema: {0}")]
    Schema(#[from] SchemaError),
    #[error("ledger: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("user '{0}' has no entries in the ledger")]
    UnknownUser(String),
    #[error("job {0} has nothing left to refund")]
    NothingToRefund(String),
    #[error("cannot import: {}", .0.join("; "))]
    ImportConflict(Vec<String>),
    #[error("'{name}' is not a user name: {why}")]
    BadUserName { name: String, why: &'static str },
    #[error("{0}")]
    OutOfRange(String),
    #[error("{user} has no entries in the ledger before the end of {month}: gputokens first saw them on {first_seen}")]
    NotYetSeen { user: String, month: String, first_seen: String },
    /// A statement that does not add up: a bug or a damaged ledger, never shown.
    #[error(transparent)]
    Statement(#[from] gputokens::statement::StatementError),
}

/// The refusal of a change that would take a balance beyond what the ledger can hold.
pub(crate) fn out_of_range(user: &str, balance: Tokens, amount: Tokens) -> LedgerError {
    LedgerError::OutOfRange(format!(
        "{user}'s balance {balance} changed by {amount} would leave the range the ledger can hold ({} to {} tokens)",
        Tokens::MIN,
        Tokens::MAX
    ))
}
