//! `accountd admin backup`: a consistent copy of the ledger while other connections write to it,
//! with SQLite's online backup API, put in place so that a crash never leaves half a backup under
//! the backup's name.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::Connection;

use super::{Ledger, LedgerError};

/// How often a step the source's lock refused is tried again, and how long apart.
const BUSY_RETRIES: u32 = 100;
const BUSY_PAUSE: Duration = Duration::from_millis(50);

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupWritten {
    pub path: PathBuf,
    pub bytes: u64,
    pub entries: u64,
    /// The time of the newest entry in the copy (unix seconds); None for an empty ledger.
    pub newest_entry_at: Option<i64>,
    /// The copy's `meta` values (e.g. how far sacct had been read), by key.
    pub meta: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{} exists; give --force to replace it", .0.display())]
    Exists(PathBuf),
    #[error("backup {}: {source}", path.display())]
    File { path: PathBuf, source: std::io::Error },
    #[error("backup {}: {source}", path.display())]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error("a ledger on MariaDB is backed up by the site's MariaDB backups (mariadb-dump, mariabackup), or copied to SQLite with `accountd admin ledger copy --to FILE`")]
    NotSqlite,
    #[error("backup {}: the ledger stayed locked for {} s", path.display(), (BUSY_PAUSE * BUSY_RETRIES).as_secs())]
    Busy { path: PathBuf },
}

impl Ledger {
    /// Copies the ledger to `dest` (mode 0600): into a file of a new private directory beside it,
    /// then moved over it. An existing `dest` is refused unless `replace`.
    pub fn backup_to(&self, dest: &Path, replace: bool) -> Result<BackupWritten, LedgerError> {
        if !replace && dest.exists() {
            return Err(BackupError::Exists(dest.to_path_buf()).into());
        }
        let private = private_dir_beside(dest)?;
        let temp = private.path().join("ledger.sqlite");
        let Some(conn) = self.conn.as_sqlite() else {
            return Err(BackupError::NotSqlite.into());
        };
        let written = copy_into(conn, &temp)?;
        place(&temp, dest, replace)?;
        Ok(BackupWritten { path: dest.to_path_buf(), ..written })
    }
}

/// A new directory only this process's user can enter (mkdtemp, 0700) in `dest`'s directory: the
/// same file system, so the move is atomic, and no one else can swap the copy for a file of theirs
/// between its creation and SQLite opening it by name. Removed, with what is left in it, when dropped.
fn private_dir_beside(dest: &Path) -> Result<tempfile::TempDir, BackupError> {
    let dir = dest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let private = tempfile::Builder::new()
        .prefix(PRIVATE_PREFIX)
        .tempdir_in(dir)
        .map_err(|source| BackupError::File { path: dest.to_path_buf(), source })?;
    // Its owner is this process's user. Ours is new, yet passed over by name: its age is the file
    // system's clock against this host's, and a clock set ahead (or an NFS server's behind) would
    // make it look a day old.
    if let Ok(meta) = std::fs::metadata(private.path()) {
        remove_stale_private_dirs(dir, std::os::unix::fs::MetadataExt::uid(&meta), private.path());
    }
    Ok(private)
}

const PRIVATE_PREFIX: &str = ".gputokens-backup-";
/// A private directory untouched this long was left by a backup that crashed (a backup takes
/// seconds to minutes): each holds a copy of every balance, and would fill the disk in time.
const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Removes the private directories of crashed backups in `dir`: only real directories (never
/// through a symlink) of this process's user, named as ours, untouched for a day. What cannot be
/// removed is left (logged by nothing: the next backup tries again).
fn remove_stale_private_dirs(dir: &Path, me: u32, ours: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(PRIVATE_PREFIX) || entry.path() == ours {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
        let old = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age >= STALE_AFTER);
        if meta.is_dir() && meta.uid() == me && old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The whole ledger into the new file `temp`, as a self-contained database (no WAL beside it).
fn copy_into(source: &Connection, temp: &Path) -> Result<BackupWritten, BackupError> {
    let file_err = |source| BackupError::File { path: temp.to_path_buf(), source };
    let sql_err = |source| BackupError::Sqlite { path: temp.to_path_buf(), source };
    // Created private before SQLite opens it: the copy holds every balance and history.
    OpenOptions::new().write(true).create_new(true).mode(0o600).open(temp).map_err(file_err)?;
    let mut copy = Connection::open(temp).map_err(sql_err)?;
    {
        let backup = Backup::new(source, &mut copy).map_err(sql_err)?;
        // One step copies every page inside one read transaction: in WAL mode writers go on beside
        // it and the copy is the ledger as of that transaction's start. Smaller steps would restart
        // the copy at every write of another connection and might never end under a busy ledger.
        let mut tries = 0;
        loop {
            match backup.step(-1).map_err(sql_err)? {
                StepResult::Done => break,
                StepResult::More => continue,
                StepResult::Busy | StepResult::Locked if tries < BUSY_RETRIES => {
                    tries += 1;
                    std::thread::sleep(BUSY_PAUSE);
                }
                _ => return Err(BackupError::Busy { path: temp.to_path_buf() }),
            }
        }
    }
    // A rollback-journal database is one file: what is renamed is the whole backup.
    let _: String = copy.query_row("PRAGMA journal_mode = DELETE", (), |r| r.get(0)).map_err(sql_err)?;
    let facts = facts_of(&copy).map_err(sql_err)?;
    copy.close().map_err(|(_, e)| sql_err(e))?;
    let file = File::open(temp).map_err(file_err)?;
    file.sync_all().map_err(file_err)?;
    let bytes = file.metadata().map_err(file_err)?.len();
    Ok(BackupWritten { bytes, ..facts })
}

fn facts_of(copy: &Connection) -> rusqlite::Result<BackupWritten> {
    let (entries, newest_entry_at) =
        copy.query_row("SELECT COUNT(*), MAX(at) FROM entries", (), |r| Ok((r.get(0)?, r.get(1)?)))?;
    let meta = copy
        .prepare("SELECT key, value FROM meta ORDER BY key")?
        .query_map((), |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(BackupWritten { path: PathBuf::new(), bytes: 0, entries, newest_entry_at, meta })
}

/// Moves the finished copy to `dest` and makes the rename durable. Without `replace`, a hard link:
/// it fails if `dest` appeared meanwhile, where a rename would silently replace it.
fn place(temp: &Path, dest: &Path, replace: bool) -> Result<(), BackupError> {
    let dest_err = |source| BackupError::File { path: dest.to_path_buf(), source };
    if replace {
        std::fs::rename(temp, dest).map_err(dest_err)?;
    } else {
        std::fs::hard_link(temp, dest).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => BackupError::Exists(dest.to_path_buf()),
            _ => dest_err(e),
        })?;
        std::fs::remove_file(temp).map_err(dest_err)?;
    }
    let dir = dest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(dest_err)
}

#[cfg(test)]
mod tests;
