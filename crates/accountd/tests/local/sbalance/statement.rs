//! `sbalance --statement`: who sees which statement, the formats read back and summed, the lines an
//! admin's changes and replenishment make, and bad months named.

use chrono::{Datelike, Days, Local, NaiveDate};
use gputokens::Tokens;

use crate::common::Site;

/// Two GPU jobs of alice's (12 and 0.5 tokens) and one of bob's (1 token).
const SACCT: &str = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
11|alice|gres/gpu:a6000=2,gres/gpu=2|5400|2026-11-30T08:00:00|COMPLETED
12|alice|gres/gpu:rtx3090=1,gres/gpu=1|1800|2026-11-30T09:00:00|COMPLETED
13|bob|gres/gpu:rtx2080=2,gres/gpu=2|3600|2026-11-30T09:00:00|COMPLETED
";

fn today() -> NaiveDate {
    Local::now().date_naive()
}

fn month_of(date: NaiveDate) -> String {
    date.format("%Y-%m").to_string()
}

/// alice and bob charged now, root's grant and refund for alice.
fn site_with_charges_grant_and_refund() -> Site {
    let site = Site::start("", "");
    let sacct = site.file("sacct.txt", SACCT);
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    site.accountd(None, &["admin", "grant", "alice", "5", "--reason", "course credit"]).ok();
    site.accountd(None, &["admin", "refund", "11", "--reason", "node failure"]).ok();
    site
}

/// `-P` rows split into their 13 columns (the last, Reason, may hold a `|`).
fn parsable_rows(out: &str) -> Vec<Vec<String>> {
    out.lines().map(|l| l.splitn(13, '|').map(str::to_string).collect()).collect()
}

/// RFC 4180 records: quoted fields may hold commas, doubled quotes and line breaks.
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    records
}

/// Each user's rows, Amount summed up to the closing row, against it: (user, sum, closing).
fn sums(rows: &[Vec<String>]) -> Vec<(String, Tokens, Tokens)> {
    let mut out: Vec<(String, Tokens, Tokens)> = Vec::new();
    for row in rows {
        let amount: Tokens = row[4].parse().unwrap_or_else(|e| panic!("{row:?}: {e}"));
        match row[2].as_str() {
            "opening" => out.push((row[0].clone(), amount, Tokens::ZERO)),
            "closing" => out.last_mut().unwrap().2 = amount,
            _ => out.last_mut().unwrap().1 = out.last().unwrap().1.checked_add(amount).unwrap(),
        }
    }
    out
}

#[test]
fn users_see_their_own_statement_and_no_one_elses() {
    let site = site_with_charges_grant_and_refund();
    let month = month_of(today());
    let own = site.sbalance(Some("alice"), &["--statement", &month]).ok();
    assert!(own.stdout.starts_with(&format!("Statement of alice for {month} (so far, as of ")), "{}", own.stdout);
    site.sbalance(Some("alice"), &["--statement", &month, "-u", "alice"]).ok();
    site.sbalance(Some("bob"), &["--statement", &month]).ok();

    // Refused as --history refuses another user's entries, and -a too.
    let history = site.sbalance(Some("alice"), &["--history", "-u", "bob"]);
    for args in [["-u", "bob"], ["-a", "-P"]] {
        let other = site.sbalance(Some("alice"), &[&["--statement", month.as_str()][..], &args[..]].concat());
        assert_eq!(other.code, 2, "{args:?}: {}", other.stdout);
        assert_eq!(other.stderr, history.stderr, "{args:?}");
        assert!(other.stderr.contains("may read ledger histories; you are alice"), "{}", other.stderr);
        assert!(!other.stdout.contains("bob"), "{}", other.stdout);
    }
    // Not even with balances public: statements are histories.
    let public = Site::start("balances_public = true", "");
    public.accountd(None, &["admin", "grant", "bob", "2", "--reason", "x"]).ok();
    assert_eq!(public.sbalance(Some("alice"), &["--statement", &month, "-u", "bob"]).code, 2);
}

