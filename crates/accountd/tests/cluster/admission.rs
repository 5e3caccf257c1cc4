//! The job_submit plugin inside the real slurmctld of the test cluster: jobs submitted with sbatch by
//! the non-root users alice and bob (each test's own, from `serial()`), balances from a snapshot
//! written by a real `accountd serve`.
//!
//! tests/run.sh starts the cluster with the packaged plugin (GPUTOKENS_PLUGINS=installed) and writes
//! /etc/slurm/gputokens.toml, whose `[paths] snapshot` these tests control. Each test holds
//! `serial()` and leaves an empty snapshot behind (everyone at `initial`: every job passes), so
//! the other cluster tests are not disturbed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gputokens::policy::BucketRules;
use gputokens::Tokens;

use crate::cluster::serial;
use crate::common::{run_as, Outcome, Site};
use crate::slurm_release;
use crate::wrappers::Wrappers;

const PLUGIN_CONF: &str = "/etc/slurm/gputokens.toml";
/// slurmctld's SlurmUser on the test cluster (tests/cluster/lib.sh), as the example config says.
const SLURM_USER: &str = "slurm";
/// How long the plugin may take to read a new snapshot and say so: it looks every 200 ms, and
/// rewrites its status file at most once a second.
const READ_WITHIN: Duration = Duration::from_secs(10);

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
pub(crate) fn sbatch(user: &str, args: &[&str]) -> Outcome {
    let mut all = vec!["--parsable", "--output=/dev/null"];
    all.extend_from_slice(args);
    run_as(Some(user), Path::new("/usr/bin/sbatch"), &all)
}

pub(crate) fn job_id(out: &Outcome) -> String {
    out.stdout.trim().split(';').next().unwrap_or_default().to_string()
}

/// The cluster's snapshot and plugin config, for one test: restores an empty snapshot and the
/// config, and cancels the test's jobs on drop.
pub(crate) struct Admission {
    snapshot: PathBuf,
    jobs: Vec<String>,
    log_from: usize,
    /// The plugin config as tests/run.sh wrote it.
    config: String,
}

impl Admission {
    pub(crate) fn start() -> Admission {
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
        Admission { snapshot, jobs: Vec::new(), log_from: slurmctld_log().len(), config }
    }

    /// Adds `tables` to the plugin's config and waits until the plugin has read it (it re-reads the
    /// file on change; slurmctld is not restarted).
    pub(crate) fn configure(&self, tables: &str) {
        write_admission_settings(&format!("{}\n{tables}", self.config));
    }

    /// Points the plugin's snapshot at the one `site`'s accountd writes.
    pub(crate) fn follow(&self, site: &Site) {
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
        write_for_slurmctld(&self.snapshot, text).unwrap();
    }

    /// Waits until the plugin decides from the snapshot as it is now (`wait_plugin_holds`).
    pub(crate) fn settled(&self) {
        plugin_holds(&self.snapshot).unwrap_or_else(|e| panic!("{e}"));
    }

    /// sbatch that must succeed; the job is cancelled at the end of the test.
    pub(crate) fn accepted(&mut self, user: &str, args: &[&str]) -> (String, String) {
        let out = sbatch(user, args);
        assert_eq!(out.code, 0, "{user} {args:?} refused: {}", out.stderr);
        let id = job_id(&out);
        self.jobs.push(id.clone());
        (id, out.stderr)
    }

    /// What slurmctld logged since the test began.
    pub(crate) fn log(&self) -> String {
        slurmctld_log().get(self.log_from..).unwrap_or_default().to_string()
    }
}

/// What the plugin must say it holds once it has read the snapshot file as it is now.
#[derive(Debug)]
enum Held {
    /// A snapshot modified at this time (ns since the epoch), or later.
    ModifiedSince(i64),
    /// No snapshot, for this reason ("missing", "corrupt").
    Unavailable(&'static str),
}

/// Waits until slurmctld's plugin decides from the cluster's snapshot file as it is now (its
/// controller status file, in `controllers/` beside the snapshot, says it read this file or one
/// written after it), or says it has none when the file is missing or not a snapshot.
pub(crate) fn wait_plugin_holds() {
    let config = std::fs::read_to_string(PLUGIN_CONF).unwrap_or_else(|e| panic!("{PLUGIN_CONF}: {e}"));
    let table: toml::Table = toml::from_str(&config).expect("plugin config");
    let snapshot = PathBuf::from(table["paths"]["snapshot"].as_str().expect("[paths] snapshot"));
    plugin_holds(&snapshot).unwrap_or_else(|e| panic!("{e}"));
}

/// `wait_plugin_holds`, telling what the plugin says instead when it does not read it in time.
fn plugin_holds(snapshot: &Path) -> Result<(), String> {
    use gputokens::controller_status::{self, ControllerStatus, ViewStatus};
    let since = gputokens::time::now();
    let want = match std::fs::read_to_string(snapshot) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Held::Unavailable("missing"),
        Err(e) => panic!("{}: {e}", snapshot.display()),
        Ok(text) if gputokens::snapshot::parse(&text).is_err() => Held::Unavailable("corrupt"),
        Ok(_) => Held::ModifiedSince(
            gputokens::file_stamp::Stamp::read(snapshot).map(|s| s.mtime_ns() as i64).unwrap_or(i64::MAX),
        ),
    };
    let host = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
    let file = controller_status::default_dir(snapshot).join(controller_status::file_name(&host));
    let deadline = Instant::now() + READ_WITHIN;
    loop {
        let status =
            std::fs::read_to_string(&file).map_err(|e| e.to_string()).and_then(|t| ControllerStatus::parse(&t));
        let holds = match (&status, &want) {
            (Ok(s), Held::ModifiedSince(at)) => {
                matches!(s.view, ViewStatus::Ready { file_modified_ns: Some(m), .. } if m >= *at)
            }
            (Ok(s), Held::Unavailable(why)) => {
                s.written >= since && matches!(&s.view, ViewStatus::Unavailable { problem } if problem.contains(why))
            }
            (Err(_), _) => false,
        };
        if holds {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "slurmctld's plugin did not read {} ({want:?}) within {READ_WITHIN:?}: {}: {status:?}",
                snapshot.display(),
                file.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes a snapshot as a root accountd would: 0640, group of the test cluster's SlurmUser.
fn write_for_slurmctld(path: &Path, text: &str) -> std::io::Result<()> {
    let group = nix::unistd::User::from_name(SLURM_USER).ok().flatten().map(|u| u.gid.as_raw());
    gputokens::snapshot::write_atomically_for(path, text, group)
}

/// Writes the plugin config and waits for the plugin's "config ..." line about it.
fn write_admission_settings(text: &str) {
    const READ: &str = "gputokens: job_submit/gputokens ";
    let before = slurmctld_log().matches(READ).count();
    std::fs::write(PLUGIN_CONF, text).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while slurmctld_log().matches(READ).count() == before {
        assert!(Instant::now() < deadline, "the plugin did not re-read {PLUGIN_CONF} within 3 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if std::fs::read_to_string(PLUGIN_CONF).ok().as_deref() != Some(self.config.as_str()) {
            write_admission_settings(&self.config);
        }
        if !self.jobs.is_empty() {
            let mut args = vec!["--quiet"];
            args.extend(self.jobs.iter().map(String::as_str));
            run_as(None, Path::new("/usr/bin/scancel"), &args);
        }
        let rules = BucketRules { monthly: Tokens::ZERO, ..BucketRules::default() };
        let empty = gputokens::snapshot::render(&gputokens::snapshot::Snapshot::new(gputokens::time::now(), rules));
        let _ = write_for_slurmctld(&self.snapshot, &empty);
        // Never a panic here: a test that failed is unwinding through this.
        if let Err(e) = plugin_holds(&self.snapshot) {
            eprintln!("restoring the cluster's empty snapshot: {e}");
        }
    }
}

/// A site whose snapshot the plugin follows, after the balance adjustments `(user, amount)`, with
/// `tables` in its config. Bind as `let (site, mut adm) = ...`: `adm` goes first, restoring the
/// cluster's snapshot while the site still exists.
pub(crate) fn following_site(tables: &str, adjustments: &[(&str, &str)]) -> (Site, Admission) {
    following_site_priced(crate::common::PRICES, tables, adjustments)
}

/// [`following_site`] with a `[prices]` table of the test's own.
fn following_site_priced(prices: &str, tables: &str, adjustments: &[(&str, &str)]) -> (Site, Admission) {
    let site = Site::with_prices("", prices, tables);
    let adm = Admission::start();
    for (user, amount) in adjustments {
        site.accountd(None, &["admin", "adjust", user, amount, "--reason", "test"]).ok();
    }
    adm.follow(&site);
    adm.settled();
    (site, adm)
}

/// The site's snapshot once it holds `line` (a check cycle right after slurmctld started may not
/// have read the nodes yet), or as it is after 30 s.
fn snapshot_holding(site: &Site, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(site.path("lib/balances.snapshot")).unwrap_or_default();
        if text.contains(line) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

const REFUSED: &str = "sbatch: error: gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused \
                       until it is above the floor again (+1 token per day and +30 tokens on the 1st of each month: \
                       about ";

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn at_the_floor_gpu_jobs_are_refused_and_cpu_jobs_pass() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (_site, mut adm) = following_site("", &[(alice, "-110.4")]);

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
        let out = sbatch(alice, &args);
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
    let (_, stderr) = adm.accepted(alice, &["--wrap", "true"]);
    assert!(stderr.is_empty(), "a CPU-only job is not told anything: {stderr}");
    adm.accepted(bob, &["--gres=gpu:a6000:1", "--hold", "--wrap", "true"]);

    // job_modify: alice cannot add GPUs to her queued CPU job; other changes pass; root may.
    let (queued, _) = adm.accepted(alice, &["--hold", "--wrap", "true"]);
    let scontrol = Path::new("/usr/bin/scontrol");
    let job = format!("jobid={queued}");
    let out = run_as(Some(alice), scontrol, &["update", &job, "gres=gpu:1"]);
    assert_ne!(out.code, 0, "alice added a GPU to job {queued}");
    assert!(out.stderr.contains("Job violates accounting/QOS policy"), "{}", out.stderr);
    if slurm_release::updates_explain_refusals() {
        let told = REFUSED.replace("sbatch: error: ", "");
        assert!(out.stderr.contains(&told), "{}", out.stderr);
    }
    run_as(Some(alice), scontrol, &["update", &job, "timelimit=10"]).ok();
    let shown = run_as(None, scontrol, &["show", "job", &queued]).ok().stdout;
    assert!(!shown.contains("TresPerNode"), "{shown}");
    run_as(None, scontrol, &["update", &job, "gres=gpu:1"]).ok();
    let shown = run_as(None, scontrol, &["show", "job", &queued]).ok().stdout;
    assert!(shown.contains(&format!("TresPerNode={}", slurm_release::gres_request("gpu:1"))), "{shown}");

    let log = adm.log();
    assert_eq!(log.matches(&format!("gputokens: refused a GPU job of {alice} (uid ")).count(), 5, "{log}");
    let update = format!("gputokens: refused an update of job {queued} of {alice} (uid ");
    assert_eq!(log.matches(&update).count(), 1, "{log}");
}

/// Borrowing against next month's grant (issue 48, done-when 3): alice at her floor is told she
/// may borrow, borrows 6 of the site's 10 with `sbalance --borrow` (as herself: no one borrows for
/// another), her GPU job then passes, and borrowing past the limit is refused.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_user_at_the_floor_borrows_against_next_months_grant_within_the_limit() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = Site::start("borrow_limit = 10", "");
    let mut adm = Admission::start();
    site.accountd(None, &["admin", "adjust", alice, "-110", "--reason", "test"]).ok();
    adm.follow(&site);
    adm.settled();
    let refused = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "true"]);
    assert_ne!(refused.code, 0, "alice at her floor ran a GPU job");
    let hint =
        "You may borrow against next month's grant, up to 10 tokens a month (sbalance --borrow N). Run 'sbalance' for details.";
    assert!(refused.stderr.contains(hint), "{}", refused.stderr);

