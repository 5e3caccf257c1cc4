//! Preemption on the real test cluster: debtors' GPU jobs are requeued only when users with a
//! balance ≥ 0 wait for the same GPU type; failing GPUs drain their node.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster::{sbatch, serial, Cluster};
use crate::common::{run_as, Site};

/// A site that reads the live cluster and may preempt at once (no minimum runtime).
/// A site whose serve has finished its start-up cycles: its next check cycle is 30 minutes away, so
/// the test's own `tick` is the only one that preempts. (Its start-up check cycle, late on a loaded
/// machine, once came after a test's adjustment and preempted first: the test's tick then found
/// "1 GPU jobs running, 0 preempted", the other job already cancelled with gputokens' comment.)
pub(crate) fn site(extra: &str) -> Site {
    site_with_slurm("", extra)
}

/// [`site`], with more `[slurm]` settings.
fn site_with_slurm(slurm: &str, extra: &str) -> Site {
    let site = Site::start(
        "",
        &format!("[slurm]\nfirst_lookback = \"1s\"\n{slurm}\n[preemption]\nmin_runtime = \"0s\"\n{extra}"),
    );
    crate::cluster::wait_until(60, "serve's start-up check cycle", || match site.log().contains("check cycle (") {
        true => Ok(()),
        false => Err(crate::cluster::log_tail(&site.log(), 5)),
    });
    site
}

pub(crate) fn squeue(job: &str, format: &str) -> String {
    run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-j", job, "-o", format]).ok().stdout.trim().to_string()
}

pub(crate) fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

pub(crate) fn cancel(jobs: &[&String]) {
    let ids: Vec<&str> = jobs.iter().map(|j| j.as_str()).collect();
    run_as(None, Path::new("/usr/bin/scancel"), &ids).ok();
    for job in jobs {
        wait_for(&format!("job {job} to leave the queue"), || {
            let state = squeue(job, "%T");
            state.is_empty() || state == "COMPLETING"
        });
    }
}

