//! One daemon at a time: `accountd serve` holds a lock beside its socket and its ledger,
//! `gputokens-agent` one in its jobs directory, for as long as it runs. A second one started by mistake (by hand
//! beside systemd, a second unit, a script) exits at once naming the running one, before it touches
//! the socket the first one answers on. The kernel drops the lock with the process, however it ends.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::DaemonError;

/// Held while the daemon runs; the file keeps the holder's PID for the next one's message.
pub struct InstanceLock {
    _file: Flock<File>,
}

impl InstanceLock {
    /// Takes the lock `path` (its directory must exist) for `what` (e.g. "accountd serve with socket
    /// /run/…"), writing this process's PID into it; refused, naming the holder's PID, while another
    /// process holds it.
    pub fn acquire(path: &Path, what: &str) -> Result<InstanceLock, DaemonError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| DaemonError::Failed(format!("cannot open the lock {}: {e}", path.display())))?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = holder_pid(&mut file).map_or("another process".to_string(), |pid| format!("pid {pid}"));
                return Err(DaemonError::Refused(format!(
                    "{what} is already running ({holder}, holding {}): stop it first, or give this one \
                     paths of its own",
                    path.display()
                )));
            }
            Err((_, e)) => return Err(DaemonError::Failed(format!("cannot lock {}: {e}", path.display()))),
        };
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(|e| DaemonError::Failed(format!("cannot write {}: {e}", path.display())))?;
        Ok(InstanceLock { _file: file })
    }
}

/// The PID a lock's holder wrote into it.
fn holder_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// `<path>.lock`: the lock beside a socket or ledger file.
pub fn beside(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("accountd.sock.lock");
        let first = InstanceLock::acquire(&path, "accountd serve").unwrap();
        let refused = InstanceLock::acquire(&path, "accountd serve").err().unwrap().to_string();
        assert!(refused.contains(&format!("already running (pid {}", std::process::id())), "{refused}");
        assert!(refused.contains(&path.display().to_string()), "{refused}");
        drop(first);
        let _again = InstanceLock::acquire(&path, "accountd serve").unwrap();
    }

    #[test]
    fn beside_appends_lock() {
        assert_eq!(beside(Path::new("/run/g/accountd.sock")), PathBuf::from("/run/g/accountd.sock.lock"));
    }
}
