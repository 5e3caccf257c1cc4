//! Man pages of a command and of each of its subcommands, nested ones included: section 1, and 8 for
//! the daemons (as slurmctld(8)); each with the ENVIRONMENT, EXIT STATUS, FILES and SEE ALSO that
//! clap cannot know.

use std::io;
use std::path::Path;

use clap::Command;
use clap_mangen::Man;

/// A page date, YYYY-MM-DD. One is needed: .TH drops an empty date, and the version and manual
/// name after it would shift into its place.
pub fn parse_date(text: &str) -> Result<String, String> {
    let shaped = text.len() == 10
        && text.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
    match shaped {
        true => Ok(text.to_string()),
        false => Err(format!("'{text}' is not a date YYYY-MM-DD")),
    }
}

/// Writes `NAME.1` for `cmd` and `NAME-SUB[-SUB].1` for every visible subcommand into `dir`.
pub fn write_pages(cmd: Command, date: &str, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // `help` is no command of its own to document; every page shows the root's version.
    let source = format!("gputokens {}", cmd.get_version().unwrap_or_default());
    let mut cmd = cmd.disable_help_subcommand(true);
    // Building gives each subcommand its display name (accountd-admin-grant) and bin name
    // (accountd admin grant), which name the page and show in its synopsis.
    cmd.build();
    write_tree(&cmd, &Page { date, source: &source }, dir)
}

/// What every page's title line (.TH) says besides the page's name.
struct Page<'a> {
    date: &'a str,
    source: &'a str,
}

/// The pages of daemons, which sites start from systemd: section 8.
const DAEMONS: &[&str] = &["accountd-serve", "gputokens-agent"];

/// The section of the page named `name`.
pub fn section_of(name: &str) -> &'static str {
    if DAEMONS.contains(&name) {
        "8"
    } else {
        "1"
    }
}

fn write_tree(cmd: &Command, page: &Page, dir: &Path) -> io::Result<()> {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name()).to_string();
    let man = Man::new(cmd.clone()).section(section_of(&name)).date(page.date).source(page.source).manual("gputokens");
    let mut text = Vec::new();
    man.render(&mut text)?;
    let text = with_our_sections(&String::from_utf8_lossy(&text), &name);
    std::fs::write(dir.join(man.get_filename()), text)?;
    cmd.get_subcommands().filter(|sub| !sub.is_hide_set()).try_for_each(|sub| write_tree(sub, page, dir))
}

/// `page` with ENVIRONMENT, EXIT STATUS, FILES and SEE ALSO put before its VERSION section.
fn with_our_sections(page: &str, name: &str) -> String {
    let sbalance = name == "sbalance";
    let mut ours =
        String::from(".SH ENVIRONMENT\n.TP\nGPUTOKENS_CONF\nThe configuration file when no \\-\\-config is given.\n");
    if !sbalance {
        ours.push_str(
            ".TP\nGPUTOKENS_LOG\nThe log level (error, warn, info, debug) or a filter such as accountd=debug; info when unset.\n\
             .TP\nNO_COLOR\nWhen set and not empty, log lines carry no colour (there is none either when stderr is not a terminal).\n\
             .TP\nTERM\nWhen dumb, log lines carry no colour either.\n",
        );
    }
    ours.push_str(".SH EXIT STATUS\n.TP\n0\nDone.\n");
    if name == "gputokens-agent" {
        ours.push_str(".TP\n1\nNVML or the node failed it; with \\-\\-once, the report did not reach accountd.\n");
        ours.push_str(
            ".TP\n2\nAn invalid configuration, a config or jobs directory others may write, or another agent running.\n",
        );
        ours.push_str(".SH FILES\n.TP\n/etc/slurm/gputokens.toml\nThe configuration, the same as accountd's; see gputokens.toml(5).\n");
        ours.push_str(
            ".TP\n/run/gputokens/jobs\nThe jobs' GPU records spank_gputokens.so writes ([agent] jobs_dir).\n",
        );
        ours.push_str(".SH SEE ALSO\ngputokens.toml(5), accountd-serve(8), slurmd(8)\n");
    } else {
        ours.push_str(".TP\n1\naccountd could not be reached, or an I/O error or a lock held too long stopped it.\n");
        ours.push_str(
            ".TP\n2\nA usage error, an invalid configuration, a refusal (naming who may), or problems found by a check.\n",
        );
        ours.push_str(".SH FILES\n.TP\n/etc/slurm/gputokens.toml\nThe configuration; see gputokens.toml(5).\n");
        if !sbalance {
            ours.push_str(".TP\n/var/lib/gputokens/ledger.sqlite\nThe ledger ([paths] ledger).\n");
        }
        ours.push_str(".TP\n/run/gputokens/accountd.sock\nWhere accountd answers ([paths] socket).\n");
        ours.push_str(".SH SEE ALSO\ngputokens.toml(5), ");
        ours.push_str(if sbalance {
            "accountd(1), sshare(1)\n"
        } else {
            "sbalance(1), accountd-serve(8), gputokens-agent(8), slurm.conf(5)\n"
        });
    }
    match page.find(".SH VERSION") {
        Some(at) => format!("{}{ours}{}", &page[..at], &page[at..]),
        None => format!("{page}{ours}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_checked() {
        assert_eq!(parse_date("2026-11-30"), Ok("2026-11-30".to_string()));
        for bad in ["", "2026-1-30", "2026/11/30", "20261130xx", "2026-11-3x"] {
            assert!(parse_date(bad).is_err(), "{bad}");
        }
    }

    /// One page per command and subcommand, each titled with its own name, the date, the version
    /// and the manual in their places.
    #[test]
    fn every_subcommand_has_its_page() {
        let dir = std::env::temp_dir().join(format!("gputokens-dist-man-{}", std::process::id()));
        let cli = <accountd::cli::Cli as clap::CommandFactory>::command();
        write_pages(cli.clone(), "2026-11-30", &dir).unwrap();
        let version = accountd::version();
        for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()).map(|s| s.get_name().to_string()) {
            let section = section_of(&format!("accountd-{sub}"));
            let page = std::fs::read_to_string(dir.join(format!("accountd-{sub}.{section}"))).unwrap();
            let title = format!(".TH accountd-{sub} {section} 2026-11-30 \"gputokens {version}\" gputokens");
            assert!(page.lines().any(|l| l == title), "no '{title}' in accountd-{sub}.{section}:\n{page}");
            for heading in [".SH ENVIRONMENT", ".SH EXIT STATUS", ".SH FILES", ".SH SEE ALSO"] {
                assert!(page.contains(heading), "accountd-{sub} has no {heading}");
            }
        }
        assert!(dir.join("accountd-serve.8").is_file(), "daemons in 8");
        let agent = <gputokens_agent::cli::Cli as clap::CommandFactory>::command();
        write_pages(agent, "2026-11-30", &dir).unwrap();
        let page = std::fs::read_to_string(dir.join("gputokens-agent.8")).unwrap();
        assert!(page.contains(".SH EXIT STATUS") && page.contains("\\-\\-once"), "{page}");
        assert!(dir.join("accountd-admin-grant.1").is_file() && dir.join("accountd.1").is_file());
        assert!(!dir.join("accountd-help.1").exists(), "help is no command to document");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
