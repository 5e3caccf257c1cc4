//! sbalance's views: own row by default, -a limited to what the caller may see, sshare-like formats.

mod statement;

use crate::common::{run_as, sbalance_bin, Site};

#[test]
fn users_see_only_themselves() {
    let site = Site::start("", "");
    site.accountd(None, &["admin", "grant", "alice", "1", "--reason", "x"]).ok();
    site.accountd(None, &["admin", "grant", "bob", "2", "--reason", "x"]).ok();

    let all = site.sbalance(Some("alice"), &["-a", "-P", "-n", "-o", "User,Balance"]).ok();
    assert_eq!(all.stdout, "alice|101\n");
    let own = site.sbalance(Some("bob"), &["-P", "-n", "-o", "user,balance,status"]).ok();
    assert_eq!(own.stdout, "bob|102|ok\n");

    let other = site.sbalance(Some("alice"), &["-u", "bob"]);
    assert_eq!(other.code, 2);
    assert!(other.stderr.contains("only see your own balance"), "{}", other.stderr);

    let root = site.sbalance(None, &["-a", "-P", "-n", "-o", "User"]).ok();
    assert_eq!(root.stdout, "alice\nbob\n");
}

#[test]
fn public_balances_are_visible_to_all() {
    let site = Site::start("balances_public = true", "");
    site.accountd(None, &["admin", "grant", "bob", "2", "--reason", "x"]).ok();
    let out = site.sbalance(Some("alice"), &["-u", "bob", "-P", "-n", "-o", "User,Balance"]).ok();
    assert_eq!(out.stdout, "bob|102\n");
}

#[test]
fn unknown_user_and_field_are_named() {
    let site = Site::start("", "");
    let out = site.sbalance(None, &["-u", "nosuchuser"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("unknown user 'nosuchuser'"), "{}", out.stderr);
    let out = site.sbalance(None, &["-o", "User,Colour"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("unknown field 'Colour'"), "{}", out.stderr);
}

#[test]
fn formats_like_sshare() {
    let site = Site::start("", "");
    site.accountd(None, &["admin", "adjust", "bob", "-105", "--reason", "test"]).ok();
    site.accountd(None, &["admin", "adjust", "alice", "-112", "--reason", "test"]).ok();

    let table = site.sbalance(None, &["-a", "-o", "User,Balance,Status"]).ok().stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["User", "Balance", "Status"]);
    assert!(lines[1].chars().all(|c| c == '-' || c == ' '), "{table}");
    assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["alice", "-12", "blocked"]);
    assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>(), ["bob", "-5", "overdraft"]);
    assert!(lines[..4].iter().all(|l| l.len() == lines[0].len()), "columns are padded:\n{table}");
    // Under the table, for each row in debt: what it means, when it ends, what runs, whom to ask.
    let blocked = "alice: blocked: GPU jobs are refused until the balance is above the floor -10 again (recovers on ";
    assert!(lines[4].starts_with(blocked), "{table}");
    assert!(lines[4].ends_with("). CPU-only jobs still run; ask the cluster administrators for tokens."), "{table}");
    assert!(lines[5].starts_with("bob: overdraft: GPU jobs are accepted at lower priority"), "{table}");
    assert_eq!(lines.len(), 6, "{table}");
    // Not for scripts: -P, -n and --json print the rows alone.
    let parsable = site.sbalance(None, &["-a", "-P", "-o", "User,Status"]).ok().stdout;
    assert_eq!(parsable, "User|Status\nalice|blocked\nbob|overdraft\n");

    let p = site.sbalance(None, &["-u", "bob", "-p", "-o", "User,Balance"]).ok().stdout;
    assert_eq!(p, "User|Balance|\nbob|-5|\n");

    let json: serde_json::Value =
        serde_json::from_str(&site.sbalance(None, &["-u", "alice", "--json"]).ok().stdout).unwrap();
    assert_eq!(json["users"][0]["user"], "alice");
    assert_eq!(json["users"][0]["balance"], "-12", "an exact decimal string");
    assert_eq!(json["users"][0]["status"], "blocked");
    let explained = "GPU jobs are refused until the balance is above the floor -10 again.";
    assert_eq!(json["users"][0]["explanation"], explained, "the words of sbatch's line and the status page");
    assert_eq!(json["users"][0]["floor"], "-10");
}

