//! The job_submit plugin's in-process decision time, through the exported `job_submit` of the library
//! as it ships (Slurm's functions are stand-ins; no slurmctld). `bash bench/decision.sh` runs it
//! (results in bench/README.md); the design's budget is 10 µs per decision.
//!
//!     cargo bench -p job-submit-gputokens --bench decision              # both parts
//!     cargo bench -p job-submit-gputokens --bench decision -- plain     # 2,000 users, no pools
//!     cargo bench -p job-submit-gputokens --bench decision -- pools     # BENCH_USERS in BENCH_ACCOUNTS pools
//!
//! plain: 2,000 submissions of a GPU job by root with 2,000 users in the snapshot; each timed with
//! making its job description and freeing what the plugin allocated.
//!
//! pools (`[accounts] mode = "account"`): `BENCH_USERS` (100,000) users each in two of
//! `BENCH_ACCOUNTS` (10,000) pools, with what each member spent, and root in five pools (one at its
//! floor) with a default account. 5,000 submissions each under `-A` (a pool with tokens), without
//! `-A` (the default account's pool) and under the pool at its floor (refused with the full message:
//! recovery, coordinators, the user's other accounts); each the `job_submit` call alone.

mod common;

use common::{percentile, snapshot, Site};
use job_submit_gputokens::bench::Job;

/// Slurm's success, and its ESLURM_ACCOUNTING_POLICY: a refused job.
const SUCCESS: i32 = 0;
const REFUSED: i32 = 2050;

fn plain() {
    let mut users: Vec<(String, i64)> = (0..2000).map(|i| (format!("user{i}"), i * 1000)).collect();
    users.push(("root".into(), 5_000_000));
    let users: Vec<(&str, i64)> = users.iter().map(|(u, b)| (u.as_str(), *b)).collect();
    let _site = Site::start(&snapshot(&users));
    let job = Job::new(0, "gres:gpu:a6000:1", None);
    let mut times: Vec<std::time::Duration> = (0..2000)
        .map(|_| {
            let started = std::time::Instant::now();
            assert_eq!(job.submit().code, SUCCESS);
            started.elapsed()
        })
        .collect();
    times.sort_unstable();
    let median = times[times.len() / 2];
    println!("job_submit median {median:?} (p99 {:?})", times[times.len() * 99 / 100]);
}

fn pools() {
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default);
    let (users, accounts) = (env("BENCH_USERS", 100_000), env("BENCH_ACCOUNTS", 10_000));
    let mut list: Vec<(String, i64)> = (0..users).map(|i| (format!("u{i:06}"), i as i64 * 1000)).collect();
    list.push(("root".into(), 5_000_000));
    let list: Vec<(&str, i64)> = list.iter().map(|(u, b)| (u.as_str(), *b)).collect();
    let mut text = snapshot(&list);
    text.push_str("account root a00001\npool_mode account\n");
    for a in 0..accounts {
        let balance = if a == 3 { -10_000_000 } else { 50_000_000 + a as i64 };
        text.push_str(&format!("pool a{a:05} {balance} -10000000 0 30000000 20000000\ncoordinators a{a:05} pi{a}\n"));
    }
    text.push_str(&format!("spent_month {}\n", chrono::Local::now().format("%Y-%m")));
    for i in 0..users {
        let (first, second) = (i % accounts, (i + 1) % accounts);
        text.push_str(&format!("spent a{first:05} u{i:06} 1000000\nmember u{i:06} a{first:05},a{second:05}\n"));
    }
    text.push_str("member root a00001,a00002,a00003,a00004,a00005\nspent a00002 root 1000000\n");
    let _site = Site::start(&text);
    let time = |label: &str, account: Option<&str>, expect: i32| {
        let job = Job::new(0, "gres:gpu:a6000:1", account);
        let mut times: Vec<std::time::Duration> = (0..5000)
            .map(|_| {
                let submitted = job.submit();
                assert_eq!(submitted.code, expect, "{label}");
                submitted.took
            })
            .collect();
        let median = percentile(&mut times, 50);
        println!("job_submit with pools, {label}: median {median:?} (p99 {:?})", percentile(&mut times, 99));
    };
    println!("pools: {users} users, {accounts} accounts in the snapshot ({} bytes)", text.len());
    time("-A a00002", Some("a00002"), SUCCESS);
    time("no -A (default a00001)", None, SUCCESS);
    time("refused at a00003's floor", Some("a00003"), REFUSED);
}

fn main() {
    // `cargo bench` passes `--bench`; a word after `--` picks a part.
    let parts: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    if wanted("plain") {
        plain();
    }
    if wanted("pools") {
        pools();
    }
}
