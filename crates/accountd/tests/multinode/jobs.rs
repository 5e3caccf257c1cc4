//! Jobs across nodes and nodes that are lost: each run charged exactly once.

use crate::outage::all_charged_once;
use crate::{wait_seen, wait_until, Cluster, Settings};

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_a_job_across_two_nodes_is_charged_once_for_both_nodes_gpus() {
    let cluster = Cluster::up(Settings::default());
    let job = cluster.sbatch("alice", &["-N2", "-w", "node1,node3", "--gres=gpu:rtx3090:1", "--wrap", "srun sleep 20"]);
    let nodes = cluster.wait_running(&job);
    assert_eq!(nodes, ["node1", "node3"]);
    // Each node's agent sees the job's process on that node's rtx3090 (GPU 2 on both).
    for node in ["node1", "node3"] {
        let pid = cluster.job_pid(node, &job);
        cluster.nvml_processes(node, &[(pid, 2)]);
    }
    // The job's series (per-user metrics are on). Its memory is its processes' (7 MiB), not the GPU's.
    for node in ["node1", "node3"] {
        let series = format!("gputokens_job_gpu_memory_bytes{{job=\"{job}\",user=\"alice\",node=\"{node}\"}}");
        wait_until(30, &format!("{node}'s agent mapping job {job}'s process"), || {
            (crate::metric(&cluster.http_get("/metrics"), &series)? == crate::cluster::PROCESS_MEMORY as f64)
                .then_some(())
        });
    }
    let segments = cluster.wait_recorded(&job);
    assert_eq!(segments.len(), 1, "{segments:?}");
    assert_eq!(segments[0].gpus(), [("rtx3090".to_string(), 2)], "both nodes' GPUs in one record");
    all_charged_once(&cluster, &[("alice", job)]);
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_a_lost_node_requeues_its_job_each_run_is_charged_once_and_its_silent_agent_alerts() {
    let cluster = Cluster::up(Settings::default());
    let job = cluster.sbatch("alice", &["--requeue", "--gres=gpu:rtx3090:1", "--wrap", "sleep 30"]);
    let first = cluster.wait_running(&job);
    let lost = first[0].clone();
    // bob's job on the same node: a node failure refunds only where it took another user's run
    // too (a job alone could have brought its own node down).
    let bobs = cluster.sbatch("bob", &["--no-requeue", "-w", &lost, "--gres=gpu:1", "--wrap", "sleep 300"]);
    cluster.wait_running(&bobs);
    // Its agent has reported; then the node goes: cable out, every process in it killed.
    let report_of = |node: &str| crate::metric(&cluster.http_get("/metrics"), &crate::last_report(node));
    wait_until(30, &format!("{lost}'s agent reporting"), || report_of(&lost));
    // The run lasts a while before its node is lost: three seconds as slurmctld counts them.
    cluster.wait_ran(&job, 3);
    cluster.mn(&["kill-host", &lost]).ok();

    wait_until(90, &format!("{lost} DOWN"), || {
        let state = cluster.on("ctl1", None, &["sinfo", "-h", "-n", &lost, "-o", "%T"]).stdout;
        state.trim().starts_with("down").then_some(())
    });
    let second = wait_until(180, &format!("job {job} running again on another node"), || {
        let nodes = cluster.job_nodes(&job);
        (cluster.job_state(&job) == "RUNNING" && !nodes.is_empty() && nodes != first).then_some(nodes)
    });
    assert_ne!(second[0], lost);

    let segments = wait_until(180, &format!("both runs of {job} recorded"), || {
        let rows = cluster.wait_recorded(&job);
        (rows.len() == 2).then_some(rows)
    });
    assert_eq!(segments[0].state, "NODE_FAIL", "{segments:?}");
    assert_eq!(segments[0].nodes, lost, "{segments:?}");
    assert_eq!(segments[1].state, "COMPLETED", "{segments:?}");
    all_charged_once(&cluster, &[("alice", job.clone())]);

    // The run lost with its node is given back ([refunds] refunds node failures unless told not
    // to): what it was charged, once, naming the node; the run that completed stays charged.
    let refunds = || -> Vec<accountd::balance_json::EntryJson> {
        let all = cluster.history("alice").into_iter();
        all.filter(|e| e.kind == gputokens::entry::EntryKind::Refund && e.job_id.as_deref() == Some(&job)).collect()
    };
    wait_until(60, &format!("the lost run of {job} refunded"), || (!refunds().is_empty()).then_some(()));
    // Later charge cycles read the same runs again: none refunds them again.
    cluster.wait_charge_cycles(cluster.charge_cycles(), 2);
    let refunded = refunds();
    assert_eq!(refunded.len(), 1, "{refunded:?}");
    assert_eq!(refunded[0].amount, segments[0].cost(), "{refunded:?} {segments:?}");
    assert!(refunded[0].reason.contains(&format!("lost to a node failure (NODE_FAIL on {lost})")), "{refunded:?}");
    assert_eq!(refunded[0].actor, "gputokens");
    let bobs_refund = cluster.history("bob").into_iter().filter(|e| e.kind == gputokens::entry::EntryKind::Refund);
    let bobs_refund: Vec<_> = bobs_refund.filter(|e| e.job_id.as_deref() == Some(&bobs)).collect();
    assert_eq!(bobs_refund.len(), 1, "bob's run lost with the same node: {bobs_refund:?}");

    // No node drained for it: not the lost one (Slurm's DOWN only), not the others.
    let states = cluster.on("ctl1", None, &["sinfo", "-h", "-N", "-o", "%N %T"]).ok().stdout;
    assert!(!states.contains("drain"), "{states}");
    let actions = cluster.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(!actions.contains("drain"), "{actions}");

    // The lost node's last report stays where it was while the others' move on, and the shipped
    // alert rule fires for it alone (promtool, fed what /metrics says now).
    let reports = |metrics: &str| -> Vec<Option<f64>> {
        ["node1", "node2", "node3"].iter().map(|n| crate::metric(metrics, &crate::last_report(n))).collect()
    };
    let before = reports(&cluster.http_get("/metrics"));
    let metrics = wait_seen(60, &format!("the other nodes' reports moving on, {lost}'s 20 s silent"), || {
        let metrics = cluster.http_get("/metrics");
        let now_reports = reports(&metrics);
        let now = chrono::Utc::now().timestamp() as f64;
        let moved_on = ["node1", "node2", "node3"].iter().zip(before.iter().zip(&now_reports)).all(
            |(node, (was, is))| match *node == lost {
                true => is == was && is.is_some_and(|at| now - at > 20.0),
                false => matches!((was, is), (Some(was), Some(is)) if is > was),
            },
        );
        match moved_on {
            true => Ok(metrics),
            false => Err(format!("last reports {now_reports:?} (were {before:?}) at {now}")),
        }
    });
    let now = chrono::Utc::now().timestamp() as f64;
    let mut series = Vec::new();
    for node in ["node1", "node2", "node3"] {
        let at = crate::metric(&metrics, &crate::last_report(node)).unwrap_or_else(|| panic!("{node}:\n{metrics}"));
        let age = now - at;
        if node == lost {
            assert!(age > 20.0, "{node} silent for {age} s:\n{metrics}");
        } else {
            assert!(age < 10.0, "{node} reported {age} s ago:\n{metrics}");
        }
        series.push((node.to_string(), age));
    }
    crate::alerts::assert_silent_alert_fires_for(&series, &lost);
}
