//! The README's quick start on the test cluster, standing in for a site (tests/run.sh installed the
//! packages and started slurmctld with the plugin: steps 1 to 3 and 5). Step 4's keys are merged
//! into the example config as an admin edits it, and steps 6 and 7 run as written, line by line in
//! bash, with the test's own user for `alice` and the cluster's slurmctld log for Debian's: in shadow
//! mode alice, at the floor, submits a GPU job that runs and is logged and counted as refused; with
//! enforcement on the same job is refused. A README whose commands stop working fails here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gputokens::controller_status::{self, ControllerStatus};
use gputokens::Tokens;

use crate::admission::Admission;
use crate::cluster::serial;
use crate::common::{bin, run_as, Outcome, Site};
use crate::preemption::{squeue, wait_for};

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
const EXAMPLE: &str = include_str!("../../../../slurm-conf/gputokens.toml");
/// Where Debian's slurmctld logs, as the README's step 6 greps it.
const DEBIAN_SLURMCTLD_LOG: &str = "/var/log/slurm/slurmctld.log";
/// The file the README edits: here the test cluster's plugin reads it.
const PLUGIN_CONF: &str = "/etc/slurm/gputokens.toml";

/// The fenced block after `<!-- quick-start-test: NAME -->` in the README.
fn block(readme: &str, name: &str) -> String {
    let marker = format!("<!-- quick-start-test: {name} -->");
    let after = readme.split_once(&marker).unwrap_or_else(|| panic!("README has no {marker}")).1;
    let body = after.split_once("```").and_then(|(_, b)| b.split_once('\n')).expect("a fenced block").1;
    body.split_once("```").expect("the block's end").0.to_string()
}

/// `edit` merged into `base` as an admin edits the example: its tables' keys replace or add to theirs.
fn merge(base: &mut toml::Table, edit: &toml::Table) {
    for (key, value) in edit {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(mine)), toml::Value::Table(theirs)) => merge(mine, theirs),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

fn lab() -> PathBuf {
    PathBuf::from(std::env::var("GPUTOKENS_LAB").unwrap_or_else(|_| "/tmp/gputokens-cluster".into()))
}

/// One line of a README block, run by bash as root would type it: accountd and sbalance as
/// installed, GPUTOKENS_CONF naming the site's file. The site's one file is two here (the plugin's
/// and accountd's): a line that edits it edits both; restarting accountd's unit restarts the site's.
fn run_line(line: &str, site: &mut Site) -> Outcome {
    if line == "systemctl restart gputokens-accountd" {
        site.restart();
        return Outcome { code: 0, stdout: String::new(), stderr: String::new() };
    }
    if line.contains(PLUGIN_CONF) {
        let accountds = line.replace(PLUGIN_CONF, site.config.to_str().unwrap());
        run_bash(&accountds, site).ok();
    }
    run_bash(line, site)
}

fn run_bash(line: &str, site: &Site) -> Outcome {
    let installed = bin("accountd").parent().unwrap().display().to_string();
    let out = Command::new("bash")
        .args(["-c", line])
        .env("PATH", format!("{installed}:/usr/sbin:/usr/bin:/sbin:/bin"))
        .env("GPUTOKENS_CONF", &site.config)
        .current_dir("/tmp")
        .output()
        .expect("bash");
    out.into()
}

/// The block's commands: its lines but comments and blank ones, `alice` as the test's user.
fn commands(block: &str, alice: &str) -> Vec<String> {
    let lines = block.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
    lines
        .map(|l| {
            l.replace("alice", alice)
                .replace(DEBIAN_SLURMCTLD_LOG, &lab().join("log/slurmctld.log").display().to_string())
        })
        .collect()
}

