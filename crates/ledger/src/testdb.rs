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

/// The server of the test cluster (tests/cluster/up.sh starts it), as root over its socket.
fn cluster_server() -> Option<String> {
    ["/run/mysqld/mysqld.sock", "/run/mariadbd/mariadb.sock", "/run/mariadbd/mysqld.sock"]
        .into_iter()
        .find(|s| Path::new(s).exists())
        .map(|socket| format!("mysql://root@localhost/?socket={socket}"))
}

/// Every other test of this binary again, with its ledgers on the cluster's MariaDB: the same
/// charges, refunds, pools, statements and checks hold there as on SQLite.
#[test]
#[ignore = "needs the test cluster's MariaDB: tests/cluster/up.sh"]
fn the_ledgers_tests_pass_on_mariadb() {
    let server = cluster_server().expect("no MariaDB socket: is the test cluster up?");
    let run = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--test-threads=2", "--skip", "testdb::"])
        .env("GPUTOKENS_TEST_MARIADB", &server)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    // Each run's databases are its own (named after paths of its temporary directories): dropped.
    let admin = crate::db::Connection::mariadb(&MariaTarget::server(&server, None).unwrap()).unwrap();
    let made: Vec<String> = admin
        .prepare("SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'gputokens\\_test\\_%'")
        .unwrap()
        .query_map((), |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for name in &made {
        admin.execute_batch(&format!("DROP DATABASE {name}")).unwrap();
    }
    assert!(run.status.success(), "{out}\n{}", String::from_utf8_lossy(&run.stderr));
    let passed = out.lines().find(|l| l.starts_with("test result: ok.")).unwrap_or_default();
    assert!(!made.is_empty() && passed.contains(" passed"), "{out}");
}
