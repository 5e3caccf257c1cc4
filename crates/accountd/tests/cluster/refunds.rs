//! Automatic refunds on the real cluster: alice's run on a GPU that reports a hardware XID is taken
//! off it (gputokens drains the node and requeues the job) and refunded once, with the cause in
//! her history, statement and status page; bob's runs that end by themselves (exit 1, time limit)
//! or by his own `scontrol requeue` are charged in full.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster::{charge_cycles, sacct, sbatch, serial, wait_charge_cycles, wait_finished, wait_until};
use crate::common::{run_as, Site};
use crate::health::{drained, node, settle, Agent, Gpus};
use crate::preemption::{cancel, squeue, wait_for};
use crate::status_page::{page_of, proxy_settings};

/// Resumes `vm` however the test ends: other tests share the node.
struct ResumeNode;

impl Drop for ResumeNode {
    fn drop(&mut self) {
        run_as(None, Path::new("/usr/bin/scontrol"), &["update", "nodename=vm", "state=resume"]);
    }
}

/// The GPU index Slurm gave a running one-GPU job (`scontrol show job -d`: `IDX:6`).
fn gpu_index(job: &str) -> u32 {
    let detail = run_as(None, Path::new("/usr/bin/scontrol"), &["show", "job", "-d", job]).ok().stdout;
    let idx = detail.split("IDX:").nth(1).unwrap_or_else(|| panic!("no IDX in:\n{detail}"));
    idx.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

/// sacct's run rows of `job` (`sacct -D`): State per run, oldest first.
fn run_states(job: &str) -> Vec<String> {
    sacct(&["-j", job, "-X", "-D", "-n", "-P", "-o", "State"]).lines().map(str::to_string).collect()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_run_lost_to_a_gpu_fault_is_refunded_once_and_runs_that_end_by_themselves_are_not() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let _resume = ResumeNode;
    let (web, _secret) = proxy_settings();
    let site = Site::start(
        "",
        &format!("[slurm]\nfirst_lookback = \"1s\"\n[intervals]\ncharge = \"2s\"\n[web]\nallow_http = true\n{web}"),
    );
    // bob: one run hits its time limit, one exits 1, one he requeues himself (the last two after
    // the agent's report: a job that ends while the agent reads the node's job records is refused).
    let timeout = sbatch(bob, &["--time=1", "--gres=gpu:rtx2080:1", "--wrap", "sleep 300"]);
    let requeued = sbatch(bob, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 300"]);
    let alices = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("alice's and bob's jobs to run", || {
        squeue(&alices, "%T") == "RUNNING" && squeue(&requeued, "%T") == "RUNNING"
    });
    // The service's cycles charge what alice's run and bob's own requeued one have run so far.
    wait_until(60, "alice's and bob's running jobs charged", || {
        // (A user's history is refused while the ledger has no entry of theirs.)
        let charged = |user: &str, job: &str| {
            let out = site.sbalance(Some(user), &["--history", "100", "-P", "-n"]);
            let rows = out.stdout.lines().map(|l| l.split('|').collect::<Vec<_>>());
            rows.into_iter().any(|f| f.len() > 4 && f[1] == "charge" && f[4] == job)
        };
        match (charged(alice, &alices), charged(bob, &requeued)) {
            (true, true) => Ok(()),
            seen => Err(format!(
                "charged (alice {alices}, bob {requeued}): {seen:?}; {}",
                site.log().lines().last().unwrap_or_default()
            )),
        }
    });

    // alice's GPU falls off the bus: the node is drained and her job requeued off it. The agent
    // runs (XIDs are events it registers for on its first sample).
    let index = gpu_index(&alices);
    let state = site.path("nvml-state.toml");
    let mut gpus = Gpus::new();
    std::fs::write(&state, gpus.text()).unwrap();
    let agent = Agent::start(&site, &state);
    settle(&site, &state, &mut gpus);
    gpus.xids[index as usize].push(79);
    settle(&site, &state, &mut gpus);
    wait_for("alice's job requeued", || squeue(&alices, "%T") != "RUNNING");
    drop(agent);
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(actions.contains(&format!("fault-requeue {alices}")), "{actions}");
    run_as(None, Path::new("/usr/bin/scontrol"), &["update", "nodename=vm", "state=resume"]).ok();
    let fails = sbatch(bob, &["--gres=gpu:rtx2080:1", "--wrap", "sleep 3; exit 1"]);
    let own = run_as(Some(bob), Path::new("/usr/bin/scontrol"), &["requeue", &requeued]);
    assert_eq!(own.code, 0, "bob may requeue his own job: {}", own.stderr);
    cancel(&[&requeued]);
    assert_eq!(wait_finished(&fails), "FAILED");
    assert_eq!(wait_finished(&timeout), "TIMEOUT");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !run_states(&alices).contains(&"REQUEUED".to_string())
        || !run_states(&requeued).contains(&"REQUEUED".to_string())
    {
        assert!(Instant::now() < deadline, "runs not recorded: {:?} {:?}", run_states(&alices), run_states(&requeued));
        std::thread::sleep(Duration::from_millis(500));
    }

    // Charged and refunded by the service's own cycle; then a tick (and its cycles) add nothing.
    let refunds = |user: &str| -> Vec<(String, String, String, String)> {
        site.history_rows(user).into_iter().filter(|(kind, ..)| kind == "refund").collect()
    };
    wait_for("alice's lost run refunded", || !refunds(alice).is_empty());
    // Later charge cycles read the same runs again: none refunds them again.
    wait_charge_cycles(&site, charge_cycles(&site), 2);
    let first = refunds(alice);
    assert_eq!(first.len(), 1, "{:?}", site.history_rows(alice));
    let (_, amount, job, reason) = &first[0];
    assert_eq!(job, &alices);
    assert!(
        reason.starts_with(&format!("refund: run of job {alices} from "))
            && reason.contains(&format!("lost to a GPU fault (gputokens: GPU {index} ")),
        "{reason}"
    );
    // What her run was charged came back: her job's only run, the job now waiting.
    let charged: gputokens::Tokens = site
        .history_rows(alice)
        .iter()
        .filter(|(kind, _, job, _)| kind == "charge" && job == &alices)
        .map(|(_, amount, ..)| -amount.parse::<gputokens::Tokens>().unwrap())
        .sum();
    assert_eq!(amount.parse::<gputokens::Tokens>().unwrap(), charged, "{:?}", site.history_rows(alice));
    let before = site.balance(alice);
    site.accountd(None, &["tick"]).ok();
    assert_eq!(refunds(alice).len(), 1, "refunded once");
    assert_eq!(site.balance(alice), before, "nothing more");

    // bob's runs are charged in full: no refund, each job charged.
    assert!(refunds(bob).is_empty(), "{:?}", site.history_rows(bob));
    let charged: Vec<String> =
        site.history_rows(bob).into_iter().filter(|(k, ..)| k == "charge").map(|(_, _, job, _)| job).collect();
    for job in [&timeout, &fails, &requeued] {
        assert!(charged.contains(job), "job {job} charged: {charged:?}");
    }
    assert!(site.balance(bob).parse::<f64>().unwrap() < 100.0);

    // The statement and the status page name the cause.
    let month = chrono::Local::now().format("%Y-%m").to_string();
    let statement = site.sbalance(Some(alice), &["--statement", &month]).ok().stdout;
    assert!(
        statement.lines().any(|l| l.contains(&format!("refund of job {alices}")) && l.contains("lost to a GPU fault")),
        "{statement}"
    );
    let page = page_of(&site, alice);
    let events = page["events"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["event"] == "refunded" && e["what"].as_str().unwrap().contains("GPU fault")),
        "{page}"
    );
    assert!(events.iter().any(|e| e["event"] == "failing GPU"), "{page}");
    let metrics = crate::common::http_get(&format!("{}/metrics", site.http_url())).1;
    assert!(metrics.contains("gputokens_refunds_total{cause=\"gpu_fault\"} 1"), "{metrics}");
    cancel(&[&alices]);
}

/// The audit's H2: alice's own code keeps her GPU throttling for heat past `temperature_for`. The
/// node is drained (no new jobs on a GPU that hot), but her job runs on (a throttled GPU still
/// computes) and, cancelled by her afterwards, is charged in full: heat is no refund any user can
/// make for themselves.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_gpu_its_job_keeps_hot_drains_the_node_but_requeues_and_refunds_nothing() {
    let cluster = serial();
    let alice_user = cluster.alice;
    let _resume = ResumeNode;
    let site = Site::start(
        "",
        "[slurm]\nfirst_lookback = \"1s\"\n[intervals]\ncharge = \"2s\"\n[health]\ntemperature_for = \"3s\"\n",
    );
    let alice = sbatch(alice_user, &["--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("alice's job to run", || squeue(&alice, "%T") == "RUNNING");
    let index = gpu_index(&alice) as usize;
    let state = site.path("nvml-state.toml");
    let mut gpus = Gpus::new();
    std::fs::write(&state, gpus.text()).unwrap();
    let agent = Agent::start(&site, &state);
    settle(&site, &state, &mut gpus);
    gpus.slowed_for_heat[index] = true;
    wait_until(60, "vm drained for heat", || {
        settle(&site, &state, &mut gpus);
        if drained() {
            Ok(())
        } else {
            Err(format!("{:?}", node()))
        }
    });
    drop(agent);
    assert!(node().1.starts_with(&format!("gputokens: GPU {index} has slowed down for heat")), "{:?}", node());
    assert_eq!(squeue(&alice, "%T"), "RUNNING", "her job runs on: heat requeues nothing");
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(!actions.contains("fault-requeue") && !actions.contains("fault-cancel"), "{actions}");
    assert!(site.log().contains("the jobs on it run on (heat requeues nothing)"), "{}", site.log());

    // She cancels it herself: charged in full, never refunded, however many cycles read it.
    cancel(&[&alice]);
    assert!(wait_finished(&alice).starts_with("CANCELLED"));
    wait_until(60, "alice's cancelled job charged", || {
        let charged = site.history_rows(alice_user).iter().any(|(kind, _, job, _)| kind == "charge" && job == &alice);
        if charged {
            Ok(())
        } else {
            Err(format!("{:?}", site.history_rows(alice_user)))
        }
    });
    wait_charge_cycles(&site, charge_cycles(&site), 2);
    let refunds: Vec<_> = site.history_rows(alice_user).into_iter().filter(|(kind, ..)| kind == "refund").collect();
    assert!(refunds.is_empty(), "{refunds:?}");
}
