//! accountd's log as an admin reads it: a line per admin change in words and tokens, the config
//! file and ledger named at start, no module paths at the default level, quotes as written, and
//! colour on a terminal only when wanted (`NO_COLOR`, `TERM=dumb`). The log goes to a
//! pseudo-terminal here, as on an admin's screen.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bin, Site};

/// Starts `command` with its stderr on a new pseudo-terminal; the thread returns what was written
/// there once every writer has closed it.
fn stderr_on_a_terminal(mut command: Command) -> (Child, std::thread::JoinHandle<String>) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let child = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(pty.slave)).spawn().unwrap();
    // The command's copy of the terminal is the child's alone now: reading ends when it exits.
    drop(command);
    let master: OwnedFd = pty.master;
    let reader = std::thread::spawn(move || {
        let mut file = std::fs::File::from(master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // A terminal's master reads EIO (not 0) once its last writer is gone.
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).replace("\r\n", "\n")
    });
    (child, reader)
}

/// `accountd --config CONFIG args...` as root, with `env`, its log on a terminal.
fn accountd_on_a_terminal(config: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(bin("accountd"));
    command.arg("--config").arg(config).args(args).env_remove("GPUTOKENS_LOG").env_remove("NO_COLOR");
    command.env("TERM", "xterm-256color").envs(env.iter().copied());
    command
}

#[test]
fn admin_changes_are_logged_as_sentences_in_tokens_without_colour_under_no_color() {
    let mut site = Site::start("", "[accounts]\nmode = \"both\"\n");
    // The site's own serve logs at debug level; this one as a packaged unit does, at the default.
    site.stop();
    let socket = site.path("run/accountd.sock");
    let _ = std::fs::remove_file(&socket);
    let serve = accountd_on_a_terminal(&site.config, &["serve"], &[("NO_COLOR", "1")]);
    let (mut serve, log) = stderr_on_a_terminal(serve);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "accountd serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sacct = site.file(
        "sacct.txt",
        &format!(
            "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n14|bob|gres/gpu:rtx2080=1,gres/gpu=1|3600|{}|COMPLETED\n",
            gputokens::time::now() - 7200
        ),
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    let import = site.file("import.json", r#"{"carol": 12, "dave": "3.5"}"#);
    let admin: [&[&str]; 9] = [
        &["grant", "alice", "10", "--reason", "welcome", "--key", "w1"],
        &["adjust", "alice", "-56.4", "--reason", "demo: overspent"],
        &["refund", "14", "--reason", "the node died"],
        &["import", &import],
        &["account", "add", "lab", "--initial", "70"],
        &["account", "add", "course"],
        &["account", "set", "lab", "--monthly", "40"],
        &["account", "grant", "lab", "5", "--reason", "course credit"],
        &["account", "transfer", "lab", "course", "20", "--reason", "the TAs' hours", "--key", "t1"],
    ];
    for args in admin {
        site.accountd(None, &[&["admin"], args].concat()).ok();
    }
    let refused = site.accountd(Some("alice"), &["admin", "grant", "alice", "1", "--reason", "mine"]);
    assert_ne!(refused.code, 0);

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(serve.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    serve.wait().unwrap();
    let log = log.join().unwrap();

    let ledger = site.path("lib/ledger.sqlite");
    let start = format!(
        "with config {} and ledger {}: listening on {}",
        site.config.display(),
        ledger.display(),
        socket.display()
    );
    assert!(log.contains(&start), "the start line names the config and the ledger:\n{log}");
    let lines = [
        "INFO root granted alice +10 (welcome) key=w1; balance now 110\n",
        "INFO root adjusted alice -56.4 (demo: overspent); balance now 53.6\n",
        "INFO root refunded job 14 (the node died); balance now 100\n",
        "INFO root imported the balances of 2 users: 2 new, 0 there before\n",
        "INFO root created the pool of account lab (initial 70); now balance 70, ",
        "INFO root changed the rules of account lab's pool (monthly 40); now balance 70, daily 1, monthly 40, ",
        "INFO root granted account lab +5 (course credit); balance now 75\n",
        "INFO root moved 20 from account lab to account course (the TAs' hours) key=t1; balances now: account lab \
         55, account course ",
        "WARN alice was refused: only root, the SlurmUser",
    ];
    for line in lines {
        assert!(log.contains(line), "missing {line:?} in:\n{log}");
    }
    for debug_dump in ["Grant {", "Tokens(", "caller=", "accountd::", "\\'"] {
        assert!(!log.contains(debug_dump), "{debug_dump:?} in:\n{log}");
    }
    assert!(!log.contains('\u{1b}'), "NO_COLOR: no escape codes on the terminal:\n{log:?}");
}

/// A warning of `accountd charge` (a row sacct could not have meant) on a terminal: in colour by
/// default, plain under `NO_COLOR` or `TERM=dumb`; its quotes as written either way.
#[test]
fn colour_is_for_terminals_that_want_it() {
    let site = Site::start("", "");
    let sacct = site
        .file("sacct.txt", "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n8|bob|garbage|3600|1795444368|COMPLETED\n");
    let warning = |env: &[(&str, &str)]| {
        let charge = accountd_on_a_terminal(&site.config, &["charge", "--sacct-file", &sacct], env);
        let (mut child, out) = stderr_on_a_terminal(charge);
        assert!(child.wait().unwrap().success());
        out.join().unwrap()
    };
    let coloured = warning(&[]);
    assert!(coloured.contains("\u{1b}["), "a terminal that wants colour gets it: {coloured:?}");
    for env in [[("NO_COLOR", "1")], [("TERM", "dumb")]] {
        let plain = warning(&env);
        assert!(!plain.contains('\u{1b}'), "{env:?}: {plain:?}");
        assert!(plain.contains("WARN sacct line 2: not charged"), "{env:?}: {plain}");
        assert!(plain.contains("bad TRES entry 'garbage'"), "quotes as written: {plain}");
        assert!(!plain.contains("rejected_records"), "no module path at the default level: {plain}");
    }
}
