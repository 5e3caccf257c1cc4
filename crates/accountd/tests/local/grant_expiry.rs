//! Grants with an end date through the real binaries: `admin grant ... --expires 2m`, announced
//! once (the `[notify] command`), what is left expiring to the ledger when accountd's check cycle
//! reaches the end (`tick --now`), the balance, history and statement showing it, nothing else moved.

use crate::common::Site;
use crate::notify_capture::{args, capture_script, captured};
use crate::status_page::{page_of, proxy_settings};

/// A site whose notifications go to the capture script, with a status page behind a proxy.
fn site() -> (Site, tempfile::NamedTempFile) {
    let (web, secret) = proxy_settings();
    let mut site = Site::start("daily = 0", &format!("[web]\nallow_http = true\n{web}"));
    let command = capture_script(&site);
    let config = std::fs::read_to_string(&site.config).unwrap();
    std::fs::write(&site.config, format!("{config}\n[notify]\ncommand = [\"{command}\"]\nexpiry_warning = \"1h\"\n"))
        .unwrap();
    site.restart();
    (site, secret)
}

#[test]
fn a_grant_ending_in_two_minutes_is_announced_once_and_what_is_left_expires_once() {
    let (site, _secret) = site();
    site.accountd(None, &["admin", "grant", "bob", "5", "--reason", "unrelated"]).ok();
    let granted = site
        .accountd(
            None,
            &["admin", "grant", "alice", "50", "--reason", "course credit", "--key", "c1", "--expires", "2m"],
        )
        .ok();
    assert!(granted.stdout.contains("grant +50 alice: balance now 150"), "{}", granted.stdout);
    // Charged 8: 2 a6000-hours at the seed's price, 4 per GPU-hour.
    let start = gputokens::time::now() - 7200;
    let sacct = site.file(
        "sacct.txt",
        &format!("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n1|alice|gres/gpu:a6000=1,gres/gpu=1|7200|{start}|COMPLETED\n"),
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    assert_eq!(site.balance("alice"), "142");

    // Within the hour before its end: announced, once.
    site.accountd(None, &["tick", "--skip-charge"]).ok();
    site.accountd(None, &["tick", "--skip-charge"]).ok();
    assert_eq!(args(&site).iter().filter(|a| a.ends_with("expiring alice")).count(), 1, "{:?}", args(&site));
    let all = captured(&site).join("\n");
    assert!(all.contains("STDIN: gputokens: 42 tokens left of a grant of 50 expire at "), "{all}");
    // sbalance (and sbatch's balance line, from the same row) names it while it lasts.
    let json = site.sbalance(Some("alice"), &["--json"]).ok().stdout;
    let row: serde_json::Value = serde_json::from_str(&json).unwrap();
    let expiring = &row["users"][0]["expiring"];
    assert_eq!(expiring["tokens"], "42", "{json}");
    // Two minutes after the grant (a minute's slack for a slow machine), in local time: on the
    // next day's date when the grant was made in the day's last two minutes.
    let ends = expiring["at_unix"].as_i64().unwrap();
    let expected = gputokens::time::now() + 120;
    assert!((expected - 60..=expected).contains(&ends), "ends {ends}, not about {expected}: {json}");
    assert_eq!(expiring["at"].as_str().and_then(gputokens::time::parse_timestamp), Some(ends), "{json}");
    // So does the status page.
    let page = page_of(&site, "alice");
    assert_eq!((page["expiring"]["tokens"].as_str(), &page["expiring"]["at"]), (Some("42"), &expiring["at"]));
    assert!(page_of(&site, "bob")["expiring"].is_null(), "bob has no grant ending");

    // At its end the 42 left expire (the 8 charged came out of the grant), once.
    let after = gputokens::time::format_local(gputokens::time::now() + 180);
    let tick = site.accountd(None, &["tick", "--skip-charge", "--now", &after]).ok();
    assert!(tick.stdout.contains("1 expired") || tick.stderr.contains("1 expired"), "{}{}", tick.stdout, tick.stderr);
    site.accountd(None, &["tick", "--skip-charge", "--now", &after]).ok();
    assert_eq!(site.balance("alice"), "100", "the initial balance stays");
    assert_eq!(site.balance("bob"), "105", "nothing else changes");
    let json = site.sbalance(Some("alice"), &["--json"]).ok().stdout;
    let row: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(row["users"][0]["expiring"].is_null(), "ended: {json}");
    let history = site.sbalance(Some("alice"), &["--history", "5", "-P", "-n"]).ok().stdout;
    let expired: Vec<&str> = history.lines().filter(|l| l.contains("expired: 42 left of the grant of 50")).collect();
    assert_eq!(expired.len(), 1, "{history}");
    assert!(expired[0].contains("-42"), "{history}");
    // The month of the expiry (the tick's time): the next month's when the test began at a month's end.
    let month = &after[..7];
    // sbalance shows no month that has not begun: at a month's end, wait for it (a minute or two).
    let begun = gputokens::time::parse_timestamp(&format!("{month}-01T00:00:00")).unwrap();
    while gputokens::time::now() < begun {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let statement = site.sbalance(Some("alice"), &["--statement", month]).ok().stdout;
    let line = statement.lines().find(|l| l.contains("grant expired")).unwrap_or_else(|| panic!("{statement}"));
    assert!(line.contains("-42") && line.contains("expired: 42 left of the grant of 50"), "{statement}");
    let page = page_of(&site, "alice");
    assert!(page["expiring"].is_null(), "ended: {page}");
    let events: Vec<&serde_json::Value> =
        page["events"].as_array().unwrap().iter().filter(|e| e["event"] == "expired").collect();
    assert_eq!(events.len(), 1, "{page}");
    assert!(events[0]["what"].as_str().unwrap().starts_with("expired: 42 left of the grant of 50"), "{page}");
    let verify = site.accountd(None, &["admin", "verify"]).ok().stdout;
    assert!(verify.contains("consistent"), "{verify}");
}

#[test]
fn an_end_that_has_passed_or_cannot_be_read_is_refused() {
    let site = Site::start("", "");
    for (when, why) in [("2020-01-01", "has passed"), ("whenever", "neither a duration")] {
        let out = site.accountd(None, &["admin", "grant", "alice", "5", "--reason", "x", "--expires", when]);
        assert_eq!(out.code, 2, "{when}: {}", out.stdout);
        assert!(out.stderr.contains(why), "{when}: {}", out.stderr);
    }
    assert_eq!(site.balance("alice"), "100");
}
