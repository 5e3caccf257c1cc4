//! Man pages (section 1) of a command and of each of its subcommands, nested ones included.

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

fn write_tree(cmd: &Command, page: &Page, dir: &Path) -> io::Result<()> {
    Man::new(cmd.clone()).date(page.date).source(page.source).manual("gputokens").generate_to(dir)?;
    cmd.get_subcommands().filter(|sub| !sub.is_hide_set()).try_for_each(|sub| write_tree(sub, page, dir))
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
        for sub in cli.get_subcommands().map(|s| s.get_name().to_string()) {
            let page = std::fs::read_to_string(dir.join(format!("accountd-{sub}.1"))).unwrap();
            let title = format!(".TH accountd-{sub} 1 2026-11-30 \"gputokens {version}\" gputokens");
            assert!(page.lines().any(|l| l == title), "no '{title}' in accountd-{sub}.1:\n{page}");
        }
        assert!(dir.join("accountd-admin-grant.1").is_file() && dir.join("accountd.1").is_file());
        assert!(!dir.join("accountd-help.1").exists(), "help is no command to document");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
