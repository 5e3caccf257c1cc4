//! Idle GPUs in statements: a job's charges times the share of its utilization samples that were
//! idle, on its GPU type's line; jobs never sampled, or busy, add nothing.

use std::collections::BTreeMap;

use super::*;
use gputokens::pricing::PriceTable;
use gputokens::statement::{idle_by_type, Month};
use gputokens::time::{local_date, parse_timestamp};
use gputokens::tokens::Tokens;

fn at(text: &str) -> i64 {
    parse_timestamp(text).unwrap()
}

fn run(job: &str, gpu_type: &str, hours: u64) -> UsageRecord {
    UsageRecord {
        job_id: job.into(),
        user: "alice".into(),
        account: None,
        segment_start: at("2026-11-26T06:00:00"),
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

#[test]
fn the_idle_share_of_each_jobs_charge_goes_to_its_gpu_types_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = at("2026-11-26T12:00:00");
    // Job 1: 4 samples, 3 of them idle; job 2: busy; job 3: never sampled (no agent on its node).
    for (percent, idle) in [(0.0, 0), (0.0, 2), (1.0, 1), (60.0, 0)] {
        l.record_utilization("1", 0, percent, idle, now).unwrap();
    }
    l.record_utilization("2", 0, 90.0, 0, now).unwrap();
    // More idle samples than samples (a replayed report) never make more than all of it idle.
    l.record_utilization("4", 0, 0.0, 5, now).unwrap();
    let prices = PriceTable::new(
        BTreeMap::from([("a6000".to_string(), Tokens::whole(4)), ("rtx3090".to_string(), Tokens::whole(1))]),
        None,
    );
    let runs = [run("1", "a6000", 2), run("2", "a6000", 1), run("3", "a6000", 1), run("4", "rtx3090", 3)];
    l.charge(&runs, &prices, now).unwrap();
    assert_eq!(l.idle_share("1").unwrap(), Some((3, 4)));
    assert_eq!(l.idle_share("4").unwrap(), Some((1, 1)));
    assert_eq!(l.idle_share("3").unwrap(), None);

    let month = Month::of(local_date(now));
    let statement = l.statement("alice", month, Issue { at: now, partial: true }).unwrap();
    let (total, per_type) = idle_by_type(&statement);
    // 3/4 of job 1's 8 tokens, all of job 4's 3.
    assert_eq!(per_type, [("a6000", Tokens::whole(6)), ("rtx3090", Tokens::whole(3))]);
    assert_eq!(total, Tokens::whole(9));
    let all = l.statements(month, Issue { at: now, partial: true }).unwrap();
    assert_eq!(idle_by_type(&all[0]).0, Tokens::whole(9), "the admins' statements say the same");
}
