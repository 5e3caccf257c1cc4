use std::collections::BTreeMap;

use super::*;
use crate::{EntryKind, NewEntry, UsageRecord};
use gputokens::policy::BucketRules;
use gputokens::pricing::PriceTable;
use gputokens::statement::Item;
use gputokens::time::parse_timestamp;

fn at(text: &str) -> i64 {
    parse_timestamp(text).unwrap()
}

fn month(text: &str) -> Month {
    text.parse().unwrap()
}

fn issue() -> Issue {
    Issue { at: at("2027-01-15T12:00:00"), partial: false }
}

fn open(dir: &tempfile::TempDir, rules: BucketRules) -> Ledger {
    crate::testdb::open(&dir.path().join("ledger.sqlite"), rules).unwrap()
}

fn seed_prices() -> PriceTable {
    let prices = [("rtx2080", "0.5"), ("rtx3090", "1"), ("a6000", "4")];
    PriceTable::new(prices.into_iter().map(|(t, p)| (t.to_string(), p.parse().unwrap())).collect(), None)
}

fn record(job: &str, user: &str, gpu_type: &str, gpus: u64, elapsed: u64) -> UsageRecord {
    UsageRecord {
        job_id: job.into(),
        user: user.into(),
        account: None,
        segment_start: at("2026-12-01T08:00:00"),
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

/// (item, amount) per line.
fn items(s: &Statement) -> Vec<(Item, String)> {
    s.lines.iter().map(|l| (l.item, l.amount.to_string())).collect()
}

/// The seed's worked example as the ledger records it: first seen the evening before the 1st, the
/// monthly 30 at midnight, the three jobs charged that evening.
fn worked_example(dir: &tempfile::TempDir) -> Ledger {
    let mut l = open(dir, BucketRules { daily: Tokens::ZERO, ..BucketRules::default() });
    l.ensure_user("alice", at("2026-11-30T20:00:00")).unwrap();
    l.replenish(at("2026-12-01T00:05:00")).unwrap();
    let jobs = [
        record("101", "alice", "rtx2080", 8, 5 * 3600),
        record("102", "alice", "rtx3090", 4, 10 * 3600),
        record("103", "alice", "a6000", 2, 3 * 3600),
    ];
    l.charge(&jobs, &seed_prices(), at("2026-12-01T20:00:00")).unwrap();
    l
}

#[test]
fn worked_example_states_100_plus_30_minus_84_is_46() {
    let dir = tempfile::tempdir().unwrap();
    let l = worked_example(&dir);

    let december = l.statement("alice", month("2026-12"), issue()).unwrap();
    assert_eq!(december.opening, Tokens::whole(100));
    assert_eq!(
        items(&december),
        [
            (Item::Monthly, "30".into()),
            (Item::Charge, "-20".into()),
            (Item::Charge, "-40".into()),
            (Item::Charge, "-24".into())
        ]
    );
    let seconds: Vec<(Option<&str>, Option<u64>)> =
        december.lines[1..].iter().map(|l| (l.gpu_type.as_deref(), l.gpu_seconds)).collect();
    assert_eq!(
        seconds,
        [(Some("rtx2080"), Some(144_000)), (Some("rtx3090"), Some(144_000)), (Some("a6000"), Some(21_600))]
    );
    assert_eq!(december.closing, Tokens::whole(46));
    assert_eq!(december.closing, l.account("alice").unwrap().unwrap().balance);

    // Her initial 100 is November's: she was first seen on its last evening.
    let november = l.statement("alice", month("2026-11"), issue()).unwrap();
    assert_eq!(
        (november.opening, items(&november), november.closing),
        (Tokens::ZERO, vec![(Item::Initial, "100".into())], Tokens::whole(100))
    );
    assert_eq!(november.lines[0].date.map(|d| d.to_string()).as_deref(), Some("2026-11-30"));
    // A month with nothing in it is stated too: the balance carries over.
    let january = l.statement("alice", month("2027-01"), issue()).unwrap();
    assert_eq!((january.opening, january.lines.len(), january.closing), (Tokens::whole(46), 0, Tokens::whole(46)));
}

#[test]
fn a_user_not_seen_by_the_month_has_no_statement() {
    let dir = tempfile::tempdir().unwrap();
    let l = worked_example(&dir);
    let err = l.statement("alice", month("2026-10"), issue()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "alice has no entries in the ledger before the end of 2026-10: gputokens first saw them on 2026-11-30"
    );
    assert!(matches!(l.statement("bob", month("2026-12"), issue()), Err(LedgerError::UnknownUser(u)) if u == "bob"));
    assert!(l.statements(month("2026-10"), issue()).unwrap().is_empty());
}

#[test]
fn daily_replenishment_counts_its_days_per_month() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir, BucketRules::default());
    l.ensure_user("bob", at("2026-11-10T12:00:00")).unwrap();
    l.replenish(at("2026-12-03T01:00:00")).unwrap();

    let november = l.statement("bob", month("2026-11"), issue()).unwrap();
    // Days 11 to 30: replenishment starts the day after a user is first seen.
    assert_eq!(items(&november), [(Item::Initial, "100".into()), (Item::Daily, "20".into())]);
    assert_eq!(november.lines[1].days, Some(20));
    let december = l.statement("bob", month("2026-12"), issue()).unwrap();
    assert_eq!(items(&december), [(Item::Monthly, "30".into()), (Item::Daily, "3".into())]);
    assert_eq!(
        (december.opening, december.lines[1].days, december.closing),
        (Tokens::whole(120), Some(3), Tokens::whole(153))
    );
}

