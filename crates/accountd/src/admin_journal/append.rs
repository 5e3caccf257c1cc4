//! Exporting to the journal: the ledger marks each admin change for the journal in the change's own
//! transaction; after the commit the marked entries' lines are appended here and unmarked (by
//! serve's exporter thread). A crash in between leaves the marks, exported when serve starts again
//! (a line may then appear twice: the journal check lists each key once). A journal that cannot
//! be written never undoes or loses a change.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use gputokens::entry::Entry;
use ledger::{Journaled, PendingJournal};

use super::line::JournalLine;
use crate::resources::Resources;

/// Appends one line per entry (entries without a key have none) in one write, then fsyncs. The
/// file is created mode 0600: it names users, amounts and reasons.
pub fn append(path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    let lines: Vec<JournalLine> = entries.iter().filter_map(JournalLine::of).collect();
    append_lines(path, &lines)
}

/// Appends the lines of the changes the ledger has marked for the journal and unmarks them. What
/// fails is logged and counted in `gputokens_admin_journal_failures_total`, never returned: the
/// changes are committed, and their marks stay to be tried again. Run by serve's one exporter
/// thread (`exporter`): no two exports of a process read the same marks.
pub fn export(res: &mut Resources) {
    let pending = match res.ledger.pending_journal() {
        Ok(pending) if pending.is_empty() => return,
        Ok(pending) => pending,
        Err(e) => {
            res.metrics.admin_journal_failures.inc();
            tracing::warn!("admin journal: cannot read the changes waiting for it from the ledger: {e}");
            return;
        }
    };
    let lines: Vec<JournalLine> = pending.iter().filter_map(line_of).collect();
    let path = &res.config.paths.admin_journal;
    if let Err(e) = append_lines(path, &lines) {
        res.metrics.admin_journal_failures.inc();
        let keys: Vec<&str> = lines.iter().map(|l| l.key.as_str()).collect();
        tracing::warn!(
            "admin journal {}: cannot append {} change(s) ({}): {e}; the ledger has them and keeps them \
             marked: they are appended once the journal can be written (at the next change, or within a check interval)",
            path.display(),
            lines.len(),
            gputokens::free_text::printable(&keys.join(", ")),
        );
        return;
    }
    let ids: Vec<i64> = pending.iter().map(|p| p.entry.id).collect();
    if let Err(e) = res.ledger.journal_exported(&ids) {
        // Appended again at the next export: listed once by the journal check.
        tracing::warn!("admin journal: appended {} line(s) but cannot unmark them in the ledger: {e}", ids.len());
    }
}

/// The journal line of a marked entry, with the command that enters it again where its kind alone
/// does not say.
fn line_of(pending: &PendingJournal) -> Option<JournalLine> {
    let line = JournalLine::of(&pending.entry)?;
    let command = match &pending.journaled {
        Journaled::AsItsKind => None,
        Journaled::Expiring { ends } => {
            Some(format!("{} --expires {}", line.reenter_command(), gputokens::time::format_rfc3339(*ends)))
        }
        Journaled::PoolCreated { rules, user_limit } => {
            Some(super::commands::pool_created(&line.user, rules, *user_limit))
        }
        Journaled::PoolRules { rules, user_limit, parent, lends } => {
            Some(super::commands::pool_rules(&line.user, &line.key, rules, *user_limit, (parent.as_deref(), *lends)))
        }
        Journaled::Allocation { parent, amount, starts, ends } => {
            Some(super::commands::allocation(&line.user, parent, *amount, (*starts, *ends)))
        }
        Journaled::Transfer { from, to, amount, reason, key } => {
            Some(super::commands::transfer(from, to, *amount, reason, key))
        }
    };
    Some(JournalLine { command, ..line })
}

fn append_lines(path: &Path, lines: &[JournalLine]) -> std::io::Result<()> {
    let mut text = String::new();
    for line in lines {
        text.push_str(&serde_json::to_string(line).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    if text.is_empty() {
        return Ok(());
    }
    // Never where others could swap or edit it (its directories included), never through a symlink:
    // one planted where the journal should be (other storage the README suggests) would have a root
    // accountd append to any file (the audit's L8).
    if let Some(why) = gputokens::file_trust::untrusted(path, "the admin journal") {
        return Err(std::io::Error::other(why));
    }
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use gputokens::entry::EntryKind;
    use gputokens::Tokens;

    use super::*;

    fn entry(id: i64, key: Option<&str>) -> Entry {
        Entry {
            id,
            user: "alice".into(),
            at: 100 + id,
            kind: EntryKind::Grant,
            amount: Tokens::whole(5),
            balance_after: Tokens::whole(105),
            actor: "root".into(),
            reason: "course".into(),
            job_id: None,
            key: key.map(String::from),
            gpu_type: None,
            gpu_seconds: None,
        }
    }

    #[test]
    fn appends_one_line_per_keyed_entry_to_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin-journal.jsonl");
        append(&path, &[entry(1, Some("grant:a")), entry(2, None)]).unwrap();
        append(&path, &[entry(3, Some("grant:b"))]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let keys: Vec<String> = text.lines().map(|l| serde_json::from_str::<JournalLine>(l).unwrap().key).collect();
        assert_eq!(keys, ["grant:a", "grant:b"]);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_symlink_where_the_journal_goes_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join(".bashrc");
        std::fs::write(&victim, "# theirs\n").unwrap();
        let journal = dir.path().join("admin-journal.jsonl");
        std::os::unix::fs::symlink(&victim, &journal).unwrap();
        assert!(append(&journal, &[entry(1, Some("grant:k"))]).is_err(), "appended through a symlink");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# theirs\n");
    }

    /// In a directory others can write they could swap the journal for a file of theirs.
    #[test]
    fn a_journal_where_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = append(&shared.join("admin-journal.jsonl"), &[entry(1, Some("grant:k"))]).unwrap_err();
        assert!(refused.to_string().contains("is writable by every user (mode 777)"), "{refused}");
        assert!(!shared.join("admin-journal.jsonl").exists());
    }

    /// A change whose line cannot be appended (the journal's directory missing, as after a crash
    /// between the commit and the append) stays marked in the ledger and is appended, once, as
    /// soon as the journal can be written.
    #[test]
    fn a_line_that_cannot_be_appended_waits_in_the_ledger_until_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = gputokens::Config::defaults(std::path::Path::new("test.toml"));
        config.paths.admin_journal = dir.path().join("later/admin-journal.jsonl");
        let ledger = ledger::Ledger::open(&dir.path().join("ledger.sqlite"), (&config).into()).unwrap();
        let mut res = Resources::new(config, ledger);
        let grant =
            ledger::NewEntry::new("alice", EntryKind::Grant, Tokens::whole(5), 100, "root", "x", "grant:a".into());
        res.ledger.append(&grant.journaled(Journaled::AsItsKind)).unwrap();
        export(&mut res);
        assert_eq!(res.metrics.admin_journal_failures.get(), 1);
        assert!(res.metrics.encode().contains("gputokens_admin_journal_failures_total 1"));
        assert_eq!(res.ledger.pending_journal().unwrap().len(), 1, "kept marked");
        std::fs::create_dir(dir.path().join("later")).unwrap();
        export(&mut res);
        export(&mut res);
        let text = std::fs::read_to_string(&res.config.paths.admin_journal).unwrap();
        let keys: Vec<String> = text.lines().map(|l| serde_json::from_str::<JournalLine>(l).unwrap().key).collect();
        assert_eq!(keys, ["grant:a"]);
        assert!(res.ledger.pending_journal().unwrap().is_empty());
    }
}
