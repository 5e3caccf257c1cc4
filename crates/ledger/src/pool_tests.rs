//! Token pools of Slurm accounts: who pays in each mode, the pool's own rules, what members spent,
//! transfers, refunds to whoever paid, and mode switches that lose and double nothing.

use std::collections::BTreeMap;

use super::*;
use crate::allocations::{is_open as allocation_is_open, Allocation};
use gputokens::pools::{holder, PoolMode};
use gputokens::pricing::PriceTable;
use gputokens::time::parse_timestamp;
use gputokens::tokens::Tokens;

fn at(text: &str) -> i64 {
    parse_timestamp(text).unwrap()
}

fn prices() -> PriceTable {
    let p = [("rtx2080", 500_000), ("rtx3090", 1_000_000), ("a6000", 4_000_000)];
    PriceTable::new(p.iter().map(|(t, m)| (t.to_string(), Tokens::from_micro(*m))).collect(), None)
}

fn job(id: &str, user: &str, account: &str, gpu_type: &str, gpus: u64, elapsed: u64) -> UsageRecord {
    UsageRecord {
        job_id: id.into(),
        user: user.into(),
        account: Some(account.into()),
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

fn pool_rules() -> BucketRules {
    BucketRules {
        initial: Tokens::whole(100),
        daily: Tokens::ZERO,
        monthly: Tokens::whole(30),
        cap: None,
        floor: Tokens::whole(-10),
    }
}

fn ledger(dir: &tempfile::TempDir, mode: PoolMode) -> Ledger {
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    l.set_pool_mode(mode);
    l.add_pool("lab", pool_rules(), None, "root", at("2026-11-29T12:00:00")).unwrap();
    l
}

fn balance(l: &Ledger, name: &str) -> Tokens {
    l.account(name).unwrap().map_or(Tokens::whole(-999), |a| a.balance)
}

#[test]
fn the_seed_example_per_account_leaves_the_pool_at_46() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir, PoolMode::Account);
    let records = [
        job("1", "alice", "lab", "rtx2080", 8, 5 * 3600),
        job("2", "bob", "lab", "rtx3090", 4, 10 * 3600),
        job("3", "alice", "lab", "a6000", 2, 3 * 3600),
    ];
    l.charge(&records, &prices(), at("2026-11-30T20:00:00")).unwrap();
    assert_eq!(balance(&l, &holder("lab")), Tokens::whole(16));
    assert_eq!(l.account("alice").unwrap(), None, "alice's own bucket was never touched");
    l.replenish(at("2026-12-01T00:30:00")).unwrap();
    assert_eq!(balance(&l, &holder("lab")), Tokens::whole(46), "100 − 84 + 30 on the 1st, no daily");
    assert_eq!(l.pools().unwrap()[0].balance, Tokens::whole(46));
    let spent = l.member_spending("2026-11").unwrap();
    let by_member: Vec<_> = spent.iter().map(|s| (s.user.as_str(), s.spent)).collect();
    assert_eq!(by_member, vec![("alice", Tokens::whole(44)), ("bob", Tokens::whole(40))]);
    let history = l.history(&holder("lab")).unwrap();
    assert!(history.iter().any(|e| e.kind == EntryKind::Charge && e.job_id.as_deref() == Some("2")));
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
    // A second cycle of the same records adds nothing.
    let again = l.charge(&records, &prices(), at("2026-12-01T01:00:00")).unwrap();
    assert_eq!(again.entries, 0);
}

#[test]
fn who_pays_follows_the_mode_and_the_account() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir, PoolMode::User);
    let now = at("2026-11-30T20:00:00");
    l.charge(&[job("1", "alice", "lab", "rtx3090", 1, 3600)], &prices(), now).unwrap();
    assert_eq!((balance(&l, "alice"), balance(&l, &holder("lab"))), (Tokens::whole(99), Tokens::whole(100)));
    l.set_pool_mode(PoolMode::Account);
    l.charge(&[job("2", "alice", "lab", "rtx3090", 1, 3600)], &prices(), now).unwrap();
    l.charge(&[job("3", "alice", "ops", "rtx3090", 1, 3600)], &prices(), now).unwrap();
    assert_eq!(balance(&l, &holder("lab")), Tokens::whole(99), "lab paid job 2");
    assert_eq!(balance(&l, "alice"), Tokens::whole(98), "ops has no pool: alice paid job 3");
    l.set_pool_mode(PoolMode::Both);
    let out = l.charge(&[job("4", "alice", "lab", "rtx3090", 1, 3600)], &prices(), now).unwrap();
    assert_eq!((balance(&l, "alice"), balance(&l, &holder("lab"))), (Tokens::whole(97), Tokens::whole(98)));
    assert_eq!((out.entries, out.charged), (2, Tokens::whole(1)), "two entries, one GPU-hour's cost");
    assert_eq!(out.by_user_type.keys().map(|(u, _)| u.as_str()).collect::<Vec<_>>(), ["alice"], "no pool as a user");
    assert!(l.accounts().unwrap().iter().all(|a| a.user == "alice"), "pools are not users");
}

