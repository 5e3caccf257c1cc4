//! Submission latency while accountd rewrites a big snapshot under the plugin (`BENCH_USERS`,
//! 100,000 users): the watcher thread parses each version and swaps it in, so a submission should
//! never wait for a parse. `bash bench/scale.sh` runs it (results in bench/README.md):
//!
//!     BENCH_USERS=100000 cargo bench -p job-submit-gputokens --bench reload
//!
//! Submissions of a GPU job back to back through the exported `job_submit` (Slurm's functions are
//! stand-ins) for 3 s with the snapshot quiet, then for 10 s while another thread rewrites it (two
//! versions in turn, atomically as accountd does) every 0.5 s; prints p50, p99, max and the
//! snapshot loads of each phase.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{percentile, snapshot, snapshot_loads, Site};
use job_submit_gputokens::bench::Job;

fn main() {
    let count: usize = std::env::var("BENCH_USERS").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let version = |shift: i64| {
        let mut users: Vec<(String, i64)> = (0..count).map(|i| (format!("user{i}"), i as i64 * 1000 + shift)).collect();
        users.push(("root".into(), 5_000_000 + shift));
        let users: Vec<(&str, i64)> = users.iter().map(|(u, b)| (u.as_str(), *b)).collect();
        snapshot(&users)
    };
    let versions = [version(0), version(1)];
    let site = Site::start(&versions[0]);
    let job = Job::new(0, "gres:gpu:a6000:1", None);
    let phase = |label: &str, until: Instant| {
        let loaded_before = snapshot_loads();
        let mut times = Vec::new();
        while Instant::now() < until {
            let started = Instant::now();
            assert_eq!(job.submit().code, 0);
            times.push(started.elapsed());
        }
        let (p50, p99, max) = (percentile(&mut times, 50), percentile(&mut times, 99), percentile(&mut times, 100));
        println!(
            "job_submit {label}: {} submissions, p50 {p50:?}, p99 {p99:?}, max {max:?}, {} snapshot loads",
            times.len(),
            snapshot_loads() - loaded_before
        );
    };
    phase("quiet", Instant::now() + Duration::from_secs(3));
    let rewriting = AtomicBool::new(true);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for n in 0.. {
                if !rewriting.load(Ordering::Relaxed) {
                    break;
                }
                gputokens::snapshot::write_atomically(&site.snapshot, &versions[n % 2]).unwrap();
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        phase("during reloads", Instant::now() + Duration::from_secs(10));
        rewriting.store(false, Ordering::Relaxed);
    });
}
