//! Notifications (`[notify] command`), without a cluster: `accountd charge --sacct-file` charges
//! saved sacct rows (each run is a cycle, and ends with the notifications), the command is a capture
//! script that appends its argv, environment and stdin to a file.

use crate::common::Site;
use crate::notify_capture::{args, capture_script, captured};

/// 1 token per a6000-second.
const PRICES: &str = "[prices]\na6000 = 3600\n";

/// One cycle: charges alice's job `id` for `seconds` of one a6000 (none with `seconds` 0).
fn cycle(site: &Site, id: u32, seconds: u32) -> String {
    let start = gputokens::time::now() - 7200;
    let mut text = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State|NodeList\n".to_string();
    if seconds > 0 {
        text.push_str(&format!("{id}|alice|gres/gpu:a6000=1,gres/gpu=1|{seconds}|{start}|COMPLETED|vm\n"));
    }
    let file = site.file(&format!("sacct-{id}.txt"), &text);
    let out = site.accountd(None, &["charge", "--sacct-file", &file]).ok();
    out.stderr
}

#[test]
fn alice_is_notified_once_per_crossing_across_restarts_and_failures() {
    // The command is set once the site is up (it needs the site's dir): a restart reads it.
    let mut site = Site::with_prices("", PRICES, "");
    let command = capture_script(&site);
    let config = std::fs::read_to_string(&site.config).unwrap();
    std::fs::write(
        &site.config,
        format!("{config}\n[notify]\ncommand = [\"{command}\", \"--site\", \"test\"]\nwarn_below = 10\n"),
    )
    .unwrap();
    site.restart();

    cycle(&site, 1, 95); // 100 → 5: below the warning level
    assert_eq!(args(&site), ["--site test -- warning alice"]);
    cycle(&site, 2, 10); // → −5: overdraft
    assert_eq!(args(&site), ["--site test -- warning alice", "--site test -- overdraft alice"]);
    let all = captured(&site).join("\n");
    assert!(all.contains("ENV: overdraft alice -5 -10"), "{all}");
    assert!(all.contains("STDIN: gputokens: your GPU token balance is -5 (below 0)"), "{all}");

    // The relay is down when alice reaches the floor: logged, owed, retried on the next cycle.
    site.file("fail", "");
    let log = cycle(&site, 3, 6); // → −11: the floor
    assert!(log.contains("notification floor for alice failed") && log.contains("relay down"), "{log}");
    assert_eq!(args(&site).len(), 2);
    std::fs::remove_file(site.path("fail")).unwrap();
    cycle(&site, 4, 0);
    let sent = args(&site);
    assert_eq!(sent, ["--site test -- warning alice", "--site test -- overdraft alice", "--site test -- floor alice"]);
    let all = captured(&site).join("\n");
    assert!(
        all.contains("STDIN: gputokens: your GPU token balance is -11 (floor -10): new GPU jobs are refused"),
        "{all}"
    );
    let attempts = std::fs::read_to_string(site.path("attempts")).unwrap();
    assert_eq!(attempts.lines().filter(|l| *l == "floor").count(), 2, "{attempts}");

    // A restart and more cycles repeat nothing.
    site.restart();
    cycle(&site, 5, 0);
    site.accountd(None, &["tick", "--skip-charge"]);
    assert_eq!(args(&site), sent);

    // A grant that lifts alice back: one "recovered".
    site.accountd(None, &["admin", "grant", "alice", "20", "--reason", "t"]).ok();
    cycle(&site, 6, 0);
    cycle(&site, 7, 0);
    let sent = args(&site);
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert_eq!(sent[3], "--site test -- recovered alice");
    let attempts = std::fs::read_to_string(site.path("attempts")).unwrap();
    assert_eq!(attempts.lines().count(), 5, "{attempts}");
}

#[test]
fn without_a_command_nothing_is_run_or_owed() {
    let site = Site::with_prices("", PRICES, "");
    let log = cycle(&site, 1, 120);
    assert!(!log.contains("notification"), "{log}");
    assert_eq!(site.balance("alice"), "-20");
}
