//! Token pools of Slurm accounts ([accounts] mode = "account") without a cluster: charges of saved
//! sacct rows to a pool, switching modes, the journal of pool changes, and the pools on the status
//! page. The pools against the real cluster are in tests/cluster/accounts.rs.

use std::path::Path;

use gputokens::Tokens;

use crate::common::{run_as, Site};

/// A pool's balance as root's `sbalance -A` prints it.
fn pool_balance(site: &Site, account: &str) -> String {
    let out = site.sbalance(None, &["-A", account, "-P", "-n"]).ok().stdout;
    out.lines().next().and_then(|l| l.split('|').nth(2)).unwrap_or_default().to_string()
}

fn lab_job(id: u32) -> String {
    format!(
        "JobIDRaw|User|Account|AllocTRES|ElapsedRaw|Start|State\n{id}|alice|lab|gres/gpu:a6000=1,gres/gpu=1|3600|2026-11-30T08:00:00|COMPLETED\n"
    )
}

fn switch_mode(site: &mut Site, mode: &str) {
    let text = std::fs::read_to_string(&site.config).unwrap();
    let start = text.find("mode = ").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    std::fs::write(&site.config, format!("{}mode = \"{mode}\"{}", &text[..start], &text[end..])).unwrap();
    site.restart();
}

/// A site with history switches user → both → account → user: each job is charged once, to whom the
/// mode of its cycle says; every balance is the sum of its entries; replaying everything after the
/// last switch changes nothing.
#[test]
fn switching_modes_loses_and_doubles_nothing() {
    let mut site = Site::start("daily = 0\nmonthly = 0", "[accounts]\nmode = \"user\"\ndaily = 0\nmonthly = 0\n");
    site.accountd(None, &["admin", "account", "add", "lab", "--initial", "100"]).ok();
    let files: Vec<String> = (1..=4).map(|id| site.file(&format!("job{id}.txt"), &lab_job(id))).collect();
    let charge = |site: &Site, file: &str| site.accountd(None, &["charge", "--sacct-file", file]).ok();
    let balances = |site: &Site| (site.balance("alice"), pool_balance(site, "lab"));

    charge(&site, &files[0]);
    assert_eq!(balances(&site), ("96".to_string(), "100".to_string()), "user: alice pays");
    switch_mode(&mut site, "both");
    charge(&site, &files[1]);
    assert_eq!(balances(&site), ("92".to_string(), "96".to_string()), "both: alice and lab pay");
    switch_mode(&mut site, "account");
    charge(&site, &files[2]);
    assert_eq!(balances(&site), ("92".to_string(), "92".to_string()), "account: lab pays");
    switch_mode(&mut site, "user");
    charge(&site, &files[3]);
    assert_eq!(balances(&site), ("88".to_string(), "92".to_string()), "user again: alice pays");

    for file in &files {
        let again = charge(&site, file);
        assert!(again.stdout.contains("0 charge entries"), "{}", again.stdout);
    }
    assert_eq!(balances(&site), ("88".to_string(), "92".to_string()), "replays change nothing");
    let jobs_in = |who: &str| {
        let history = site.accountd(None, &["admin", "history", who, "--json"]).ok().stdout;
        let json: serde_json::Value = serde_json::from_str(&history).unwrap();
        let entries = json["entries"].as_array().unwrap().clone();
        let charged: Vec<String> = entries
            .iter()
            .filter(|e| e["kind"] == "charge")
            .map(|e| e["job_id"].as_str().unwrap().to_string())
            .collect();
        let sum = entries
            .iter()
            .map(|e| e["amount"].as_str().unwrap().parse::<Tokens>().unwrap())
            .fold(Tokens::ZERO, |a, b| a + b);
        (charged, sum)
    };
    assert_eq!(jobs_in("alice"), (vec!["1".into(), "2".into(), "4".into()], Tokens::whole(88)));
    assert_eq!(jobs_in("account lab"), (vec!["2".into(), "3".into()], Tokens::whole(92)));
    let verify = site.accountd(None, &["admin", "verify"]).ok().stdout;
    assert!(verify.contains("consistent"), "{verify}");
}