fn shadow_counts(file: &Path) -> Option<controller_status::Shadow> {
    std::fs::read_to_string(file).ok().and_then(|t| ControllerStatus::parse(&t).ok()).and_then(|s| s.shadow)
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_readme_quick_start_runs_in_shadow_mode_then_refuses() {
    let cluster = serial();
    let alice = cluster.alice;
    let readme = std::fs::read_to_string(README).unwrap();
    let step4 = block(&readme, "config");
    let edit: toml::Table = step4.parse().unwrap_or_else(|e| panic!("step 4's TOML: {e}"));
    assert_eq!(edit["admission"]["enforce"].as_bool(), Some(false), "the quick start begins in shadow mode");

    // The plugin's file: the cluster's paths with step 4's keys. Its controller status directory,
    // beside the snapshot, as the packaged unit makes it for the SlurmUser.
    let adm = Admission::start();
    let controllers = lab().join("snapshot/controllers");
    std::fs::create_dir_all(&controllers).unwrap();
    let slurm = nix::unistd::User::from_name("slurm").unwrap().expect("the SlurmUser");
    nix::unistd::chown(&controllers, Some(slurm.uid), None).unwrap();
    adm.configure(&step4);
    // accountd's file: the example as the package installs it, edited as step 4 says.
    let mut config: toml::Table = EXAMPLE.parse().unwrap();
    merge(&mut config, &edit);
    config["paths"]
        .as_table_mut()
        .unwrap()
        .insert("controller_status".into(), controllers.display().to_string().into());
    // "Set the prices of your GPU types": this site's also has two MIG slices of an A100.
    config["prices"].as_table_mut().unwrap().insert("a100".into(), 7.into());
    let mut site = Site::from_config(&toml::to_string(&config).unwrap());
    assert!(site.accountd(None, &["config", "check"]).ok().stdout.contains("valid"));
    // Step 5's last command, against the running Slurm: what steps 3 and 4 set up is ok. (The test's
    // site keeps its ledger and snapshot in a directory of its own, which the check rightly calls a
    // problem: the plugin follows it through a link.)
    let checked = site.accountd(None, &["config", "check", "--slurm"]).stdout;
    for ok in [
        "slurm: ok: JobSubmitPlugins includes gputokens",
        "slurm: ok: AccountingStorageTRES records every GPU type of the nodes",
        "slurm: ok: [prices] lists every GPU type of the nodes",
        "slurm: ok: slurm_user 'slurm' is slurmctld's SlurmUser",
    ] {
        assert!(checked.contains(ok), "no '{ok}': {checked}");
    }

    // Step 6, in shadow mode: her job is accepted and runs, slurmctld logs the refusal, it is counted.
    let shadow = commands(&block(&readme, "shadow"), alice);
    assert!(shadow[0].starts_with("accountd admin adjust"), "{shadow:?}");
    run_line(&shadow[0], &mut site).ok();
    adm.follow(&site);
    adm.settled();
    let submitted = run_line(&shadow[1], &mut site).ok();
    let job = submitted.stdout.trim().rsplit(' ').next().unwrap().to_string();
    assert!(submitted.stdout.starts_with("Submitted batch job"), "{}", submitted.stdout);
    wait_for("her job to run", || matches!(squeue(&job, "%T").as_str(), "RUNNING" | "COMPLETING" | ""));
    let logged = format!("gputokens: shadow mode, not enforced: refused a GPU job of {alice} ");
    assert!(adm.log().contains(&logged), "{}", adm.log());
    run_line(&shadow[2], &mut site).ok();
    let host = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
    let status = controllers.join(controller_status::file_name(&host));
    let uid = nix::unistd::User::from_name(alice).unwrap().unwrap().uid.as_raw();
    let deadline = Instant::now() + Duration::from_secs(controller_status::STALE_AFTER_SECS as u64);
    loop {
        let counted = shadow_counts(&status).and_then(|s| s.refused_by_uid.get(&uid).copied());
        if counted == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "{} does not count it: {:?}", status.display(), shadow_counts(&status));
        std::thread::sleep(Duration::from_millis(200));
    }

    // What sbalance shows root: her -10, and under the table whom shadow mode would have refused.
    let shown = run_line(&shadow[3], &mut site).ok().stdout;
    assert!(shown.contains(alice) && shown.contains("-10"), "{shown}");
    assert!(shown.contains("gputokens is in shadow mode"), "{shown}");
    assert!(shown.contains(&format!("Submissions that would have been refused, by user: {alice} 1")), "{shown}");

    // Step 7: enforcement on (the plugin reads the file again; accountd restarts), the same job
    // refused, nothing said of shadow mode any more, alice back where she began.
    let enforce = commands(&block(&readme, "enforce"), alice);
    assert_eq!(enforce.len(), 4, "{enforce:?}");
    let reads = adm.log().matches("gputokens: job_submit/gputokens ").count();
    run_line(&enforce[0], &mut site).ok();
    wait_for("the plugin to read the file again", || {
        adm.log().matches("gputokens: job_submit/gputokens ").count() > reads
    });
    assert!(!adm.log().rsplit("gputokens: job_submit/gputokens ").next().unwrap().contains("SHADOW MODE"));
    run_line(&enforce[1], &mut site).ok();
    let refused = run_line(&enforce[2], &mut site);
    assert_ne!(refused.code, 0, "refused with enforcement on: {}", refused.stdout);
    assert!(refused.stderr.contains("GPU jobs are refused"), "{}", refused.stderr);
    let deadline = Instant::now() + Duration::from_secs(controller_status::STALE_AFTER_SECS as u64 + 5);
    loop {
        let shown = run_line(&shadow[3], &mut site).ok().stdout;
        if !shown.contains("shadow mode") {
            break;
        }
        assert!(Instant::now() < deadline, "sbalance still speaks of shadow mode: {shown}");
        std::thread::sleep(Duration::from_millis(500));
    }
    run_line(&enforce[3], &mut site).ok();
    // Where she began, less what her smoke-test job cost (accountd's restart charged it).
    let history = run_line(&format!("sbalance -u {alice} --history 50 --json"), &mut site).ok().stdout;
    let history: serde_json::Value = serde_json::from_str(&history).unwrap();
    let entries = history["entries"].as_array().unwrap();
    let mut spent = Tokens::ZERO;
    // Her entries: the initial grant, the two adjustments, and charges of her job alone.
    let initial = |e: &&serde_json::Value| e["kind"] == "grant" && e["reason"] == "initial balance";
    for entry in entries.iter().filter(|e| e["kind"] != "adjust" && !initial(e)) {
        assert_eq!((&entry["kind"], entry["job_id"].as_str()), (&"charge".into(), Some(job.as_str())), "{entry}");
        spent = spent - entry["amount"].as_str().unwrap().parse::<Tokens>().unwrap();
    }
    let balance = run_line(&format!("sbalance -u {alice} -n -P -o Balance"), &mut site).ok().stdout;
    assert_eq!(balance.trim().parse::<Tokens>().unwrap(), Tokens::whole(100) - spent, "adjusted back: {history}");
    run_as(None, Path::new("/usr/bin/scancel"), &[&job]);
}
