#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match accountd::cli::sbalance::run(accountd::cli::sbalance::Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sbalance: {e}");
            ExitCode::from(e.fault())
        }
    }
}
