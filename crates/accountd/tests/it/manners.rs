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
