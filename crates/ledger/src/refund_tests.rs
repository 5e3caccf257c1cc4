//! Automatic refunds of one run: its charge (or a capped share) back to whoever paid, once, never
//! more than was paid, whatever admins refunded by hand before or after.

use std::collections::BTreeMap;

use super::*;
use gputokens::pools::{holder, PoolMode};
use gputokens::pricing::PriceTable;
use gputokens::time::parse_timestamp;
use gputokens::tokens::Tokens;

fn at(text: &str) -> i64 {
    parse_timestamp(text).unwrap()
}

fn prices() -> PriceTable {
    PriceTable::new(BTreeMap::from([("a6000".to_string(), Tokens::whole(4))]), None)
}

/// A run of `job` from `start` holding one a6000 for `hours`.
fn run(job: &str, user: &str, account: Option<&str>, start: &str, hours: u64) -> UsageRecord {
    UsageRecord {
        job_id: job.into(),
        user: user.into(),
        account: account.map(str::to_string),
        segment_start: at(start),
        sluid: None,
        milli_gpus: BTreeMap::from([("a6000".to_string(), 1000)]),
        elapsed: hours * 3600,
        nodes: 1,
        weight_permille: 1000,
        held: Default::default(),
        stranding: None,
        lent: None,
    }
}

fn refund<'a>(job: &'a str, start: &str, share: (u64, u64), now: i64) -> RunRefund<'a> {
    RunRefund {
        job_id: job,
        segment_start: at(start),
        share,
        reason: "lost run: node vm failed (NODE_FAIL)",
        at: now,
        month_cap: Tokens::whole(1_000_000),
        month_start: 0,
    }
}

fn balance(l: &Ledger, name: &str) -> Tokens {
    l.account(name).unwrap().unwrap().balance
}

#[test]
fn a_lost_run_is_refunded_once_and_the_jobs_other_runs_stay_charged() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T12:00:00");
    // Job 7 lost its first run (2 h, 8 tokens); its second run (1 h, 4 tokens) completed.
    let runs = [run("7", "alice", None, "2026-11-26T08:00:00", 2), run("7", "alice", None, "2026-11-26T10:30:00", 1)];
    l.charge(&runs, &prices(), now).unwrap();
    assert_eq!(balance(&l, "alice"), Tokens::whole(88));

    let first = l.refund_run(&refund("7", "2026-11-26T08:00:00", (1, 1), now)).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].amount, first[0].kind, first[0].actor.as_str()),
        (Tokens::whole(8), EntryKind::Refund, "gputokens")
    );
    assert_eq!(first[0].job_id.as_deref(), Some("7"));
    assert!(first[0].reason.contains("NODE_FAIL"));
    assert!(l.run_refunded("7", at("2026-11-26T08:00:00")).unwrap());
    assert!(!l.run_refunded("7", at("2026-11-26T10:30:00")).unwrap());
    // Again (the next cycle re-reads the run): nothing.
    assert!(l.refund_run(&refund("7", "2026-11-26T08:00:00", (1, 1), now + 60)).unwrap().is_empty());
    assert_eq!(balance(&l, "alice"), Tokens::whole(96));
    // An admin's refund of the whole job afterwards gives back only what is left: the second run.
    let by_hand = l.refund_job("7", "root", "goodwill", now + 120).unwrap();
    assert_eq!(by_hand[0].amount, Tokens::whole(4));
    assert_eq!(balance(&l, "alice"), Tokens::whole(100));
    assert!(l.verify().unwrap().problems.is_empty());
}

