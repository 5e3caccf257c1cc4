//! Attacks that need no cluster: reports with huge claimed names cost accountd no memory, and files
//! others can write are not taken orders from. The attacks on the test cluster, as its real
//! non-root users, are in tests/cluster/security.rs.

use std::path::Path;

use crate::common::{run_as, Site};

/// VmRSS of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// POSTs `body` to `path` with an optional Authorization header; returns the HTTP status.
fn post(host: &str, path: &str, authorization: Option<&str>, body: &[u8]) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body); // a refusal may close the connection before the body is sent
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// A job on a node posts reports with fresh, huge node names and no valid credential: each is
/// refused without its claim being kept or logged whole, so accountd's memory and log stay flat.
#[test]
fn refused_reports_with_huge_claimed_names_cost_no_memory() {
    let site = Site::start("", "");
    let host = site.http_url().trim_start_matches("http://").to_string();
    let report = |i: usize, size: usize| {
        format!(
            r#"{{"node":"n{i}{}","sample":{{"time":"2026-11-24T00:00:00Z","gpus":[],"processes":[]}}}}"#,
            "x".repeat(size)
        )
        .into_bytes()
    };
    // Warm up the listener and the first refusal's log line.
    assert_eq!(post(&host, "/v1/agent/report", None, &report(0, 10)), 401);
    let before = rss_kib(site.pid());
    for i in 0..200 {
        // Under the body limit: refused for want of a credential, the body never parsed.
        let status = post(&host, "/v1/agent/report", None, &report(i, 200_000));
        assert_eq!(status, 401, "report {i}");
        // A credential that munged cannot decode (or no munged at all).
        let status = post(&host, "/v1/agent/report", Some("MUNGE garbage"), &report(i, 200_000));
        assert!(status == 401 || status == 503, "report {i}: {status}");
    }
    let grown = rss_kib(site.pid()).saturating_sub(before);
    assert!(grown < 20 * 1024, "accountd grew by {grown} KiB over 400 refused reports");
    for i in 0..20 {
        // Over the report route's limit.
        assert_eq!(post(&host, "/v1/agent/report", None, &report(i, 1_900_000)), 413, "report {i}");
    }
    let log = site.log();
    assert!(log.len() < 64 * 1024, "the log grew to {} bytes", log.len());
    assert!(!log.contains(&"x".repeat(100)), "a claimed name was logged whole");
}

/// A config, snapshot directory or jobs directory that users could have written is not obeyed.
#[test]
fn files_others_can_write_are_not_taken_orders_from() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::start("", "");
    let mode = |path: &Path, mode: u32| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    mode(&site.config, 0o666);
    let out = site.accountd(None, &["tick"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("the config file") && out.stderr.contains("is writable by every user"),
        "{}",
        out.stderr
    );
    mode(&site.config, 0o644);
    mode(&site.path("lib"), 0o777);
    let out = site.accountd(None, &["tick"]);
    assert!(out.stderr.contains("the balance snapshot's directory"), "{}", out.stderr);
    mode(&site.path("lib"), 0o750);
    site.accountd(None, &["tick", "--skip-charge"]).ok();

    let jobs = site.path("jobs");
    std::fs::create_dir(&jobs).unwrap();
    mode(&jobs, 0o1777);
    let agent = site.file(
        "agent.toml",
        &format!("[agent]\nreport_to = \"{}\"\nlisten = \"off\"\njobs_dir = \"{}\"\n", site.http_url(), jobs.display()),
    );
    let out = run_as(None, &crate::common::bin("gputokens-agent"), &["--config", &agent, "--once"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("agent.jobs_dir") && out.stderr.contains("writable by every user"), "{}", out.stderr);
}

/// The audit's N9: a documented command that puts a MUNGE credential or a token on a command line
/// hands it to every user of the host (`/proc/*/cmdline`); the docs pipe them in.
#[test]
fn no_documented_command_puts_a_credential_on_its_command_line() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "slurm-conf"] {
        let walk = std::fs::read_dir(root.join(dir)).unwrap();
        files.extend(walk.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "md")));
    }
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let on_argv = ["$(munge", "`munge", "$(cat", "Bearer $("].iter().any(|p| line.contains(p));
            if on_argv && line.contains("curl") {
                found.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(files.len() > 3, "{files:?}");
    assert!(found.is_empty(), "credentials on a command line:\n{}", found.join("\n"));
}
