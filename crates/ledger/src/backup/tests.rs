use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use gputokens::entry::EntryKind;
use gputokens::policy::BucketRules;
use gputokens::tokens::Tokens;

use crate::{BackupError, Ledger, LedgerError, NewEntry};

fn grant(n: usize) -> NewEntry {
    NewEntry::new("writer", EntryKind::Grant, Tokens::whole(1), 1_000 + n as i64, "root", "load", format!("grant:w{n}"))
}

/// The `grant:wN` keys in `ledger`, as their numbers, in order.
fn granted(ledger: &Ledger) -> Vec<usize> {
    let mut numbers: Vec<usize> = ledger
        .history("writer")
        .unwrap()
        .iter()
        .filter_map(|e| e.key.as_deref()?.strip_prefix("grant:w")?.parse().ok())
        .collect();
    numbers.sort_unstable();
    numbers
}

#[test]
fn a_backup_taken_while_another_connection_writes_is_consistent_and_holds_a_prefix_of_the_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let ledger = Ledger::open(&path, BucketRules::default()).unwrap();
    let (stop, written) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let writer = {
        let (path, stop, written) = (path.clone(), stop.clone(), written.clone());
        std::thread::spawn(move || {
            let mut other = Ledger::open(&path, BucketRules::default()).unwrap();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                other.append(&grant(n)).unwrap();
                n += 1;
                written.store(n, Ordering::SeqCst);
            }
        })
    };
    while written.load(Ordering::SeqCst) < 200 {
        std::thread::yield_now();
    }
    let dest = dir.path().join("backups").join("ledger-1.sqlite");
    std::fs::create_dir(dest.parent().unwrap()).unwrap();
    let out = ledger.backup_to(&dest, false).unwrap();
    let during = written.load(Ordering::SeqCst);
    // Writes went on after the copy's snapshot: wait for a few more before stopping the writer.
    while written.load(Ordering::SeqCst) < during + 50 {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();

    assert_eq!(std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(out.bytes, std::fs::metadata(&dest).unwrap().len());
    let beside: Vec<_> = std::fs::read_dir(dest.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(beside, ["ledger-1.sqlite"], "no temporary file, WAL or journal left beside the backup");

    let copy = Ledger::open(&dest, BucketRules::default()).unwrap();
    assert_eq!(copy.verify().unwrap().problems, Vec::<String>::new());
    let in_copy = granted(&copy);
    let total = granted(&ledger);
    assert!(in_copy.len() >= 200 && in_copy.len() < total.len(), "{} of {}", in_copy.len(), total.len());
    assert_eq!(in_copy, (0..in_copy.len()).collect::<Vec<_>>(), "a prefix of the writes, without a gap");
    // Initial balance (1 entry) and the grants it holds.
    assert_eq!(out.entries, in_copy.len() as u64 + 1);
    assert_eq!(out.newest_entry_at, Some(1_000 + in_copy.len() as i64 - 1));
}

#[test]
fn an_existing_file_is_kept_unless_replaced_and_the_copy_carries_meta() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    ledger.set_meta("sacct_read_until", "1234").unwrap();
    let dest = dir.path().join("b.sqlite");
    std::fs::write(&dest, "precious").unwrap();

    let err = ledger.backup_to(&dest, false).unwrap_err();
    assert!(matches!(err, LedgerError::Backup(BackupError::Exists(_))), "{err}");
    assert!(err.is_callers_fault());
    assert_eq!(err.to_string(), format!("{} exists; give --force to replace it", dest.display()));
    assert_eq!(std::fs::read(&dest).unwrap(), b"precious");

    let out = ledger.backup_to(&dest, true).unwrap();
    assert_eq!(out.meta, [("sacct_read_until".to_string(), "1234".to_string())]);
    assert_eq!((out.entries, out.newest_entry_at), (0, None));
    assert_eq!(&std::fs::read(&dest).unwrap()[..16], b"SQLite format 3\0");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4, "ledger, its -wal and -shm, and the backup");
}

#[test]
fn a_backup_into_a_missing_directory_fails_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let err = ledger.backup_to(&dir.path().join("nowhere/b.sqlite"), false).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("nowhere/b.sqlite") && text.contains("No such file or directory"), "{text}");
    assert!(!err.is_callers_fault());
}

/// A backup that crashed left its private directory (a copy of every balance): the next backup
/// removes those a day old, and leaves a recent one (a backup running beside it), a symlink and
/// what is not named as ours.
#[test]
fn the_next_backup_removes_what_a_crashed_one_left() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let backups = dir.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let made = |name: &str, age_secs: u64| {
        let path = backups.join(name);
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("ledger.sqlite"), "half a copy").unwrap();
        let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age_secs);
        std::fs::File::open(&path).unwrap().set_modified(when).unwrap();
        path
    };
    let crashed = made(".gputokens-backup-abc123", 2 * 86_400);
    let running = made(".gputokens-backup-def456", 60);
    let other = made("gputokens-backup-mine", 2 * 86_400);
    let target = made("elsewhere", 0);
    std::os::unix::fs::symlink(&target, backups.join(".gputokens-backup-link")).unwrap();
    ledger.backup_to(&backups.join("ledger.sqlite"), false).unwrap();
    assert!(!crashed.exists(), "a crashed backup's directory was left");
    assert!(running.exists() && other.exists() && target.join("ledger.sqlite").exists());
    assert!(std::fs::symlink_metadata(backups.join(".gputokens-backup-link")).is_ok());
}

/// The backup's own private directory is never taken for a crashed one's, however old the file
/// system's clock makes it look (this host's clock set ahead, an NFS server's behind): a backup
/// that removed its own copy half-way failed with "No such file or directory".
#[test]
fn a_backups_own_directory_is_never_stale() {
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join(".gputokens-backup-ours");
    std::fs::create_dir(&ours).unwrap();
    let when = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 86_400);
    std::fs::File::open(&ours).unwrap().set_modified(when).unwrap();
    let me = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&ours).unwrap());
    super::remove_stale_private_dirs(dir.path(), me, &ours);
    assert!(ours.exists(), "the backup removed its own directory");
    super::remove_stale_private_dirs(dir.path(), me, &dir.path().join("another"));
    assert!(!ours.exists(), "as another backup's, a directory that old is stale");
}
