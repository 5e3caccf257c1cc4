use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use super::*;
use gputokens::preemption::FreedFor;
use gputokens::pricing::PriceTable;
use gputokens::time::parse_timestamp;
use gputokens::tokens::Tokens;

fn rules() -> BucketRules {
    BucketRules::default()
}

fn seed_prices() -> PriceTable {
    let mut p = BTreeMap::new();
    p.insert("rtx2080".into(), Tokens::from_micro(500_000));
    p.insert("rtx3090".into(), Tokens::whole(1));
    p.insert("a6000".into(), Tokens::whole(4));
    PriceTable::new(p, None)
}

fn at(text: &str) -> i64 {
    parse_timestamp(text).unwrap()
}

fn open(dir: &tempfile::TempDir, rules: BucketRules) -> Ledger {
    crate::testdb::open(&dir.path().join("ledger.sqlite"), rules).unwrap()
}

fn record(job: &str, user: &str, gpu_type: &str, gpus: u64, elapsed: u64) -> UsageRecord {
    UsageRecord {
        job_id: job.into(),
        user: user.into(),
        account: None,
        segment_start: at("2026-11-30T08:00:00"),
        sluid: None,
        milli_gpus: BTreeMap::from([(gpu_type.to_string(), gpus * 1000)]),
        elapsed,
        nodes: 1,
        weight_permille: 1000,
        held: Default::default(),
        stranding: None,
        lent: None,
    }
}

fn balance(l: &Ledger, user: &str) -> Tokens {
    l.account(user).unwrap().unwrap().balance
}

fn worked_example() -> Vec<UsageRecord> {
    vec![
        record("1", "alice", "rtx2080", 8, 5 * 3600),
        record("2", "alice", "rtx3090", 4, 10 * 3600),
        record("3", "alice", "a6000", 2, 3 * 3600),
    ]
}

#[test]
fn seed_worked_example_leaves_46_and_replays_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, BucketRules { daily: Tokens::ZERO, ..rules() });
    let out = l.charge(&worked_example(), &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    assert_eq!(out.charged, Tokens::whole(84));
    l.replenish(at("2026-12-01T00:05:00")).unwrap();
    assert_eq!(balance(&l, "alice"), Tokens::whole(46));

    let again = l.charge(&worked_example(), &seed_prices(), at("2026-12-01T01:00:00")).unwrap();
    assert_eq!((again.entries, again.unchanged), (0, 3));
    l.replenish(at("2026-12-01T02:00:00")).unwrap();
    assert_eq!(balance(&l, "alice"), Tokens::whole(46));
    // The same balance is the sum of the entries.
    let history = l.history("alice").unwrap();
    assert_eq!(history.last().unwrap().balance_after, Tokens::whole(46));
}

#[test]
fn running_job_charged_in_steps_adds_up_to_its_final_cost() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let now = at("2026-11-30T20:00:00");
    for elapsed in [7, 13, 29, 30] {
        l.charge(&[record("5", "bob", "rtx3090", 3, elapsed)], &seed_prices(), now).unwrap();
    }
    // 3 rtx3090 (1 per GPU-hour) for 30 s: 90 GPU-seconds, 0.025 tokens.
    let whole_run: Tokens = "0.025".parse().unwrap();
    assert_eq!(balance(&l, "bob"), Tokens::whole(100) - whole_run);
    assert_eq!(l.charged_until("5", at("2026-11-30T08:00:00"), "rtx3090").unwrap(), Some(30));
    assert_eq!(l.charged_seconds("5", at("2026-11-30T08:00:00")).unwrap(), Some(30));
    assert_eq!(l.charged_seconds("5", at("2026-11-30T09:00:00")).unwrap(), None, "another segment");
    assert_eq!(l.charged_seconds("6", at("2026-11-30T08:00:00")).unwrap(), None, "never charged");
}

#[test]
fn a_run_of_no_gpu_time_leaves_no_entry_and_is_remembered_as_charged() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let now = at("2026-11-30T20:00:00");
    let cancelled = record("12", "carol", "a6000", 2, 0);
    let out = l.charge(&[cancelled.clone(), record("13", "bob", "a6000", 1, 0)], &seed_prices(), now).unwrap();
    assert_eq!(out.charged, Tokens::ZERO);
    let charges =
        |l: &Ledger| -> Vec<Entry> { l.history("carol").unwrap().into_iter().filter(|e| e.job_id.is_some()).collect() };
    assert_eq!(balance(&l, "carol"), Tokens::whole(100), "carol is known from her first GPU job on");
    assert!(charges(&l).is_empty(), "no +0 entry");
    assert_eq!(l.charged_seconds("12", cancelled.segment_start).unwrap(), Some(0), "remembered");
    let replay = l.charge(std::slice::from_ref(&cancelled), &seed_prices(), now).unwrap();
    assert_eq!((replay.records, replay.unchanged), (0, 1), "a replay adds nothing");
    assert!(charges(&l).is_empty());
    // The same run seen again later with time on it (a record read while it started) is charged.
    l.charge(&[UsageRecord { elapsed: 900, ..cancelled }], &seed_prices(), now).unwrap();
    assert_eq!(balance(&l, "carol"), Tokens::whole(98));
    let charged = charges(&l);
    assert_eq!(charged.len(), 1, "{charged:?}");
    assert_eq!(charged[0].amount, Tokens::whole(-2));
}

#[test]
fn requeued_segments_are_each_charged_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let first = record("9", "bob", "a6000", 1, 3600);
    let second = UsageRecord { segment_start: first.segment_start + 7200, ..first.clone() };
    let first_start = first.segment_start;
    let now = at("2026-11-30T20:00:00");
    l.charge(&[first.clone(), second.clone()], &seed_prices(), now).unwrap();
    l.charge(&[first, second], &seed_prices(), now).unwrap();
    assert_eq!(balance(&l, "bob"), Tokens::whole(100 - 8));
    let keys = [first_start, first_start + 7200].map(|start| format!("start:{start}"));
    assert_eq!(l.charged_runs("9").unwrap(), keys, "keyed by start");
}

