//! The one-node Slurm test cluster (tests/cluster/up.sh) as the cluster tests use it: one test at a
//! time with users of its own, jobs submitted as them, and waits on what Slurm and accountd say.

use std::path::Path;
use std::time::{Duration, Instant};

use super::common::{run_as, Site};

/// Cluster tests run one at a time: a test's site charges every job sacct shows in its window.
/// Each starts on an empty queue and an undrained node, whatever the test before it left behind
/// (a failed test may leave jobs running, and a site charges every running job it sees), and with
/// users of its own: the next of the sets tests/cluster/up.sh makes (`alice007`, `bob007`, `carol007`),
/// handed out in turn across processes, so consecutive tests never share a user, and no test sees
/// another's jobs, charges or balances.
/// Other test processes on the same cluster (a second checkout, a helper's run) wait on a lock file.
pub fn serial() -> Cluster {
    static CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let file = std::fs::File::create(LOCK_FILE).expect(LOCK_FILE);
    let file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).expect("flock");
    let set = next_user_set();
    let [alice, bob, carol] = set.users;
    for user in set.users {
        assert!(
            nix::unistd::User::from_name(user).ok().flatten().is_some(),
            "no user {user}: tests/cluster/up.sh makes the cluster tests' users (bash tests/run.sh up)"
        );
    }
    // Every job on the cluster, whoever's: the node is every test's.
    // By job ID (%A): an array's pending record's %i (`7_[5-61:2]`) is not one scancel reads.
    let queued = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-o", "%A"]).ok().stdout;
    let jobs: Vec<&str> = queued.split_whitespace().collect();
    if !jobs.is_empty() {
        run_as(None, Path::new("/usr/bin/scancel"), &jobs).ok();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = run_as(None, Path::new("/usr/bin/squeue"), &["-h"]).ok().stdout;
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
    Cluster { alice, bob, carol, set: set.number, _file: file, _guard: guard }
}

const LOCK_FILE: &str = "/tmp/gputokens-cluster-tests.lock";
/// The number of the set of users the next cluster test takes (1 to `USER_SETS`), beside the lock
/// and read and advanced only while it is held.
const NEXT_SET_FILE: &str = "/tmp/gputokens-cluster-tests.next";
/// How many sets of users tests/cluster/up.sh makes (`TEST_USER_SETS` in tests/cluster/lib.sh).
pub const USER_SETS: usize = 120;

/// One set of the cluster tests' users: `alice007`, `bob007`, `carol007` and its number, `007`.
struct UserSet {
    users: [&'static str; 3],
    number: &'static str,
}

/// The set the file names (the first when there is none, or none readable), the file advanced to
/// the one after it. Call with the lock held.
fn next_user_set() -> UserSet {
    static NAMES: std::sync::OnceLock<Vec<[String; 4]>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (1..=USER_SETS)
            .map(|n| {
                let n = format!("{n:03}");
                [format!("alice{n}"), format!("bob{n}"), format!("carol{n}"), n]
            })
            .collect()
    });
    let text = std::fs::read_to_string(NEXT_SET_FILE).unwrap_or_default();
    let next = text.trim().parse::<usize>().ok().filter(|n| (1..=USER_SETS).contains(n)).unwrap_or(1);
    std::fs::write(NEXT_SET_FILE, format!("{}\n", next % USER_SETS + 1)).expect(NEXT_SET_FILE);
    let [alice, bob, carol, number] = &names[next - 1];
    UserSet { users: [alice, bob, carol], number }
}

/// Held for the length of a cluster test: the cluster to itself, and the test's own users.
pub struct Cluster {
    /// The test's users, named for the ones they stand in for (`alice007`, `bob007`, `carol007`): Unix
    /// users in Slurm account `gputokens`, with everything alice has there.
    pub alice: &'static str,
    pub bob: &'static str,
    pub carol: &'static str,
    /// The set's number (`07`), for other names of the test's own (the Slurm accounts it makes).
    pub set: &'static str,
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

/// Polls `check` every 0.25 s until it gives `Ok`; after `secs`, panics naming `what` and what the
/// check saw the last time (its `Err`).
pub fn wait_until<T>(secs: u64, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match check() {
            Ok(value) => return value,
            Err(seen) => assert!(Instant::now() < deadline, "waited {secs} s for {what}; last saw: {seen}"),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A Slurm command run as root with its times as unix seconds (`SLURM_TIME_FORMAT=%s`): its stdout.
pub fn slurm_in_unix_time(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(Path::new("/usr/bin").join(program))
        .args(args)
        .env("SLURM_TIME_FORMAT", "%s")
        .env_remove("GPUTOKENS_CONF")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// squeue's state of `job` and the time it has run (`%M`, suspensions left out) in seconds:
/// `("", None)` once it left the queue.
pub fn state_and_time_used(job: &str) -> (String, Option<u64>) {
    let out = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-j", job, "-o", "%T|%M"]).ok().stdout;
    let (state, used) = out.trim().split_once('|').unwrap_or(("", ""));
    (state.to_string(), time_used_secs(used))
}

/// `[D-][H:]M:SS`, as squeue prints a time used, in seconds.
pub fn time_used_secs(text: &str) -> Option<u64> {
    let (days, clock) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let mut secs = 0;
    for part in clock.split(':') {
        secs = secs * 60 + part.parse::<u64>().ok()?;
    }
    Some(days * 86_400 + secs)
}

/// Waits until `job` runs and slurmctld counts at least `secs` seconds of it (squeue's time used,
/// from which a charge cycle charges a running job): a cycle after this charges at least that much.
pub fn wait_ran(job: &str, secs: u64) {
    wait_until(60 + secs, &format!("job {job} to have run {secs} s"), || match state_and_time_used(job) {
        (state, Some(used)) if state == "RUNNING" && used >= secs => Ok(()),
        (state, used) => Err(format!("state {state:?}, time used {used:?} s")),
    });
}

/// How many charge cycles `site`'s serve has ended (its log's "charge cycle (" lines).
pub fn charge_cycles(site: &Site) -> usize {
    site.log().matches("charge cycle (").count()
}

/// Waits until `site`'s serve has run `cycles` whole charge cycles after `ended` had ended (one
/// more: the cycle under way when `ended` was counted may have begun before).
pub fn wait_charge_cycles(site: &Site, ended: usize, cycles: usize) {
    let want = ended + cycles + 1;
    wait_until(60, &format!("{cycles} more whole charge cycles of accountd serve"), || {
        let now = charge_cycles(site);
        if now >= want {
            return Ok(());
        }
        Err(format!("{now} cycles ended of the {want} wanted; the log's end:\n{}", log_tail(&site.log(), 5)))
    });
}

/// The last `n` lines of `log`.
pub fn log_tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