    let borrowed = site.sbalance(Some(alice), &["--borrow", "6"]).ok().stdout;
    assert!(borrowed.starts_with("borrowed against the monthly grant of "), "{borrowed}");
    assert!(borrowed.trim_end().ends_with("balance now -4"), "{borrowed}");
    assert_eq!(site.balance(alice), "-4");
    adm.settled();
    adm.accepted(alice, &["--gres=gpu:a6000:1", "--hold", "--wrap", "true"]);

    let past = site.sbalance(Some(alice), &["--borrow", "5"]);
    assert_ne!(past.code, 0, "alice borrowed past the limit");
    assert!(past.stderr.contains("you have borrowed 6, so 4 more at most (5 asked)"), "{}", past.stderr);
    assert_eq!(site.balance(alice), "-4");
    // bob's borrowing is his own: alice's balance does not move.
    site.sbalance(Some(bob), &["--borrow", "10"]).ok();
    assert_eq!((site.balance(alice), site.balance(bob)), ("-4".to_string(), "110".to_string()));
    let history = site.sbalance(Some(alice), &["--history"]).ok().stdout;
    assert!(history.contains("borrowed against the monthly grant of"), "{history}");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn in_overdraft_gpu_jobs_are_accepted_at_lower_priority() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (_site, mut adm) = following_site("", &[(alice, "-103.5"), (bob, "-50")]);

    // Identical jobs, kept pending (BeginTime) so both have a priority to compare.
    let job = ["--gres=gpu:a6000:1", "--begin=now+1hour", "--wrap", "true"];
    let (alice_job, told) = adm.accepted(alice, &job);
    assert!(
        told.contains(
            "sbatch: gputokens: your GPU token balance is -3.5 (below 0): this job was accepted with lower priority \
             (nice +10000); at the floor (-10) GPU jobs are refused. Run 'sbalance' for details."
        ),
        "{told}"
    );
    let (bob_job, told) = adm.accepted(bob, &job);
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
    let cluster = serial();
    let alice = cluster.alice;
    let (site, mut adm) = following_site("", &[(alice, "-110.4")]);
    let pid = slurmctld_pid();
    let gpu_job = ["--gres=gpu:a6000:1", "--hold", "--wrap", "true"];
    let refused = sbatch(alice, &gpu_job);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(refused.stderr.contains(REFUSED), "{}", refused.stderr);

