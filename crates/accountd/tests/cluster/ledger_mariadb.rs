//! The ledger on the test cluster's MariaDB (the one slurmdbd stores into), as a site moves it
//! there: a SQLite ledger charged from real jobs is copied with `accountd admin ledger copy`
//! (refused while serve runs), both fingerprint equal, and after [ledger] url is set serve answers
//! the users from MariaDB and charges their next jobs there, each once.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use gputokens::Tokens;

use crate::by_hand::gpu_cost as cost;
use crate::charging::{balance, elapsed, live_site};
use crate::cluster::{sbatch, serial, wait_finished};
use crate::common::Site;

/// A database and a user of its own on the cluster's MariaDB, with a password in a file only root
/// reads; both dropped when done.
struct MariaDatabase {
    name: String,
    url: String,
    password_file: String,
}

impl MariaDatabase {
    fn create(site: &Site, set: &str) -> MariaDatabase {
        let name = format!("gputokens_ledger_{set}");
        let password = format!("pw-{}-{}", std::process::id(), set);
        mariadb(&format!(
            "DROP DATABASE IF EXISTS {name}; DROP USER IF EXISTS '{name}'@'localhost';
             CREATE DATABASE {name}; CREATE USER '{name}'@'localhost' IDENTIFIED BY '{password}';
             GRANT ALL ON {name}.* TO '{name}'@'localhost';"
        ));
        let password_file = site.file("ledger-password", &format!("{password}\n"));
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Over the server's socket, as slurmdbd reaches it (the releases' root filesystems listen
        // on no TCP port).
        let socket = mariadb("SELECT @@socket");
        let url = format!("mysql://{name}@localhost/{name}?socket={}", socket.trim());
        MariaDatabase { name, url, password_file }
    }

    fn query(&self, sql: &str) -> String {
        mariadb(&format!("USE {}; {sql}", self.name))
    }
}

impl Drop for MariaDatabase {
    fn drop(&mut self) {
        mariadb(&format!("DROP DATABASE IF EXISTS {0}; DROP USER IF EXISTS '{0}'@'localhost';", self.name));
    }
}

/// `mariadb -N -e SQL` as root (over the server's socket, as the cluster's slurmdbd database was made).
fn mariadb(sql: &str) -> String {
    let out = Command::new("mariadb").args(["-N", "-B", "-e", sql]).output().expect("run mariadb");
    assert!(out.status.success(), "mariadb -e {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The fingerprint table `admin verify --fingerprint` prints (its lines of rows and digests).
fn fingerprint(site: &Site, args: &[&str]) -> Vec<String> {
    let mut all = vec!["admin", "verify", "--fingerprint"];
    all.extend_from_slice(args);
    let out = site.accountd(None, &all).ok().stdout;
    out.lines().filter(|l| l.contains(" rows ")).map(str::to_owned).collect()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_ledger_moved_to_mariadb_holds_the_same_rows_and_charges_on_there() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let mut site = live_site();
    let first = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 3"]);
    assert_eq!(wait_finished(&first), "COMPLETED");
    site.accountd(None, &["tick"]).ok();
    site.accountd(None, &["admin", "grant", bob, "5", "--reason", "a course's tokens"]).ok();
    let alice_before = balance(&site, alice);
    assert!(alice_before < Tokens::whole(100), "{alice_before}");
    let db = MariaDatabase::create(&site, cluster.set);

    // While serve writes the SQLite ledger, a copy would leave its later writes behind.
    let busy = site.accountd(None, &["admin", "ledger", "copy", "--to", &db.url, "--password-file", &db.password_file]);
    assert_ne!(busy.code, 0);
    assert!(busy.stderr.contains("stop accountd serve first"), "{}", busy.stderr);
    assert_eq!(db.query("SHOW TABLES").trim(), "", "nothing made while refused");

    site.stop();
    let copied =
        site.accountd(None, &["admin", "ledger", "copy", "--to", &db.url, "--password-file", &db.password_file]);
    let copied = copied.ok();
    assert!(copied.stdout.contains("both hold the same rows, and the copy verifies"), "{}", copied.stdout);
    let sqlite_rows = fingerprint(&site, &[site.path("lib/ledger.sqlite").to_str().unwrap()]);

    // The site now keeps its ledger there; the SQLite file stays as it was.
    let config = std::fs::read_to_string(&site.config).unwrap();
    let ledger_table = format!("[ledger]\nurl = \"{}\"\npassword_file = \"{}\"\n", db.url, db.password_file);
    std::fs::write(&site.config, format!("{ledger_table}{config}")).unwrap();
    assert_eq!(fingerprint(&site, &[]), sqlite_rows, "admin verify of each shows the same rows");
    assert!(sqlite_rows.iter().any(|l| l.starts_with("entries ")), "{sqlite_rows:?}");
    site.restart();

    // Users read their balances from MariaDB through serve, as before.
    assert_eq!(balance(&site, alice), alice_before);
    assert_eq!(balance(&site, bob), Tokens::whole(105));
    let mine = site.sbalance(Some(alice), &["-P", "-n", "-o", "User,Balance"]).ok();
    assert_eq!(mine.stdout.trim(), format!("{alice}|{alice_before}"));

    // Charging carries on there: a new job once, the old one not again.
    let second = sbatch(alice, &["--gres=gpu:a6000:2", "--wrap", "sleep 3"]);
    assert_eq!(wait_finished(&second), "COMPLETED");
    // While serve leads the ledger its cycles do what a tick would: refused beside it.
    let beside = site.accountd(None, &["tick"]);
    assert_ne!(beside.code, 0);
    assert!(beside.stderr.contains("leads this ledger"), "{}", beside.stderr);
    site.stop();
    let out = site.accountd(None, &["tick"]).ok();
    assert!(out.stdout.contains(": 1 charge entries"), "{}", out.stdout);
    let again = site.accountd(None, &["tick"]).ok();
    assert!(again.stdout.contains(": 0 charge entries"), "{}", again.stdout);
    site.restart();
    let expected = alice_before - cost(Tokens::whole(3600), 2 * elapsed(&second));
    assert_eq!(balance(&site, alice), expected);
    // In MariaDB: the first job's charge as copied, the second's (in parts, if a cycle of serve
    // saw it running) adding up to its cost.
    let charges = db.query(&format!(
        "SELECT job_id, -SUM(amount) FROM entries WHERE user = '{alice}' AND kind = 'charge' GROUP BY job_id ORDER BY job_id"
    ));
    let by_job: Vec<(String, i64)> = charges
        .lines()
        .map(|l| {
            let (job, micro) = l.split_once('\t').unwrap();
            (job.to_string(), micro.trim().parse().unwrap())
        })
        .collect();
    let second_cost = cost(Tokens::whole(3600), 2 * elapsed(&second));
    assert_eq!(by_job.len(), 2, "{charges}");
    assert_eq!((by_job[0].0.as_str(), by_job[1].0.as_str()), (first.as_str(), second.as_str()), "{charges}");
    assert_eq!(Tokens::from_micro(by_job[1].1), second_cost, "{charges}");
    let verified = site.accountd(None, &["admin", "verify"]).ok();
    assert!(
        verified.stdout.contains(&format!("{}: ", db.url)) && verified.stdout.contains("consistent"),
        "{}",
        verified.stdout
    );
}
