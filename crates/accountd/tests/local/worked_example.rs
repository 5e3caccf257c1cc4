//! The seed's worked example through the real binaries, and replays that must change nothing.

use chrono::Datelike;

use crate::common::Site;

/// What `sacct -X -D -P -o JobIDRaw,User,AllocTRES,ElapsedRaw,Start,State` prints for
/// 8 × rtx2080 × 5 h, 4 × rtx3090 × 10 h and 2 × a6000 × 3 h (the dates are the seed's; what is
/// charged does not depend on them).
const SACCT: &str = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
101|alice|billing=8,cpu=8,gres/gpu:rtx2080=8,gres/gpu=8,mem=8000M,node=1|18000|2026-11-30T08:00:00|COMPLETED
102|alice|billing=4,cpu=4,gres/gpu:rtx3090=4,gres/gpu=4,mem=4000M,node=1|36000|2026-11-30T08:00:00|COMPLETED
103|alice|billing=2,cpu=2,gres/gpu:a6000=2,gres/gpu=2,mem=2000M,node=1|10800|2026-11-30T08:00:00|COMPLETED
104|bob|billing=1,cpu=1,mem=500M,node=1|3600|2026-11-30T08:00:00|COMPLETED
";

/// The evening before the 1st of this month, and five past midnight on it: the monthly grant falls
/// between them. Both are in the past (`--now` may not run more than a day ahead of the clock).
pub fn around_the_first() -> (String, String) {
    let first = chrono::Local::now().date_naive().with_day(1).unwrap();
    let eve = first.pred_opt().unwrap();
    (format!("{eve}T20:00:00"), format!("{first}T00:05:00"))
}

/// alice is first seen the evening before the 1st (a GPU job cancelled before it ran a second),
/// gets the monthly grant at midnight, and is charged the worked example's jobs now: charged today,
/// so they are in her Used30d whatever day of the month the test runs.
fn charge_and_grant(site: &Site, sacct: &str) {
    let (eve, first) = around_the_first();
    let first_seen = site.file(
        "first-seen.txt",
        &format!("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n100|alice|gres/gpu:a6000=1|0|{eve}|CANCELLED\n"),
    );
    site.accountd(None, &["charge", "--sacct-file", &first_seen, "--now", &eve]).ok();
    site.accountd(None, &["tick", "--skip-charge", "--now", &first]).ok();
    site.accountd(None, &["charge", "--sacct-file", sacct]).ok();
}

#[test]
fn worked_example_leaves_46() {
    // daily = 0 so that only the monthly grant lands between the charge and the query.
    let site = Site::start("daily = 0\ncap = 500", "");
    let sacct = site.file("sacct.txt", SACCT);
    charge_and_grant(&site, &sacct);

    let out = site.sbalance(None, &["-u", "alice", "-P"]).ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "User|Balance|Floor|Status|Used30d|NextGrant");
    assert!(lines[1].starts_with("alice|46|-10|ok|a6000=24,rtx2080=20,rtx3090=40|"), "{}", out.stdout);
    // alice asks for herself and sees the same.
    let own = site.sbalance(Some("alice"), &["-P", "-n", "-o", "User,Balance"]).ok();
    assert_eq!(own.stdout, "alice|46\n");
    // bob's CPU-only job cost nothing: he was never charged, so he is not even in the ledger.
    assert_eq!(site.balance("bob"), "100");
}