#[test]
fn a_cap_refunds_a_share_and_nothing_is_given_back_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T12:00:00");
    l.charge(&[run("8", "bob", None, "2026-11-26T06:00:00", 4)], &prices(), now).unwrap();
    assert_eq!(balance(&l, "bob"), Tokens::whole(84));
    // A cap of 1 GPU-hour of the 4 held: a quarter of the 16 charged.
    let entries = l.refund_run(&refund("8", "2026-11-26T06:00:00", (3600, 4 * 3600), now)).unwrap();
    assert_eq!(entries[0].amount, Tokens::whole(4));

    // A job an admin refunded by hand first: its lost run adds nothing.
    l.charge(&[run("9", "bob", None, "2026-11-26T06:00:00", 1)], &prices(), now).unwrap();
    l.refund_job("9", "root", "by hand", now).unwrap();
    let before = balance(&l, "bob");
    assert!(l.refund_run(&refund("9", "2026-11-26T06:00:00", (1, 1), now)).unwrap().is_empty());
    assert_eq!(balance(&l, "bob"), before);
    // A run never charged, and shares outside 0..1: nothing, or refused.
    assert!(l.refund_run(&refund("10", "2026-11-26T06:00:00", (1, 1), now)).unwrap().is_empty());
    assert!(l.refund_run(&refund("8", "2026-11-26T06:00:00", (2, 1), now)).is_err());
    assert!(l.refund_run(&refund("8", "2026-11-26T06:00:00", (0, 1), now)).is_err());
    assert!(l.verify().unwrap().problems.is_empty());
}

/// A ledger in `mode` with pool lab (100 tokens, no replenishment, floor -10), and the time to charge at.
fn ledger_with_lab(mode: PoolMode) -> (tempfile::TempDir, Ledger, i64) {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    l.set_pool_mode(mode);
    let rules = BucketRules {
        initial: Tokens::whole(100),
        daily: Tokens::ZERO,
        monthly: Tokens::ZERO,
        cap: None,
        floor: Tokens::whole(-10),
    };
    let now = at("2026-11-26T12:00:00");
    l.add_pool("lab", rules, None, "root", now - 86_400).unwrap();
    (dir, l, now)
}

#[test]
fn a_pool_paid_run_goes_back_to_the_pool() {
    let (_dir, mut l, now) = ledger_with_lab(PoolMode::Account);
    l.charge(&[run("11", "alice", Some("lab"), "2026-11-26T08:00:00", 2)], &prices(), now).unwrap();
    assert_eq!(balance(&l, &holder("lab")), Tokens::whole(92));
    let entries = l.refund_run(&refund("11", "2026-11-26T08:00:00", (1, 1), now)).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!((entries[0].user.as_str(), entries[0].amount), (holder("lab").as_str(), Tokens::whole(8)));
    assert_eq!(balance(&l, &holder("lab")), Tokens::whole(100));
    let alice = l.account("alice").unwrap().map(|a| a.balance);
    assert!(alice.is_none() || alice == Some(Tokens::whole(100)), "alice paid nothing, gets nothing: {alice:?}");
}

#[test]
fn automatic_refunds_stop_at_the_monthly_cap_of_each_balance() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T12:00:00");
    // Three lost runs of 2 h each (8 tokens each); at most 10 tokens back this month.
    let runs: Vec<_> = ["1", "2", "3"].iter().map(|job| run(job, "carol", None, "2026-11-26T08:00:00", 2)).collect();
    l.charge(&runs, &prices(), now).unwrap();
    let capped = |job| RunRefund {
        month_cap: Tokens::whole(10),
        month_start: at("2026-11-01T00:00:00"),
        ..refund(job, "2026-11-26T08:00:00", (1, 1), now)
    };
    assert_eq!(l.refund_run(&capped("1")).unwrap()[0].amount, Tokens::whole(8));
    let second = l.refund_run(&capped("2")).unwrap();
    assert_eq!(second[0].amount, Tokens::whole(2), "what is left of the month's 10");
    assert!(second[0].reason.ends_with("; capped by [refunds] max_tokens_per_month (10)"), "{}", second[0].reason);
    assert!(l.refund_run(&capped("3")).unwrap().is_empty(), "the cap is reached: an admin refunds by hand");
    // An admin's refund is not counted against it, nor limited by it.
    assert_eq!(l.refund_job("3", "root", "checked by hand", now).unwrap()[0].amount, Tokens::whole(8));
    // Next month the cap starts again.
    let next = RunRefund { month_start: at("2026-12-01T00:00:00"), ..capped("2") };
    let next = RunRefund { at: at("2026-12-01T01:00:00"), ..next };
    assert!(l.refund_run(&next).unwrap().is_empty(), "run 2 was refunded (in part) once already");
}

