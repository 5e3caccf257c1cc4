//! After a restore: which journal lines the ledger lacks. A line is in the ledger when an entry
//! has its idempotency key; entering it again under that key makes it so, and nothing more.

use std::collections::HashSet;
use std::path::Path;

use ledger::Ledger;

use super::line::JournalLine;
use crate::error::{AccountdError, AccountdResult};

/// What the journal holds that the ledger lacks.
#[derive(Debug, Default)]
pub struct JournalCheck {
    /// False when there is no journal file (no admin change yet, or the journal was lost).
    pub found: bool,
    /// Distinct entries the journal lists.
    pub entries: usize,
    /// In journal order, each once.
    pub missing: Vec<JournalLine>,
    /// Lines that are not journal entries (e.g. one torn by a crash mid-write).
    pub unreadable: Vec<JournalProblem>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalProblem {
    /// 1-based.
    pub line: usize,
    pub why: String,
}

impl JournalCheck {
    /// Whether the ledger holds every change the journal lists.
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.unreadable.is_empty()
    }
}

pub fn check(ledger: &Ledger, journal: &Path) -> AccountdResult<JournalCheck> {
    let text = match std::fs::read_to_string(journal) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(JournalCheck::default()),
        Err(e) => return Err(AccountdError::io(format!("cannot read the admin journal {}", journal.display()))(e)),
    };
    let mut found = JournalCheck { found: true, ..JournalCheck::default() };
    let mut seen = HashSet::new();
    for (number, text) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let line: JournalLine = match serde_json::from_str(text) {
            Ok(line) => line,
            Err(e) => {
                found.unreadable.push(JournalProblem { line: number + 1, why: e.to_string() });
                continue;
            }
        };
        // A change entered again after a restore is journaled again: listed once.
        if !seen.insert(line.key.clone()) {
            continue;
        }
        found.entries += 1;
        // Its key in the ledger is proof only where it names this very change: a key another
        // change took (a coordinator's, under an admin's key) hides nothing (the audit's L3).
        let recorded = ledger.entry_with_key(&line.key)?;
        if !recorded.is_some_and(|e| e.user == line.user && e.kind == line.kind && e.amount == line.amount) {
            found.missing.push(line);
        }
    }
    Ok(found)
}
