//! The Debian packages as installed: what dpkg knows of them, the man pages, the bash completions,
//! and that the installed files are the build under test.
//!
//! tests/run.sh builds them (packaging/build-debs.sh --profile debug) and installs them with
//! `dpkg -i` before the cluster tests, which then run the installed accountd, sbalance and plugins.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;

use crate::common::{bin, built, run_as};

const TOOLS: &str = "gputokens";
const PLUGINS: &str = "gputokens-slurm-plugins";
const AGENT: &str = "gputokens-agent";
/// The package the plugins must match exactly: it holds Slurm's own plugins.
const SLURM_PLUGINS: &str = "slurm-wlm-basic-plugins";
const NOT_INSTALLED: &str = "not installed: run tests/run.sh, or build and dpkg -i the packages (packaging/)";

/// `dpkg-query -W -f FORMAT PACKAGE`.
fn dpkg_field(package: &str, format: &str) -> String {
    run_as(None, Path::new("/usr/bin/dpkg-query"), &["-W", "-f", format, package]).ok().stdout
}

/// The files `dpkg -L` lists for `package`.
fn package_files(package: &str) -> Vec<String> {
    run_as(None, Path::new("/usr/bin/dpkg"), &["-L", package]).ok().stdout.lines().map(str::to_string).collect()
}

/// Slurm's PluginDir: where Slurm's own package put a plugin every Slurm has.
fn slurm_plugin_dir() -> PathBuf {
    let own = package_files(SLURM_PLUGINS);
    let select = own.iter().find(|f| f.ends_with("/select_cons_tres.so")).expect("select_cons_tres.so");
    Path::new(select).parent().unwrap().to_path_buf()
}

/// Long options of a command (`--users`, ...), as clap builds them for the real binary.
fn long_options(mut command: clap::Command) -> Vec<String> {
    command.build();
    command.get_arguments().filter_map(|a| a.get_long()).map(|l| format!("--{l}")).collect()
}

#[test]
#[ignore = "needs tests/run.sh, which installs the gputokens packages"]
fn the_packages_are_installed_at_this_version() {
    for package in [TOOLS, PLUGINS, AGENT] {
        assert_eq!(dpkg_field(package, "${db:Status-Status}"), "installed", "{package} {NOT_INSTALLED}");
    }
    assert_eq!(dpkg_field(TOOLS, "${Version}"), env!("CARGO_PKG_VERSION"));
    assert_eq!(dpkg_field(AGENT, "${Version}"), env!("CARGO_PKG_VERSION"));
    // The plugins' version names the Slurm release they were built for: the upstream part of
    // Slurm's Debian version (no epoch, no Debian revision).
    let slurm = dpkg_field(SLURM_PLUGINS, "${Version}");
    let upstream = slurm.split_once(':').map_or(slurm.as_str(), |(_, v)| v).rsplit_once('-').unwrap().0;
    assert_eq!(dpkg_field(PLUGINS, "${Version}"), format!("{}+slurm{upstream}", env!("CARGO_PKG_VERSION")));
}

/// A GPU node installs the agent alone: its package holds the agent, its unit and page, and none
/// of accountd (no ledger, no SQLite, no status page), and needs neither gputokens nor Slurm's own
/// packages; gputokens holds no agent.
#[test]
#[ignore = "needs tests/run.sh, which installs the gputokens packages"]
fn the_agent_is_a_package_of_its_own() {
    let files = package_files(AGENT);
    for path in [
        "/usr/bin/gputokens-agent",
        "/usr/lib/systemd/system/gputokens-agent.service",
        "/usr/share/man/man8/gputokens-agent.8.gz",
    ] {
        assert!(files.iter().any(|f| f == path), "{AGENT} lacks {path}: {files:#?}");
    }
    assert!(!files.iter().any(|f| f.contains("accountd") || f.starts_with("/etc/")), "{files:#?}");
    let depends = dpkg_field(AGENT, "${Depends}");
    assert!(depends.contains("munge") && !depends.contains("gputokens") && !depends.contains("slurm"), "{depends}");
    assert!(!package_files(TOOLS).iter().any(|f| f.contains("gputokens-agent")), "{TOOLS} still holds the agent");
    let unit = std::fs::read_to_string("/usr/lib/systemd/system/gputokens-agent.service").unwrap();
    assert!(unit.lines().any(|l| l == "ExecStart=/usr/bin/gputokens-agent"), "{unit}");
    let version = run_as(None, Path::new("/usr/bin/gputokens-agent"), &["--version"]).ok().stdout;
    assert_eq!(version.trim(), format!("gputokens-agent {}", env!("CARGO_PKG_VERSION")));
}