/// An admin's -a --csv: every user, one record per line item; a name with a comma and a quote
/// survives the quoting; each user's amounts sum to their closing balance.
#[test]
fn an_admin_gets_every_statement_as_csv() {
    let site = site_with_charges_grant_and_refund();
    let odd = "o,\"neil";
    let sacct = site.file("odd.txt", &format!("JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n21|{odd}|gres/gpu:a6000=1,gres/gpu=1|900|2026-11-30T09:00:00|COMPLETED\n"));
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    let month = month_of(today());

    let out = site.sbalance(None, &["--statement", &month, "-a", "--csv"]).ok().stdout;
    assert!(out.contains("\r\n\"o,\"\"neil\","), "quoted: {out}");
    let records = csv_records(&out);
    assert_eq!(
        records[0].join(","),
        "User,Month,Item,Date,Amount,GPUType,GPUHours,GPUSeconds,KWh,Days,JobID,Actor,Reason"
    );
    assert!(records[1..].iter().all(|r| r.len() == 13 && r[1] == month), "{records:?}");
    let sums = sums(&records[1..]);
    let expected = [("alice", "104.5"), ("bob", "99"), (odd, "99")];
    let got: Vec<(&str, String, String)> =
        sums.iter().map(|(u, sum, closing)| (u.as_str(), sum.to_string(), closing.to_string())).collect();
    assert_eq!(got, expected.map(|(u, b)| (u, b.to_string(), b.to_string())));
    // The closing balances are the balances sbalance shows.
    assert_eq!(site.balance("alice"), "104.5");
    let bob: Vec<&Vec<String>> = records.iter().filter(|r| r[0] == "bob").collect();
    let items: Vec<(&str, &str, &str)> = bob.iter().map(|r| (r[2].as_str(), r[4].as_str(), r[6].as_str())).collect();
    assert_eq!(items, [("opening", "0", ""), ("initial", "+100", ""), ("charge", "-1", "2"), ("closing", "99", "")]);
    // And one user's, to an admin.
    let one = site.sbalance(None, &["--statement", &month, "-u", "bob", "--csv", "-n"]).ok().stdout;
    assert_eq!(csv_records(&one), bob.into_iter().cloned().collect::<Vec<_>>());
}

/// -P and --json read back exactly, and add up to the closing balance; the grant and the refund are
/// lines of their own, with who made them and why.
#[test]
fn parsable_and_json_sum_to_the_closing_balance() {
    let site = site_with_charges_grant_and_refund();
    let month = month_of(today());
    let today = today().to_string();

    let rows = parsable_rows(&site.sbalance(Some("alice"), &["--statement", &month, "-P"]).ok().stdout);
    assert_eq!(
        rows[0].join("|"),
        "User|Month|Item|Date|Amount|GPUType|GPUHours|GPUSeconds|KWh|Days|JobID|Actor|Reason"
    );
    let items: Vec<[&str; 7]> =
        rows[1..].iter().map(|r| [&r[2], &r[3], &r[4], &r[5], &r[6], &r[10], &r[11]].map(String::as_str)).collect();
    let first = today[..8].to_string() + "01";
    assert_eq!(
        items,
        [
            ["opening", &first, "0", "", "", "", ""],
            ["initial", &today, "+100", "", "", "", "gputokens"],
            ["grant", &today, "+5", "", "", "", "root"],
            ["refund", &today, "+12", "", "", "11", "root"],
            ["charge", "", "-12", "a6000", "3", "", ""],
            ["charge", "", "-0.5", "rtx3090", "0.5", "", ""],
            ["closing", &today, "104.5", "", "", "", ""],
        ]
    );
    assert_eq!((rows[3][12].as_str(), rows[4][12].as_str()), ("course credit", "node failure"));
    assert_eq!(rows[7][12], "so far: the month is not over");
    assert_eq!(sums(&rows[1..]), [("alice".to_string(), "104.5".parse().unwrap(), "104.5".parse().unwrap())]);

    let json: serde_json::Value =
        serde_json::from_str(&site.sbalance(Some("alice"), &["--statement", &month, "--json"]).ok().stdout).unwrap();
    let s = &json["statements"][0];
    assert_eq!(
        (s["user"].as_str(), s["month"].as_str(), s["partial"].as_bool()),
        (Some("alice"), Some(month.as_str()), Some(true))
    );
    let amount = |v: &serde_json::Value| v.as_str().unwrap().parse::<Tokens>().unwrap();
    let lines = s["lines"].as_array().unwrap();
    let total = lines.iter().fold(amount(&s["opening"]), |sum, l| sum.checked_add(amount(&l["amount"])).unwrap());
    assert_eq!((total, amount(&s["closing"])), ("104.5".parse().unwrap(), "104.5".parse().unwrap()));
    let refund = lines.iter().find(|l| l["item"] == "refund").unwrap();
    assert_eq!((refund["job_id"].as_str(), refund["actor"].as_str()), (Some("11"), Some("root")));
    let a6000 = lines.iter().find(|l| l["gpu_type"] == "a6000").unwrap();
    assert_eq!((a6000["gpu_seconds"].as_u64(), a6000["gpu_hours"].as_f64()), (Some(10_800), Some(3.0)));

    // The text statement says the same, with who and why.
    let text = site.sbalance(Some("alice"), &["--statement", &month]).ok().stdout;
    let line =
        |item: &str| text.lines().find(|l| l.contains(item)).unwrap_or_else(|| panic!("{item}: {text}")).to_string();
    assert!(line("grant").ends_with("+5  root: course credit"), "{text}");
    assert!(line("refund of job 11").ends_with("+12  root: node failure"), "{text}");
    assert!(line("a6000, 3 GPU-hours").ends_with("-12"), "{text}");
}

