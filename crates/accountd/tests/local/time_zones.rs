//! Replenishment and charging in zones with DST, through the real binary run with `TZ` set as a
//! site's would be (the test cluster runs in UTC): one daily grant per local date, each at the
//! first instant of its day, also on a day without a midnight (Chile) or with 25 hours (Berlin).

use std::path::Path;

use crate::common::{bin, run_as, Site};

/// A site whose `accountd serve` runs no cycle during the test: only the commands below touch alice.
/// serve runs each cycle once as it starts: those are over before the test goes on (one that ran after
/// alice was first seen, on the real clock, would grant her every day since the test's dates).
fn quiet_site() -> Site {
    let site = Site::start("daily = 1", "[intervals]\ncharge = \"1h\"\ncheck = \"1h\"\n");
    crate::cluster::wait_until(30, "serve's start-up charge and check cycles", || {
        let log = site.log();
        let ended =
            |name: &str| log.contains(&format!("{name} cycle (")) || log.contains(&format!("{name} cycle failed"));
        if ended("charge") && ended("check") {
            Ok(())
        } else {
            Err(log.lines().last().unwrap_or_default().to_string())
        }
    });
    site
}

/// `accountd --config <site> args...` as root, in time zone `zone`.
fn accountd_in(site: &Site, zone: &str, args: &[&str]) -> String {
    let tz = format!("TZ={zone}");
    let accountd = bin("accountd");
    let mut all = vec![tz.as_str(), accountd.to_str().unwrap(), "--config", site.config.to_str().unwrap()];
    all.extend_from_slice(args);
    run_as(None, Path::new("/usr/bin/env"), &all).ok().stdout
}

/// alice first seen at local time `when` (a GPU job cancelled before it ran).
fn first_seen(site: &Site, zone: &str, when: &str) {
    let sacct = site.file(
        "first-seen.txt",
        &format!("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n100|alice|gres/gpu:a6000=1|0|{when}|CANCELLED\n"),
    );
    accountd_in(site, zone, &["charge", "--sacct-file", &sacct, "--now", when]);
}

/// The times of alice's daily replenishments, oldest first.
fn daily_grants(site: &Site) -> Vec<i64> {
    let history = site.accountd(None, &["admin", "history", "alice", "--json"]).ok().stdout;
    let entries: serde_json::Value = serde_json::from_str(&history).unwrap();
    let mut times: Vec<i64> = entries["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "replenish")
        .map(|e| e["at_unix"].as_i64().unwrap())
        .collect();
    times.sort();
    times
}

#[test]
fn a_day_without_a_midnight_is_granted_at_its_first_instant() {
    // America/Santiago, 2026-09-06: at 00:00 -04 the clocks jump to 01:00 -03 (04:00 UTC).
    let site = quiet_site();
    first_seen(&site, "America/Santiago", "2026-09-04T20:00:00");
    accountd_in(&site, "America/Santiago", &["tick", "--skip-charge", "--now", "2026-09-07T12:00:00"]);
    accountd_in(&site, "America/Santiago", &["tick", "--skip-charge", "--now", "2026-09-07T18:00:00"]);
    let sep5_midnight = 1_788_580_800; // 2026-09-05T04:00:00Z, 00:00 -04
    let sep6_first_instant = 1_788_667_200; // 2026-09-06T04:00:00Z, 01:00 -03
    let sep7_midnight = 1_788_750_000; // 2026-09-07T03:00:00Z, 00:00 -03
    assert_eq!(daily_grants(&site), [sep5_midnight, sep6_first_instant, sep7_midnight]);
    assert_eq!(site.balance("alice"), "103");
}

#[test]
fn the_repeated_hour_is_charged_once_and_the_long_day_granted_once() {
    // Europe/Berlin, 2026-10-25: 03:00 CEST goes back to 02:00 CET, the day has 25 hours.
    let site = quiet_site();
    first_seen(&site, "Europe/Berlin", "2026-10-24T12:00:00");
    // One a6000 hour from 02:30 CEST to 02:30 CET: the same wall-clock text, an hour apart. sacct
    // gives unix seconds (SLURM_TIME_FORMAT=%s), so the job is an hour long and charged 4 tokens.
    let start = 1_792_888_200; // 2026-10-25T00:30:00Z
    let sacct = site.file(
        "repeated-hour.txt",
        &format!("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n201|alice|gres/gpu:a6000=1|3600|{start}|COMPLETED\n"),
    );
    let out = accountd_in(&site, "Europe/Berlin", &["charge", "--sacct-file", &sacct, "--now", "2026-10-25T03:30:00"]);
    assert!(out.contains("1 charge entries"), "{out}");
    let again =
        accountd_in(&site, "Europe/Berlin", &["charge", "--sacct-file", &sacct, "--now", "2026-10-25T04:00:00"]);
    assert!(again.contains("0 charge entries"), "{again}");
    for now in ["2026-10-25T23:59:00", "2026-10-26T00:30:00", "2026-10-26T12:00:00"] {
        accountd_in(&site, "Europe/Berlin", &["tick", "--skip-charge", "--now", now]);
    }
    let oct25_midnight = 1_792_879_200; // 2026-10-24T22:00:00Z, 00:00 CEST
    let oct26_midnight = 1_792_969_200; // 2026-10-25T23:00:00Z, 00:00 CET
    assert_eq!(daily_grants(&site), [oct25_midnight, oct26_midnight]);
    assert_eq!(site.balance("alice"), "98");
}
