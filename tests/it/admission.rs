//! The job_submit plugin inside the real slurmctld of the test cluster: jobs submitted with sbatch by
//! the non-root users alice and bob, balances from a snapshot written by a real `accountd serve`.
//!
//! tests/run.sh starts the cluster with the plugin (JOBSUBMIT_PLUGIN_SO) and writes
//! /etc/slurm/gputokens.toml, whose `[paths] snapshot` these tests control. Each test holds
//! `serial()` and leaves an empty snapshot behind (everyone at `initial`: every job passes), so
//! the other cluster tests are not disturbed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gputokens::policy::BucketRules;
use gputokens::Tokens;

use crate::cluster::serial;
use crate::common::{run_as, Outcome, Site};

const PLUGIN_CONF: &str = "/etc/slurm/gputokens.toml";
/// The plugin looks at the snapshot every 200 ms; this leaves it time to read a new one.
const SETTLE: Duration = Duration::from_millis(600);

fn lab() -> PathBuf {
    PathBuf::from(std::env::var("GPUTOKENS_LAB").unwrap_or_else(|_| "/tmp/gputokens-cluster".into()))
}

fn slurmctld_log() -> String {
    std::fs::read_to_string(lab().join("log/slurmctld.log")).unwrap_or_default()
}

fn slurmctld_pid() -> String {
    std::fs::read_to_string(lab().join("run/slurmctld.pid")).unwrap_or_default().trim().to_string()
}

fn slurmctld_alive(pid: &str) -> bool {
    let up = run_as(None, Path::new("/usr/bin/scontrol"), &["ping"]);
    Path::new(&format!("/proc/{pid}")).exists() && up.stdout.contains("is UP")
}

/// sbatch as `user`, not asserting success: (exit code, job ID or "", stderr).
fn sbatch(user: &str, args: &[&str]) -> Outcome {
    let mut all = vec!["--parsable", "--output=/dev/null"];
    all.extend_from_slice(args);
    run_as(Some(user), Path::new("/usr/bin/sbatch"), &all)
}

fn job_id(out: &Outcome) -> String {
    out.stdout.trim().split(';').next().unwrap_or_default().to_string()
}

/// The cluster's snapshot, for one test: restores an empty one and cancels the test's jobs on drop.
struct Admission {
    snapshot: PathBuf,
    jobs: Vec<String>,
    log_from: usize,
}

impl Admission {
    fn start() -> Admission {
        let config = std::fs::read_to_string(PLUGIN_CONF)
            .unwrap_or_else(|e| panic!("{PLUGIN_CONF}: {e}: start the cluster with tests/run.sh"));
        let table: toml::Table = toml::from_str(&config).expect("plugin config");
        let snapshot = table["paths"]["snapshot"].as_str().expect("[paths] snapshot").into();
        let shown = run_as(None, Path::new("/usr/bin/scontrol"), &["show", "config"]).ok().stdout;
        assert!(
            shown.lines().any(|l| l.starts_with("JobSubmitPlugins") && l.contains("gputokens")),
            "slurmctld runs without the gputokens job_submit plugin: start the cluster with tests/run.sh \
             (JOBSUBMIT_PLUGIN_SO=target/debug/libjob_submit_gputokens.so bash tests/cluster/up.sh)"
        );
        Admission { snapshot, jobs: Vec::new(), log_from: slurmctld_log().len() }
    }