/// Slurm 25.11+: each run has its own SLUID, the key of its charges, even where two runs of a job
/// share a start second (an expedited requeue).
#[test]
fn runs_with_a_sluid_are_each_charged_once_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let run =
        |sluid: &str, elapsed| UsageRecord { sluid: Some(sluid.into()), ..record("9", "bob", "a6000", 1, elapsed) };
    let now = at("2026-11-30T20:00:00");
    // The first run, read twice while it runs and once finished; the second starts the same second.
    l.charge(&[run("s359M8A2NFAK00", 1800)], &seed_prices(), now).unwrap();
    l.charge(&[run("s359M8A2NFAK00", 3600)], &seed_prices(), now).unwrap();
    l.charge(&[run("s359M8A2NFAK00", 3600), run("s45HM8A2FXAC00", 3600)], &seed_prices(), now).unwrap();
    l.charge(&[run("s359M8A2NFAK00", 3600), run("s45HM8A2FXAC00", 3600)], &seed_prices(), now).unwrap();
    assert_eq!(balance(&l, "bob"), Tokens::whole(100 - 8));
    assert_eq!(l.charged_runs("9").unwrap(), ["s359M8A2NFAK00", "s45HM8A2FXAC00"]);
    assert!(l.verify().unwrap().problems.is_empty());
}

/// A run charged by its start (a ledger from before, or Slurm upgraded under the job) and then read
/// with its SLUID is the same run: charged on from where it was, never from zero.
#[test]
fn a_run_charged_by_its_start_is_taken_over_by_its_sluid() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let now = at("2026-11-30T20:00:00");
    l.charge(&[record("9", "bob", "a6000", 1, 1800)], &seed_prices(), now).unwrap();
    let with_sluid = UsageRecord { sluid: Some("s359M8A2NFAK00".into()), ..record("9", "bob", "a6000", 1, 3600) };
    l.charge(std::slice::from_ref(&with_sluid), &seed_prices(), now).unwrap();
    l.charge(&[with_sluid, record("9", "bob", "a6000", 1, 3600)], &seed_prices(), now).unwrap();
    assert_eq!(balance(&l, "bob"), Tokens::whole(100 - 4), "one hour of one a6000");
    assert_eq!(l.charged_runs("9").unwrap(), ["s359M8A2NFAK00"]);
}

/// A run charged under its SLUID and read again without one (a Slurm that stopped giving SLUIDs)
/// is the same run, also in a cycle whose records carry no SLUID at all.
#[test]
fn a_run_charged_by_its_sluid_is_not_charged_again_by_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let now = at("2026-11-30T20:00:00");
    let with_sluid = UsageRecord { sluid: Some("s359M8A2NFAK00".into()), ..record("9", "bob", "a6000", 1, 1800) };
    l.charge(&[with_sluid], &seed_prices(), now).unwrap();
    let out =
        l.charge(&[record("9", "bob", "a6000", 1, 3600), record("10", "bob", "a6000", 1, 900)], &seed_prices(), now);
    assert_eq!(out.unwrap().charged, Tokens::whole(3), "the half hour more of job 9, job 10's quarter");
    assert_eq!(balance(&l, "bob"), Tokens::whole(100 - 4 - 1));
    assert_eq!(l.charged_runs("9").unwrap(), ["s359M8A2NFAK00"]);
    assert!(l.verify().unwrap().problems.is_empty());
}

/// Schema 22: a ledger whose runs were charged under SLUIDs before that was a flag knows it once
/// upgraded: a run read again without its SLUID is charged on, not from zero.
#[test]
fn a_version_21_ledgers_runs_by_sluid_are_known_once_it_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 21).unwrap();
    // As a version 21 ledger kept a run charged for half an hour under its SLUID.
    let start = at("2026-11-30T08:00:00");
    conn.execute(
        "INSERT INTO job_charges (job_id, run, segment_start, gpu_type, user, charged_until, charged)
         VALUES ('9', 's359M8A2NFAK00', ?1, 'a6000', 'bob', 1800, 2000000)",
        [start],
    )
    .unwrap();
    drop(conn);
    // SQLite's migration (MariaDB's drops its index of the runs' keys in the same way).
    let mut l = Ledger::open(&path, rules()).unwrap();
    let out = l.charge(&[record("9", "bob", "a6000", 1, 3600)], &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    assert_eq!(out.charged, Tokens::whole(2), "the second half hour alone");
    assert_eq!(l.charged_runs("9").unwrap(), ["s359M8A2NFAK00"]);
}

/// Schema 23: entries keyed before it are found by their keys once upgraded (on MariaDB the keys
/// move from an index of `entries` into `entry_keys`), and `verify` names a key `entry_keys` lost.
#[test]
fn a_version_22_ledgers_keys_are_found_once_it_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let now = at("2026-11-30T08:00:00");
    let grant =
        NewEntry::new("alice", EntryKind::Grant, Tokens::whole(5), now, "root", "course", "grant:alice:1".into());
    let mut l = open(&dir, rules());
    assert_eq!(l.append(&grant).unwrap(), Applied::Added);
    // As version 22 kept the keys.
    l.conn
        .execute_batch(l.conn.dialect().pick(
            "DROP VIEW entry_keys; PRAGMA user_version = 22;",
            "DROP TABLE entry_keys; CREATE UNIQUE INDEX entries_by_key ON entries (key);
             UPDATE ledger_schema SET version = 22;",
        ))
        .unwrap();
    drop(l);
    let mut l = open(&dir, rules());
    assert_eq!(l.append(&grant).unwrap(), Applied::AlreadyRecorded, "the grant's key is known");
    assert_eq!(l.entry_with_key("grant:alice:1").unwrap().map(|e| e.amount), Some(Tokens::whole(5)));
    assert_eq!(balance(&l, "alice"), Tokens::whole(105));
    let other = NewEntry { amount: Tokens::whole(6), ..grant.clone() };
    assert!(l.append(&other).is_err(), "a key names one change");
    assert!(l.verify().unwrap().problems.is_empty());
    if l.conn.dialect() == crate::db::Dialect::MariaDb {
        l.conn.execute_batch("DELETE FROM entry_keys WHERE key = 'grant:alice:1'").unwrap();
        let problems = l.verify().unwrap().problems;
        assert_eq!(problems, ["idempotency keys that entries and entry_keys disagree on: 1"]);
    }
}