/// Slurm loads a plugin only when its plugin_version is the running Slurm's exactly: the package
/// must not install beside any other Slurm than the one it was built for.
#[test]
#[ignore = "needs tests/run.sh, which installs the gputokens packages"]
fn the_plugins_depend_on_exactly_the_installed_slurm() {
    let slurm = dpkg_field(SLURM_PLUGINS, "${Version}");
    assert_eq!(dpkg_field(PLUGINS, "${Depends}"), format!("{SLURM_PLUGINS} (= {slurm})"));
    assert_eq!(dpkg_field(PLUGINS, "${Recommends}"), TOOLS);
    let files = package_files(PLUGINS);
    let plugin_dir = slurm_plugin_dir();
    for so in ["job_submit_gputokens.so", "spank_gputokens.so"] {
        let path = plugin_dir.join(so);
        assert!(files.iter().any(|f| Path::new(f) == path), "{PLUGINS} does not install {}: {files:?}", path.display());
    }
}

#[test]
#[ignore = "needs tests/run.sh, which installs the gputokens packages"]
fn the_configs_are_conffiles_and_plugstack_names_the_installed_plugin() {
    let conffiles: Vec<String> = [TOOLS, PLUGINS]
        .iter()
        .flat_map(|p| dpkg_field(p, "${Conffiles}\n").lines().map(str::to_string).collect::<Vec<_>>())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert_eq!(conffiles, ["/etc/slurm/gputokens.toml", "/etc/slurm/plugstack.conf.d/gputokens.conf"]);

    let plugstack = std::fs::read_to_string("/etc/slurm/plugstack.conf.d/gputokens.conf").unwrap();
    let line = plugstack.lines().find(|l| l.starts_with("optional ")).expect("the plugin line");
    let so = line.split_whitespace().nth(1).unwrap();
    assert_eq!(Path::new(so), slurm_plugin_dir().join("spank_gputokens.so"), "{line}");
}

/// `man` as a user runs it, in the C locale and wide enough not to break lines.
fn man(args: &[&str]) -> std::process::Output {
    Command::new("man").args(args).env("LC_ALL", "C").env("MANWIDTH", "200").output().expect("man (man-db)")
}

