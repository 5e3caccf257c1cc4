//! Amounts at the edges of what the ledger holds: nothing wraps, nothing is stored inexactly, and a
//! record that cannot be counted is left out while the others are charged.

use std::collections::BTreeMap;

use super::*;
use gputokens::pricing::PriceTable;
use gputokens::tokens::Tokens;

fn prices(per_gpu_hour: Tokens) -> PriceTable {
    PriceTable::new(BTreeMap::from([("a6000".to_string(), per_gpu_hour)]), None)
}

fn record(job: &str, user: &str, milli: u64, elapsed: u64) -> UsageRecord {
    UsageRecord {
        job_id: job.into(),
        user: user.into(),
        account: None,
        segment_start: 1_795_430_400,
        sluid: None,
        milli_gpus: BTreeMap::from([("a6000".to_string(), milli)]),
        elapsed,
        nodes: 1,
        weight_permille: 1000,
        held: Default::default(),
        stranding: None,
        lent: None,
    }
}

fn open(dir: &tempfile::TempDir) -> Ledger {
    crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap()
}

fn balance(l: &Ledger, user: &str) -> Tokens {
    l.account(user).unwrap().unwrap().balance
}

#[test]
fn records_too_large_to_count_are_left_out_and_the_rest_charged() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir);
    let now = 1_795_500_000;
    let records = [
        record("1", "alice", 1000, i64::MAX as u64), // ElapsedRaw = 2^63 - 1
        record("2", "alice", u64::MAX, 60),          // 10^18 GPUs, saturated by the TRES reader
        record("3", "alice", 1000, u64::MAX),        // beyond the i64 column
        record("4", "alice", 2000, 3600),
        record("5", "bob", 1000, 1800),
    ];
    let out = l.charge(&records, &prices(Tokens::whole(4)), now).unwrap();
    assert_eq!(out.uncountable, ["1", "2", "3"]);
    assert_eq!((out.records, out.entries, out.charged), (2, 2, Tokens::whole(10)));
    assert_eq!(balance(&l, "alice"), Tokens::whole(100 - 8));
    assert_eq!(balance(&l, "bob"), Tokens::whole(100 - 2));

    // A price so high that one GPU-hour is beyond the ledger: left out, not saturated.
    let out = l.charge(&[record("6", "bob", 2000, 3600)], &prices(Tokens::MAX), now).unwrap();
    assert_eq!((out.uncountable.as_slice(), out.entries), (["6".to_string()].as_slice(), 0));
    assert_eq!(balance(&l, "bob"), Tokens::whole(98));
    assert!(l.verify().unwrap().problems.is_empty());
}

#[test]
fn the_largest_countable_charge_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir);
    // Ten years of a hundred thousand GPUs at 1 token/h: about 8.8e9 tokens, charged to the micro-token.
    let (milli, elapsed) = (100_000 * 1000, 10 * 366 * 86_400);
    let out = l.charge(&[record("7", "carol", milli, elapsed)], &prices(Tokens::whole(1)), 1_795_500_000).unwrap();
    // 100,000 GPU × 316,224,000 s ÷ 3600 at 1 token per GPU-hour.
    let expected = Tokens::whole(8_784_000_000);
    assert_eq!(out.charged, expected);
    assert_eq!(balance(&l, "carol"), Tokens::whole(100) - expected);
    assert!(l.verify().unwrap().problems.is_empty());
}

