//! The test cluster's own scripts fail fast and say why: tests/cluster/up.sh, given a host file
//! without `localhost` (as debootstrap leaves a root filesystem) or a slurm.conf naming a host that
//! does not resolve, stops before it starts any daemon, within seconds, naming the cause — instead
//! of waiting on DNS until CI's limit. Run in mount and network namespaces of their own (a copy of
//! /etc/hosts bound over it, no DNS reachable, as inside the release root filesystems), so the real
//! cluster beside them is untouched. Needs root and the cluster's packages (tests/run.sh has both).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What up.sh did in a sandbox: its exit status, stderr, how long it took, what it started.
struct UpRun {
    success: bool,
    stderr: String,
    took: Duration,
    pidfiles: Vec<String>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Runs up.sh with `hosts` bound over /etc/hosts and name lookups limited to files and DNS (no
/// nss-myhostname to answer for localhost), in a network namespace where no DNS server can be
/// reached, under a 60 s limit.
fn up_sh_with(hosts: &str, extra_slurm_conf: &str) -> UpRun {
    let dir = tempfile::tempdir().unwrap();
    let hosts_file = dir.path().join("hosts");
    std::fs::write(&hosts_file, hosts).unwrap();
    let nsswitch_file = dir.path().join("nsswitch.conf");
    let nsswitch = std::fs::read_to_string("/etc/nsswitch.conf").unwrap_or_default();
    let mut nsswitch: String =
        nsswitch.lines().filter(|l| !l.starts_with("hosts:")).map(|l| format!("{l}\n")).collect();
    nsswitch.push_str("hosts: files dns\n");
    std::fs::write(&nsswitch_file, nsswitch).unwrap();
    let lab = dir.path().join("lab");
    let script =
        "mount --bind \"$1\" /etc/hosts && mount --bind \"$2\" /etc/nsswitch.conf && exec bash tests/cluster/up.sh";
    // Inside a release's root filesystem (tests/slurm-releases/enter.sh) the mount namespace is
    // already private, and its root is no mount point whose propagation unshare could change.
    let propagation = if std::env::var_os("GPUTOKENS_SLURM_RELEASE").is_some() { "unchanged" } else { "private" };
    let started = Instant::now();
    let out = Command::new("timeout")
        .args(["60", "unshare", "--mount", "--net", "--propagation", propagation, "--", "bash", "-c", script, "up"])
        .arg(&hosts_file)
        .arg(&nsswitch_file)
        .current_dir(repo())
        .env("GPUTOKENS_LAB", &lab)
        .env("GPUTOKENS_EXTRA_SLURM_CONF", extra_slurm_conf)
        .env_remove("GPUTOKENS_PLUGINS")
        .stdin(Stdio::null())
        .output()
        .expect("run timeout unshare bash tests/cluster/up.sh");
    let pidfiles = std::fs::read_dir(lab.join("pids"))
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    UpRun {
        success: out.status.success(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
        pidfiles,
    }
}

/// This machine's /etc/hosts less every line that names localhost: what a root filesystem built by
/// debootstrap, with only up.sh's line for the host added, looks like.
fn hosts_without_localhost() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    let kept: String = hosts
        .lines()
        .filter(|l| !l.split_whitespace().any(|w| w == "localhost" || w.starts_with("ip6-")))
        .map(|l| format!("{l}\n"))
        .collect();
    let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
    format!("{kept}127.0.0.1 {}\n", host.trim())
}

fn assert_failed_fast(run: &UpRun, names: &[&str]) {
    assert!(!run.success, "up.sh succeeded; stderr:\n{}", run.stderr);
    assert!(run.took < Duration::from_secs(60), "up.sh took {:?} (limit 60 s); stderr:\n{}", run.took, run.stderr);
    for name in names {
        assert!(run.stderr.contains(name), "up.sh's error does not name {name:?}:\n{}", run.stderr);
    }
    assert!(run.pidfiles.is_empty(), "up.sh started daemons before failing: {:?}", run.pidfiles);
}

#[test]
#[ignore = "needs root and the test cluster's packages (tests/run.sh)"]
fn up_sh_fails_in_seconds_when_localhost_does_not_resolve() {
    let run = up_sh_with(&hosts_without_localhost(), "");
    assert_failed_fast(&run, &["'localhost' does not resolve", "/etc/hosts needs '127.0.0.1 localhost'"]);
}

#[test]
#[ignore = "needs root and the test cluster's packages (tests/run.sh)"]
fn up_sh_fails_in_seconds_when_a_slurm_conf_host_does_not_resolve() {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    let run = up_sh_with(&hosts, "AccountingStorageHost=gputokens-dbd.invalid");
    assert_failed_fast(&run, &["do not resolve", "gputokens-dbd.invalid"]);
}
