//! A MIG slice's GPU time, as sacct records it (`gres/gpu:a100_3g.20gb=1`), charged at its share
//! of its GPU type's price, the history saying which slice.

use std::collections::BTreeMap;

use super::*;
use gputokens::pricing::PriceTable;
use gputokens::slurm::sacct;
use gputokens::tokens::Tokens;
use gputokens::tres::Sharing;

fn a100_at_4() -> PriceTable {
    PriceTable::new(BTreeMap::from([("a100".to_string(), Tokens::whole(4))]), None)
}

/// sacct's row of alice's job 81: an hour on a 3g.20gb slice of an a100.
fn slice_record(gpu_type: &str) -> Vec<UsageRecord> {
    let text = format!(
        "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|End|State\n\
         81|alice|billing=1,cpu=4,gres/gpu:{gpu_type}=1,gres/gpu=1,mem=8G,node=1|3600|2026-11-30T08:00:00|2026-11-30T09:00:00|COMPLETED\n"
    );
    let parsed = sacct::parse(&text, Sharing::default()).unwrap();
    assert_eq!(parsed.records.len(), 1, "{parsed:?}");
    parsed.records
}

#[test]
fn a_slice_pays_its_share_of_its_gpu_and_its_history_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let out = l.charge(&slice_record("a100_3g.20gb"), &a100_at_4(), 1_800_000_000).unwrap();
    // 3/7 of 4 tokens = 1.7142857…: the slice's price rounded up to the micro-token.
    assert_eq!(out.charged, Tokens::from_micro(1_714_286));
    assert!(out.unlisted_types.is_empty(), "priced from the a100's line: {:?}", out.unlisted_types);
    let history = l.history("alice").unwrap();
    let charge = history.last().unwrap();
    assert_eq!(charge.reason, "1 × a100_3g.20gb (3/7 of the a100 price) for 3600s at 1.714286/GPU-hour");
    assert_eq!(charge.balance_after, Tokens::whole(100) - Tokens::from_micro(1_714_286));
}

#[test]
fn a_slices_own_price_wins_and_an_unpriced_gpus_slice_is_unlisted() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let mut prices = BTreeMap::from([("a100".to_string(), Tokens::whole(4))]);
    prices.insert("a100_3g.20gb".to_string(), Tokens::whole(1));
    let out = l.charge(&slice_record("a100_3g.20gb"), &PriceTable::new(prices, None), 1_800_000_000).unwrap();
    assert_eq!(out.charged, Tokens::whole(1));
    assert_eq!(l.history("alice").unwrap().last().unwrap().reason, "1 × a100_3g.20gb for 3600s at 1/GPU-hour");

    let other = tempfile::tempdir().unwrap();
    let mut l = crate::testdb::open(&other.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let out = l.charge(&slice_record("h100_3g.40gb"), &a100_at_4(), 1_800_000_000).unwrap();
    assert_eq!(out.charged, Tokens::whole(4), "no h100 price: the highest listed, as any unknown type");
    assert_eq!(out.unlisted_types, BTreeMap::from([("h100_3g.40gb".to_string(), 3600)]));
}