/// Cycles read hundreds of records, charged in chunks: new runs expected new (inserted at once),
/// runs charged before found, and the same run twice in one cycle charged once, up to its longest.
#[test]
fn long_cycles_of_new_and_known_runs_charge_each_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, BucketRules { daily: Tokens::ZERO, ..rules() });
    let now = at("2026-11-30T20:00:00");
    let job = |n: usize, elapsed: u64| record(&n.to_string(), &format!("user{}", n % 7), "rtx3090", 1, elapsed);
    // 0.5 token per half hour of one rtx3090.
    let first: Vec<UsageRecord> = (0..600).map(|n| job(n, 1800)).collect();
    let out = l.charge(&first, &seed_prices(), now).unwrap();
    assert_eq!((out.records, out.entries, out.charged), (600, 600, Tokens::whole(300)));
    // New jobs, then every earlier one an hour on (twice: the second read adds nothing), then new
    // ones again, read twice within the cycle.
    let mut second: Vec<UsageRecord> = (600..900).map(|n| job(n, 1800)).collect();
    second.extend((0..600).map(|n| job(n, 3600)));
    second.extend((0..600).map(|n| job(n, 3600)));
    second.extend((900..1000).flat_map(|n| [job(n, 1800), job(n, 3600)]));
    let out = l.charge(&second, &seed_prices(), now).unwrap();
    assert_eq!(out.charged, Tokens::from_micro(300 * 500_000 + 600 * 500_000 + 100 * 1_000_000));
    assert_eq!((out.records, out.unchanged), (300 + 600 + 200, 600));
    let total: Tokens = (0..7).map(|u| Tokens::whole(100) - balance(&l, &format!("user{u}"))).sum();
    assert_eq!(total, Tokens::whole(300 + 150 + 300 + 100));
    assert_eq!(l.charged_until("599", at("2026-11-30T08:00:00"), "rtx3090").unwrap(), Some(3600));
    assert_eq!(l.charged_until("950", at("2026-11-30T08:00:00"), "rtx3090").unwrap(), Some(3600));
    let replay = l.charge(&second, &seed_prices(), now).unwrap();
    assert_eq!((replay.entries, replay.charged), (0, Tokens::ZERO));
    assert!(l.verify().unwrap().problems.is_empty());
}

/// A cycle that meets a run charged before among runs it expected new is charged again, whole, with
/// its runs read: nothing of the first try stays (a user first seen in it is added once).
#[test]
fn a_run_charged_before_among_new_ones_leaves_one_charge_each() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, BucketRules { daily: Tokens::ZERO, ..rules() });
    let now = at("2026-11-30T20:00:00");
    l.charge(&[record("1", "alice", "rtx3090", 1, 1800)], &seed_prices(), now).unwrap();
    let mut cycle: Vec<UsageRecord> = (100..400).map(|n| record(&n.to_string(), "carol", "rtx3090", 1, 36)).collect();
    cycle.push(record("1", "alice", "rtx3090", 1, 3600));
    let out = l.charge(&cycle, &seed_prices(), now).unwrap();
    assert_eq!((out.records, out.entries), (301, 301));
    assert_eq!(out.charged, Tokens::from_micro(300 * 10_000 + 500_000));
    assert_eq!(balance(&l, "alice"), Tokens::whole(99));
    assert_eq!(balance(&l, "carol"), Tokens::whole(97));
    let carol = l.history("carol").unwrap();
    assert_eq!(carol.len(), 301, "one initial balance, 300 charges");
    assert_eq!(carol.iter().filter(|e| e.reason == "initial balance").count(), 1);
    assert!(l.verify().unwrap().problems.is_empty());
}

#[test]
fn replenishment_is_daily_monthly_capped_and_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, BucketRules { cap: Some(Tokens::whole(120)), ..rules() });
    l.ensure_user("carol", at("2026-11-27T12:00:00")).unwrap();
    // 28, 29, 30 Nov: +3; 1 Dec: +1 and +30 capped to +16.
    let done = l.replenish(at("2026-12-01T09:00:00")).unwrap();
    assert_eq!(balance(&l, "carol"), Tokens::whole(120));
    assert_eq!(done.tokens, Tokens::whole(20));
    assert_eq!(l.replenish(at("2026-12-01T23:00:00")).unwrap().entries, 0);
    // A charge after a capped day does not make that day due again.
    l.charge(&[record("1", "carol", "a6000", 1, 3600)], &seed_prices(), at("2026-12-01T23:30:00")).unwrap();
    l.replenish(at("2026-12-01T23:59:00")).unwrap();
    assert_eq!(balance(&l, "carol"), Tokens::whole(116));
    l.replenish(at("2026-12-02T00:01:00")).unwrap();
    assert_eq!(balance(&l, "carol"), Tokens::whole(117));
}

#[test]
fn idempotency_key_makes_a_replayed_grant_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let grant = NewEntry::new("dave", EntryKind::Grant, Tokens::whole(5), 1, "root", "x", "grant:g1".into());
    assert_eq!(l.append(&grant).unwrap(), Applied::Added);
    assert_eq!(l.append(&grant).unwrap(), Applied::AlreadyRecorded);
    assert_eq!(balance(&l, "dave"), Tokens::whole(105));
}

#[test]
fn entries_are_append_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    l.ensure_user("erin", 1).unwrap();
    let err = l.conn.execute("UPDATE entries SET amount = 0", ()).unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    assert!(l.conn.execute("DELETE FROM entries", ()).is_err());
}

#[test]
fn refund_returns_the_net_charge_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    l.charge(&[record("42", "frank", "a6000", 2, 3600)], &seed_prices(), 10).unwrap();
    assert_eq!(balance(&l, "frank"), Tokens::whole(92));
    let refunded = l.refund_job("42", "root", "node failure", 20).unwrap();
    assert_eq!(refunded.len(), 1);
    assert_eq!(refunded[0].amount, Tokens::whole(8));
    assert_eq!(balance(&l, "frank"), Tokens::whole(100));
    assert!(matches!(l.refund_job("42", "root", "again", 30), Err(LedgerError::NothingToRefund(_))));
    assert!(matches!(l.refund_job("43", "root", "none", 30), Err(LedgerError::NothingToRefund(_))));
}

#[test]
fn import_sets_new_users_and_refuses_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let state =
        BTreeMap::from([("gina".to_string(), Tokens::from_micro(87_500_000)), ("hal".into(), Tokens::whole(-3))]);
    let imported = l.import(&state, "root", 5).unwrap();
    let imported: Vec<_> = imported.iter().map(|e| (e.user.as_str(), e.kind, e.key.as_deref(), e.amount)).collect();
    assert_eq!(
        imported,
        [
            ("gina", EntryKind::Import, Some("import:gina"), Tokens::from_micro(87_500_000)),
            ("hal", EntryKind::Import, Some("import:hal"), Tokens::whole(-3))
        ]
    );
    assert_eq!(l.entry_with_key("import:hal").unwrap().map(|e| e.amount), Some(Tokens::whole(-3)));
    assert_eq!(l.entry_with_key("import:nobody").unwrap(), None);
    assert_eq!(l.import(&state, "root", 6).unwrap().len(), 0);
    assert_eq!(balance(&l, "gina"), Tokens::from_micro(87_500_000));
    assert_eq!(balance(&l, "hal"), Tokens::whole(-3));

    l.ensure_user("ivan", 7).unwrap();
    let clash = BTreeMap::from([("ivan".to_string(), Tokens::whole(1)), ("jo".into(), Tokens::whole(2))]);
    let err = l.import(&clash, "root", 8).unwrap_err().to_string();
    assert!(err.contains("ivan is already in the ledger"), "{err}");
    assert!(l.account("jo").unwrap().is_none(), "import is all or nothing");
}

