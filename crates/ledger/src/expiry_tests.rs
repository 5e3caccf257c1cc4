//! Grants with an end date: charges draw from them first, the soonest-ending first; what is left at
//! the end expires once (never below 0), whatever else the balance holds stays.

use std::collections::BTreeMap;

use super::*;
use gputokens::pricing::PriceTable;
use gputokens::time::parse_timestamp;
use gputokens::tokens::Tokens;

fn at(text: &str) -> i64 {
    parse_timestamp(text).unwrap()
}

fn a6000_hours(id: &str, user: &str, hours: u64) -> UsageRecord {
    UsageRecord {
        job_id: id.into(),
        user: user.into(),
        account: None,
        segment_start: at("2026-11-26T08:00:00"),
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

fn prices() -> PriceTable {
    PriceTable::new(BTreeMap::from([("a6000".to_string(), Tokens::whole(4))]), None)
}

fn grant(l: &mut Ledger, user: &str, amount: i64, key: &str, now: i64, ends: i64) -> Applied {
    let entry = NewEntry::new(user, EntryKind::Grant, Tokens::whole(amount), now, "root", "course credit", key.into());
    l.append_expiring(&entry, ends).unwrap()
}

fn balance(l: &Ledger, user: &str) -> Tokens {
    l.account(user).unwrap().unwrap().balance
}

#[test]
fn charges_draw_from_the_soonest_ending_grant_and_what_is_left_expires_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T09:00:00");
    assert_eq!(grant(&mut l, "alice", 50, "grant:late", now, at("2026-12-31T00:00:00")), Applied::Added);
    assert_eq!(grant(&mut l, "alice", 20, "grant:soon", now, at("2026-11-26T10:00:00")), Applied::Added);
    assert_eq!(grant(&mut l, "alice", 20, "grant:soon", now, at("2026-11-26T10:00:00")), Applied::AlreadyRecorded);
    assert_eq!(balance(&l, "alice"), Tokens::whole(170));

    // 24 tokens: 20 from the grant ending at 10:00, 4 from the one ending in December.
    l.charge(&[a6000_hours("1", "alice", 6)], &prices(), now + 60).unwrap();
    let open = l.open_grants("alice").unwrap();
    let unused: Vec<(Tokens, Tokens)> = open.iter().map(|g| (g.amount, g.unused)).collect();
    assert_eq!(unused, [(Tokens::whole(20), Tokens::ZERO), (Tokens::whole(50), Tokens::whole(46))]);

    // At 10:00 the first ends with nothing left: no entry. The second is not due.
    assert!(l.expire_grants(at("2026-11-26T10:00:00")).unwrap().is_empty());
    assert_eq!(l.open_grants("alice").unwrap().len(), 1);
    assert_eq!(balance(&l, "alice"), Tokens::whole(146));

    // In December the 46 left of the second expire: the initial 100 stays.
    let expired = l.expire_grants(at("2026-12-31T00:30:00")).unwrap();
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(
        (expired[0].kind, expired[0].amount, expired[0].actor.as_str()),
        (EntryKind::Adjust, Tokens::whole(-46), "gputokens")
    );
    assert!(
        expired[0].reason.starts_with("expired: 46 left of the grant of 50 on 2026-11-26"),
        "{}",
        expired[0].reason
    );
    assert_eq!(balance(&l, "alice"), Tokens::whole(100));
    assert!(l.expire_grants(at("2026-12-31T01:00:00")).unwrap().is_empty(), "once");
    assert!(l.open_grants("alice").unwrap().is_empty());
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}

#[test]
fn an_expiry_never_takes_a_balance_below_zero_and_warnings_are_listed_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T09:00:00");
    let ends = at("2026-11-26T09:02:00");
    grant(&mut l, "bob", 50, "grant:b", now, ends);
    let adjust =
        NewEntry::new("bob", EntryKind::Adjust, Tokens::whole(-120), now, "root", "correction", "adjust:b".into());
    l.append(&adjust).unwrap();
    assert_eq!(balance(&l, "bob"), Tokens::whole(30));

    let due = l.grants_to_warn(ends).unwrap();
    assert_eq!(due.len(), 1);
    l.mark_warned(due[0].entry_id, None, now).unwrap();
    assert!(l.grants_to_warn(ends).unwrap().is_empty(), "warned once");

    let expired = l.expire_grants(ends).unwrap();
    assert_eq!(expired[0].amount, Tokens::whole(-30), "only what the balance holds");
    assert_eq!(balance(&l, "bob"), Tokens::ZERO);

    let err = l.append_expiring(
        &NewEntry::new("bob", EntryKind::Grant, Tokens::whole(5), now, "root", "x", "grant:c".into()),
        now,
    );
    assert!(err.unwrap_err().to_string().contains("must come after it is made"));
}

#[test]
fn a_refund_of_what_a_grant_paid_for_goes_back_into_the_grant_and_expires_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T09:00:00");
    grant(&mut l, "alice", 20, "grant:term", now, at("2026-12-31T00:00:00"));
    // Two runs of 2 a6000-hours (8 tokens each), paid from the grant: 4 of it left.
    let second = UsageRecord { job_id: "2".into(), ..a6000_hours("2", "alice", 2) };
    l.charge(&[a6000_hours("1", "alice", 2), second], &prices(), now + 60).unwrap();
    assert_eq!(l.open_grants("alice").unwrap()[0].unused, Tokens::whole(4));

    // Run 1 lost to the system, refunded automatically; job 2 refunded by an admin.
    let lost = RunRefund {
        job_id: "1",
        segment_start: at("2026-11-26T08:00:00"),
        share: (1, 1),
        reason: "lost run",
        at: now + 120,
        month_cap: Tokens::whole(100),
        month_start: 0,
    };
    assert_eq!(l.refund_run(&lost).unwrap()[0].amount, Tokens::whole(8));
    assert_eq!(l.open_grants("alice").unwrap()[0].unused, Tokens::whole(12), "back into the grant");
    l.refund_job("2", "root", "goodwill", now + 180).unwrap();
    assert_eq!(l.open_grants("alice").unwrap()[0].unused, Tokens::whole(20));
    assert_eq!(balance(&l, "alice"), Tokens::whole(120));

    // The whole grant expires at its end: the refunds did not keep any of it for good.
    let expired = l.expire_grants(at("2026-12-31T00:30:00")).unwrap();
    assert_eq!(expired[0].amount, Tokens::whole(-20));
    assert_eq!(balance(&l, "alice"), Tokens::whole(100));
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}

/// A refund goes back only into grants that could have paid for the job: one made after its last
/// charge keeps what it has, and the refund stays in the balance.
#[test]
fn a_refund_never_fills_a_grant_made_after_the_job_was_charged() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T09:00:00");
    // Job 4 paid from the plain balance; a term grant comes later and is partly spent by job 5.
    l.charge(&[a6000_hours("4", "alice", 2)], &prices(), now).unwrap();
    grant(&mut l, "alice", 20, "grant:later", now + 60, at("2026-12-31T00:00:00"));
    l.charge(&[UsageRecord { job_id: "5".into(), ..a6000_hours("5", "alice", 1) }], &prices(), now + 120).unwrap();
    assert_eq!(l.open_grants("alice").unwrap()[0].unused, Tokens::whole(16));
    l.refund_job("4", "root", "lost to a PSU", now + 180).unwrap();
    assert_eq!(l.open_grants("alice").unwrap()[0].unused, Tokens::whole(16), "job 4 never drew from it");
    assert_eq!(balance(&l, "alice"), Tokens::whole(116));
    assert_eq!(l.verify().unwrap().problems, Vec::<String>::new());
}
