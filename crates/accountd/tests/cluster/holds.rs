//! Pending GPU jobs of a payer at the floor are held on the real test cluster (`[admission]
//! hold_at_floor`): an array admitted above the floor does not start its waiting tasks, a requeued
//! run does not start again, and what gputokens held is released when tokens come back.

use std::path::Path;

use crate::cluster::{sbatch, serial};
use crate::common::run_as;
use crate::preemption::{cancel, site, squeue, wait_for};

/// The array's tasks in `state` (`R`, `PD`), as squeue lists them: `ID_N`, or `ID_[a-b]` for the
/// pending ones, with their reason.
fn tasks(array: &str, state: &str) -> Vec<String> {
    shown(array, state, "%i %r")
}

/// `format` of each of the array's tasks in `state`.
fn shown(array: &str, state: &str, format: &str) -> Vec<String> {
    let out = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-j", array, "-t", state, "-o", format]).ok();
    out.stdout.lines().map(str::to_string).collect()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn waiting_array_tasks_of_a_user_at_the_floor_are_held_until_tokens_come_back() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = site("");
    // Four one-a6000 tasks, admitted at 100 tokens: two run (the cluster has two a6000s), two wait.
    let array = sbatch(alice, &["--array=1-4", "--gres=gpu:a6000:1", "--comment=sweep", "--wrap", "sleep 300"]);
    wait_for("two tasks to run and two to wait", || {
        tasks(&array, "R").len() == 2 && tasks(&array, "PD").iter().any(|t| t.ends_with("Resources"))
    });
    site.accountd(None, &["admin", "adjust", alice, "-112", "--reason", "test"]).ok();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 pending GPU jobs held at the floor, 0 released"), "{}", tick.stdout);
    assert_eq!(tasks(&array, "PD"), [format!("{array}_[3-4] JobHeldAdmin")]);
    let note = format!("sweep; gputokens: held while {alice} is at the floor, released when it is above");
    assert_eq!(shown(&array, "PD", "%k"), [note]);
    assert_eq!(shown(&array, "R", "%k"), ["sweep", "sweep"], "the running tasks are not held");
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(actions.contains("hold") && actions.contains(&array), "{actions}");

    // The running tasks end: the held ones do not take their GPUs, and alice cannot lift the hold.
    run_as(None, Path::new("/usr/bin/scancel"), &[&format!("{array}_1"), &format!("{array}_2")]).ok();
    wait_for("the running tasks to end", || tasks(&array, "R").is_empty());
    let release = run_as(Some(alice), Path::new("/usr/bin/scontrol"), &["release", &array]);
    assert_ne!(release.code, 0, "a user cannot release an admin's hold: {}", release.stdout);
    // A scheduling pass with the a6000s free, and its witness: bob's CPU job, submitted now, starts
    // in one. Every scheduler passes held jobs over, so the held tasks still wait after it.
    let witness = sbatch(cluster.bob, &["--wrap", "sleep 300"]);
    wait_for("a scheduling pass after the tasks ended (bob's CPU job to start)", || {
        squeue(&witness, "%T") == "RUNNING"
    });
    assert_eq!(tasks(&array, "PD"), [format!("{array}_[3-4] JobHeldAdmin")]);
    cancel(&[&witness]);
    // A second cycle changes nothing.
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("0 pending GPU jobs held at the floor, 0 released"), "{}", tick.stdout);

    // Tokens come back: gputokens releases what it held, and takes its note off the comment.
    site.accountd(None, &["admin", "grant", alice, "20", "--reason", "test"]).ok();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("0 pending GPU jobs held at the floor, 1 released"), "{}", tick.stdout);
    wait_for("the held tasks to run", || tasks(&array, "R").len() == 2);
    assert_eq!(shown(&array, "R", "%k"), ["sweep", "sweep"]);
    cancel(&[&array]);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_requeued_run_of_a_user_at_the_floor_waits_and_an_admins_release_is_respected() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = site("");
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    let others = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("both jobs to run", || squeue(&job, "%T") == "RUNNING" && squeue(&others, "%T") == "RUNNING");
    site.accountd(None, &["admin", "adjust", alice, "-112", "--reason", "test"]).ok();
    // Her own requeue: the job was admitted once, at 100 tokens.
    run_as(Some(alice), Path::new("/usr/bin/scontrol"), &["requeue", &job]).ok();
    wait_for("the requeued job to wait", || squeue(&job, "%T") == "PENDING");
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 pending GPU jobs held at the floor"), "{}", tick.stdout);
    assert_eq!(squeue(&job, "%r"), "JobHeldAdmin");
    // bob's pending GPU job, his balance well above the floor, is left alone.
    let bobs = sbatch(bob, &["--gres=gpu:a6000:2", "--wrap", "sleep 300"]);
    wait_for("bob's second job to wait", || squeue(&bobs, "%T") == "PENDING");

    // An admin lets it run: gputokens records that and does not hold it again.
    run_as(None, Path::new("/usr/bin/scontrol"), &["release", &job]).ok();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("0 pending GPU jobs held at the floor, 0 released"), "{}", tick.stdout);
    assert_ne!(squeue(&job, "%r"), "JobHeldAdmin");
    assert_ne!(squeue(&bobs, "%r"), "JobHeldAdmin");
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(actions.contains("hold-lifted"), "{actions}");
    cancel(&[&job, &others, &bobs]);
}