#[test]
fn ledger_file_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(&dir.path().join("ledger.sqlite"), rules()).unwrap();
    l.ensure_user("kim", 1).unwrap();
    for name in ["ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"] {
        let mode = std::fs::metadata(dir.path().join(name)).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{name} has mode {mode:o}");
    }
}

#[test]
fn bad_user_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    assert!(matches!(l.ensure_user("a b", 1), Err(LedgerError::BadUserName { .. })));
    assert!(matches!(l.ensure_user("", 1), Err(LedgerError::BadUserName { .. })));
}

/// An entry reads back with everything the ledger stored: the statement and the web page read
/// the key, GPU type and GPU-seconds, the protocol the rest.
#[test]
fn an_entry_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    l.charge(&[record("80", "nia", "a6000", 2, 3600)], &seed_prices(), 10).unwrap();
    let history = l.history("nia").unwrap();
    assert_eq!(history[0].key, Some(gputokens::entry::initial_key("nia")));
    let charge = &history[1];
    assert_eq!(
        (charge.kind, charge.gpu_type.as_deref(), charge.gpu_seconds, charge.key.as_deref()),
        (EntryKind::Charge, Some("a6000"), Some(7200), None)
    );
    assert_eq!((charge.amount, charge.balance_after), (-Tokens::whole(8), Tokens::whole(92)));
    assert_eq!(l.recent("nia", 1).unwrap(), history[1..].to_vec());
}

#[test]
fn negative_gpu_seconds_are_a_damaged_ledger_not_the_callers_fault() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    l.ensure_user("oz", 10).unwrap();
    // Entries cannot be changed, only added: a damaged one is added by hand.
    let id: i64 = l.conn.query_row("SELECT MAX(id) + 1 FROM entries", (), |r| r.get(0)).unwrap();
    l.conn
        .execute(
            "INSERT INTO entries (id, user, kind, amount, at, actor, reason, gpu_seconds, prev_id)
             VALUES (?1, 'oz', 'charge', 0, 11, 'gputokens', 'damaged', -5, (SELECT last_entry FROM users WHERE name = 'oz'))",
            [id],
        )
        .unwrap();
    l.conn.execute("UPDATE users SET last_entry = ?1 WHERE name = 'oz'", [id]).unwrap();
    let err = l.history("oz").unwrap_err();
    assert!(matches!(err, LedgerError::Damaged(_)) && !err.is_callers_fault(), "{err:?}");
    assert_eq!(err.to_string(), "negative GPU-seconds -5");
}

#[test]
fn measured_weight_scales_the_price() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let half = UsageRecord { weight_permille: 500, ..record("60", "lee", "a6000", 1, 3600) };
    l.charge(&[half], &seed_prices(), 10).unwrap();
    assert_eq!(balance(&l, "lee"), Tokens::whole(98));
    l.record_utilization("60", 1, 30.0, 0, 5).unwrap();
    l.record_utilization("60", 1, 50.0, 0, 6).unwrap();
    assert_eq!(l.mean_utilization("60").unwrap(), Some(40.0));
    assert_eq!(l.mean_utilization("61").unwrap(), None);
}

/// The audit's M3: a requeued job's idle first run does not dilute its second run's measure; the
/// statement's idle share and mean still see both.
#[test]
fn utilization_is_kept_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    for at in 0..10 {
        l.record_utilization("70", 1_000, 0.0, 1, 1_000 + at * 30).unwrap();
        l.record_utilization("70", 5_000, 100.0, 0, 5_000 + at * 30).unwrap();
    }
    assert_eq!(l.run_utilization_samples("70", 5_030, 5_400, 60).unwrap(), Some((10, 1000.0)), "the second run alone");
    assert_eq!(l.run_utilization_samples("70", 990, 1_300, 60).unwrap(), Some((10, 0.0)), "the first, not the second");
    assert_eq!(l.run_utilization_samples("70", 9_000, 9_900, 60).unwrap(), None, "a run never sampled");
    assert_eq!(l.utilization_samples("70").unwrap(), Some((20, 1000.0)));
    assert_eq!(l.idle_share("70").unwrap(), Some((10, 20)));
    assert_eq!(l.mean_utilization("70").unwrap(), Some(50.0));
}

#[test]
fn a_shard_pays_its_fraction_of_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let quarter = UsageRecord {
        milli_gpus: BTreeMap::from([("a6000".to_string(), 250)]),
        ..record("70", "mo", "a6000", 1, 3600)
    };
    l.charge(&[quarter], &seed_prices(), 10).unwrap();
    assert_eq!(balance(&l, "mo"), Tokens::whole(99));
    let history = l.history("mo").unwrap();
    assert!(history[1].reason.starts_with("0.25 × a6000 for 3600s"), "{}", history[1].reason);
}

#[test]
fn a_refund_after_more_charging_returns_only_the_new_part() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    l.charge(&[record("44", "nia", "a6000", 1, 3600)], &seed_prices(), 10).unwrap();
    l.refund_job("44", "root", "node failure", 20).unwrap();
    assert_eq!(balance(&l, "nia"), Tokens::whole(100));
    // Still running: the next cycle charges its second hour, which the first refund did not cover.
    l.charge(&[record("44", "nia", "a6000", 1, 7200)], &seed_prices(), 30).unwrap();
    assert_eq!(balance(&l, "nia"), Tokens::whole(96));
    let refunded = l.refund_job("44", "root", "node failure", 40).unwrap();
    assert_eq!(refunded[0].amount, Tokens::whole(4));
    assert_eq!(balance(&l, "nia"), Tokens::whole(100));
    assert!(matches!(l.refund_job("44", "root", "again", 50), Err(LedgerError::NothingToRefund(_))));
    // Job 4 is not job 44: the refund keys of one job never count for another.
    l.charge(&[record("4", "nia", "a6000", 1, 3600)], &seed_prices(), 60).unwrap();
    assert_eq!(l.refund_job("4", "root", "node failure", 70).unwrap()[0].amount, Tokens::whole(4));
}

