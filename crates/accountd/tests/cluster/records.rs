//! Records that used to stop charging for everybody, against the real test cluster: a user named
//! as SSSD names them, a sacct row of garbage, a clock (`tick --now`) ahead of Slurm's, and a
//! suspended job.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::by_hand::gpu_cost as cost;
use gputokens::Tokens;

use crate::charging::{balance, elapsed, live_site, LIVE, PRICES};
use crate::cluster::{
    charge_cycles, sacct, sbatch, serial, slurm_in_unix_time, wait_charge_cycles, wait_finished, wait_ran, wait_until,
};
use crate::common::{http_get, run_as, Site};

/// A user as SSSD names them: not a portable POSIX name (`useradd --badname`), a Slurm user all the same.
/// One fixed user, not one of the sets `serial()` hands out: her name's form is the point, and only
/// the test below runs jobs as her (in a site of its own, which charges only what ends after it began).
const ANN: &str = "ann@example.org";

fn ensure_ann() {
    let known = run_as(None, Path::new("/usr/bin/id"), &["-u", ANN]).code == 0;
    if !known {
        run_as(None, Path::new("/usr/sbin/useradd"), &["--badname", "-m", "-s", "/bin/bash", ANN]).ok();
    }
    let assoc = run_as(None, Path::new("/usr/bin/sacctmgr"), &["-n", "-P", "show", "assoc", &format!("user={ANN}")]);
    if !assoc.ok().stdout.contains("gputokens") {
        run_as(None, Path::new("/usr/bin/sacctmgr"), &["-i", "add", "user", ANN, "account=gputokens"]).ok();
    }
}