#[test]
fn replaying_charges_and_grants_changes_nothing() {
    let site = Site::start("daily = 0", "");
    let sacct = site.file("sacct.txt", SACCT);
    site.accountd(None, &["admin", "grant", "bob", "5", "--reason", "course credit", "--key", "course-2026"]).ok();
    charge_and_grant(&site, &sacct);
    site.accountd(None, &["admin", "adjust", "alice", "-1.5", "--reason", "manual fix", "--key", "fix-1"]).ok();
    let before = site.sbalance(None, &["-a", "-P"]).ok().stdout;
    // bob: 100 initial + 5 granted today, after the 1st.
    assert!(before.contains("alice|44.5|") && before.contains("bob|105|"), "{before}");

    charge_and_grant(&site, &sacct);
    let again = site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    assert!(again.stdout.contains("0 charge entries"), "{}", again.stdout);
    let replay =
        site.accountd(None, &["admin", "grant", "bob", "5", "--reason", "course credit", "--key", "course-2026"]).ok();
    assert!(replay.stdout.contains("already recorded"), "{}", replay.stdout);
    site.accountd(None, &["admin", "adjust", "alice", "-1.5", "--reason", "manual fix", "--key", "fix-1"]).ok();

    assert_eq!(site.sbalance(None, &["-a", "-P"]).ok().stdout, before);
}

#[test]
fn snapshot_follows_the_ledger() {
    let site = Site::start("daily = 0", "");
    let sacct = site.file("sacct.txt", SACCT);
    charge_and_grant(&site, &sacct);
    let snapshot = std::fs::read_to_string(site.path("lib/balances.snapshot")).unwrap();
    assert!(snapshot.starts_with("gputokens-snapshot 1\n"), "{snapshot}");
    assert!(snapshot.contains("\nuser alice 46000000\n"), "{snapshot}");
    assert!(snapshot.contains("\nfloor -10000000\n"), "{snapshot}");
    site.accountd(None, &["admin", "grant", "alice", "4", "--reason", "x"]).ok();
    let snapshot = std::fs::read_to_string(site.path("lib/balances.snapshot")).unwrap();
    assert!(snapshot.contains("\nuser alice 50000000\n"), "{snapshot}");
}

/// The month of `date` as `--statement` takes it.
fn month_of(date: chrono::NaiveDate) -> String {
    date.format("%Y-%m").to_string()
}

/// The worked example as alice's statement of this month, line by line: 100 + 30 − 20 − 40 − 24 = 46.
/// Her initial 100 came the evening before the 1st, so it is last month's line and this month's
/// opening balance.
#[test]
fn worked_example_statement_adds_up_line_by_line() {
    let site = Site::start("daily = 0\ncap = 500", "");
    let sacct = site.file("sacct.txt", SACCT);
    charge_and_grant(&site, &sacct);
    let today = chrono::Local::now().date_naive();
    let first = today.with_day(1).unwrap();

    let out = site.sbalance(Some("alice"), &["--statement", &month_of(today)]).ok().stdout;
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0][..5], ["Statement", "of", "alice", "for", &month_of(today)], "{out}");
    assert_eq!(lines[0][5..7], ["(so", "far,"], "the month is not over: {out}");
    assert_eq!(lines[1], ["Date", "Item", "Amount", "Note"]);
    let first = first.to_string();
    let today = today.to_string();
    assert_eq!(
        lines[2..],
        [
            vec![first.as_str(), "opening", "balance", "100"],
            vec![&first, "monthly", "grant", "+30"],
            vec!["rtx2080,", "40", "GPU-hours", "-20"],
            vec!["rtx3090,", "40", "GPU-hours", "-40"],
            vec!["a6000,", "6", "GPU-hours", "-24"],
            vec![&today, "closing", "balance", "(so", "far)", "46"],
        ],
        "{out}"
    );

    // Last month: she was first seen on its last evening.
    let (eve, _) = around_the_first();
    let (eve, month) = (&eve[..10], &eve[..7]);
    let last = site.sbalance(Some("alice"), &["--statement", month, "-P", "-n"]).ok().stdout;
    assert_eq!(
        last,
        format!(
            "alice|{month}|opening|{month}-01|0||||||||\n\
             alice|{month}|initial|{eve}|+100|||||||gputokens|initial balance\n\
             alice|{month}|closing|{eve}|100||||||||\n"
        ),
        "the initial grant is dated the evening alice was first seen, the closing the month's last day"
    );
}