#[test]
fn new_user_shows_the_initial_balance() {
    let site = Site::start("initial = 80", "");
    let out = site.sbalance(Some("bob"), &["-P", "-n", "-o", "User,Balance,Status"]).ok();
    assert_eq!(out.stdout, "bob|80|ok\n");
}

#[test]
fn daemon_down_is_reported_clearly() {
    let site = Site::start("", "");
    let config = site.config.clone();
    std::fs::remove_file(site.path("run/accountd.sock")).unwrap();
    let out = crate::common::run_as(None, &crate::common::bin("sbalance"), &["--config", config.to_str().unwrap()]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("cannot reach accountd") && out.stderr.contains("accountd serve"), "{}", out.stderr);
}

/// A researcher sees what their own jobs cost, newest last, and nobody else's.
#[test]
fn history_shows_your_own_charges() {
    let site = Site::start("", "");
    let sacct = site.file(
        "sacct.txt",
        "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
11|alice|gres/gpu:a6000=2,gres/gpu=2|5400|2026-11-30T08:00:00|COMPLETED
12|alice|gres/gpu:rtx3090=1,gres/gpu=1|1800|2026-11-30T09:00:00|COMPLETED
13|bob|gres/gpu:rtx2080=1,gres/gpu=1|3600|2026-11-30T09:00:00|COMPLETED
",
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();

    let own = site.sbalance(Some("alice"), &["--history", "-P"]).ok();
    let lines: Vec<&str> = own.stdout.lines().collect();
    assert_eq!(lines[0], "Time|Kind|Amount|Balance|JobID|Reason");
    assert_eq!(lines.len(), 4, "header, initial balance, two charges: {}", own.stdout);
    assert!(lines[1].contains("|grant|+100|100||initial balance"), "{}", lines[1]);
    assert!(lines[2].contains("|charge|-12|88|11|2 × a6000 for 5400s at 4/GPU-hour"), "{}", lines[2]);
    assert!(lines[3].contains("|charge|-0.5|87.5|12|1 × rtx3090 for 1800s at 1/GPU-hour"), "{}", lines[3]);
    assert_eq!(site.balance("alice"), "87.5");

    let newest = site.sbalance(Some("alice"), &["--history", "1", "-P", "-n"]).ok();
    assert_eq!(newest.stdout.lines().count(), 1);
    assert!(newest.stdout.contains("|12|"), "{}", newest.stdout);
    let table = site.sbalance(Some("alice"), &["--history"]).ok();
    assert!(table.stdout.lines().next().unwrap().starts_with("Time"), "{}", table.stdout);

    let other = site.sbalance(Some("alice"), &["--history", "-u", "bob"]);
    assert_eq!(other.code, 2);
    assert!(other.stderr.contains("may read ledger histories"), "{}", other.stderr);
    let root = site.sbalance(None, &["--history", "-u", "alice", "-P", "-n"]).ok();
    assert_eq!(root.stdout.lines().count(), 3);
}

/// Connections that never send a request do not pile up: beyond the 32 one user may hold, the oldest
/// idle ones are shed (closed without a word) for the newer; those left are answered and closed after
/// 5 s; and everyone else is served meanwhile.
#[test]
fn a_client_that_never_speaks_is_dropped_and_others_are_served() {
    use std::io::BufRead;
    let site = Site::start("", "");
    let silent: Vec<std::os::unix::net::UnixStream> =
        (0..50).map(|_| std::os::unix::net::UnixStream::connect(site.path("run/accountd.sock")).unwrap()).collect();
    let started = std::time::Instant::now();
    assert_eq!(site.sbalance(Some("alice"), &["-P", "-n", "-o", "User"]).ok().stdout, "alice\n");
    let replies: Vec<String> = silent
        .iter()
        .map(|stream| {
            let mut reply = String::new();
            std::io::BufReader::new(stream).read_line(&mut reply).unwrap();
            reply
        })
        .collect();
    let timed_out = replies.iter().filter(|r| r.contains("no request within 5 s")).count();
    let shed = replies.iter().filter(|r| r.is_empty()).count();
    // 18 shed for the later silent ones (root's; alice's sbalance has a cap of its own).
    assert_eq!((timed_out, shed), (32, 18), "{replies:#?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());
}

/// A user in debt learns when replenishment alone ends it: blocked users when GPU jobs are accepted
/// again, users in overdraft when their jobs are at full priority again.
#[test]
fn recovers_says_when_debt_ends() {
    let site = Site::start("daily = 1\nmonthly = 0", "");
    site.accountd(None, &["admin", "adjust", "alice", "-110.4", "--reason", "test"]).ok();
    site.accountd(None, &["admin", "adjust", "bob", "-105.4", "--reason", "test"]).ok();
    let today = chrono::Local::now().date_naive();
    let out = site.sbalance(None, &["-a", "-P", "-n", "-o", "User,Status,Recovers"]).ok().stdout;
    let expected =
        format!("alice|blocked|{}\nbob|overdraft|{}\n", today + chrono::Days::new(1), today + chrono::Days::new(6));
    assert_eq!(out, expected);
    let json: serde_json::Value = serde_json::from_str(&site.sbalance(Some("bob"), &["--json"]).ok().stdout).unwrap();
    assert_eq!(json["users"][0]["recovers"], (today + chrono::Days::new(6)).to_string());
    // The default columns stay sshare's few; Recovers is asked for.
    let header = site.sbalance(Some("bob"), &["-P"]).ok().stdout;
    assert!(header.starts_with("User|Balance|Floor|Status|Used30d|NextGrant\n"), "{header}");
}

/// The newcomer review's first harm: an admin's typo anywhere in gputokens.toml made sbalance fail
/// for every user. It reads only `[paths] socket`: other mistakes are accountd's to report, a bad
/// socket path is still sbalance's error.
#[test]
fn a_mistake_elsewhere_in_the_config_never_stops_sbalance() {
    let site = Site::start("", "");
    let text = std::fs::read_to_string(&site.config).unwrap();
    let typo =
        site.file("typo.toml", &format!("{text}\n[admission]\nmdoe = \"estimate\"\n[notify]\nwarn_below = -3\n"));
    let out = run_as(Some("alice"), &sbalance_bin(), &["--config", &typo]).ok();
    assert!(out.stdout.contains("alice"), "{}", out.stdout);
    assert!(out.stderr.is_empty(), "the admin's mistakes are not the user's: {}", out.stderr);

    let bad_socket = site.file("bad-socket.toml", &text.replace("socket = \"/", "socket = \""));
    let out = run_as(Some("alice"), &sbalance_bin(), &["--config", &bad_socket]);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(out.stderr.contains("paths.socket: must be an absolute path"), "{}", out.stderr);
}

/// A user at the floor reads in one place what it means, when it ends, what still runs and whom the
/// site says to ask (`[admission] contact`); a user who is fine reads the row alone.
#[test]
fn a_user_at_the_floor_is_told_whom_to_ask() {
    let site = Site::start("", "[admission]\ncontact = \"hpc-help@example.org\"\n");
    site.accountd(None, &["admin", "adjust", "alice", "-111", "--reason", "test"]).ok();
    let hers = site.sbalance(Some("alice"), &[]).ok().stdout;
    let told = hers.lines().last().unwrap();
    assert!(told.starts_with("alice: blocked: GPU jobs are refused until the balance is above the floor"), "{hers}");
    assert!(told.ends_with("CPU-only jobs still run; ask hpc-help@example.org for tokens."), "{hers}");
    let his = site.sbalance(Some("bob"), &[]).ok().stdout;
    assert_eq!(his.lines().count(), 3, "header, rule and his row: {his}");
}
