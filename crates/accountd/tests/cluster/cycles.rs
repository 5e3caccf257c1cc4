//! Cycles on the real test cluster: one at a time across processes (`accountd tick` beside a running
//! `accountd serve`), a waiting job never displaces more than it needs, and a hung sacct delays a
//! cycle without wedging accountd. Slurm's commands go through wrappers (`[slurm] bin_dir`) that
//! exec the real ones, slowed down or hung on request.

use std::time::Duration;

use crate::by_hand::gpu_cost as cost;
use gputokens::Tokens;

use crate::charging::{balance, elapsed, PRICES};
use crate::cluster::{sbatch, serial, wait_finished};
use crate::common::{http_get, Site};
use crate::preemption::{cancel, squeue, wait_for};
use crate::wrappers::Wrappers;

/// The `requeue` rows of the site's audit log.
fn requeues(site: &Site) -> Vec<String> {
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    actions.lines().filter(|l| l.contains("requeue")).map(str::to_string).collect()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn tick_beside_a_running_serve_cycle_requeues_one_debtor_job_for_one_waiting_job() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let slurm = Wrappers::new();
    // Cycles only at serve's start: the test says when they run.
    let mut site = Site::start(
        "",
        &format!(
            "[intervals]\ncharge = \"1h\"\ncheck = \"1h\"\n[slurm]\nbin_dir = \"{}\"\nfirst_lookback = \"1s\"\n\
             [preemption]\nmin_runtime = \"0s\"\n",
            slurm.bin_dir()
        ),
    );
    site.accountd(None, &["admin", "adjust", alice, "-105", "--reason", "test"]).ok();
    // alice holds both a6000s and every CPU but one; bob waits for an a6000 and two CPUs, so he
    // still waits after one of alice's jobs is requeued (and when it runs again on the freed GPU).
    let older = sbatch(alice, &["-c", "15", "--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("alice's first job to run", || squeue(&older, "%T") == "RUNNING");
    std::thread::sleep(Duration::from_secs(1));
    let younger = sbatch(alice, &["-c", "1", "--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("alice's second job to run", || squeue(&younger, "%T") == "RUNNING");
    let waiting = sbatch(bob, &["-c", "2", "--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("bob's job to wait for resources", || squeue(&waiting, "%T %r") == "PENDING Resources");

    // serve starts its cycles; the first to take the cycle lock reads squeue slowly.
    slurm.set("squeue", "slow", true);
    site.restart();
    wait_for("a serve cycle to read squeue", || slurm.calls("squeue") > 0);
    slurm.set("squeue", "slow", false);
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stderr.contains("waited") && tick.stderr.contains("accountd serve: "), "{}", tick.stderr);
    wait_for("serve's check cycle", || site.log().contains("check cycle ("));

    let requeued = requeues(&site);
    assert_eq!(requeued.len(), 1, "one debtor job for one waiting job: {requeued:?}\n{}\n{}", tick.stdout, site.log());
    assert!(requeued[0].contains(&younger), "the younger job: {requeued:?}");
    assert_eq!(squeue(&older, "%T"), "RUNNING");

    // bob still waits: the next cycle remembers that a GPU was freed for his job.
    assert_eq!(squeue(&waiting, "%T"), "PENDING");
    let again = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(
        again.stdout.contains("1 of them already had GPUs freed by an earlier preemption), 0 preempted"),
        "{}",
        again.stdout
    );
    assert_eq!(requeues(&site).len(), 1);
    assert_eq!(squeue(&older, "%T"), "RUNNING");
    cancel(&[&older, &younger, &waiting]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_hung_sacct_times_out_while_sbalance_answers_and_the_next_cycle_charges() {
    let cluster = serial();
    let alice = cluster.alice;
    let slurm = Wrappers::new();
    let site = Site::with_prices(
        "",
        PRICES,
        &format!(
            "[intervals]\ncharge = \"5s\"\ncheck = \"1h\"\n[slurm]\nbin_dir = \"{}\"\nfirst_lookback = \"1s\"\n\
             reread = \"1m\"\nsacct_timeout = \"10s\"\n[preemption]\nenabled = false\n",
            slurm.bin_dir()
        ),
    );
    wait_for("the first charge cycle", || site.log().contains("charge cycle ("));

    slurm.set("sacct", "hang", true);
    wait_for("a charge cycle to call the hung sacct", || slurm.calls("sacct") > 0);
    // The cycle is inside sacct: accountd still answers.
    let answered = site.sbalance(Some(alice), &["-P", "-n", "-o", "User,Balance"]).ok();
    assert_eq!(answered.stdout.trim(), format!("{alice}|100"));
    assert!(!site.log().contains("timed out"), "sbalance was answered only after the cycle gave up:\n{}", site.log());

    let job = sbatch(alice, &["--gres=gpu:rtx2080:1", "--wrap", "sleep 2"]);
    assert_eq!(wait_finished(&job), "COMPLETED");
    wait_for("the hung cycle to fail", || site.log().contains("charge cycle failed: sacct"));
    let log = site.log();
    assert!(log.contains("timed out after 10s; killed (the last snapshot stays)"), "{log}");
    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    assert!(metrics.lines().any(|l| l.starts_with("gputokens_cycle_failures_total{cycle=\"charge\"} ")), "{metrics}");
    assert_eq!(balance(&site, alice), Tokens::whole(100), "nothing charged while sacct hangs");

    slurm.set("sacct", "hang", false);
    let expected = Tokens::whole(100) - cost(Tokens::whole(1800), elapsed(&job));
    wait_for("a charge cycle with the real sacct", || balance(&site, alice) == expected);
    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    assert!(
        metrics.lines().any(|l| l.starts_with("gputokens_cycle_last_success_timestamp_seconds{cycle=\"charge\"} ")),
        "{metrics}"
    );
}

/// The audit's L1: an agent's report of jobs accountd has not seen asks squeue who owns them, and
/// with slurmctld answering only after 15 s that once held every `sbalance` for as long. Reports
/// have their own ledger connection: every `sbalance` meanwhile answers within a second.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_report_waiting_on_a_slow_squeue_holds_no_sbalance() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let slurm = Wrappers::new();
    let site = Site::start(
        "",
        &format!(
            "[intervals]\ncharge = \"1h\"\ncheck = \"1h\"\n[slurm]\nbin_dir = \"{}\"\nfirst_lookback = \"1s\"\n\
             [preemption]\nenabled = false\n[http]\nlisten = \"127.0.0.1:0\"\nrequest_timeout = \"120s\"\n",
            slurm.bin_dir()
        ),
    );
    let busy = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    let idle = sbatch(bob, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 120"]);
    let pids = (crate::agent::pid_of(&busy), crate::agent::pid_of(&idle));
    let state = site.file("nvml-state.toml", &crate::agent::fake_state(pids.0, pids.1));
    let config = crate::agent::agent_config(&site);
    slurm.slow_by("squeue", 15);
    let before = slurm.calls("squeue");
    let report = std::process::Command::new(crate::common::bin("gputokens-agent"))
        .args(["--config", &config, "--node", "vm", "--once"])
        .env("FAKE_NVML_STATE", &state)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut report = ChildGuard(report);
    crate::cluster::wait_until(20, "the report's squeue under way", || match slurm.calls("squeue") > before {
        true => Ok(()),
        false => Err(format!("{} squeue calls", slurm.calls("squeue"))),
    });
    // For the next 25 s (the report's squeue calls: who is on the node, then who owns each job).
    let until = std::time::Instant::now() + Duration::from_secs(25);
    let mut asked = 0;
    while std::time::Instant::now() < until {
        for user in [alice, bob] {
            let started = std::time::Instant::now();
            let out = site.sbalance(Some(user), &["-P", "-n", "-o", "User"]);
            let took = started.elapsed();
            assert_eq!((out.code, out.stdout.trim()), (0, user), "{}", out.stderr);
            assert!(took < Duration::from_secs(1), "{user}'s sbalance took {took:?} while a report waited on squeue");
            asked += 1;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(slurm.calls("squeue") > before, "the report asked squeue");
    assert!(asked >= 20, "{asked} sbalance calls");
    let _ = report.0.kill();
    let _ = report.0.wait();
    cancel(&[&busy, &idle]);
}

/// Kills the child however the test ends.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 46, done-when 4, as the last audit measured it: squeue answers only after 12 s, charge
/// and check cycles run every second or two on running GPU jobs (each charge writes the ledger and
/// the snapshot), and an admin grants every half second (a write and a snapshot of its own). The
/// snapshot has its own publisher and ledger connection, and the users a request names are looked
/// up before the answering lock: alice's and bob's `sbalance` answer within 100 ms (the process's
/// start and runuser's included; nine in ten at least, none slower than a second, on a loaded
/// test machine).
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn sbalance_answers_within_100_ms_while_squeue_takes_12_s_and_cycles_write() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let slurm = Wrappers::new();
    let site = Site::start(
        "",
        &format!(
            "[intervals]\ncharge = \"1s\"\ncheck = \"2s\"\n[slurm]\nbin_dir = \"{}\"\nfirst_lookback = \"1s\"\n\
             [preemption]\nenabled = false\n",
            slurm.bin_dir()
        ),
    );
    let jobs = [
        sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]),
        sbatch(bob, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 120"]),
    ];
    wait_for("the jobs to run", || jobs.iter().all(|j| squeue(j, "%T") == "RUNNING"));
    slurm.slow_by("squeue", 12);
    let before = slurm.calls("squeue");
    crate::cluster::wait_until(30, "a cycle's squeue under way", || match slurm.calls("squeue") > before {
        true => Ok(()),
        false => Err(format!("{} squeue calls", slurm.calls("squeue"))),
    });
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let granting = {
        let (stop, config) = (stop.clone(), site.config.clone());
        let user = alice.to_string();
        std::thread::spawn(move || {
            let mut grants = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let args = ["--config", config.to_str().unwrap(), "admin", "grant", &user, "0.001", "--reason", "t"];
                let out = std::process::Command::new(crate::common::bin("accountd")).args(args).output().unwrap();
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                grants += 1;
                std::thread::sleep(Duration::from_millis(500));
            }
            grants
        })
    };
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let mut took = Vec::new();
    while std::time::Instant::now() < until {
        for user in [alice, bob] {
            let started = std::time::Instant::now();
            let out = site.sbalance(Some(user), &["-P", "-n", "-o", "User"]);
            took.push(started.elapsed());
            assert_eq!((out.code, out.stdout.trim()), (0, user), "{}", out.stderr);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let grants = granting.join().unwrap();
    took.sort();
    let ms: Vec<u128> = took.iter().map(|d| d.as_millis()).collect();
    let p90 = ms[ms.len() * 9 / 10];
    eprintln!("sbalance answers (ms): median {}, p90 {p90}, max {}", ms[ms.len() / 2], ms[ms.len() - 1]);
    assert!(p90 < 100 && ms[ms.len() - 1] < 1000, "sbalance answers (ms, sorted): {ms:?}");
    assert!(took.len() >= 40 && grants >= 10, "{} sbalance, {grants} grants", took.len());
    let log = site.log();
    assert!(log.contains("charge cycle ("), "no charge cycle ran: {}", crate::cluster::log_tail(&log, 20));
    slurm.set("squeue", "slow", false);
    cancel(&jobs.iter().collect::<Vec<_>>());
}