fn tick(site: &Site, args: &[&str]) -> String {
    let mut all = vec!["tick"];
    all.extend_from_slice(args);
    site.accountd(None, &all).ok().stdout
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn ann_at_example_org_is_charged_exactly_beside_alice() {
    let cluster = serial();
    let alice = cluster.alice;
    ensure_ann();
    run_as(None, Path::new("/usr/bin/scancel"), &["-u", ANN]).ok();
    let site = live_site();
    let hers = sbatch(ANN, &["--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    let alices = sbatch(alice, &["--gres=gpu:rtx2080:1", "--wrap", "sleep 2"]);
    assert_eq!(wait_finished(&hers), "COMPLETED");
    assert_eq!(wait_finished(&alices), "COMPLETED");
    let out = tick(&site, &[]);
    assert!(!out.contains("cannot be charged"), "{out}");

    let ann_expected = Tokens::whole(100) - cost(Tokens::whole(3600), elapsed(&hers));
    assert_eq!(balance(&site, ANN), ann_expected);
    assert_eq!(balance(&site, alice), Tokens::whole(100) - cost(Tokens::whole(1800), elapsed(&alices)));
    // She reads her own row through the socket (her name from SO_PEERCRED), and the job_submit
    // plugin's snapshot lists her under her whole name.
    let own = site.sbalance(Some(ANN), &["-P", "-n", "-o", "User,Balance"]).ok().stdout;
    assert_eq!(own, format!("{ANN}|{ann_expected}\n"));
    let snapshot = std::fs::read_to_string(site.path("lib/balances.snapshot")).unwrap();
    assert!(snapshot.contains(&format!("\nuser {ANN} {}\n", ann_expected.micro())), "{snapshot}");
    // Her history is hers, by name.
    let history = site.accountd(None, &["admin", "history", ANN]).ok().stdout;
    assert!(history.contains(&hers), "{history}");
}

/// A `[slurm] bin_dir` whose sacct is the real one with `extra` rows appended; the others are links.
/// Rows of sacct's columns (`JobIDRaw|…|NodeList`, as `gputokens::slurm::sacct::FIELDS`) get an
/// empty SLUID where accountd asks for it (25.11+).
fn slurm_with_extra_sacct_rows(dir: &Path, extra: &str) {
    for tool in ["squeue", "sinfo", "scontrol"] {
        std::os::unix::fs::symlink(format!("/usr/bin/{tool}"), dir.join(tool)).unwrap();
    }
    let script = format!(
        "#!/bin/sh\n/usr/bin/sacct \"$@\" || exit $?\ncase \"$*\" in *SLUID*) sluid='|' ;; *) sluid='' ;; esac\n\
         while IFS= read -r row; do case $row in *'|'*) echo \"$row$sluid\" ;; *) echo \"$row\" ;; esac; done <<'ROWS'\n{extra}ROWS\n"
    );
    std::fs::write(dir.join("sacct"), script).unwrap();
    std::fs::set_permissions(dir.join("sacct"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

fn skipped(metrics: &str, reason: &str) -> u64 {
    let prefix = format!("gputokens_records_skipped_total{{reason=\"{reason}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |n| n.parse().unwrap())
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_garbage_sacct_row_is_counted_and_the_others_are_charged() {
    let cluster = serial();
    let alice = cluster.alice;
    let bin = tempfile::tempdir().unwrap();
    // A row of garbage, and a row whose user no format can carry: each left out alone.
    slurm_with_extra_sacct_rows(
        bin.path(),
        "garbage that is not a sacct row\n999999|mallory x|gputokens|gres/gpu:a6000=1|60|1795444368|1795444428|COMPLETED|vm\n",
    );
    let slurm = format!("[slurm]\nbin_dir = \"{}\"\n", bin.path().display());
    let tables = format!("{}[intervals]\ncharge = \"2s\"\n", LIVE.replacen("[slurm]\n", &slurm, 1));
    let site = Site::with_prices("", PRICES, &tables);
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    wait_finished(&job);
    let expected = Tokens::whole(100) - cost(Tokens::whole(3600), elapsed(&job));

    let url = format!("{}/metrics", site.http_url());
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let (_, metrics) = http_get(&url);
        if balance(&site, alice) == expected && skipped(&metrics, "unparseable") > 0 {
            break metrics;
        }
        assert!(Instant::now() < deadline, "alice not charged or the row not counted:\n{metrics}\n{}", site.log());
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(skipped(&metrics, "unparseable"), 1, "{metrics}");
    assert_eq!(skipped(&metrics, "bad_user_name"), 1, "{metrics}");
    assert!(!metrics.contains("mallory"), "a user name is never a label:\n{metrics}");
    // Two more cycles read the same rows: counted and logged once, and alice charged once.
    wait_charge_cycles(&site, charge_cycles(&site), 2);
    let (_, later) = http_get(&url);
    assert_eq!(skipped(&later, "unparseable"), 1, "{later}");
    assert_eq!(skipped(&later, "bad_user_name"), 1, "{later}");
    assert_eq!(later.matches("gputokens_cycle_failures_total{").count(), 0, "no cycle failed:\n{later}");
    let log = site.log();
    assert_eq!(log.matches("garbage that is not a sacct row").count(), 1, "{log}");
    assert_eq!(log.matches("mallory x").count(), 1, "{log}");
    assert_eq!(balance(&site, alice), expected);
}

fn replenishments(site: &Site, user: &str) -> usize {
    let history = site.accountd(None, &["admin", "history", user, "--json"]).ok().stdout;
    let entries: serde_json::Value = serde_json::from_str(&history).unwrap();
    entries["entries"].as_array().unwrap().iter().filter(|e| e["kind"] == "replenish").count()
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn tick_an_hour_ahead_then_normal_cycles_charge_once_and_grant_nothing_early() {
    let cluster = serial();
    let alice = cluster.alice;
    let first_day = chrono::Local::now().date_naive();
    let site = live_site();
    let job = sbatch(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 6"]);
    wait_ran(&job, 2);
    let ahead = (chrono::Utc::now().timestamp() + 3600).to_string();
    let out = tick(&site, &["--now", &ahead]);
    let charged_ahead = balance(&site, alice);
    assert!(charged_ahead < Tokens::whole(100), "the running job charged so far: {out}");
    // Charged up to when squeue was read, not for the hour that has not come.
    assert!(charged_ahead > Tokens::whole(100) - cost(Tokens::whole(3600), 60), "{out}");

    wait_finished(&job);
    tick(&site, &[]);
    tick(&site, &[]);
    assert_eq!(balance(&site, alice), Tokens::whole(100) - cost(Tokens::whole(3600), elapsed(&job)));
    let again = tick(&site, &[]);
    assert!(again.contains(": 0 charge entries"), "{again}");
    // Replenished only for days that came on the clock (none, unless the test ran over midnight).
    let days = (chrono::Local::now().date_naive() - first_day).num_days() as usize;
    assert_eq!(replenishments(&site, alice), days);

    let two_days = (chrono::Utc::now().timestamp() + 2 * 86400).to_string();
    let refused = site.accountd(None, &["tick", "--now", &two_days]);
    assert_eq!(refused.code, 2, "{}{}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("more than a day ahead of this host's clock"), "{}", refused.stderr);
    assert_eq!(balance(&site, alice), Tokens::whole(100) - cost(Tokens::whole(3600), elapsed(&job)));
    assert_eq!(replenishments(&site, alice), days);
}

/// Waits until slurmctld has held `job` suspended for `secs` seconds (`scontrol show job`: its
/// state, and the SuspendTime it records, from the clock slurmctld reads too).
fn wait_suspended_for(job: &str, secs: i64) {
    wait_until(30 + secs as u64, &format!("job {job} suspended for {secs} s"), || {
        let shown = slurm_in_unix_time("scontrol", &["show", "job", "-o", job]);
        let field = |name: &str| shown.split_whitespace().find_map(|f| f.strip_prefix(name)).unwrap_or_default();
        let (state, since) = (field("JobState="), field("SuspendTime="));
        let now = gputokens::time::now();
        match since.parse::<i64>() {
            Ok(at) if state == "SUSPENDED" && now - at >= secs => Ok(()),
            _ => Err(format!("JobState={state} SuspendTime={since}, now {now}")),
        }
    });
}

fn scontrol(args: &[&str]) {
    run_as(None, Path::new("/usr/bin/scontrol"), args).ok();
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_suspended_job_pays_for_its_running_time_only() {
    let cluster = serial();
    let bob = cluster.bob;
    let site = live_site();
    let job = sbatch(bob, &["--gres=gpu:a6000:1", "--wrap", "sleep 8"]);
    wait_ran(&job, 2);
    scontrol(&["suspend", &job]);
    // Suspended: charged what it ran, and nothing more however long it stays so.
    tick(&site, &[]);
    let at_suspension = balance(&site, bob);
    assert!(at_suspension < Tokens::whole(100));
    wait_suspended_for(&job, 6);
    tick(&site, &[]);
    assert_eq!(balance(&site, bob), at_suspension, "charged while suspended");
    scontrol(&["resume", &job]);
    wait_finished(&job);
    tick(&site, &[]);

    // slurmdbd may record the end a moment after squeue stops showing the job.
    let row = crate::cluster::wait_until(30, "the job's end in sacct", || {
        let row = sacct(&["-j", &job, "-X", "-n", "-P", "-o", "Start,End"]);
        match row.contains("Unknown") {
            true => Err(row),
            false => Ok(row),
        }
    });
    let ran = elapsed(&job);
    let times: Vec<i64> =
        row.trim().split('|').map(|t| gputokens::time::parse_timestamp(t).unwrap_or_else(|| panic!("{row}"))).collect();
    assert!(ran as i64 + 6 <= times[1] - times[0], "ElapsedRaw {ran} leaves out the suspension: {row}");
    assert_eq!(balance(&site, bob), Tokens::whole(100) - cost(Tokens::whole(3600), ran));
}
