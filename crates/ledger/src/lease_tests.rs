use std::time::Duration;

use gputokens::entry::EntryKind;
use gputokens::policy::BucketRules;
use gputokens::tokens::Tokens;

use crate::db::Dialect;
use crate::{LedgerError, NewEntry};

fn grant(user: &str, key: &str) -> NewEntry {
    NewEntry::new(user, EntryKind::Grant, Tokens::whole(1), 5, "root", "test", key.into())
}

/// An accountd still running on a MariaDB ledger that a newer one upgraded writes nothing more and
/// lets its lease lapse.
#[test]
fn a_ledger_upgraded_by_a_newer_accountd_refuses_the_older_ones_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut old = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    if old.dialect() == Dialect::Sqlite {
        return; // One file on one host, its schema read at each open.
    }
    old.append(&grant("ann", "grant:1")).unwrap();
    let newer = crate::schema::VERSION + 1;
    let held = old.claim_lease("ctl1:1", Duration::from_millis(500)).unwrap();
    assert!(held.held_by("ctl1:1"), "{held:?}");
    old.conn.execute_batch(&format!("UPDATE ledger_schema SET version = {newer} WHERE id = 1")).unwrap();
    // It renews its lease no more: the newer one takes it once it lapses.
    std::thread::sleep(Duration::from_millis(700));
    let lapsed = old.claim_lease("ctl1:1", Duration::from_millis(500)).unwrap();
    assert!(!lapsed.held_by("ctl1:1"), "{lapsed:?}");
    let refused = old.append(&grant("ann", "grant:2"));
    let Err(LedgerError::Db(crate::db::Error::SchemaChanged { found, known })) = refused else { panic!("{refused:?}") };
    assert_eq!((found, known), (Some(newer), crate::schema::VERSION));
    old.conn.execute_batch(&format!("UPDATE ledger_schema SET version = {known} WHERE id = 1")).unwrap();
    assert_eq!(old.account("ann").unwrap().unwrap().balance, Tokens::whole(101), "only the first grant");
}

/// Two accountd on one ledger: one leads at a time, the other takes over once the lease lapses,
/// and the one that lost it writes nothing through its fenced connection.
#[test]
fn one_holder_leads_at_a_time_and_a_lapsed_leader_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let mut a = crate::testdb::open(&path, BucketRules::default()).unwrap();
    if a.dialect() == Dialect::Sqlite {
        // One host: its accountd always leads.
        assert!(a.claim_lease("ctl1:1", Duration::from_secs(10)).unwrap().held_by("ctl1:1"));
        return;
    }
    let mut b = crate::testdb::open(&path, BucketRules::default()).unwrap();
    let first = a.claim_lease("ctl1:1", Duration::from_millis(700)).unwrap();
    assert!(first.held_by("ctl1:1"), "{first:?}");
    let other = b.claim_lease("ctl2:2", Duration::from_millis(700)).unwrap();
    assert!(!other.held_by("ctl2:2") && other.holder == "ctl1:1" && other.term == first.term, "{other:?}");
    assert!(a.claim_lease("ctl1:1", Duration::from_millis(700)).unwrap().held_by("ctl1:1"), "renewed");

    a.fence_with_lease("ctl1:1");
    b.fence_with_lease("ctl2:2");
    a.append(&grant("ann", "grant:1")).unwrap();
    assert!(matches!(b.append(&grant("ann", "grant:2")), Err(LedgerError::Db(crate::db::Error::Fenced(_)))));

    // ctl1 stops renewing (paused, cut off): its lease lapses and ctl2 takes it, a term later.
    std::thread::sleep(Duration::from_millis(900));
    let taken = b.claim_lease("ctl2:2", Duration::from_secs(30)).unwrap();
    assert!(taken.held_by("ctl2:2") && taken.term == first.term + 1, "{taken:?}");
    let late = a.append(&grant("ann", "grant:3")).unwrap_err();
    assert!(late.to_string().contains("ctl1:1 does not hold the ledger's lease"), "{late}");
    assert!(!a.claim_lease("ctl1:1", Duration::from_secs(30)).unwrap().held_by("ctl1:1"), "not back while it runs");
    b.append(&grant("ann", "grant:4")).unwrap();
    let keys: Vec<Option<String>> = a.history("ann").unwrap().into_iter().map(|e| e.key).collect();
    assert_eq!(keys.iter().filter(|k| k.as_deref().is_some_and(|k| k.starts_with("grant:"))).count(), 2, "{keys:?}");

    // A leader that stops gives it up: the other takes it at once.
    b.release_lease("ctl2:2").unwrap();
    assert!(a.claim_lease("ctl1:1", Duration::from_secs(30)).unwrap().held_by("ctl1:1"));
}

