//! The RPMs for RHEL-family sites (packaging/build-rpms.sh, which tests/run.sh runs with `--nodeps`
//! against the host's Slurm headers: Debian has no RPM of Slurm): where each file lands, what they
//! require of Slurm, their scriptlets, rpmlint, and an install into an empty root. tests/run.sh's
//! `packages` suite runs them on the host's release only (the other releases' root filesystems have
//! no rpm), and says so there; wherever they run, missing RPMs fail.

use std::path::{Path, PathBuf};

#[path = "../support/mod.rs"]
mod support;
use support::common;

use crate::common::{built, run_as, Outcome};

/// The directory of the RPMs tests/run.sh built (`GPUTOKENS_RPMS`).
fn rpm_dir() -> PathBuf {
    let dir = std::env::var("GPUTOKENS_RPMS")
        .expect("GPUTOKENS_RPMS is not set: tests/run.sh builds the RPMs (packaging/build-rpms.sh) and sets it");
    PathBuf::from(dir)
}

/// The two packages: (gputokens, gputokens-slurm-plugins).
/// The three RPMs: gputokens, gputokens-slurm-plugins and gputokens-agent.
fn rpms(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rpm"))
        .collect();
    found.sort();
    let mut take = |prefix: &str| {
        let at = found.iter().position(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix));
        found.remove(at.unwrap_or_else(|| panic!("no {prefix}*.rpm in {}", dir.display())))
    };
    let (plugins, agent) = (take("gputokens-slurm-plugins-"), take("gputokens-agent-"));
    assert_eq!(found.len(), 1, "{found:?}");
    (found.remove(0), plugins, agent)
}

fn rpm(args: &[&str]) -> Outcome {
    run_as(None, Path::new("/usr/bin/rpm"), args)
}

fn query(package: &Path, args: &[&str]) -> Vec<String> {
    let all = [args, &[package.to_str().unwrap()]].concat();
    rpm(&all).ok().stdout.lines().map(str::to_string).collect()
}

/// The Slurm release this host runs (Debian's version without epoch and revision: 22.05.8).
fn host_slurm() -> String {
    let deb = run_as(None, Path::new("/usr/bin/dpkg-query"), &["-W", "-f", "${Version}", "slurm-wlm-basic-plugins"])
        .ok()
        .stdout;
    let version = deb.split_once(':').map_or(deb.as_str(), |(_, v)| v);
    version.rsplit_once('-').map_or(version, |(v, _)| v).to_string()
}

#[test]
#[ignore = "needs tests/run.sh, which builds the RPMs"]
fn every_file_lands_where_a_rhel_sites_slurm_expects_it() {
    let dir = rpm_dir();
    let (main, plugins, agent) = rpms(&dir);
    let files = query(&main, &["-qlp"]);
    for path in [
        "/usr/bin/accountd",
        "/usr/bin/sbalance",
        "/etc/slurm/gputokens.toml",
        "/usr/lib/systemd/system/gputokens-accountd.service",
        "/usr/lib/systemd/system/gputokens-backup.timer",
        "/usr/share/man/man1/accountd-admin-account-transfer.1.gz",
        "/usr/share/man/man1/sbalance.1.gz",
        "/usr/share/bash-completion/completions/sbalance",
        "/usr/share/zsh/site-functions/_accountd",
        "/usr/share/fish/vendor_completions.d/accountd.fish",
        concat!("/usr/share/doc/gputokens-", env!("CARGO_PKG_VERSION"), "/examples/slurm.conf.gputokens"),
        concat!("/usr/share/licenses/gputokens-", env!("CARGO_PKG_VERSION"), "/LICENSE"),
    ] {
        assert!(files.iter().any(|f| f == path), "gputokens lacks {path}: {files:#?}");
    }
    assert!(!files.iter().any(|f| f == "/etc/slurm"), "/etc/slurm is Slurm's own directory");
    // The node agent is a package of its own: a GPU node installs no ledger, accountd no NVML.
    assert!(!files.iter().any(|f| f.contains("gputokens-agent")), "gputokens holds the agent: {files:#?}");
    let agent_files = query(&agent, &["-qlp"]);
    for path in [
        "/usr/bin/gputokens-agent",
        "/usr/lib/systemd/system/gputokens-agent.service",
        "/usr/share/man/man8/gputokens-agent.8.gz",
    ] {
        assert!(agent_files.iter().any(|f| f == path), "gputokens-agent lacks {path}: {agent_files:#?}");
    }
    assert!(!agent_files.iter().any(|f| f.contains("accountd") || f.ends_with(".toml")), "{agent_files:#?}");
    let agent_scripts = query(&agent, &["-qp", "--scripts"]).join("\n");
    assert!(agent_scripts.contains("gputokens-agent.service"), "{agent_scripts}");
    // Slurm's own RPMs (slurm.spec) have PluginDir %{_libdir}/slurm: /usr/lib64/slurm.
    let plugin_files = query(&plugins, &["-qlp"]);
    for path in [
        "/usr/lib64/slurm/job_submit_gputokens.so",
        "/usr/lib64/slurm/spank_gputokens.so",
        "/etc/slurm/plugstack.conf.d/gputokens.conf",
    ] {
        assert!(plugin_files.iter().any(|f| f == path), "the plugins lack {path}: {plugin_files:#?}");
    }

    // Configs are %config(noreplace): an admin's edits survive upgrades.
    for (package, config) in
        [(&main, "/etc/slurm/gputokens.toml"), (&plugins, "/etc/slurm/plugstack.conf.d/gputokens.conf")]
    {
        let flags = query(package, &["-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]"]);
        let line = flags.iter().find(|l| l.starts_with(&format!("{config} "))).expect(config);
        assert!(line.ends_with(" cn"), "{config} is not %config(noreplace): {line}");
    }

    // Exactly the Slurm whose headers built them; the daemon package needs munge and Slurm's commands.
    let slurm = host_slurm();
    let requires = query(&plugins, &["-qp", "--requires"]);
    assert!(requires.iter().any(|r| r == &format!("slurm(x86-64) = {slurm}")), "{requires:#?}");
    let release = query(&plugins, &["-qp", "--qf", "%{RELEASE}"]).join("");
    assert!(release.starts_with(&format!("1.slurm{slurm}")), "{release}");
    let requires = query(&main, &["-qp", "--requires"]);
    assert!(requires.iter().any(|r| r == "munge") && requires.iter().any(|r| r == "slurm"), "{requires:#?}");
    assert!(
        !requires.iter().any(|r| r.starts_with("libslurm")),
        "sbalance and accountd link no libslurm: {requires:#?}"
    );

    // systemd: re-read on install, stopped and disabled on removal, restarted on upgrade; never enabled.
    let scripts = query(&main, &["-qp", "--scripts"]).join("\n");
    for part in
        ["postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet", "gputokens-accountd.service"]
    {
        assert!(scripts.contains(part), "no {part} in:\n{scripts}");
    }
    assert!(!scripts.contains("enable --now") && !scripts.contains("systemctl start"), "{scripts}");
    assert!(query(&plugins, &["-qp", "--scripts"]).is_empty(), "the plugins need no scriptlet");
}

