//! Slurm's own records of real jobs, as the test users' jobs leave them in slurmdbd, and the ledger
//! charged from them.

use gputokens::slurm::sacct::FIELDS;
use gputokens::Tokens;

use crate::by_hand::gpu_cost as cost;
use crate::cluster::{sacct, sbatch, serial, wait_finished};
use crate::common::Site;

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn alice_runs_a_typed_gpu_job_and_sacct_records_it() {
    let cluster = serial();
    let alice = cluster.alice;
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_eq!(wait_finished(&job), "COMPLETED");
    let row = sacct(&["-j", &job, "-X", "-n", "-P", "-o", "User,AllocTRES"]);
    assert!(row.starts_with(&format!("{alice}|")), "{row}");
    assert!(row.contains("gres/gpu:a6000=1"), "{row}");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn real_sacct_records_are_charged_exactly_once() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let site = Site::start("", "");
    let gpu_job = sbatch(alice, &["--gres=gpu:a6000:2", "--wrap", "sleep 2"]);
    let cpu_job = sbatch(bob, &["--wrap", "sleep 1"]);
    wait_finished(&gpu_job);
    wait_finished(&cpu_job);

    let records = sacct(&["-X", "-D", "-P", "-j", &format!("{gpu_job},{cpu_job}"), "-o", FIELDS]);
    let file = site.file("sacct.txt", &records);
    site.accountd(None, &["charge", "--sacct-file", &file]).ok();

    let elapsed: u64 = sacct(&["-j", &gpu_job, "-X", "-n", "-P", "-o", "ElapsedRaw"]).trim().parse().unwrap();
    assert!(elapsed >= 2, "job ran {elapsed}s");
    let expected = Tokens::whole(100) - cost(Tokens::whole(4), 2 * elapsed);
    assert_eq!(site.balance(alice), expected.to_string());
    assert_eq!(site.balance(bob), "100");

    let again = site.accountd(None, &["charge", "--sacct-file", &file]).ok();
    assert!(again.stdout.contains("0 charge entries"), "{}", again.stdout);
    assert_eq!(site.balance(alice), expected.to_string());
}
