//! The primary slurmctld lost: the backup's plugin decides from the shared snapshot.

use std::time::Duration;

use crate::{wait_until, Cluster, Settings};

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_the_backup_controller_refuses_at_the_floor_and_sees_a_later_grant() {
    let cluster = Cluster::up(Settings::default());
    // -10.4: below the floor (-10), and a balance no refusal shows unless it read alice's own.
    cluster.accountd(None, &["admin", "adjust", "alice", "-110.4", "--reason", "at the floor"]).ok();
    cluster.wait_controllers_past("alice at -10.4", |text| text.lines().any(|l| l == "user alice -10400000"));
    // From accountd's host the admin sees what each controller's plugin decides from.
    let check = cluster.accountd(None, &["config", "check", "--slurm"]).stdout;
    for line in [
        "ok: slurmctld on ctl1 (primary, in control): decides from the snapshot",
        "ok: slurmctld on ctl2 (backup, standing by",
    ] {
        assert!(check.contains(line), "{line}:\n{check}");
    }

    cluster.mn(&["kill", "slurmctld", "ctl1"]).ok();
    wait_until(90, "ctl2 taking over", || {
        let ping = cluster.on("ctl2", None, &["scontrol", "ping"]).stdout;
        ping.lines().any(|l| l.contains("(primary) at ctl1 is DOWN") || l.contains("ctl1 is DOWN")).then_some(())?;
        let took = cluster.log("ctl2", "slurmctld.log");
        took.contains("Running as primary controller").then_some(())
    });
    let sbatch = |user: &str| {
        cluster.on(
            "ctl1",
            Some(user),
            &["sbatch", "--parsable", "--output=/dev/null", "--gres=gpu:a6000:1", "--wrap", "true"],
        )
    };
    let refused = wait_until(60, "the backup answering", || {
        let out = sbatch("alice");
        (out.code != 0 && !out.stderr.contains("Unable to contact")).then_some(out.stderr)
    });
    assert!(
        refused
            .contains("gputokens: your GPU token balance is -10.4 (floor -10); GPU jobs are refused until it is above"),
        "alice told her balance: {refused}"
    );
    assert!(sbatch("bob").code == 0, "bob has tokens");

    // A grant after the failover reaches the backup's plugin within one check interval (5 s) and
    // the plugin's next look at the snapshot.
    cluster.accountd(None, &["admin", "grant", "alice", "50", "--reason", "after the failover"]).ok();
    let granted = std::time::Instant::now();
    wait_until(30, "alice accepted by the backup", || (sbatch("alice").code == 0).then_some(()));
    assert!(granted.elapsed() < Duration::from_secs(15), "took {:?}", granted.elapsed());

    // The lost controller shows in the check once its status file is stale; the backup is in control.
    let check = wait_until(60, "ctl1's status stale", || {
        let check = cluster.accountd(None, &["config", "check", "--slurm"]).stdout;
        check
            .contains("problem: slurmctld on ctl1 (primary, not answering scontrol ping): its status file")
            .then_some(check)
    });
    assert!(check.contains("ok: slurmctld on ctl2 (backup, in control): decides from the snapshot"), "{check}");
}
