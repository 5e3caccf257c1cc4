//! accountd's charge cycle against the real test cluster: sacct (slurmdbd) for finished jobs,
//! squeue (slurmctld) for running ones. Prices are high so that seconds matter.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::by_hand::gpu_cost as cost;
use gputokens::Tokens;

use crate::cluster::{
    charge_cycles, sacct, sbatch, serial, state_and_time_used, wait_charge_cycles, wait_finished, wait_ran,
};
use crate::common::Site;

/// 1 token per a6000-second, 0.5 per rtx2080-second, 0.25 per rtx3090-second.
pub const PRICES: &str = "[prices]\nrtx2080 = 1800\nrtx3090 = 900\na6000 = 3600\n";
/// Read only what happens from the site's first tick on.
/// Preemption is off: these tests are about charging, and their users may run into debt.
pub const LIVE: &str = "[slurm]\nfirst_lookback = \"1s\"\nreread = \"1m\"\n[preemption]\nenabled = false\n";

/// A site that charges from the live cluster, starting now (call with the `serial` guard held): jobs
/// the previous test saw end are in its first sacct window, but ended before it began charging.
pub fn live_site() -> Site {
    let site = Site::with_prices("", PRICES, LIVE);
    site.accountd(None, &["tick"]).ok();
    site
}

pub fn elapsed(job: &str) -> u64 {
    sacct(&["-j", job, "-X", "-n", "-P", "-o", "ElapsedRaw"]).trim().parse().unwrap()
}