#[test]
fn a_mode_switch_under_a_running_job_charges_it_once_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir, PoolMode::User);
    let now = at("2026-11-30T20:00:00");
    l.charge(&[job("7", "alice", "lab", "a6000", 1, 1800)], &prices(), now).unwrap();
    l.set_pool_mode(PoolMode::Account);
    l.charge(&[job("7", "alice", "lab", "a6000", 1, 3600)], &prices(), now + 1800).unwrap();
    l.set_pool_mode(PoolMode::User);
    l.charge(&[job("7", "alice", "lab", "a6000", 1, 5400)], &prices(), now + 3600).unwrap();
    let alice = Tokens::whole(100) - balance(&l, "alice");
    let lab = Tokens::whole(100) - balance(&l, &holder("lab"));
    assert_eq!((alice, lab), (Tokens::whole(4), Tokens::whole(2)), "1.5 h × 4 = 6: 2 + 2 by alice, 2 by lab");
    // The refund goes back to whoever paid, each once.
    l.refund_job("7", "root", "node failure", now + 4000).unwrap();
    assert_eq!((balance(&l, "alice"), balance(&l, &holder("lab"))), (Tokens::whole(100), Tokens::whole(100)));
    assert!(l.refund_job("7", "root", "again", now + 4001).is_err());
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}

#[test]
fn pool_rules_change_audited_and_replenish_by_the_pools_own_rules() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir, PoolMode::Account);
    let change =
        PoolChange { daily: Some(Tokens::whole(5)), user_limit: Some(Some(Tokens::whole(10))), ..Default::default() };
    let (pool, written) = l.set_pool("lab", &change, "root", "rules:1", at("2026-11-29T13:00:00")).unwrap();
    assert!(written);
    let again =
        l.set_pool("lab", &PoolChange { daily: Some(Tokens::whole(7)), ..change.clone() }, "root", "rules:1", 0);
    assert_eq!(again.unwrap().0.rules.daily, Tokens::whole(5), "a key used before changes nothing");
    assert_eq!((pool.rules.daily, pool.user_limit), (Tokens::whole(5), Some(Tokens::whole(10))));
    let audit = l.history(&holder("lab")).unwrap();
    assert!(audit.last().unwrap().reason.contains("+0/day") && audit.last().unwrap().reason.contains("+5/day"));
    assert_eq!(audit.last().unwrap().actor, "root");
    l.ensure_user("alice", at("2026-11-29T13:00:00")).unwrap();
    l.replenish(at("2026-11-30T00:30:00")).unwrap();
    assert_eq!(balance(&l, &holder("lab")), Tokens::whole(105), "the pool's +5");
    assert_eq!(balance(&l, "alice"), Tokens::whole(101), "the user's +1");
    assert!(matches!(l.add_pool("lab", pool_rules(), None, "root", 0), Err(LedgerError::PoolExists(_))));
    assert!(matches!(l.set_pool("nope", &change, "root", "rules:2", 0), Err(LedgerError::UnknownPool(_))));
    assert!(matches!(l.add_pool("a b", pool_rules(), None, "root", 0), Err(LedgerError::BadAccountName { .. })));
}

