//! `accountd config check`: 0 for a valid file, 2 and the offending key otherwise.

use crate::common::{bin, run_as};

fn check(text: &str) -> crate::common::Outcome {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gputokens.toml");
    std::fs::write(&path, text).unwrap();
    run_as(None, &bin("accountd"), &["config", "check", path.to_str().unwrap()])
}

/// The shipped example is a safe first config: valid, in shadow mode, preemption a dry run, drain
/// off; the only warning is shadow mode's (and the SlurmUser's, on a host without one).
#[test]
fn shipped_example_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../slurm-conf/gputokens.toml");
    let out = run_as(None, &bin("accountd"), &["config", "check", example]).ok();
    assert!(out.stdout.contains("valid"));
    let mut warnings: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("warning")).collect();
    if !gputokens::access::system_user_exists("slurm") {
        assert_eq!(warnings.pop().map(|w| w.starts_with("warning (slurm_user): there is no user 'slurm'")), Some(true));
    }
    assert_eq!(warnings.len(), 1, "{}", out.stdout);
    assert!(warnings[0].starts_with("warning (admission.enforce): shadow mode: "), "{}", out.stdout);
    let printed = run_as(None, &bin("accountd"), &["config", "default"]).ok();
    assert_eq!(printed.stdout, std::fs::read_to_string(example).unwrap());
}

