//! GPU energy per job run: kept per run, node and local day; on statements, each charged job's
//! energy of the month on its GPU type's line; a ledger from before the table gains it.

use std::collections::BTreeMap;

use super::*;
use gputokens::pricing::PriceTable;
use gputokens::statement::{energy_total, Month};
use gputokens::time::{local_date, parse_timestamp};
use gputokens::tokens::Tokens;

fn at(text: &str) -> i64 {
    parse_timestamp(text).unwrap()
}

pub(super) fn run(job: &str, gpu_type: &str, start: &str, hours: u64) -> UsageRecord {
    UsageRecord {
        job_id: job.into(),
        user: "alice".into(),
        account: None,
        segment_start: at(start),
        sluid: None,
        milli_gpus: BTreeMap::from([(gpu_type.to_string(), 1000)]),
        elapsed: hours * 3600,
        nodes: 1,
        weight_permille: 1000,
        held: Default::default(),
        stranding: None,
        lent: None,
    }
}

fn prices() -> PriceTable {
    PriceTable::new(
        BTreeMap::from([("a6000".to_string(), Tokens::whole(4)), ("rtx3090".to_string(), Tokens::whole(1))]),
        None,
    )
}

#[test]
fn energy_is_kept_per_run_and_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let first = at("2026-11-26T06:00:00");
    // Job 7's first run on two nodes, reported twice each; then it is requeued (a run since later).
    l.record_energy("7", first, "gpu1", first + 10, 1000).unwrap();
    l.record_energy("7", first, "gpu1", first + 20, 500).unwrap();
    l.record_energy("7", first + 5, "gpu2", first + 15, 200).unwrap();
    l.record_energy("7", first + 3600, "gpu1", first + 3610, 70).unwrap();
    l.record_energy("8", first, "gpu1", first + 10, 9).unwrap();
    let run = |since: i64, node: &str, joules: u64| RunEnergy { since, node: node.into(), joules };
    assert_eq!(
        l.job_energy("7").unwrap(),
        [run(first, "gpu1", 1500), run(first + 5, "gpu2", 200), run(first + 3600, "gpu1", 70)]
    );
    assert_eq!(l.job_energy("9").unwrap(), []);
}

/// A job's energy of the month is on its GPU type's charge line, every run and node of it summed;
/// what it used in another month is not; a job with no charge this month adds nothing.
#[test]
fn each_charged_jobs_energy_of_the_month_is_on_its_charge_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let since = at("2026-11-26T06:00:00");
    l.record_energy("1", since, "gpu1", since + 60, 3_600_000).unwrap(); // 1 kWh
    l.record_energy("1", since, "gpu2", since + 60, 1_800_000).unwrap();
    l.record_energy("1", since, "gpu1", at("2026-10-31T23:00:00"), 7_000_000).unwrap(); // October
    l.record_energy("2", since, "gpu1", since + 60, 360_000).unwrap();
    l.record_energy("3", since, "gpu1", since + 60, 1).unwrap(); // never charged
    let runs = [
        run("1", "a6000", "2026-11-26T06:00:00", 2),
        run("2", "rtx3090", "2026-11-26T06:00:00", 1),
        run("4", "a6000", "2026-11-26T06:00:00", 1),
    ];
    let now = at("2026-11-26T12:00:00");
    l.charge(&runs, &prices(), now).unwrap();
    // Charged again later in the month: still one job, counted once.
    l.charge(&[run("1", "a6000", "2026-11-26T06:00:00", 3)], &prices(), now + 3600).unwrap();

    let month = Month::of(local_date(now));
    let statement = l.statement("alice", month, Issue { at: now + 3600, partial: true }).unwrap();
    let line_energy: Vec<(Option<&str>, Option<u64>)> =
        statement.lines.iter().map(|l| (l.gpu_type.as_deref(), l.energy_joules)).collect();
    assert_eq!(line_energy, [(None, None), (Some("a6000"), Some(5_400_000)), (Some("rtx3090"), Some(360_000))]);
    let jobs: Vec<(&str, u64)> = statement.energy.iter().map(|e| (e.job_id.as_str(), e.joules)).collect();
    assert_eq!(jobs, [("1", 5_400_000), ("2", 360_000)], "the most first; job 4 measured nothing");
    assert_eq!(energy_total(&statement), Some(5_760_000));
    let all = l.statements(month, Issue { at: now + 3600, partial: true }).unwrap();
    assert_eq!(all[0].energy, statement.energy, "the admins' statements say the same");
}

/// Schema 16 adds job_energy: a version 15 ledger gains it and keeps its entries.
#[test]
fn a_version_15_ledger_gains_the_energy_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 15).unwrap();
    let tables: i64 =
        conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'job_energy'", (), |r| r.get(0)).unwrap();
    assert_eq!(tables, 0);
    conn.execute_batch(
        "INSERT INTO users (name, first_seen, balance, replenished_through, last_entry)
           VALUES ('sam', 1, 100000000, '2026-11-30', 1);
         INSERT INTO entries (id, user, kind, amount, at, actor, reason, key)
           VALUES (1, 'sam', 'grant', 100000000, 1, 'gputokens', 'initial balance', 'initial:sam');",
    )
    .unwrap();
    drop(conn);
    let mut l = Ledger::open(&path, BucketRules::default()).unwrap();
    let version: i64 = l.conn.query_row("PRAGMA user_version", (), |r| r.get(0)).unwrap();
    assert_eq!(version, schema::VERSION);
    assert_eq!(l.history("sam").unwrap().len(), 1);
    l.record_energy("7", 10, "gpu1", 20, 5).unwrap();
    assert_eq!(l.job_energy("7").unwrap(), [RunEnergy { since: 10, node: "gpu1".into(), joules: 5 }]);
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}