#[test]
#[ignore = "needs tests/run.sh, which builds the RPMs"]
fn rpmlint_reports_no_error() {
    let dir = rpm_dir();
    let (main, plugins, agent) = rpms(&dir);
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/rpmlint.toml");
    let out = run_as(
        None,
        Path::new("/usr/bin/rpmlint"),
        &["-c", config.to_str().unwrap(), main.to_str().unwrap(), plugins.to_str().unwrap(), agent.to_str().unwrap()],
    );
    let summary = out.stdout.lines().last().unwrap_or_default().to_string();
    assert!(summary.contains("3 packages") && summary.contains(" 0 errors"), "{}{}", out.stdout, out.stderr);
    assert_eq!(out.code, 0, "{}", out.stdout);
}

/// The host's /bin/sh and the libraries it needs, in `root`: rpm runs the scriptlets there (chrooted),
/// and an empty root has no shell.
fn give_a_shell(root: &Path) {
    let ldd = run_as(None, Path::new("/usr/bin/ldd"), &["/bin/sh"]).ok().stdout;
    let libraries = ldd.split_whitespace().filter(|w| w.starts_with('/')).map(str::to_string);
    for file in std::iter::once("/bin/sh".to_string()).chain(libraries) {
        let real = std::fs::canonicalize(&file).unwrap();
        let into = root.join(file.trim_start_matches('/'));
        std::fs::create_dir_all(into.parent().unwrap()).unwrap();
        std::fs::copy(&real, &into).unwrap();
    }
}