#[test]
#[ignore = "needs tests/run.sh, which installs the gputokens packages"]
fn man_finds_a_page_for_each_command_and_subcommand() {
    let subcommands = accountd::cli::Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| format!("accountd-{}", s.get_name()))
        .collect();
    let commands = ["accountd", "sbalance", "gputokens-agent"].map(str::to_string).to_vec();
    for page in [commands, subcommands].concat() {
        let out = man(&["-w", &page]);
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(out.status.success(), "man -w {page}: {}", String::from_utf8_lossy(&out.stderr));
        // The daemons in section 8, as slurmctld(8).
        let section = if ["accountd-serve", "gputokens-agent"].contains(&page.as_str()) { 8 } else { 1 };
        assert_eq!(path, format!("/usr/share/man/man{section}/{page}.{section}.gz"));
    }

    let out = man(&["-P", "cat", "sbalance"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("Show GPU token balances"), "{text}");

    for option in long_options(accountd::cli::sbalance::Args::command()) {
        assert!(text.contains(&option), "sbalance(1) does not document {option}:\n{text}");
    }

    // gputokens.toml(5): every key of the reference, as `man 5 gputokens.toml` shows it.
    let out = man(&["-P", "cat", "5", "gputokens.toml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "man 5 gputokens.toml: {}", String::from_utf8_lossy(&out.stderr));
    for table in gputokens::config::reference::TABLES {
        assert!(text.contains(&table.heading()), "gputokens.toml(5) has no {}:\n{text}", table.heading());
        for key in table.keys {
            assert!(
                text.contains(&format!("{} (default: ", key.name)),
                "gputokens.toml(5) lacks {}",
                table.dotted(key)
            );
        }
    }
}

/// What bash completes for `line` with the package's completion of `command`: sources the file,
/// sets COMP_* as readline does, and calls the function `complete -p` names. Words come as
/// arguments, never as script text.
fn bash_completions(command: &str, line: &str) -> Vec<String> {
    const COMPLETE: &str = r#"
source "/usr/share/bash-completion/completions/$1" || exit 1
spec=$(complete -p "$1") || exit 1
[[ $spec =~ -F\ ([^ ]+) ]] || { echo "no completion function in: $spec" >&2; exit 1; }
COMP_LINE=$2 COMP_POINT=${#2}
read -ra COMP_WORDS <<<"$COMP_LINE"
if [[ $COMP_LINE == *' ' ]]; then COMP_WORDS+=(""); fi
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
"${BASH_REMATCH[1]}" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"#;
    let out = run_as(None, Path::new("/bin/bash"), &["-c", COMPLETE, "bash", command, line]).ok();
    out.stdout.lines().map(str::to_string).collect()
}

#[test]
#[ignore = "needs tests/run.sh, which installs the gputokens packages"]
fn bash_completes_the_real_options_and_subcommands() {
    let offered = bash_completions("sbalance", "sbalance --");
    for option in long_options(accountd::cli::sbalance::Args::command()) {
        assert!(offered.contains(&option), "sbalance -- does not offer {option}: {offered:?}");
    }
    assert!(offered.iter().all(|o| o.starts_with("--")), "{offered:?}");

    let offered = bash_completions("accountd", "accountd ");
    for sub in accountd::cli::Cli::command().get_subcommands() {
        // A hidden one (`agent`, kept for units of 0.1.0) is never offered.
        let name = sub.get_name();
        assert_eq!(offered.iter().any(|o| o == name), !sub.is_hide_set(), "accountd offers {name}? {offered:?}");
    }
}

/// The tests run the installed files (tests/run.sh): they must be this build's.
#[test]
#[ignore = "needs tests/run.sh, which installs the gputokens packages"]
fn the_installed_files_are_the_build_under_test() {
    for command in ["accountd", "sbalance"] {
        let installed = run_as(None, &Path::new("/usr/bin").join(command), &["--version"]).ok().stdout;
        let build = run_as(None, &built(command), &["--version"]).ok().stdout;
        assert_eq!(installed, build, "/usr/bin/{command}");
    }
    let plugin_dir = slurm_plugin_dir();
    for (file, so) in
        [("libjob_submit_gputokens.so", "job_submit_gputokens.so"), ("libspank_gputokens.so", "spank_gputokens.so")]
    {
        let installed = std::fs::read(plugin_dir.join(so)).unwrap();
        assert!(
            installed == std::fs::read(bin(file)).unwrap(),
            "{} is not the build's {file}",
            plugin_dir.join(so).display()
        );
    }
}

/// The package carries the documentation its messages point to (journal-check names
/// /usr/share/doc/gputokens/operation.md), and it is the repository's.
#[test]
#[ignore = "needs tests/run.sh, which installs the gputokens packages"]
fn the_documentation_messages_point_to_is_installed() {
    for doc in ["README.md", "docs/install.md", "docs/configuration.md", "docs/operation.md", "docs/workflows.md"] {
        let name = Path::new(doc).file_name().unwrap();
        let installed = Path::new("/usr/share/doc/gputokens").join(name);
        let ours = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(doc)).unwrap();
        let same = std::fs::read_to_string(&installed).is_ok_and(|text| text == ours);
        assert!(same, "{} is missing or not the repository's {doc}", installed.display());
    }
    let operation = std::fs::read_to_string("/usr/share/doc/gputokens/operation.md").unwrap();
    assert!(operation.contains("## Backups and restore"), "journal-check's message names that section");
}
