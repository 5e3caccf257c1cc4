//! Two Slurm clusters on one slurmdbd and one ledger (up.sh's GPUTOKENS_MN_CLUSTERS=2): gtmn
//! (ctl1, ctl2, node1-3) and gtmnb (ctlb, node4), each with its own accountd on the MariaDB ledger,
//! leading its own cluster's cycles. alice submits to both from login1 (`sbatch -M gtmnb`).

use gputokens::entry::EntryKind;
use gputokens::Tokens;

use crate::{wait_seen, Cluster, Settings};

/// `sbatch` as alice on login1 (to the second cluster with `-M gtmnb`); the outcome.
fn submit(cluster: &Cluster, to_b: bool, gres: &str) -> crate::cluster::Outcome {
    let mut argv = vec!["sbatch", "--parsable", "--output=/dev/null"];
    if to_b {
        argv.extend(["-M", "gtmnb"]);
    }
    argv.extend([gres, "--wrap", "sleep 6"]);
    cluster.on("login1", Some("alice"), &argv)
}

/// The job's ID of `sbatch --parsable`'s `ID` or `ID;CLUSTER`.
fn job_id(out: crate::cluster::Outcome) -> String {
    out.ok().stdout.trim().split(';').next().unwrap().to_string()
}

/// Seconds the job ran on `cluster_name` once slurmdbd shows it finished (asked on ctl1, `-M`).
fn finished_seconds(cluster: &Cluster, cluster_name: &str, job: &str) -> u64 {
    let argv = ["sacct", "-M", cluster_name, "-X", "-D", "-n", "-P", "-j", job, "-o", "State,ElapsedRaw,End"];
    wait_seen(120, &format!("job {job} of {cluster_name} recorded as finished"), || {
        let out = cluster.on("ctl1", None, &argv).stdout;
        let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split('|').collect()).collect();
        match rows.iter().map(Vec::as_slice).collect::<Vec<_>>().as_slice() {
            [[state, elapsed, end]] if state.starts_with("COMPLETED") && !["Unknown", ""].contains(end) => {
                Ok(elapsed.parse().unwrap())
            }
            _ => Err(out),
        }
    })
}

/// What `secs` of one GPU cost at `price` tokens per GPU-hour.
fn cost(price: &str, secs: u64) -> Tokens {
    crate::by_hand::gpu_cost(price.parse().unwrap(), secs)
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_alices_jobs_on_two_clusters_are_charged_to_her_one_balance_and_refused_on_both_at_the_floor() {
    let cluster = Cluster::up(Settings { second_cluster: true, ..Settings::default() });
    // Each cluster's accountd leads that cluster's cycles, at once.
    let check = cluster.on("ctlb", None, &["accountd", "config", "check"]).ok().stdout;
    assert!(check.contains("(cluster gtmnb's cycles), led by accountd ctlb:"), "{check}");
    let check = cluster.accountd(None, &["config", "check"]).ok().stdout;
    assert!(check.contains("(cluster gtmn's cycles), led by accountd ctl1:"), "{check}");

    // The same job ID on both clusters (each counts its own from 1): two runs, two charges.
    let on_a = job_id(submit(&cluster, false, "--gres=gpu:rtx3090:1"));
    let on_b = job_id(submit(&cluster, true, "--gres=gpu:a6000:1"));
    let (ran_a, ran_b) = (finished_seconds(&cluster, "gtmn", &on_a), finished_seconds(&cluster, "gtmnb", &on_b));
    // gtmnb prices its a6000 at 2 (gtmn's at 4): each cluster's charge at its own prices.
    let (want_a, want_b) = (cost("1", ran_a), cost("2", ran_b));
    let key_b = format!("gtmnb:{on_b}");
    let charged = |job: &str| {
        let charges: Vec<_> = cluster
            .history("alice")
            .into_iter()
            .filter(|e| e.kind == EntryKind::Charge && e.job_id.as_deref() == Some(job))
            .collect();
        charges.iter().map(|e| -e.amount).sum::<Tokens>()
    };
    wait_seen(60, "both runs charged in full", || match (charged(&on_a), charged(&key_b)) {
        (a, b) if a == want_a && b == want_b => Ok(()),
        seen => Err(format!("{seen:?}, want ({want_a}, {want_b})")),
    });
    // Two more charge cycles of each accountd: nothing is charged again.
    let (cycles_a, cycles_b) =
        (cluster.charge_cycles(), cluster.log("ctlb", "accountd.out").matches("charge cycle (").count());
    cluster.wait_charge_cycles(cycles_a, 2);
    wait_seen(60, "two more charge cycles on ctlb", || {
        let now = cluster.log("ctlb", "accountd.out").matches("charge cycle (").count();
        if now >= cycles_b + 3 {
            Ok(())
        } else {
            Err(format!("{now}"))
        }
    });
    assert_eq!((charged(&on_a), charged(&key_b)), (want_a, want_b), "charged once each");
    let balance = cluster.balance("alice");
    assert_eq!(balance, Tokens::whole(100) - want_a - want_b, "one balance, both clusters' charges");

    // alice sees where each charge ran.
    let history = cluster.on("login1", Some("alice"), &["sbalance", "--history", "-P"]).ok().stdout;
    for job in [format!("gtmn:{on_a}"), key_b.clone()] {
        assert!(history.lines().any(|l| l.split('|').nth(4) == Some(job.as_str())), "{job}:\n{history}");
    }

    // At the floor (-10.4, a balance only her own row gives): refused on both, the same balance told.
    let to_floor = Tokens::ZERO - balance - "10.4".parse::<Tokens>().unwrap();
    cluster.accountd(None, &["admin", "adjust", "alice", &to_floor.to_string(), "--reason", "at the floor"]).ok();
    let told = "gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused";
    for to_b in [false, true] {
        let refused = wait_seen(60, &format!("alice refused on {}", if to_b { "gtmnb" } else { "gtmn" }), || {
            let out = submit(&cluster, to_b, "--gres=gpu:rtx3090:1");
            match out.code != 0 && out.stderr.contains(told) {
                true => Ok(out.stderr),
                false => Err(format!("{out:?}")),
            }
        });
        assert!(refused.contains("Batch job submission failed"), "{refused}");
    }
}
