//! A node cut off from the controller for a while, and a node whose user floods accountd.

use std::time::{Duration, Instant};

use crate::{last_report, metric, wait_seen, wait_until, Cluster, Settings};

fn now() -> f64 {
    chrono::Utc::now().timestamp() as f64
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_a_link_cut_for_two_minutes_charges_once_drains_nothing_and_the_gap_counts_as_used() {
    // Slurm's own SlurmdTimeout (300 s, its default) outlasts the cut: the job keeps running.
    let cluster = Cluster::up(Settings {
        slurmd_timeout: Some(300),
        config: "[usage]\ncharge_basis = \"measured\"\nmeasured_min_fraction = 0.25\n",
        ..Settings::default()
    });
    let job = cluster.sbatch("alice", &["-w", "node2", "--gres=gpu:rtx3090:1", "--wrap", "sleep 170"]);
    cluster.wait_running(&job);
    // The job's process on node2's GPUs, which the fake NVML shows 50 % busy.
    let pid = cluster.job_pid("node2", &job);
    cluster.nvml_processes("node2", &[(pid, 0), (pid, 1)]);
    let series = format!("gputokens_job_gpu_memory_bytes{{job=\"{job}\",user=\"alice\",node=\"node2\"}}");
    wait_until(30, "node2's agent mapping the job", || {
        metric(&cluster.http_get("/metrics"), &series).filter(|m| *m > 2e6)
    });
    // Ten seconds of its reports measure the job (at 50 %) before the cut.
    let mapped_at = metric(&cluster.http_get("/metrics"), &last_report("node2")).expect("node2 reported");
    wait_seen(60, "node2's agent reporting the job for 10 s", || {
        let at = metric(&cluster.http_get("/metrics"), &last_report("node2"));
        at.filter(|at| *at >= mapped_at + 10.0).ok_or(format!("last report at {at:?}, the first at {mapped_at}"))
    });

    cluster.mn(&["cut", "node2"]).ok();
    let cut_at = now();
    // Two minutes of the job's run, as slurmctld counts it, without node2.
    let ran_at_cut = cluster.time_used(&job).expect("the job runs");
    wait_seen(240, "the job to run two minutes while node2 is cut off", || {
        let used = cluster.time_used(&job);
        used.filter(|used| *used >= ran_at_cut + 120).ok_or(format!("time used {used:?} s, {ran_at_cut} s at the cut"))
    });
    let silent = metric(&cluster.http_get("/metrics"), &last_report("node2")).unwrap();
    assert!(silent <= cut_at + 2.0, "a report from a cut node was accepted at {silent} (cut at {cut_at})");
    cluster.mn(&["heal", "node2"]).ok();
    let healed_at = now();
    wait_until(30, "node2's agent accepted again after the heal", || {
        (metric(&cluster.http_get("/metrics"), &last_report("node2"))? > healed_at).then_some(())
    });

    assert_eq!(cluster.job_state(&job), "RUNNING", "the job survived the cut");
    let segments = cluster.wait_recorded(&job);
    assert_eq!(segments.len(), 1, "{segments:?}");
    assert_eq!(segments[0].state, "COMPLETED", "{segments:?}");
    let allocation = segments[0].cost();
    // Charged while it ran; settled from its sacct row once that is final: the amount stops moving
    // over a whole charge cycle.
    let mut last = cluster.charged("alice", &job).0;
    let charged = wait_seen(180, "the job's charge settled", || {
        cluster.wait_charge_cycles(cluster.charge_cycles(), 1);
        let now = cluster.charged("alice", &job).0;
        let seen = format!("charged {now}, {last} a cycle before");
        let settled = now == last && now > gputokens::Tokens::ZERO;
        last = now;
        settled.then_some(now).ok_or(seen)
    });
    cluster.wait_charge_cycles(cluster.charge_cycles(), 2);
    assert_eq!(cluster.charged("alice", &job).0, charged, "charged again by later cycles");
    // Measured at 50 % while reports came in; the two minutes without reports count as fully used,
    // so the charge is well above half the allocation's price, and never above it.
    let fraction = charged.micro() as f64 / allocation.micro() as f64;
    assert!((0.7..=1.0).contains(&fraction), "charged {charged} of an allocation worth {allocation}: {fraction}");

    let states = cluster.on("ctl1", None, &["sinfo", "-h", "-N", "-o", "%N %T"]).ok().stdout;
    assert!(!states.contains("drain") && !states.contains("down"), "{states}");
    let actions = cluster.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(!actions.contains("drain"), "{actions}");
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_a_job_holding_a_thousand_connections_does_not_silence_its_nodes_agent_or_anyone_else() {
    let cluster = Cluster::up(Settings::default());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/hold_connections.pl");
    // alice's job on node1 opens 1,000 connections to accountd from node1's address, reopening
    // every one accountd sheds, and holds them idle.
    // (Its stdin a pipe that stays open, without data, for as long as it should hold them.)
    let hold = format!("sleep 45 | perl {script} --reopen tcp 10.78.0.2:9817 10.78.0.11 1000");
    let job = cluster.sbatch("alice", &["-w", "node1", "--wrap", &hold]);
    cluster.wait_running(&job);
    let held = wait_seen(60, "alice's job holding at least 64 connections to accountd", || {
        let held = cluster.on("node1", None, &["sh", "-c", "ss -Htn state established dst 10.78.0.2:9817 | wc -l"]);
        let held: usize = held.ok().stdout.trim().parse().unwrap();
        (held >= 64).then_some(held).ok_or(format!("{held} connections"))
    });
    assert!(held >= 64, "alice's job holds {held} connections");

    // For 20 s: node1's agent keeps reporting within its interval (2 s), and /metrics and sbalance
    // answer at once.
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let started = Instant::now();
        let metrics = cluster.http_get("/metrics");
        assert!(started.elapsed() < Duration::from_secs(3), "/metrics took {:?}", started.elapsed());
        let age = now() - metric(&metrics, &last_report("node1")).expect("node1 reported");
        assert!(age <= 5.0, "node1's agent last reported {age} s ago");
        let started = Instant::now();
        let balance = cluster.on("ctl1", Some("bob"), &["sbalance"]).ok();
        assert!(started.elapsed() < Duration::from_secs(3), "sbalance took {:?}", started.elapsed());
        assert!(balance.stdout.contains("bob"), "{}", balance.stdout);
        std::thread::sleep(Duration::from_secs(1));
    }
    cluster.on("ctl1", None, &["scancel", &job]).ok();
}
