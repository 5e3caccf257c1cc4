//! A clock that jumps ahead (a bad RTC at boot, before NTP) replenishes and expires nothing more
//! than a day past the newest time Slurm has shown, and catches up once Slurm's jobs show the time
//! (the audit's L7). Slurm here is a stand-in squeue whose jobs' times the test sets.

use std::os::unix::fs::PermissionsExt;

use crate::common::Site;

/// A `[slurm] bin_dir` whose squeue shows one job submitted at the time in `submitted` (a file the
/// test rewrites); the other commands show nothing.
fn slurm_showing(dir: &std::path::Path) -> std::path::PathBuf {
    let submitted = dir.join("submitted");
    let squeue = format!(
        "#!/bin/sh\nt=$(cat '{}')\nprintf '{{\"jobs\":[{{\"job_id\":1,\"user_name\":\"bob\",\"user_id\":1002,\
         \"job_state\":\"RUNNING\",\"submit_time\":%s,\"start_time\":%s}}]}}\\n' \"$t\" \"$t\"\n",
        submitted.display()
    );
    for (name, text) in [("squeue", squeue.as_str()), ("sacct", "#!/bin/sh\nexit 0\n")] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    submitted
}

fn daily_grants(site: &Site) -> usize {
    let history = site.accountd(None, &["admin", "history", "alice", "--json"]).ok().stdout;
    let entries: serde_json::Value = serde_json::from_str(&history).unwrap();
    entries["entries"].as_array().unwrap().iter().filter(|e| e["kind"] == "replenish").count()
}

#[test]
fn a_clock_ahead_of_slurm_replenishes_no_further_than_a_day_past_what_slurm_showed() {
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let submitted = slurm_showing(bin.path());
    // A fixed mid-June noon (no month's turn, no daylight-saving change in the five days before it):
    // the outcome must not depend on the day the suite runs.
    let now = gputokens::time::parse_timestamp("2026-06-17T12:00:00").unwrap();
    let at = gputokens::time::format_local(now);
    let day = 86_400;
    // The newest job Slurm shows was submitted four days ago: to gputokens, the clock may be wrong.
    std::fs::write(&submitted, (now - 4 * day).to_string()).unwrap();
    let mut site = Site::start(
        "daily = 1",
        &format!("[slurm]\nbin_dir = \"{}\"\n[intervals]\ncharge = \"1h\"\ncheck = \"1h\"\n", bin.path().display()),
    );
    // The site's own serve replenishes in its cycles too: on the real calendar it would grant days
    // up to a day past whatever squeue shows when its cycle runs, so it runs on the test's clock.
    site.restart_at(Some(&at));
    // alice, first seen five days ago (as a charge then would have seen her).
    let first = gputokens::time::format_local(now - 5 * day);
    let sacct = site.file(
        "first-seen.txt",
        &format!("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n100|alice|gres/gpu:a6000=1|0|{first}|CANCELLED\n"),
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct, "--now", &first]).ok();

    let held = site.accountd(None, &["tick", "--skip-charge", "--now", &at]).ok();
    assert_eq!(daily_grants(&site), 2, "the two days up to a day past Slurm's newest job: {}", held.stderr);
    assert!(held.stderr.contains("over a day past the newest time Slurm has shown"), "{}", held.stderr);
    assert!(held.stderr.contains("nothing held is lost"), "{}", held.stderr);

    // A job submitted now: the clock is right after all, and the held days come.
    std::fs::write(&submitted, now.to_string()).unwrap();
    let caught_up = site.accountd(None, &["tick", "--skip-charge", "--now", &at]).ok();
    assert_eq!(daily_grants(&site), 5, "{}", caught_up.stderr);
    assert!(!caught_up.stderr.contains("over a day past"), "{}", caught_up.stderr);
    assert_eq!(site.balance("alice"), "105");
}

