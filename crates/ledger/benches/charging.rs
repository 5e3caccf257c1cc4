//! The design's charging target: 1M finished job records into the ledger at ≥ 0.5× the rate of a
//! raw SQLite bulk INSERT of the same rows (one transaction, one prepared statement, the ledger's
//! WAL + synchronous=NORMAL settings).
//!
//!     cargo bench --bench charging                       # 1,000,000 records, 3 rounds
//!     BENCH_RECORDS=100000 BENCH_ROUNDS=5 cargo bench --bench charging
//!     BENCH_MARIADB='mysql://root@localhost/?socket=/run/mysqld/mysqld.sock' cargo bench --bench charging
//!
//! With BENCH_MARIADB (a server's URL naming no database), the same rounds run on that MariaDB too:
//! the ledger there against a raw batched INSERT into the same server (one transaction, 1,000 rows
//! a statement), each in a database of its own (`gputokens_bench_*`, dropped after).
//!
//! The records are sacct `--parsable2` rows (what `accountd` reads), 2,000 users, three GPU types,
//! parsed with `gputokens::slurm::sacct` and charged with `Ledger::charge` in one call, as a charge
//! cycle does. Parsing is timed apart from charging; the ratio compares charging with the raw INSERT,
//! round by round (they alternate), and the median round decides. Each phase's time on the CPU
//! (the thread's, from /proc/thread-self/schedstat) is shown too, and the median ratio by it: on a
//! machine shared with other work the wall time also counts the time spent waiting for a CPU.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use gputokens::policy::BucketRules;
use gputokens::pricing::PriceTable;
use gputokens::slurm::sacct;
use gputokens::tres::Sharing;
use gputokens::Tokens;
use ledger::Ledger;

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

/// This thread's time on a CPU so far (zero where the kernel does not say).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(stat.split_whitespace().next().and_then(|ns| ns.parse().ok()).unwrap_or(0))
}

/// Wall and CPU time of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration) {
    let (started, cpu) = (Instant::now(), cpu_time());
    let value = f();
    (value, started.elapsed(), cpu_time() - cpu)
}

/// The same rows, raw: one table, one transaction, one prepared statement.
#[inline(never)]
fn raw_insert(path: &std::path::Path, text: &str) -> (Duration, Duration) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    conn.execute_batch(
        "CREATE TABLE rows (job_id TEXT, user TEXT, alloc_tres TEXT, elapsed INTEGER, start TEXT, state TEXT)",
    )
    .unwrap();
    let mut conn = conn;
    let ((), wall, cpu) = timed(|| {
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx.prepare("INSERT INTO rows VALUES (?1, ?2, ?3, ?4, ?5, ?6)").unwrap();
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split('|').collect();
                insert.execute(rusqlite::params![f[0], f[1], f[2], f[3].parse::<i64>().unwrap(), f[4], f[5]]).unwrap();
            }
        }
        tx.commit().unwrap();
    });
    (wall, cpu)
}

/// The charge cycle's energy pass (`[prices] per_kwh`) over what node agents reported since the last
/// one: a kWh for each of up to 20,000 charged jobs, on 100 nodes; then the same, unpriced.
fn energy_pass(ledger: &mut Ledger, records: &[ledger::UsageRecord], now: i64) {
    let jobs = &records[..records.len().min(20_000)];
    let report = |ledger: &mut Ledger| {
        for (i, r) in jobs.iter().enumerate() {
            ledger.record_energy(&r.job_id, r.segment_start + 30, &format!("gpu{}", i % 100), now, 3_600_000).unwrap();
        }
    };
    report(ledger);
    let (priced, wall, cpu) = timed(|| ledger.charge_energy(Some(Tokens::from_micro(500_000)), now).unwrap());
    assert_eq!(priced.entries, jobs.len(), "one energy charge per job");
    println!(
        "energy pass, priced: {} rows in {:.3} s ({:.0} rows/s, {:.3} s on the CPU)",
        jobs.len(),
        wall.as_secs_f64(),
        jobs.len() as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64()
    );
    report(ledger);
    let (unpriced, wall, cpu) = timed(|| ledger.charge_energy(None, now).unwrap());
    assert_eq!(unpriced.passed_over, jobs.len() as u64 * 3_600_000);
    println!(
        "energy pass, unpriced: {} rows passed over in {:.3} s ({:.3} s on the CPU)",
        jobs.len(),
        wall.as_secs_f64(),
        cpu.as_secs_f64()
    );
}

/// A fresh database `name` on the server `server` names; its URL.
fn maria_database(server: &str, name: &str) -> String {
    let mut admin = mysql::Conn::new(mysql::Opts::from_url(server).unwrap()).unwrap();
    use mysql::prelude::Queryable;
    admin.query_drop(format!("DROP DATABASE IF EXISTS {name}")).unwrap();
    admin.query_drop(format!("CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")).unwrap();
    server.replacen("/?", &format!("/{name}?"), 1)
}

fn drop_maria_database(server: &str, name: &str) {
    use mysql::prelude::Queryable;
    let mut admin = mysql::Conn::new(mysql::Opts::from_url(server).unwrap()).unwrap();
    admin.query_drop(format!("DROP DATABASE IF EXISTS {name}")).unwrap();
}