#[test]
fn history_follows_each_users_own_entries() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, BucketRules { daily: Tokens::ZERO, ..rules() });
    let records: Vec<UsageRecord> = (0..6)
        .map(|i| record(&format!("{}", 80 + i), if i % 2 == 0 { "olga" } else { "pete" }, "rtx3090", 1, 3600))
        .collect();
    l.charge(&records[..4], &seed_prices(), at("2026-11-30T09:00:00")).unwrap();
    let grant = NewEntry::new("pete", EntryKind::Adjust, Tokens::whole(5), 20, "root", "thanks", "adjust:t".into());
    l.append(&grant).unwrap();
    l.charge(&records[4..], &seed_prices(), at("2026-11-30T10:00:00")).unwrap();

    let olga = l.history("olga").unwrap();
    let kinds: Vec<_> = olga.iter().map(|e| (e.kind, e.job_id.clone())).collect();
    assert_eq!(
        kinds,
        [
            (EntryKind::Grant, None),
            (EntryKind::Charge, Some("80".into())),
            (EntryKind::Charge, Some("82".into())),
            (EntryKind::Charge, Some("84".into()))
        ]
    );
    assert_eq!(olga.last().unwrap().balance_after, balance(&l, "olga"));
    let pete = l.history("pete").unwrap();
    assert_eq!(pete.iter().filter(|e| e.kind == EntryKind::Charge).count(), 3);
    assert_eq!(pete.last().unwrap().balance_after, Tokens::whole(100 - 3 + 5));
    assert!(matches!(l.history("quin"), Err(LedgerError::UnknownUser(_))));
}

#[test]
fn usage_is_summed_per_local_day_and_gpu_type() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let day = |d: &str| d.parse::<chrono::NaiveDate>().unwrap();
    // A running job charged on two days, another job on the second.
    l.charge(&[record("91", "rosa", "a6000", 1, 1800)], &seed_prices(), at("2026-12-01T23:00:00")).unwrap();
    l.charge(&[record("91", "rosa", "a6000", 1, 3600)], &seed_prices(), at("2026-12-02T00:30:00")).unwrap();
    l.charge(&[record("92", "rosa", "rtx3090", 2, 3600)], &seed_prices(), at("2026-12-02T01:00:00")).unwrap();
    l.charge(&[record("93", "sid", "a6000", 1, 3600)], &seed_prices(), at("2026-12-02T01:00:00")).unwrap();
    let used = l.used_since_day("rosa", day("2026-12-01")).unwrap();
    assert_eq!(used, BTreeMap::from([("a6000".into(), Tokens::whole(4)), ("rtx3090".into(), Tokens::whole(2))]));
    let used = l.used_since_day("rosa", day("2026-12-02")).unwrap();
    assert_eq!(used, BTreeMap::from([("a6000".into(), Tokens::whole(2)), ("rtx3090".into(), Tokens::whole(2))]));
    assert!(l.used_since_day("rosa", day("2026-12-03")).unwrap().is_empty());
    // All users together, for the admins' page: rosa's 2 + sid's 4 a6000 tokens on the 2nd.
    let all = l.used_by_type_since(day("2026-12-02")).unwrap();
    assert_eq!(all, BTreeMap::from([("a6000".into(), Tokens::whole(6)), ("rtx3090".into(), Tokens::whole(2))]));
    // A replayed cycle adds nothing to the day either.
    l.charge(&[record("92", "rosa", "rtx3090", 2, 3600)], &seed_prices(), at("2026-12-02T02:00:00")).unwrap();
    assert_eq!(l.used_since_day("rosa", day("2026-12-02")).unwrap()["rtx3090"], Tokens::whole(2));
}

/// A ledger written by the schema before charges lost their keys and entries gained `prev_id`.
#[test]
fn a_version_4_ledger_keeps_its_history_and_refunds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        schema::migrate_to(&mut conn, 4).unwrap();
        conn.execute_batch(
            "INSERT INTO users VALUES ('sam', 1, 92000000, '2026-11-30'), ('tia', 1, 100000000, '2026-11-30');
             INSERT INTO entries (user, kind, amount, at, actor, reason, key, job_id, gpu_type, gpu_seconds) VALUES
               ('sam', 'grant', 100000000, 1, 'gputokens', 'initial balance', 'initial:sam', NULL, NULL, NULL),
               ('tia', 'grant', 100000000, 1, 'gputokens', 'initial balance', 'initial:tia', NULL, NULL, NULL),
               ('sam', 'charge', -8000000, 2, 'gputokens', '2 × a6000 for 3600s', 'charge:7:0:a6000:3600',
                '7', 'a6000', 7200);
             INSERT INTO job_charges VALUES ('7', 0, 'a6000', 'sam', 3600, 8000000);",
        )
        .unwrap();
    }
    let mut l = Ledger::open(&path, rules()).unwrap();
    let sam = l.history("sam").unwrap();
    assert_eq!(sam.len(), 2);
    assert_eq!(sam[1].key.as_deref(), Some("charge:7:0:a6000:3600"));
    assert_eq!(sam[1].balance_after, Tokens::whole(92));
    assert_eq!(l.history("tia").unwrap().len(), 1);
    // New entries link to the migrated ones, and the old charge refunds once.
    l.charge(&[UsageRecord { segment_start: 0, ..record("7", "sam", "a6000", 2, 5400) }], &seed_prices(), 3).unwrap();
    assert_eq!(balance(&l, "sam"), Tokens::whole(88));
    assert_eq!(l.refund_job("7", "root", "bad node", 4).unwrap()[0].amount, Tokens::whole(12));
    let day = |d: &str| d.parse::<chrono::NaiveDate>().unwrap();
    // The entries are stamped 1 and 2 s past the epoch: the 31st of December 1969 west of Greenwich.
    let used = l.used_since_day("sam", day("1969-12-31")).unwrap();
    assert_eq!(used, BTreeMap::from([("a6000".to_string(), Tokens::whole(12))]), "the old charge and the new");
    let sam = l.history("sam").unwrap();
    assert_eq!(sam.len(), 4);
    assert_eq!(sam.last().unwrap().balance_after, Tokens::whole(100));
}

