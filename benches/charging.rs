//! The design's charging target: 1M finished job records into the ledger at ≥ 0.5× the rate of a
//! raw SQLite bulk INSERT of the same rows (one transaction, one prepared statement, the ledger's
//! WAL + synchronous=NORMAL settings).
//!
//!     cargo bench --bench charging                       # 1,000,000 records
//!     BENCH_RECORDS=100000 cargo bench --bench charging
//!
//! The records are sacct `--parsable2` rows (what `accountd` reads), 2,000 users, three GPU types,
//! parsed with `gputokens::slurm::sacct` and charged with `Ledger::charge` in one call, as a charge
//! cycle does. Parsing is timed apart from charging; the ratio compares charging with the raw INSERT.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use gputokens::ledger::Ledger;
use gputokens::policy::BucketRules;
use gputokens::pricing::PriceTable;
use gputokens::slurm::sacct;
use gputokens::tres::Sharing;
use gputokens::Tokens;

const TYPES: [&str; 3] = ["rtx2080", "rtx3090", "a6000"];

fn sacct_text(records: usize) -> String {
    let mut text = String::with_capacity(records * 100);
    text.push_str("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n");
    for i in 0..records {
        let gpu = TYPES[i % 3];
        let n = 1 + i % 4;
        let _ = writeln!(
            text,
            "{}|user{}|billing={n},cpu={n},gres/gpu:{gpu}={n},gres/gpu={n},node=1|{}|2026-11-30T08:00:00|COMPLETED",
            100_000 + i,
            i % 2000,
            60 + (i * 7919) % 86_400,
        );
    }
    text
}

fn prices() -> PriceTable {
    let p = BTreeMap::from([
        ("rtx2080".to_string(), Tokens::from_micro(500_000)),
        ("rtx3090".to_string(), Tokens::whole(1)),
        ("a6000".to_string(), Tokens::whole(4)),
    ]);
    PriceTable::new(p, None)
}

/// The same rows, raw: one table, one transaction, one prepared statement.
fn raw_insert(path: &std::path::Path, text: &str) -> Duration {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    conn.execute_batch(
        "CREATE TABLE rows (job_id TEXT, user TEXT, alloc_tres TEXT, elapsed INTEGER, start TEXT, state TEXT)",
    )
    .unwrap();
    let started = Instant::now();
    let mut conn = conn;
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx.prepare("INSERT INTO rows VALUES (?1, ?2, ?3, ?4, ?5, ?6)").unwrap();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split('|').collect();
            insert.execute(rusqlite::params![f[0], f[1], f[2], f[3].parse::<i64>().unwrap(), f[4], f[5]]).unwrap();
        }
    }
    tx.commit().unwrap();
    started.elapsed()
}

fn main() {
    let records: usize = std::env::var("BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let text = sacct_text(records);

    let raw = raw_insert(&dir.path().join("raw.sqlite"), &text);

    let started = Instant::now();
    let parsed = sacct::parse(&text, Sharing::default()).unwrap();
    let parse = started.elapsed();
    assert_eq!(parsed.records.len(), records);

    let mut ledger = Ledger::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
    let now = gputokens::time::parse_timestamp("2026-12-01T00:00:00").unwrap();
    let started = Instant::now();
    let outcome = ledger.charge(&parsed.records, &prices(), now).unwrap();
    let charge = started.elapsed();
    assert_eq!(outcome.entries, records, "one charge entry per record");

    let rate = |d: Duration| records as f64 / d.as_secs_f64();
    println!("records: {records} (2000 users, 3 GPU types)");
    println!("raw SQLite INSERT:  {:>8.2} s  {:>10.0} rows/s", raw.as_secs_f64(), rate(raw));
    println!("sacct parse:        {:>8.2} s  {:>10.0} rows/s", parse.as_secs_f64(), rate(parse));
    println!("ledger charge:      {:>8.2} s  {:>10.0} rows/s", charge.as_secs_f64(), rate(charge));
    let ratio = rate(charge) / rate(raw);
    let verdict = if ratio >= 0.5 { "met" } else { "missed" };
    println!("charge / raw INSERT rate: {ratio:.2} (target >= 0.5): {verdict}");
    let again = Instant::now();
    let replay = ledger.charge(&parsed.records, &prices(), now).unwrap();
    println!("replaying the same records: {} entries in {:.2} s", replay.entries, again.elapsed().as_secs_f64());
}