/// `accountd tick` asks squeue once, for its charge and its check alike: on a big site each read
/// is a parse of a queue of many megabytes (bench/scale.sh), and one tick is one moment of it.
#[test]
fn a_tick_reads_the_queue_once_for_its_charge_and_its_check() {
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let now = gputokens::time::parse_timestamp("2026-06-17T12:00:00").unwrap();
    let calls = bin.path().join("squeue.calls");
    let squeue = format!(
        "#!/bin/sh\necho \"$* by $(tr '\\0' ' ' < /proc/$PPID/cmdline)\" >> '{}'\nprintf '{{\"jobs\":[{{\"job_id\":7,\"user_name\":\"bob\",\"user_id\":1002,\
         \"job_state\":\"RUNNING\",\"submit_time\":{s},\"start_time\":{s},\"nodes\":\"vm\",\
         \"tres_alloc_str\":\"cpu=1,node=1,gres/gpu=1,gres/gpu:a6000=1\"}}]}}\\n'\n",
        calls.display(),
        s = now - 1800
    );
    let sacct = "#!/bin/sh\necho 'JobIDRaw|User|Account|AllocTRES|ElapsedRaw|Start|End|State|NodeList'\n";
    for (name, text) in [("squeue", squeue.as_str()), ("sacct", sacct)] {
        let path = bin.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // (Site's own accountd serve reads the queue too, in its cycles.)
    let site = Site::start("", &format!("[slurm]\nbin_dir = \"{}\"\n", bin.path().display()));
    let tick = site.accountd(None, &["tick", "--now", &gputokens::time::format_local(now)]).ok();
    assert!(tick.stdout.contains("1 running GPU jobs"), "the charge saw the job: {}", tick.stdout);
    assert!(tick.stdout.contains("1 GPU jobs running"), "the check saw the same queue: {}", tick.stdout);
    let asked = std::fs::read_to_string(&calls).unwrap();
    let by_tick = asked.lines().filter(|l| l.contains("--json") && l.contains(" tick ")).count();
    assert_eq!(by_tick, 1, "{asked}");
}

/// squeue fails after sacct's finished runs were charged (in a transaction of their own): the tick
/// fails and its window does not move, and the next tick charges none of them twice. bob's job 7,
/// requeued, has a finished run (sacct) and a running one (squeue): each is charged once.
#[test]
fn a_tick_whose_queue_read_fails_charges_its_finished_runs_once() {
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let now = gputokens::time::now();
    let queue_up = bin.path().join("squeue.up");
    let squeue = format!(
        "#!/bin/sh\n[ -e '{}' ] || {{ echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1; }}\n\
         printf '{{\"jobs\":[{{\"job_id\":7,\"user_name\":\"bob\",\"user_id\":1002,\
         \"job_state\":\"RUNNING\",\"submit_time\":{s},\"start_time\":{s},\"nodes\":\"vm\",\
         \"tres_alloc_str\":\"cpu=1,node=1,gres/gpu=1,gres/gpu:a6000=1\"}}]}}\\n'\n",
        queue_up.display(),
        s = now - 600
    );
    let a6000 = "billing=1,cpu=1,gres/gpu:a6000=1,gres/gpu=1,node=1";
    let sacct = format!(
        "#!/bin/sh\necho 'JobIDRaw|User|Account|AllocTRES|ElapsedRaw|Start|End|State|NodeList'\n\
         echo '41|alice|gputokens|{a6000}|3600|{}|{}|COMPLETED|vm'\n\
         echo '7|bob|gputokens|{a6000}|1800|{}|{}|REQUEUED|vm'\n",
        now - 3660,
        now - 60,
        now - 2700,
        now - 900
    );
    for (name, text) in [("squeue", squeue.as_str()), ("sacct", sacct.as_str())] {
        let path = bin.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut site = Site::start("", &format!("[slurm]\nbin_dir = \"{}\"\n", bin.path().display()));
    site.stop();
    // Charging began a day ago (a new ledger leaves out what ended before its first cycle).
    let ledger_path = site.path("lib/ledger.sqlite");
    let rules = gputokens::policy::BucketRules::default();
    ledger::Ledger::open(&ledger_path, rules).unwrap().set_meta("charging_since", &(now - 86_400).to_string()).unwrap();
    let charges = |user: &str| -> Vec<(String, String)> {
        let ledger = ledger::Ledger::open(&ledger_path, rules).unwrap();
        let history = ledger.history(user).unwrap();
        let charged = history.iter().filter(|e| e.kind == gputokens::entry::EntryKind::Charge);
        charged.map(|e| (e.job_id.clone().unwrap_or_default(), e.amount.to_string())).collect()
    };

    let failed = site.accountd(None, &["tick"]);
    assert!(failed.code != 0 && failed.stderr.contains("Unable to contact"), "{}", failed.stderr);
    assert_eq!(charges("alice"), [("41".to_string(), "-4".to_string())], "the finished runs' transaction stands");
    assert_eq!(charges("bob"), [("7".to_string(), "-2".to_string())], "half an hour of job 7's first run");

    std::fs::write(&queue_up, "").unwrap();
    let tick = site.accountd(None, &["tick"]).ok();
    assert!(tick.stdout.contains("2 finished and 1 running GPU jobs"), "{}", tick.stdout);
    assert_eq!(charges("alice"), [("41".to_string(), "-4".to_string())], "job 41 once");
    let bob = charges("bob");
    let mut amounts: Vec<f64> = bob.iter().map(|(_, amount)| amount.parse().unwrap()).collect();
    amounts.sort_by(f64::total_cmp);
    assert!(bob.iter().all(|(job, _)| job == "7") && amounts.len() == 2, "job 7's two runs once each: {bob:?}");
    assert_eq!(amounts[0], -2.0, "its finished run: {bob:?}");
    assert!((-0.7..=-0.66).contains(&amounts[1]), "about 600 s of an a6000 running: {bob:?}");
}