#[test]
fn a_ledger_used_every_way_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    l.charge(&worked_example(), &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    l.charge(&[record("50", "bob", "a6000", 1, 1800)], &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    l.charge(&[record("50", "bob", "a6000", 1, 3600)], &seed_prices(), at("2026-12-01T01:00:00")).unwrap();
    l.refund_job("50", "root", "node failure", at("2026-12-01T02:00:00")).unwrap();
    l.replenish(at("2026-12-03T00:05:00")).unwrap();
    l.append(&NewEntry::new("cy", EntryKind::Grant, Tokens::whole(5), 9, "root", "course", "grant:c".into())).unwrap();
    let found = l.verify().unwrap();
    assert_eq!(found.problems, Vec::<String>::new());
    assert_eq!(found.users, 3);
}

#[test]
fn verify_names_what_was_tampered_with() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    l.charge(&worked_example(), &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    l.charge(&[record("60", "dan", "rtx3090", 1, 3600)], &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    // Edited behind the ledger's back, as only a hand on the file could.
    l.conn
        .execute_batch(
            "DROP TRIGGER entries_no_update; DROP TRIGGER entries_no_delete;
             UPDATE entries SET amount = amount - 1000000 WHERE user = 'alice' AND job_id = '1';
             UPDATE entries SET prev_id = NULL WHERE user = 'dan' AND kind = 'charge';
             DELETE FROM usage_days WHERE user = 'dan';",
        )
        .unwrap();
    let problems = l.verify().unwrap().problems;
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert_eq!(problems[0], "alice: balance 16 but the entries add up to 15");
    assert_eq!(problems[1], "alice: charge entries total 85 but job_charges/job_payments 84");
    assert_eq!(problems[2], "alice: charge entries total 85 but usage_days 84");
    assert_eq!(problems[3], "dan: 2 entries but 1 reachable from the newest (prev_id chain)");
    assert_eq!(problems[4], "dan: charge entries total 1 but usage_days 0");
}

#[test]
fn recent_entries_carry_the_balance_after_each() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, BucketRules { daily: Tokens::ZERO, ..rules() });
    l.charge(&worked_example(), &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    l.charge(&[record("9", "bob", "a6000", 1, 3600)], &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    let grant = NewEntry::new("alice", EntryKind::Grant, Tokens::whole(10), 30, "root", "course", "grant:x".into());
    l.append(&grant).unwrap();
    let all = l.history("alice").unwrap();
    let last_two = l.recent("alice", 2).unwrap();
    assert_eq!(last_two.len(), 2);
    assert_eq!(last_two[0].job_id.as_deref(), Some("3"));
    assert_eq!(last_two[1].kind, EntryKind::Grant);
    for (recent, full) in last_two.iter().zip(&all[all.len() - 2..]) {
        assert_eq!((recent.id, recent.balance_after), (full.id, full.balance_after));
    }
    assert_eq!(l.recent("alice", 100).unwrap().len(), all.len());
    assert!(matches!(l.recent("zed", 5), Err(LedgerError::UnknownUser(_))));
}

/// Writes a ledger of schema `version` at `path`, which has no `new_table` yet, holding `rows`.
fn old_ledger(path: &std::path::Path, version: i64, new_table: &str, rows: &str) {
    let mut conn = rusqlite::Connection::open(path).unwrap();
    schema::migrate_to(&mut conn, version).unwrap();
    let tables: i64 =
        conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = ?1", [new_table], |r| r.get(0)).unwrap();
    assert_eq!(tables, 0, "schema {version} already has {new_table}");
    conn.execute_batch(rows).unwrap();
}

/// A ledger of the schema before `gpu_faults`: it gains the table, keeps its entries and still verifies.
#[test]
fn a_version_5_ledger_gains_the_fault_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    old_ledger(
        &path,
        5,
        "gpu_faults",
        "INSERT INTO users (name, first_seen, balance, replenished_through, last_entry)
               VALUES ('sam', 1, 100000000, '2026-11-30', 1);
             INSERT INTO entries (id, user, kind, amount, at, actor, reason, key)
               VALUES (1, 'sam', 'grant', 100000000, 1, 'gputokens', 'initial balance', 'initial:sam');
             INSERT INTO actions (at, action, target, user, reason, dry_run)
               VALUES (5, 'drain', 'gpu01', '', 'gputokens: GPU 2 reported XID 79', 0);",
    );
    let mut l = Ledger::open(&path, rules()).unwrap();
    let version: i64 = l.conn.query_row("PRAGMA user_version", (), |r| r.get(0)).unwrap();
    assert_eq!(version, schema::VERSION);
    assert_eq!(l.history("sam").unwrap().len(), 1);
    assert_eq!(l.actions(10).unwrap().len(), 1, "the audit rows stay");
    assert_eq!(l.gpu_faults("gpu01").unwrap(), vec![]);
    let fault = GpuFault { node: "gpu01".into(), gpu: "GPU-2".into(), cause: "xid 79".into(), acted_at: 6 };
    l.record_gpu_fault(&fault).unwrap();
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}

#[test]
fn gpu_faults_are_kept_per_node_gpu_and_cause() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let fault = |node: &str, gpu: &str, cause: &str, at: i64| GpuFault {
        node: node.into(),
        gpu: gpu.into(),
        cause: cause.into(),
        acted_at: at,
    };
    {
        let mut l = crate::testdb::open(&path, rules()).unwrap();
        l.record_gpu_fault(&fault("n1", "GPU-a", "xid 79", 10)).unwrap();
        l.record_gpu_fault(&fault("n1", "GPU-a", "ecc", 11)).unwrap();
        l.record_gpu_fault(&fault("n1", "index 3", "lost", 12)).unwrap();
        l.record_gpu_fault(&fault("n2", "GPU-a", "xid 79", 13)).unwrap();
        // A later drain for the same fault replaces the time.
        l.record_gpu_fault(&fault("n1", "GPU-a", "xid 79", 20)).unwrap();
    }
    // Kept across a reopen (an accountd restart).
    let mut l = crate::testdb::open(&path, rules()).unwrap();
    assert_eq!(
        l.gpu_faults("n1").unwrap(),
        vec![fault("n1", "GPU-a", "ecc", 11), fault("n1", "GPU-a", "xid 79", 20), fault("n1", "index 3", "lost", 12)]
    );
    assert!(l.clear_gpu_fault("n1", "GPU-a", "ecc").unwrap());
    assert!(!l.clear_gpu_fault("n1", "GPU-a", "ecc").unwrap(), "already cleared");
    assert_eq!(l.gpu_faults("n1").unwrap().len(), 2);
    assert_eq!(l.gpu_faults("n2").unwrap(), vec![fault("n2", "GPU-a", "xid 79", 13)]);
    assert_eq!(l.gpu_faults("n3").unwrap(), vec![]);
    assert_eq!(
        l.all_gpu_faults().unwrap(),
        vec![
            fault("n1", "GPU-a", "xid 79", 20),
            fault("n2", "GPU-a", "xid 79", 13),
            fault("n1", "index 3", "lost", 12)
        ],
        "every node's, newest first"
    );
}

