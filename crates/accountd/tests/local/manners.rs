//! Operating manners an admin expects of Unix tools and daemons: output into a closed pipe ends a
//! command quietly; a second daemon never knocks out the first; one address's idle flood does not
//! silence the real clients from that address.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{bin, sbalance_bin, Site};

/// Runs `program args` as `user` (root when None) with stdout a pipe whose reader has already
/// closed it (as `| head -1` does once it has its line): returns (exit code, stderr).
fn into_closed_pipe(user: Option<&str>, program: &Path, args: &[&str]) -> (i32, String) {
    // The reader closes its end first, so the command's first write meets a closed pipe.
    let script = r#""$@" 2>"$ERR_FILE" | { exec 0<&-; sleep 0.3; }; echo "${PIPESTATUS[0]}""#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let err_file = dir.path().join("stderr");
    let mut cmd = match user {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--", "bash", "-c", script, "pipe"]);
            c
        }
        None => {
            let mut c = Command::new("bash");
            c.args(["-c", script, "pipe"]);
            c
        }
    };
    let out = cmd
        .arg(program)
        .args(args)
        .env("ERR_FILE", &err_file)
        .env_remove("GPUTOKENS_CONF")
        .current_dir("/tmp")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(-1);
    (code, std::fs::read_to_string(err_file).unwrap_or_default())
}

#[test]
fn commands_that_print_end_quietly_into_a_closed_pipe() {
    let site = Site::start("", "[web]\nurl = \"https://gpu.example.org/web/\"\n");
    for (user, amount) in [("alice", "5"), ("bob", "2")] {
        site.accountd(None, &["admin", "grant", user, amount, "--reason", "pipes"]).ok();
    }
    let config = site.config.to_str().unwrap();
    let month = chrono::Local::now().format("%Y-%m").to_string();
    let accountd = bin("accountd");
    let sbalance = sbalance_bin();
    let cases: Vec<(Option<&str>, &Path, Vec<&str>)> = vec![
        (None, &accountd, vec!["--config", config, "admin", "history", "alice"]),
        (None, &accountd, vec!["--config", config, "admin", "actions"]),
        (None, &accountd, vec!["--config", config, "config", "check"]),
        (None, &accountd, vec!["config", "default"]),
        (None, &sbalance, vec!["--config", config, "-a"]),
        (Some("alice"), &sbalance, vec!["--config", config]),
        (Some("alice"), &sbalance, vec!["--config", config, "--history"]),
        (Some("alice"), &sbalance, vec!["--config", config, "--statement", &month]),
    ];
    for (user, program, args) in cases {
        let (code, stderr) = into_closed_pipe(user, program, &args);
        let what = format!("{user:?} {} {}", program.display(), args.join(" "));
        assert!(code == 0 || code == 141, "{what}: exit {code}; stderr:\n{stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{what}: stderr:\n{stderr}");
    }
}

/// `accountd --config CONFIG serve` (or `agent`) as root, expected to exit by itself: its outcome.
fn second_daemon(program: &str, config: &str, args: &[&str]) -> crate::common::Outcome {
    let out = Command::new("timeout")
        .args(["20", bin(program).to_str().unwrap(), "--config", config])
        .args(args)
        .env_remove("GPUTOKENS_CONF")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    out.into()
}

/// The site's `accountd serve` still answers a user on its socket.
fn still_answers(site: &Site) {
    let out = site.sbalance(Some("alice"), &["-n", "-P", "-o", "User,Balance"]);
    assert_eq!((out.code, out.stdout.trim()), (0, "alice|100"), "the first serve must still answer: {}", out.stderr);
}