/// The same rows, raw, into MariaDB: one table, one transaction, 1,000 rows a statement.
#[inline(never)]
fn raw_insert_maria(url: &str, text: &str) -> (Duration, Duration) {
    use mysql::prelude::Queryable;
    let mut conn = mysql::Conn::new(mysql::Opts::from_url(url).unwrap()).unwrap();
    conn.query_drop(
        "CREATE TABLE rows_ (job_id VARCHAR(32), user VARCHAR(64), alloc_tres VARCHAR(255), elapsed BIGINT, start VARCHAR(32), state VARCHAR(32))",
    )
    .unwrap();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    let ((), wall, cpu) = timed(|| {
        let mut tx = conn.start_transaction(mysql::TxOpts::default()).unwrap();
        for chunk in lines.chunks(1000) {
            let rows = vec!["(?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
            let mut values: Vec<mysql::Value> = Vec::with_capacity(chunk.len() * 6);
            for line in chunk {
                let f: Vec<&str> = line.split('|').collect();
                values.extend([
                    f[0].into(),
                    f[1].into(),
                    f[2].into(),
                    f[3].parse::<i64>().unwrap().into(),
                    f[4].into(),
                    f[5].into(),
                ]);
            }
            tx.exec_drop(format!("INSERT INTO rows_ VALUES {rows}"), values).unwrap();
        }
        tx.commit().unwrap();
    });
    (wall, cpu)
}

/// The rounds on MariaDB: raw batched INSERT and the ledger's charge, alternating.
fn maria_rounds(server: &str, text: &str, parsed: &[ledger::UsageRecord], rounds: usize, now: i64) {
    let records = parsed.len();
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let raw_db = format!("gputokens_bench_raw{round}");
        let (raw, raw_cpu) = raw_insert_maria(&maria_database(server, &raw_db), text);
        drop_maria_database(server, &raw_db);
        let ledger_db = format!("gputokens_bench_ledger{round}");
        let target = ledger::db::MariaTarget::new(&maria_database(server, &ledger_db), None).unwrap();
        let mut ledger = Ledger::open_mariadb(&target, BucketRules::default()).unwrap();
        let (outcome, charge, charge_cpu) = timed(|| ledger.charge(parsed, &prices(), now).unwrap());
        assert_eq!(outcome.entries, records, "one charge entry per record");
        let label = format!("MariaDB round {round}: raw batched INSERT");
        ratios.push(report_round(&label, records, (raw, raw_cpu), (charge, charge_cpu)));
        drop(ledger);
        drop_maria_database(server, &ledger_db);
    }
    print_median("MariaDB: charge / raw batched INSERT rate", ratios);
}

/// Prints a round's raw and charge times; returns the charge rate over the raw rate.
fn report_round(label: &str, records: usize, raw: (Duration, Duration), charge: (Duration, Duration)) -> f64 {
    let rate = |d: Duration| records as f64 / d.as_secs_f64();
    let ratio = rate(charge.0) / rate(raw.0);
    println!(
        "{label} {:.2} s ({:.0} rows/s, {:.2} s on the CPU), ledger charge {:.2} s ({:.0} records/s, {:.2} s on the CPU): {ratio:.2}",
        raw.0.as_secs_f64(),
        rate(raw.0),
        raw.1.as_secs_f64(),
        charge.0.as_secs_f64(),
        rate(charge.0),
        charge.1.as_secs_f64(),
    );
    ratio
}

/// Prints the median of the rounds' ratios against the 0.5 target.
fn print_median(what: &str, mut ratios: Vec<f64>) {
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    let verdict = if median >= 0.5 { "met" } else { "missed" };
    println!("{what}, median of {} rounds: {median:.2} (target >= 0.5): {verdict}", ratios.len());
}

fn main() {
    let records: usize = std::env::var("BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let text = sacct_text(records);

    let started = Instant::now();
    let parsed = sacct::parse(&text, Sharing::default()).unwrap();
    let parse = started.elapsed();
    assert_eq!(parsed.records.len(), records);
    let rate = |d: Duration| records as f64 / d.as_secs_f64();
    println!(
        "records: {records} (2000 users, 3 GPU types); sacct parse {:.2} s, {:.0} rows/s",
        parse.as_secs_f64(),
        rate(parse)
    );

    // Raw and ledger runs alternate, each into a fresh file, so a slow spell of the machine hits both.
    let now = gputokens::time::parse_timestamp("2026-12-01T00:00:00").unwrap();
    let (mut ratios, mut cpu_ratios) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let (raw, raw_cpu) = raw_insert(&dir.path().join(format!("raw{round}.sqlite")), &text);
        let path = dir.path().join(format!("ledger{round}.sqlite"));
        let mut ledger = Ledger::open(&path, BucketRules::default()).unwrap();
        let (outcome, charge, charge_cpu) = timed(|| ledger.charge(&parsed.records, &prices(), now).unwrap());
        assert_eq!(outcome.entries, records, "one charge entry per record");
        ratios.push(report_round(&format!("round {round}: raw INSERT"), records, (raw, raw_cpu), (charge, charge_cpu)));
        cpu_ratios.push(raw_cpu.as_secs_f64() / charge_cpu.as_secs_f64());
        if round == rounds {
            let (replay, wall, cpu) = timed(|| ledger.charge(&parsed.records, &prices(), now).unwrap());
            println!(
                "replaying the same records: {} entries in {:.2} s ({:.2} s on the CPU)",
                replay.entries,
                wall.as_secs_f64(),
                cpu.as_secs_f64()
            );
            energy_pass(&mut ledger, &parsed.records, now);
        }
        drop(ledger);
        let _ = std::fs::remove_file(dir.path().join(format!("raw{round}.sqlite")));
        let _ = std::fs::remove_file(&path);
    }
    cpu_ratios.sort_by(f64::total_cmp);
    println!("by time on the CPU, median of {rounds} rounds: {:.2}", cpu_ratios[cpu_ratios.len() / 2]);
    print_median("charge / raw INSERT rate", ratios);
    if let Ok(server) = std::env::var("BENCH_MARIADB") {
        maria_rounds(&server, &text, &parsed.records, rounds, now);
    }
}
