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
    let kind = if e.is_callers_fault() { ErrorKind::Invalid } else { ErrorKind::Internal };
    Reply::Error { kind, message: e.to_string() }
}
