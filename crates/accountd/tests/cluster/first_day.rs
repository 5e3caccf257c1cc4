//! A new site's first day: it charges nothing that ended before it began charging, however far back
//! its first sacct window reaches (`first_lookback`, a day by default), and everything that ends after.

use std::path::Path;

use crate::by_hand::gpu_cost as cost;
use gputokens::Tokens;

use crate::charging::{balance, elapsed};
use crate::cluster::{sbatch, serial, wait_finished};
use crate::common::{run_as, Site};
use crate::preemption::{squeue, wait_for};

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_new_site_never_charges_jobs_that_ended_before_it_began() {
    let cluster = serial();
    let bob = cluster.bob;
    let before = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    assert_eq!(wait_finished(&before), "COMPLETED");
    // The default first_lookback (a day): the first window holds `before` and every job the cluster
    // ran today, and sacct lists them.
    let site = Site::start("", "[slurm]\nreread = \"1h\"\n[preemption]\nenabled = false\n");
    let tick = site.accountd(None, &["tick"]).ok().stdout;
    assert!(tick.contains("runs that ended before gputokens began charging left out"), "{tick}");
    assert!(tick.contains(": 0 charge entries"), "{tick}");
    assert_eq!(balance(&site, bob), Tokens::whole(100), "job {before} ended before the site began:\n{tick}");

    // A job that ends after the site began is charged in full, once.
    let after = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    assert_eq!(wait_finished(&after), "COMPLETED");
    site.accountd(None, &["tick"]).ok();
    site.accountd(None, &["tick"]).ok();
    assert_eq!(balance(&site, bob), Tokens::whole(100) - cost(Tokens::whole(4), elapsed(&after)));
}

/// What made a 24.11 suite charge one test's job in the next test's site: a job cancelled a moment
/// before a site starts leaves squeue within a second or two of its End, and the site's first window
/// (`first_lookback = "1s"`, from one second before its first read, in whole seconds) still holds
/// that End. sacct is right to list it; the site must not charge it: it ended before the site began.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_job_cancelled_just_before_a_site_starts_is_not_its_to_charge() {
    let cluster = serial();
    let alice = cluster.alice;
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 300"]);
    wait_for("alice's job to run", || squeue(&job, "%T") == "RUNNING");
    run_as(None, Path::new("/usr/bin/scancel"), &[&job]).ok();
    wait_for("alice's job to leave the queue", || squeue(&job, "%T").is_empty());
    let site = Site::start("", "[slurm]\nfirst_lookback = \"1s\"\nreread = \"1h\"\n[preemption]\nenabled = false\n");
    assert!(wait_finished(&job).starts_with("CANCELLED"));
    let tick = site.accountd(None, &["tick"]).ok().stdout;
    assert_eq!(balance(&site, alice), Tokens::whole(100), "job {job} ended before the site began:\n{tick}");
}