/// A hold of her own would be alice's to release right after a cycle, her job then free to start
/// at the floor until the next: gputokens holds it over hers, and puts hers back when it releases.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn an_owners_own_hold_does_not_shield_a_job_at_the_floor() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = site("");
    let job = sbatch(alice, &["--hold", "--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("her job to wait, held by her", || squeue(&job, "%r") == "JobHeldUser");
    site.accountd(None, &["admin", "adjust", alice, "-112", "--reason", "test"]).ok();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 pending GPU jobs held at the floor"), "{}", tick.stdout);
    assert_eq!(squeue(&job, "%r"), "JobHeldAdmin");
    let release = run_as(Some(alice), Path::new("/usr/bin/scontrol"), &["release", &job]);
    assert_ne!(release.code, 0, "alice released gputokens' hold: {}", release.stdout);
    assert_eq!(squeue(&job, "%T %r"), "PENDING JobHeldAdmin");
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(actions.contains("hold-over-owner"), "{actions}");

    // Tokens back: released to her own hold again, hers to release.
    site.accountd(None, &["admin", "grant", alice, "20", "--reason", "test"]).ok();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 released"), "{}", tick.stdout);
    assert_eq!(squeue(&job, "%T %r"), "PENDING JobHeldUser");
    run_as(Some(alice), Path::new("/usr/bin/scontrol"), &["release", &job]).ok();
    wait_for("her job to run once she releases it", || squeue(&job, "%T") == "RUNNING");
    cancel(&[&job]);
}

/// An array with many scattered task numbers: libslurm cuts such a list at 64 characters unless
/// told otherwise; accountd reads it whole and holds exactly the tasks still to start. (An even
/// step, which squeue writes `5-61:2` and scontrol does not read, is held by the array's ID.)
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn an_array_of_scattered_tasks_is_held_whole() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = site("");
    // 1, 2, 4, 7, 11, ... 326: no one step, over 64 characters.
    let scattered: Vec<String> = (0..26).map(|i| (1 + i * (i + 1) / 2).to_string()).collect();
    let list = format!("--array={}", scattered.join(","));
    let array = sbatch(alice, &[&list, "--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("two tasks to run", || tasks(&array, "R").len() == 2);
    site.accountd(None, &["admin", "adjust", alice, "-112", "--reason", "test"]).ok();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 pending GPU jobs held at the floor"), "{}", tick.stdout);
    let pending = tasks(&array, "PD");
    assert_eq!(pending.len(), 1, "{pending:?}");
    // (squeue's own column is cut short; the comment below is set only where the list was whole.)
    assert!(pending[0].ends_with(" JobHeldAdmin"), "{pending:?}");
    let note = format!("gputokens: held while {alice} is at the floor, released when it is above");
    assert_eq!(shown(&array, "PD", "%k"), [note], "its pending tasks named whole, their comment set");
    assert_eq!(tasks(&array, "R").len(), 2, "the running tasks run on");
    // Tokens back: released.
    site.accountd(None, &["admin", "grant", alice, "20", "--reason", "test"]).ok();
    let tick = site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("1 released"), "{}", tick.stdout);
    assert!(!tasks(&array, "PD")[0].ends_with("JobHeldAdmin"), "{:?}", tasks(&array, "PD"));
    cancel(&[&array]);
}

/// Shadow mode (`[admission] enforce = false`): a job that would be held at the floor is logged and
/// counted in the cycle's summary, and not held; what was held before enforcement was turned off is
/// released.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn in_shadow_mode_nothing_is_held_and_what_was_held_is_released() {
    let cluster = serial();
    let alice = cluster.alice;
    let enforcing = site("");
    let held = sbatch(alice, &["--gres=gpu:a6000:2", "--begin=now+1hour", "--wrap", "sleep 300"]);
    wait_for("her job to wait", || squeue(&held, "%T") == "PENDING");
    enforcing.accountd(None, &["admin", "adjust", alice, "-112", "--reason", "test"]).ok();
    enforcing.accountd(None, &["tick", "--skip-charge"]).ok();
    assert_eq!(squeue(&held, "%r"), "JobHeldAdmin");
    // The same ledger, enforcement off.
    let mut config = std::fs::read_to_string(&enforcing.config).unwrap();
    config.push_str("[admission]\nenforce = false\n");
    std::fs::write(&enforcing.config, config).unwrap();
    let other = sbatch(alice, &["--gres=gpu:a6000:2", "--begin=now+1hour", "--wrap", "sleep 300"]);
    wait_for("her second job to wait", || squeue(&other, "%T") == "PENDING");
    let tick = enforcing.accountd(None, &["tick", "--skip-charge"]).ok();
    assert!(
        tick.stdout.contains("shadow mode: 1 pending GPU jobs would be held at the floor, 1 released"),
        "{}",
        tick.stdout
    );
    assert!(tick.stderr.contains(&format!("shadow mode, not enforced: would hold pending job {other} of {alice}")));
    assert_ne!(squeue(&other, "%r"), "JobHeldAdmin");
    assert_ne!(squeue(&held, "%r"), "JobHeldAdmin", "released: gputokens no longer enforces");
    cancel(&[&held, &other]);
}
