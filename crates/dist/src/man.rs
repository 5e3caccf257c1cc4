//! Man pages (section 1) of a command and of each of its subcommands, nested ones included.

use std::io;
use std::path::Path;

use clap::Command;
use clap_mangen::Man;

/// Writes `NAME.1` for `cmd` and `NAME-SUB[-SUB].1` for every visible subcommand into `dir`.
pub fn write_pages(cmd: Command, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // `help` is no command of its own to document; every page shows the root's version.
    let source = format!("gputokens {}", cmd.get_version().unwrap_or_default());
    let mut cmd = cmd.disable_help_subcommand(true);
    // Building gives each subcommand its display name (accountd-admin-grant) and bin name
    // (accountd admin grant), which name the page and show in its synopsis.
    cmd.build();
    write_tree(&cmd, &source, dir)
}

fn write_tree(cmd: &Command, source: &str, dir: &Path) -> io::Result<()> {
    Man::new(cmd.clone()).source(source).manual("gputokens").generate_to(dir)?;
    cmd.get_subcommands().filter(|sub| !sub.is_hide_set()).try_for_each(|sub| write_tree(sub, source, dir))
}