/// The packages install into an empty root (but for a shell), their scriptlets run there without
/// a failure, and what they installed is this build: its version, the Slurm headers it was built
/// against, plugins Slurm can load, the plugstack line naming them, a config accountd accepts.
#[test]
#[ignore = "needs tests/run.sh, which builds the RPMs"]
fn both_install_into_an_empty_root_as_the_build_under_test() {
    let dir = rpm_dir();
    let (main, plugins, agent) = rpms(&dir);
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_str().unwrap();
    give_a_shell(root.path());
    rpm(&["--root", r, "--initdb"]).ok();
    let packages = [main.to_str().unwrap(), plugins.to_str().unwrap(), agent.to_str().unwrap()];
    let install = rpm(&[&["-i", "--nodeps", "--root", r][..], &packages].concat()).ok();
    assert!(!install.stderr.contains("scriptlet failed"), "{}", install.stderr);
    let installed = rpm(&["--root", r, "-qa", "--qf", "%{NAME}\n"]).ok().stdout;
    let mut names: Vec<&str> = installed.lines().collect();
    names.sort();
    assert_eq!(names, ["gputokens", "gputokens-agent", "gputokens-slurm-plugins"]);
    let verify = rpm(&["--root", r, "-V", "--nodeps", "gputokens", "gputokens-slurm-plugins", "gputokens-agent"]);
    assert_eq!(verify.code, 0, "rpm -V: the files as packaged: {}{}", verify.stdout, verify.stderr);

    // The same build: the version and the Slurm headers it was built against.
    for command in ["accountd", "sbalance", "gputokens-agent"] {
        let packaged = run_as(None, &root.path().join("usr/bin").join(command), &["--version"]).ok().stdout;
        let build = run_as(None, &built(command), &["--version"]).ok().stdout;
        assert_eq!(packaged, build, "/usr/bin/{command} of the RPM");
    }
    // The plugins are Slurm plugins of this Slurm: their plugin_version is its version number.
    for so in ["job_submit_gputokens.so", "spank_gputokens.so"] {
        let path = root.path().join("usr/lib64/slurm").join(so);
        let symbols = run_as(None, Path::new("/usr/bin/nm"), &["-D", "--defined-only", path.to_str().unwrap()]).ok();
        assert!(symbols.stdout.lines().any(|l| l.ends_with(" plugin_version")), "{so}: {}", symbols.stdout);
    }
    let plugstack = std::fs::read_to_string(root.path().join("etc/slurm/plugstack.conf.d/gputokens.conf")).unwrap();
    assert!(plugstack.lines().any(|l| l.starts_with("optional /usr/lib64/slurm/spank_gputokens.so ")), "{plugstack}");

    // The host's accountd accepts the installed config as shipped.
    let config = root.path().join("etc/slurm/gputokens.toml");
    let check = run_as(None, &built("accountd"), &["config", "check", config.to_str().unwrap()]).ok();
    assert!(check.stdout.contains(": valid"), "{}", check.stdout);
}

/// build-rpms.sh with `args`, with `dpkg-query` answering `dpkg_version` for Slurm (None: the real one).
fn build_rpms(args: &[&str], dpkg_version: Option<&str>) -> Outcome {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/build-rpms.sh");
    let shims = tempfile::tempdir().unwrap();
    let mut path = std::env::var("PATH").unwrap_or_default();
    if let Some(version) = dpkg_version {
        let shim = shims.path().join("dpkg-query");
        std::fs::write(&shim, format!("#!/bin/sh\necho -n '{version}'\n")).unwrap();
        std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        path = format!("{}:{path}", shims.path().display());
    }
    let out = std::process::Command::new("bash").arg(script).args(args).env("PATH", path).output().unwrap();
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

/// The script builds nothing for a Slurm it cannot name, nor for headers of another Slurm than the
/// installed one: the plugins would not load.
#[test]
#[ignore = "needs tests/run.sh, which installs rpm and the Slurm headers"]
fn build_rpms_refuses_another_slurms_headers() {
    let without_nodeps = build_rpms(&[], None);
    assert_eq!(without_nodeps.code, 1);
    assert!(without_nodeps.stderr.contains("no slurm RPM is installed (rpm -q slurm)"), "{}", without_nodeps.stderr);
    let other = build_rpms(&["--nodeps"], Some("23.11.4-1"));
    assert_eq!(other.code, 1);
    let headers = host_slurm();
    assert!(
        other.stderr.contains(&format!("are Slurm {headers}, but the installed Slurm is 23.11.4")),
        "{}",
        other.stderr
    );
    assert!(other.stdout.is_empty(), "no package named: {}", other.stdout);
}

/// The tarball carries the spec at its top, its version filled in; read on a host without Slurm's
/// headers it says what to install instead of failing on a requirement without a version.
#[test]
#[ignore = "needs tests/run.sh, which builds the RPMs"]
fn the_tarballs_spec_says_when_slurms_headers_are_missing() {
    let dir = rpm_dir();
    let version = env!("CARGO_PKG_VERSION");
    let tarball = dir.join(format!("gputokens-{version}.tar.gz"));
    let inside = format!("gputokens-{version}/gputokens.spec");
    let spec = run_as(None, Path::new("/bin/tar"), &["-xzOf", tarball.to_str().unwrap(), &inside]).ok().stdout;
    assert!(
        spec.contains(&format!("\nVersion:        {version}\n"))
            && !spec.contains("@VERSION@")
            && !spec.contains("@DATE@"),
        "{spec}"
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &spec).unwrap();
    let path = file.path().to_str().unwrap();
    let parsed = run_as(None, Path::new("/usr/bin/rpmspec"), &["-P", path]).ok().stdout;
    assert!(parsed.contains(&format!("Requires:       slurm(x86-64) = {}", host_slurm())), "{parsed}");
    let without = run_as(None, Path::new("/usr/bin/rpmspec"), &["-P", path, "--define", "_includedir /nonexistent"]);
    assert_ne!(without.code, 0);
    assert!(
        without.stderr.contains("no Slurm headers (/nonexistent/slurm/slurm_version.h): install slurm-devel"),
        "{}",
        without.stderr
    );
}
