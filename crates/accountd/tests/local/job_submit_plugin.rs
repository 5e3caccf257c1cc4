//! The job_submit plugin and its snapshot without a cluster: the symbols slurmctld loads, and the
//! snapshot a root accountd writes for the SlurmUser alone. The plugin inside the test cluster's
//! slurmctld is in tests/cluster/admission.rs.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{run_as, Site};

/// The plugin exports exactly what slurmctld looks up, and needs from slurmctld only what
/// libslurmfull exports (it is linked with BIND_NOW: a missing symbol would fail the load).
#[test]
fn the_plugin_exports_only_its_symbols() {
    let so = crate::common::bin("libjob_submit_gputokens.so");
    let nm = |args: &[&str], file: &Path| {
        let out = std::process::Command::new("nm").args(args).arg(file).output().expect("nm (binutils)");
        assert!(out.status.success(), "nm {args:?} {}", file.display());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut exported: Vec<String> = nm(&["-D", "--defined-only"], &so)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    exported.sort();
    assert_eq!(exported, ["fini", "init", "job_modify", "job_submit", "plugin_name", "plugin_type", "plugin_version"]);

    // Undefined symbols without a version come from the loading process, not from libc/libgcc.
    let from_slurm: Vec<String> = nm(&["-D", "--undefined-only"], &so)
        .lines()
        .filter(|l| l.trim_start().starts_with("U ") && !l.contains('@'))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert!(!from_slurm.is_empty());
    let libslurm = Path::new("/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so");
    let provided = if libslurm.exists() { nm(&["-D", "--defined-only"], libslurm) } else { String::new() };
    for symbol in &from_slurm {
        assert!(symbol.starts_with("slurm_"), "{symbol} is not a Slurm symbol");
        if libslurm.exists() {
            assert!(provided.lines().any(|l| l.ends_with(&format!(" T {symbol}"))), "libslurmfull lacks {symbol}");
        }
    }
}

/// accountd run as root writes the snapshot readable by the SlurmUser (bob stands in for it) through
/// its group, and by no other user (alice); `config check --slurm` names a snapshot slurmctld's
/// SlurmUser cannot read (a stand-in scontrol reports the SlurmUser, so this runs without a cluster;
/// tests/cluster/admission.rs does it with slurmctld's real one).
#[test]
fn a_root_accountd_writes_the_snapshot_for_the_slurm_user_only() {
    use std::os::unix::fs::MetadataExt;
    let site = Site::start("slurm_user = \"bob\"", "");
    let snapshot = site.path("lib/balances.snapshot");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !snapshot.exists() {
        assert!(Instant::now() < deadline, "no snapshot: {}", site.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let cat = |user: &str| run_as(Some(user), Path::new("/usr/bin/cat"), &[snapshot.to_str().unwrap()]);
    let read = cat("bob");
    let ls = run_as(None, Path::new("/usr/bin/ls"), &["-la", site.path("lib").to_str().unwrap()]).stdout;
    assert_eq!(read.code, 0, "the SlurmUser cannot read it: {}\n{ls}", read.stderr);
    assert!(read.stdout.starts_with("gputokens-snapshot 1\n"), "{}", read.stdout);
    assert_ne!(cat("alice").code, 0, "alice read the snapshot");
    let meta = std::fs::metadata(&snapshot).unwrap();
    let bob = nix::unistd::User::from_name("bob").unwrap().unwrap();
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o777), (0, bob.gid.as_raw(), 0o640));

    let check_as = |slurm_user: &str| {
        let fake = tempfile::tempdir().unwrap();
        let uid = nix::unistd::User::from_name(slurm_user).unwrap().unwrap().uid;
        let scontrol = format!(
            "#!/bin/sh\n[ \"$1 $2\" = \"show config\" ] && echo 'JobSubmitPlugins        = gputokens' && \
             echo 'SlurmUser               = {slurm_user}({uid})'\nexit 0\n"
        );
        for (name, text) in
            [("scontrol", scontrol.as_str()), ("sinfo", "#!/bin/sh\nexit 0\n"), ("sacctmgr", "#!/bin/sh\nexit 0\n")]
        {
            let path = fake.path().join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        let config = fake.path().join("gputokens.toml");
        let text = format!(
            "slurm_user = \"{slurm_user}\"\n[slurm]\nbin_dir = \"{}\"\n[paths]\nsnapshot = \"{}\"\n",
            fake.path().display(),
            snapshot.display()
        );
        std::fs::write(&config, text).unwrap();
        run_as(None, &crate::common::bin("accountd"), &["config", "check", config.to_str().unwrap(), "--slurm"])
    };
    let ok = check_as("bob");
    let readable = format!("slurm: ok: the snapshot {} is readable by the SlurmUser (bob(", snapshot.display());
    assert!(ok.stdout.contains(&readable), "{}", ok.stdout);
    // A directory above it every user may write: the plugin would not take it (the audit's L8).
    let lib = site.path("lib");
    let mode = std::fs::metadata(&lib).unwrap().mode();
    std::fs::set_permissions(&lib, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let open = check_as("bob");
    std::fs::set_permissions(&lib, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    assert_eq!(open.code, 2, "{}", open.stdout);
    assert!(open.stdout.contains("takes no balances from a snapshot others could change"), "{}", open.stdout);
    let out = check_as("alice");
    assert_eq!(out.code, 2, "{}", out.stdout);
    // alice is stopped at the directory, which only the SlurmUser's group may search.
    let alice = nix::unistd::User::from_name("alice").unwrap().unwrap().uid;
    let lib = site.path("lib");
    let problem = format!("slurm: problem: slurmctld's SlurmUser (alice({alice})) cannot search {}", lib.display());
    let named = |l: &&str| l.starts_with(&problem) && l.contains(&*snapshot.to_string_lossy());
    assert!(out.stdout.lines().any(|l| named(&l)), "{}", out.stdout);
}