/// The audit's L2: in mode "both" the user's bucket and the pool each paid the whole charge of a
/// run; a lost run gives each the whole of it back (not half), and lowers what the member spent
/// of the pool that month (their per-user limit).
#[test]
fn in_mode_both_a_lost_run_goes_back_whole_to_each_payer_and_off_the_members_spending() {
    let (_dir, mut l, now) = ledger_with_lab(PoolMode::Both);
    l.charge(&[run("12", "alice", Some("lab"), "2026-11-26T08:00:00", 2)], &prices(), now).unwrap();
    assert_eq!((balance(&l, "alice"), balance(&l, &holder("lab"))), (Tokens::whole(92), Tokens::whole(92)));
    let spent = |l: &Ledger| {
        let rows = l.member_spending("2026-11").unwrap();
        rows.iter().find(|m| m.user == "alice").map(|m| m.spent).unwrap_or_default()
    };
    assert_eq!(spent(&l), Tokens::whole(8));
    let entries = l.refund_run(&refund("12", "2026-11-26T08:00:00", (1, 1), now)).unwrap();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!((balance(&l, "alice"), balance(&l, &holder("lab"))), (Tokens::whole(100), Tokens::whole(100)));
    assert_eq!(spent(&l), Tokens::ZERO, "the refunded run no longer counts against alice's limit");
    assert!(l.verify().unwrap().problems.is_empty());
}

/// An admin's refund of a job a pool paid for lowers what its user spent of the pool in each
/// month the pool was charged for it (as an automatic one does), and no one else's; the user's own
/// balance, which paid nothing, gets nothing.
#[test]
fn an_admins_refund_of_a_pool_paid_job_lowers_the_members_spending() {
    let (_dir, mut l, _) = ledger_with_lab(PoolMode::Account);
    // Job 13 runs across the month's end: 2 h charged in November, 2 h more in December.
    l.charge(&[run("13", "alice", Some("lab"), "2026-11-30T20:00:00", 2)], &prices(), at("2026-11-30T22:00:00"))
        .unwrap();
    let december = at("2026-12-01T00:00:00");
    let charges = [
        run("13", "alice", Some("lab"), "2026-11-30T20:00:00", 4),
        run("14", "bob", Some("lab"), "2026-11-30T22:00:00", 2),
    ];
    l.charge(&charges, &prices(), december).unwrap();
    let spent = |l: &Ledger, month: &str, user: &str| {
        let rows = l.member_spending(month).unwrap();
        rows.iter().find(|m| m.user == user).map(|m| m.spent).unwrap_or_default()
    };
    assert_eq!(
        (spent(&l, "2026-11", "alice"), spent(&l, "2026-12", "alice"), spent(&l, "2026-12", "bob")),
        (Tokens::whole(8), Tokens::whole(8), Tokens::whole(8))
    );
    let entries = l.refund_job("13", "root", "the node's PSU", december + 60).unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!((entries[0].user.as_str(), entries[0].amount), (holder("lab").as_str(), Tokens::whole(16)));
    assert_eq!(
        (spent(&l, "2026-11", "alice"), spent(&l, "2026-12", "alice"), spent(&l, "2026-12", "bob")),
        (Tokens::ZERO, Tokens::ZERO, Tokens::whole(8)),
        "each month by what it was charged; bob's spending stays"
    );
    assert!(l.refund_job("13", "root", "again", december + 120).is_err(), "nothing left to refund");
    assert!(l.verify().unwrap().problems.is_empty());
}

