//! The ledger lost and restored from a backup: every job's charge back exactly once, and the admin
//! changes made after the backup listed for the admin to enter again.

use crate::cluster::mn_dir;
use crate::outage::all_charged_once;
use crate::{Cluster, Settings};

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_a_ledger_restored_from_a_backup_recharges_every_job_once_and_lists_later_grants() {
    let cluster = Cluster::up(Settings::default());
    let before = cluster.sbatch("alice", &["--gres=gpu:rtx2080:1", "--wrap", "sleep 3"]);
    all_charged_once(&cluster, &[("alice", before.clone())]);

    // A backup while accountd serve runs (on the shared storage, away from the ledger's disk).
    let backup = mn_dir().join("shared/ledger-backup.sqlite");
    let made = cluster.accountd(None, &["admin", "backup", backup.to_str().unwrap()]).ok();
    assert!(made.stdout.contains("ledger-backup.sqlite"), "{}", made.stdout);

    let after = cluster.sbatch("bob", &["--gres=gpu:a6000:1", "--wrap", "sleep 4"]);
    all_charged_once(&cluster, &[("bob", after.clone())]);
    cluster
        .accountd(None, &["admin", "grant", "alice", "7", "--reason", "course credit", "--key", "grant-after-backup"])
        .ok();
    let granted_balance = cluster.balance("alice");

    // The ledger's disk is lost: accountd stopped, the ledger gone, the backup put in its place.
    cluster.mn(&["stop", "accountd", "ctl1"]).ok();
    let ledger_dir = mn_dir().join("hosts/ctl1/gputokens");
    for entry in std::fs::read_dir(&ledger_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().starts_with("ledger.sqlite") {
            std::fs::remove_file(path).unwrap();
        }
    }
    std::fs::copy(&backup, ledger_dir.join("ledger.sqlite")).unwrap();
    cluster.mn(&["start", "accountd", "ctl1"]).ok();

    // The next cycles read sacct again from the backup's time: both jobs charged once.
    all_charged_once(&cluster, &[("alice", before), ("bob", after)]);
    // The grant is not in the restored ledger; the journal check lists it with the command.
    let check = cluster.accountd(None, &["admin", "journal-check"]);
    assert_eq!(check.code, 2, "{}{}", check.stdout, check.stderr);
    let listed = format!("{}{}", check.stdout, check.stderr);
    let command = listed
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("accountd admin grant alice") && l.contains("grant-after-backup"))
        .unwrap_or_else(|| panic!("the grant is not listed:\n{listed}"))
        .to_string();
    // Entered again as listed (argv from the listed words; it quotes what has spaces), and only once.
    let words = shell_words(&command);
    let argv: Vec<&str> = words.iter().skip(1).map(String::as_str).collect();
    for _ in 0..2 {
        cluster.accountd(None, &argv).ok();
    }
    let check = cluster.accountd(None, &["admin", "journal-check"]);
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
    let balance = cluster.balance("alice");
    assert_eq!(balance, granted_balance, "alice's balance as before the loss");
}

/// The words a POSIX shell makes of `line`, as when the admin pastes the listed command.
fn shell_words(line: &str) -> Vec<String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("set -- {line}; for w in \"$@\"; do printf '%s\\0' \"$w\"; done"))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().split('\0').filter(|w| !w.is_empty()).map(str::to_string).collect()
}