#[test]
fn a_second_serve_exits_naming_the_first_and_leaves_its_socket_alone() {
    let site = Site::start("", "");
    let first = site.pid();
    // The same config (as a second unit or a typo in a script would start it).
    let out = second_daemon("accountd", site.config.to_str().unwrap(), &["serve"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains(&format!("is already running (pid {first}")), "{}", out.stderr);
    assert!(out.stderr.contains("accountd.sock.lock"), "{}", out.stderr);
    still_answers(&site);

    // Only the socket path shared: a ledger and HTTP address of its own.
    let d = site.dir.path().display();
    let socket_only = site.file(
        "socket-only.toml",
        &format!(
            "{}[http]\nlisten = \"127.0.0.1:0\"\n[paths]\nledger = \"{d}/other/ledger.sqlite\"\nsnapshot = \"{d}/other/snapshot\"\nsocket = \"{d}/run/accountd.sock\"\n",
            crate::common::PRICES
        ),
    );
    let out = second_daemon("accountd", &socket_only, &["serve"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains(&format!("pid {first}")), "{}", out.stderr);
    still_answers(&site);

    // Only the HTTP address shared: a socket and ledger of its own.
    let address = site.http_url().trim_start_matches("http://").to_string();
    let http_only = site.file(
        "http-only.toml",
        &format!(
            "{}[http]\nlisten = \"{address}\"\n[paths]\nledger = \"{d}/other/ledger.sqlite\"\nsnapshot = \"{d}/other/snapshot\"\nsocket = \"{d}/other/accountd.sock\"\n",
            crate::common::PRICES
        ),
    );
    let out = second_daemon("accountd", &http_only, &["serve"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains(&format!("cannot listen on http {address}")), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("pid {first}: ")) && out.stderr.contains("serve"), "{}", out.stderr);
    assert!(!site.path("other/accountd.sock").exists(), "the refused serve bound its socket");
    still_answers(&site);
    let (status, _) = crate::common::http_get(&format!("{}/metrics", site.http_url()));
    assert_eq!(status, 200, "the first serve's HTTP listener");
}

#[test]
fn a_second_agent_for_the_node_exits_naming_the_first() {
    let site = Site::start("", "");
    let jobs = site.path("gpu-jobs");
    let config = site.file(
        "agent.toml",
        &format!(
            "[agent]\nreport_to = \"{}\"\nnvml_library = \"{}\"\nlisten = \"127.0.0.1:0\"\ninterval = \"1s\"\njobs_dir = \"{}\"\n",
            site.http_url(),
            bin("libnvidia_ml.so").display(),
            jobs.display()
        ),
    );
    let state = site.file(
        "nvml.toml",
        "[[gpu]]\nuuid = \"GPU-0\"\nname = \"NVIDIA a6000\"\nutil_gpu = 0\nutil_mem = 0\nmem_used = 0\nmem_total = 1\ntemp = 40\npower_mw = 1\n",
    );
    let log = std::fs::File::create(site.path("agent.log")).unwrap();
    let mut first = Command::new(bin("gputokens-agent"))
        .args(["--config", &config, "--node", "vm"])
        .env("FAKE_NVML_STATE", &state)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(site.path("agent.log")).unwrap_or_default().contains("agent metrics on") {
        assert!(std::time::Instant::now() < deadline, "agent did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = second_daemon("gputokens-agent", &config, &["--node", "vm"]);
    let started = std::fs::read_to_string(site.path("agent.log")).unwrap_or_default();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(first.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let _ = first.wait();
    assert_eq!(out.code, 2, "{}\nfirst agent's log:\n{started}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "gputokens-agent for node vm (jobs_dir {}) is already running (pid {}",
            jobs.display(),
            first.id()
        )),
        "{}",
        out.stderr
    );
}

/// Sends one request line of `size` bytes to the site's socket as `user`; returns the reply line.
fn long_request(site: &Site, user: Option<&str>, size: usize) -> String {
    let script = r#"use IO::Socket::UNIX; $SIG{PIPE} = "IGNORE"; my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "$!";
        print $s "{\"x\":\"" . ("a" x $ARGV[1]) . "\"}\n"; my $reply = <$s>; print $reply"#;
    let socket = site.path("run/accountd.sock");
    let args = ["-e", script, socket.to_str().unwrap(), &size.to_string()];
    let out = crate::common::run_as(user, Path::new("/usr/bin/perl"), &args);
    match out.stdout.is_empty() {
        // No reply: what the client saw, for the assertion's message.
        true => format!("(no reply; perl exited {}: {})", out.code, out.stderr.trim()),
        false => out.stdout,
    }
}

#[test]
fn only_admins_may_send_long_requests_on_the_socket() {
    let site = Site::start("", "");
    let reply = long_request(&site, Some("alice"), 100 << 10);
    assert!(reply.contains("request too large: 64 KiB at most"), "{reply}");
    let reply = long_request(&site, Some("alice"), 1000);
    assert!(reply.contains("malformed request"), "a short one is read: {reply}");
    // root's (an import of a big site's state) is read whole, then judged.
    let reply = long_request(&site, None, 1 << 20);
    assert!(reply.contains("malformed request"), "{reply}");
}
