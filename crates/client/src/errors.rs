//! What can go wrong asking accountd, each saying where it asked.

use gputokens::protocol::Reply;

/// Asking accountd failed, or accountd answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answered at `at` (a socket path or a URL), or it stopped answering.
    #[error("cannot reach accountd at {at}: {reason}")]
    Unreachable { at: String, reason: String },
    #[error("accountd at {0} closed the connection without a reply")]
    NoReply(String),
    /// This host cannot prove who is asking (no munge, munged down).
    #[error("cannot prove who you are to accountd at {at}: {reason}")]
    NoCredential { at: String, reason: String },
    #[error("unreadable reply from accountd: {0}")]
    Unreadable(serde_json::Error),
    /// A reply that does not answer the request sent.
    #[error("unexpected reply from accountd: {0:?}")]
    Unexpected(Box<Reply>),
    /// accountd refused the request or found it invalid: the caller's to fix.
    #[error("{0}")]
    Refused(String),
    /// accountd failed to answer.
    #[error("{0}")]
    Internal(String),
}