/// A ledger of the schema before `freed_for_waiters`: it gains the table, keeps its entries, faults
/// and audit rows, and still verifies.
#[test]
fn a_version_6_ledger_gains_the_freed_for_waiters_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    old_ledger(
        &path,
        6,
        "freed_for_waiters",
        "INSERT INTO users (name, first_seen, balance, replenished_through, last_entry)
               VALUES ('sam', 1, 100000000, '2026-11-30', 1);
             INSERT INTO entries (id, user, kind, amount, at, actor, reason, key)
               VALUES (1, 'sam', 'grant', 100000000, 1, 'gputokens', 'initial balance', 'initial:sam');
             INSERT INTO actions (at, action, target, user, reason, dry_run)
               VALUES (5, 'requeue', '41', 'sam', 'gputokens: preempted, balance -5, a6000 contended', 0);
             INSERT INTO gpu_faults (node, gpu, cause, acted_at) VALUES ('gpu01', 'GPU-2', 'xid 79', 6);",
    );
    let mut l = Ledger::open(&path, rules()).unwrap();
    let version: i64 = l.conn.query_row("PRAGMA user_version", (), |r| r.get(0)).unwrap();
    assert_eq!(version, schema::VERSION);
    assert_eq!(l.history("sam").unwrap().len(), 1);
    assert_eq!(l.actions(10).unwrap().len(), 1);
    assert_eq!(l.gpu_faults("gpu01").unwrap().len(), 1);
    assert_eq!(l.freed_for_waiters(0).unwrap(), vec![]);
    let freed = FreedFor { waiter: "42".into(), gpu_type: "a6000".into(), gpus: 1, expires: 700 };
    l.remember_freed(std::slice::from_ref(&freed), 100).unwrap();
    assert_eq!(l.freed_for_waiters(100).unwrap(), vec![freed]);
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}

#[test]
fn freed_gpus_are_remembered_until_they_expire_or_the_job_stops_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), rules()).unwrap();
    let freed = |waiter: &str, gpus: u64, expires: i64| FreedFor {
        waiter: waiter.into(),
        gpu_type: "a6000".into(),
        gpus,
        expires,
    };
    l.remember_freed(&[freed("42", 1, 700), freed("43", 2, 700)], 100).unwrap();
    assert_eq!(l.freed_for_waiters(699).unwrap(), vec![freed("42", 1, 700), freed("43", 2, 700)]);
    assert_eq!(l.freed_for_waiters(700).unwrap(), vec![], "expired at its time");

    // A second preemption for the same wait adds to it and moves the expiry on.
    l.remember_freed(&[freed("42", 1, 900)], 300).unwrap();
    assert_eq!(l.freed_for_waiters(300).unwrap()[0], freed("42", 2, 900));
    // After an expiry, a new preemption starts afresh.
    l.remember_freed(&[freed("43", 1, 1500)], 800).unwrap();
    assert_eq!(l.freed_for_waiters(800).unwrap(), vec![freed("42", 2, 900), freed("43", 1, 1500)]);

    // Job 42 started (no longer pending): forgotten; 43 still waits and is kept.
    assert_eq!(l.forget_freed(800, |job| job == "43").unwrap(), 1);
    assert_eq!(l.freed_for_waiters(800).unwrap(), vec![freed("43", 1, 1500)]);
    // Its time up, it is forgotten even though it still waits.
    assert_eq!(l.forget_freed(1500, |_| true).unwrap(), 1);
    assert_eq!(l.freed_for_waiters(0).unwrap(), vec![]);
}

/// Names SSSD and useradd --badname give (the user_name module keeps them whole).
const ODD_NAMES: [&str; 5] = ["ann@example.org", "j.doe", "zoë", "李雷", "x:2026-11-22"];

/// Each name has a ledger account and daily grants of its own, even one that ends like a date.
#[test]
fn the_ledger_keys_every_name_apart() {
    let dir = tempfile::tempdir().unwrap();
    let rules = gputokens::policy::BucketRules { daily: gputokens::Tokens::whole(1), ..Default::default() };
    let mut ledger = crate::testdb::open(&dir.path().join("l.sqlite"), rules).unwrap();
    let day = 86400;
    for name in ODD_NAMES.iter().chain(&["x"]) {
        ledger
            .ensure_user(name, gputokens::time::local_midnight(gputokens::time::local_date(1_795_000_000)) + 3600)
            .unwrap();
    }
    let added = ledger.replenish(1_795_000_000 + 2 * day).unwrap();
    assert_eq!(added.entries, 2 * (ODD_NAMES.len() + 1), "two days for each");
    for name in ODD_NAMES {
        let kinds: Vec<_> = ledger.history(name).unwrap().iter().map(|e| e.kind).collect();
        assert_eq!(kinds.len(), 3, "{name}: initial and two daily grants");
    }
}

/// Schema 15 keeps payments per run: a version 14 ledger's rows, summed for all runs of their job,
/// are kept under run_start -1 (refunds then go by the job's shares).
#[test]
fn a_version_14_ledgers_payments_are_kept_for_all_runs_of_their_job() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 14).unwrap();
    conn.execute_batch(
        "INSERT INTO job_payments (job_id, holder, charged) VALUES ('7', 'alice', 4000000), ('7', 'account lab', 4000000);",
    )
    .unwrap();
    schema::migrate_to(&mut conn, 15).unwrap();
    let rows: Vec<(String, i64, String, i64)> = conn
        .prepare("SELECT job_id, run_start, holder, charged FROM job_payments ORDER BY holder")
        .unwrap()
        .query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, [("7".into(), -1, "account lab".into(), 4_000_000), ("7".into(), -1, "alice".into(), 4_000_000)]);
}

/// A ledger used every way, copied into an empty one (SQLite to SQLite here, to MariaDB when the
/// run's ledgers are there), holds the same rows, verifies, and charging carries on in the copy.
#[test]
fn a_copied_ledger_holds_the_same_rows_and_charging_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut from = Ledger::open(&dir.path().join("from.sqlite"), rules()).unwrap();
    from.charge(&worked_example(), &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    from.charge(&[record("50", "bob", "a6000", 1, 1800)], &seed_prices(), at("2026-11-30T20:00:00")).unwrap();
    from.refund_job("50", "root", "node failure", at("2026-12-01T02:00:00")).unwrap();
    from.replenish(at("2026-12-03T00:05:00")).unwrap();
    from.append(&NewEntry::new("cy", EntryKind::Grant, Tokens::whole(5), 9, "root", "it's a course", "grant:c".into()))
        .unwrap();
    from.set_meta("sacct_read_until", "1764547200").unwrap();
    let mut to = crate::testdb::open(&dir.path().join("to.sqlite"), rules()).unwrap();
    let copied = from.copy_into(&mut to).unwrap();
    assert!(copied > 10, "{copied}");
    assert_eq!(to.fingerprint().unwrap(), from.fingerprint().unwrap());
    assert_eq!(to.verify().unwrap().problems, Vec::<String>::new());
    // Not twice: the copy holds entries now.
    assert!(matches!(from.copy_into(&mut to), Err(LedgerError::Refused(_))));
    // Charging carries on: the running job's next part is charged once, on top of what was.
    let before = to.account("alice").unwrap().unwrap().balance;
    let later = [record("1", "alice", "rtx2080", 8, 7 * 3600)];
    to.charge(&later, &seed_prices(), at("2026-12-03T01:00:00")).unwrap();
    from.charge(&later, &seed_prices(), at("2026-12-03T01:00:00")).unwrap();
    assert_eq!(to.account("alice").unwrap().unwrap().balance, from.account("alice").unwrap().unwrap().balance);
    assert!(to.account("alice").unwrap().unwrap().balance < before);
    assert_eq!(to.fingerprint().unwrap(), from.fingerprint().unwrap());
    assert_eq!(to.verify().unwrap().problems, Vec::<String>::new());
    // A changed row shows: the fingerprints part.
    to.set_meta("sacct_read_until", "1").unwrap();
    assert_ne!(to.fingerprint().unwrap(), from.fingerprint().unwrap());
}

