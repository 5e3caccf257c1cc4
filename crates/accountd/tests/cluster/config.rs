//! `accountd config check --slurm` against the running test cluster: its GPU types, nodes and
//! accounts beside the config's.

use crate::common::{bin, run_as};

fn check_slurm(text: &str) -> crate::common::Outcome {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gputokens.toml");
    std::fs::write(&path, text).unwrap();
    run_as(None, &bin("accountd"), &["config", "check", path.to_str().unwrap(), "--slurm"])
}

/// The test cluster is set up as slurm-conf/ says (plugin, typed GPU accounting, the QOS); a site
/// whose gputokens.toml matches it passes, and one that misses a price and the SlurmUser is told.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_running_slurm_is_checked_against_the_config() {
    let _cluster = crate::cluster::serial();
    // tests/run.sh loads the SPANK plugin with jobs_dir=$LAB/gpu-jobs.
    let lab = std::env::var("GPUTOKENS_LAB").unwrap_or_else(|_| "/tmp/gputokens-cluster".into());
    let good = format!(
        "slurm_user = \"slurm\"\n[prices]\nrtx2080 = 0.5\nrtx3090 = 1\na6000 = 4\na100 = 7\n\
         [admission]\ndeprioritize = \"qos\"\nqos = \"gputokens-overdraft\"\n[agent]\njobs_dir = \"{lab}/gpu-jobs\"\n"
    );
    let out = check_slurm(&good).ok();
    let spank = format!(
        "slurm: ok: spank_gputokens.so (optional, /etc/slurm/plugstack.conf.d/gputokens.conf) records job GPUs in \
         {lab}/gpu-jobs, where [agent] jobs_dir reads them"
    );
    assert!(out.stdout.lines().any(|l| l == spank), "no line '{spank}' in:\n{}", out.stdout);
    for line in [
        "slurm: ok: JobSubmitPlugins includes gputokens (/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_gputokens.so)",
        "slurm: ok: AccountingStorageTRES records every GPU type of the nodes (a100_3g.20gb, a6000, rtx2080, rtx3090)",
        // The cluster's MIG slices, priced from the a100 line.
        "slurm: ok: [prices] prices MIG slices by their GPU type: a100_3g.20gb (3/7 of a100)",
        "slurm: ok: [prices] lists every GPU type of the nodes",
        "slurm: ok: deprioritize = qos: 'gputokens-overdraft' exists and PriorityWeightQOS is 10000",
        "slurm: ok: slurm_user 'slurm' is slurmctld's SlurmUser",
    ] {
        assert!(out.stdout.lines().any(|l| l == line), "no line '{line}' in:\n{}", out.stdout);
    }

    let out =
        check_slurm("slurm_user = \"root\"\n[prices]\nrtx2080 = 0.5\nrtx3090 = 1\n[admission]\ndeprioritize = \"qos\"\nqos = \"nope\"\n");
    assert_eq!(out.code, 2, "{}", out.stdout);
    let problems: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("slurm: problem: ")).collect();
    assert_eq!(problems.len(), 4, "{}", out.stdout);
    // The cluster's one node is named after the host (`hostname -s`).
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let node = hostname.trim().split('.').next().unwrap();
    // The MIG slices too: no a100 line prices them.
    let unpriced = format!(
        "no price for a100_3g.20gb (on {node}), a6000 (on {node}): charged at the highest listed price, 1/GPU-hour"
    );
    assert!(problems[0].contains(&unpriced), "{}", problems[0]);
    assert!(problems[1].contains("QOS 'nope' does not exist"), "{}", problems[1]);
    assert!(problems[2].contains("slurm_user is 'root' but slurmctld runs as 'slurm'"), "{}", problems[2]);
    assert!(problems[3].contains("but [agent] jobs_dir is /run/gputokens/jobs"), "{}", problems[3]);
    assert!(out.stderr.contains("4 problem(s) in Slurm's configuration for gputokens"), "{}", out.stderr);
}
