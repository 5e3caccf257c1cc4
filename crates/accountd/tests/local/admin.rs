//! Only admins change balances: tested as the real non-root users alice and bob.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{run_as, Site};

#[test]
fn alice_cannot_grant_herself_tokens() {
    let site = Site::start("", "");
    let before = site.balance("alice");
    let out = site.accountd(Some("alice"), &["admin", "grant", "alice", "1000", "--reason", "x"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("only root, the SlurmUser (slurm) and gputokens admins"), "{}", out.stderr);
    assert!(out.stderr.contains("you are alice"), "{}", out.stderr);
    assert_eq!(site.balance("alice"), before);
    assert!(site.log().contains("refused"), "the refusal is logged");

    for args in [
        vec!["admin", "adjust", "alice", "+5", "--reason", "x"],
        vec!["admin", "refund", "1", "--reason", "x"],
        vec!["admin", "history", "bob"],
    ] {
        let out = site.accountd(Some("alice"), &args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
    }
    // Commands that open the ledger directly refuse before touching it.
    let tick = site.accountd(Some("alice"), &["tick"]);
    assert_eq!(tick.code, 2, "{}", tick.stderr);
    assert!(tick.stderr.contains("you are alice"), "{}", tick.stderr);
}

#[test]
fn ledger_and_snapshot_are_unreadable_for_users() {
    let site = Site::start("", "");
    site.accountd(None, &["admin", "grant", "alice", "1", "--reason", "x"]).ok();
    for file in ["lib/ledger.sqlite", "lib/ledger.sqlite-wal", "lib/balances.snapshot"] {
        let path = site.path(file);
        assert!(path.exists(), "{file} missing");
        let out = run_as(Some("alice"), std::path::Path::new("/bin/cat"), &[path.to_str().unwrap()]);
        assert_ne!(out.code, 0, "alice could read {file}");
    }
}

#[test]
fn admin_group_members_may_grant() {
    let group = "gtadmins";
    let _ = Command::new("groupadd").arg("-f").arg(group).status();
    assert!(Command::new("usermod").args(["-a", "-G", group, "bob"]).status().unwrap().success());
    let site = Site::start("", &format!("[admins]\ngroups = [\"{group}\"]\n"));
    site.accountd(Some("bob"), &["admin", "grant", "alice", "2.5", "--reason", "helping out"]).ok();
    assert_eq!(site.balance("alice"), "102.5");
    let history = site.accountd(Some("bob"), &["admin", "history", "alice"]).ok();
    assert!(history.stdout.contains("helping out") && history.stdout.contains("bob"), "{}", history.stdout);
}

#[test]
fn refund_gives_back_a_jobs_charges_once() {
    let site = Site::start("", "");
    let sacct = site.file(
        "sacct.txt",
        "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n77|bob|gres/gpu:a6000=1,gres/gpu=1|3600|2026-11-30T08:00:00|FAILED\n",
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    assert_eq!(site.balance("bob"), "96");
    site.accountd(None, &["admin", "refund", "77", "--reason", "node failure"]).ok();
    assert_eq!(site.balance("bob"), "100");
    let again = site.accountd(None, &["admin", "refund", "77", "--reason", "node failure"]);
    assert_eq!(again.code, 2);
    assert!(again.stderr.contains("job 77 has nothing left to refund"), "{}", again.stderr);
    assert_eq!(site.balance("bob"), "100");
}

#[test]
fn import_migrates_the_original_state_file() {
    let site = Site::start("", "");
    let state = site.file("state.json", r#"{"alice": 87.5, "bob": -3}"#);
    let out = site.accountd(None, &["admin", "import", &state]).ok();
    assert!(out.stdout.contains("imported 2 users"), "{}", out.stdout);
    assert_eq!(site.balance("alice"), "87.5");
    assert_eq!(site.balance("bob"), "-3");
    let again = site.accountd(None, &["admin", "import", &state]).ok();
    assert!(again.stdout.contains("imported 0 users (2 were imported before)"), "{}", again.stdout);
    assert_eq!(site.balance("alice"), "87.5");

    let bad = site.file("bad.json", r#"{"alice": "lots"}"#);
    let out = site.accountd(None, &["admin", "import", &bad]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("alice") && out.stderr.contains("'lots'"), "{}", out.stderr);
}

#[test]
fn grant_to_an_unknown_user_is_refused() {
    let site = Site::start("", "");
    let out = site.accountd(None, &["admin", "grant", "nosuchuser", "5", "--reason", "typo"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("unknown user 'nosuchuser'"), "{}", out.stderr);
    let out = site.accountd(None, &["admin", "grant", "alice", "-5", "--reason", "x"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("must be positive"), "{}", out.stderr);
    let out = site.accountd(None, &["admin", "grant", "alice", "1.2345678", "--reason", "x"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("6 decimal places"), "{}", out.stderr);
}

#[test]
fn verify_checks_the_ledger_beside_a_running_accountd() {
    let site = Site::start("", "");
    let sacct = site.file(
        "sacct.txt",
        "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n7|alice|gres/gpu:a6000=2,gres/gpu=2|5400|2026-11-30T08:00:00|COMPLETED\n",
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    site.accountd(None, &["admin", "refund", "7", "--reason", "node failure"]).ok();
    site.accountd(None, &["admin", "grant", "bob", "3", "--reason", "course"]).ok();
    let out = site.accountd(None, &["admin", "verify"]).ok();
    assert!(out.stdout.contains("ledger.sqlite: 2 users, 5 entries: consistent\n"), "{}", out.stdout);
    // The refund and the grant are in the admin journal, and in the ledger.
    assert!(out.stdout.trim_end().ends_with("admin-journal.jsonl: 2 entries, all in the ledger"), "{}", out.stdout);

    let refused = site.accountd(Some("alice"), &["admin", "verify"]);
    assert_eq!(refused.code, 2);
    assert!(refused.stderr.contains("only root, the SlurmUser"), "{}", refused.stderr);
}

/// The audit's crash window: an admin's grant committed, and accountd gone before its journal line
/// was appended (here the journal cannot be written, then serve is killed). The grant waits in
/// the ledger, marked, and the next accountd appends it: no restore can lose it unlisted.
#[test]
fn a_grant_whose_journal_line_was_lost_to_a_crash_is_journaled_by_the_next_accountd() {
    let mut site = Site::start("", "");
    let journal = site.path("lib/admin-journal.jsonl");
    std::fs::create_dir(&journal).unwrap(); // in the way: the append fails after the commit
    site.accountd(None, &["admin", "grant", "bob", "3", "--reason", "course", "--key", "k1"]).ok();
    let balance = site.accountd(None, &["admin", "history", "bob"]).ok().stdout;
    assert!(balance.contains("course"), "the grant is in the ledger: {balance}");
    assert!(site.log().contains("cannot append 1 change(s) (grant:k1)"), "{}", site.log());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(site.pid() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    std::fs::remove_dir(&journal).unwrap();
    site.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&journal).unwrap_or_default().contains("\"key\":\"grant:k1\"") {
        assert!(Instant::now() < deadline, "not journaled after the restart: {}", site.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let check = site.accountd(None, &["admin", "journal-check"]).ok().stdout;
    assert!(check.contains("1 entries, all in the ledger") || check.contains("1 entry, all in the ledger"), "{check}");
}

/// The old audit's finding (and a new site's first-day trap): `admin verify` and `journal-check`
/// opened the ledger read-write, so on a missing ledger they made an empty one and called it
/// consistent. They read only: a missing ledger is refused and nothing is created; a backup copy is
/// checked with `verify FILE`, and neither file is changed.
#[test]
fn verify_and_journal_check_only_read_and_refuse_a_missing_ledger() {
    let site = Site::start("", "");
    site.accountd(None, &["admin", "grant", "bob", "3", "--reason", "course"]).ok();
    let backup = site.path("backup.sqlite");
    site.accountd(None, &["admin", "backup", backup.to_str().unwrap()]).ok();
    let stamp = |p: &std::path::Path| std::fs::metadata(p).map(|m| (m.len(), m.modified().unwrap())).ok();
    let before = stamp(&backup);
    let out = site.accountd(None, &["admin", "verify", backup.to_str().unwrap()]).ok();
    assert!(out.stdout.contains("backup.sqlite: 1 users, 2 entries: consistent"), "{}", out.stdout);
    assert_eq!(stamp(&backup), before, "the copy was changed");
    let wal = backup.with_extension("sqlite-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0, "something was written to the copy");

    let missing = site.path("nowhere/ledger.sqlite");
    let out = site.accountd(None, &["admin", "verify", missing.to_str().unwrap()]);
    assert_ne!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no ledger there (nothing was created)"), "{}", out.stderr);
    assert!(!missing.exists() && !missing.parent().unwrap().exists(), "made a ledger or its directory");
    // With the site's own ledger gone (a mistyped [paths] ledger): journal-check refuses too.
    let ledger = site.path("lib/ledger.sqlite");
    std::fs::rename(&ledger, site.path("moved.sqlite")).unwrap();
    let out = site.accountd(None, &["admin", "journal-check"]);
    assert_ne!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no ledger there"), "{}", out.stderr);
    assert!(!ledger.exists(), "journal-check made an empty ledger");
}

#[test]
fn amounts_past_the_limit_are_refused_by_name() {
    let site = Site::start("", "");
    // accountd itself checks: an import goes to it unchecked by the command.
    let state = site.file("state.json", r#"{"alice": 5, "bob": -10000000000}"#);
    let out = site.accountd(None, &["admin", "import", &state]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("bob's imported balance of -10000000000 tokens is beyond the limit of ±1000000000 tokens"),
        "{}",
        out.stderr
    );
    for args in [
        ["admin", "adjust", "alice", "1000000000.000001", "--reason", "typo"],
        ["admin", "adjust", "alice", "-9223372036854.775808", "--reason", "typo"],
        ["admin", "grant", "alice", "9223372036854.775807", "--reason", "typo"],
    ] {
        let out = site.accountd(None, &args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(out.stderr.contains("is beyond the limit of ±1000000000 tokens"), "{args:?}: {}", out.stderr);
    }
    let too_large = site.accountd(None, &["admin", "grant", "alice", "99999999999999999999", "--reason", "typo"]);
    assert!(too_large.stderr.contains("is too large"), "{}", too_large.stderr);
    assert_eq!(site.balance("alice"), "100", "nothing was recorded");
    // The limit itself is an amount an admin may give, either way.
    site.accountd(None, &["admin", "adjust", "alice", "-1000000000", "--reason", "reset"]).ok();
    site.accountd(None, &["admin", "grant", "alice", "1000000000", "--reason", "back"]).ok();
    assert_eq!(site.balance("alice"), "100");
    assert!(site.accountd(None, &["admin", "verify"]).ok().stdout.contains("consistent"));
}

/// A backup where others can write could be swapped for a ledger of theirs before a restore:
/// refused, naming the directory; a private one is written.
#[test]
fn a_backup_into_a_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::start("", "");
    site.accountd(None, &["admin", "grant", "bob", "3", "--reason", "course"]).ok();
    let open = site.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = site.accountd(None, &["admin", "backup", open.join("ledger.sqlite").to_str().unwrap()]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(out.stderr.contains("is writable by every user (mode 777)"), "{}", out.stderr);
    assert!(!open.join("ledger.sqlite").exists());
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o700)).unwrap();
    site.accountd(None, &["admin", "backup", open.join("ledger.sqlite").to_str().unwrap()]).ok();
    assert!(open.join("ledger.sqlite").exists());
}

/// The audit's L8 as alice: the admin journal on storage users may write to (a sticky directory,
/// as /tmp). A link she plants where the journal will be never has root's accountd append to
/// where it leads; the change waits in the ledger and is journaled once the link is gone.
#[test]
fn a_link_planted_where_the_journal_goes_never_has_root_append_elsewhere() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut site = Site::start("", "");
    let shared = tempfile::Builder::new().prefix("gputokens-shared-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let journal = shared.path().join("admin-journal.jsonl");
    let victim = site.path("victim");
    std::fs::write(&victim, "root's file\n").unwrap();
    let mut config = std::fs::read_to_string(&site.config).unwrap();
    config.push_str(&format!("admin_journal = \"{}\"\n", journal.display()));
    std::fs::write(&site.config, config).unwrap();
    site.restart();

    let link = run_as(
        Some("alice"),
        std::path::Path::new("/bin/ln"),
        &["-s", victim.to_str().unwrap(), journal.to_str().unwrap()],
    );
    assert_eq!(link.code, 0, "{}", link.stderr);
    site.accountd(None, &["admin", "grant", "bob", "3", "--reason", "course", "--key", "k8"]).ok();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n", "nothing appended through the link");
    assert!(site.log().contains("cannot append 1 change(s) (grant:k8)"), "{}", site.log());

    // Without the link, a journal still to be made where others could make it first is refused.
    std::fs::remove_file(&journal).unwrap();
    site.accountd(None, &["admin", "grant", "bob", "1", "--reason", "course", "--key", "k9"]).ok();
    assert!(site.log().contains("is writable by every user (mode 1777)"), "{}", site.log());
    assert!(!journal.exists());
    // An admin makes the directory theirs alone: the next change journals all three, into a file of
    // root's own.
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    site.accountd(None, &["admin", "grant", "bob", "1", "--reason", "course", "--key", "k10"]).ok();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&journal).unwrap_or_default().contains("\"key\":\"grant:k10\"") {
        assert!(Instant::now() < deadline, "not journaled: {}", site.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.contains("\"key\":\"grant:k8\"") && text.contains("\"key\":\"grant:k9\""), "{text}");
    let meta = std::fs::symlink_metadata(&journal).unwrap();
    assert!(meta.file_type().is_file() && meta.uid() == 0 && meta.mode() & 0o777 == 0o600, "{meta:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n");
}

/// The newcomer review's fifth harm: root's `accountd tick` (a step of the restore procedure) was
/// refused on the state directory the packaged unit makes for the SlurmUser. Root runs it there, and
/// what it writes stays readable to the service (the ledger keeps its owner).
#[test]
fn root_runs_the_admin_steps_on_the_packaged_layout() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.path().join("lib");
    std::fs::create_dir(&state).unwrap();
    let slurm = nix::unistd::User::from_name("slurm").unwrap().expect("the SlurmUser");
    nix::unistd::chown(&state, Some(slurm.uid), Some(slurm.gid)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
    let config = dir.path().join("gputokens.toml");
    let d = dir.path().display();
    std::fs::write(
        &config,
        format!(
            "[prices]\na6000 = 4\n[slurm]\nbin_dir = \"{d}/no-slurm\"\n[paths]\nledger = \"{d}/lib/ledger.sqlite\"\n\
             snapshot = \"{d}/lib/balances.snapshot\"\nsocket = \"{d}/accountd.sock\"\n"
        ),
    )
    .unwrap();
    let accountd = crate::common::bin("accountd");
    let conf = config.to_str().unwrap();
    // The service made the ledger, as the SlurmUser.
    run_as(Some("slurm"), &accountd, &["--config", conf, "tick", "--skip-charge"]).ok();
    // Root's steps of the restore procedure: a tick, a verify.
    run_as(None, &accountd, &["--config", conf, "tick", "--skip-charge"]).ok();
    let verify = run_as(None, &accountd, &["--config", conf, "admin", "verify"]).ok();
    assert!(verify.stdout.contains("consistent"), "{}", verify.stdout);
    let ledger = std::fs::metadata(state.join("ledger.sqlite")).unwrap();
    assert_eq!(ledger.uid(), slurm.uid.as_raw(), "the ledger stays the service's");
    // And the service goes on with it.
    let tick = run_as(Some("slurm"), &accountd, &["--config", conf, "tick", "--skip-charge"]).ok();
    assert!(tick.stdout.contains("snapshot of 0 users written"), "{}", tick.stdout);
}
