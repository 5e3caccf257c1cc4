//! `accountd admin journal-check` (and the journal part of `admin verify`): the admin changes the
//! journal lists and the ledger lacks (after a restore), each with the command that enters it again.

use gputokens::free_text::printable;
use std::path::Path;

use gputokens::time::format_local;
use ledger::Ledger;

use crate::admin_journal::{self, JournalCheck};
use crate::error::AccountdResult;

/// The report's lines and how many of them are problems (missing or unreadable entries).
pub fn report(ledger: &Ledger, journal: &Path) -> AccountdResult<(Vec<String>, usize)> {
    let found = admin_journal::check(ledger, journal)?;
    Ok((lines(&found, journal), found.missing.len() + found.unreadable.len()))
}

fn lines(found: &JournalCheck, journal: &Path) -> Vec<String> {
    let journal = journal.display();
    if !found.found {
        return vec![format!(
            "admin journal {journal}: none (no admin change since it was set up, or it was lost: see Backups and restore in \
             /usr/share/doc/gputokens/operation.md)"
        )];
    }
    let mut out = Vec::new();
    for bad in &found.unreadable {
        out.push(format!("problem: admin journal {journal} line {}: not an entry ({})", bad.line, bad.why));
    }
    for line in &found.missing {
        out.push(format!(
            "missing: {} {} {} {} by {} ({}), key {}",
            format_local(line.at),
            line.kind.as_str(),
            line.amount,
            printable(&line.user),
            printable(&line.admin),
            printable(&line.reason),
            printable(&line.key)
        ));
        // One line whatever the journal holds (commands journaled before control characters were
        // refused kept them inside their quotes).
        out.push(format!("  {}", printable(&line.reenter_command())));
    }
    out.push(match found.missing.len() {
        0 => format!("admin journal {journal}: {} entries, all in the ledger", found.entries),
        n => format!(
            "admin journal {journal}: {n} of {} entries are not in the ledger; enter each again with the command \
             under it (after the first charge cycle, for refunds), then run this again",
            found.entries
        ),
    });
    out
}
