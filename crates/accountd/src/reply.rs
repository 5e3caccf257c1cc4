//! Error replies to the socket's clients (sbalance, `accountd admin`), and whose fault a ledger
//! error is: the caller's (`Invalid`, fix the request) or accountd's (`Internal`, see its log).

use gputokens::protocol::{ErrorKind, Reply};
use ledger::LedgerError;

pub fn refused(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::Refused, message }
}

pub fn invalid(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::Invalid, message }
}

pub fn from_ledger(e: LedgerError) -> Reply {
    match e {
        LedgerError::UnknownUser(_)
        | LedgerError::NothingToRefund(_)
        | LedgerError::ImportConflict(_)
        | LedgerError::BadUserName { .. }
        | LedgerError::NotYetSeen { .. }
        | LedgerError::OutOfRange(_) => invalid(e.to_string()),
        _ => Reply::Error { kind: ErrorKind::Internal, message: e.to_string() },
    }
}
