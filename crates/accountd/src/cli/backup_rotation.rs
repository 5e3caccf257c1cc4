//! Nightly backups into a directory (`accountd admin backup DIR --keep-days N`): each named by its
//! time, and those older than N days removed, so the directory holds the last N days and no more.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::{AccountdError, AccountdResult};

const PREFIX: &str = "ledger-";
const SUFFIX: &str = ".sqlite";
/// The newest backups (by the time in their names) are never removed, however old: a clock stepped
/// forward (a bad RTC at boot) must not take every backup with it (the audit's L7).
const MIN_KEPT: usize = 7;

/// `DIR/ledger-YYYY-MM-DDTHH-MM-SS.sqlite` for a backup taken at `now` (local time; no `:`, which
/// some tools read as a host name).
pub fn file_in(dir: &Path, now: i64) -> PathBuf {
    let stamp = gputokens::time::format_local(now).replace(':', "-");
    dir.join(format!("{PREFIX}{stamp}{SUFFIX}"))
}

/// Removes the backups (`ledger-*.sqlite`) in `dir` last modified more than `days` days before
/// `now`, never `keep` nor the newest [`MIN_KEPT`] by name; returns the ones removed. Other files
/// are left alone.
pub fn remove_older(dir: &Path, days: u32, now: SystemTime, keep: &Path) -> AccountdResult<Vec<PathBuf>> {
    let listing = AccountdError::io(format!("cannot list the backups in {}", dir.display()));
    let cutoff = now.checked_sub(Duration::from_secs(u64::from(days) * 86_400)).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut backups = Vec::new();
    for item in std::fs::read_dir(dir).map_err(listing)? {
        let item = item.map_err(AccountdError::io(format!("cannot list the backups in {}", dir.display())))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if name.starts_with(PREFIX) && name.ends_with(SUFFIX) {
            backups.push((name, item));
        }
    }
    // Names hold the local time, year first: newest last.
    backups.sort_by(|a, b| a.0.cmp(&b.0));
    let older = backups.len().saturating_sub(MIN_KEPT);
    let mut removed = Vec::new();
    for (_, item) in backups.into_iter().take(older) {
        let path = item.path();
        if path == keep {
            continue;
        }
        let modified = item.metadata().and_then(|m| m.modified());
        if modified.is_ok_and(|t| t < cutoff) {
            std::fs::remove_file(&path).map_err(AccountdError::io(format!("cannot remove {}", path.display())))?;
            removed.push(path);
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_backups_older_than_the_days_kept_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let aged = |name: &str, days: u64| {
            let path = dir.path().join(name);
            std::fs::write(&path, "x").unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(now - Duration::from_secs(days * 86_400 + 60)).unwrap();
            path
        };
        // Nightly backups of the 1st to the 10th, the 1st 15 days old, the 10th 6 days old.
        let nightly: Vec<PathBuf> =
            (1..=10).map(|d| aged(&format!("ledger-2026-11-{d:02}T02-00-00.sqlite"), 16 - d)).collect();
        let other = aged("notes.txt", 30);
        let newest = aged("ledger-2026-11-23T02-00-00.sqlite", 30);
        // Older than 13 days: the 1st to the 3rd; the 4th is too, but among the newest 7 by name.
        let removed = remove_older(dir.path(), 13, now, &newest).unwrap();
        assert_eq!(removed, nightly[..3].to_vec());
        assert!(nightly[3..].iter().all(|p| p.exists()) && other.exists() && newest.exists());
        // A clock a year ahead makes every backup look old: the newest 7 stay.
        let year_ahead = now + Duration::from_secs(366 * 86_400);
        let removed = remove_older(dir.path(), 13, year_ahead, &newest).unwrap();
        assert_eq!(removed, nightly[3..4].to_vec(), "8 left, 7 kept");
        assert!(nightly[4..].iter().all(|p| p.exists()) && newest.exists());
    }

    #[test]
    fn a_backup_in_a_directory_is_named_by_its_time() {
        let name = file_in(Path::new("/b"), 0);
        let name = name.to_str().unwrap();
        assert!(name.starts_with("/b/ledger-19") && name.ends_with(".sqlite") && !name.contains(':'), "{name}");
    }
}