/// alice (balance `alice_balance`) holds both a6000s with two jobs, bob's a6000 job waits: the
/// test's own alice and bob (`serial()`).
fn both_a6000s_held_by_alice(site: &Site, cluster: &Cluster, alice_balance: &str) -> (String, String, String) {
    let (alice, bob) = (cluster.alice, cluster.bob);
    site.accountd(None, &["admin", "adjust", alice, alice_balance, "--reason", "test"]).ok();
    let older = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    wait_for("alice's first job to run", || squeue(&older, "%T") == "RUNNING");
    std::thread::sleep(Duration::from_secs(1));
    // The user's own comment stays; the preemption's reason is appended to it.
    let younger = sbatch(alice, &["--gres=gpu:a6000:1", "--comment=sweep 7", "--wrap", "sleep 120"]);
    wait_for("alice's second job to run", || squeue(&younger, "%T") == "RUNNING");
    let waiting = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    wait_for("bob's job to wait for resources", || squeue(&waiting, "%T %r") == "PENDING Resources");
    (older, younger, waiting)
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn contended_a6000_requeues_the_debtors_youngest_job() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = site("");
    let (older, younger, waiting) = both_a6000s_held_by_alice(&site, &cluster, "-105");
    // About -5: the site's own charge cycle at start-up may already have charged a second or two.
    let balance = site.balance(alice);
    assert!(balance.starts_with("-5"), "{balance}");
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 preempted"), "{}", tick.stdout);

    wait_for("bob's job to start", || squeue(&waiting, "%T") == "RUNNING");
    assert_eq!(squeue(&older, "%T"), "RUNNING", "alice's other job keeps running");
    assert_eq!(squeue(&younger, "%T"), "PENDING", "alice's youngest job was requeued");
    assert_eq!(squeue(&younger, "%k"), format!("sweep 7; gputokens: preempted, balance {balance}, a6000 contended"));
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(
        actions.contains("requeue") && actions.contains(&younger) && actions.contains("a6000 contended"),
        "{actions}"
    );
    cancel(&[&older, &younger, &waiting]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn solvent_holders_and_dry_runs_preempt_nothing() {
    let cluster = serial();
    let alice = cluster.alice;
    let solvent = site("");
    let (older, younger, waiting) = both_a6000s_held_by_alice(&solvent, &cluster, "-95");
    let tick = solvent.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("0 preempted"), "alice at +5 keeps her GPUs: {}", tick.stdout);

    let dry = site("dry_run = true\n");
    dry.accountd(None, &["admin", "adjust", alice, "-105", "--reason", "test"]).ok();
    let tick = dry.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 would preempt (dry run)"), "{}", tick.stdout);
    assert!(tick.stderr.contains(&format!("dry run: would requeue job {younger} of {alice}")), "{}", tick.stderr);
    std::thread::sleep(Duration::from_secs(1));
    for job in [&older, &younger] {
        assert_eq!(squeue(job, "%T"), "RUNNING", "job {job} untouched");
    }
    assert_eq!(squeue(&waiting, "%T"), "PENDING");
    cancel(&[&older, &younger, &waiting]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn contention_on_another_type_leaves_the_debtor_alone() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = site("");
    site.accountd(None, &["admin", "adjust", alice, "-105", "--reason", "test"]).ok();
    let debtor = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    let holder = sbatch(bob, &["--gres=gpu:rtx2080:4", "--wrap", "sleep 120"]);
    wait_for("both to run", || squeue(&debtor, "%T") == "RUNNING" && squeue(&holder, "%T") == "RUNNING");
    let waiting = sbatch(bob, &["--gres=gpu:rtx2080:1", "--wrap", "sleep 120"]);
    wait_for("bob's rtx2080 job to wait", || squeue(&waiting, "%T %r") == "PENDING Resources");
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("0 preempted"), "{}", tick.stdout);
    assert_eq!(squeue(&debtor, "%T"), "RUNNING");
    cancel(&[&debtor, &holder, &waiting]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn uncorrectable_ecc_error_drains_the_node_and_requeues_its_jobs() {
    let cluster = serial();
    let bob = cluster.bob;
    let site = site("");
    let job = sbatch(bob, &["--gres=gpu:rtx2080:4", "--wrap", "sleep 120"]);
    wait_for("bob's job to run", || squeue(&job, "%T") == "RUNNING");
    let mut state = String::new();
    for i in 0..8 {
        let ecc = if i == 3 { 2 } else { 0 };
        state += &format!(
            "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"GPU\"\nutil_gpu = 50\ntemp = 50\necc_uncorrected = {ecc}\n"
        );
    }
    let state = site.file("nvml-state.toml", &state);
    crate::agent::report_once(&crate::agent::agent_config(&site), &state);

    let sinfo = |format: &str| run_as(None, Path::new("/usr/bin/sinfo"), &["-h", "-n", "vm", "-o", format]).ok().stdout;
    let reason = sinfo("%E");
    let node_state = sinfo("%T");
    run_as(None, Path::new("/usr/bin/scontrol"), &["update", "nodename=vm", "state=resume"]).ok();
    assert!(node_state.starts_with("drain"), "node state {node_state}");
    assert_eq!(reason.trim(), "gputokens: GPU 3 has 2 uncorrectable ECC errors");
    assert_ne!(squeue(&job, "%T"), "RUNNING", "the job on the failing GPU was requeued");
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(actions.contains("drain") && actions.contains(&format!("fault-requeue {job}")), "{actions}");
    // A second report of the same failure does not drain again.
    crate::agent::report_once(&crate::agent::agent_config(&site), &state);
    let again = sinfo("%T");
    assert!(!again.starts_with("drain"), "drained again: {again}");
    cancel(&[&job]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_signal_and_grace_come_before_the_requeue() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = site("signal = \"USR1\"\ngrace = \"3s\"\n");
    site.accountd(None, &["admin", "adjust", alice, "-105", "--reason", "test"]).ok();
    let marks = tempfile::Builder::new().prefix("gputokens-signal-").tempdir().unwrap();
    std::fs::set_permissions(marks.path(), std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let mark = marks.path().join("got-usr1");
    // The job checkpoints (writes a mark) on USR1 and keeps running.
    let script = format!("trap 'touch {}' USR1; while true; do sleep 1; done", mark.display());
    let older = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    wait_for("alice's first job to run", || squeue(&older, "%T") == "RUNNING");
    std::thread::sleep(Duration::from_secs(1));
    let younger = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", &script]);
    wait_for("alice's second job to run", || squeue(&younger, "%T") == "RUNNING");
    let waiting = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    wait_for("bob's job to wait", || squeue(&waiting, "%T %r") == "PENDING Resources");

    let started = Instant::now();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 preempted"), "{}", tick.stdout);
    // tick waits out the grace before it exits, and only then requeues.
    assert!(started.elapsed() >= Duration::from_secs(3), "took {:?}", started.elapsed());
    assert!(mark.exists(), "the job got USR1 before it was requeued");
    wait_for("bob's job to start", || squeue(&waiting, "%T") == "RUNNING");
    assert_eq!(squeue(&younger, "%T"), "PENDING");
    cancel(&[&older, &younger, &waiting]);
}

/// The audit's open item: one victim whose `scancel --signal` fails (it ended meanwhile) spared
/// every victim after it until the next cycle. bob waits for both a6000s alice holds: the first
/// victim's signal fails, the second is still signalled and requeued.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_victim_that_cannot_be_signalled_spares_no_other() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let wrappers = crate::wrappers::Wrappers::new();
    let site = site_with_slurm(&format!("bin_dir = \"{}\"", wrappers.bin_dir()), "signal = \"USR1\"\ngrace = \"1s\"\n");
    site.accountd(None, &["admin", "adjust", alice, "-105", "--reason", "test"]).ok();
    let older = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    wait_for("alice's first job to run", || squeue(&older, "%T") == "RUNNING");
    std::thread::sleep(Duration::from_secs(1));
    let younger = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    wait_for("alice's second job to run", || squeue(&younger, "%T") == "RUNNING");
    let waiting = sbatch(bob, &["--gres=gpu:a6000:2", "--wrap", "sleep 120"]);
    wait_for("bob's job to wait", || squeue(&waiting, "%T %r") == "PENDING Resources");

    // The youngest is the first victim: its signal fails.
    wrappers.fail_once("scancel", &format!("--signal=USR1 -- {younger}"));
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("2 preempted") && tick.stdout.contains("1 of them failed"), "{}", tick.stdout);
    wait_for("alice's older job to be requeued", || squeue(&older, "%T") == "PENDING");
    assert_eq!(squeue(&younger, "%T"), "RUNNING", "its signal failed: left for the next cycle");
    cancel(&[&older, &younger, &waiting]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn at_floor_cancel_ends_the_running_jobs_of_a_user_at_the_floor() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = site("at_floor = \"cancel\"\n");
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    let other = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 120"]);
    wait_for("both to run", || squeue(&job, "%T") == "RUNNING" && squeue(&other, "%T") == "RUNNING");
    site.accountd(None, &["admin", "adjust", alice, "-112", "--reason", "test"]).ok();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    // (Should it find one job, the JSON says whether gputokens had cancelled the other: `comment`.)
    assert!(
        tick.stdout.contains("2 GPU jobs running") && tick.stdout.contains("1 preempted"),
        "{}
{}",
        tick.stdout,
        {
            let json = run_as(None, Path::new("/usr/bin/squeue"), &["--json"]).stdout;
            let jobs: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
            let ours = |j: &&serde_json::Value| {
                [&job, &other].iter().any(|id| j["job_id"].as_u64().is_some_and(|n| n.to_string() == **id))
            };
            let shown: Vec<_> = jobs["jobs"].as_array().into_iter().flatten().filter(ours).collect();
            serde_json::to_string_pretty(&shown).unwrap_or_default()
        }
    );
    wait_for("alice's job to end", || squeue(&job, "%T").is_empty());
    assert_eq!(squeue(&other, "%T"), "RUNNING");
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(actions.contains("is at the floor") && actions.contains(&job), "{actions}");
    cancel(&[&other]);
}

/// Eight idle fake GPUs but the a6000s (6 and 7) at `percent`, each with one process of `pids`.
fn a6000s_at(percent: u32, pids: [u32; 2]) -> String {
    let mut state = String::new();
    for i in 0..8 {
        let util = if i >= 6 { percent } else { 0 };
        state += &format!(
            "[[gpu]]\nuuid = \"GPU-{i:08}\"\nname = \"NVIDIA GPU\"\nutil_gpu = {util}\nutil_mem = 0\nmem_used = 0\n\
             mem_total = 25769803776\ntemp = 40\npower_mw = 50000\n"
        );
    }
    for (gpu, pid) in [6, 7].iter().zip(pids) {
        state += &format!("[[process]]\npid = {pid}\ngpu = {gpu}\nused_memory = 1048576\nsm_util = {percent}\n");
    }
    state
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_busy_test_preempts_only_where_the_gpus_are_busy() {
    use crate::agent::{agent_config, pid_of, report_once};
    let cluster = serial();
    let site = site("busy_percent = 55\n");
    let (older, younger, waiting) = both_a6000s_held_by_alice(&site, &cluster, "-105");
    let agent = agent_config(&site);
    let pids = [pid_of(&older), pid_of(&younger)];

    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("0 preempted, a6000 not busy (no utilization samples)"), "{}", tick.stdout);
    report_once(&agent, &site.file("low.toml", &a6000s_at(10, pids)));
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("0 preempted, a6000 not busy (10% < busy_percent 55)"), "{}", tick.stdout);
    assert_eq!(squeue(&waiting, "%T"), "PENDING");

    // Busy now: (10 + 100 + 100) / 3 = 70 % on average.
    let high = site.file("high.toml", &a6000s_at(100, pids));
    report_once(&agent, &high);
    report_once(&agent, &high);
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 preempted"), "{}", tick.stdout);
    assert!(!tick.stdout.contains("not busy"), "{}", tick.stdout);
    wait_for("bob's job to start", || squeue(&waiting, "%T") == "RUNNING");
    assert_eq!(squeue(&younger, "%T"), "PENDING", "alice's youngest job was requeued");
    cancel(&[&older, &younger, &waiting]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_owner_of_a_preempted_job_is_notified_once() {
    let cluster = serial();
    let alice = cluster.alice;
    // A capture script as the [notify] command: argv, environment and stdin of each run.
    let capture = tempfile::Builder::new().prefix("gputokens-it-notify-").tempdir().unwrap();
    let d = capture.path().display();
    let script = capture.path().join("notify.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ echo \"ARGS: $*\"; echo \"JOB: $GPUTOKENS_JOB\"; echo \"STDIN: $(cat)\"; }} >> {d}/captured\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let site = site(&format!("[notify]\ncommand = [\"{}\"]\n", script.display()));
    let (older, younger, waiting) = both_a6000s_held_by_alice(&site, &cluster, "-105");
    site.accountd(None, &["tick", "--skip-charge"]).ok();
    wait_for("bob's job to start", || squeue(&waiting, "%T") == "RUNNING");
    site.accountd(None, &["tick", "--skip-charge"]).ok();

    let captured = std::fs::read_to_string(capture.path().join("captured")).unwrap_or_default();
    let preempted = format!("ARGS: -- preempted {alice}");
    let preempted: Vec<&str> = captured.lines().filter(|l| *l == preempted).collect();
    assert_eq!(preempted.len(), 1, "one notice per preemption, not repeated by the second tick: {captured}");
    assert!(captured.contains(&format!("JOB: {younger}")), "{captured}");
    assert!(captured.contains(&format!("STDIN: gputokens: your GPU job {younger} was requeued")), "{captured}");
    // alice's balance (about -5) is an overdraft crossing of its own, told once too.
    let overdraft = format!("ARGS: -- overdraft {alice}");
    assert_eq!(captured.lines().filter(|l| *l == overdraft).count(), 1, "{captured}");
    cancel(&[&older, &younger, &waiting]);
}