    site.accountd(None, &["admin", "grant", alice, "1", "--reason", "test: lift above the floor"]).ok();
    let granted = Instant::now();
    let mut tries = 0;
    let out = loop {
        tries += 1;
        let out = sbatch(alice, &gpu_job);
        if out.code == 0 || granted.elapsed() > Duration::from_secs(1) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = granted.elapsed();
    assert_eq!(out.code, 0, "still refused {took:?} after the grant: {}", out.stderr);
    assert_eq!(site.balance(alice), "-9.4");
    adm.jobs.push(job_id(&out));
    println!("after the grant, alice's GPU job was accepted {took:?} later (attempt {tries})");
    assert!(out.stderr.contains("your GPU token balance is -9.4 (below 0)"), "{}", out.stderr);
    assert_eq!(slurmctld_pid(), pid, "slurmctld was restarted");
    assert!(slurmctld_alive(&pid));
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_missing_garbage_or_stale_snapshot_follows_on_error_and_is_logged_once() {
    let cluster = serial();
    let alice = cluster.alice;
    let mut adm = Admission::start();
    let pid = slurmctld_pid();
    let blocked_at = |generated: i64| {
        format!(
            "gputokens-snapshot 1\ngenerated {generated}\nfloor -10000000\ndaily 1000000\nmonthly 0\n\
             initial 100000000\nuser {alice} -10400000\n"
        )
    };
    let blocked = blocked_at(gputokens::time::now());
    adm.write(&blocked);
    adm.settled();
    let gpu_job = ["--gres=gpu:rtx2080:1", "--hold", "--wrap", "true"];
    assert_ne!(sbatch(alice, &gpu_job).code, 0, "alice is at the floor");

    // Deleted: on_error = "accept" (the test cluster's setting, the default) lets her through.
    std::fs::remove_file(&adm.snapshot).unwrap();
    adm.settled();
    for _ in 0..3 {
        adm.accepted(alice, &gpu_job);
    }
    // Garbage in its place: the same.
    std::fs::write(&adm.snapshot, b"\x00\x01 this is not a snapshot\n").unwrap();
    adm.settled();
    for _ in 0..3 {
        adm.accepted(alice, &gpu_job);
    }
    // Stale (written 3 hours ago, max_snapshot_age is 2h): the same.
    adm.write(&blocked_at(gputokens::time::now() - 3 * 3600));
    adm.settled();
    for _ in 0..3 {
        adm.accepted(alice, &gpu_job);
    }
    // Fixed again: checked again.
    adm.write(&blocked);
    adm.settled();
    assert_ne!(sbatch(alice, &gpu_job).code, 0, "alice is at the floor again");

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
    // Once fixed after its deletion (a test run first on a new cluster also sees the first snapshot
    // end the missing one of the cluster's start).
    let since_deleted = log.split_once(&missing).map_or("", |(_, rest)| rest);
    assert_eq!(since_deleted.matches(&usable).count(), 1, "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// `scontrol show job` as root, one line per field.
fn show_job(id: &str) -> String {
    run_as(None, Path::new("/usr/bin/scontrol"), &["show", "job", id]).ok().stdout
}

/// (priority, QOS) of a job from squeue.
fn priority_and_qos(id: &str) -> (u64, String) {
    let out = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-j", id, "-o", "%Q|%q"]).ok().stdout;
    let (priority, qos) = out.trim().split_once('|').unwrap_or_else(|| panic!("squeue: {out}"));
    (priority.parse().unwrap(), qos.to_string())
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn overdraft_deprioritizes_by_site_factor_or_qos_as_configured_without_a_restart() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (_site, mut adm) = following_site("", &[(alice, "-103.5")]);
    let pid = slurmctld_pid();
    let job = ["--gres=gpu:a6000:1", "--begin=now+1hour", "--wrap", "true"];
    let (bob_job, _) = adm.accepted(bob, &job);
    let (bob_priority, bob_qos) = priority_and_qos(&bob_job);

    adm.configure("[admission]\ndeprioritize = \"site_factor\"\nsite_factor = -5000\n");
    let (alice_job, told) = adm.accepted(alice, &job);
    assert!(told.contains("this job was accepted with lower priority (site factor -5000);"), "{told}");
    let (alice_priority, _) = priority_and_qos(&alice_job);
    println!("site factor: alice {alice_priority}, bob {bob_priority}");
    assert_eq!(alice_priority + 5000, bob_priority, "the site factor is added to the priority");
    assert!(show_job(&alice_job).contains("Nice=0"), "nice is left alone");

    adm.configure("[admission]\ndeprioritize = \"qos\"\nqos = \"gputokens-overdraft\"\n");
    let (alice_job, told) = adm.accepted(alice, &job);
    assert!(told.contains("this job was accepted with lower priority (QOS gputokens-overdraft);"), "{told}");
    let (alice_priority, alice_qos) = priority_and_qos(&alice_job);
    println!("qos: alice {alice_priority} in {alice_qos}, bob {bob_priority} in {bob_qos}");
    assert_eq!((alice_qos.as_str(), bob_qos.as_str()), ("gputokens-overdraft", "normal"));
    assert!(alice_priority < bob_priority);
    let (bob_again, told) = adm.accepted(bob, &job);
    assert!(told.is_empty(), "{told}");
    assert_eq!(priority_and_qos(&bob_again).1, "normal", "bob is not in overdraft");

    assert_eq!(slurmctld_pid(), pid, "slurmctld was restarted");
    let log = adm.log();
    assert!(log.contains("overdraft site_factor -5000"), "{log}");
    assert!(log.contains("overdraft qos gputokens-overdraft"), "{log}");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn max_job_duration_limits_gpu_jobs_and_exempt_users_pass() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let mut adm = Admission::start();
    adm.configure(&format!("[admission]\nmax_job_duration = \"2h\"\n[exempt]\nusers = [\"{bob}\"]\n"));
    let gpu = |time: Option<&'static str>| {
        let mut args = vec!["--gres=gpu:rtx2080:1", "--hold", "--wrap", "true"];
        if let Some(t) = time {
            args.insert(0, t);
        }
        args
    };
    let out = sbatch(alice, &gpu(Some("--time=3:00:00")));
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stderr.contains(
            "sbatch: error: gputokens: GPU jobs may run for at most 2:00:00 here, and this job asks for 3:00:00; \
             submit it with --time=2:00:00 or less."
        ),
        "{}",
        out.stderr
    );
    let (fits, told) = adm.accepted(alice, &gpu(Some("--time=1:30:00")));
    assert!(told.is_empty(), "{told}");
    assert!(show_job(&fits).contains("TimeLimit=01:30:00"), "{}", show_job(&fits));
    // No --time, and the partition has no limit: the job gets the maximum, and is told.
    let (untimed, told) = adm.accepted(alice, &gpu(None));
    assert!(told.contains("it was given the longest allowed, 2:00:00 (--time=2:00:00)"), "{told}");
    assert!(show_job(&untimed).contains("TimeLimit=02:00:00"), "{}", show_job(&untimed));
    // CPU jobs and exempt users are not limited.
    let (cpu, _) = adm.accepted(alice, &["--time=3:00:00", "--hold", "--wrap", "true"]);
    assert!(show_job(&cpu).contains("TimeLimit=03:00:00"));
    let (exempt, told) = adm.accepted(bob, &gpu(Some("--time=3:00:00")));
    assert!(told.is_empty(), "{told}");
    assert!(show_job(&exempt).contains("TimeLimit=03:00:00"));
    // accountd down, refusing without balances: the exempt user still passes, unlimited, with the
    // snapshot a day old and with none at all (its name is looked up apart from the snapshot).
    adm.configure(&format!(
        "[admission]\nmax_job_duration = \"2h\"\non_error = \"reject\"\n[exempt]\nusers = [\"{bob}\"]\n"
    ));
    let day_old = format!(
        "gputokens-snapshot 1\ngenerated {}\nfloor -10000000\ndaily 1000000\nmonthly 0\ninitial 100000000\n",
        gputokens::time::now() - 86_400
    );
    for snapshot in [Some(day_old), None] {
        match &snapshot {
            Some(text) => adm.write(text),
            None => std::fs::remove_file(&adm.snapshot).unwrap(),
        }
        adm.settled();
        let (exempt, told) = adm.accepted(bob, &gpu(Some("--time=3:00:00")));
        assert!(told.is_empty(), "{told}");
        assert!(show_job(&exempt).contains("TimeLimit=03:00:00"));
        assert_ne!(sbatch(alice, &gpu(Some("--time=1:00:00"))).code, 0, "alice is refused (on_error)");
    }
}

/// Config tables for a site that reads the real cluster's queue every second, with the plugin's
/// `[admission]` table (which also tells accountd to read the queue). It charges only what happens
/// from its start on (no look back, no re-read), so jobs of earlier tests leave balances alone.
fn reading_the_queue(admission: &str) -> String {
    format!(
        "[slurm]\nfirst_lookback = \"1s\"\nreread = \"1m\"\n[preemption]\nenabled = false\n[intervals]\n\
         check = \"1s\"\n{admission}"
    )
}

/// Waits until the snapshot's queue shows `line` (or, `present` false, no longer shows it) in a queue
/// read at least two seconds after the first one that did: jobs admitted within the second of a
/// read are counted by the plugin until a later read (the queue time has whole seconds).
fn wait_for_queue_line(snapshot: &Path, line: &str, present: bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut first_seen: Option<i64> = None;
    loop {
        let text = std::fs::read_to_string(snapshot).unwrap_or_default();
        let as_of = text.lines().find_map(|l| l.strip_prefix("queue ")).and_then(|t| t.parse::<i64>().ok());
        if text.lines().any(|l| l == line) == present {
            match (first_seen, as_of) {
                (Some(first), Some(now)) if now >= first + 2 => return,
                (None, Some(now)) => first_seen = Some(now),
                _ => {}
            }
        } else {
            first_seen = None;
        }
        assert!(Instant::now() < deadline, "snapshot {present} '{line}' not reached:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn max_gpus_per_user_counts_running_and_pending_jobs() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let admission = "[admission]\nmax_gpus_per_user = 2\n";
    let (site, mut adm) = following_site(&reading_the_queue(admission), &[]);
    adm.configure(admission);
    let one = ["--gres=gpu:a6000:1", "--hold", "--wrap", "true"];
    let (first, _) = adm.accepted(alice, &one);
    adm.accepted(alice, &one);
    // Within one snapshot: the plugin counts what it admitted itself.
    let refused = sbatch(alice, &one);
    assert_ne!(refused.code, 0, "a third GPU accepted: {}", refused.stdout);
    let want = "sbatch: error: gputokens: you may hold at most 2 GPUs in running and pending jobs together; you \
                hold 2 and this job asks for 1.";
    assert!(refused.stderr.contains(want), "{}", refused.stderr);
    adm.accepted(bob, &one);

    // Once accountd has read the queue, the queue counts them: still refused.
    // No --time on a partition without limits: default_time_limit (24 h) × 4 tokens each.
    wait_for_queue_line(&site.path("lib/balances.snapshot"), &format!("committed {alice} 2000 192000000"), true);
    adm.settled();
    let refused = sbatch(alice, &["--gpus=1", "--hold", "--wrap", "true"]);
    assert!(refused.stderr.contains(want), "{}", refused.stderr);

    // One of them cancelled: after the next read, one more fits.
    run_as(None, Path::new("/usr/bin/scancel"), &[&first]).ok();
    wait_for_queue_line(&site.path("lib/balances.snapshot"), &format!("committed {alice} 1000 96000000"), true);
    adm.settled();
    adm.accepted(alice, &one);
    let log = adm.log();
    let uid = nix::unistd::User::from_name(alice).unwrap().unwrap().uid;
    let alice_uid = format!("uid {uid}");
    let refusals = log.lines().filter(|l| l.contains(&alice_uid) && l.contains("above max_gpus_per_user (2)"));
    assert_eq!(refusals.count(), 2, "{log}");
}

/// A partition made for the test, deleted at its end.
struct RuntimePartition(String);

impl Drop for RuntimePartition {
    fn drop(&mut self) {
        run_as(None, Path::new("/usr/bin/scontrol"), &["delete", &format!("PartitionName={}", self.0)]);
    }
}

/// A hidden partition's limits reach the plugin like any other's (accountd reads partitions with
/// `--all`): a job there without --time is estimated at the partition's DefaultTime, not at
/// `default_time_limit`.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_hidden_partitions_default_time_counts_in_the_estimate() {
    let cluster = serial();
    let alice = cluster.alice;
    let name = format!("hidden{}", cluster.set);
    let created = run_as(
        None,
        Path::new("/usr/bin/scontrol"),
        &["create", &format!("PartitionName={name}"), "Nodes=ALL", "Hidden=YES", "DefaultTime=00:30:00"],
    );
    assert_eq!(created.code, 0, "{}", created.stderr);
    let _partition = RuntimePartition(name.clone());
    let admission = "[admission]\nmode = \"estimate\"\n";
    let (site, mut adm) = following_site(&reading_the_queue(admission), &[(alice, "-80")]);
    adm.configure(admission);
    let snapshot = site.path("lib/balances.snapshot");
    let line = format!("partition {name} - 1800 -");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !std::fs::read_to_string(&snapshot).unwrap_or_default().lines().any(|l| l == line) {
        assert!(
            Instant::now() < deadline,
            "no '{line}' in the snapshot:\n{}",
            std::fs::read_to_string(&snapshot).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    adm.settled();
    // 2 a6000 × 30 min × 4 = 4 of alice's 20 (at default_time_limit, 24 h: 192, refused).
    let (_, told) =
        adm.accepted(alice, &["-p", &name, "--gres=gpu:a6000:2", "--gpu-tokens-estimate", "--hold", "--wrap", "true"]);
    assert!(told.contains("this job can cost up to 4 tokens (2 a6000 GPUs for 0:30:00)"), "{told}");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_estimate_refuses_jobs_that_could_take_the_balance_below_the_floor() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let admission = "[admission]\nmode = \"estimate\"\n";
    let (site, mut adm) = following_site(&reading_the_queue(admission), &[(alice, "-80")]);
    adm.configure(admission);
    // 2 a6000 × 2 h × 4 tokens = 16: 20 - 16 = 4 is above the floor.
    let job = ["--gres=gpu:a6000:2", "--time=2:00:00", "--hold", "--wrap", "true"];
    let (first, told) = adm.accepted(alice, &job);
    assert!(told.is_empty(), "{told}");
    let refused = sbatch(alice, &job);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    let want = "sbatch: error: gputokens: this job can cost up to 16 tokens (2 a6000 GPUs for 2:00:00); your GPU \
                token balance is 20 and your running and pending GPU jobs can cost up to 16 more, which could take it \
                to -12, below the floor (-10).";
    assert!(refused.stderr.contains(want), "{}", refused.stderr);
    // Shorter fits: 20 - 16 - 12 (2 × 1.5 h × 4) = -8.
    adm.accepted(alice, &["--gres=gpu:a6000:2", "--time=1:30:00", "--hold", "--wrap", "true"]);

    // From the queue accountd read, the same.
    wait_for_queue_line(&site.path("lib/balances.snapshot"), &format!("committed {alice} 4000 28000000"), true);
    adm.settled();
    let small = ["--gres=gpu:rtx2080:1", "--time=5:00:00", "--hold", "--wrap", "true"];
    let refused = sbatch(alice, &small);
    assert!(
        refused.stderr.contains(
            "up to 2.5 tokens (1 rtx2080 GPU for 5:00:00); your GPU token balance is 20 and your \
                                 running and pending GPU jobs can cost up to 28 more, which could take it to -10.5"
        ),
        "{}",
        refused.stderr
    );
    let (_, told) = adm.accepted(bob, &job);
    assert!(told.is_empty(), "bob has 100: {told}");

    run_as(None, Path::new("/usr/bin/scancel"), &[&first]).ok();
    wait_for_queue_line(&site.path("lib/balances.snapshot"), &format!("committed {alice} 2000 12000000"), true);
    adm.settled();
    adm.accepted(alice, &small);
}

/// A job the plugin admits while accountd's squeue is starting is in the queue squeue shows and in
/// the plugin's own tally: it must count once. (The estimate test above lost this race on a loaded
/// 24.11 cluster: its third job, which fits, was refused as if the first counted twice.) squeue is
/// made to start 3 s late so the job lands in that window every time.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_job_admitted_while_squeue_starts_counts_once() {
    let cluster = serial();
    let alice = cluster.alice;
    let slurm = Wrappers::new();
    slurm.slow_by("squeue", 3);
    let admission = "[admission]\nmode = \"estimate\"\n";
    let tables = format!(
        "[slurm]\nbin_dir = \"{}\"\nfirst_lookback = \"1s\"\nreread = \"1m\"\n[preemption]\nenabled = false\n\
         [intervals]\ncheck = \"1s\"\ncharge = \"1h\"\n{admission}",
        slurm.bin_dir()
    );
    let (site, mut adm) = following_site(&tables, &[(alice, "-80")]);
    adm.configure(admission);
    let snapshot = site.path("lib/balances.snapshot");
    // serve's start-up charge cycle reads squeue too (its running jobs): once it is over, with the
    // next an hour away, every squeue is a check cycle's, whose read the snapshot publishes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(site.log().contains("charge cycle (") || site.log().contains("charge cycle failed")) {
        assert!(Instant::now() < deadline, "serve's start-up charge cycle did not end in 30 s: {}", site.log());
        std::thread::sleep(Duration::from_millis(50));
    }

    // The moment a check cycle's squeue starts (its wrapper notes the call, then sleeps).
    let calls = slurm.calls("squeue");
    let deadline = Instant::now() + Duration::from_secs(15);
    while slurm.calls("squeue") == calls {
        assert!(Instant::now() < deadline, "no squeue within 15 s: {}", site.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let submitted_ms = gputokens::time::now_ms();
    // 2 a6000 × 2 h × 4 = 16 of alice's 20.
    adm.accepted(alice, &["--gres=gpu:a6000:2", "--time=2:00:00", "--hold", "--wrap", "true"]);

    // The snapshot of that read shows the job, and the read began before it was admitted.
    let shows = format!("committed {alice} 2000 16000000");
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = std::fs::read_to_string(&snapshot).unwrap_or_default();
        if text.lines().any(|l| l == shows) {
            break text;
        }
        assert!(Instant::now() < deadline, "the snapshot never showed '{shows}':\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let field = |text: &str, key: &str| {
        text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse::<i64>().ok()).unwrap_or(0)
    };
    let (began, ended) = (field(&text, "queue_read_ms"), field(&text, "queue_read_end_ms"));
    assert!(
        began < submitted_ms && submitted_ms < ended,
        "not the race: read {began}..{ended}, sbatch at {submitted_ms}"
    );
    adm.settled();

    // 20 - 16 - 12 (2 × 1.5 h × 4) = -8 fits; the first counted twice (-24) would not.
    adm.accepted(alice, &["--gres=gpu:a6000:2", "--time=1:30:00", "--hold", "--wrap", "true"]);
    let now = std::fs::read_to_string(&snapshot).unwrap_or_default();
    assert_eq!(field(&now, "queue_read_ms"), began, "a later read came first: the test proves nothing");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn gpu_tokens_estimate_shows_the_most_a_job_can_cost() {
    let cluster = serial();
    let bob = cluster.bob;
    let (_site, mut adm) = following_site("", &[(bob, "-50")]);
    // The SPANK option (sbatch) asks, the job_submit plugin (slurmctld, which knows the prices) answers.
    let (_, told) = adm
        .accepted(bob, &["--gpu-tokens-estimate", "--gres=gpu:a6000:2", "--time=1:30:00", "--hold", "--wrap", "true"]);
    assert!(
        told.contains(
            "sbatch: gputokens: this job can cost up to 12 tokens (2 a6000 GPUs for 1:30:00); your GPU token balance \
             is 50."
        ),
        "{told}"
    );
    // An array of 4 tasks with one untyped GPU each, at the highest price (a6000: 4), for 1 h.
    let (_, told) = adm
        .accepted(bob, &["--gpu-tokens-estimate", "--array=0-3", "--gpus=1", "--time=60", "--hold", "--wrap", "true"]);
    assert!(told.contains("this job can cost up to 16 tokens (4 GPUs of any type for 1:00:00)"), "{told}");
    let (_, told) = adm.accepted(bob, &["--gres=gpu:a6000:2", "--time=1:30:00", "--hold", "--wrap", "true"]);
    assert!(!told.contains("can cost"), "only when asked: {told}");
}

/// A running job commits what is left of its time limit after what the ledger has already charged
/// of it: balance minus commitments is the worst case however long ago the last charge was.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_running_job_commits_the_uncharged_rest_of_its_limit() {
    let cluster = serial();
    let alice = cluster.alice;
    // 1 token per a6000-second, so charged seconds read straight off the balance.
    let site =
        Site::with_prices("", "[prices]\na6000 = 3600\n", &reading_the_queue("[admission]\nmode = \"estimate\"\n"));
    let job = crate::cluster::sbatch(alice, &["--gres=gpu:a6000:1", "--time=10", "--wrap", "sleep 120"]);
    crate::cluster::wait_ran(&job, 3);
    site.accountd(None, &["tick"]).ok();
    let balance: Tokens = site.balance(alice).parse().unwrap();
    let charged = (Tokens::whole(100) - balance).micro() / 1_000_000;
    assert!(charged >= 3, "charged {charged} s");
    let rest = (600 - charged) * 1_000_000;
    wait_for_queue_line(&site.path("lib/balances.snapshot"), &format!("committed {alice} 1000 {rest}"), true);
    run_as(None, Path::new("/usr/bin/scancel"), &[&job]).ok();
}

/// `scontrol update` as the user, not asserting success.
pub(crate) fn update_as(user: &str, job: &str, change: &str) -> Outcome {
    run_as(Some(user), Path::new("/usr/bin/scontrol"), &["update", &format!("jobid={job}"), change])
}

/// (nice, QOS) of a job from squeue.
pub(crate) fn nice_and_qos(id: &str) -> (i64, String) {
    let out = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-j", id, "-o", "%y|%q"]).ok().stdout;
    let (nice, qos) = out.trim().split_once('|').unwrap_or_else(|| panic!("squeue: {out}"));
    (nice.parse().unwrap(), qos.to_string())
}

/// Waits until the snapshot lists job `id` as pending (accountd read the queue after it was submitted).
fn wait_until_listed(snapshot: &Path, id: &str) {
    let prefix = format!("pending {id} ");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !std::fs::read_to_string(snapshot).unwrap_or_default().lines().any(|l| l.starts_with(&prefix)) {
        assert!(Instant::now() < deadline, "job {id} not in the snapshot");
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_plugin_holds();
}

/// job_modify holds the submission policy: in overdraft, alice cannot take back the nice value or
/// the QOS the plugin gave her GPU jobs; a CPU-only job of hers (known from the queue accountd read)
/// lowers its nice freely; at the floor she cannot add GPUs to it. Refusals are logged with why, and
/// from Slurm 23.02 on the user is told why too (22.05 shows only "Job violates accounting/QOS policy").
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn updates_cannot_undo_the_overdraft_penalty_and_cpu_jobs_are_untouched() {
    let cluster = serial();
    let alice = cluster.alice;
    let (site, mut adm) = following_site(&reading_the_queue(""), &[(alice, "-103.5")]);
    let snapshot = site.path("lib/balances.snapshot");

    let (gpu, told) = adm.accepted(alice, &["--gres=gpu:a6000:1", "--hold", "--wrap", "true"]);
    assert!(told.contains("(nice +10000)"), "{told}");
    assert_eq!(nice_and_qos(&gpu).0, 10_000);
    let out = update_as(alice, &gpu, "nice=0");
    assert_ne!(out.code, 0, "alice lowered the nice of GPU job {gpu}");
    assert!(out.stderr.contains("Job violates accounting/QOS policy"), "{}", out.stderr);
    if slurm_release::updates_explain_refusals() {
        let told = "gputokens: your GPU token balance is -3.5 (below 0): your GPU jobs keep a nice value of at least \
                    10000 until it is 0 or more. Run 'sbalance' for details.";
        assert!(out.stderr.contains(told), "{}", out.stderr);
    }
    assert_eq!(nice_and_qos(&gpu).0, 10_000, "the plugin's nice is kept");
    update_as(alice, &gpu, "nice=12000").ok();
    assert_eq!(nice_and_qos(&gpu).0, 12_000, "a higher nice is hers to set");

    let (cpu, _) = adm.accepted(alice, &["--nice=500", "--hold", "--wrap", "true"]);
    wait_until_listed(&snapshot, &cpu);
    update_as(alice, &cpu, "nice=0").ok();
    assert_eq!(nice_and_qos(&cpu).0, 0, "a CPU-only job is not touched");

    adm.configure("[admission]\ndeprioritize = \"qos\"\nqos = \"gputokens-overdraft\"\n");
    let (in_qos, _) = adm.accepted(alice, &["--gres=gpu:a6000:1", "--hold", "--wrap", "true"]);
    assert_eq!(nice_and_qos(&in_qos).1, "gputokens-overdraft");
    let out = update_as(alice, &in_qos, "qos=normal");
    assert_ne!(out.code, 0, "alice moved GPU job {in_qos} out of the overdraft QOS");
    if slurm_release::updates_explain_refusals() {
        assert!(out.stderr.contains("your GPU jobs keep QOS gputokens-overdraft"), "{}", out.stderr);
    }
    assert_eq!(nice_and_qos(&in_qos).1, "gputokens-overdraft");

    // At the floor: no GPUs added to her CPU job, in any form.
    site.accountd(None, &["admin", "adjust", alice, "-10", "--reason", "test"]).ok();
    adm.settled();
    for change in ["gres=gpu:2", "TresPerNode=gres:gpu:1", "gres=gpu:a6000:1"] {
        let out = update_as(alice, &cpu, change);
        assert_ne!(out.code, 0, "{change} accepted on CPU job {cpu}");
    }
    assert!(!show_job(&cpu).contains("TresPer"), "{}", show_job(&cpu));

    let log = adm.log();
    let uid = nix::unistd::User::from_name(alice).unwrap().unwrap().uid;
    let nice = format!(
        "gputokens: refused an update of job {gpu} of {alice} (uid {uid}): nice 0 is below nice_increment 10000 in \
         overdraft (balance -3.5)"
    );
    assert!(log.contains(&nice), "{log}");
    let qos = format!(
        "gputokens: refused an update of job {in_qos} of {alice} (uid {uid}): QOS normal is not the overdraft QOS \
         gputokens-overdraft"
    );
    assert!(log.contains(&qos), "{log}");
    let floor = format!("gputokens: refused an update of job {cpu} of {alice} (uid {uid}): it adds GPUs");
    assert_eq!(log.matches(&floor).count(), 3, "{log}");
}

/// From 24.11 a job may ask for several QOS and runs in the one of highest priority that lets it: a
/// debtor's GPU job is still put in the overdraft QOS alone, whatever list and order she asks for, and
/// an update to a list (with the overdraft QOS in it or not) is refused.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_list_of_qos_does_not_undo_the_overdraft_penalty() {
    if !slurm_release::qos_lists() {
        eprintln!("Slurm {:?} takes one QOS per job", slurm_release::release());
        return;
    }
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (_site, mut adm) = following_site(&reading_the_queue(""), &[(alice, "-103.5")]);
    adm.configure("[admission]\ndeprioritize = \"qos\"\nqos = \"gputokens-overdraft\"\n");
    let (bob_job, _) = adm.accepted(bob, &["--gres=gpu:a6000:1", "--begin=now+1hour", "--wrap", "true"]);
    let (bob_priority, _) = priority_and_qos(&bob_job);
    for list in ["normal,gputokens-overdraft", "gputokens-overdraft,normal", "normal"] {
        let qos = format!("--qos={list}");
        let (job, told) = adm.accepted(alice, &[&qos, "--gres=gpu:a6000:1", "--begin=now+1hour", "--wrap", "true"]);
        assert!(told.contains("(QOS gputokens-overdraft)"), "{qos}: {told}");
        let (priority, in_qos) = priority_and_qos(&job);
        assert_eq!(in_qos, "gputokens-overdraft", "{qos}");
        assert!(priority < bob_priority, "{qos}: {priority} vs bob's {bob_priority}");
        for change in ["qos=normal,gputokens-overdraft", "qos=gputokens-overdraft,normal"] {
            let out = update_as(alice, &job, change);
            assert_ne!(out.code, 0, "{change} accepted for job {job}");
            assert_eq!(priority_and_qos(&job), (priority, "gputokens-overdraft".to_string()), "{change}");
        }
    }
    let (bob_list, told) = adm.accepted(
        bob,
        &["--qos=gputokens-overdraft,normal", "--gres=gpu:a6000:1", "--begin=now+1hour", "--wrap", "true"],
    );
    assert!(told.is_empty(), "bob is not in overdraft: {told}");
    assert_ne!(priority_and_qos(&bob_list).1, "", "bob's list is his");
}

/// The example config as shipped, accountd run as root, slurmctld running as its SlurmUser (slurm, not
/// root): the job_submit plugin inside slurmctld reads the snapshot accountd writes and refuses alice
/// at the floor; `config check --slurm` says the SlurmUser can read it, and names the directory once
/// an admin's chmod stops the SlurmUser.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn with_the_example_config_slurmctld_as_the_slurm_user_reads_a_root_accountds_snapshot() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let slurm = nix::unistd::User::from_name(SLURM_USER).unwrap().expect("the test cluster's SlurmUser");
    let status = std::fs::read_to_string(format!("/proc/{}/status", slurmctld_pid())).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap().to_string();
    assert!(uids.split_whitespace().skip(1).all(|uid| uid == slurm.uid.to_string()), "slurmctld runs as {uids}");

    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../slurm-conf/gputokens.toml")).unwrap();
    assert!(example.contains("\nslurm_user = \"slurm\"\n"), "the example config names another SlurmUser");
    let site = Site::from_config(&example);
    let mut adm = Admission::start();
    site.accountd(None, &["admin", "adjust", alice, "-200", "--reason", "test"]).ok();
    adm.follow(&site);
    adm.settled();

    let out = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "true"]);
    assert_ne!(out.code, 0, "alice at the floor got a GPU job through: {}", out.stdout);
    assert!(out.stderr.contains("sbatch: error: gputokens: your GPU token balance is -"), "{}", out.stderr);
    assert!(out.stderr.contains("GPU jobs are refused until it is above the floor again"), "{}", out.stderr);
    adm.accepted(bob, &["--gres=gpu:a6000:1", "--hold", "--wrap", "true"]);

    let check = || site.accountd(None, &["config", "check", site.config.to_str().unwrap(), "--slurm"]);
    let snapshot = site.path("lib/balances.snapshot");
    let ok = check();
    let readable = format!("slurm: ok: the snapshot {} is readable by the SlurmUser (slurm(", snapshot.display());
    assert!(ok.stdout.contains(&readable), "{}", ok.stdout);
    assert!(ok.stdout.contains("slurm: ok: slurm_user 'slurm' is slurmctld's SlurmUser"), "{}", ok.stdout);

    let lib = site.path("lib");
    let mode = std::fs::metadata(&lib).unwrap().permissions();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = check();
    std::fs::set_permissions(&lib, mode).unwrap();
    assert_eq!(out.code, 2, "{}", out.stdout);
    let problem =
        format!("slurm: problem: slurmctld's SlurmUser (slurm({})) cannot search {}", slurm.uid, lib.display());
    assert!(out.stdout.lines().any(|l| l.starts_with(&problem)), "{}", out.stdout);
}

/// slurmctld's plugin writes this controller's status file into `controllers/` beside the snapshot
/// once that directory exists (it never creates it): this host, slurmctld's pid, the snapshot it reads.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn slurmctld_writes_its_controller_status_file() {
    use gputokens::controller_status::{self, ControllerStatus};
    let cluster = serial();
    let adm = Admission::start();
    // Made by tests/run.sh for the SlurmUser, as the packaged unit makes it.
    let dir = adm.snapshot.parent().unwrap().join("controllers");
    let host = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
    let file = dir.join(controller_status::file_name(&host));
    let deadline = Instant::now() + Duration::from_secs(controller_status::STALE_AFTER_SECS as u64);
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            break ControllerStatus::parse(&text).unwrap();
        }
        assert!(Instant::now() < deadline, "no {}: {}", file.display(), adm.log());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status.pid.to_string(), slurmctld_pid());
    assert_eq!((status.host.as_str(), status.snapshot.as_path()), (host.as_str(), adm.snapshot.as_path()));
    assert!((gputokens::time::now() - status.written).abs() <= controller_status::STALE_AFTER_SECS, "{status:?}");
    // Readable by accountd (root) and the SlurmUser's group, not by every user: in shadow mode it
    // names who is at the floor (the audit's N8).
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640);
    let as_bob = crate::common::run_as(Some(cluster.bob), std::path::Path::new("/bin/cat"), &[&file.to_string_lossy()]);
    assert!(as_bob.code != 0 && as_bob.stderr.contains("Permission denied"), "{}", as_bob.stderr);
    assert!(!adm.log().contains("panicked"), "{}", adm.log());
}