    /// Points the plugin's snapshot at the one `site`'s accountd writes.
    fn follow(&self, site: &Site) {
        let written = site.path("lib/balances.snapshot");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !written.exists() {
            assert!(Instant::now() < deadline, "accountd wrote no snapshot: {}", site.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        let link = self.snapshot.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&written, &link).unwrap();
        std::fs::rename(&link, &self.snapshot).unwrap();
    }

    fn write(&self, text: &str) {
        gputokens::snapshot::write_atomically(&self.snapshot, text).unwrap();
    }

    /// sbatch that must succeed; the job is cancelled at the end of the test.
    fn accepted(&mut self, user: &str, args: &[&str]) -> (String, String) {
        let out = sbatch(user, args);
        assert_eq!(out.code, 0, "{user} {args:?} refused: {}", out.stderr);
        let id = job_id(&out);
        self.jobs.push(id.clone());
        (id, out.stderr)
    }

    /// What slurmctld logged since the test began.
    fn log(&self) -> String {
        slurmctld_log().get(self.log_from..).unwrap_or_default().to_string()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if !self.jobs.is_empty() {
            let mut args = vec!["--quiet"];
            args.extend(self.jobs.iter().map(String::as_str));
            run_as(None, Path::new("/usr/bin/scancel"), &args);
        }
        let rules = BucketRules {
            initial: Tokens::whole(100),
            daily: Tokens::whole(1),
            monthly: Tokens::ZERO,
            cap: None,
            floor: Tokens::whole(-10),
        };
        let empty = gputokens::snapshot::render(&gputokens::snapshot::Snapshot::new(gputokens::time::now(), rules));
        let _ = gputokens::snapshot::write_atomically(&self.snapshot, &empty);
        std::thread::sleep(SETTLE);
    }
}

/// The plugin exports exactly what slurmctld looks up, and needs from slurmctld only what
/// libslurmfull exports (it is linked with BIND_NOW: a missing symbol would fail the load).
#[test]
fn the_plugin_exports_only_its_symbols() {
    let so = crate::common::bin("libjob_submit_gputokens.so");
    let nm = |args: &[&str], file: &Path| {
        let out = std::process::Command::new("nm").args(args).arg(file).output().expect("nm (binutils)");
        assert!(out.status.success(), "nm {args:?} {}", file.display());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut exported: Vec<String> = nm(&["-D", "--defined-only"], &so)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    exported.sort();
    assert_eq!(exported, ["fini", "init", "job_modify", "job_submit", "plugin_name", "plugin_type", "plugin_version"]);

    // Undefined symbols without a version come from the loading process, not from libc/libgcc.
    let from_slurm: Vec<String> = nm(&["-D", "--undefined-only"], &so)
        .lines()
        .filter(|l| l.trim_start().starts_with("U ") && !l.contains('@'))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert!(!from_slurm.is_empty());
    let libslurm = Path::new("/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so");
    let provided = if libslurm.exists() { nm(&["-D", "--defined-only"], libslurm) } else { String::new() };
    for symbol in &from_slurm {
        assert!(symbol.starts_with("slurm_"), "{symbol} is not a Slurm symbol");
        if libslurm.exists() {
            assert!(provided.lines().any(|l| l.ends_with(&format!(" T {symbol}"))), "libslurmfull lacks {symbol}");
        }
    }
}

const REFUSED: &str = "sbatch: error: gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused \
                       until it is above the floor again (+1 token per day and +30 tokens on the 1st of each month: \
                       about ";

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn at_the_floor_gpu_jobs_are_refused_and_cpu_jobs_pass() {
    let _cluster = serial();
    // The site outlives `adm`, which restores the cluster's snapshot when dropped.
    let site = Site::start("", "");
    let mut adm = Admission::start();
    site.accountd(None, &["admin", "adjust", "alice", "-110.4", "--reason", "test: at the floor"]).ok();
    adm.follow(&site);
    std::thread::sleep(SETTLE);

    for gpus in [
        vec!["--gres=gpu:a6000:1"],
        vec!["--gpus=1"],
        vec!["--gpus-per-node=rtx3090:1"],
        vec!["--gpus-per-task=1", "--ntasks=1"],
        vec!["--gpus-per-socket=1", "--sockets-per-node=1"],
    ] {
        let mut args = gpus.clone();
        args.extend(["--wrap", "true"]);
        let started = Instant::now();
        let out = sbatch("alice", &args);
        assert_ne!(out.code, 0, "{gpus:?} accepted: {}", out.stdout);
        assert!(out.stderr.contains(REFUSED), "{gpus:?}: {}", out.stderr);
        assert!(out.stderr.contains("Run 'sbalance' for details."), "{}", out.stderr);
        assert!(
            out.stderr.contains("Batch job submission failed: Job violates accounting/QOS policy"),
            "{}",
            out.stderr
        );
        println!("refused {gpus:?} in {:?}", started.elapsed());
    }
    let (_, stderr) = adm.accepted("alice", &["--wrap", "true"]);
    assert!(stderr.is_empty(), "a CPU-only job is not told anything: {stderr}");
    adm.accepted("bob", &["--gres=gpu:a6000:1", "--hold", "--wrap", "true"]);

    // job_modify: alice cannot add GPUs to her queued CPU job; other changes pass; root may.
    let (queued, _) = adm.accepted("alice", &["--hold", "--wrap", "true"]);
    let scontrol = Path::new("/usr/bin/scontrol");
    let job = format!("jobid={queued}");
    let out = run_as(Some("alice"), scontrol, &["update", &job, "gres=gpu:1"]);
    assert_ne!(out.code, 0, "alice added a GPU to job {queued}");
    assert!(out.stderr.contains("Job violates accounting/QOS policy"), "{}", out.stderr);
    run_as(Some("alice"), scontrol, &["update", &job, "timelimit=10"]).ok();
    let shown = run_as(None, scontrol, &["show", "job", &queued]).ok().stdout;
    assert!(!shown.contains("TresPerNode"), "{shown}");
    run_as(None, scontrol, &["update", &job, "gres=gpu:1"]).ok();
    let shown = run_as(None, scontrol, &["show", "job", &queued]).ok().stdout;
    assert!(shown.contains("TresPerNode=gres:gpu:1"), "{shown}");

    let log = adm.log();
    assert_eq!(log.matches("gputokens: refused a GPU job of alice (uid ").count(), 5, "{log}");
    assert_eq!(
        log.matches("gputokens: refused a GPU request in an update of a job of alice (uid ").count(),
        1,
        "{log}"
    );
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn in_overdraft_gpu_jobs_are_accepted_at_lower_priority() {
    let _cluster = serial();
    // The site outlives `adm`, which restores the cluster's snapshot when dropped.
    let site = Site::start("", "");
    let mut adm = Admission::start();
    site.accountd(None, &["admin", "adjust", "alice", "-103.5", "--reason", "test: overdraft"]).ok();
    site.accountd(None, &["admin", "adjust", "bob", "-50", "--reason", "test: +50"]).ok();
    adm.follow(&site);
    std::thread::sleep(SETTLE);

    // Identical jobs, kept pending (BeginTime) so both have a priority to compare.
    let job = ["--gres=gpu:a6000:1", "--begin=now+1hour", "--wrap", "true"];
    let (alice_job, told) = adm.accepted("alice", &job);
    assert!(
        told.contains(
            "sbatch: gputokens: your GPU token balance is -3.5 (below 0): this job was accepted with lower priority \
             (nice +10000); at the floor (-10) GPU jobs are refused. Run 'sbalance' for details."
        ),
        "{told}"
    );
    let (bob_job, told) = adm.accepted("bob", &job);
    assert!(told.is_empty(), "bob at +50 is told nothing: {told}");

    let jobs = format!("{alice_job},{bob_job}");
    let table = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-j", &jobs, "-o", "%i|%u|%Q|%y"]).ok().stdout;
    let row = |id: &str| -> (u64, i64) {
        let line = table.lines().find(|l| l.starts_with(&format!("{id}|"))).unwrap_or_else(|| panic!("{table}"));
        let f: Vec<&str> = line.split('|').collect();
        (f[2].parse().unwrap(), f[3].parse().unwrap())
    };
    let (alice_priority, alice_nice) = row(&alice_job);
    let (bob_priority, bob_nice) = row(&bob_job);
    println!("squeue: alice priority {alice_priority} nice {alice_nice}; bob priority {bob_priority} nice {bob_nice}");
    assert_eq!((alice_nice, bob_nice), (10_000, 0));
    assert!(alice_priority < bob_priority, "{table}");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_grant_lets_the_next_gpu_job_through_within_a_second() {
    let _cluster = serial();
    let site = Site::start("", "");
    let mut adm = Admission::start();
    let pid = slurmctld_pid();
    site.accountd(None, &["admin", "adjust", "alice", "-110.4", "--reason", "test: at the floor"]).ok();
    adm.follow(&site);
    std::thread::sleep(SETTLE);
    let gpu_job = ["--gres=gpu:a6000:1", "--hold", "--wrap", "true"];
    let refused = sbatch("alice", &gpu_job);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(refused.stderr.contains(REFUSED), "{}", refused.stderr);

    site.accountd(None, &["admin", "grant", "alice", "1", "--reason", "test: lift above the floor"]).ok();
    let granted = Instant::now();
    let mut tries = 0;
    let out = loop {
        tries += 1;
        let out = sbatch("alice", &gpu_job);
        if out.code == 0 || granted.elapsed() > Duration::from_secs(1) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = granted.elapsed();
    assert_eq!(out.code, 0, "still refused {took:?} after the grant: {}", out.stderr);
    assert_eq!(site.balance("alice"), "-9.4");
    adm.jobs.push(job_id(&out));
    println!("after the grant, alice's GPU job was accepted {took:?} later (attempt {tries})");
    assert!(out.stderr.contains("your GPU token balance is -9.4 (below 0)"), "{}", out.stderr);
    assert_eq!(slurmctld_pid(), pid, "slurmctld was restarted");
    assert!(slurmctld_alive(&pid));
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_missing_garbage_or_stale_snapshot_follows_on_error_and_is_logged_once() {
    let _cluster = serial();
    let mut adm = Admission::start();
    let pid = slurmctld_pid();
    let blocked_at = |generated: i64| {
        format!(
            "gputokens-snapshot 1\ngenerated {generated}\nfloor -10000000\ndaily 1000000\nmonthly 0\n\
             initial 100000000\nuser alice -10400000\n"
        )
    };
    let blocked = blocked_at(gputokens::time::now());
    adm.write(&blocked);
    std::thread::sleep(SETTLE);
    let gpu_job = ["--gres=gpu:rtx2080:1", "--hold", "--wrap", "true"];
    assert_ne!(sbatch("alice", &gpu_job).code, 0, "alice is at the floor");

    // Deleted: on_error = "accept" (the test cluster's setting, the default) lets her through.
    std::fs::remove_file(&adm.snapshot).unwrap();
    std::thread::sleep(SETTLE);
    for _ in 0..3 {
        adm.accepted("alice", &gpu_job);
    }
    // Garbage in its place: the same.
    std::fs::write(&adm.snapshot, b"\x00\x01 this is not a snapshot\n").unwrap();
    std::thread::sleep(SETTLE);
    for _ in 0..3 {
        adm.accepted("alice", &gpu_job);
    }
    // Stale (written 3 hours ago, max_snapshot_age is 2h): the same.
    adm.write(&blocked_at(gputokens::time::now() - 3 * 3600));
    std::thread::sleep(SETTLE);
    for _ in 0..3 {
        adm.accepted("alice", &gpu_job);
    }
    // Fixed again: checked again.
    adm.write(&blocked);
    std::thread::sleep(SETTLE);
    assert_ne!(sbatch("alice", &gpu_job).code, 0, "alice is at the floor again");

    assert_eq!(slurmctld_pid(), pid, "slurmctld was restarted");
    assert!(slurmctld_alive(&pid), "slurmctld died");
    let log = adm.log();
    let path = adm.snapshot.display().to_string();
    let missing = format!(
        "error: gputokens: balance snapshot {path} is missing; GPU jobs are accepted without a balance check \
         (on_error = \"accept\") until it appears"
    );
    let corrupt = format!("error: gputokens: balance snapshot {path} is corrupt (");
    let stale = format!(
        "error: gputokens: balance snapshot {path} is stale: written 3h ago, longer than max_snapshot_age (2h); \
         is accountd running? GPU jobs are accepted without a balance check (on_error = \"accept\") until it is \
         rewritten"
    );
    let usable = format!("gputokens: balance snapshot {path} is usable again: 1 user, written ");
    assert_eq!(log.matches(&missing).count(), 1, "{log}");
    assert_eq!(log.matches(&corrupt).count(), 1, "{log}");
    assert_eq!(log.matches(&stale).count(), 1, "{log}");
    assert_eq!(log.matches(&usable).count(), 1, "{log}");
    assert!(!log.contains("panicked"), "{log}");
}