pub fn balance(site: &Site, user: &str) -> Tokens {
    site.balance(user).parse().unwrap()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn finished_jobs_are_charged_exactly_once() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = live_site();
    let big = sbatch(alice, &["--gres=gpu:a6000:2", "--wrap", "sleep 20"]);
    let small = sbatch(alice, &["--gpus=rtx2080:4", "--wrap", "sleep 10"]);
    let cpu = sbatch(bob, &["--wrap", "sleep 5"]);
    for job in [&big, &small, &cpu] {
        assert_eq!(wait_finished(job), "COMPLETED");
    }
    let out = site.accountd(None, &["tick"]).ok();
    assert!(out.stdout.contains("charge entries"), "{}", out.stdout);

    // Rounding: each job's cost is rounded up to the next micro-token.
    let expected = cost(Tokens::whole(3600), 2 * elapsed(&big)) + cost(Tokens::whole(1800), 4 * elapsed(&small));
    assert_eq!(balance(&site, alice), Tokens::whole(100) - expected);
    assert_eq!(balance(&site, bob), Tokens::whole(100));

    let again = site.accountd(None, &["tick"]).ok();
    assert!(again.stdout.contains(": 0 charge entries"), "{}", again.stdout);
    assert_eq!(balance(&site, alice), Tokens::whole(100) - expected);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn running_job_is_charged_every_cycle_and_settled_at_its_end() {
    let cluster = serial();
    let bob = cluster.bob;
    let site = live_site();
    let job = sbatch(bob, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 14"]);
    let mut seen = vec![Tokens::whole(100)];
    let mut ran = 0;
    for _ in 0..2 {
        // Two seconds more than the last tick can have seen, as slurmctld counts them.
        wait_ran(&job, ran + 2);
        site.accountd(None, &["tick"]).ok();
        seen.push(balance(&site, bob));
        ran = state_and_time_used(&job).1.unwrap_or_else(|| panic!("job {job} ended before the second tick"));
    }
    assert!(seen.windows(2).all(|w| w[1] < w[0]), "charged while running: {seen:?}");
    wait_finished(&job);
    site.accountd(None, &["tick"]).ok();
    assert_eq!(balance(&site, bob), Tokens::whole(100) - cost(Tokens::whole(900), elapsed(&job)));
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn killing_a_tick_midway_loses_and_doubles_nothing() {
    let cluster = serial();
    let alice = cluster.alice;
    let (control, victim) = (live_site(), live_site());
    let jobs: Vec<String> = ["gpu:a6000:1", "gpu:rtx2080:2", "gpu:rtx3090:1", "gpu:a6000:1", "gpu:rtx2080:1"]
        .iter()
        .map(|gres| sbatch(alice, &[&format!("--gres={gres}"), "--wrap", "sleep 1"]))
        .collect();
    for job in &jobs {
        wait_finished(job);
    }
    for delay_ms in (0..120).step_by(8) {
        let mut tick = std::process::Command::new(crate::common::bin("accountd"))
            .args(["--config", victim.config.to_str().unwrap(), "tick"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = tick.kill(); // SIGKILL
        let _ = tick.wait();
    }
    victim.accountd(None, &["tick"]).ok();
    control.accountd(None, &["tick"]).ok();
    assert_eq!(balance(&victim, alice), balance(&control, alice));
    assert!(balance(&control, alice) < Tokens::whole(100));
    let history = victim.accountd(None, &["admin", "history", alice, "--json"]).ok().stdout;
    let entries: serde_json::Value = serde_json::from_str(&history).unwrap();
    let charges = entries["entries"].as_array().unwrap().iter().filter(|e| e["kind"] == "charge").count();
    assert_eq!(charges, jobs.len(), "one charge entry per job: {history}");
    // Balances, history chains, job_payments and usage_days all still agree.
    victim.accountd(None, &["admin", "verify"]).ok();
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn serve_charges_on_its_own_and_metrics_show_it() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = Site::with_prices("", PRICES, &format!("{LIVE}[intervals]\ncharge = \"2s\"\n"));
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 3"]);
    wait_finished(&job);
    let expected = Tokens::whole(100) - cost(Tokens::whole(3600), elapsed(&job));
    let url = format!("{}/metrics", site.http_url());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = crate::common::http_get(&url);
        // The open /metrics names no user unless the site turns per_user_metrics on.
        assert!(!metrics.contains(alice), "{metrics}");
        let charged =
            metrics.lines().any(|l| l.starts_with("gputokens_charged_tokens_total{user=\"\",gpu_type=\"a6000\"}"));
        if charged && balance(&site, alice) == expected {
            // Charged in every cycle that saw it running and once when it ended: how many cycles
            // that was depends on scheduling, but an ended job is never charged again. Counted
            // once the cycle that made the balance final has surely also counted it in /metrics.
            wait_charge_cycles(&site, charge_cycles(&site), 1);
            let times = jobs_charged(&crate::common::http_get(&url).1);
            assert!(times >= 1, "{metrics}");
            wait_charge_cycles(&site, charge_cycles(&site), 2);
            let (_, later) = crate::common::http_get(&url);
            assert_eq!(jobs_charged(&later), times, "the ended job was charged again:\n{later}");
            assert_eq!(balance(&site, alice), expected);
            break;
        }
        assert!(Instant::now() < deadline, "accountd serve did not charge job {job}:\n{metrics}\n{}", site.log());
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn jobs_charged(metrics: &str) -> u64 {
    metrics.lines().find_map(|l| l.strip_prefix("gputokens_jobs_charged_total ")).map_or(0, |n| n.parse().unwrap())
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_requeued_run_segment_is_charged_once() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = live_site();
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--requeue", "--wrap", "sleep 60"]);
    wait_ran(&job, 3);
    crate::common::run_as(None, Path::new("/usr/bin/scontrol"), &["requeue", &job]).ok();
    // The first run ends as a REQUEUED row of `sacct -D`; the job then waits to be eligible again.
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let rows = sacct(&["-j", &job, "-X", "-D", "-n", "-P", "-o", "State,ElapsedRaw"]);
        if let Some(row) = rows.lines().find(|l| l.starts_with("REQUEUED|")) {
            break row.split('|').nth(1).unwrap().parse::<u64>().unwrap();
        }
        assert!(Instant::now() < deadline, "no REQUEUED segment of {job}: {rows}");
        std::thread::sleep(Duration::from_millis(500));
    };
    site.accountd(None, &["tick"]).ok();
    site.accountd(None, &["tick"]).ok();
    crate::common::run_as(None, Path::new("/usr/bin/scancel"), &[&job]).ok();
    assert_eq!(balance(&site, alice), Tokens::whole(100) - cost(Tokens::whole(3600), first));

    // The run's key in the ledger: its SLUID where sacct gives one (25.11+), else its start.
    let ledger = ledger::Ledger::open(&site.path("lib/ledger.sqlite"), Default::default()).unwrap();
    let keys = ledger.charged_runs(&job).unwrap();
    let release = std::env::var("GPUTOKENS_SLURM_RELEASE").unwrap_or("22.05".into());
    eprintln!("Slurm {release}: the requeued run of job {job} is charged as {keys:?}");
    // (an sacct before 25.11 refuses the column)
    let sacct_run = ["-j", &job, "-X", "-D", "-n", "-P", "-o", "State,Start,SLUID"];
    let run = crate::common::run_as(None, Path::new("/usr/bin/sacct"), &sacct_run).stdout;
    let sluid = run.lines().find_map(|l| l.strip_prefix("REQUEUED|")).and_then(|l| l.split('|').nth(1));
    match sluid.filter(|s| gputokens::slurm::sluid::is_sluid(s)) {
        Some(sluid) => assert_eq!(keys, [sluid], "{run}"),
        None => {
            assert!(!slurm_release_has_sluids(), "sacct gives no SLUID: {run}");
            assert!(keys.len() == 1 && keys[0].starts_with("start:"), "{keys:?}");
        }
    }
}

/// Slurm 25.11 gave every run its SLUID.
fn slurm_release_has_sluids() -> bool {
    crate::slurm_release::release() >= (25, 11)
}

/// Waits until every allocation of `job` (array tasks `N_i`) has ended and
/// slurmdbd's time window shows them all; returns (JobID, ElapsedRaw) per allocation.
fn wait_all_finished(job: &str, allocations: usize) -> Vec<(String, u64)> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let rows = sacct(&["-j", job, "-X", "-n", "-P", "-o", "JobID,State,ElapsedRaw"]);
        let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('|').collect()).collect();
        let ended = rows.len() == allocations && rows.iter().all(|r| r[1] == "COMPLETED");
        let window = sacct(&["-X", "-a", "-n", "-P", "-S", "now-10minutes", "-o", "JobID"]);
        if ended && rows.iter().all(|r| window.lines().any(|l| l == r[0])) {
            return rows.iter().map(|r| (r[0].to_string(), r[2].parse().unwrap())).collect();
        }
        assert!(Instant::now() < deadline, "job {job} not finished after 90 s: {rows:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn array_tasks_are_each_charged() {
    // (Heterogeneous jobs cannot run here: their components need nodes of their own, and the test
    // cluster has one. sacct lists them as `N+i` rows like array tasks; see the sacct unit tests.)
    let cluster = serial();
    let alice = cluster.alice;
    let site = live_site();
    let array = sbatch(alice, &["--array=0-2", "--gres=gpu:rtx2080:1", "--wrap", "sleep 3"]);
    let tasks = wait_all_finished(&array, 3);
    site.accountd(None, &["tick"]).ok();
    let charged: Tokens = tasks.iter().map(|(_, s)| cost(Tokens::whole(1800), *s)).fold(Tokens::ZERO, |a, b| a + b);
    assert_eq!(balance(&site, alice), Tokens::whole(100) - charged, "three tasks: {tasks:?}");
    let again = site.accountd(None, &["tick"]).ok();
    assert!(again.stdout.contains(": 0 charge entries"), "{}", again.stdout);
}

/// `reread` covers slurmdbd's lag, but never reaches before where the very first read began
/// (`first_lookback`): a job that ended before accountd started is not its to charge (the system it
/// replaced, or an import, accounted for it).
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn rereads_never_reach_before_the_first_read() {
    let cluster = serial();
    let bob = cluster.bob;
    let before = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    assert_eq!(wait_finished(&before), "COMPLETED");
    let site = Site::with_prices(
        "",
        PRICES,
        "[slurm]\nfirst_lookback = \"1s\"\nreread = \"1h\"\n[preemption]\nenabled = false\n",
    );
    for _ in 0..2 {
        let out = site.accountd(None, &["tick"]).ok();
        assert!(out.stdout.contains(": 0 charge entries"), "{}", out.stdout);
    }
    assert_eq!(balance(&site, bob), Tokens::whole(100), "job {before} ended before the first read");
    // A job that ends now is still charged, by a later read that looks back over it.
    let after = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_eq!(wait_finished(&after), "COMPLETED");
    site.accountd(None, &["tick"]).ok();
    assert_eq!(balance(&site, bob), Tokens::whole(100) - cost(Tokens::whole(3600), elapsed(&after)));
}

/// An online backup (`sqlite3 ... .backup`, as the README says) restored later loses nothing that
/// sacct still has: the job that ended after the backup is charged again, once, and the job before
/// it not twice.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_restored_backup_charges_again_what_ended_after_it() {
    let cluster = serial();
    let alice = cluster.alice;
    let mut site = live_site();
    let first = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    wait_finished(&first);
    site.accountd(None, &["tick"]).ok();
    let ledger = site.path("lib/ledger.sqlite");
    let backup = site.path("backup.sqlite");
    let dot_backup = format!(".backup '{}'", backup.display());
    crate::common::run_as(None, Path::new("/usr/bin/sqlite3"), &[ledger.to_str().unwrap(), &dot_backup]).ok();

    let second = sbatch(alice, &["--gres=gpu:rtx3090:2", "--wrap", "sleep 2"]);
    wait_finished(&second);
    site.accountd(None, &["tick"]).ok();
    let expected = Tokens::whole(100)
        - cost(Tokens::whole(3600), elapsed(&first))
        - cost(Tokens::whole(900), 2 * elapsed(&second));
    assert_eq!(balance(&site, alice), expected);

    // Restore: accountd stopped, the backup in place of the ledger and its WAL.
    assert!(site.stop().success());
    for stale in ["lib/ledger.sqlite-wal", "lib/ledger.sqlite-shm"] {
        let _ = std::fs::remove_file(site.path(stale));
    }
    std::fs::copy(&backup, &ledger).unwrap();
    let tick = site.accountd(None, &["tick"]).ok();
    assert!(tick.stdout.contains("1 charge entries"), "only the second job is charged again: {}", tick.stdout);
    let snapshot = std::fs::read_to_string(site.path("lib/balances.snapshot")).unwrap();
    let balances = gputokens::snapshot::parse(&snapshot).unwrap().balances;
    assert_eq!(balances[alice], expected);
    site.accountd(None, &["admin", "verify"]).ok();
}

/// `--gpus=1` names no type: slurmdbd records the type the job was given (AllocTRES lists it beside
/// the untyped count), and the job pays that type's price, not the highest.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn an_untyped_request_pays_for_the_type_it_was_given() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = live_site();
    let job = sbatch(alice, &["--gpus=1", "--wrap", "sleep 2"]);
    wait_finished(&job);
    let tres = sacct(&["-j", &job, "-X", "-n", "-P", "-o", "AllocTRES"]);
    let given = ["rtx2080", "rtx3090", "a6000", "a100_3g.20gb"]
        .into_iter()
        .find(|t| tres.contains(&format!("gres/gpu:{t}=1")))
        .unwrap_or_else(|| panic!("no typed GPU in AllocTRES: {tres}"));
    // A MIG slice: no a100 line prices it here, so the highest price.
    let price = match given {
        "rtx2080" => 1800,
        "rtx3090" => 900,
        _ => 3600,
    };
    site.accountd(None, &["tick"]).ok();
    assert_eq!(balance(&site, alice), Tokens::whole(100) - cost(Tokens::whole(price), elapsed(&job)));
    let history = site.accountd(None, &["admin", "history", alice]).ok().stdout;
    assert!(history.contains(&format!("1 × {given} for ")), "{history}");
}

/// A job on a MIG slice, under the GRES type name Slurm's AutoDetect=nvml gives it (the test
/// cluster's `a100_3g.20gb`), pays 3/7 of the a100 price without a `[prices]` line for the slice,
/// and alice's history names the slice and its share.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_mig_slice_job_pays_its_share_of_its_gpu_types_price() {
    let cluster = serial();
    let alice = cluster.alice;
    // 7000 per a100-hour: 3000 per hour of a 3g.20gb slice.
    let site = Site::with_prices("", &format!("{PRICES}a100 = 7000\n"), LIVE);
    site.accountd(None, &["tick"]).ok();
    let job = sbatch(alice, &["--gres=gpu:a100_3g.20gb:1", "--wrap", "sleep 4"]);
    assert_eq!(wait_finished(&job), "COMPLETED");
    let tres = sacct(&["-j", &job, "-X", "-n", "-P", "-o", "AllocTRES"]);
    assert!(tres.contains("gres/gpu:a100_3g.20gb=1"), "slurmdbd records the slice by its type: {tres}");
    site.accountd(None, &["tick"]).ok();
    let expected = cost(Tokens::whole(3000), elapsed(&job));
    assert_eq!(balance(&site, alice), Tokens::whole(100) - expected);
    let history = site.sbalance(Some(alice), &["--history", "10"]).ok().stdout;
    let line = history.lines().find(|l| l.contains(&job)).unwrap_or_else(|| panic!("no job {job} in:\n{history}"));
    assert!(line.contains("1 × a100_3g.20gb (3/7 of the a100 price)"), "{line}");
    // config check --slurm counts the slice priced from its GPU type.
    let check = site.accountd(None, &["config", "check", site.config.to_str().unwrap(), "--slurm"]).stdout;
    assert!(check.contains("[prices] prices MIG slices by their GPU type: a100_3g.20gb (3/7 of a100)"), "{check}");
}

/// The test node's GPUs an hour at [`PRICES`]: 4 rtx2080, 2 rtx3090, 2 a6000 and 2 a100_3g.20gb
/// slices (no price of their own nor of their GPU type: the highest, 3600).
const VM_GPUS_PER_HOUR: i64 = 4 * 1800 + 2 * 900 + 2 * 3600 + 2 * 3600;

/// `[prices] stranded = ["cpus"]` (issue 48): alice's job of 1 rtx3090 and all 16 CPUs of the node
/// leaves its other GPUs idle and pays for all of them, charged on its rtx3090 with a reason that
/// says so, and her statement's rtx3090 line says what of it they cost; bob's job of 1 rtx3090 and
/// 1 CPU (its fair share) pays its GPU's price. `config check --slurm` shows the node's shape.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_job_holding_every_cpu_of_its_node_pays_for_the_gpus_it_leaves_idle() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = Site::with_prices("", &format!("{PRICES}stranded = [\"cpus\"]\n"), LIVE);
    site.accountd(None, &["tick"]).ok();
    let greedy = sbatch(alice, &["--gres=gpu:rtx3090:1", "--cpus-per-task=16", "--wrap", "sleep 4"]);
    let fair = sbatch(bob, &["--gres=gpu:rtx3090:1", "--cpus-per-task=1", "--wrap", "sleep 4"]);
    for job in [&greedy, &fair] {
        assert_eq!(wait_finished(job), "COMPLETED");
    }
    let cpus = sacct(&["-j", &greedy, "-X", "-n", "-P", "-o", "AllocTRES"]);
    assert!(cpus.contains("cpu=16"), "alice's job holds every CPU of the node: {cpus}");
    site.accountd(None, &["tick"]).ok();

    let greedy_cost = cost(Tokens::whole(VM_GPUS_PER_HOUR), elapsed(&greedy));
    let fair_cost = cost(Tokens::whole(900), elapsed(&fair));
    assert_eq!(balance(&site, alice), Tokens::whole(100) - greedy_cost);
    assert_eq!(balance(&site, bob), Tokens::whole(100) - fair_cost);

    let history = site.sbalance(Some(alice), &["--history", "5", "-P", "-n"]).ok().stdout;
    let charge = history.lines().find(|l| l.contains(&format!("|{greedy}|"))).unwrap_or_else(|| panic!("{history}"));
    let why = format!(
        "1 × rtx3090 for {}s at {VM_GPUS_PER_HOUR}/GPU-hour; priced by its CPUs: 16 of the 16 on vm stand for 10 of \
         its 10 GPUs, so {}/GPU-hour is added for the 9 it leaves idle",
        elapsed(&greedy),
        VM_GPUS_PER_HOUR - 900
    );
    assert!(charge.contains(&why), "{charge}");
    let bobs = site.sbalance(Some(bob), &["--history", "5", "-P", "-n"]).ok().stdout;
    assert!(!bobs.contains("priced by"), "bob's fair share is priced by its GPU: {bobs}");

    // The month the charge was made in, as its entry's local date says (no calendar read here).
    let month = charge.get(..7).unwrap_or_else(|| panic!("{charge}")).to_string();
    let statement = site.sbalance(Some(alice), &["--statement", &month]).ok().stdout;
    let line = statement.lines().find(|l| l.contains("rtx3090, ")).unwrap_or_else(|| panic!("{statement}"));
    // What a GPU of 900/h would have cost is hers; the rest paid for the GPUs her CPUs left idle.
    let beyond = Tokens::from_micro(greedy_cost.micro() * (VM_GPUS_PER_HOUR - 900) / VM_GPUS_PER_HOUR);
    assert!(
        line.ends_with(&format!("{beyond} of it for the GPUs left idle by the CPUs or memory its jobs held")),
        "{statement}"
    );

    let check = site.accountd(None, &["config", "check", "--slurm"]).stdout;
    assert!(
        check.contains(&format!(
            "ok: [prices] stranded: vm: 16 CPUs, 8000 MB, 10 GPUs ({VM_GPUS_PER_HOUR}/h): a GPU job holding all of a \
             node's cpus pays {VM_GPUS_PER_HOUR}/h"
        )),
        "{check}"
    );
}