/// Replenishment is one line a month with its days: from the day after bob was first seen (the
/// 10th of last month) to that month's end, and from the 1st to today in this month, beside the
/// monthly grant.
#[test]
fn daily_replenishment_shows_its_days() {
    let site = Site::start("", "");
    let this_month = today().with_day(1).unwrap();
    let last_month = this_month.checked_sub_months(chrono::Months::new(1)).unwrap();
    let tenth = last_month.with_day(10).unwrap();
    let seen = site.file(
        "seen.txt",
        &format!(
            "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n30|bob|gres/gpu:a6000=1|0|{tenth}T12:00:00|CANCELLED\n"
        ),
    );
    site.accountd(None, &["charge", "--sacct-file", &seen, "--now", &format!("{tenth}T12:00:00")]).ok();
    site.accountd(None, &["tick", "--skip-charge"]).ok();

    let last_days = (this_month - Days::new(1)).day() - 10;
    let rows =
        parsable_rows(&site.sbalance(Some("bob"), &["--statement", &month_of(last_month), "-P", "-n"]).ok().stdout);
    let daily: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[2].as_str(), r[4].as_str(), r[9].as_str())).collect();
    let (days, amount) = (last_days.to_string(), format!("+{last_days}"));
    assert_eq!(
        daily,
        [
            ("opening", "0", ""),
            ("initial", "+100", ""),
            ("daily", &amount, &days),
            ("closing", &(100 + last_days).to_string(), "")
        ]
    );

    let rows = parsable_rows(&site.sbalance(Some("bob"), &["--statement", &month_of(today()), "-P", "-n"]).ok().stdout);
    let now_days = today().day();
    let items: Vec<(&str, String, &str)> = rows.iter().map(|r| (r[2].as_str(), r[4].clone(), r[9].as_str())).collect();
    assert_eq!(
        items,
        [
            ("opening", (100 + last_days).to_string(), ""),
            ("monthly", "+30".into(), ""),
            ("daily", format!("+{now_days}"), now_days.to_string().as_str()),
            ("closing", (130 + last_days + now_days).to_string(), ""),
        ]
    );
    assert_eq!(site.balance("bob"), (130 + last_days + now_days).to_string());
    let text = site.sbalance(Some("bob"), &["--statement", &month_of(last_month)]).ok().stdout;
    assert!(text.contains(&format!("daily replenishment, {last_days} days")), "{text}");
}

#[test]
fn bad_months_and_users_are_named() {
    let site = site_with_charges_grant_and_refund();
    let refused = |user: Option<&str>, args: &[&str], says: &str| {
        let out = site.sbalance(user, args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stdout);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    };
    refused(Some("alice"), &["--statement", "2026-13"], "'2026-13' is not a month: there is no month 13 (01 to 12)");
    refused(Some("alice"), &["--statement", "nov"], "'nov' is not a month: expected YYYY-MM, e.g. 2026-11");
    let next = month_of(today().with_day(1).unwrap() + chrono::Months::new(1));
    refused(Some("alice"), &["--statement", &next], &format!("{next} has not begun"));
    let last = month_of(today().with_day(1).unwrap() - Days::new(1));
    refused(
        Some("alice"),
        &["--statement", &last],
        &format!("alice has no entries in the ledger before the end of {last}"),
    );
    refused(
        None,
        &["--statement", &month_of(today()), "-u", "nosuchuser"],
        "user 'nosuchuser' has no entries in the ledger",
    );
    refused(
        None,
        &["--statement", &month_of(today()), "-u", "alice,bob"],
        "--statement shows one user (-u USER) or all (-a)",
    );
    refused(None, &["--csv"], "--statement");
}
