//! One charge or check cycle at a time across processes: `accountd serve`, `tick` and `charge` take
//! an exclusive flock on a file beside the ledger for the length of a cycle. Two cycles that read
//! the same queue would each preempt for the same waiting job. The holder writes who it is into
//! the file, so one that waits in vain can say who holds it. The kernel drops the lock when its
//! holder exits, however it exits: it is never left stale.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{AccountdError, AccountdResult};

/// How often a waiting process tries again.
const RETRY: Duration = Duration::from_millis(100);

/// Held for the length of a cycle; dropping it lets the next one run.
pub struct CycleLock {
    file: Flock<File>,
    /// How long it took to get the lock, and who held it before (when anyone did).
    pub waited: Option<(Duration, String)>,
}

/// The lock file of the ledger at `ledger`: `<ledger>.cycle-lock`, in the ledger's directory.
pub fn path_for(ledger: &Path) -> PathBuf {
    let mut name = ledger.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "ledger".into());
    name.push(".cycle-lock");
    ledger.with_file_name(name)
}

impl CycleLock {
    /// Takes the cycle lock of the ledger at `ledger` for `what` (e.g. "accountd tick"), waiting up
    /// to `wait` for a cycle of another process (or of this one) to end. Refused, naming the holder,
    /// when it does not end in time.
    pub fn acquire(ledger: &Path, what: &str, wait: Duration) -> AccountdResult<CycleLock> {
        let path = path_for(ledger);
        let started = Instant::now();
        let mut holder = None;
        let mut file = open(&path)?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => {
                    let waited = holder.map(|h| (started.elapsed(), h));
                    let mut lock = CycleLock { file: locked, waited };
                    lock.write_holder(what);
                    return Ok(lock);
                }
                Err((back, Errno::EWOULDBLOCK)) => {
                    file = back;
                    holder = Some(read_holder(&mut file));
                    if started.elapsed() >= wait {
                        return Err(AccountdError::CycleBusy {
                            holder: holder.unwrap_or_default(),
                            waited: whole_seconds(started.elapsed()).to_string(),
                            lock: path,
                        });
                    }
                    std::thread::sleep(RETRY.min(wait.saturating_sub(started.elapsed())).max(Duration::from_millis(1)));
                }
                Err((_, e)) => return Err(AccountdError::Failed(format!("cannot lock {}: {e}", path.display()))),
            }
        }
    }

    /// "waited 3s for another cycle to end (pid N: ...)", when taking the lock had to wait.
    pub fn waited_note(&self) -> Option<String> {
        let (waited, holder) = self.waited.as_ref()?;
        Some(format!("waited {} for another cycle to end ({holder})", whole_seconds(*waited)))
    }

    /// Who holds the lock, for the next one to read: `pid N: what, since TIME`. Best effort: the
    /// lock itself is the flock, not this text.
    fn write_holder(&mut self, what: &str) {
        let text = format!(
            "pid {}: {what}, since {}\n",
            std::process::id(),
            gputokens::time::format_local(gputokens::time::now())
        );
        let file: &mut File = &mut self.file;
        let written = file.set_len(0).and_then(|()| file.rewind()).and_then(|()| file.write_all(text.as_bytes()));
        if let Err(e) = written {
            tracing::debug!("cannot note the cycle lock's holder: {e}");
        }
    }
}

fn whole_seconds(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

/// Opens (creating, private like the ledger) the lock file; its directory is the ledger's.
fn open(path: &Path) -> AccountdResult<File> {
    // A ledger on MariaDB leaves [paths] ledger's directory unmade: made here as SQLite's would be.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o750)
            .create(dir)
            .map_err(AccountdError::io(format!("cannot make the cycle lock's directory {}", dir.display())))?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(AccountdError::io(format!("cannot open the cycle lock {}", path.display())))
}

fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    let read = file.rewind().and_then(|()| Read::by_ref(file).take(512).read_to_string(&mut text));
    match read {
        Ok(_) if !text.trim().is_empty() => text.trim().to_string(),
        _ => "its holder did not say who it is".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_of_a_ledger_on_mariadb_is_made_for_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("lib/ledger.sqlite");
        let lock = CycleLock::acquire(&ledger, "accountd tick", Duration::ZERO).unwrap();
        drop(lock);
        let made = std::fs::metadata(dir.path().join("lib")).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&made.permissions()) & 0o777, 0o750);
    }

    #[test]
    fn the_lock_file_sits_beside_the_ledger() {
        assert_eq!(
            path_for(Path::new("/var/lib/gputokens/ledger.sqlite")),
            Path::new("/var/lib/gputokens/ledger.sqlite.cycle-lock")
        );
    }

    #[test]
    fn a_second_cycle_is_refused_naming_the_first_and_runs_once_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.sqlite");
        let first = CycleLock::acquire(&ledger, "accountd serve: check cycle", Duration::ZERO).unwrap();
        assert!(first.waited.is_none());

        let err = CycleLock::acquire(&ledger, "accountd tick", Duration::from_millis(300)).err().unwrap().to_string();
        let pid = std::process::id();
        assert!(
            err.starts_with(&format!("another cycle is running (pid {pid}: accountd serve: check cycle, since ")),
            "{err}"
        );
        assert!(err.contains("ledger.sqlite.cycle-lock"), "{err}");

        drop(first);
        let second = CycleLock::acquire(&ledger, "accountd tick", Duration::ZERO).unwrap();
        assert!(second.waited.is_none());
        let text = std::fs::read_to_string(path_for(&ledger)).unwrap();
        assert!(text.starts_with(&format!("pid {pid}: accountd tick, since ")), "{text}");
    }

    #[test]
    fn a_waiting_cycle_gets_the_lock_when_the_holder_lets_go_and_says_whom_it_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.sqlite");
        let first = CycleLock::acquire(&ledger, "accountd serve: charge cycle", Duration::ZERO).unwrap();
        let (taken, released) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let lock = CycleLock::acquire(&ledger, "accountd tick", Duration::from_secs(60));
            taken.send(()).unwrap();
            lock
        });
        // The waiter cannot have it while the first cycle runs.
        assert!(released.recv_timeout(Duration::from_millis(300)).is_err());
        drop(first);
        let second = waiter.join().unwrap().unwrap();
        let (_, holder) = second.waited.expect("it waited");
        assert!(holder.contains("accountd serve: charge cycle"), "{holder}");
    }
}