#[test]
fn grants_refunds_and_adjustments_are_lines_with_actor_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = worked_example(&dir);
    let grant = NewEntry::new(
        "alice",
        EntryKind::Grant,
        Tokens::whole(5),
        at("2026-12-05T10:00:00"),
        "root",
        "course credit",
        "grant:c".into(),
    );
    l.append(&grant).unwrap();
    l.refund_job("103", "carol", "node failure", at("2026-12-06T10:00:00")).unwrap();
    let fix = NewEntry::new(
        "alice",
        EntryKind::Adjust,
        "-1.5".parse().unwrap(),
        at("2026-12-07T10:00:00"),
        "root",
        "manual fix",
        "adjust:f".into(),
    );
    l.append(&fix).unwrap();

    let s = l.statement("alice", month("2026-12"), issue()).unwrap();
    let people: Vec<String> = s
        .lines
        .iter()
        .filter_map(|l| {
            let job = l.job_id.as_deref().map(|j| format!(" (job {j})")).unwrap_or_default();
            Some(format!("{} {}{job} {}: {}", l.item.as_str(), l.amount, l.actor.as_deref()?, l.reason.as_deref()?))
        })
        .collect();
    assert_eq!(
        people,
        [
            "monthly 30 gputokens: monthly grant",
            "grant 5 root: course credit",
            "refund 24 (job 103) carol: node failure",
            "adjust -1.5 root: manual fix",
        ]
    );
    // Charges stay as charged; the refund is a line of its own.
    assert_eq!(s.lines.iter().filter(|l| l.item == Item::Charge).count(), 3);
    assert_eq!(s.closing, "73.5".parse().unwrap());
}

/// An entry stamped in an earlier month after later ones (a `--now` replay, an admin's back-dated
/// change) belongs to its month: both statements move, and each still adds up.
#[test]
fn entries_belong_to_the_month_they_are_stamped_in() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = worked_example(&dir);
    let late = NewEntry::new(
        "alice",
        EntryKind::Adjust,
        Tokens::whole(2),
        at("2026-11-30T23:00:00"),
        "root",
        "late",
        "adjust:l".into(),
    );
    l.append(&late).unwrap();
    let november = l.statement("alice", month("2026-11"), issue()).unwrap();
    assert_eq!(november.closing, Tokens::whole(102));
    let december = l.statement("alice", month("2026-12"), issue()).unwrap();
    assert_eq!((december.opening, december.closing), (Tokens::whole(102), Tokens::whole(48)));
}

/// Every user's statements, read in two passes over the table, are each user's own statement.
#[test]
fn all_statements_are_each_users_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = worked_example(&dir);
    l.charge(&[record("201", "bob", "rtx3090", 1, 1800)], &seed_prices(), at("2026-12-02T10:00:00")).unwrap();
    l.ensure_user("carol", at("2027-01-02T10:00:00")).unwrap();

    let all = l.statements(month("2026-12"), issue()).unwrap();
    let users: Vec<&str> = all.iter().map(|s| s.user.as_str()).collect();
    assert_eq!(users, ["alice", "bob"], "carol came later");
    for s in &all {
        assert_eq!(s, &l.statement(&s.user, month("2026-12"), issue()).unwrap());
    }
    assert_eq!(items(&all[1]), [(Item::Initial, "100".into()), (Item::Charge, "-0.5".into())]);
}
