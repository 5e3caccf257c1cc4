#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match accountd::sbalance::run(accountd::sbalance::Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sbalance: {e}");
            ExitCode::from(e.fault())
        }
    }
}