/// The audit's L8 as alice: a plugin config her group may write is never obeyed. She exempts
/// herself in it while at the floor; slurmctld's plugin logs why it does not read the file, keeps
/// its settings, and refuses her GPU job as before; once only root may write it, it is read again.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_plugin_config_others_can_write_is_not_obeyed() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = serial();
    let alice = cluster.alice;
    let (_site, adm) = following_site("", &[(alice, "-110.4")]);
    assert!(sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "true"]).stderr.contains(REFUSED));

    let group = nix::unistd::Group::from_name(alice).unwrap().expect("the test user's group").gid;
    nix::unistd::chown(PLUGIN_CONF, None, Some(group)).unwrap();
    std::fs::set_permissions(PLUGIN_CONF, std::fs::Permissions::from_mode(0o664)).unwrap();
    let planted = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(planted.path(), format!("{}\n[exempt]\nusers = [\"{alice}\"]\n", adm.config)).unwrap();
    std::fs::set_permissions(planted.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let cp = run_as(Some(alice), Path::new("/bin/cp"), &[planted.path().to_str().unwrap(), PLUGIN_CONF]);
    assert_eq!(cp.code, 0, "alice could not write the config: {}", cp.stderr);
    let refused = format!("is writable by the members of group {alice} (gid {group})");
    let deadline = Instant::now() + Duration::from_secs(3);
    while !adm.log().contains(&refused) {
        assert!(Instant::now() < deadline, "the plugin did not refuse the config: {}", adm.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Logged once the watcher had decided: the next submission is judged by the kept settings.
    assert!(adm.log().contains("not read: the plugin keeps its settings"), "{}", adm.log());
    let out = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "true"]);
    assert!(out.stderr.contains(REFUSED), "alice exempted herself: {} {}", out.stdout, out.stderr);

    // Root's again: the config as it was is read.
    std::fs::write(PLUGIN_CONF, &adm.config).unwrap();
    let read_again = adm.log().matches("gputokens: job_submit/gputokens ").count();
    nix::unistd::chown(PLUGIN_CONF, None, Some(nix::unistd::Gid::from_raw(0))).unwrap();
    std::fs::set_permissions(PLUGIN_CONF, std::fs::Permissions::from_mode(0o644)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while adm.log().matches("gputokens: job_submit/gputokens ").count() == read_again {
        assert!(Instant::now() < deadline, "the plugin did not read the config again: {}", adm.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 36's shadow mode inside the real slurmctld: with `enforce = false` alice, at the floor,
/// submits a GPU job; it is accepted as submitted and runs, she is told nothing, slurmctld's log
/// says what would have been done, and the plugin's status file counts it. With enforcement on, the
/// same job is refused.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn shadow_mode_logs_and_counts_what_it_would_refuse_and_refuses_nothing() {
    use gputokens::controller_status::{self, ControllerStatus};
    let cluster = serial();
    let alice = cluster.alice;
    let (_site, mut adm) = following_site("", &[(alice, "-110.4")]);
    // The controller status directory beside the snapshot, made by tests/run.sh for the SlurmUser.
    let dir = adm.snapshot.parent().unwrap().join("controllers");
    adm.configure("[admission]\nenforce = false\n");
    assert!(adm.log().contains("SHADOW MODE (enforce = false"), "{}", adm.log());

    let (job, stderr) = adm.accepted(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
    assert!(stderr.is_empty(), "she is told nothing: {stderr}");
    let logged = format!("gputokens: shadow mode, not enforced: refused a GPU job of {alice} (uid ");
    assert!(adm.log().contains(&logged), "{}", adm.log());
    crate::preemption::wait_for("her job to run", || crate::preemption::squeue(&job, "%T") == "RUNNING");

    let host = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
    let file = dir.join(controller_status::file_name(&host));
    let uid = nix::unistd::User::from_name(alice).unwrap().unwrap().uid.as_raw();
    let deadline = Instant::now() + Duration::from_secs(controller_status::STALE_AFTER_SECS as u64);
    loop {
        let status = std::fs::read_to_string(&file).ok().and_then(|t| ControllerStatus::parse(&t).ok());
        let shadow = status.and_then(|s| s.shadow);
        if shadow.as_ref().is_some_and(|s| s.would.get("refuse") == Some(&1) && s.refused_by_uid.get(&uid) == Some(&1))
        {
            break;
        }
        assert!(Instant::now() < deadline, "{} does not count it: {shadow:?}", file.display());
        std::thread::sleep(Duration::from_millis(200));
    }

    // Enforcement on: the same job is refused, and the status file no longer speaks of shadow mode.
    adm.configure("");
    let out = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 60"]);
    assert!(out.stderr.contains(REFUSED), "{} {}", out.stdout, out.stderr);
    let deadline = Instant::now() + Duration::from_secs(controller_status::STALE_AFTER_SECS as u64);
    while std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| ControllerStatus::parse(&t).ok())
        .and_then(|s| s.shadow)
        .is_some()
    {
        assert!(Instant::now() < deadline, "{} still speaks of shadow mode", file.display());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The seconds a message's `[gputokens code=CODE retry_after=*:N]` tail gives for every GPU type.
fn retry_for_any_type(message: &str, code: &str) -> u64 {
    let (found, retry) = gputokens::decision::codes::parse(message).unwrap_or_else(|| panic!("no tail: {message}"));
    assert_eq!(found, code, "{message}");
    let any = retry.iter().find(|(t, _)| t == "*").unwrap_or_else(|| panic!("no retry_after for *: {message}"));
    any.1
}

/// Issue 48: a refusal and a deprioritization end with a code and `retry_after` that programs read;
/// `sbalance --json` gives the same; the repository's back-off script waits by it for GPU jobs
/// and lets CPU jobs straight through, as alice (at the floor) and bob (in overdraft).
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn refusals_carry_a_code_and_retry_after_that_sbalance_and_the_backoff_script_read() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (site, mut adm) = following_site("", &[(alice, "-110.4"), (bob, "-103.5")]);

    let out = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "true"]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    let refused = out.stderr.lines().find(|l| l.contains("gputokens:")).unwrap_or_else(|| panic!("{}", out.stderr));
    assert!(refused.starts_with(REFUSED), "{refused}");
    // +1 a day from -10.4: above the floor after the next replenishment, at most a day and 15 min away.
    let told = retry_for_any_type(refused, "floor");
    assert!((1..=86_400 + 900).contains(&told), "{refused}");

    let json = site.sbalance(Some(alice), &["--json"]).ok().stdout;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let admission = &json["users"][0]["admission"];
    assert_eq!(admission["code"], "floor", "{json}");
    let asked = admission["retry_after"]["*"].as_u64().unwrap_or_else(|| panic!("{json}"));
    assert!(told.abs_diff(asked) <= 30, "sbatch said {told} s, sbalance {asked} s");
    assert!(admission["retry_at"].as_str().is_some_and(|t| t.contains('T')), "{json}");

    let (_, deprioritized) = adm.accepted(bob, &["--gres=gpu:a6000:1", "--hold", "--wrap", "true"]);
    assert!(retry_for_any_type(&deprioritized, "overdraft") > 0, "{deprioritized}");
    let bobs = site.sbalance(Some(bob), &["--json"]).ok().stdout;
    assert!(bobs.contains(r#""code": "overdraft""#), "{bobs}");

    // The script waits what the refusal says (here no more than --max-wait allows)...
    let script =
        site.file("gpu-submit-backoff.sh", include_str!("../../../../slurm-conf/examples/gpu-submit-backoff.sh"));
    let bash = Path::new("/bin/bash");
    let dry = run_as(
        Some(alice),
        bash,
        &[&script, "--type", "a6000", "--max-wait", "999999", "--once", "--", "--gres=gpu:a6000:1", "--wrap", "true"],
    );
    assert_eq!(dry.code, 75, "{dry:?}");
    let waits: u64 = dry
        .stdout
        .trim()
        .strip_prefix("gpu-submit-backoff.sh: refused (floor): retry in ")
        .and_then(|rest| rest.strip_suffix('s'))
        .unwrap_or_else(|| panic!("{dry:?}"))
        .parse()
        .unwrap();
    assert!(waits.abs_diff(told) <= 30, "the script waits {waits} s, sbatch said {told} s");
    // ...and polls where that is long, giving up after --tries.
    let polled = run_as(
        Some(alice),
        bash,
        &[&script, "--max-wait", "1", "--tries", "2", "--", "--gres=gpu:a6000:1", "--wrap", "true"],
    );
    assert_eq!(polled.code, 75, "{polled:?}");
    assert!(polled.stderr.contains("refused (floor): waiting 1s before try 2 of 2"), "{polled:?}");
    assert!(polled.stderr.contains("still refused after 2 tries"), "{polled:?}");
    // A refusal waiting does not mend fails at once; a CPU job goes straight through.
    adm.configure("[admission]\nmax_job_duration = \"1h\"\n");
    let long = run_as(Some(bob), bash, &[&script, "--", "--gres=gpu:a6000:1", "--time=2:00:00", "--wrap", "true"]);
    assert_ne!(long.code, 0, "{long:?}");
    assert!(long.stderr.contains("refused (time_limit) and waiting does not help"), "{long:?}");
    let cpu = run_as(Some(alice), bash, &[&script, "--", "--hold", "--wrap", "true"]);
    assert_eq!(cpu.code, 0, "{cpu:?}");
    let id = cpu.stdout.trim().rsplit(' ').next().unwrap().to_string();
    adm.jobs.push(id);
}

/// Issue 48: `sbatch --test-only` as alice is quoted: the most the job can cost, her balance after
/// it, the cheaper GPU types with GPUs free now (accountd reads them from sinfo and squeue) and,
/// from slurmctld, when it would start; nothing is queued.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn sbatch_test_only_is_quoted_with_a_cheaper_type_free_now() {
    let cluster = serial();
    let alice = cluster.alice;
    // Reading the live cluster (its queue and nodes) every few seconds, never preempting.
    let live = "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n[intervals]\ncheck = \"5s\"\n";
    let (site, mut adm) = following_site(live, &[(alice, "-50")]);
    let snapshot = snapshot_holding(&site, "\nfree_gpus ");
    adm.settled();
    let quoted = sbatch(alice, &["--test-only", "--gres=gpu:a6000:1", "--time=60", "--wrap", "true"]);
    assert_eq!(quoted.code, 0, "{quoted:?}");
    let told = &quoted.stderr;
    assert!(
        told.contains(
            "sbatch: gputokens quote: this job can cost up to 4 tokens (1 a6000 GPU for 1:00:00); your GPU token \
             balance is 50, at least 46 after it."
        ),
        "{told}"
    );
    // The test node's rtx2080s and rtx3090s are free (no test's job runs now).
    assert!(
        told.contains(
            " Cheaper, with GPUs free now: rtx2080 up to 0.5 tokens (4 free); rtx3090 up to 1 tokens (2 free)."
        ),
        "{told}\nsnapshot:\n{snapshot}\nlog:\n{}",
        site.log()
    );
    assert!(told.lines().any(|l| l.starts_with("sbatch: Job ") && l.contains(" to start at ")), "{told}");
    let queued = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-u", alice, "-o", "%i"]).ok().stdout;
    assert!(queued.trim().is_empty(), "a test is never queued: {queued}");
    // Without --test-only nothing is quoted.
    let plain = sbatch(alice, &["--gres=gpu:a6000:1", "--time=60", "--hold", "--wrap", "true"]);
    assert!(!plain.stderr.contains("quote"), "{plain:?}");
    let id = plain.stdout.trim().rsplit(' ').next().unwrap_or_default().to_string();
    run_as(None, Path::new("/usr/bin/scancel"), &[&id]);

    // With the estimate, a quote counts until the next queue read, but the job it quoted takes its
    // place: 50 tokens, floor -10, a job of 40 quoted and then submitted passes; a second does not.
    adm.configure("[admission]\nmode = \"estimate\"\n");
    let job = ["--gres=gpu:a6000:1", "--time=10:00:00", "--hold", "--wrap", "true"];
    let quoted = sbatch(alice, &[&["--test-only"][..], &job[..]].concat());
    assert!(quoted.stderr.contains("this job can cost up to 40 tokens"), "{quoted:?}");
    let (_, told) = adm.accepted(alice, &job);
    assert!(!told.contains("code="), "the quoted job passes: {told}");
    let again = sbatch(alice, &job);
    assert_ne!(again.code, 0, "{again:?}");
    assert!(again.stderr.contains("[gputokens code=estimate retry_after="), "{again:?}");
}

/// `[prices] stranded = ["cpus"]` (issue 48): before a job runs, its quote counts the GPUs its CPUs
/// would leave idle on the nodes with its GPU type, and says so. alice's 1 rtx3090 with all 16 CPUs
/// of the test node stands for its 10 GPUs (20 an hour at the seed's prices, the two a100 slices at
/// the highest); with 1 CPU it costs its GPU's price.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn sbatch_test_only_counts_the_gpus_a_jobs_cpus_would_leave_idle() {
    let cluster = serial();
    let alice = cluster.alice;
    let live = "[slurm]\nfirst_lookback = \"1s\"\n[preemption]\nenabled = false\n[intervals]\ncheck = \"5s\"\n";
    let prices = format!("{}stranded = [\"cpus\"]\n", crate::common::PRICES);
    let (site, adm) = following_site_priced(&prices, live, &[(alice, "-50")]);
    let snapshot = snapshot_holding(&site, "\nnode_shape ");
    assert!(snapshot.contains("\nstranded cpus\n"), "{snapshot}");
    adm.settled();
    let quote = |cpus: &str| {
        let quoted = sbatch(alice, &["--test-only", "--gres=gpu:rtx3090:1", cpus, "--time=60", "--wrap", "true"]);
        assert_eq!(quoted.code, 0, "{quoted:?}");
        quoted.stderr
    };
    let told = quote("--cpus-per-task=16");
    assert!(
        told.contains(
            "sbatch: gputokens quote: this job can cost up to 20 tokens (1 rtx3090 GPU for 1:00:00; priced by its \
             CPUs: 16 of the 16 on a node it may run on stand for 10 of its 10 GPUs, so 19/GPU-hour is added for the 9 it leaves \
             idle); your GPU token balance is 50, at least 30 after it."
        ),
        "{told}\nsnapshot:\n{snapshot}"
    );
    let fair = quote("--cpus-per-task=1");
    assert!(fair.contains("this job can cost up to 1 tokens (1 rtx3090 GPU for 1:00:00); your GPU token"), "{fair}");
}