#[test]
fn a_transfer_moves_both_sides_or_neither_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir, PoolMode::Account);
    let now = at("2026-11-30T10:00:00");
    l.add_pool("course", pool_rules(), None, "root", now).unwrap();
    let (lab, course) = (holder("lab"), holder("course"));
    assert_eq!(l.transfer(&lab, &course, Tokens::whole(30), "carol", "lab helps", "t1", now).unwrap(), Applied::Added);
    assert_eq!(
        l.transfer(&lab, &course, Tokens::whole(30), "carol", "lab helps", "t1", now).unwrap(),
        Applied::AlreadyRecorded
    );
    assert_eq!((balance(&l, &lab), balance(&l, &course)), (Tokens::whole(70), Tokens::whole(130)));
    assert!(l.transfer(&lab, &holder("nowhere"), Tokens::whole(1), "carol", "x", "t2", now).is_err());
    assert_eq!(balance(&l, &lab), Tokens::whole(70), "the failed transfer took nothing");
    assert!(l.transfer(&lab, &course, Tokens::ZERO, "carol", "x", "t3", now).is_err());
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}

/// The audit's L3: admins' and coordinators' keys share one namespace. carol (coordinator of
/// course) grants a micro-token under the key of the admin's scripted monthly grant to bob; the
/// admin's grant is then refused loudly, naming what holds the key, never skipped as "already
/// recorded"; a true replay of either still changes nothing.
#[test]
fn a_key_taken_by_another_change_refuses_instead_of_replaying() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = 1_795_500_000;
    l.add_pool("course", BucketRules::default(), None, "root", now).unwrap();
    let course = gputokens::pools::holder("course");
    let key = "grant:monthly-bob-2026-12".to_string();
    let by_carol = NewEntry::new(&course, EntryKind::Grant, Tokens::from_micro(1), now, "carol", "x", key.clone());
    assert_eq!(l.append(&by_carol).unwrap(), Applied::Added);
    assert_eq!(l.append(&by_carol).unwrap(), Applied::AlreadyRecorded, "her own replay");
    let by_admin = NewEntry::new("bob", EntryKind::Grant, Tokens::whole(20), now, "root", "monthly", key);
    let refused = l.append(&by_admin).unwrap_err().to_string();
    assert!(refused.contains("already names another change (grant 0.000001 to account course)"), "{refused}");
    assert!(l.account("bob").unwrap().is_none(), "nothing written for bob");
}

/// The audit's L4: a transfer moves only what its source holds above its floor, and never what is
/// left of its grants that expire (moved, those tokens would escape their end); a replay of a
/// transfer already made still changes nothing.
#[test]
fn transfers_stop_at_the_floor_and_leave_expiring_tokens_where_they_expire() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = 1_795_500_000;
    let rules = BucketRules { initial: Tokens::whole(40), floor: Tokens::whole(-10), ..BucketRules::default() };
    for pool in ["lab", "course"] {
        l.add_pool(pool, rules, None, "root", now).unwrap();
    }
    let (lab, course) = (holder("lab"), holder("course"));
    let refused = l.transfer(&lab, &course, Tokens::whole(51), "carol", "x", "t1", now).unwrap_err().to_string();
    assert!(refused.contains("may move at most 50 tokens (balance 40, floor -10)"), "{refused}");
    assert_eq!(l.transfer(&lab, &course, Tokens::whole(50), "carol", "x", "t2", now).unwrap(), Applied::Added);
    assert_eq!(
        l.transfer(&lab, &course, Tokens::whole(50), "carol", "x", "t2", now).unwrap(),
        Applied::AlreadyRecorded
    );
    // The same key from lab to another pool is another change: refused, not "already recorded".
    l.add_pool("physics", rules, None, "root", now).unwrap();
    let other = l.transfer(&lab, &holder("physics"), Tokens::whole(50), "root", "x", "t2", now).unwrap_err();
    assert!(other.to_string().contains("already names another change"), "{other}");
    // course now holds 90, 30 more from a term grant that ends in a week: 90 may move, not 120.
    let term = NewEntry::new(&course, EntryKind::Grant, Tokens::whole(30), now, "root", "term", "grant:term".into());
    l.append_expiring(&term, now + 7 * 86_400).unwrap();
    let refused = l.transfer(&course, &lab, Tokens::whole(91), "carol", "x", "t3", now).unwrap_err().to_string();
    assert!(
        refused.contains("may move at most 90 tokens (balance 120, floor -10, 30 of it from grants that expire"),
        "{refused}"
    );
    l.transfer(&course, &lab, Tokens::whole(90), "carol", "x", "t4", now).unwrap();
}

