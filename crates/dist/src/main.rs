//! `gputokens-dist`: writes the man pages and shell completions of `accountd` and `sbalance` for
//! packaging/build-debs.sh, from the very clap definitions the two binaries parse with, so the
//! packaged pages and completions cannot drift from the real options. A tool of its own rather than
//! a hidden `accountd` subcommand: the installed binaries carry nothing only packaging needs.
#![forbid(unsafe_code)]

mod completions;
mod config_page;
mod man;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "gputokens-dist", about = "Man pages and shell completions of accountd and sbalance")]
struct Cli {
    #[command(subcommand)]
    command: DistCommand,
}

#[derive(Debug, Subcommand)]
enum DistCommand {
    /// Write accountd.1, sbalance.1, one page per accountd subcommand (accountd-serve.1,
    /// accountd-admin-grant.1, ...) and gputokens.toml.5 into DIR.
    Man {
        dir: PathBuf,
        /// The pages' date, YYYY-MM-DD (build-debs.sh: the last commit's).
        #[arg(long, value_parser = man::parse_date)]
        date: String,
    },
    /// Print the reference of gputokens.toml's keys as docs/configuration.md holds it (the man
    /// page's content, in markdown), or put it in FILE between its markers.
    ConfigReference {
        #[arg(long, value_name = "FILE")]
        write: Option<PathBuf>,
    },
    /// Write bash/NAME, zsh/_NAME and fish/NAME.fish for accountd and sbalance into DIR.
    Completions { dir: PathBuf },
}

/// The commands exactly as the binaries build them: accountd's src/main.rs parses `Cli`,
/// src/bin/sbalance.rs `sbalance::Args`, the agent's `gputokens_agent::cli::Cli` (their names and versions come from the same attributes).
fn shipped_commands() -> [clap::Command; 3] {
    [accountd::cli::Cli::command(), accountd::cli::sbalance::Args::command(), gputokens_agent::cli::Cli::command()]
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        DistCommand::Man { dir, date } => shipped_commands()
            .into_iter()
            .try_for_each(|cmd| man::write_pages(cmd, &date, &dir))
            .and_then(|()| config_page::write_man_page(&dir, &date, env!("CARGO_PKG_VERSION"))),
        DistCommand::ConfigReference { write: Some(file) } => config_page::write_markdown(&file),
        DistCommand::ConfigReference { write: None } => {
            print!("{}", config_page::markdown());
            Ok(())
        }
        DistCommand::Completions { dir } => {
            shipped_commands().into_iter().try_for_each(|cmd| completions::write_scripts(cmd, &dir))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gputokens-dist: {e}");
            ExitCode::FAILURE
        }
    }
}
