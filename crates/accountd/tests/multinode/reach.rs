//! Partitions that hold some of the nodes (issue 48): a quote offers the GPUs free where the job may
//! run, and a borrowed run is reclaimed only where it frees GPUs the waiting job can use.

use crate::{wait_seen, wait_until, Cluster, Settings};

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_quotes_and_reclaims_reach_only_the_nodes_of_a_jobs_partitions() {
    // `first` is node1 (2 rtx2080, 1 rtx3090); `rest` node2 (2 rtx3090) and node3 (2 a6000, 1 rtx3090).
    let cluster = Cluster::up(Settings {
        partitions: "PartitionName=first Nodes=node1 State=UP\nPartitionName=rest Nodes=node2,node3 State=UP",
        config: "[lending]\nenabled = true\n",
        ..Settings::default()
    });
    cluster.accountd(None, &["admin", "adjust", "alice", "-105", "--reason", "test: in overdraft"]).ok();
    wait_until(30, "alice in overdraft in the snapshot", || {
        cluster.snapshot().contains("\nuser alice -").then_some(())
    });

    // alice's borrowed runs hold every rtx3090, each started in a later second than the one before:
    // node1's is the youngest, which reclaim takes first among the runs it may take.
    let borrowed = |node: &str, partition: &str, gpus: u32| {
        let gres = format!("--gres=gpu:rtx3090:{gpus}");
        let job = cluster.sbatch("alice", &["-p", partition, "-w", node, &gres, "--wrap", "sleep 300"]);
        cluster.wait_running(&job);
        let seen = chrono::Utc::now().timestamp();
        wait_until(5, "the next second", || (chrono::Utc::now().timestamp() > seen).then_some(()));
        job
    };
    let on_node2 = borrowed("node2", "rest", 2);
    let on_node3 = borrowed("node3", "rest", 1);
    let on_node1 = borrowed("node1", "first", 1);

    // bob's quotes offer what is free in the partitions his job may run in.
    let quote = |partition: Option<&str>| {
        let mut args = vec!["sbatch", "--test-only", "--gres=gpu:rtx3090:1", "--time=60", "--wrap", "true"];
        args.extend(partition.map(|p| ["-p", p]).into_iter().flatten());
        cluster.on("ctl1", Some("bob"), &args).stderr
    };
    let no_rtx3090 = "rtx3090 has 0 free now; free now at a higher price: a6000 up to 4 tokens (2 free).";
    // Once the snapshot shows all three runs (the plugin reads it on change).
    wait_until(60, "the snapshot to count alice's runs", || {
        let snapshot = cluster.snapshot();
        ["free_gpus_in first rtx2080=2 rtx3090=0\n", "free_gpus_in rest a6000=2 rtx3090=0\n"]
            .iter()
            .all(|line| snapshot.contains(line))
            .then_some(())
    });
    // Each quote asked until it offers what it should: a quote follows the newest snapshot, and a
    // node that missed a ping to slurmctld (a loaded machine) is left out of the free GPUs until it
    // answers again. A GPU type the partition's nodes do not have fails it at once, never asked again.
    let quote_offers = |partition: Option<&str>, what: &str, wanted: &str, never: Option<&str>| {
        wait_seen(30, what, || {
            let told = quote(partition);
            if let Some(never) = never {
                assert!(!told.contains(never), "{what}: {never} offered, which none of its nodes has: {told}");
            }
            told.contains(wanted).then_some(()).ok_or_else(|| {
                let free: Vec<String> =
                    cluster.snapshot().lines().filter(|l| l.starts_with("free_gpus")).map(str::to_owned).collect();
                format!("{told}\nthe newest snapshot's free GPUs (maybe newer than the quote's): {free:?}")
            })
        })
    };
    // node1's rtx2080s are in `first` and in `gpu`, not in `rest` ("no cheaper type": rtx2080 is
    // cheaper). Until the plugin has read a snapshot that lists the partitions, it offers the
    // cluster's free GPUs: asked again until then.
    let in_rest = format!("No cheaper GPU type has 1 GPU free now. {no_rtx3090}");
    quote_offers(Some("rest"), "a quote in rest from that snapshot", &in_rest, None);
    let in_first = "Cheaper, with GPUs free now: rtx2080 up to 0.5 tokens (2 free).";
    quote_offers(Some("first"), "a quote in first: its rtx2080s", in_first, Some("a6000"));
    let in_gpu = format!("Cheaper, with GPUs free now: rtx2080 up to 0.5 tokens (2 free). {no_rtx3090}");
    quote_offers(None, "a quote in the default partition, which holds every node", &in_gpu, None);

    // bob waits in `rest`: a run there is reclaimed for him (one: each frees enough), never node1's,
    // whose GPU he could not use.
    let waiting = cluster.sbatch("bob", &["-p", "rest", "--gres=gpu:rtx3090:1", "--wrap", "sleep 20"]);
    cluster.wait_running(&waiting);
    assert_eq!(cluster.job_state(&on_node1), "RUNNING", "a run outside bob's partition was taken");
    let states = [cluster.job_state(&on_node2), cluster.job_state(&on_node3)];
    assert!(
        states == ["RUNNING", "PENDING"] || states == ["PENDING", "RUNNING"],
        "one run in rest requeued (not cancelled), no more: node2's and node3's {states:?}"
    );
    let requeued = if states[0] == "PENDING" { &on_node2 } else { &on_node3 };
    let actions = cluster.accountd(None, &["admin", "actions", "--json"]).ok().stdout;
    let actions: accountd::balance_json::Actions = serde_json::from_str(&actions).expect("admin actions --json");
    let requeues: Vec<&str> =
        actions.actions.iter().filter(|a| a.action == "requeue").map(|a| a.target.as_str()).collect();
    assert_eq!(requeues, [requeued.as_str()], "{:?}", actions.actions);
    cluster.on("ctl1", None, &["scancel", &on_node1, &on_node2, &on_node3, &waiting]);
}
