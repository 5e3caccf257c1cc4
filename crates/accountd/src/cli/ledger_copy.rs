//! `accountd admin ledger copy --to TARGET`: the ledger moved into another database (a SQLite
//! ledger into the site's MariaDB, or a MariaDB ledger back into a file), all of it in one
//! transaction, then both read back and shown to hold the same rows.

use std::path::Path;

use gputokens::daemon::instance_lock::{self, InstanceLock};
use gputokens::daemon::DaemonError;
use gputokens::Config;
use ledger::Ledger;

use crate::error::{AccountdError, AccountdResult};
use crate::resources::{mariadb_target, read_only_ledger};

pub fn copy(config: &Config, to: &str, from: Option<&Path>, password_file: Option<&Path>) -> AccountdResult {
    let scratch = tempfile::tempdir().map_err(AccountdError::io("cannot make a scratch directory"))?;
    // A SQLite ledger a serve still writes would go on without the copy: refused while one runs.
    let _serve_stopped = match (from, &config.ledger.url) {
        (None, None) => {
            let lock = instance_lock::beside(&config.paths.ledger);
            match InstanceLock::acquire(&lock, "accountd admin ledger copy") {
                Ok(held) => Some(held),
                Err(DaemonError::Refused(_)) => {
                    return Err(AccountdError::Refused(format!(
                        "accountd serve is running on {} (it holds {}): stop accountd serve first, or what it \
                         writes after the copy stays behind",
                        config.paths.ledger.display(),
                        lock.display()
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
        _ => None,
    };
    let source = read_only_ledger(config, from, scratch.path())?;
    let shown_from = match (from, &config.ledger.url) {
        (Some(file), _) => file.display().to_string(),
        (None, Some(url)) => url.clone(),
        (None, None) => config.paths.ledger.display().to_string(),
    };
    let mut target = open_target(config, to, password_file)?;
    let rows = match source.copy_into(&mut target) {
        Ok(rows) => rows,
        Err(e) => {
            // A new file that holds nothing of it is not left to refuse the next try.
            if !is_url(to) {
                drop(target);
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{to}{suffix}"));
                }
            }
            return Err(e.into());
        }
    };
    let (before, after) = (source.fingerprint()?, target.fingerprint()?);
    crate::out!("{after}");
    if before != after {
        crate::out!("{shown_from} holds:\n{before}");
        return Err(AccountdError::Failed(format!("the copy in {to} differs from {shown_from} (above)")));
    }
    let found = target.verify()?;
    for problem in &found.problems {
        crate::outln!("problem: {problem}");
    }
    if !found.problems.is_empty() {
        return Err(AccountdError::Failed(format!(
            "the copy in {to} does not verify: {} problem(s)",
            found.problems.len()
        )));
    }
    crate::outln!(
        "copied {rows} rows ({} users, {} entries) from {shown_from} to {to}: both hold the same rows, and the copy verifies",
        found.users,
        found.entries
    );
    if is_url(to) && config.ledger.url.is_none() {
        crate::outln!("next: set [ledger] url = \"{to}\" (and password_file), then start accountd serve");
    }
    Ok(())
}

fn is_url(target: &str) -> bool {
    target.starts_with("mysql://") || target.starts_with("mariadb://")
}

/// The ledger to copy into: a MariaDB database (its tables made if it has none) or a new file.
fn open_target(config: &Config, to: &str, password_file: Option<&Path>) -> AccountdResult<Ledger> {
    let rules = config.into();
    if is_url(to) {
        let url = to.replacen("mariadb://", "mysql://", 1);
        let password_file = password_file.or(config.ledger.password_file.as_deref());
        return Ok(Ledger::open_mariadb(&mariadb_target(&url, password_file, &config.slurm_user)?, rules)?);
    }
    let path = Path::new(to);
    if path.exists() {
        return Err(AccountdError::Refused(format!("{to} exists: copy into a new file")));
    }
    Ok(Ledger::open(path, rules)?)
}