/// course draws on dept: each charge of a course job counts at both (and what the member spent at
/// both, for each one's per-user limit), a refund goes back to both, and a parent is refused
/// where it would make a loop.
#[test]
fn a_pool_drawing_on_a_parent_is_charged_at_both_and_refunded_at_both() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir, PoolMode::Account);
    let now = at("2026-11-30T20:00:00");
    l.add_pool("dept", pool_rules(), None, "root", now).unwrap();
    l.add_pool("course", pool_rules(), None, "root", now).unwrap();
    let nest = |parent: &str| PoolChange { parent: Some(Some(parent.to_string())), ..Default::default() };
    let (course, changed) = l.set_pool("course", &nest("dept"), "root", "pool-rules:nest", now).unwrap();
    assert!(changed && course.parent.as_deref() == Some("dept"));
    let rules_entry = l.history(&holder("course")).unwrap().into_iter().last().unwrap();
    assert!(rules_entry.reason.ends_with(", draws on dept"), "{}", rules_entry.reason);
    // No loops, no pool drawing on itself or on an account without a pool.
    for (account, parent) in [("dept", "course"), ("course", "course"), ("course", "nowhere")] {
        let refused = l.set_pool(account, &nest(parent), "root", &format!("pool-rules:{account}{parent}"), now);
        assert!(matches!(refused, Err(LedgerError::Refused(_))), "{account} → {parent}: {refused:?}");
    }
    l.charge(
        &[job("7", "alice", "course", "a6000", 1, 3600), job("8", "bob", "dept", "a6000", 1, 1800)],
        &prices(),
        now,
    )
    .unwrap();
    assert_eq!(balance(&l, &holder("course")), Tokens::whole(96), "its own job");
    assert_eq!(balance(&l, &holder("dept")), Tokens::whole(94), "course's 4 and its own 2");
    assert_eq!(balance(&l, &holder("lab")), Tokens::whole(100));
    let counted = l.history(&holder("dept")).unwrap();
    let from_course = counted.iter().find(|e| e.job_id.as_deref() == Some("7")).unwrap();
    assert!(from_course.reason.ends_with("; under account course, which draws on this pool"), "{}", from_course.reason);
    let spent: Vec<_> =
        l.member_spending("2026-11").unwrap().into_iter().map(|s| (s.account, s.user, s.spent)).collect();
    assert_eq!(
        spent,
        [
            ("course".to_string(), "alice".to_string(), Tokens::whole(4)),
            ("dept".to_string(), "alice".to_string(), Tokens::whole(4)),
            ("dept".to_string(), "bob".to_string(), Tokens::whole(2)),
        ]
    );
    // Charged further: counted at both again, once.
    l.charge(&[job("7", "alice", "course", "a6000", 1, 5400)], &prices(), now + 1800).unwrap();
    l.charge(&[job("7", "alice", "course", "a6000", 1, 5400)], &prices(), now + 1900).unwrap();
    assert_eq!((balance(&l, &holder("course")), balance(&l, &holder("dept"))), (Tokens::whole(94), Tokens::whole(92)));
    l.refund_job("7", "root", "node failure", now + 4000).unwrap();
    assert_eq!((balance(&l, &holder("course")), balance(&l, &holder("dept"))), (Tokens::whole(100), Tokens::whole(98)));
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
    // Unnested: its next charges stay in course.
    let unnest = PoolChange { parent: Some(None), ..Default::default() };
    l.set_pool("course", &unnest, "root", "pool-rules:unnest", now + 5000).unwrap();
    l.charge(&[job("9", "alice", "course", "a6000", 1, 3600)], &prices(), now + 5000).unwrap();
    assert_eq!((balance(&l, &holder("course")), balance(&l, &holder("dept"))), (Tokens::whole(96), Tokens::whole(98)));
}

