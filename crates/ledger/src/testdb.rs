//! Where the ledger's tests keep a ledger: a SQLite file at the path a test names, or, with
//! `GPUTOKENS_TEST_MARIADB` set to a server's URL without a database
//! (`mysql://root@localhost/?socket=/run/mysqld/mysqld.sock`), a database of that server named
//! after the path, so that the same tests run on both and a test that opens a path again opens
//! the same ledger. The databases are named `gputokens_test_*` (the harness drops them).

use std::path::Path;

use gputokens::policy::BucketRules;

use crate::db::MariaTarget;
use crate::{Ledger, LedgerError};

/// The ledger at `path`, on the database the run tests.
pub fn open(path: &Path, rules: BucketRules) -> Result<Ledger, LedgerError> {
    let Some(server) = std::env::var("GPUTOKENS_TEST_MARIADB").ok() else {
        return Ledger::open(path, rules);
    };
    // SQLite would make the file: the test's checks on the path (its mode, that it exists) hold.
    let _ = std::fs::OpenOptions::new().create(true).append(true).open(path);
    let name = format!("gputokens_test_{:016x}", fnv(path.to_string_lossy().as_bytes()));
    let admin = MariaTarget::server(&server, None).map_err(|e| LedgerError::Refused(e.to_string()))?;
    let conn = crate::db::Connection::mariadb(&admin)?;
    conn.execute_batch(&format!("CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))?;
    let url = server.replacen("/?", &format!("/{name}?"), 1);
    let target = MariaTarget::new(&url, None).map_err(|e| LedgerError::Refused(e.to_string()))?;
    Ledger::open_mariadb(&target, rules)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100000001b3))
}