/// The seed's worked example charged to a pool by two members: a pool made the evening before the
/// 1st with 100 (accountd's clock set back for that), +30 at the 1st, 84 charged since: 46 in
/// `sbalance -A` and in the pool's statement for this month, with a line per member.
#[test]
fn the_worked_example_charged_to_a_pool_shows_in_sbalance_and_the_statement() {
    let mut site = Site::start("", "[accounts]\nmode = \"account\"\n");
    let (eve, first) = crate::worked_example::around_the_first();
    site.restart_at(Some(&eve));
    site.accountd(None, &["admin", "account", "add", "lab", "--initial", "100", "--daily", "0", "--monthly", "30"])
        .ok();
    site.restart();
    site.accountd(None, &["tick", "--skip-charge", "--now", &first]).ok();
    assert_eq!(pool_balance(&site, "lab"), "130", "the +30 of the 1st");
    let sacct = site.file(
        "sacct.txt",
        "JobIDRaw|User|Account|AllocTRES|ElapsedRaw|Start|State
101|alice|lab|billing=8,cpu=8,gres/gpu:rtx2080=8,gres/gpu=8,mem=8000M,node=1|18000|2026-11-30T08:00:00|COMPLETED
102|bob|lab|billing=4,cpu=4,gres/gpu:rtx3090=4,gres/gpu=4,mem=4000M,node=1|36000|2026-11-30T08:00:00|COMPLETED
103|alice|lab|billing=2,cpu=2,gres/gpu:a6000=2,gres/gpu=2,mem=2000M,node=1|10800|2026-11-30T08:00:00|COMPLETED
",
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    assert_eq!(pool_balance(&site, "lab"), "46");
    let month = chrono::Local::now().format("%Y-%m").to_string();
    let statement = site.sbalance(None, &["--statement", &month, "-A", "lab"]).ok().stdout;
    assert!(statement.starts_with(&format!("Statement of lab for {month}")), "{statement}");
    let items = [
        "opening balance 100",
        "monthly grant +30",
        "rtx2080, 40 GPU-hours -20",
        "rtx3090, 40 GPU-hours -40",
        "a6000, 6 GPU-hours -24",
        "closing balance (so far) 46",
    ];
    for line in items {
        let words: Vec<&str> = line.split_whitespace().collect();
        let found = statement.lines().any(|l| l.split_whitespace().collect::<Vec<_>>().ends_with(&words));
        assert!(found, "{line}:\n{statement}");
    }
    assert!(statement.contains("Charged by member:\n  alice  -44\n  bob    -40\n"), "{statement}");
    let json = site.sbalance(None, &["--statement", &month, "-A", "lab", "--json"]).ok().stdout;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["statements"][0]["closing"], "46");
    assert_eq!(json["statements"][0]["members"][1]["user"], "bob");
}

