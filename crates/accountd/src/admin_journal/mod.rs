//! The admin journal (`[paths] admin_journal`): every admin change to balances (grant, adjust,
//! refund, import; pools made, their rules changed, transfers between them) as one JSON line,
//! marked in the ledger in its own transaction and appended after it commits. A ledger restored from a backup lacks the changes
//! made since; the journal, kept on other storage, lists them (`accountd admin journal-check`) with
//! the command that enters each again under its original key.

mod append;
mod check;
mod commands;
mod exporter;
mod line;
mod shell_words;

pub use append::{append, export};
pub use check::{check, JournalCheck, JournalProblem};
pub use exporter::{request, start as start_exporter, wait};
pub use line::JournalLine;