/// A TA's dated sub-allocation inside course: GPU time used inside its window is charged to it and
/// course, whenever the charge comes; time used after its end to course alone; what cannot be one
/// is refused.
#[test]
fn a_dated_sub_allocation_is_charged_inside_its_window_and_its_parent_alone_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir, PoolMode::Account);
    let now = at("2026-11-30T20:00:00");
    l.add_pool("course", pool_rules(), None, "root", now).unwrap();
    let ta = Allocation {
        account: "ta1".into(),
        parent: "course".into(),
        amount: Tokens::whole(20),
        starts: now - 3600,
        ends: now + 3600,
    };
    let made = l.allocate(&ta, "carol", now).unwrap();
    assert_eq!(
        (made.balance, made.parent.as_deref(), made.window),
        (Tokens::whole(20), Some("course"), Some((now - 3600, now + 3600)))
    );
    assert_eq!(made.rules.floor, Tokens::ZERO, "a sub-allocation never goes into debt");
    let created = l.history(&holder("ta1")).unwrap();
    assert!(created
        .iter()
        .any(|e| e.actor == "carol" && e.reason.starts_with("sub-allocation created: 20 tokens inside course from ")));
    for bad in [
        Allocation { amount: Tokens::whole(-1), account: "ta2".into(), ..ta.clone() },
        Allocation { ends: ta.starts, account: "ta2".into(), ..ta.clone() },
        Allocation { parent: "nowhere".into(), account: "ta2".into(), ..ta.clone() },
        ta.clone(),
    ] {
        assert!(l.allocate(&bad, "carol", now).is_err(), "{bad:?}");
    }
    // bob's job started half an hour ago, inside the window: its hour is ta1's and course's.
    let run = |elapsed| UsageRecord { segment_start: now - 1800, ..job("7", "bob", "ta1", "a6000", 1, elapsed) };
    let balances = |l: &Ledger| (balance(l, &holder("ta1")), balance(l, &holder("course")));
    l.charge(&[run(1800)], &prices(), now).unwrap();
    assert_eq!(balances(&l), (Tokens::whole(18), Tokens::whole(98)));
    // Charged late (the cycle after its end), for an hour and a half of which one fell inside the
    // window: ta1 pays for that hour (4), course for all of it (6). By when it was used, not charged.
    l.charge(&[run(7200)], &prices(), now + 7200).unwrap();
    assert_eq!(balances(&l), (Tokens::whole(14), Tokens::whole(92)));
    let ta1 = l.history(&holder("ta1")).unwrap();
    assert!(ta1.last().unwrap().reason.ends_with("; 3600s of it inside this sub-allocation's dates"), "{ta1:?}");
    // Used after its end: course alone.
    l.charge(&[run(9000)], &prices(), now + 7200).unwrap();
    assert_eq!(balances(&l), (Tokens::whole(14), Tokens::whole(90)));
    assert!(allocation_is_open(made.window, now) && !allocation_is_open(made.window, now + 3600));
    assert!(!allocation_is_open(made.window, now - 3601) && allocation_is_open(None, 0));
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}

/// A pool draws on at most MAX_DEPTH pools above it, counting those below the one being nested.
#[test]
fn nesting_stops_at_the_depth_limit_counting_the_pools_below() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = ledger(&dir, PoolMode::Account);
    let now = at("2026-11-30T20:00:00");
    let limit = gputokens::pools::MAX_DEPTH;
    for i in 0..=limit + 1 {
        l.add_pool(&format!("p{i}"), pool_rules(), None, "root", now).unwrap();
    }
    let nest = |parent: String| PoolChange { parent: Some(Some(parent)), ..Default::default() };
    // p1 → p0, p2 → p1, …: p{limit} draws on `limit` pools.
    for i in 1..=limit {
        l.set_pool(&format!("p{i}"), &nest(format!("p{}", i - 1)), "root", &format!("k{i}"), now).unwrap();
    }
    let refused = l.set_pool(&format!("p{}", limit + 1), &nest(format!("p{limit}")), "root", "deep", now);
    assert!(matches!(refused, Err(LedgerError::Refused(ref m)) if m.contains("at most")), "{refused:?}");
    // Unnest p1 and hang the chain below lab, which draws on a pool of its own: p{limit} would
    // draw on limit + 1.
    l.set_pool("p1", &PoolChange { parent: Some(None), ..Default::default() }, "root", "free", now).unwrap();
    l.add_pool("top", pool_rules(), None, "root", now).unwrap();
    l.set_pool("lab", &nest("top".into()), "root", "lab-top", now).unwrap();
    let below = l.set_pool("p1", &nest("lab".into()), "root", "below", now);
    assert!(matches!(below, Err(LedgerError::Refused(_))), "the pools below count: {below:?}");
    l.set_pool("p1", &nest("p0".into()), "root", "back", now).unwrap();
}
