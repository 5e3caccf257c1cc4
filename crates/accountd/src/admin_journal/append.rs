//! Appending to the journal: after the ledger has committed, so a line never names a change the
//! ledger lacks; and a journal that cannot be written never undoes or loses that change.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use gputokens::entry::Entry;

use super::line::JournalLine;
use crate::resources::Resources;

/// Appends one line per entry (entries without a key have none) in one write, then fsyncs. The
/// file is created mode 0600: it names users, amounts and reasons.
pub fn append(path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    let lines: Vec<JournalLine> = entries.iter().filter_map(JournalLine::of).collect();
    append_lines(path, &lines)
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

/// [`append`] for a change the ledger has already committed: a failure is logged with what the
/// journal lacks and counted in `gputokens_admin_journal_failures_total`, never returned.
pub fn append_or_warn(res: &Resources, entries: &[Entry]) {
    let lines: Vec<JournalLine> = entries.iter().filter_map(JournalLine::of).collect();
    append_lines_or_warn(res, &lines);
}

/// [`append_or_warn`] for lines made by the change's own code (they carry their command).
pub fn append_lines_or_warn(res: &Resources, lines: &[JournalLine]) {
    let path = &res.config.paths.admin_journal;
    if let Err(e) = append_lines(path, lines) {
        res.metrics.admin_journal_failures.inc();
        for line in lines {
            tracing::warn!(
                "admin journal {}: cannot append {} {} to {} (key {}): {e}; the ledger has it, but a restore \
                 from an older backup would not list it",
                path.display(),
                line.kind.as_str(),
                line.amount,
                line.user,
                line.key,
            );
        }
    }
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

    #[test]
    fn a_journal_that_cannot_be_written_is_counted_not_returned() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = gputokens::Config::defaults(std::path::Path::new("test.toml"));
        config.paths.admin_journal = dir.path().join("missing-dir/admin-journal.jsonl");
        let ledger = ledger::Ledger::open(&dir.path().join("ledger.sqlite"), (&config).into()).unwrap();
        let res = Resources::new(config, ledger);
        append_or_warn(&res, &[entry(1, Some("grant:a"))]);
        assert_eq!(res.metrics.admin_journal_failures.get(), 1);
        assert!(res.metrics.encode().contains("gputokens_admin_journal_failures_total 1"));
    }
}