#[test]
fn a_balance_is_never_moved_past_what_the_ledger_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir);
    // By hand a balance stops at BALANCE_LIMIT (below); the cycles' own entries (here a
    // replenishment) only at the edge of the range, which is checked here.
    let by_hand =
        NewEntry::new("dave", EntryKind::Grant, Tokens::whole(2_000_000_000_000), 10, "root", "test", "h".into());
    assert!(l.append(&by_hand).unwrap_err().to_string().contains("the most a balance may be moved to"));
    let grant =
        |amount: Tokens, key: &str| NewEntry::new("dave", EntryKind::Replenish, amount, 10, "root", "test", key.into());
    l.append(&grant(Tokens::MAX - Tokens::whole(100), "a")).unwrap();
    assert_eq!(balance(&l, "dave"), Tokens::MAX);
    let err = l.append(&grant(Tokens::from_micro(1), "b")).unwrap_err();
    assert!(
        err.to_string().starts_with("dave's balance 9223372036854.775807 changed by 0.000001 would leave the range"),
        "{err}"
    );
    assert_eq!(balance(&l, "dave"), Tokens::MAX, "unchanged");
    assert_eq!(l.history("dave").unwrap().len(), 2, "the refused entry was rolled back");
    // SQLite's SUM over the entries fails loudly on overflow; here it is exact.
    assert!(l.verify().unwrap().problems.is_empty());
    let charge = l.charge(&[record("8", "dave", 1000, 3600)], &prices(Tokens::whole(4)), 20).unwrap();
    assert_eq!(charge.charged, Tokens::whole(4));
    assert_eq!(balance(&l, "dave"), Tokens::MAX - Tokens::whole(4));
}

/// The audit's M2: a coordinator's transfers between two pools could push both to the ends of the
/// 64-bit range, and then every charge and replenishment of everyone failed. Moves by hand stop at
/// ±`BALANCE_LIMIT`, and a balance that cannot be replenished is skipped while the others are.
#[test]
fn moves_by_hand_stop_at_the_balance_limit_and_one_balance_never_stops_replenishment() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = open(&dir);
    let now = 1_795_500_000;
    // (A floor no site has, so that only the bound stops the transfers.)
    let rules =
        BucketRules { initial: Tokens::ZERO, floor: Tokens::whole(-2_000_000_000_000), ..BucketRules::default() };
    for pool in ["lab", "course"] {
        l.add_pool(pool, rules, None, "root", now).unwrap();
    }
    let (lab, course) = (gputokens::pools::holder("lab"), gputokens::pools::holder("course"));
    // A thousand transfers of the most one may move take lab to -BALANCE_LIMIT, course to +.
    for i in 0..1000 {
        let key = format!("t{i}");
        l.transfer(&lab, &course, Tokens::LIMIT, "carol", "x", &key, now).unwrap();
    }
    assert_eq!(balance(&l, &course), Tokens::BALANCE_LIMIT);
    let beyond = l.transfer(&lab, &course, Tokens::from_micro(1), "carol", "x", "t-more", now).unwrap_err();
    assert!(beyond.to_string().contains("the most a balance may be moved to"), "{beyond}");
    assert_eq!(balance(&l, &course), Tokens::BALANCE_LIMIT, "nothing moved");
    // Back towards zero is always allowed.
    l.transfer(&course, &lab, Tokens::whole(5), "carol", "x", "t-back", now).unwrap();
    let grant = NewEntry::new(&course, EntryKind::Grant, Tokens::whole(6), now, "carol", "x", "grant:g".into());
    assert!(l.append(&grant).is_err(), "a grant past the bound");

    // A balance no replenishment can be added to (put at the very edge, as no path of gputokens
    // can): skipped and named; everyone else replenished.
    l.conn.execute("UPDATE users SET balance = ?2 WHERE name = ?1", crate::db::params![course, i64::MAX]).unwrap();
    l.append(&NewEntry::new("alice", EntryKind::Grant, Tokens::whole(1), now, "root", "x", "grant:a".into())).unwrap();
    let days_later = now + 3 * 86_400;
    let done = l.replenish(days_later).unwrap();
    assert_eq!(done.failed, 1, "{done:?}");
    assert_eq!(done.failures[0].0, course);
    assert!(done.entries >= 3, "alice and lab replenished: {done:?}");
    assert_eq!(balance(&l, "alice"), Tokens::whole(101 + 3));
}