#[test]
fn unknown_key_is_named() {
    let out = check("initial = 100\ndayly = 2\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("unknown field `dayly`"), "{}", out.stderr);
}

#[test]
fn negative_price_is_named() {
    let out = check("[prices]\nrtx2080 = 0.5\na6000 = -4\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("prices.a6000: must not be negative (got -4)"), "{}", out.stderr);
}

#[test]
fn wrong_type_and_positive_floor_are_named() {
    let out = check("floor = \"minus ten\"\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("floor"), "{}", out.stderr);
    let out = check("floor = 3\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("floor: must be 0 or below"), "{}", out.stderr);
}

#[test]
fn missing_file_is_named() {
    let out = run_as(None, &bin("accountd"), &["config", "check", "/nonexistent/gputokens.toml"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("/nonexistent/gputokens.toml: cannot read"), "{}", out.stderr);
}

#[test]
fn prometheus_source_needs_a_valid_table() {
    let out = check("[usage]\nsource = \"prometheus\"\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("usage.source") && out.stderr.contains("[prometheus]"), "{}", out.stderr);
    let out = check("[usage]\nsource = \"prometheus\"\n[prometheus]\nurl = \"ftp://x\"\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("prometheus.url: 'ftp://x' is not a usable http:// URL"), "{}", out.stderr);
    check("[usage]\nsource = \"prometheus\"\n[prometheus]\nurl = \"http://127.0.0.1:9090\"\n").ok();
}

#[test]
fn bad_admission_key_is_named() {
    let out = check("[admission]\non_error = \"maybe\"\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("admission.on_error"), "{}", out.stderr);
}

/// The systemd units start commands this accountd has, from where the gputokens package and the
/// install without packages (docs/install.md) puts it (packaging/build-debs.sh checks the package holds
/// what they run).
#[test]
fn systemd_units_run_installed_commands() {
    let install = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/install.md")).unwrap();
    assert!(
        install.contains("install -m 755 target/release/accountd target/release/static/sbalance /usr/bin/"),
        "docs/install.md no longer installs accountd into /usr/bin"
    );
    assert!(
        install.contains("install -m 755 target/release/gputokens-agent /usr/bin/"),
        "docs/install.md no longer installs gputokens-agent into /usr/bin"
    );
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../slurm-conf/systemd");
    let mut commands = 0;
    for (unit, program) in [
        ("gputokens-accountd.service", "accountd"),
        ("gputokens-agent.service", "gputokens-agent"),
        ("gputokens-backup.service", "accountd"),
    ] {
        let text = std::fs::read_to_string(format!("{dir}/{unit}")).unwrap();
        for line in text.lines().filter(|l| l.starts_with("ExecStart")) {
            let command = line.split_once('=').unwrap().1;
            let mut argv = command.split_whitespace();
            assert_eq!(argv.next(), Some(format!("/usr/bin/{program}").as_str()), "{unit}: {line}");
            let args: Vec<&str> = argv.chain(["--help"]).collect();
            let out = run_as(None, &bin(program), &args);
            assert_eq!(out.code, 0, "{unit}: `{program} {}` is not a command: {}", args.join(" "), out.stderr);
            commands += 1;
        }
    }
    assert_eq!(commands, 4, "ExecStartPre and ExecStart of accountd, ExecStart of the agent and of the backup");
}

/// Valid settings that together give every user every balance: exit 0, and a warning naming them.
#[test]
fn private_balances_with_the_ondemand_file_are_warned_of() {
    let ondemand = "[ondemand]\nbalance_file = \"/var/lib/ood/gputokens.json\"\nworld_readable = true\n";
    let out = check(ondemand).ok();
    assert!(
        out.stdout.contains("warning (balances_public, ondemand.balance_file): balances_public is false, but \
                             /var/lib/ood/gputokens.json holds every user's and pool's balance and every user can read it"),
        "{}",
        out.stdout
    );
    let quiet = "[prices]\na6000 = 4\n[preemption]\ndry_run = true\n[health]\ndrain = false\n";
    let out = check(&format!("balances_public = true\n{quiet}{ondemand}")).ok();
    assert!(!out.stdout.contains("warning"), "{}", out.stdout);
}

/// The newcomer review: a config with no `[prices]` charged 1 token per GPU-hour without a word; a
/// price that rounded to 0 and two files at one path passed; `config check` stopped at the first
/// mistake. Every mistake is named in one run, each with its key.
#[test]
fn prices_that_round_to_nothing_no_prices_and_clashing_paths_are_named() {
    let out = check("");
    assert!(out.stdout.contains("warning (prices, default_price): [prices] lists no GPU type"), "{}", out.stdout);
    // Six mistakes: each named in the one run.
    let out = check(
        "floor = 3\n[prices]\nrtx2080 = 0.0000001\n[admission]\nmdoe = \"estimate\"\non_error = \"maybe\"\n\
         [intervals]\ncharge = \"soon\"\n[paths]\nledger = \"/var/lib/g/x\"\nsnapshot = \"/var/lib/g/x\"\n",
    );
    assert_eq!(out.code, 2, "{}", out.stdout);
    for named in [
        "floor: must be 0 or below",
        "prices.rtx2080: 0.0000001 has more than 6 decimals",
        "admission.mdoe: unknown",
        "admission.on_error",
        "intervals.charge",
        "paths.snapshot: /var/lib/g/x is the same file as paths.ledger",
        "6 problems in",
    ] {
        assert!(out.stderr.contains(named), "{named}: {}", out.stderr);
    }
}

#[test]
fn a_server_name_with_a_port_is_named() {
    let out = check("[http]\nserver_names = [\"gputokens.example.org:9817\"]\n");
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("http.server_names")
            && out.stderr.contains("'gputokens.example.org:9817' is not a host name"),
        "{}",
        out.stderr
    );
    check("[http]\nserver_names = [\"GPUtokens.example.org.\"]\n").ok();
}

/// Preemption and drain from the first cycle are named while the site has no ledger (a first
/// config), never again once it runs: a site that turned them on after watching is not nagged at
/// every start (the unit runs `config check` before accountd).
#[test]
fn live_preemption_and_drain_are_named_to_a_first_config_only() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.sqlite");
    let text = format!("[prices]\na6000 = 4\n[paths]\nledger = \"{}\"\n", ledger.display());
    let first = check(&text).ok().stdout;
    assert!(first.contains("warning (preemption.enabled, preemption.dry_run): "), "{first}");
    assert!(first.contains("warning (health.drain): "), "{first}");
    std::fs::write(&ledger, "").unwrap();
    let running = check(&text).ok().stdout;
    assert!(!running.contains("preemption.dry_run") && !running.contains("health.drain"), "{running}");
}

/// Issue 36: `config check` as an auditor. One file with a mistake of each kind: every error (exit
/// 2) and every warning, each naming its key(s), in one run.
#[test]
fn every_cross_key_mistake_is_named_in_one_run() {
    crate::common::ensure_test_users();
    let long_socket = format!("/run/{}/accountd.sock", "s".repeat(100));
    let text = format!(
        "slurm_user = \"slrum\"\ninital = 100\n[prices]\na6000 = 4\n[paths]\nsocket = \"{long_socket}\"\n\
         ledger = \"/nonexistent-gputokens-site/ledger.sqlite\"\n\
         [admins]\nusers = [\"alice\", \"nosuchadmin\"]\n[intervals]\ncharge = \"2days\"\ncheck = \"3h\"\n\
         [slurm]\nreread = \"1m\"\n[agent]\nreport_to = \"ftp://gpu-head:9817\"\n[preemption]\nsignal = \"USR1@60\"\n\
         [health]\ndrain = true\n[admission]\nmode = \"estimate\"\nmax_snapshot_age = \"2h\"\n[web]\n\
         url = \"http://gpu-head:9817\"\n[admision]\nenforce = false\n"
    );
    let out = check(&text);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    let socket_error = format!(" is {} bytes: a Unix socket's path holds at most 107", long_socket.len());
    for error in [
        "inital: unknown field `inital`: did you mean `initial`?",
        "paths.socket: ",
        socket_error.as_str(),
        "agent.report_to: 'ftp://gpu-head:9817' is not a usable http:// URL (the scheme must be http",
        "preemption.signal: 'USR1@60' is not a signal name like \"USR1\"",
        "admision: unknown table `[admision]`: did you mean `[admission]`?",
        "5 problems in",
    ] {
        assert!(out.stderr.contains(error), "{error}: {}", out.stderr);
    }
    // Warnings about the rest of the file, with its bad keys at their defaults.
    for warning in [
        "warning (slurm_user): there is no user 'slrum' on this host",
        "warning (admins.users): no such user on this host: nosuchadmin (",
        "warning (intervals.charge): intervals.charge is 2days: ",
        "warning (slurm.reread, intervals.charge): reread (1m) is shorter than the charge interval (2days)",
        "warning (intervals.check, admission.max_snapshot_age): the snapshot is rewritten every check cycle (3h) but \
         is stale after max_snapshot_age (2h)",
        "warning (admission.mode, intervals.check): mode = \"estimate\" counts ",
        "warning (preemption.enabled, preemption.dry_run): preemption requeues jobs from the first cycle: start with \
         dry_run = true",
        "warning (health.drain): ",
        "warning (web.url, web.allow_http): [web] url is http://gpu-head:9817",
    ] {
        assert!(out.stdout.contains(warning), "{warning}: {}", out.stdout);
    }
    // report_to fell back to this host (its default): agents reach a loopback listener there.
    assert!(!out.stdout.contains("(http.listen, agent.report_to)"), "{}", out.stdout);

    // The same warnings alone leave the file valid: exit 0.
    let valid = check(
        "[prices]\na6000 = 4\n[agent]\nreport_to = \"http://gpu-head:9817\"\n[http]\nlisten = \"127.0.0.1:9817\"\n\
         [slurm]\nreread = \"1m\"\n",
    );
    assert_eq!(valid.code, 0, "{}", valid.stderr);
    assert!(valid.stdout.contains(
        "warning (http.listen, agent.report_to): [http] listen is 127.0.0.1:9817: only \
                                   this host can connect, but [agent] report_to is http://gpu-head:9817"
    ));
    assert!(valid.stdout.contains("warning (slurm.reread, intervals.charge)"), "{}", valid.stdout);
}
