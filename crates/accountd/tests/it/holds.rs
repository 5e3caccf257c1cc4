//! Pending GPU jobs of a payer at the floor are held on the real test cluster (`[admission]
//! hold_at_floor`): an array admitted above the floor does not start its waiting tasks, a requeued
//! run does not start again, and what gputokens held is released when tokens come back.

use std::path::Path;
use std::time::Duration;

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
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(tasks(&array, "PD"), [format!("{array}_[3-4] JobHeldAdmin")]);
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