/// Pools made, their rules changed and transfers between them go to the admin journal beside
/// grants: after the ledger is restored from a backup made before them, `journal-check` lists each
/// with the command that enters it again, and those commands, run in order, bring the pools back.
#[test]
fn pool_changes_are_journaled_and_entered_again_after_a_restore() {
    let mut site = Site::start("", "[accounts]\nmode = \"account\"\n");
    let backup = site.path("backup.sqlite");
    site.accountd(None, &["admin", "backup", backup.to_str().unwrap()]).ok();
    let changes: [&[&str]; 5] = [
        &["account", "add", "lab", "--initial", "100", "--monthly", "30", "--user-limit", "10"],
        &["account", "add", "course", "--initial", "20", "--cap", "200"],
        &["account", "set", "lab", "--daily", "2", "--no-user-limit", "--key", "spring"],
        &["account", "transfer", "lab", "course", "15", "--reason", "the TAs' hours", "--key", "t1"],
        &["account", "grant", "course", "5", "--reason", "lab's share"],
    ];
    for change in changes {
        site.accountd(None, &[&["admin"], change].concat()).ok();
    }
    let pools = |site: &Site| {
        let json = site.accountd(None, &["admin", "account", "show", "--json"]).ok().stdout;
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        let fields = ["account", "balance", "daily", "monthly", "cap", "floor", "user_limit"];
        let rows = json["pools"].as_array().unwrap_or_else(|| panic!("{json}")).iter();
        rows.map(|row| fields.map(|f| row[f].to_string()).join(" ")).collect::<Vec<_>>()
    };
    let before = pools(&site);
    assert_eq!(before.len(), 2, "{before:?}");

    site.stop();
    for stale in ["lib/ledger.sqlite-wal", "lib/ledger.sqlite-shm"] {
        let _ = std::fs::remove_file(site.path(stale));
    }
    std::fs::copy(&backup, site.path("lib/ledger.sqlite")).unwrap();
    site.restart();
    assert!(pools(&site).is_empty(), "the backup predates the pools");

    let check = site.accountd(None, &["admin", "journal-check"]);
    assert_ne!(check.code, 0, "{}", check.stdout);
    let commands: Vec<&str> = check.stdout.lines().filter_map(|l| l.strip_prefix("  accountd admin ")).collect();
    let starts = [
        "account add lab ",
        "account add course ",
        "account set lab ",
        "account transfer lab course 15 ",
        "account grant course 5 ",
    ];
    assert_eq!(commands.len(), starts.len(), "{}", check.stdout);
    for (command, start) in commands.iter().zip(starts) {
        assert!(command.starts_with(start), "{command} (expected {start}...)");
        // The journal's commands are shell words, as an admin pastes them.
        let line =
            format!("{} --config {} admin {command}", crate::common::bin("accountd").display(), site.config.display());
        let out = run_as(None, Path::new("/bin/bash"), &["-c", &line]);
        assert_eq!(out.code, 0, "{line}: {}{}", out.stdout, out.stderr);
    }
    assert_eq!(pools(&site), before);
    let again = site.accountd(None, &["admin", "journal-check"]).ok().stdout;
    assert!(again.contains("all in the ledger"), "{again}");
}

/// The status page's JSON shows each viewer the pools they may see: root (an admin) every pool,
/// alice (in no account of this site's Slurm) none.
#[test]
fn the_status_page_shows_the_pools_the_viewer_may_see() {
    use crate::status_page::{get_with, PROXY_SECRET};
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), format!("{PROXY_SECRET}\n")).unwrap();
    std::fs::set_permissions(secret.path(), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let tables = format!(
        "[accounts]\nmode = \"account\"\n[web]\nallow_http = true\ntrusted_proxies = [\"127.0.0.2\"]\n\
         proxy_secret_file = \"{}\"\n",
        secret.path().display()
    );
    let site = Site::start("", &tables);
    site.accountd(None, &["admin", "account", "add", "lab", "--initial", "70", "--user-limit", "10"]).ok();
    let url = format!("{}/web/api/me", site.http_url());
    let as_user = |user: &str| {
        let headers = [("X-Remote-User", user.to_string()), ("X-Gputokens-Proxy-Secret", PROXY_SECRET.into())];
        let (status, body) = get_with("127.0.0.2", &url, &headers);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    let root = as_user("root");
    assert_eq!(root["pools"][0]["account"], "lab", "{root}");
    assert_eq!(
        (root["pools"][0]["balance"].as_str(), root["pools"][0]["user_limit"].as_str()),
        (Some("70"), Some("10"))
    );
    let alice = as_user("alice");
    assert_eq!(alice["pools"], serde_json::json!([]), "{alice}");
}