/// Running jobs charged cycle after cycle, more of them than a chunk and each holding two GPU types
/// (more moved runs than a statement moves, on MariaDB): each run ends charged for its whole time,
/// once, and a cycle with nothing new moves nothing.
#[test]
fn many_running_runs_moved_on_together_add_up_to_their_whole_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let n = 2 * 1024 + 44;
    let running = |elapsed: u64| -> Vec<UsageRecord> {
        (0..n)
            .map(|i| {
                let mut r = record(&format!("{}", 5000 + i), &format!("u{}", i % 300), "a6000", 1, elapsed);
                r.milli_gpus.insert("rtx2080".into(), 2000);
                r
            })
            .collect()
    };
    let prices = seed_prices();
    for (elapsed, hour) in [(600, "09:00"), (1800, "09:20"), (3600, "09:50")] {
        l.charge(&running(elapsed), &prices, at(&format!("2026-11-30T{hour}:00"))).unwrap();
    }
    let again = l.charge(&running(3600), &prices, at("2026-11-30T10:00:00")).unwrap();
    assert_eq!((again.entries, again.unchanged), (0, n), "nothing new");
    let start = at("2026-11-30T08:00:00");
    for i in [0, 1023, 1024, 2047, 2048, n - 1] {
        let job = format!("{}", 5000 + i);
        assert_eq!(l.charged_until(&job, start, "a6000").unwrap(), Some(3600), "job {job}");
        assert_eq!(l.charged_until(&job, start, "rtx2080").unwrap(), Some(3600), "job {job}");
    }
    // Each job: an a6000 hour (4) and two rtx2080 hours (1), over users that share them.
    let spent: Tokens = (0..300).map(|u| Tokens::whole(100) - balance(&l, &format!("u{u}"))).sum();
    assert_eq!(spent, Tokens::whole(5 * n as i64));
}

/// The cycles' lookups of many balances and runs at once (more than one statement's list) say
/// what the lookups of one say, and leave out what the ledger does not have.
#[test]
fn many_at_once_lookups_agree_with_the_lookups_of_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let n = l.conn.dialect().in_list() + 44;
    let records: Vec<UsageRecord> =
        (0..n).map(|i| record(&format!("{}", 1000 + i), &format!("u{i}"), "a6000", 1, 60 + i as u64)).collect();
    l.charge(&records, &seed_prices(), at("2026-11-30T09:00:00")).unwrap();

    let mut names: Vec<String> = (0..n).map(|i| format!("u{i}")).collect();
    names.push("nobody".into());
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let balances = l.balances_of(&names).unwrap();
    assert_eq!(balances.len(), n, "every charged user, and no one else");
    for name in &names[..n] {
        assert_eq!(balances[*name], balance(&l, name), "{name}");
    }

    let start = at("2026-11-30T08:00:00");
    let mut runs: Vec<(String, i64)> = records.iter().map(|r| (r.job_id.clone(), start)).collect();
    runs.push(("1000".into(), start + 1));
    runs.push(("99999".into(), start));
    let runs: Vec<(&str, i64)> = runs.iter().map(|(j, s)| (j.as_str(), *s)).collect();
    let charged = l.charged_seconds_of(&runs).unwrap();
    assert_eq!(charged.len(), n, "each charged run, and no run of another start or job");
    for (job, start) in &runs[..n] {
        assert_eq!(Some(charged[&(job.to_string(), *start)]), l.charged_seconds(job, *start).unwrap(), "{job}");
    }
}

/// `[prices] stranded`: a run of 1 rtx3090 holding all 16 CPUs of a node of 12 tokens' GPUs an
/// hour pays 12 an hour, charged on its rtx3090 (in steps while it runs, as any run), and its
/// entries say why; a record without it pays its GPU's price.
#[test]
fn a_run_priced_by_the_gpus_it_strands_pays_for_them_under_its_own_type() {
    use gputokens::stranded_price::stranding;
    use gputokens::stranding::{Held, NodeShape, Part};
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, rules());
    let node = NodeShape {
        cpus: 16,
        mem_mb: 8000,
        milli_gpus: BTreeMap::from([("rtx2080".into(), 4000), ("rtx3090".into(), 2000), ("a6000".into(), 2000)]),
    };
    let held = Held { cpus: Some(16), mem_mb: None };
    let mut greedy = record("7", "alice", "rtx3090", 1, 1800);
    greedy.stranding = stranding(&greedy.milli_gpus, held, &[&node], "vm", &seed_prices(), &[Part::Cpus]);
    assert!(greedy.stranding.is_some());
    let fair = record("8", "bob", "rtx3090", 1, 3600);
    l.charge(&[greedy.clone(), fair.clone()], &seed_prices(), at("2026-11-30T08:30:00")).unwrap();
    assert_eq!(balance(&l, "alice"), Tokens::whole(94), "half an hour at 12/h");
    greedy.elapsed = 3600;
    l.charge(&[greedy.clone(), fair], &seed_prices(), at("2026-11-30T09:00:00")).unwrap();
    assert_eq!(balance(&l, "alice"), Tokens::whole(88), "an hour at 12/h, in two steps");
    assert_eq!(balance(&l, "bob"), Tokens::whole(99), "its fair share: its GPU's price");
    let charges: Vec<_> =
        l.history("alice").unwrap().into_iter().filter(|e| e.kind == gputokens::entry::EntryKind::Charge).collect();
    assert_eq!(charges.len(), 2);
    for entry in &charges {
        assert_eq!(entry.gpu_type.as_deref(), Some("rtx3090"));
        assert!(entry.reason.contains("at 12/GPU-hour; priced by its CPUs: 16 of the 16 on vm"), "{}", entry.reason);
    }
    let again = l.charge(&[greedy], &seed_prices(), at("2026-11-30T09:01:00")).unwrap();
    assert_eq!(again.entries, 0, "charged once");
}
