//! Against the real one-node Slurm test cluster (tests/cluster/up.sh): jobs submitted by the
//! non-root test users, records read back from slurmdbd through sacct. Ignored unless asked for
//! (`cargo test -- --include-ignored`), as tests/run.sh does after starting the cluster.

use std::path::Path;
use std::time::{Duration, Instant};

use gputokens::pricing::cost;
use gputokens::slurm::sacct::FIELDS;
use gputokens::Tokens;

use crate::common::{run_as, Site};

/// Cluster tests run one at a time: a test's site charges every job sacct shows in its window.
/// Each starts on an empty queue and an undrained node, whatever the test before it left behind
/// (a failed test may leave jobs running, and a site charges every running job it sees).
/// Other test processes on the same cluster (a second checkout, a helper's run) wait on a lock file.
pub fn serial() -> Serial {
    static CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let file = std::fs::File::create(LOCK_FILE).expect(LOCK_FILE);
    let file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).expect("flock");
    for user in ["alice", "bob", "carol"] {
        run_as(None, Path::new("/usr/bin/scancel"), &["-u", user]).ok();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-u", "alice,bob,carol"]).ok().stdout;
        if left.trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "jobs of earlier tests do not go away:\n{left}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let state = run_as(None, Path::new("/usr/bin/sinfo"), &["-h", "-o", "%T"]).ok().stdout;
    if state.starts_with("drain") {
        run_as(None, Path::new("/usr/bin/scontrol"), &["update", "nodename=ALL", "state=resume"]).ok();
    }
    Serial { _file: file, _guard: guard }
}

const LOCK_FILE: &str = "/tmp/gputokens-cluster-tests.lock";

/// Held for the length of a cluster test.
pub struct Serial {
    _file: nix::fcntl::Flock<std::fs::File>,
    _guard: std::sync::MutexGuard<'static, ()>,
}

/// Submits as `user`; returns the job ID.
pub fn sbatch(user: &str, args: &[&str]) -> String {
    let mut all = vec!["--parsable", "--output=/dev/null"];
    all.extend_from_slice(args);
    let out = run_as(Some(user), Path::new("/usr/bin/sbatch"), &all).ok();
    out.stdout.trim().split(';').next().unwrap().to_string()
}

/// Runs sacct as root and returns its stdout.
pub fn sacct(args: &[&str]) -> String {
    run_as(None, Path::new("/usr/bin/sacct"), args).ok().stdout
}

/// Waits until slurmdbd has the job in a final state; returns that state.
pub fn wait_finished(job: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let state = sacct(&["-j", job, "-X", "-n", "-P", "-o", "State"]).trim().to_string();
        // slurmdbd shows a job by ID seconds before a time window (sacct -S, as accountd reads) finds
        // it; accountd's `reread` covers that in later cycles, but a test that ticks once right after
        // needs the job in the window now, so wait for both.
        let in_window =
            || sacct(&["-X", "-a", "-n", "-P", "-S", "now-10minutes", "-o", "JobIDRaw"]).lines().any(|l| l == job);
        if !state.is_empty()
            && !["PENDING", "RUNNING", "REQUEUED", "COMPLETING"].contains(&state.as_str())
            && in_window()
        {
            return state;
        }
        assert!(Instant::now() < deadline, "job {job} still {state:?} after 90 s");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn alice_runs_a_typed_gpu_job_and_sacct_records_it() {
    let _cluster = serial();
    let job = sbatch("alice", &["--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_eq!(wait_finished(&job), "COMPLETED");
    let row = sacct(&["-j", &job, "-X", "-n", "-P", "-o", "User,AllocTRES"]);
    assert!(row.starts_with("alice|"), "{row}");
    assert!(row.contains("gres/gpu:a6000=1"), "{row}");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn real_sacct_records_are_charged_exactly_once() {
    let _cluster = serial();
    let site = Site::start("", "");
    let gpu_job = sbatch("alice", &["--gres=gpu:a6000:2", "--wrap", "sleep 2"]);
    let cpu_job = sbatch("bob", &["--wrap", "sleep 1"]);
    wait_finished(&gpu_job);
    wait_finished(&cpu_job);

    let records = sacct(&["-X", "-D", "-P", "-j", &format!("{gpu_job},{cpu_job}"), "-o", FIELDS]);
    let file = site.file("sacct.txt", &records);
    site.accountd(None, &["charge", "--sacct-file", &file]).ok();

    let elapsed: u64 = sacct(&["-j", &gpu_job, "-X", "-n", "-P", "-o", "ElapsedRaw"]).trim().parse().unwrap();
    assert!(elapsed >= 2, "job ran {elapsed}s");
    let expected = Tokens::whole(100) - cost(Tokens::whole(4), 2 * elapsed);
    assert_eq!(site.balance("alice"), expected.to_string());
    assert_eq!(site.balance("bob"), "100");

    let again = site.accountd(None, &["charge", "--sacct-file", &file]).ok();
    assert!(again.stdout.contains("0 charge entries"), "{}", again.stdout);
    assert_eq!(site.balance("alice"), expected.to_string());
}