/// Two clusters on one ledger: each cluster's accountd leads its own cycles at once, under its
/// own lease; a pair within a cluster still has one leader, and a lease of one cluster lets no one
/// write for the other.
#[test]
fn each_cluster_of_a_shared_ledger_has_a_leader_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let open = |cluster: &str| {
        let mut ledger = crate::testdb::open(&path, BucketRules::default()).unwrap();
        ledger.lead_for_cluster(cluster);
        ledger
    };
    let (mut old, mut new, mut new_backup) = (open("old"), open("new"), open("new"));
    if old.dialect() == Dialect::Sqlite {
        return;
    }
    let ttl = Duration::from_secs(30);
    assert!(old.claim_lease("ctl1:1", ttl).unwrap().held_by("ctl1:1"));
    assert!(new.claim_lease("ctlb:1", ttl).unwrap().held_by("ctlb:1"), "each cluster's lease is its own");
    let backup = new_backup.claim_lease("ctlb2:1", ttl).unwrap();
    assert_eq!((backup.holder.as_str(), backup.held_by("ctlb2:1")), ("ctlb:1", false), "one leader per cluster");
    assert_eq!(open("").lease().unwrap().holder, "", "a ledger of one cluster keeps its lease apart");
    assert!(open("other").lease().unwrap().left_ms < 0, "a cluster never led: no one leads it");

    old.fence_with_lease("ctl1:1");
    new.fence_with_lease("ctlb:1");
    new_backup.fence_with_lease("ctl1:1");
    old.append(&grant("ann", "grant:old")).unwrap();
    new.append(&grant("ann", "grant:new")).unwrap();
    let err = new_backup.append(&grant("ann", "grant:x")).unwrap_err();
    assert!(err.to_string().contains("ctl1:1 does not hold"), "cluster old's leader is not new's: {err}");
    assert_eq!(old.account("ann").unwrap().unwrap().balance, Tokens::whole(102), "one balance, charged by both");
}

/// A connection the server dropped (a restart, a killed session) fails what it was doing, and the
/// next request is answered on a new one.
#[test]
fn a_connection_the_server_dropped_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let mut l = crate::testdb::open(&path, BucketRules::default()).unwrap();
    if l.dialect() == Dialect::Sqlite {
        return;
    }
    l.append(&grant("ann", "grant:1")).unwrap();
    let id: i64 = l.conn.query_row("SELECT CONNECTION_ID()", (), |r| r.get(0)).unwrap();
    let other = crate::testdb::open(&path, BucketRules::default()).unwrap();
    other.conn.execute_batch(&format!("KILL CONNECTION {id}")).unwrap();
    assert!(l.account("ann").is_err(), "the killed session's statement fails");
    assert_eq!(l.account("ann").unwrap().unwrap().balance, Tokens::whole(101));
    l.append(&grant("ann", "grant:2")).unwrap();
    assert_eq!(other.account("ann").unwrap().unwrap().balance, Tokens::whole(102));
}

/// A leader's host lost in the middle of a write: the server never hears from its client again,
/// and would keep that transaction, and the write turn it holds, for hours. It ends it after 5 s
/// of silence, within the turn's wait, so the next leader's first write goes through.
#[test]
fn a_write_transaction_whose_client_fell_silent_does_not_hold_the_write_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let mut lost = crate::testdb::open(&path, BucketRules::default()).unwrap();
    if lost.dialect() == Dialect::Sqlite {
        return;
    }
    let mut next = crate::testdb::open(&path, BucketRules::default()).unwrap();
    lost.append(&grant("ann", "grant:1")).unwrap();
    let silent = lost.conn.transaction().unwrap();
    silent.execute("UPDATE users SET balance = balance + 1000 WHERE name = 'ann'", ()).unwrap();
    // Neither committed nor rolled back: the client is gone.
    std::mem::forget(silent);
    let started = std::time::Instant::now();
    next.append(&grant("ann", "grant:2")).unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(4) && waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(next.account("ann").unwrap().unwrap().balance, Tokens::whole(102), "the silent write was undone");
}
