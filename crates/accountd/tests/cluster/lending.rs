//! Idle GPUs lent to users in debt (`[lending]`, issue 48's done-when 1) on the real cluster, as the
//! non-root users alice and bob: alice in overdraft runs a borrowed a6000 job while the a6000s are
//! free; bob (in credit) waits for an a6000; within one check cycle alice's run is requeued, never
//! cancelled, bob's starts, and alice's ledger has an entry of 0 naming the reclaim; her later
//! borrowed run that finishes unreclaimed is charged.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::admission::Admission;
use crate::by_hand::gpu_cost as cost;
use crate::cluster::{sacct, serial, wait_finished};
use crate::common::{run_as, Site, PRICES};
use crate::preemption::{cancel, squeue, wait_for};
use gputokens::Tokens;

/// The site's check cycle: a reclaim comes within one.
const CHECK_SECS: u64 = 3;

fn admin_comment(job: &str) -> String {
    let shown = run_as(None, Path::new("/usr/bin/scontrol"), &["show", "job", job]).ok().stdout;
    shown
        .split("AdminComment=")
        .nth(1)
        .map(|rest| rest.lines().next().unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_borrowed_run_is_requeued_for_a_user_in_credit_and_charged_nothing() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let tables = format!(
        "[intervals]\ncharge = \"1s\"\ncheck = \"{CHECK_SECS}s\"\n[slurm]\nfirst_lookback = \"1s\"\nreread = \"1m\"\n\
         [preemption]\nenabled = false\n[lending]\nenabled = true\n"
    );
    let site = Site::with_prices("", PRICES, &tables);
    let mut adm = Admission::start();
    adm.configure("[lending]\nenabled = true\n");
    site.accountd(None, &["admin", "adjust", alice, "-105", "--reason", "test: in overdraft"]).ok();
    adm.follow(&site);
    adm.settled();

    // An interactive job of hers is refused: it could not be requeued.
    let srun = run_as(Some(alice), Path::new("/usr/bin/srun"), &["--gres=gpu:a6000:1", "true"]);
    assert_ne!(srun.code, 0, "alice's interactive GPU job ran in debt");
    assert!(srun.stderr.contains("submit it with sbatch") && srun.stderr.contains("code=borrowed"), "{}", srun.stderr);

    // Both a6000s are free: her batch job runs on them, borrowed, made requeueable, marked.
    let (borrowed, told) = adm.accepted(alice, &["--no-requeue", "--gres=gpu:a6000:2", "--wrap", "sleep 300"]);
    assert!(told.contains("this job runs as a borrowed run on idle GPUs"), "{told}");
    wait_for("alice's borrowed job to run", || squeue(&borrowed, "%T") == "RUNNING");
    let shown = run_as(None, Path::new("/usr/bin/scontrol"), &["show", "job", &borrowed]).ok().stdout;
    assert!(shown.contains("Requeue=1"), "the plugin made it requeueable: {shown}");
    wait_for("the borrowed run's AdminComment", || {
        admin_comment(&borrowed).starts_with("gputokens: borrowed run of idle a6000 GPUs")
    });

    // bob, in credit, waits for one a6000: alice's run is requeued within a check cycle.
    let (waiting, _) = adm.accepted(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 15"]);
    wait_for("bob's job to wait for resources", || squeue(&waiting, "%T %r").starts_with("PENDING"));
    let asked = Instant::now();
    wait_for("bob's job to start", || squeue(&waiting, "%T") == "RUNNING");
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(CHECK_SECS * 2 + 10), "reclaimed after {took:?}");
    assert_eq!(squeue(&borrowed, "%T"), "PENDING", "requeued, not cancelled");
    assert!(
        admin_comment(&borrowed).contains(&format!("reclaimed for job {waiting} waiting for a6000")),
        "{}",
        admin_comment(&borrowed)
    );
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(actions.contains("requeue") && actions.contains(&borrowed), "{actions}");
    // Cancelled before bob's job ends, so the requeued job never runs again.
    cancel(&[&borrowed]);

    // Her ledger: an entry of 0 for the reclaimed run, naming the job it made way for.
    let reclaimed = format!("a borrowed run of idle GPUs, reclaimed for job {waiting}: not charged");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = site.history_rows(alice);
        let found = rows.iter().any(|(kind, amount, job, reason)| {
            kind == "charge" && amount == "+0" && job == &borrowed && reason.contains(&reclaimed)
        });
        if found {
            break;
        }
        let runs =
            sacct(&["-D", "-j", &borrowed, "-X", "-n", "-P", "-o", "JobIDRaw,Start,End,State,ElapsedRaw,AllocTRES"]);
        assert!(
            Instant::now() < deadline,
            "no entry of 0 for the reclaimed run: {rows:?}\nsacct: {runs}\n{}",
            crate::cluster::log_tail(&site.log(), 40)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(site.balance(alice), "-5", "the reclaimed run cost nothing");
    let listed = site.sbalance(Some(alice), &[]).ok().stdout;
    assert!(
        listed.contains(&format!("job {borrowed} borrowed idle GPUs from "))
            && listed.contains(&format!("reclaimed for job {waiting}")),
        "{listed}"
    );
    wait_finished(&waiting);

    // A later borrowed run that finishes unreclaimed is charged as usual.
    let (later, _) = adm.accepted(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 3"]);
    wait_finished(&later);
    let elapsed: u64 = sacct(&["-j", &later, "-X", "-n", "-P", "-o", "ElapsedRaw"]).trim().parse().unwrap();
    let charged = cost(Tokens::whole(4), elapsed);
    wait_for("the finished borrowed run's charge", || {
        site.history_rows(alice)
            .iter()
            .any(|(kind, _, job, reason)| kind == "charge" && job == &later && reason.contains("not reclaimed"))
    });
    assert_eq!(site.balance(alice), (Tokens::whole(-5) - charged).to_string());
}

/// A heterogeneous batch job of a user in debt runs borrowed like any batch job: slurmctld hands
/// job_submit each component, and only the first carries the script.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_debtors_heterogeneous_batch_job_runs_borrowed() {
    let cluster = serial();
    let alice = cluster.alice;
    let site = Site::with_prices("", PRICES, "[preemption]\nenabled = false\n[lending]\nenabled = true\n");
    let mut adm = Admission::start();
    adm.configure("[lending]\nenabled = true\n");
    site.accountd(None, &["admin", "adjust", alice, "-105", "--reason", "test: in overdraft"]).ok();
    adm.follow(&site);
    adm.settled();
    let script = std::env::temp_dir().join(format!("gputokens-hetjob-{}.sh", std::process::id()));
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --gres=gpu:a6000:1\n#SBATCH hetjob\n#SBATCH --gres=gpu:rtx3090:1\ntrue\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let (job, told) = adm.accepted(alice, &["--hold", script.to_str().unwrap()]);
    let _ = std::fs::remove_file(&script);
    assert!(told.contains("borrowed run"), "{told}\n{}", adm.log());
    let shown = run_as(None, Path::new("/usr/bin/scontrol"), &["show", "job", &job]).ok().stdout;
    assert_eq!(shown.matches("Requeue=1").count(), 2, "both components requeueable: {shown}");
}
