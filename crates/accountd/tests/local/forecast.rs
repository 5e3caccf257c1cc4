//! The status page's forecast through the real daemon: what jobs spent over the last 7 days sets
//! the pace, an admin's adjustment or grant never does (the review's case: after the demo's −56.4
//! adjustment and +5 grant, alice was told she reaches the floor today).

use crate::common::Site;
use crate::status_page::{page_of, proxy_settings};

const DAY: i64 = 86_400;

/// Charges `user` for `hours` of one a6000 (4 tokens an hour) as if the charge ran at `at`.
fn charge_at(site: &Site, user: &str, job: u32, hours: i64, at: i64) {
    let sacct = site.file(
        &format!("sacct-{job}.txt"),
        &format!(
            "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n{job}|{user}|gres/gpu:a6000=1,gres/gpu=1|{}|{}|COMPLETED\n",
            hours * 3600,
            at - hours * 3600
        ),
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct, "--now", &at.to_string()]).ok();
}

#[test]
fn admins_adjustments_and_grants_are_no_spending_and_jobs_charges_are() {
    let (web, _secret) = proxy_settings();
    let site = Site::start("", &format!("[web]\nallow_http = true\n{web}"));
    let now = gputokens::time::now();

    // alice ran her jobs ten days ago; this week an admin took 98.4 and gave 5: overdraft, no jobs.
    charge_at(&site, "alice", 11, 3, now - 10 * DAY);
    site.accountd(None, &["admin", "adjust", "alice", "-98.4", "--reason", "demo: overspent"]).ok();
    site.accountd(None, &["admin", "grant", "alice", "5", "--reason", "demo: a little back"]).ok();
    let alice = page_of(&site, "alice");
    assert_eq!(alice["status"], "overdraft", "{alice}");
    assert!(alice["forecast"]["floor_on"].is_null(), "no job spent in the window: {}", alice["forecast"]);

    // bob spent 40 three days ago and 40 today: 80 over the three days since he was first seen.
    charge_at(&site, "bob", 21, 10, now - 3 * DAY);
    charge_at(&site, "bob", 22, 10, now);
    let bob = page_of(&site, "bob");
    let floor_on = bob["forecast"]["floor_on"].as_str().unwrap_or_else(|| panic!("a day for bob: {bob}"));
    // 20 left and 30 above the floor, at about 26.7 a day: in a day or two (replenishment aside).
    let today = gputokens::time::local_date(now);
    let day = chrono::NaiveDate::parse_from_str(floor_on, "%Y-%m-%d").unwrap();
    assert!((today..=today + chrono::Days::new(2)).contains(&day), "{floor_on} from {today}: {bob}");
}
