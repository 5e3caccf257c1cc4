//! accountd, slurmdbd and MariaDB stopped while jobs run: nothing missed, nothing charged twice.

use gputokens::Tokens;

use crate::{wait_seen, wait_until, Cluster, Settings};

/// What a refusal at the floor tells alice (-10.4: a balance only her own row gives).
const AT_THE_FLOOR: &str = "gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused";
/// What the job_submit plugin logs once it finds its snapshot older than max_snapshot_age.
const STALE: &str = "longer than max_snapshot_age (40s); is accountd running?";

/// Waits until each job is charged exactly what its runs cost, and stays so over two more cycles.
pub fn all_charged_once(cluster: &Cluster, jobs: &[(&str, String)]) {
    for (user, job) in jobs {
        let expected: Tokens = cluster.wait_recorded(job).iter().map(|s| s.cost()).sum();
        assert!(expected > Tokens::ZERO, "job {job} cost nothing");
        wait_until(120, &format!("job {job} of {user} charged {expected}"), || {
            (cluster.charged(user, job).0 == expected).then_some(())
        });
    }
    cluster.wait_charge_cycles(cluster.charge_cycles(), 2);
    for (user, job) in jobs {
        let expected: Tokens = cluster.segments(job).iter().map(|s| s.cost()).sum();
        assert_eq!(cluster.charged(user, job).0, expected, "job {job} charged again");
    }
}

/// `sbatch` as `user` on ctl1: Ok(job) or Err(what sbatch said).
fn submit(cluster: &Cluster, user: &str, args: &[&str]) -> Result<String, String> {
    let mut argv = vec!["sbatch", "--parsable", "--output=/dev/null"];
    argv.extend_from_slice(args);
    let out = cluster.on("ctl1", Some(user), &argv);
    match out.code {
        0 => Ok(out.stdout.trim().to_string()),
        _ => Err(out.stderr),
    }
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_while_accountd_is_down_the_plugin_decides_from_the_last_snapshot_then_on_error() {
    let cluster = Cluster::up(Settings { max_snapshot_age: Some("40s"), ..Settings::default() });
    cluster.accountd(None, &["admin", "adjust", "alice", "-110.4", "--reason", "at the floor"]).ok();
    let floor = wait_until(30, "alice refused at the floor", || {
        submit(&cluster, "alice", &["--gres=gpu:rtx3090:1", "--wrap", "true"]).err()
    });
    assert!(floor.contains(AT_THE_FLOOR), "{floor}");

    let stale_lines = || cluster.log("ctl1", "slurmctld.log").matches(STALE).count();
    let stale_before = stale_lines();
    cluster.mn(&["stop", "accountd", "ctl1"]).ok();
    // Jobs start and end while accountd is away.
    let mut jobs = Vec::new();
    for user in ["bob", "bob"] {
        let job = submit(&cluster, user, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 5"]).expect("bob has tokens");
        jobs.push((user, job));
    }
    // Within max_snapshot_age the last snapshot decides: alice still refused, bob accepted.
    let refused = submit(&cluster, "alice", &["--gres=gpu:rtx3090:1", "--wrap", "true"]).unwrap_err();
    assert!(refused.contains(AT_THE_FLOOR), "{refused}");
    // Past it, on_error = "reject" decides, and says why: once the plugin has found the snapshot
    // stale (and logged so).
    wait_seen(90, "ctl1's plugin finding the snapshot older than max_snapshot_age", || {
        if stale_lines() > stale_before {
            return Ok(());
        }
        let log = cluster.log("ctl1", "slurmctld.log");
        Err(format!("its last gputokens line: {:?}", log.lines().rev().find(|l| l.contains("gputokens"))))
    });
    let stale = submit(&cluster, "bob", &["--gres=gpu:rtx3090:1", "--wrap", "true"]).unwrap_err();
    assert!(stale.contains("balances are unavailable"), "{stale}");
    assert!(submit(&cluster, "bob", &["--wrap", "true"]).is_ok(), "jobs without GPUs pass");
    for (_, job) in &jobs {
        cluster.wait_recorded(job);
    }

    cluster.mn(&["start", "accountd", "ctl1"]).ok();
    all_charged_once(&cluster, &jobs);
    wait_until(30, "bob accepted again", || submit(&cluster, "bob", &["--gres=gpu:rtx3090:1", "--wrap", "true"]).ok());
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_slurmdbd_and_mariadb_restarts_fail_cycles_visibly_and_later_cycles_catch_up() {
    let cluster = Cluster::up(Settings::default());
    let before = cluster.sbatch("alice", &["--gres=gpu:rtx2080:1", "--wrap", "sleep 3"]);
    cluster.wait_recorded(&before);

    cluster.mn(&["stop", "slurmdbd", "ctl1"]).ok();
    let during = cluster.sbatch("bob", &["--gres=gpu:a6000:1", "--wrap", "sleep 4"]);
    wait_until(60, "the job done", || cluster.job_state(&during).is_empty().then_some(()));
    let failures =
        |c: &Cluster| crate::metric(&c.http_get("/metrics"), "gputokens_cycle_failures_total{cycle=\"charge\"}");
    wait_until(60, "a charge cycle failing", || failures(&cluster).filter(|n| *n >= 1.0));
    let log = cluster.log("ctl1", "accountd.out");
    assert!(log.contains("charge cycle failed"), "{log}");

    cluster.mn(&["restart-mariadb"]).ok();
    cluster.mn(&["start", "slurmdbd", "ctl1"]).ok();
    all_charged_once(&cluster, &[("alice", before), ("bob", during)]);
}
