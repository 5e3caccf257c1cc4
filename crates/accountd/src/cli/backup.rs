//! `accountd admin backup FILE`: a consistent copy of the ledger, taken beside a running accountd.
//!
//! It opens the ledger file itself, as `admin verify` does, rather than asking accountd over its
//! socket: the copy is one SQLite read transaction, which WAL lets run beside serve's writers, while
//! a copy made by the daemon would hold the lock every socket and HTTP request waits on for as long
//! as it takes. Who may run it is decided the same way as for the other admin commands (root, the
//! SlurmUser, configured admins), and the ledger's mode 0600 lets only accountd's user open it.

use std::path::Path;

use gputokens::time::format_local;
use gputokens::Config;
use ledger::BackupWritten;

use crate::cli::backup_rotation;
use crate::cycles::charge::READ_UNTIL;
use crate::error::{AccountdError, AccountdResult};
use crate::resources::Resources;

pub fn backup(config: &Config, target: &Path, force: bool, keep_days: Option<u32>) -> AccountdResult {
    let dir = target.is_dir().then_some(target);
    if keep_days.is_some() && dir.is_none() {
        return Err(AccountdError::Refused(format!(
            "--keep-days needs a directory of backups; {} is not one",
            target.display()
        )));
    }
    // Opening a ledger that is not there would create an empty one, and back that up.
    if !config.paths.ledger.exists() {
        return Err(AccountdError::Refused(format!("there is no ledger at {}", config.paths.ledger.display())));
    }
    let file = dir.map_or_else(|| target.to_path_buf(), |d| backup_rotation::file_in(d, gputokens::time::now()));
    // Where others can write, a finished backup could be swapped for a ledger of theirs, which a
    // restore would then trust.
    crate::daemon::file_trust::refuse_if_others_can_write(&file, "the backup", Some(&config.slurm_user))?;
    let res = Resources::open_as_admin(config.clone())?;
    let written = res.ledger.backup_to(&file, force)?;
    crate::outln!("{}", described(&written));
    if let (Some(dir), Some(days)) = (dir, keep_days) {
        for old in backup_rotation::remove_older(dir, days, std::time::SystemTime::now(), &file)? {
            crate::outln!("removed {} (older than {days} days)", old.display());
        }
    }
    Ok(())
}

/// What a backup holds, in one line: where, how big, up to when, and where a restore re-reads sacct.
pub fn described(written: &BackupWritten) -> String {
    let newest = written.newest_entry_at.map_or("none".to_string(), format_local);
    let read_until = written
        .meta
        .iter()
        .find(|(key, _)| key == READ_UNTIL)
        .and_then(|(_, value)| value.parse().ok())
        .map_or("never".to_string(), format_local);
    format!(
        "wrote {}: {} bytes, {} entries, newest entry {newest}; sacct read until {read_until} (restored, accountd \
         charges again from there)",
        written.path.display(),
        written.bytes,
        written.entries
    )
}