/// The audit's L2: Slurm gives a job ID again (MaxJobId wrapped, its state reset). A lost run of
/// the new job goes back to whoever paid for that run, never in part to the old job's payers.
#[test]
fn a_job_id_slurm_used_again_refunds_only_the_new_jobs_payers() {
    // bob's job 21 in September; alice's job 21 in November, both lost. Each paid by its own user.
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T12:00:00");
    l.charge(&[run("21", "bob", None, "2026-09-01T08:00:00", 2)], &prices(), at("2026-09-01T12:00:00")).unwrap();
    l.charge(&[run("21", "alice", None, "2026-11-26T08:00:00", 2)], &prices(), now).unwrap();
    let entries = l.refund_run(&refund("21", "2026-11-26T08:00:00", (1, 1), now)).unwrap();
    let given: Vec<(&str, Tokens)> = entries.iter().map(|e| (e.user.as_str(), e.amount)).collect();
    assert_eq!(given, [("alice", Tokens::whole(8))], "bob paid nothing for this run");
    assert_eq!((balance(&l, "alice"), balance(&l, "bob")), (Tokens::whole(100), Tokens::whole(92)));

    // The same with pools: course paid for the old job 22, lab for the new one.
    let (_dir, mut l, now) = ledger_with_lab(PoolMode::Account);
    l.add_pool("course", BucketRules::default(), None, "root", now - 86_400).unwrap();
    let old = run("22", "carol", Some("course"), "2026-09-01T08:00:00", 2);
    l.charge(&[old], &prices(), at("2026-09-01T12:00:00")).unwrap();
    l.charge(&[run("22", "alice", Some("lab"), "2026-11-26T08:00:00", 2)], &prices(), now).unwrap();
    let entries = l.refund_run(&refund("22", "2026-11-26T08:00:00", (1, 1), now)).unwrap();
    let given: Vec<(&str, Tokens)> = entries.iter().map(|e| (e.user.as_str(), e.amount)).collect();
    assert_eq!(given, [(holder("lab").as_str(), Tokens::whole(8))]);
    assert_eq!(balance(&l, &holder("course")), Tokens::whole(92), "the old job's pool keeps its charge");
    assert!(l.verify().unwrap().problems.is_empty(), "{:?}", l.verify().unwrap().problems);
}

/// Payments kept before schema 15 are summed for all runs of their job (run_start -1): a run of
/// such a job is refunded by the job's shares, and a run going on after the upgrade is kept per
/// run from then on, with nothing counted twice.
#[test]
fn payments_kept_for_a_whole_job_before_schema_15_refund_by_the_jobs_shares() {
    let (_dir, mut l, now) = ledger_with_lab(PoolMode::Both);
    l.charge(&[run("23", "alice", Some("lab"), "2026-11-26T08:00:00", 1)], &prices(), now).unwrap();
    // As the migration leaves them.
    l.conn.execute("UPDATE job_payments SET run_start = -1", ()).unwrap();
    l.charge(&[run("23", "alice", Some("lab"), "2026-11-26T08:00:00", 2)], &prices(), now + 3600).unwrap();
    assert!(l.verify().unwrap().problems.is_empty(), "{:?}", l.verify().unwrap().problems);
    let kept: Vec<(i64, String, i64)> = l
        .conn
        .prepare("SELECT run_start, holder, charged FROM job_payments ORDER BY run_start, holder")
        .unwrap()
        .query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let start = at("2026-11-26T08:00:00");
    let want = [(-1, holder("lab"), 4_000_000), (-1, "alice".into(), 4_000_000)];
    assert_eq!(kept[..2], want);
    assert_eq!(kept[2..], [(start, holder("lab"), 4_000_000), (start, "alice".into(), 4_000_000)]);
    let entries = l.refund_run(&refund("23", "2026-11-26T08:00:00", (1, 1), now + 3600)).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!((balance(&l, "alice"), balance(&l, &holder("lab"))), (Tokens::whole(100), Tokens::whole(100)));
    assert!(l.verify().unwrap().problems.is_empty());
}
