//! accountd, slurmdbd and MariaDB stopped while jobs run: nothing missed, nothing charged twice.

use std::time::{Duration, Instant};

use gputokens::Tokens;

use crate::{wait_until, Cluster, Settings};

/// Waits until each job is charged exactly what its runs cost, and stays so over two more cycles.
pub fn all_charged_once(cluster: &Cluster, jobs: &[(&str, String)]) {
    for (user, job) in jobs {
        let expected: Tokens = cluster.wait_recorded(job).iter().map(|s| s.cost()).sum();
        assert!(expected > Tokens::ZERO, "job {job} cost nothing");
        wait_until(120, &format!("job {job} of {user} charged {expected}"), || {
            (cluster.charged(user, job).0 == expected).then_some(())
        });
    }
    std::thread::sleep(Duration::from_secs(12));
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
    cluster.accountd(None, &["admin", "adjust", "alice", "-110", "--reason", "at the floor"]).ok();
    let floor = wait_until(30, "alice refused at the floor", || {
        submit(&cluster, "alice", &["--gres=gpu:rtx3090:1", "--wrap", "true"]).err()
    });
    assert!(floor.contains("-10"), "{floor}");

    cluster.mn(&["stop", "accountd", "ctl1"]).ok();
    let stopped = Instant::now();
    // Jobs start and end while accountd is away.
    let mut jobs = Vec::new();
    for user in ["bob", "bob"] {
        let job = submit(&cluster, user, &["--gres=gpu:rtx3090:1", "--wrap", "sleep 5"]).expect("bob has tokens");
        jobs.push((user, job));
    }
    // Within max_snapshot_age the last snapshot decides: alice still refused, bob accepted.
    let refused = submit(&cluster, "alice", &["--gres=gpu:rtx3090:1", "--wrap", "true"]).unwrap_err();
    assert!(refused.contains("-10"), "{refused}");
    // Past it, on_error = "reject" decides, and says why.
    std::thread::sleep(Duration::from_secs(45).saturating_sub(stopped.elapsed()));
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
