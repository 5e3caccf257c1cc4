//! The admin journal (`[paths] admin_journal`): every admin change to balances (grant, adjust,
//! refund, import; pools made, their rules changed, transfers between them) as one JSON line,
//! appended after its ledger transaction commits. A ledger restored from a backup lacks the changes
//! made since; the journal, kept on other storage, lists them (`accountd admin journal-check`) with
//! the command that enters each again under its original key.

mod append;
mod check;
mod line;
mod shell_words;

pub use append::{append, append_lines_or_warn, append_or_warn};
pub use check::{check, JournalCheck, JournalProblem};
pub use line::JournalLine;
pub(crate) use shell_words::quote;
